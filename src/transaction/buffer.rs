//! Buffering and validation: each write is validated at once and buffered (or, with return
//! values, driven now); reads lock their item now. `flush` records the buffered requests in the TX
//! record, and a record changed by another coordinator is merged back in.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use aws_sdk_dynamodb::types::ReturnValue;
use tracing::{debug, instrument};

use crate::error::{Error, Item, Result};
use crate::expr;
use crate::expr::value_eq;
use crate::item_lock::{self, Existence, LockInfo, LockOutcome};
use crate::keys::ItemRef;
use crate::record::{self, Appended, Header, TxState};
use crate::request::{self, Op, Request};
use crate::settings::LockedReads;
use crate::settle::{self, PROTOCOL_ATTEMPTS};

use super::{GetOutput, State, Transaction, WriteOutput};

impl Transaction {
    /// Validates and adds a write; drives it now when return values need it.
    #[instrument(level = "debug", skip_all, fields(tx = %self.id, op = ?req.op, table = %req.table))]
    pub(super) async fn write(
        &self,
        mut req: Request,
        rv: Option<ReturnValue>,
    ) -> Result<WriteOutput> {
        let rv = rv.unwrap_or(ReturnValue::None);
        request::check_return_values(req.op, &rv)?;
        let schema = self.schema(&req.table).await?;
        req.validate(&schema)?;
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        let r = req.item_ref();
        match st.items.get(&r).and_then(|e| e.write) {
            // The caller retries a call that failed after adding this very request (for example
            // after a lost response to the record's creation): drive the same request again.
            Some(w) if st.unfinished.contains(&r) && same_request(&st.requests[w], &req) => {}
            Some(_) => {
                return Err(Error::DuplicateRequest {
                    tx_id: self.id.clone(),
                    table: req.table,
                    key: req.key,
                });
            }
            None => {
                st.requests.push(req);
                let index = st.requests.len() - 1;
                index_request(&mut st, index);
            }
        }
        st.unfinished.insert(r.clone());
        let out = match rv {
            ReturnValue::None => Ok(WriteOutput::default()),
            ReturnValue::AllOld => self.drive_lock(&mut st, &r).await.map(|lock| WriteOutput {
                attributes: lock.before,
            }),
            other => self
                .apply_now(&mut st, &r, Some(other))
                .await
                .map(|attrs| WriteOutput { attributes: attrs }),
        };
        if out.is_ok() {
            st.unfinished.remove(&r);
        }
        out
    }

    /// A locked read.
    #[instrument(level = "debug", skip_all, fields(tx = %self.id, table = %req.table))]
    pub(super) async fn read(
        &self,
        mut req: Request,
        projection: Option<String>,
    ) -> Result<GetOutput> {
        let schema = self.schema(&req.table).await?;
        req.validate(&schema)?;
        let paths = match &projection {
            Some(p) => {
                expr::check_no_reserved_words("ProjectionExpression", p)?;
                Some(expr::parse_projection(p, req.names.as_ref())?)
            }
            None => None,
        };
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        let r = req.item_ref();
        let existing = st.items.get(&r).cloned();
        let item = match existing
            .as_ref()
            .and_then(|e| e.write.map(|w| (e, st.requests[w].op)))
        {
            Some((_, Op::Delete)) => None,
            Some((e, Op::Put)) => {
                let w = e.write.expect("has write");
                st.requests[w].item.clone()
            }
            Some((_, Op::Update)) => {
                self.apply_now(&mut st, &r, Some(ReturnValue::AllNew))
                    .await?;
                st.items[&r].lock.as_ref().and_then(|l| l.current.clone())
            }
            _ => {
                if existing.is_none() {
                    req.names = None;
                    req.values = None;
                    st.requests.push(req);
                    let index = st.requests.len() - 1;
                    index_request(&mut st, index);
                }
                self.lock_read(&mut st, &r).await?.current
            }
        };
        let item = match (item, paths) {
            (Some(i), Some(p)) => Some(expr::project(&i, &p)),
            (i, _) => i,
        };
        Ok(GetOutput { item })
    }

