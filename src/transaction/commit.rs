//! The commit driver shared by every commit path: the fast path when it fits, else record, lock and
//! commit in one request or in phases; failures of a batch's items or of the record's condition;
//! and the resolution of a commit whose decisive request may have landed.

use std::sync::atomic::Ordering;

use tracing::warn;

use crate::ddb::{self, Write};
use crate::error::{Error, Item, Result};
use crate::item_lock::{LockInfo, Observed};
use crate::keys::ItemRef;
use crate::record::{self, TxState};
use crate::request;
use crate::settle::{Entry, PROTOCOL_ATTEMPTS, cancelled_error};

use super::{AMBIGUOUS_COMMITS, CommitStep, State, Transaction};

impl Transaction {
    pub(super) async fn commit_inner(&self) -> Result<()> {
        let mut st = self.state.lock().await;
        if self.finished.load(Ordering::SeqCst) {
            return Err(Error::TransactionFinished {
                tx_id: self.id.clone(),
            });
        }
        match st.outcome {
            Some(TxState::Committed) => {
                self.finish_committed(&mut st).await?;
                return Ok(());
            }
            Some(TxState::RolledBack) => {
                self.finish_decided(&mut st, TxState::RolledBack).await?;
                return Err(self.rolled_back());
            }
            _ => {}
        }
        if !st.released.is_empty() || st.restart {
            // A read released to take an item in key order was never taken back and checked, or
            // was found changed (and `run` did not run the work again).
            st.rollback_cause = Some(crate::metrics::READ_CHANGED);
            self.rollback_locked(&mut st).await?;
            st.released.clear();
            return Err(self.rolled_back());
        }
        match self.commit_attempts(&mut st).await {
            // Our fast-path request created the record committed after all (the locking
            // protocol's record creation found it).
            Err(Error::AlreadyCommitted { .. }) if st.fast_path_sent && st.meta.is_none() => {
                crate::metrics::committed(crate::metrics::FAST_PATH);
                Ok(())
            }
            Err(e) if st.decision_in_doubt && !is_outcome(&e) => {
                self.resolve_in_doubt_commit(&mut st, e).await
            }
            r => r,
        }
    }

    /// A decisive request of this commit may have landed, and the commit gave up with `cause`
    /// (not an outcome): read the record. Committed → `Ok`; rolled back → `RolledBack`; still
    /// pending (or never created) → roll back, conditional on the version, so that no commit
    /// request still in flight can land later, and report `RolledBack` (or `Ok` if the commit won
    /// the race). If even that fails: `Undetermined`.
    pub(super) async fn resolve_in_doubt_commit(&self, st: &mut State, cause: Error) -> Result<()> {
        warn!(tx = %self.id, error = %cause, "commit gave up after a commit request may have landed; resolving");
        crate::metrics::commit_in_doubt();
        st.rollback_cause = Some(crate::metrics::IN_DOUBT);
        let undetermined = |cause: Error| Error::Undetermined {
            tx_id: self.id.clone(),
            source: Box::new(cause),
        };
        let header =
            match record::load_header(&self.inner.client, &self.inner.tx_table, &self.id).await {
                Ok(h) => h,
                Err(_) => return Err(undetermined(cause)),
            };
        match header.map(|h| h.state) {
            Some(TxState::Committed) => self.finish_committed(st).await,
            Some(TxState::RolledBack) => {
                if let Err(e) = self.finish_decided(st, TxState::RolledBack).await {
                    warn!(tx = %self.id, error = %e, "rolled back, but settling the items failed; they are settled later");
                }
                Err(Error::RolledBack {
                    tx_id: self.id.clone(),
                })
            }
            None if st.meta.is_some() => Err(Error::UnknownOutcome {
                tx_id: self.id.clone(),
            }),
            _ => match self.rollback_locked(st).await {
                Ok(()) => Err(Error::RolledBack {
                    tx_id: self.id.clone(),
                }),
                Err(e) => match st.outcome {
                    // Decided; only settling the items failed (they are settled later).
                    Some(TxState::Committed) => Ok(()),
                    Some(TxState::RolledBack) => Err(Error::RolledBack {
                        tx_id: self.id.clone(),
                    }),
                    _ if matches!(e, Error::UnknownOutcome { .. }) => Err(e),
                    _ => Err(undetermined(cause)),
                },
            },
        }
    }

