//! The write-only fast path: a transaction that only writes (no reads, no return values) commits
//! with one `TransactWriteItems` and no locks, every write conditional on its item not being
//! locked, plus the record written committed.

use tracing::{debug, instrument};

use crate::ddb::{self, Transacted};
use crate::error::{Error, Result};
use crate::item_lock::{self, Observed};
use crate::record::{self, TxState};
use crate::request::{Op, Request};

use super::{CommitStep, State, Transaction};

impl Transaction {
    /// Whether the fast path (or a commit without record) marks this transaction's writes for the
    /// change feed (`Settings::fast_path_stamps`). A table whose schema is not cached counts as streamed.
    pub(super) fn marks_writes(&self, st: &State) -> bool {
        st.items
            .values()
            .any(|e| self.inner.marks_writes_to(&e.request(&st.requests).table))
    }

    /// Nothing recorded or locked, only writes without return values, few enough for one batch;
    /// no delete when the writes are marked for the change feed (a delete leaves nothing to mark).
    pub(super) fn fast_path_fits(&self, st: &State) -> bool {
        self.inner.settings.write_only_fast_path
            && !st.fast_path_failed
            && st.meta.is_none()
            && !st.record_in_doubt
            && st.items.len() < ddb::MAX_TRANSACT_ACTIONS
            && st.items.values().all(|e| {
                e.write.is_some()
                    && e.read.is_none()
                    && e.lock.is_none()
                    && (e.op(&st.requests) != Op::Update
                        || e.request(&st.requests).update.is_some())
            })
            && st
                .items
                .values()
                .map(|e| e.request(&st.requests).encoded_size() * 2)
                .sum::<usize>()
                < ddb::MAX_TRANSACT_BYTES
            && !(st.items.values().any(|e| e.op(&st.requests) == Op::Delete)
                && self.marks_writes(st))
    }

    /// Commits a write-only transaction with one `TransactWriteItems` and no locks: the record,
    /// created committed and finalized, plus every write conditional on its item not being locked
    /// (and on the request's own condition). `None`: it did not commit; fall back to locking.
    #[instrument(level = "debug", name = "commit_write_only", skip_all, fields(tx = %self.id, items = st.items.len()))]
    pub(super) async fn commit_write_only(&self, st: &mut State) -> Result<Option<CommitStep>> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::COMMIT);
        let inner = &self.inner;
        let mark = self.marks_writes(st).then_some(&self.id);
        // Marked: the record names every item written (op, table and key), for the feed.
        let written: Vec<Request> = match mark {
            Some(_) => st
                .items
                .values()
                .map(|e| {
                    let req = e.request(&st.requests);
                    Request {
                        op: req.op,
                        table: req.table.clone(),
                        key: req.key.clone(),
                        item: None,
                        update: None,
                        condition: None,
                        names: None,
                        values: None,
                    }
                })
                .collect(),
            None => Vec::new(),
        };
        let mut writes = vec![record::committed_record_write(
            &inner.tx_table,
            &self.id,
            inner.settings.record_ttl_secs(),
            &written,
        )];
        let mut owners = Vec::new();
        let queues = inner.settings.queues();
        for (k, e) in &st.items {
            let req = e.request(&st.requests);
            writes.push(item_lock::unlocked_write(req, mark, queues));
            owners.push(k.clone());
        }
        // The token makes a repeat after an ambiguous failure safe: it never applies twice.
        let token = Some(self.id.0.clone());
        st.fast_path_sent = true;
        let mut out = ddb::transact_with_token(&inner.client, &writes, token.clone()).await;
        let mut maybe_landed = false;
        for _ in 0..3 {
            match &out {
                Err(Error::DynamoDb {
                    ambiguous: true, ..
                }) => {
                    maybe_landed = true;
                    out = ddb::transact_with_token(&inner.client, &writes, token.clone()).await;
                }
                Err(e) if e.dynamodb_code() == Some("TransactionInProgressException") => {
                    crate::settings::backoff(&inner.settings, 2).await;
                    out = ddb::transact_with_token(&inner.client, &writes, token.clone()).await;
                }
                _ => break,
            }
        }
        // A repeat that failed without landing (never sent) says nothing about an earlier call
        // that may have landed: still ambiguous.
        if let (true, Err(Error::DynamoDb { ambiguous, .. })) = (maybe_landed, &mut out) {
            *ambiguous = true;
        }
        match out {
            Ok(Transacted::Ok) => {
                debug!(tx = %self.id, items = st.items.len(), "committed without locks");
                st.outcome = Some(TxState::Committed);
                Ok(Some(CommitStep::Done))
            }
            Ok(Transacted::Cancelled(reasons)) => {
                let found = reasons[0]
                    .item
                    .as_ref()
                    .map(record::Header::parse)
                    .transpose()?;
                if found.is_some_and(|h| h.state == TxState::Committed) {
                    // An earlier attempt of this very request (an SDK retry after a 5xx) landed.
                    debug!(tx = %self.id, "committed without locks (an earlier attempt landed)");
                    st.outcome = Some(TxState::Committed);
                    return Ok(Some(CommitStep::Done));
                }
                for (i, reason) in reasons.iter().enumerate().skip(1) {
                    if !reason.is_condition_failed() {
                        continue;
                    }
                    let obs = Observed::of(reason.item.as_ref());
                    if obs.owner.is_some() {
                        return Ok(None); // locked by a transaction: resolve it the usual way
                    }
                    if queues && !obs.queue.is_empty() {
                        // It carries a queue: the locking path waits in it, and judges the
                        // request's own condition under the lock.
                        return Ok(None);
                    }
                    let e = &st.items[&owners[i - 1]];
                    let req = e.request(&st.requests);
                    return Err(Error::ConditionFailed {
                        tx_id: self.id.clone(),
                        request_index: e.index(),
                        table: req.table.clone(),
                        key: req.key.clone(),
                        item: obs.visible(),
                    });
                }
                Ok(None)
            }
            // It may have landed (or still land): the record tells. If it is not there, the
            // locking protocol's record creation (conditional on its absence) stops a late landing.
            Err(
                e @ Error::DynamoDb {
                    ambiguous: true, ..
                },
            ) => {
                st.record_in_doubt = true;
                st.decision_in_doubt = true;
                match record::load_header(&inner.client, &inner.tx_table, &self.id).await {
                    Ok(Some(h)) if h.state == TxState::Committed => {
                        st.outcome = Some(TxState::Committed);
                        Ok(Some(CommitStep::Done))
                    }
                    Ok(_) => Ok(None),
                    Err(_) => Err(Error::Undetermined {
                        tx_id: self.id.clone(),
                        source: Box::new(e),
                    }),
                }
            }
            // A rejected batch, a conflict: the locking protocol finds out which request.
            Err(Error::DynamoDb { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