    /// Locks the item of a read, recording its request as `Settings::locked_reads` says: first
    /// (`RecordThenLock`), together with the lock (`RecordWithLock`), or with the record's next
    /// write (`LockThenRecord`: only the lock is sent once the record exists, and a commit whose
    /// unrecorded requests are all held reads records nothing for them). A lock the record does
    /// not name is never released while the transaction is pending; once it is decided, whoever
    /// meets the lock releases it like a late one (docs/PROTOCOL.md "One round trip per locked
    /// read").
    async fn lock_read(&self, st: &mut State, r: &ItemRef) -> Result<LockInfo> {
        if self.may_lock_without_record(st, r) {
            return self.lock_without_record(st, r).await;
        }
        if let Some(lock) = st.items[r].lock.clone()
            && st.unrecorded_lock_sent.is_some()
        {
            // Read again while held without a record: nothing to record yet.
            return Ok(lock);
        }
        if self.may_lock_with_creation(st, r) {
            return self.lock_with_creation(st, r).await;
        }
        match self.inner.settings.locked_reads {
            LockedReads::LockThenRecord if record_known(st) => self.hold_lock(st, r).await,
            LockedReads::RecordWithLock if record_known(st) => self.record_with_lock(st, r).await,
            // The record must exist before any lock that names it: a lock whose record is absent
            // is taken for a vanished transaction's and released.
            _ => self.drive_lock(st, r).await,
        }
    }

    /// A read's record append and its lock, sent together (`LockedReads::RecordWithLock`, once
    /// the record exists). Either may land first: a lock before its append is a lock the pending
    /// record does not name yet, which nobody releases while the transaction is pending; an
    /// append before its lock names an item not yet locked, as recording first does. If the
    /// append finds the transaction decided by someone else, the lock that landed is released
    /// here, like a late lock (conditional on our ownership and on not being applied).
    async fn record_with_lock(&self, st: &mut State, r: &ItemRef) -> Result<LockInfo> {
        if st.items[r].lock.is_some() {
            return self.drive_lock(st, r).await;
        }
        let e = st.items[r].clone();
        let first = self.expected_existence(st, r).await?;
        let order = self.order_of(st, r);
        let (recorded, locked) = tokio::join!(
            self.flush(st),
            // Boxed as in `hold_lock`: the lock loop's future is large.
            Box::pin(self.lock_one(&e.table, &e.key, first, false, order))
        );
        // Below reads it may release: it gave up at the first contention, to take the item in
        // key order (once the read is recorded: the record must name it before its lock).
        if recorded.is_ok()
            && order == super::reorder::Placement::Reorderable
            && matches!(locked, Err(Error::ItemLocked { .. }))
        {
            return self.lock_in_key_order(st, r, first).await;
        }
        if let Ok(l) = &locked {
            st.items.get_mut(r).expect("entry exists").lock = Some(l.clone());
        }
        if let Err(err) = recorded {
            // Decided without this read (or its record is gone, which only a decided transaction's
            // is): the lock is a late lock of ours.
            if locked.is_ok()
                && (st.outcome.is_some() || matches!(err, Error::UnknownOutcome { .. }))
            {
                self.release_late_read_lock(st, r).await?;
            }
            return Err(err);
        }
        locked
    }

    /// Releases the lock this handle holds on `r`'s item for a read its transaction will not
    /// include (conditional on our ownership and on the lock not being applied), and forgets it.
    async fn release_late_read_lock(&self, st: &mut State, r: &ItemRef) -> Result<()> {
        // On a copy: the lock stays known to this handle until its release is answered.
        let mut e = st.items[r].clone();
        settle::release_unapplied_lock(&self.inner, &self.id, &mut e).await?;
        st.items.get_mut(r).expect("entry exists").lock = None;
        Ok(())
    }

    /// Whether a read's lock may go out with the record's creation: `Settings::locked_reads` is
    /// not `RecordThenLock`, the record was never written (no creation of it may have landed) and
    /// the item is not held.
    fn may_lock_with_creation(&self, st: &State, r: &ItemRef) -> bool {
        self.inner.settings.locked_reads != LockedReads::RecordThenLock
            && st.meta.is_none()
            && !st.record_in_doubt
            && st.items.get(r).is_some_and(|e| e.lock.is_none())
    }