    /// The commit loop: fast path, else record, lock, and commit in one request or in phases.
    pub(super) async fn commit_attempts(&self, st: &mut State) -> Result<()> {
        for _ in 0..PROTOCOL_ATTEMPTS {
            if st.requests.is_empty() && st.meta.is_none() && !st.record_in_doubt {
                return Ok(()); // nothing was ever written
            }
            if let Some((write, k)) = self.write_without_record(st) {
                self.commit_without_record(st, write, &k).await?;
                crate::metrics::committed(crate::metrics::WITHOUT_RECORD);
                return Ok(());
            }
            if st.unrecorded_lock_sent.is_some() && st.meta.is_none() {
                // More than one write on the item read without a record: record first (every
                // other path counts on a record, and on its locks being named).
                self.flush(st).await?;
            }
            if self.fast_path_fits(st) {
                match self.commit_write_only(st).await? {
                    Some(CommitStep::Done) => {
                        crate::metrics::committed(crate::metrics::FAST_PATH);
                        return Ok(());
                    }
                    // An item is locked (or the batch was refused): use the locking protocol.
                    _ => st.fast_path_failed = true,
                }
            }
            if self.inner.settings.batch_locks {
                self.lock_batched(st).await?;
            }
            // Requests on items this handle already holds can be recorded by the one-request
            // commit itself, one round trip fewer; otherwise the record names them first.
            let fold = self.append_folds_into_commit(st);
            if !fold {
                self.flush(st).await?;
            }
            if let Err(e) = self.lock_all(st).await {
                if matches!(e, Error::InvalidRequest { .. }) {
                    // An item with no room for a lock: leave nothing pending.
                    st.rollback_cause = Some(crate::metrics::INVALID_REQUEST);
                    let _ = self.rollback_locked(st).await;
                }
                return Err(e);
            }
            let one_shot = self.one_shot_fits(st);
            let step = if one_shot {
                self.commit_one_shot(st).await?
            } else {
                self.commit_phased(st).await?
            };
            match step {
                CommitStep::Done if one_shot => {
                    crate::metrics::committed(crate::metrics::ONE_REQUEST);
                    return Ok(());
                }
                CommitStep::Done => {
                    crate::metrics::committed(crate::metrics::PHASED);
                    return Ok(());
                }
                CommitStep::Again => crate::metrics::retry(crate::metrics::COMMIT_ATTEMPT),
            }
        }
        // Still throttled (or in conflict) after every attempt: a retryable error.
        Err(st.transient.take().unwrap_or_else(|| {
            Error::invariant(format!(
                "commit of {} kept meeting concurrent changes",
                self.id
            ))
        }))
    }

    /// The record's condition failed inside a batch: find out why.
    pub(super) async fn header_failed(
        &self,
        st: &mut State,
        reason: &ddb::Reason,
    ) -> Result<CommitStep> {
        if reason.is_transient() {
            st.transient = Some(cancelled_error(reason));
            crate::settings::backoff(&self.inner.settings, 1).await;
            return Ok(CommitStep::Again);
        }
        if !reason.is_condition_failed() {
            return Err(cancelled_error(reason));
        }
        let header = reason
            .item
            .as_ref()
            .map(record::Header::parse_live)
            .transpose()?
            .flatten();
        self.header_found(st, header).await
    }

    /// The record is not pending at our version (a batch's check of it failed): `header` as
    /// found. Committed with our requests: finish; otherwise learn what happened and go again.
    pub(super) async fn header_found(
        &self,
        st: &mut State,
        header: Option<record::Header>,
    ) -> Result<CommitStep> {
        match header.as_ref().map(|h| h.state) {
            Some(TxState::Committed) if self.committed_with_ours(st, header.as_ref()) => {
                self.finish_committed(st).await?;
                Ok(CommitStep::Done)
            }
            _ => {
                self.absorb_conflict(st, header).await?;
                Ok(CommitStep::Again)
            }
        }
    }

    /// A committed record holds every request of this handle: they were recorded before, or a
    /// one-request commit of ours that folded them in is the write that committed it (its nonce).
    /// Otherwise another handle committed the transaction without them.
    pub(super) fn committed_with_ours(
        &self,
        st: &mut State,
        header: Option<&record::Header>,
    ) -> bool {
        if st.recorded == st.requests.len() || st.fold_nonces.is_empty() {
            return true;
        }
        let ours = header
            .and_then(|h| h.nonce.as_deref())
            .is_some_and(|n| st.fold_nonces.iter().any(|f| f == n));
        if ours {
            st.recorded = st.requests.len();
        }
        ours
    }

