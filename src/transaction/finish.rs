//! Rollback and completion of this handle's transaction: deciding rollback conditional on the
//! record's version, and settling a decided transaction through [`settle`](crate::settle) (the
//! logic every coordinator shares), with this handle's unrecorded requests and late locks.

use tracing::{instrument, warn};

use crate::error::{Error, Result};
use crate::record::{self, Flipped, TxState};
use crate::settle::{self, PROTOCOL_ATTEMPTS};

use super::{SETTLE_ATTEMPTS, State, Transaction};

impl Transaction {
    /// Rolls back (state already locked).
    #[instrument(level = "debug", name = "rollback", skip_all, fields(tx = %self.id))]
    pub(super) async fn rollback_locked(&self, st: &mut State) -> Result<()> {
        match st.outcome {
            Some(TxState::RolledBack) => return self.finish_decided(st, TxState::RolledBack).await,
            Some(TxState::Committed) => {
                self.finish_decided(st, TxState::Committed).await?;
                return Err(Error::AlreadyCommitted {
                    tx_id: self.id.clone(),
                });
            }
            _ => {}
        }
        if st.meta.is_none() && !st.record_in_doubt {
            // No record was ever written: a lock this handle holds (taken without a record,
            // `Settings::record_on_demand`) is its own to release, marked for the change feed
            // (no record will ever say what became of it).
            settle::release_without_record(&self.inner, &self.id, &mut st.items).await?;
            st.unrecorded_lock_sent = None;
        }
        // Buffered requests never touched an item: forget them.
        st.requests.truncate(st.recorded);
        st.items.retain(|_, e| {
            e.write.is_none_or(|w| w < st.recorded) || e.read.is_some_and(|r| r < st.recorded)
        });
        for e in st.items.values_mut() {
            if e.write.is_some_and(|w| w >= st.recorded) {
                e.write = None;
            }
        }
        for _ in 0..PROTOCOL_ATTEMPTS {
            let c = &self.inner.client;
            let Some(meta) = st.meta else {
                if st.record_in_doubt {
                    // Our record's creation may have landed (or still land): write the record as
                    // rolled back unless it exists, so that no pending record is left behind.
                    let found = record::create_finished(
                        c,
                        &self.inner.tx_table,
                        &self.id,
                        TxState::RolledBack,
                        self.inner.settings.record_ttl_secs(),
                    )
                    .await?;
                    if found.is_some() {
                        // It exists: roll back what it holds.
                        self.merge_record(st).await?;
                        continue;
                    }
                    st.record_in_doubt = false;
                }
                st.outcome = Some(TxState::RolledBack);
                return Ok(()); // nothing was ever recorded
            };
            match record::decide(
                c,
                &self.inner.tx_table,
                &self.id,
                meta.version,
                TxState::RolledBack,
                meta.gated,
            )
            .await?
            {
                Flipped::Ok => {
                    crate::metrics::rolled_back(
                        st.rollback_cause.unwrap_or(crate::metrics::REQUESTED),
                    );
                    st.outcome = Some(TxState::RolledBack);
                    return self.complete(st, TxState::RolledBack, false).await;
                }
                Flipped::Failed(None) => {
                    return Err(Error::UnknownOutcome {
                        tx_id: self.id.clone(),
                    });
                }
                Flipped::Failed(Some(h)) => match h.state {
                    TxState::RolledBack => {
                        return self.finish_decided(st, TxState::RolledBack).await;
                    }
                    TxState::Committed => {
                        self.finish_decided(st, TxState::Committed).await?;
                        return Err(Error::AlreadyCommitted {
                            tx_id: self.id.clone(),
                        });
                    }
                    TxState::Pending => self.merge_record(st).await?,
                },
            }
        }
        Err(Error::invariant(format!(
            "rollback of {} kept meeting concurrent changes",
            self.id
        )))
    }

    /// Drives a transaction found decided to completion (unless finalized), with the record's requests.
    pub(super) async fn finish_decided(&self, st: &mut State, decided: TxState) -> Result<()> {
        st.outcome = Some(decided);
        let c = &self.inner.client;
        let header = record::load_header(c, &self.inner.tx_table, &self.id).await?;
        let Some(h) = header else {
            // The record is gone: nobody needs our locks; release any this handle took late.
            return self.release_own_locks(st).await;
        };
        // A finalized record needs nothing, unless this handle locked items after the decision.
        if h.finalized && st.items.values().all(|e| e.lock.is_none()) {
            return Ok(());
        }
        if st.meta.map(|m| m.version) != Some(h.version) {
            self.merge_record(st).await?;
            st.outcome = Some(decided);
        }
        self.complete(st, decided, false).await
    }

    /// Someone committed this transaction: complete it (unlock every item, finalize the record).
    /// Errors only when completion keeps failing; see [`Transaction::settle_committed`].
    pub(super) async fn finish_committed(&self, st: &mut State) -> Result<()> {
        self.settle_committed(st, false).await
    }

    /// Completes a committed transaction, retrying a bounded number of times (a lost answer, a
    /// throttled request or a conflict must not leave locks or an unfinalized record behind an
    /// `Ok`): each retry reads the record and the items again, so writes that landed without an
    /// answer are recognised. `trust_memory` as for [`Transaction::complete`], first attempt only.
    /// When every attempt fails, the transaction is committed but not finished:
    /// [`Error::AlreadyCommitted`] (its locks are seen through by readers and released by the
    /// next coordinator that meets them, or by the sweeper).
    pub(super) async fn settle_committed(&self, st: &mut State, trust_memory: bool) -> Result<()> {
        st.outcome = Some(TxState::Committed);
        for attempt in 0..SETTLE_ATTEMPTS {
            let r = if attempt == 0 && trust_memory {
                self.complete(st, TxState::Committed, true).await
            } else {
                self.finish_decided(st, TxState::Committed).await
            };
            match r {
                Ok(()) => return Ok(()),
                Err(e) => {
                    warn!(tx = %self.id, attempt, error = %e, "committed, but completing failed; retrying");
                    crate::settings::backoff(&self.inner.settings, attempt.min(3) as u32).await;
                }
            }
        }
        Err(Error::AlreadyCommitted {
            tx_id: self.id.clone(),
        })
    }

    /// Settles every item of this decided transaction and finalizes the record (see
    /// [`settle::complete`]).
    pub(super) async fn complete(
        &self,
        st: &mut State,
        decided: TxState,
        trust_memory: bool,
    ) -> Result<()> {
        let (items, requests) = (&mut st.items, &st.requests);
        settle::complete(
            &self.inner,
            &self.id,
            items,
            requests,
            decided,
            trust_memory,
        )
        .await
    }

    /// Releases the locks this handle holds whose write was never applied (after the record
    /// vanished: only locks taken late can remain).
    pub(super) async fn release_own_locks(&self, st: &mut State) -> Result<()> {
        settle::release_unapplied_locks(&self.inner, &self.id, &mut st.items).await
    }
}