    /// The first locked read of a transaction without a record (with
    /// `Settings::locked_reads` other than `RecordThenLock`): the record's creation, which records the read,
    /// and the read's lock go out together, one round trip for both. A contender that meets the
    /// lock before the record exists puts a tombstone under our id before it releases the lock
    /// (`record::put_tombstone`): the creation then fails on it and the read reports the
    /// transaction rolled back. A creation answered later than half a tombstone's life after the
    /// lock went out is not trusted (a tombstone may have come and gone): the item is locked
    /// again, as is an item whose lock attempt met another lock or lost its answer, once the
    /// record exists.
    async fn lock_with_creation(&self, st: &mut State, r: &ItemRef) -> Result<LockInfo> {
        let e = st.items[r].clone();
        let schema = self.schema(&e.table).await?;
        let c = &self.inner.client;
        // The lock carries the ticket the creation records, if the record gets one: whoever meets
        // the lock may judge us by it. With `ticket_at_begin` it is taken first (the creation
        // waits for it anyway); a first attempt without one gets it at its first contention.
        let ticket = match self.ticket_for_record().await? {
            Some(t) => item_lock::LockTicket::Recorded(t),
            None => item_lock::LockTicket::None,
        };
        let sent = tokio::time::Instant::now();
        self.wrote.store(true, Ordering::SeqCst);
        let (recorded, attempt) = tokio::join!(
            self.flush(st),
            item_lock::lock(
                c,
                &e.table,
                &e.key,
                &schema,
                &self.id,
                Existence::Present,
                self.lock_guard(),
                ticket
            )
        );
        if let Err(err) = recorded {
            if let (Ok(LockOutcome::Locked(lock)), None, false) =
                (attempt, st.meta, st.record_in_doubt)
            {
                // The creation surely did not land (a missing table, a refused request) and
                // cannot land later: nobody else can decide this lock; release it.
                st.items.get_mut(r).expect("entry exists").lock = Some(lock);
                self.release_late_read_lock(st, r).await?;
            }
            return Err(err);
        }
        match attempt {
            Ok(LockOutcome::Locked(lock)) if sent.elapsed() < record::KEEP / 2 => {
                // Kept without a lock wait (which counts the locks it asks for otherwise, and
                // tells its manager's waiters who holds the item).
                self.lock_requests.fetch_add(1, Ordering::SeqCst);
                self.inner.notices.holds(self.id.as_str(), r);
                st.items.get_mut(r).expect("entry exists").lock = Some(lock.clone());
                Ok(lock)
            }
            _ => self.hold_lock(st, r).await,
        }
    }

    /// Whether a read may be locked without its request being recorded (`LockThenRecord`) and the
    /// record surely exists.
    fn may_hold_unrecorded_reads(&self, st: &State) -> bool {
        self.inner.settings.locked_reads == LockedReads::LockThenRecord && record_known(st)
    }

    /// True when every request not yet in the record is a read whose item this handle holds: its
    /// lock is released by this handle's commit or rollback, or like a late lock by whoever meets
    /// it once the transaction is decided; recording it would only cost a request.
    pub(super) fn only_held_reads_unrecorded(&self, st: &State) -> bool {
        self.may_hold_unrecorded_reads(st)
            && st.requests[st.recorded..].iter().all(|q| {
                q.op == Op::Get
                    && st
                        .items
                        .get(&q.item_ref())
                        .is_some_and(|e| e.lock.is_some())
            })
    }

    /// Records buffered requests in the TX record.
    #[instrument(level = "debug", name = "record", skip_all, fields(tx = %self.id, new_requests = st.requests.len() - st.recorded))]
    pub(super) async fn flush(&self, st: &mut State) -> Result<()> {
        self.flush_requests(st, false).await
    }