    /// Some item actions of a batch failed: learn what the items look like and decide.
    pub(super) async fn items_failed(
        &self,
        st: &mut State,
        writes: &[Write],
        owners: &[Option<ItemRef>],
        reasons: &[ddb::Reason],
        offset: usize,
    ) -> Result<CommitStep> {
        for (i, reason) in reasons.iter().enumerate().skip(offset) {
            if reason.is_ok() {
                continue;
            }
            let Some(k) = owners[i - offset].clone() else {
                continue;
            };
            let e = st.items[&k].clone();
            let is_check = matches!(writes[i].kind, ddb::WriteKind::Check { .. });
            match reason.code.as_str() {
                "ConditionalCheckFailed" => {
                    let obs = Observed::of(reason.item.as_ref());
                    let expected_applied = e.lock.as_ref().is_some_and(|l| l.applied);
                    let is_phantom = is_check && writes[i].kind_key() != Some(&e.key);
                    let ours = match &e.lock {
                        Some(l) => obs.holds(&self.id, l),
                        None => obs.locked_by(&self.id),
                    };
                    if !is_phantom && !ours {
                        // Our lock is gone: someone decided us, or it was broken. Re-check and retry.
                        let header =
                            record::load_header(&self.inner.client, &self.inner.tx_table, &self.id)
                                .await?;
                        self.absorb_conflict(st, header).await?;
                        st.items.get_mut(&k).expect("entry").lock = None;
                        return Ok(CommitStep::Again);
                    }
                    if !is_phantom && obs.applied != expected_applied {
                        // Another coordinator of this transaction moved the item on; adopt its state.
                        st.items.get_mut(&k).expect("entry").lock =
                            Some(LockInfo::from_observed(&obs));
                        return Ok(CommitStep::Again);
                    }
                    // The request's own condition is false.
                    let item = if is_phantom { None } else { obs.visible() };
                    return Err(self.roll_back_condition_failed(st, &e, item).await?);
                }
                "ValidationError" => {
                    let message = reason.message.clone().unwrap_or_default();
                    return Err(self.roll_back_rejected(st, &e, message).await?);
                }
                _ if reason.is_transient() => {
                    // Throttled or in conflict: back off and try again (bounded).
                    st.transient = Some(cancelled_error(reason));
                    crate::settings::backoff(&self.inner.settings, 1).await;
                    return Ok(CommitStep::Again);
                }
                _ => return Err(cancelled_error(reason)),
            }
        }
        // Cancelled with no failing item we own (a phantom check with no owner, or a conflict).
        crate::settings::backoff(&self.inner.settings, 1).await;
        Ok(CommitStep::Again)
    }

    /// Rolls back because the request of `e` (an entry of this handle) has a false condition, and
    /// returns the error that says so, with the item as the failed condition found it.
    pub(super) async fn roll_back_condition_failed(
        &self,
        st: &mut State,
        e: &Entry,
        item: Option<Item>,
    ) -> Result<Error> {
        // Taken before the rollback, which forgets requests never recorded.
        let req = e.request(&st.requests).clone();
        st.rollback_cause = Some(crate::metrics::CONDITION_FAILED);
        self.rollback_locked(st).await?;
        Ok(Error::ConditionFailed {
            tx_id: self.id.clone(),
            request_index: e.index(),
            table: req.table,
            key: req.key,
            item,
        })
    }

    /// Rolls back because DynamoDB rejected the request of `e` with `message`, and returns the
    /// error that says so.
    pub(super) async fn roll_back_rejected(
        &self,
        st: &mut State,
        e: &Entry,
        message: String,
    ) -> Result<Error> {
        let table = e.request(&st.requests).table.clone();
        st.rollback_cause = Some(crate::metrics::REQUEST_REJECTED);
        self.rollback_locked(st).await?;
        Ok(Error::RequestRejected {
            tx_id: self.id.clone(),
            request_index: e.index(),
            table,
            message: request::explain_rejection(message),
        })
    }

    /// The decisive write failed (ambiguously, or after the SDK retried an attempt that may have
    /// landed): read the record to learn the outcome. Still pending: try again a few times, then
    /// give up with `cause`, which `commit` resolves.
    pub(super) async fn learn_after_ambiguous_commit(
        &self,
        st: &mut State,
        cause: Error,
    ) -> Result<CommitStep> {
        warn!(tx = %self.id, error = %cause, "commit request failed ambiguously; reading the record");
        st.decision_in_doubt = true;
        let header =
            match record::load_header(&self.inner.client, &self.inner.tx_table, &self.id).await {
                Ok(h) => h,
                Err(_) => {
                    return Err(Error::Undetermined {
                        tx_id: self.id.clone(),
                        source: Box::new(cause),
                    });
                }
            };
        match header.as_ref().map(|h| h.state) {
            Some(TxState::Committed) if self.committed_with_ours(st, header.as_ref()) => {
                self.finish_committed(st).await?;
                Ok(CommitStep::Done)
            }
            Some(TxState::Pending) => {
                st.ambiguous_commits += 1;
                if st.ambiguous_commits >= AMBIGUOUS_COMMITS {
                    return Err(cause);
                }
                if cause.is_retryable() {
                    st.transient = Some(cause);
                }
                crate::settings::backoff(&self.inner.settings, st.ambiguous_commits).await;
                Ok(CommitStep::Again)
            }
            _ => {
                self.absorb_conflict(st, header).await?;
                Ok(CommitStep::Again)
            }
        }
    }
}

/// Errors that are an outcome of the commit (or say it cannot be known), not a failure to reach one.
pub(super) fn is_outcome(e: &Error) -> bool {
    matches!(
        e,
        Error::RolledBack { .. }
            | Error::AlreadyCommitted { .. }
            | Error::CommittedWithout { .. }
            | Error::ConditionFailed { .. }
            | Error::RequestRejected { .. }
            | Error::UnknownOutcome { .. }
            | Error::Undetermined { .. }
    )
}

/// DynamoDB refused a request as invalid (e.g. a type mismatch in an update expression).
pub(super) fn is_rejection(e: &Error) -> bool {
    e.dynamodb_code() == Some("ValidationException")
}