    /// [`flush`](Self::flush), or with `all`, every request, reads this handle holds included
    /// (a hand-off: whoever resumes the transaction must find every lock in its record).
    pub(super) async fn flush_requests(&self, st: &mut State, all: bool) -> Result<()> {
        let _timer = (st.recorded < st.requests.len())
            .then(|| crate::metrics::PhaseTimer::start(crate::metrics::RECORD));
        for _ in 0..PROTOCOL_ATTEMPTS {
            if st.recorded == st.requests.len() || (!all && self.only_held_reads_unrecorded(st)) {
                return Ok(());
            }
            let c = &self.inner.client;
            let table = &self.inner.tx_table;
            let pending = &st.requests[st.recorded..];
            self.wrote.store(true, Ordering::SeqCst);
            let out = match st.meta {
                // An earlier creation of ours may have landed: creating the record again could
                // bring back a transaction another handle has finished since (its record deleted
                // once finalized). Read it instead; if it is absent, end the transaction under a
                // tombstone, not knowing whether another handle committed it.
                None if st.record_in_doubt => {
                    match record::load_header(c, table, &self.id).await? {
                        Some(h) => Appended::Conflict(Some(h)),
                        None => {
                            let ttl = self.inner.settings.record_ttl_secs();
                            match record::put_tombstone(c, table, &self.id, ttl, None).await? {
                                record::Tombstoned::Exists(h) => Appended::Conflict(Some(h)),
                                record::Tombstoned::DeciderNotPending
                                | record::Tombstoned::Cancelled => {
                                    unreachable!("a tombstone without decider is one PutItem")
                                }
                                record::Tombstoned::Put => {
                                    self.release_own_locks(st).await?;
                                    return Err(Error::UnknownOutcome {
                                        tx_id: self.id.clone(),
                                    });
                                }
                            }
                        }
                    }
                }
                None => {
                    let ticket = self.ticket_for_record().await?;
                    // A creation that may land leaves the record in doubt (a tombstone it meets
                    // means a lock of ours was released while we had no record: rolled back).
                    st.record_in_doubt = true;
                    let out = match record::create(c, table, &self.id, pending, ticket).await {
                        Ok(out) => out,
                        Err(e) => {
                            st.record_in_doubt = matches!(
                                e,
                                Error::DynamoDb {
                                    ambiguous: true,
                                    ..
                                }
                            );
                            return Err(e);
                        }
                    };
                    if let (Some(t), Appended::Ok(_)) = (ticket, &out) {
                        let _ = self.ticket_recorded.set(t);
                    }
                    out
                }
                Some(meta) => {
                    st.record_in_doubt = true;
                    record::append(c, table, &self.id, meta, pending).await?
                }
            };
            match out {
                Appended::Ok(meta) => {
                    debug!(tx = %self.id, version = meta.version, requests = st.requests.len(), "recorded requests");
                    st.meta = Some(meta);
                    st.recorded = st.requests.len();
                    st.record_in_doubt = false;
                    // Created now: a lock taken without a record is trusted, or not.
                    return self.check_unrecorded_lock(st).await;
                }
                Appended::Conflict(header) => self.absorb_conflict(st, header).await?,
            }
        }
        Err(Error::invariant(format!(
            "could not record requests of {}: the record keeps changing",
            self.id
        )))
    }

    /// The record is not where this coordinator thought: learn what happened. Returns Ok when the
    /// transaction is still pending (with the record's requests merged in), else the outcome error.
    pub(super) async fn absorb_conflict(
        &self,
        st: &mut State,
        header: Option<Header>,
    ) -> Result<()> {
        let Some(h) = header else {
            return if st.meta.is_none() {
                Err(Error::invariant(format!(
                    "the record of {} could not be created",
                    self.id
                )))
            } else {
                // The record is gone: only locks this handle took late can remain; release them.
                self.release_own_locks(st).await?;
                Err(Error::UnknownOutcome {
                    tx_id: self.id.clone(),
                })
            };
        };
        match h.state {
            TxState::Pending => self.merge_record(st).await,
            TxState::RolledBack => {
                self.finish_decided(st, TxState::RolledBack).await?;
                Err(Error::RolledBack {
                    tx_id: self.id.clone(),
                })
            }
            TxState::Committed => {
                // Requests of ours the decision did not include were never applied: saying
                // "committed" would tell the caller they were.
                let unrecorded = self.unrecorded_in_decided(st).await?;
                self.finish_decided(st, TxState::Committed).await?;
                if unrecorded > 0 {
                    return Err(Error::CommittedWithout {
                        tx_id: self.id.clone(),
                        unrecorded,
                    });
                }
                Err(Error::AlreadyCommitted {
                    tx_id: self.id.clone(),
                })
            }
        }
    }

    /// How many of this handle's requests not known to be recorded are missing from the record (read
    /// now; an earlier write of it whose answer was lost may have recorded some of them).
    async fn unrecorded_in_decided(&self, st: &State) -> Result<usize> {
        if st.requests.len() == st.recorded {
            return Ok(0);
        }
        let rec = record::load(&self.inner.client, &self.inner.tx_table, &self.id).await?;
        let in_record = rec.map(|r| r.requests).unwrap_or_default();
        Ok(st.requests[st.recorded..]
            .iter()
            .filter(|r| !in_record.iter().any(|x| same_request(x, r)))
            .count())
    }

    /// Another coordinator appended requests: adopt the record's list, keep ours that are not in it.
    pub(super) async fn merge_record(&self, st: &mut State) -> Result<()> {
        let rec = record::load(&self.inner.client, &self.inner.tx_table, &self.id)
            .await?
            .ok_or_else(|| Error::UnknownOutcome {
                tx_id: self.id.clone(),
            })?;
        let ours: Vec<Request> = st.requests[st.recorded..].to_vec();
        let locks: HashMap<ItemRef, LockInfo> = st
            .items
            .iter()
            .filter_map(|(k, e)| e.lock.clone().map(|l| (k.clone(), l)))
            .collect();
        st.requests.clear();
        st.items.clear();
        st.meta = Some(rec.header.meta());
        st.recorded = rec.requests.len();
        for r in rec.requests {
            st.requests.push(r);
            let i = st.requests.len() - 1;
            index_request(st, i);
        }
        // A write of the record whose outcome this handle did not learn (a lost response, a chunked
        // append cut short) may have recorded some of our requests: those are ours already.
        let in_doubt = std::mem::take(&mut st.record_in_doubt);
        for r in ours {
            let recorded = st
                .items
                .get(&r.item_ref())
                .and_then(|e| if r.op.is_write() { e.write } else { e.read });
            if in_doubt && recorded.is_some_and(|i| same_request(&st.requests[i], &r)) {
                continue;
            }
            let dup = st
                .items
                .get(&r.item_ref())
                .is_some_and(|e| e.write.is_some() && r.op.is_write());
            if dup {
                return Err(Error::DuplicateRequest {
                    tx_id: self.id.clone(),
                    table: r.table,
                    key: r.key,
                });
            }
            st.requests.push(r);
            let i = st.requests.len() - 1;
            index_request(st, i);
        }
        for (k, l) in locks {
            if let Some(e) = st.items.get_mut(&k) {
                e.lock = Some(l);
            }
        }
        Ok(())
    }
}

/// Whether this handle knows its record exists and what it holds (no write of it in doubt).
fn record_known(st: &State) -> bool {
    st.meta.is_some() && !st.record_in_doubt
}

pub(super) fn index_request(st: &mut State, i: usize) {
    settle::index(&mut st.items, &st.requests, i);
}

/// True when two requests are the same request (the record's copy of a request compares equal to
/// the original: numbers by value, since DynamoDB returns them canonicalised, sets in any order).
pub(super) fn same_request(a: &Request, b: &Request) -> bool {
    let same_map = |x: &Option<Item>, y: &Option<Item>| match (x, y) {
        (Some(x), Some(y)) => same_item(x, y),
        (None, None) => true,
        _ => false,
    };
    a.op == b.op
        && a.table == b.table
        && same_item(&a.key, &b.key)
        && same_map(&a.item, &b.item)
        && a.update == b.update
        && a.condition == b.condition
        && a.names == b.names
        && same_map(&a.values, &b.values)
}

/// Items equal as DynamoDB compares values (numbers by value, sets in any order).
fn same_item(a: &Item, b: &Item) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| value_eq(v, w)))
}

#[cfg(test)]
mod same_request_tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;

    #[test]
    fn numbers_compare_by_value_and_sets_in_any_order() {
        let n = |s: &str| AttributeValue::N(s.into());
        for (a, b) in [
            ("1.50", "1.5"),
            ("0010", "10"),
            ("100", "1E2"),
            ("-0.0", "0"),
            ("1.5e-3", "0.0015"),
        ] {
            assert!(value_eq(&n(a), &n(b)), "{a} = {b}");
        }
        for (a, b) in [("1.5", "15"), ("-1", "1"), ("10", "1")] {
            assert!(!value_eq(&n(a), &n(b)), "{a} != {b}");
        }
        let ns = |v: &[&str]| AttributeValue::Ns(v.iter().map(|s| s.to_string()).collect());
        assert!(value_eq(&ns(&["2.0", "1"]), &ns(&["1", "2"])));
        let ss = |v: &[&str]| AttributeValue::Ss(v.iter().map(|s| s.to_string()).collect());
        assert!(value_eq(&ss(&["b", "a"]), &ss(&["a", "b"])));
        assert!(!value_eq(&ss(&["a"]), &ss(&["a", "b"])));
        let m = |v: &str| AttributeValue::M(HashMap::from([("x".to_string(), n(v))]));
        assert!(value_eq(
            &AttributeValue::L(vec![m("1.0")]),
            &AttributeValue::L(vec![m("1")])
        ));
    }
}
