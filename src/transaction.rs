//! [`Transaction`]: the coordinator of one transaction.
//!
//! Writes without `ReturnValues` are validated at once and buffered; `commit` records them all in the
//! TX record with one write, locks every item concurrently, and then either commits everything with one
//! `TransactWriteItems` (the record's flip to committed, every write, every unlock) or, for larger
//! transactions, applies in batches conditional on the record being pending, flips the record with one
//! write conditional on its version, and unlocks. Reads (`get_item`) and writes that return values
//! drive their item at once. See `docs/PROTOCOL.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use futures::StreamExt;
use tokio::sync::OnceCell;
use tracing::{debug, instrument, warn};

use crate::TxId;
use crate::ddb::{self, Transacted, Write, Written};
use crate::error::{Error, Item, Result};
use crate::expr;
use crate::isolation::cond::value_eq;
use crate::item_lock::{self, ImagePlace, LockInfo, LockOutcome, Observed, Stage};
use crate::keys::{ItemRef, KeySchema};
use crate::record::{self, Appended, Flipped, Header, RecordMeta, TxState};
use crate::request::{self, Op, Request};
use crate::settings::Inner;
use crate::settle::{
    self, Entry, PROTOCOL_ATTEMPTS, cancelled_error, group_by_owner, group_with_owners,
};

/// Bounded retries of completing a committed transaction before `commit` reports it committed but
/// not finished.
const SETTLE_ATTEMPTS: usize = 4;
/// Commit attempts that may find the record still pending after a decisive request failed before
/// `commit` gives up and resolves the outcome by rolling back.
const AMBIGUOUS_COMMITS: u32 = 3;

/// One transaction. Create with [`TransactionManager::begin`] or [`TransactionManager::resume`].
///
/// Methods take `&self` so a transaction can be shared by the closure of
/// [`TransactionManager::run`]; calls are serialised internally. [`commit`](Transaction::commit) and
/// [`rollback`](Transaction::rollback) consume it.
///
/// # Drop
/// What dropping a handle does depends on what *this handle* did, never on what others did with
/// the same transaction:
///
/// - **Finished** ([`commit`](Transaction::commit), [`rollback`](Transaction::rollback),
///   [`abandon`](Transaction::abandon) or [`delete`](Transaction::delete) was called, whatever it
///   returned): nothing.
/// - **Sent nothing** (a [`begin`](TransactionManager::begin) handle whose writes are only buffered,
///   or a [`resume`](TransactionManager::resume) handle used only to inspect): nothing. Buffered
///   requests are forgotten; a transaction another coordinator is driving goes on undisturbed.
/// - **Sent a write for the transaction** (created or appended to its record, or sent a lock
///   request — a read with [`get_item`](Transaction::get_item), a write with `ReturnValues`, or a
///   commit future dropped midway), and not finished: with
///   [`Settings::rollback_on_drop`](crate::Settings::rollback_on_drop) (the default) and a Tokio
///   runtime running, a background task rolls the transaction back
///   ([`TransactionManager::rollback_transaction`]); if it committed meanwhile, it stays committed.
///   Without the setting or without a runtime it is left pending, and any coordinator that meets its
///   locks, or the sweeper, rolls it back. Its locks never outlive that.
///
/// Use [`abandon`](Transaction::abandon) to leave a transaction on purpose.
///
/// ```no_run
/// # async fn demo(manager: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
/// use aws_sdk_dynamodb::types::AttributeValue;
/// let tx = manager.begin();
/// tx.update_item()
///     .table_name("Accounts")
///     .key("Id", AttributeValue::S("alice".into()))
///     .update_expression("SET balance = balance - :amt")
///     .condition_expression("balance >= :amt")
///     .expression_attribute_values(":amt", AttributeValue::N("10".into()))
///     .send()
///     .await?;
/// tx.update_item()
///     .table_name("Accounts")
///     .key("Id", AttributeValue::S("bob".into()))
///     .update_expression("SET balance = balance + :amt")
///     .expression_attribute_values(":amt", AttributeValue::N("10".into()))
///     .send()
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
///
/// # After commit or rollback
/// [`commit`](Transaction::commit), [`rollback`](Transaction::rollback),
/// [`abandon`](Transaction::abandon) and [`delete`](Transaction::delete) take the transaction by
/// value, so using it afterwards does not compile:
///
/// ```compile_fail,E0382
/// # async fn demo(manager: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
/// use aws_sdk_dynamodb::types::AttributeValue;
/// let tx = manager.begin();
/// tx.commit().await?;
/// tx.put_item() // error[E0382]: borrow of moved value: `tx`
///     .table_name("Accounts")
///     .item("Id", AttributeValue::S("carol".into()))
///     .send()
///     .await?;
/// # Ok(()) }
/// ```
///
/// A finished transaction can still be [resumed](TransactionManager::resume) by id (to learn its
/// outcome or finish its cleanup); the resumed handle refuses new requests before sending anything,
/// with [`Error::AlreadyCommitted`] or [`Error::RolledBack`].
#[derive(Debug)]
pub struct Transaction {
    inner: Arc<Inner>,
    id: TxId,
    state: tokio::sync::Mutex<State>,
    finished: AtomicBool,
    /// This handle sent a write for the transaction (record create/append, a lock request): only
    /// then may dropping it roll the transaction back.
    wrote: AtomicBool,
    /// The contention ticket this unit of work proposes for its record, shared by every attempt of
    /// one unit of work.
    ticket: Arc<OnceCell<u64>>,
    /// The ticket in this transaction's record, once this handle knows it: the only ticket it
    /// contends with (see `contention::Contender::ticket`).
    ticket_recorded: OnceCell<u64>,
}

#[derive(Debug, Default)]
struct State {
    /// Every request, recorded ones first.
    requests: Vec<Request>,
    /// How many of `requests` are in the TX record.
    recorded: usize,
    /// The record as this coordinator last wrote or read it; `None` until it exists.
    meta: Option<RecordMeta>,
    /// One entry per item.
    items: BTreeMap<ItemRef, Entry>,
    /// Set when this handle learned the transaction is decided.
    outcome: Option<TxState>,
    /// DynamoDB rejected a batch without saying which request: apply one item per batch to find it.
    isolate_rejections: bool,
    /// The write-only fast path was tried and did not commit.
    fast_path_failed: bool,
    /// A write of the record (its creation, an append, or the fast path's committed record) was
    /// sent and its outcome is unknown: the record may exist, holding requests this handle still
    /// counts as unrecorded. Cleared once the record is read back or written successfully.
    record_in_doubt: bool,
    /// Items whose last write call failed after adding its request: the caller may retry that call.
    unfinished: BTreeSet<ItemRef>,
    /// A decisive commit request (fast path, one-request commit, decide) failed in a way that says
    /// nothing about whether it landed (an earlier attempt of it may have).
    decision_in_doubt: bool,
    /// The fast path's request was sent: a committed record without requests is ours.
    fast_path_sent: bool,
    /// Commit attempts that found the record still pending after a decisive request failed.
    ambiguous_commits: u32,
    /// The last transient failure (throttling, conflict) a commit attempt backed off from.
    transient: Option<Error>,
    /// Why this handle rolls back (a metric label); `None`: a `rollback` call.
    rollback_cause: Option<&'static str>,
}

/// Result of a transactional write.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct WriteOutput {
    /// The attributes asked for with `ReturnValues` (lock attributes never included).
    pub attributes: Option<Item>,
}

impl WriteOutput {
    /// The attributes asked for with `ReturnValues`.
    pub fn attributes(&self) -> Option<&Item> {
        self.attributes.as_ref()
    }
}

/// Result of a transactional read.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct GetOutput {
    /// The item as this transaction sees it; `None` if it does not exist.
    pub item: Option<Item>,
}

impl GetOutput {
    /// The item as this transaction sees it.
    pub fn item(&self) -> Option<&Item> {
        self.item.as_ref()
    }
}

enum CommitStep {
    Done,
    Again,
}

impl Transaction {
    pub(crate) fn new(inner: Arc<Inner>, id: TxId) -> Transaction {
        Transaction::with_ticket(inner, id, Arc::default())
    }

    /// A new transaction that inherits the ticket of earlier attempts of the same unit of work.
    pub(crate) fn with_ticket(
        inner: Arc<Inner>,
        id: TxId,
        ticket: Arc<OnceCell<u64>>,
    ) -> Transaction {
        Transaction {
            inner,
            id,
            state: tokio::sync::Mutex::new(State::default()),
            finished: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            ticket,
            ticket_recorded: OnceCell::new(),
        }
    }

    pub(crate) fn from_record(inner: Arc<Inner>, id: TxId, rec: record::Record) -> Transaction {
        // A resumed handle is the transaction others see in the record: it contends with the
        // record's ticket (a fresh one would make it younger in its own eyes only).
        let ticket = Arc::new(OnceCell::new_with(rec.header.ticket));
        let tx = Transaction::with_ticket(inner, id, ticket);
        if let Some(t) = rec.header.ticket {
            let _ = tx.ticket_recorded.set(t);
        }
        {
            let mut st = tx.state.try_lock().expect("new transaction is not shared");
            st.meta = Some(rec.header.meta());
            st.recorded = rec.requests.len();
            for r in rec.requests {
                st.requests.push(r);
                let i = st.requests.len() - 1;
                index_request(&mut st, i);
            }
            if rec.header.state != TxState::Pending {
                st.outcome = Some(rec.header.state);
            }
        }
        tx
    }

    /// A handle on the transaction `id` as its record says.
    ///
    /// # Errors
    /// [`Error::TransactionNotFound`] if no record exists.
    pub(crate) async fn load(inner: Arc<Inner>, id: &TxId) -> Result<Transaction> {
        let rec = record::load(&inner.client, &inner.tx_table, id)
            .await?
            .ok_or_else(|| Error::TransactionNotFound { tx_id: id.clone() })?;
        Ok(Transaction::from_record(inner, id.clone(), rec))
    }

    /// The transaction's id: give it to [`TransactionManager::resume`] to drive it from elsewhere.
    pub fn id(&self) -> &TxId {
        &self.id
    }

    /// Starts a put (a full replacement of an item) in this transaction.
    pub fn put_item(&self) -> PutItemBuilder<'_> {
        PutItemBuilder {
            tx: self,
            req: blank(Op::Put),
            return_values: None,
        }
    }

    /// Starts an update of an item in this transaction.
    pub fn update_item(&self) -> UpdateItemBuilder<'_> {
        UpdateItemBuilder {
            tx: self,
            req: blank(Op::Update),
            return_values: None,
        }
    }

    /// Starts a delete of an item in this transaction.
    pub fn delete_item(&self) -> DeleteItemBuilder<'_> {
        DeleteItemBuilder {
            tx: self,
            req: blank(Op::Delete),
            return_values: None,
        }
    }

    /// Starts a locked read: the item as this transaction sees it, locked until the transaction ends.
    pub fn get_item(&self) -> GetItemBuilder<'_> {
        GetItemBuilder {
            tx: self,
            req: blank(Op::Get),
            projection: None,
        }
    }

    fn check_open(&self, st: &State) -> Result<()> {
        if self.finished.load(Ordering::SeqCst) {
            return Err(Error::TransactionFinished {
                tx_id: self.id.clone(),
            });
        }
        match st.outcome {
            Some(TxState::Committed) => Err(Error::AlreadyCommitted {
                tx_id: self.id.clone(),
            }),
            Some(TxState::RolledBack) => Err(Error::RolledBack {
                tx_id: self.id.clone(),
            }),
            _ => Ok(()),
        }
    }

    async fn schema(&self, table: &str) -> Result<Arc<KeySchema>> {
        self.inner.schema(table).await
    }

    /// Validates and adds a write; drives it now when return values need it.
    #[instrument(level = "debug", skip_all, fields(tx = %self.id, op = ?req.op, table = %req.table))]
    async fn write(&self, mut req: Request, rv: Option<ReturnValue>) -> Result<WriteOutput> {
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
    async fn read(&self, mut req: Request, projection: Option<String>) -> Result<GetOutput> {
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
                self.drive_lock(&mut st, &r).await?.current
            }
        };
        let item = match (item, paths) {
            (Some(i), Some(p)) => Some(expr::project(&i, &p)),
            (i, _) => i,
        };
        Ok(GetOutput { item })
    }

    /// Records buffered requests in the TX record.
    #[instrument(level = "debug", name = "record", skip_all, fields(tx = %self.id, new_requests = st.requests.len() - st.recorded))]
    async fn flush(&self, st: &mut State) -> Result<()> {
        let _timer = (st.recorded < st.requests.len())
            .then(|| crate::metrics::PhaseTimer::start(crate::metrics::RECORD));
        for _ in 0..PROTOCOL_ATTEMPTS {
            if st.recorded == st.requests.len() {
                return Ok(());
            }
            let c = &self.inner.client;
            let table = &self.inner.tx_table;
            let pending = &st.requests[st.recorded..];
            self.wrote.store(true, Ordering::SeqCst);
            let out = match st.meta {
                None => {
                    if let crate::ContentionPolicy::Ordered {
                        ticket_at_begin: true,
                        ..
                    } = self.inner.settings.contention
                    {
                        let inner = &self.inner;
                        self.ticket
                            .get_or_try_init(|| record::take_ticket(&inner.client, &inner.tx_table))
                            .await?;
                    }
                    let ticket = self.ticket.get().copied();
                    st.record_in_doubt = true;
                    let out = record::create(c, table, &self.id, pending, ticket).await?;
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
                    return Ok(());
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
    async fn absorb_conflict(&self, st: &mut State, header: Option<Header>) -> Result<()> {
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
                self.finish_decided(st, TxState::Committed).await?;
                Err(Error::AlreadyCommitted {
                    tx_id: self.id.clone(),
                })
            }
        }
    }

    /// Another coordinator appended requests: adopt the record's list, keep ours that are not in it.
    async fn merge_record(&self, st: &mut State) -> Result<()> {
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

    /// Records and locks one item now.
    async fn drive_lock(&self, st: &mut State, r: &ItemRef) -> Result<LockInfo> {
        self.flush(st).await?;
        if let Some(l) = st.items[r].lock.clone() {
            return Ok(l);
        }
        let e = st.items[r].clone();
        let lock = self.lock_one(&e.table, &e.key).await?;
        st.items.get_mut(r).expect("entry exists").lock = Some(lock.clone());
        Ok(lock)
    }

    /// Locks every item not yet locked by this coordinator, concurrently.
    #[instrument(level = "debug", name = "lock", skip_all, fields(tx = %self.id, items = st.items.len()))]
    async fn lock_all(&self, st: &mut State) -> Result<()> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::LOCK);
        let todo: Vec<(ItemRef, String, Item)> = st
            .items
            .iter()
            .filter(|(_, e)| e.lock.is_none())
            .map(|(k, e)| (k.clone(), e.table.clone(), e.key.clone()))
            .collect();
        if todo.is_empty() {
            return Ok(());
        }
        let results: Vec<(ItemRef, Result<LockInfo>)> = futures::stream::iter(todo)
            .map(|(k, table, key)| async move {
                let r = self.lock_one(&table, &key).await;
                (k, r)
            })
            .buffer_unordered(self.inner.settings.concurrency.max(1))
            .collect()
            .await;
        let mut first_err = None;
        for (k, r) in results {
            match r {
                Ok(l) => st.items.get_mut(&k).expect("entry exists").lock = Some(l),
                Err(e) => {
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Locks one item, resolving contention with other transactions: decided or dead holders are
    /// completed, pending ones are rolled back or waited for as the contention policy says.
    async fn lock_one(&self, table: &str, key: &Item) -> Result<LockInfo> {
        use crate::contention::{Contender, Resolution};
        let schema = self.schema(table).await?;
        let settings = &self.inner.settings;
        let c = &self.inner.client;
        let me = Contender {
            id: &self.id,
            ticket: &self.ticket,
            recorded: &self.ticket_recorded,
        };
        let deadline = tokio::time::Instant::now() + settings.lock_wait;
        let heartbeat = match settings.contention {
            crate::ContentionPolicy::Ordered { dead_after, .. } => dead_after / 3,
            _ => settings.lock_wait,
        };
        let mut last_touch = tokio::time::Instant::now();
        let mut met_at = tokio::time::Instant::now();
        let mut marked_waiting_on: Option<u64> = None;
        let (mut tries, mut waits) = (0u32, 0u32);
        let mut last_owner = None;
        loop {
            self.wrote.store(true, Ordering::SeqCst);
            let out = match item_lock::lock(c, table, key, &schema, &self.id).await {
                Ok(o) => o,
                Err(
                    e @ Error::DynamoDb {
                        ambiguous: true, ..
                    },
                ) if tries + 1 < settings.lock_attempts => {
                    // The lock may have landed: the next attempt recognises our own lock.
                    debug!(tx = %self.id, error = %e, "ambiguous lock attempt; retrying");
                    crate::metrics::retry(crate::metrics::LOCK_AMBIGUOUS);
                    tries += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let owner = match out {
                LockOutcome::Locked(l) => {
                    if marked_waiting_on.is_some() {
                        // No longer blocked: others must not think we are.
                        record::clear_waiting(c, &self.inner.tx_table, &self.id).await?;
                    }
                    return Ok(l);
                }
                LockOutcome::Held { owner } if owner.0.is_empty() => {
                    tries += 1;
                    if tries >= settings.lock_attempts.max(1) {
                        break;
                    }
                    continue;
                }
                LockOutcome::Held { owner } => owner,
            };
            debug!(tx = %self.id, other = %owner, table, "item locked by another transaction");
            if last_owner.as_ref() != Some(&owner) {
                met_at = tokio::time::Instant::now();
            }
            let grace_left = met_at.elapsed() < settings.wound_grace;
            let resolution =
                crate::contention::resolve(&self.inner, &me, &owner, table, key, grace_left)
                    .await?;
            last_owner = Some(owner);
            match resolution {
                Resolution::Retry => {
                    tries += 1;
                    if tries >= settings.lock_attempts.max(1) {
                        break;
                    }
                    // The holder was just released: take the item at once, before a younger
                    // transaction grabs it again; back off only if that keeps failing.
                    if tries > 2 {
                        crate::settings::backoff(settings, tries - 2).await;
                    }
                }
                Resolution::Grace => {
                    crate::settings::backoff(settings, 0).await;
                }
                Resolution::Wait { on } => {
                    if tokio::time::Instant::now() >= deadline {
                        break;
                    }
                    // Show that this coordinator is alive (and blocked) while it waits.
                    if last_touch.elapsed() >= heartbeat || marked_waiting_on != Some(on) {
                        let t = self.ticket_recorded.get().copied();
                        if record::set_ticket(c, &self.inner.tx_table, &self.id, t, Some(on))
                            .await?
                            .is_none()
                        {
                            return Err(Error::RolledBack {
                                tx_id: self.id.clone(),
                            });
                        }
                        last_touch = tokio::time::Instant::now();
                        marked_waiting_on = Some(on);
                    }
                    waits += 1;
                    crate::settings::backoff(settings, waits.min(3)).await;
                    // An older transaction may have rolled us back while we waited: stop then,
                    // rather than take the item with a lock nobody needs.
                    let mine = record::load_header(c, &self.inner.tx_table, &self.id).await?;
                    if mine.as_ref().map(|h| h.state) != Some(TxState::Pending) {
                        return Err(Error::RolledBack {
                            tx_id: self.id.clone(),
                        });
                    }
                }
            }
        }
        Err(Error::ItemLocked {
            table: table.to_string(),
            key: key.clone(),
            owner: last_owner.unwrap_or_else(|| TxId(String::new())),
        })
    }

    /// Applies one item's write now (for return values or a read after write), keeping the lock.
    async fn apply_now(
        &self,
        st: &mut State,
        r: &ItemRef,
        rv: Option<ReturnValue>,
    ) -> Result<Option<Item>> {
        let lock = self.drive_lock(st, r).await?;
        let e = st.items[r].clone();
        let c = &self.inner.client;
        if lock.applied {
            // Applied already (by us or by another coordinator of this transaction).
            let raw = ddb::batch_get(c, &[(e.table.clone(), e.key.clone())]).await?;
            let obs = Observed::of(raw.first().map(|(_, i)| i));
            let current = obs.visible();
            st.items
                .get_mut(r)
                .expect("entry")
                .lock
                .as_mut()
                .expect("locked")
                .current = current.clone();
            let req = e.request(&st.requests).clone();
            return self.values_of_applied(&req, rv.as_ref(), &obs, &lock).await;
        }
        // Only apply while the transaction is pending (a decided one must not change items).
        let header = record::load_header(c, &self.inner.tx_table, &self.id).await?;
        match header.as_ref().map(|h| h.state) {
            Some(TxState::Pending) => {}
            _ => {
                self.absorb_conflict(st, header).await?;
                return Err(Error::RolledBack {
                    tx_id: self.id.clone(),
                });
            }
        }
        let req = e.request(&st.requests).clone();
        let schema = self.schema(&req.table).await?;
        let place = self.image_place(&lock, &req).await?;
        let writes =
            item_lock::request_writes(&req, &lock, &schema, &self.id, Stage::Apply, &place);
        for w in writes {
            let is_check = matches!(w.kind, ddb::WriteKind::Check { .. });
            match w.send(c, if is_check { None } else { rv.clone() }).await {
                Ok(Written::Ok(attrs)) => {
                    if is_check {
                        continue;
                    }
                    let current = match rv {
                        Some(ReturnValue::AllNew) => attrs.clone().map(item_lock::strip),
                        _ => None,
                    };
                    let l = st
                        .items
                        .get_mut(r)
                        .expect("entry")
                        .lock
                        .as_mut()
                        .expect("locked");
                    l.applied = true;
                    l.current = current;
                    if let ImagePlace::Table(id) = &place {
                        l.image_ref = Some(id.clone());
                    }
                    return Ok(attrs.map(item_lock::strip));
                }
                Ok(Written::ConditionFailed(found)) => {
                    let obs = Observed::of(found.as_ref());
                    if !is_check && obs.locked_by(&self.id) && obs.applied {
                        // Our own earlier attempt landed (its response was lost or throttled).
                        let l = st
                            .items
                            .get_mut(r)
                            .expect("entry")
                            .lock
                            .as_mut()
                            .expect("locked");
                        l.applied = true;
                        l.current = obs.visible();
                        return self.values_of_applied(&req, rv.as_ref(), &obs, &lock).await;
                    }
                    // Our lock is gone — or it is another lock of this transaction, taken by
                    // another handle after someone decided and released the item.
                    if !is_check && !obs.holds(&self.id, &lock) {
                        // We lost the lock: someone decided the transaction.
                        let header = record::load_header(c, &self.inner.tx_table, &self.id).await?;
                        self.absorb_conflict(st, header).await?;
                        return Err(Error::RolledBack {
                            tx_id: self.id.clone(),
                        });
                    }
                    let index = e.index();
                    let item = if is_check { None } else { obs.visible() };
                    st.rollback_cause = Some(crate::metrics::CONDITION_FAILED);
                    self.rollback_locked(st).await?;
                    return Err(Error::ConditionFailed {
                        tx_id: self.id.clone(),
                        request_index: index,
                        table: req.table.clone(),
                        key: req.key.clone(),
                        item,
                    });
                }
                Err(Error::DynamoDb {
                    code: Some(code),
                    message,
                    ..
                }) if code == "ValidationException" => {
                    let index = e.index();
                    st.rollback_cause = Some(crate::metrics::REQUEST_REJECTED);
                    self.rollback_locked(st).await?;
                    return Err(Error::RequestRejected {
                        tx_id: self.id.clone(),
                        request_index: index,
                        table: req.table.clone(),
                        message: request::explain_rejection(message.unwrap_or_default()),
                    });
                }
                Err(err) => return Err(err),
            }
        }
        Err(Error::invariant("apply produced no write"))
    }

    /// What `ReturnValues` shows of a write found already applied (a retry after a lost or
    /// throttled response, or another handle's apply): DynamoDB's answer, computed from the item now
    /// and its before-image.
    async fn values_of_applied(
        &self,
        req: &Request,
        rv: Option<&ReturnValue>,
        obs: &Observed,
        lock: &LockInfo,
    ) -> Result<Option<Item>> {
        let now = obs.visible();
        let before = || async {
            if obs.transient {
                Ok(None)
            } else if let Some(img) = &obs.image {
                Ok(Some(img.clone()))
            } else if let Some(id) = &obs.image_ref {
                item_lock::load_table_image(&self.inner.client, &self.inner.image_table, id).await
            } else {
                Ok(lock.before.clone())
            }
        };
        let updated = |item: Option<Item>| -> Result<Option<Item>> {
            let Some(update) = &req.update else {
                return Ok(None);
            };
            // DynamoDB returns each updated top-level attribute whole (all of `m` for `m.a`).
            let targets = expr::UpdateExpr::parse(update)?.targets(req.names.as_ref())?;
            Ok(item
                .map(|i| {
                    i.into_iter()
                        .filter(|(k, _)| targets.contains(k))
                        .collect::<Item>()
                })
                .filter(|i| !i.is_empty()))
        };
        match rv {
            Some(ReturnValue::UpdatedNew) => updated(now),
            Some(ReturnValue::UpdatedOld) => updated(before().await?),
            Some(ReturnValue::AllOld) => before().await,
            _ => Ok(now),
        }
    }

    /// Chooses where the before-image goes, saving it in the images table when it is large.
    async fn image_place(&self, lock: &LockInfo, req: &Request) -> Result<ImagePlace> {
        if lock.transient || !matches!(req.op, Op::Put | Op::Update) {
            return Ok(ImagePlace::Embedded);
        }
        if let Some(id) = &lock.image_ref {
            return Ok(ImagePlace::Table(id.clone()));
        }
        let before = lock.before.clone().unwrap_or_default();
        if request::image_fits_in_item(&before, req) {
            return Ok(ImagePlace::Embedded);
        }
        // The same id for every attempt and every coordinator of this lock: a repeated save
        // finds its row, and whoever finishes the transaction can delete it.
        let id = match &lock.stamp {
            Some(stamp) => item_lock::image_id(&self.id, &req.table, &req.key, stamp),
            None => format!("{}#{}", self.id, uuid::Uuid::new_v4().simple()),
        };
        item_lock::save_table_image(&self.inner.client, &self.inner.image_table, &id, &before)
            .await?;
        Ok(ImagePlace::Table(id))
    }

    /// Commits the transaction.
    ///
    /// Records any buffered writes, locks every item, applies every write and flips the record to
    /// committed. Once it returns `Ok`, every write is durable and visible.
    ///
    /// # Errors
    /// Every error says what happened to the transaction; [`Error::transaction_outcome`] reads it
    /// from the error alone (the [`TxOutcome`](crate::TxOutcome) is in brackets):
    /// - [`Error::ConditionFailed`] / [`Error::RequestRejected`] (`RolledBack`): a request's condition was false or
    ///   DynamoDB rejected it; the transaction was rolled back. Not retryable.
    /// - [`Error::RolledBack`] (`RolledBack`): the transaction was rolled back — by another transaction that needed
    ///   its items, or by this `commit` after a commit request failed in a way that said nothing
    ///   about whether it landed and the record still showed it pending (rolling back, conditional
    ///   on the record's version, makes sure no such request lands later). Nothing was applied;
    ///   running the unit of work again is safe.
    /// - [`Error::Undetermined`] (`Undetermined`): a commit request failed ambiguously and the record could not be
    ///   read back (or the rollback that would settle it failed); the transaction may or may not
    ///   have committed, exactly once at most. Resume it later to learn the outcome; do not simply
    ///   run the work again.
    /// - [`Error::UnknownOutcome`] (`Undetermined`): the record was deleted meanwhile.
    /// - [`Error::AlreadyCommitted`] (`Committed`): the transaction **is committed**; do not run the work again.
    ///   Either releasing its locks and finalizing its record kept failing after a few retries
    ///   (readers see through the locks; the next coordinator that meets them, or the sweeper,
    ///   finishes), or another coordinator committed the record before this handle's unrecorded
    ///   requests were added (those requests were not applied).
    /// - [`Error::ItemLocked`], or a [`Error::DynamoDb`] error (`Pending`) — retryable
    ///   ([`is_retryable`](Error::is_retryable): throttling, a transaction conflict, a 5xx or
    ///   timeout before any commit request was sent, a commit request that provably never left
    ///   the machine — `ambiguous: false`) or not (access denied): nothing was decided and no commit request can
    ///   land any more; the transaction is still pending with its locks (roll it back, or leave
    ///   it to contenders and the sweeper), unless this `commit` or a contender already rolled it
    ///   back. Retrying the unit of work is safe once it is rolled back. `InvalidRequest`,
    ///   `Serde` and `ReadContention` are `Pending` too; `Invariant` (a broken protocol
    ///   invariant) is `Undetermined`.
    ///
    /// `Ok` always means finished: every write applied, every lock released and the record
    /// finalized. A commit request that landed is never reported as a retryable error: when any commit request (the
    /// fast path's, the one-request commit's, the phased flip, or the SDK's own retries of them)
    /// fails, the record is read, and a committed record means `Ok`.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that the outcome is then unknown to the caller: dropping the future
    /// midway leaves the transaction pending (or already committed). It is never left half-applied:
    /// any coordinator can finish it with [`TransactionManager::resume`], and contending transactions or
    /// the sweeper roll it back.
    #[instrument(level = "info", skip_all, fields(tx = %self.id, outcome = tracing::field::Empty, error.kind = tracing::field::Empty))]
    pub async fn commit(self) -> Result<()> {
        let r = self.commit_inner().await;
        crate::metrics::commit_result(&r);
        crate::metrics::record_outcome(&r, "committed");
        self.finished.store(true, Ordering::SeqCst);
        r
    }

    async fn commit_inner(&self) -> Result<()> {
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
                return Err(Error::RolledBack {
                    tx_id: self.id.clone(),
                });
            }
            _ => {}
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
    async fn resolve_in_doubt_commit(&self, st: &mut State, cause: Error) -> Result<()> {
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
    async fn commit_attempts(&self, st: &mut State) -> Result<()> {
        for _ in 0..PROTOCOL_ATTEMPTS {
            if st.requests.is_empty() && st.meta.is_none() && !st.record_in_doubt {
                return Ok(()); // nothing was ever written
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
            self.flush(st).await?;
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

    /// Nothing recorded or locked, only writes without return values, few enough for one batch.
    fn fast_path_fits(&self, st: &State) -> bool {
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
    }

    /// Commits a write-only transaction with one `TransactWriteItems` and no locks: the record,
    /// created committed and finalized, plus every write conditional on its item not being locked
    /// (and on the request's own condition). `None`: it did not commit; fall back to locking.
    #[instrument(level = "debug", name = "commit_write_only", skip_all, fields(tx = %self.id, items = st.items.len()))]
    async fn commit_write_only(&self, st: &mut State) -> Result<Option<CommitStep>> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::COMMIT);
        let inner = &self.inner;
        let mut writes = vec![record::committed_record_write(
            &inner.tx_table,
            &self.id,
            inner.settings.record_ttl_secs(),
        )];
        let mut owners = Vec::new();
        for (k, e) in &st.items {
            let req = e.request(&st.requests);
            writes.push(item_lock::unlocked_write(req));
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

    fn one_shot_fits(&self, st: &State) -> bool {
        let max = self.inner.settings.one_shot_max_items;
        if st.items.len() > max || st.isolate_rejections {
            return false;
        }
        // An update whose result may come within the lock attributes' room of 400 KB goes through
        // the phased apply, where DynamoDB judges the item with its lock attributes, so that every
        // path accepts the same writes.
        let near_limit = st.items.values().any(|e| {
            e.lock.as_ref().is_some_and(|l| !l.applied)
                && e.write.is_some_and(|w| {
                    let req = &st.requests[w];
                    let before = e.lock.as_ref().and_then(|l| l.before.as_ref());
                    request::result_size_bound(before, req) + request::APPLIED_ROOM_BYTES
                        > request::MAX_ITEM_BYTES
                })
        });
        if near_limit {
            return false;
        }
        let actions: usize = 1 + st
            .items
            .values()
            .map(|e| {
                let req = e.request(&st.requests);
                1 + usize::from(
                    req.condition.is_some() && e.lock.as_ref().is_some_and(|l| l.transient),
                ) + usize::from(self.image_to_delete(e, &st.requests).is_some())
            })
            .sum::<usize>();
        let bytes: usize = st
            .items
            .values()
            .map(|e| e.request(&st.requests).encoded_size() * 2)
            .sum();
        actions <= ddb::MAX_TRANSACT_ACTIONS && bytes < ddb::MAX_TRANSACT_BYTES
    }

    /// The images-table row to delete in the same request as an item's final write: the image an
    /// applied item points to, or the one a coordinator may have saved just before applying.
    fn image_to_delete(&self, e: &Entry, requests: &[Request]) -> Option<String> {
        let lock = e.lock.as_ref()?;
        if lock.applied {
            return lock.image_ref.clone();
        }
        let req = &requests[e.write?];
        item_lock::unapplied_image_id(
            &self.id,
            req,
            lock.transient,
            lock.before.as_ref(),
            lock.stamp.as_deref(),
        )
    }

    /// The final writes of every item, for the one-request commit. Returns (writes, owner entry per write).
    fn final_writes(&self, st: &State) -> Result<(Vec<Write>, Vec<Option<ItemRef>>)> {
        let mut writes = Vec::new();
        let mut owners = Vec::new();
        for (k, e) in &st.items {
            let lock = e
                .lock
                .as_ref()
                .ok_or_else(|| Error::invariant("committing an unlocked item"))?;
            let op = e.op(&st.requests);
            let ws = if lock.applied {
                let obs = lock.as_observed(&self.id);
                item_lock::settle_write(true, op, &e.table, &e.key, &obs, &self.id, None)?
                    .into_iter()
                    .collect()
            } else {
                let req = e.request(&st.requests);
                let schema = self
                    .inner
                    .schemas
                    .cached(&req.table)
                    .ok_or_else(|| Error::invariant("schema not cached"))?;
                item_lock::request_writes(
                    req,
                    lock,
                    &schema,
                    &self.id,
                    Stage::Final,
                    &ImagePlace::Embedded,
                )
            };
            for w in ws {
                writes.push(w);
                owners.push(Some(k.clone()));
            }
            if let Some(id) = self.image_to_delete(e, &st.requests) {
                writes.push(item_lock::image_delete_write(&self.inner.image_table, &id));
                owners.push(Some(k.clone()));
            }
        }
        Ok((writes, owners))
    }

    /// Commits with one `TransactWriteItems`: the record's flip (and finalization) plus every item's
    /// final write.
    #[instrument(level = "debug", name = "commit_one_request", skip_all, fields(tx = %self.id, items = st.items.len()))]
    async fn commit_one_shot(&self, st: &mut State) -> Result<CommitStep> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::COMMIT);
        let meta = st.meta.expect("flushed");
        let (item_writes, owners) = self.final_writes(st)?;
        let mut writes = vec![record::decide_final_write(
            &self.inner.tx_table,
            &self.id,
            meta.version,
            TxState::Committed,
            self.inner.settings.record_ttl_secs(),
        )];
        writes.extend(item_writes);
        let c = &self.inner.client;
        let out = match ddb::transact(c, &writes).await {
            Ok(o) => o,
            Err(e) if is_rejection(&e) => {
                // The batch was rejected as a whole: find the request by applying item by item.
                st.isolate_rejections = true;
                return Ok(CommitStep::Again);
            }
            // A timeout, a 5xx, or the SDK's retry of an attempt that may have landed failing
            // otherwise: the record tells whether the commit landed.
            Err(e @ Error::DynamoDb { .. }) => {
                return self.learn_after_ambiguous_commit(st, e).await;
            }
            Err(e) => return Err(e),
        };
        match out {
            Transacted::Ok => {
                debug!(tx = %self.id, items = st.items.len(), "committed in one request");
                st.outcome = Some(TxState::Committed);
                self.after_finalize(st).await;
                Ok(CommitStep::Done)
            }
            Transacted::Cancelled(reasons) => {
                if let Some(r) = reasons.iter().find(|r| r.is_transient()) {
                    // Throttled or in conflict: this attempt applied nothing, but an earlier
                    // attempt of it (the SDK retries 5xx answers) may have. The record tells.
                    return self
                        .learn_after_ambiguous_commit(st, cancelled_error(r))
                        .await;
                }
                if !reasons[0].is_ok() {
                    return self.header_failed(st, &reasons[0]).await;
                }
                self.items_failed(st, &writes, &owners, &reasons, 1).await
            }
        }
    }

    /// The record's condition failed inside a batch: find out why.
    async fn header_failed(&self, st: &mut State, reason: &ddb::Reason) -> Result<CommitStep> {
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
            .map(record::Header::parse)
            .transpose()?;
        match header.as_ref().map(|h| h.state) {
            Some(TxState::Committed) => {
                self.finish_committed(st).await?;
                Ok(CommitStep::Done)
            }
            _ => {
                self.absorb_conflict(st, header).await?;
                Ok(CommitStep::Again)
            }
        }
    }

    /// Someone committed this transaction: complete it (unlock every item, finalize the record).
    /// Errors only when completion keeps failing; see [`Transaction::settle_committed`].
    async fn finish_committed(&self, st: &mut State) -> Result<()> {
        self.settle_committed(st, false).await
    }

    /// Completes a committed transaction, retrying a bounded number of times (a lost answer, a
    /// throttled request or a conflict must not leave locks or an unfinalized record behind an
    /// `Ok`): each retry reads the record and the items again, so writes that landed without an
    /// answer are recognised. `trust_memory` as for [`Transaction::complete`], first attempt only.
    /// When every attempt fails, the transaction is committed but not finished:
    /// [`Error::AlreadyCommitted`] (its locks are seen through by readers and released by the
    /// next coordinator that meets them, or by the sweeper).
    async fn settle_committed(&self, st: &mut State, trust_memory: bool) -> Result<()> {
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

    /// Some item actions of a batch failed: learn what the items look like and decide.
    async fn items_failed(
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
            let req = e.request(&st.requests).clone();
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
                    st.rollback_cause = Some(crate::metrics::CONDITION_FAILED);
                    self.rollback_locked(st).await?;
                    return Err(Error::ConditionFailed {
                        tx_id: self.id.clone(),
                        request_index: e.index(),
                        table: req.table.clone(),
                        key: req.key.clone(),
                        item: if is_phantom { None } else { obs.visible() },
                    });
                }
                "ValidationError" => {
                    st.rollback_cause = Some(crate::metrics::REQUEST_REJECTED);
                    self.rollback_locked(st).await?;
                    return Err(Error::RequestRejected {
                        tx_id: self.id.clone(),
                        request_index: e.index(),
                        table: req.table.clone(),
                        message: request::explain_rejection(
                            reason.message.clone().unwrap_or_default(),
                        ),
                    });
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

    /// The decisive write failed (ambiguously, or after the SDK retried an attempt that may have
    /// landed): read the record to learn the outcome. Still pending: try again a few times, then
    /// give up with `cause`, which `commit` resolves.
    async fn learn_after_ambiguous_commit(
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
            Some(TxState::Committed) => {
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

    /// Commits in phases: apply every write (batches conditional on the record being pending), flip
    /// the record, unlock every item, finalize.
    #[instrument(level = "debug", name = "commit_phased", skip_all, fields(tx = %self.id, items = st.items.len()))]
    async fn commit_phased(&self, st: &mut State) -> Result<CommitStep> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::COMMIT);
        let meta = st.meta.expect("flushed");
        // 1. Apply.
        let mut writes = Vec::new();
        let mut owners = Vec::new();
        let keys: Vec<ItemRef> = st.items.keys().cloned().collect();
        for k in &keys {
            let e = st.items[k].clone();
            let lock = e
                .lock
                .clone()
                .ok_or_else(|| Error::invariant("applying to an unlocked item"))?;
            if lock.applied {
                continue;
            }
            let req = e.request(&st.requests).clone();
            let schema = self.schema(&req.table).await?;
            let place = self.image_place(&lock, &req).await?;
            if let ImagePlace::Table(id) = &place {
                st.items
                    .get_mut(k)
                    .expect("entry")
                    .lock
                    .as_mut()
                    .expect("locked")
                    .image_ref = Some(id.clone());
            }
            for w in item_lock::request_writes(&req, &lock, &schema, &self.id, Stage::Apply, &place)
            {
                writes.push(w);
                owners.push(Some(k.clone()));
            }
        }
        let c = &self.inner.client;
        let groups = if st.isolate_rejections {
            group_by_owner(writes, owners)
        } else {
            group_with_owners(writes, owners, 1)
        };
        let results: Vec<AppliedGroup> = futures::stream::iter(groups)
            .map(|(ws, os)| async move {
                let mut batch = vec![record::pending_check(&self.inner.tx_table, &self.id)];
                batch.extend(ws);
                let out = ddb::transact(c, &batch).await;
                (batch, os, out)
            })
            .buffer_unordered(self.inner.settings.concurrency.clamp(1, 8))
            .collect()
            .await;
        let mut again = false;
        for r in results {
            let (batch, os, out) = r;
            let out = match out {
                Ok(o) => o,
                Err(e) if is_rejection(&e) => {
                    let owners: Vec<&ItemRef> = os.iter().flatten().collect();
                    if owners.len() > 1 || owners.windows(2).any(|w| w[0] != w[1]) {
                        st.isolate_rejections = true;
                        again = true;
                        continue;
                    }
                    let Some(k) = owners.first().map(|k| (*k).clone()) else {
                        return Err(e);
                    };
                    let e2 = st.items[&k].clone();
                    let req = e2.request(&st.requests).clone();
                    st.rollback_cause = Some(crate::metrics::REQUEST_REJECTED);
                    self.rollback_locked(st).await?;
                    return Err(Error::RequestRejected {
                        tx_id: self.id.clone(),
                        request_index: e2.index(),
                        table: req.table,
                        message: match &e {
                            Error::DynamoDb { message, .. } => {
                                request::explain_rejection(message.clone().unwrap_or_default())
                            }
                            other => other.to_string(),
                        },
                    });
                }
                Err(e) => return Err(e),
            };
            match out {
                Transacted::Ok => {
                    for k in os.iter().flatten() {
                        let op = st.items[k].op(&st.requests);
                        if let Some(l) = st.items.get_mut(k).and_then(|e| e.lock.as_mut()) {
                            // Every write is applied (a delete marked) before commit; reads are not.
                            if op.is_write() {
                                l.applied = true;
                            }
                        }
                    }
                }
                Transacted::Cancelled(reasons) => {
                    if !reasons[0].is_ok() {
                        return self.header_failed(st, &reasons[0]).await;
                    }
                    match self.items_failed(st, &batch, &os, &reasons, 1).await? {
                        CommitStep::Again => again = true,
                        CommitStep::Done => return Ok(CommitStep::Done),
                    }
                }
            }
        }
        if again {
            return Ok(CommitStep::Again);
        }
        // 2. Flip.
        let flipped = match record::decide(
            c,
            &self.inner.tx_table,
            &self.id,
            meta.version,
            TxState::Committed,
        )
        .await
        {
            Ok(f) => f,
            // Ambiguous, or the SDK's retry of an attempt that may have landed failed otherwise.
            Err(e @ Error::DynamoDb { .. }) => {
                return self.learn_after_ambiguous_commit(st, e).await;
            }
            Err(e) => return Err(e),
        };
        match flipped {
            Flipped::Ok => {}
            Flipped::Failed(Some(h)) if h.state == TxState::Committed => {}
            Flipped::Failed(header) => {
                self.absorb_conflict(st, header).await?;
                return Ok(CommitStep::Again);
            }
        }
        st.outcome = Some(TxState::Committed);
        debug!(tx = %self.id, items = st.items.len(), "committed; unlocking");
        // 3-4. Unlock and finalize. The transaction is committed whatever happens here; a failure
        // is retried (bounded), and only when that keeps failing does commit say "committed, not
        // finished" (locks left are seen through by readers and released by others).
        self.settle_committed(st, true).await?;
        Ok(CommitStep::Done)
    }

    /// Rolls the transaction back: no write of it takes effect, every lock is released.
    ///
    /// `Ok` means the record says rolled back (or no record exists and none can appear: when the
    /// answer to the record's creation was lost, the record is written as rolled back unless the
    /// creation landed, which is then rolled back).
    ///
    /// # Errors
    /// [`Error::AlreadyCommitted`] if it committed first (its completion is then driven to the end):
    /// [`Error::transaction_outcome`] is `Committed`. Other errors leave the transaction pending (or
    /// rolled back but not yet settled) and read `Pending` (`Undetermined` for
    /// [`Error::UnknownOutcome`], the record being gone, and for `Invariant`); calling `rollback`
    /// again on a resumed handle finishes it.
    ///
    /// # Cancel safety
    /// Dropping the future midway leaves the transaction pending or rolled back but not fully cleaned;
    /// calling `rollback` again on a resumed handle, any contending transaction, or the sweeper finishes
    /// it.
    #[instrument(level = "info", skip_all, fields(tx = %self.id, outcome = tracing::field::Empty, error.kind = tracing::field::Empty))]
    pub async fn rollback(self) -> Result<()> {
        let r = async {
            let mut st = self.state.lock().await;
            if self.finished.load(Ordering::SeqCst) {
                return Err(Error::TransactionFinished {
                    tx_id: self.id.clone(),
                });
            }
            self.rollback_locked(&mut st).await
        }
        .await;
        self.finished.store(true, Ordering::SeqCst);
        crate::metrics::record_outcome(&r, "rolled_back");
        r
    }

    /// Rolls back (state already locked).
    #[instrument(level = "debug", name = "rollback", skip_all, fields(tx = %self.id))]
    async fn rollback_locked(&self, st: &mut State) -> Result<()> {
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
    async fn finish_decided(&self, st: &mut State, decided: TxState) -> Result<()> {
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

    /// Settles every item of this decided transaction and finalizes the record (see
    /// [`settle::complete`]).
    async fn complete(&self, st: &mut State, decided: TxState, trust_memory: bool) -> Result<()> {
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
    async fn release_own_locks(&self, st: &mut State) -> Result<()> {
        settle::release_unapplied_locks(&self.inner, &self.id, &mut st.items).await
    }

    /// Hook after the one-request commit (which finalizes the record, with its TTL, and deletes the
    /// items' images-table rows in the same write).
    async fn after_finalize(&self, st: &mut State) {
        for e in st.items.values_mut() {
            e.lock = None;
        }
    }

    /// Leaves the transaction as it is, without committing or rolling back, as if this process had
    /// died. Its record and locks stay until another coordinator or the sweeper resolves them.
    pub fn abandon(self) {
        self.finished.store(true, Ordering::SeqCst);
    }

    /// Deletes the transaction's record, which must be finalized (committed or rolled back and
    /// cleaned up). Returns false when it is not finalized yet.
    ///
    /// # Cancel safety
    /// Safe to drop midway; calling again finishes the job.
    pub async fn delete(self) -> Result<bool> {
        self.finished.store(true, Ordering::SeqCst);
        record::delete(&self.inner.client, &self.inner.tx_table, &self.id).await
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        // A handle that sent nothing decides nothing (another coordinator may be driving it).
        if self.finished.load(Ordering::SeqCst)
            || !self.wrote.load(Ordering::SeqCst)
            || !self.inner.settings.rollback_on_drop
        {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let inner = self.inner.clone();
            let id = self.id.clone();
            crate::metrics::dropped_handle();
            handle.spawn(async move {
                // As `TransactionManager::rollback_transaction`: resume, then roll back.
                let rollback = async { Transaction::load(inner, &id).await?.rollback().await };
                match rollback.await {
                    // Committed meanwhile, or the record's creation never landed: nothing to undo.
                    Ok(()) | Err(Error::AlreadyCommitted { .. } | Error::TransactionNotFound { .. }) => {}
                    Err(e) => {
                        warn!(tx = %id, error = %e, "background rollback of a dropped transaction failed")
                    }
                }
            });
        }
    }
}

fn index_request(st: &mut State, i: usize) {
    settle::index(&mut st.items, &st.requests, i);
}

fn blank(op: Op) -> Request {
    Request {
        op,
        table: String::new(),
        key: Item::new(),
        item: None,
        update: None,
        condition: None,
        names: None,
        values: None,
    }
}

/// Errors that are an outcome of the commit (or say it cannot be known), not a failure to reach one.
fn is_outcome(e: &Error) -> bool {
    matches!(
        e,
        Error::RolledBack { .. }
            | Error::AlreadyCommitted { .. }
            | Error::ConditionFailed { .. }
            | Error::RequestRejected { .. }
            | Error::UnknownOutcome { .. }
            | Error::Undetermined { .. }
    )
}

/// True when two requests are the same request (the record's copy of a request compares equal to
/// the original: numbers by value, since DynamoDB returns them canonicalised, sets in any order).
fn same_request(a: &Request, b: &Request) -> bool {
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

/// DynamoDB refused a request as invalid (e.g. a type mismatch in an update expression).
fn is_rejection(e: &Error) -> bool {
    e.dynamodb_code() == Some("ValidationException")
}

type AppliedGroup = (Vec<Write>, Vec<Option<ItemRef>>, Result<Transacted>);

macro_rules! common_builder_methods {
    () => {
        /// The table.
        pub fn table_name(mut self, table: impl Into<String>) -> Self {
            self.req.table = table.into();
            self
        }

        /// Adds one `ExpressionAttributeNames` entry.
        pub fn expression_attribute_names(
            mut self,
            k: impl Into<String>,
            v: impl Into<String>,
        ) -> Self {
            self.req
                .names
                .get_or_insert_with(HashMap::new)
                .insert(k.into(), v.into());
            self
        }

        /// Replaces `ExpressionAttributeNames`.
        pub fn set_expression_attribute_names(
            mut self,
            names: Option<HashMap<String, String>>,
        ) -> Self {
            self.req.names = names;
            self
        }
    };
}

macro_rules! write_builder_methods {
    () => {
        common_builder_methods!();

        /// Adds one `ExpressionAttributeValues` entry.
        pub fn expression_attribute_values(
            mut self,
            k: impl Into<String>,
            v: AttributeValue,
        ) -> Self {
            self.req
                .values
                .get_or_insert_with(HashMap::new)
                .insert(k.into(), v);
            self
        }

        /// Replaces `ExpressionAttributeValues`.
        pub fn set_expression_attribute_values(
            mut self,
            values: Option<HashMap<String, AttributeValue>>,
        ) -> Self {
            self.req.values = values;
            self
        }

        /// A condition checked against the item under this transaction's lock. If it is false at commit,
        /// the whole transaction rolls back with [`Error::ConditionFailed`].
        pub fn condition_expression(mut self, c: impl Into<String>) -> Self {
            self.req.condition = Some(c.into());
            self
        }

        /// What to return. `None` (default) buffers the write until commit; `AllOld` locks the item
        /// now; for updates, `AllNew`, `UpdatedOld` and `UpdatedNew` apply it now.
        pub fn return_values(mut self, rv: ReturnValue) -> Self {
            self.return_values = Some(rv);
            self
        }
    };
}

/// Builds a transactional put. Send with [`send`](PutItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct PutItemBuilder<'a> {
    tx: &'a Transaction,
    req: Request,
    return_values: Option<ReturnValue>,
}

impl PutItemBuilder<'_> {
    write_builder_methods!();

    /// Adds one attribute of the item.
    pub fn item(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.req
            .item
            .get_or_insert_with(HashMap::new)
            .insert(k.into(), v);
        self
    }

    /// Replaces the item.
    pub fn set_item(mut self, item: Option<Item>) -> Self {
        self.req.item = item;
        self
    }

    /// Validates the put and adds it to the transaction.
    ///
    /// # Errors
    /// [`Error::InvalidRequest`] before anything is written when the request is invalid;
    /// [`Error::DuplicateRequest`] if the transaction already writes this item. Sending the same
    /// request again on the same handle after this call failed (say, a lost response while
    /// recording it) is not a duplicate: it drives that request again, and it is applied once.
    ///
    /// # Cancel safety
    /// Without `ReturnValues` nothing is written, so dropping is harmless. With `AllOld` the item may be
    /// left locked by the transaction; it is released when the transaction ends.
    pub async fn send(self) -> Result<WriteOutput> {
        self.tx.write(self.req, self.return_values).await
    }
}

/// Builds a transactional update. Send with [`send`](UpdateItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct UpdateItemBuilder<'a> {
    tx: &'a Transaction,
    req: Request,
    return_values: Option<ReturnValue>,
}

impl UpdateItemBuilder<'_> {
    write_builder_methods!();

    /// Adds one key attribute.
    pub fn key(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.req.key.insert(k.into(), v);
        self
    }

    /// Replaces the key.
    pub fn set_key(mut self, key: Option<Item>) -> Self {
        self.req.key = key.unwrap_or_default();
        self
    }

    /// The `UpdateExpression`. Without one, the update only makes sure the item exists.
    pub fn update_expression(mut self, e: impl Into<String>) -> Self {
        self.req.update = Some(e.into());
        self
    }

    /// Validates the update and adds it to the transaction.
    ///
    /// # Errors
    /// As [`PutItemBuilder::send`]; with `AllNew`/`Updated*` also the errors of applying it now
    /// ([`Error::ConditionFailed`], [`Error::RequestRejected`], both rolling the transaction back).
    ///
    /// # Cancel safety
    /// Without `ReturnValues` nothing is written. Otherwise the item may be left locked (and applied)
    /// by the transaction; rollback or commit settles it.
    pub async fn send(self) -> Result<WriteOutput> {
        self.tx.write(self.req, self.return_values).await
    }
}

/// Builds a transactional delete. Send with [`send`](DeleteItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct DeleteItemBuilder<'a> {
    tx: &'a Transaction,
    req: Request,
    return_values: Option<ReturnValue>,
}

impl DeleteItemBuilder<'_> {
    write_builder_methods!();

    /// Adds one key attribute.
    pub fn key(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.req.key.insert(k.into(), v);
        self
    }

    /// Replaces the key.
    pub fn set_key(mut self, key: Option<Item>) -> Self {
        self.req.key = key.unwrap_or_default();
        self
    }

    /// Validates the delete and adds it to the transaction. The item disappears at commit.
    ///
    /// # Errors
    /// As [`PutItemBuilder::send`].
    ///
    /// # Cancel safety
    /// As [`PutItemBuilder::send`].
    pub async fn send(self) -> Result<WriteOutput> {
        self.tx.write(self.req, self.return_values).await
    }
}

/// Builds a locked read. Send with [`send`](GetItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct GetItemBuilder<'a> {
    tx: &'a Transaction,
    req: Request,
    projection: Option<String>,
}

impl GetItemBuilder<'_> {
    common_builder_methods!();

    /// Adds one key attribute.
    pub fn key(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.req.key.insert(k.into(), v);
        self
    }

    /// Replaces the key.
    pub fn set_key(mut self, key: Option<Item>) -> Self {
        self.req.key = key.unwrap_or_default();
        self
    }

    /// Which attributes to return (applied to the result; the whole item stays locked).
    pub fn projection_expression(mut self, p: impl Into<String>) -> Self {
        self.projection = Some(p.into());
        self
    }

    /// Locks the item (inserting a placeholder if it does not exist, so nobody can create it) and
    /// returns it as this transaction sees it: after this transaction's own writes, `None` if it does
    /// not exist.
    ///
    /// # Cancel safety
    /// Dropping midway may leave the item locked by the transaction; it is released when the
    /// transaction ends.
    pub async fn send(self) -> Result<GetOutput> {
        self.tx.read(self.req, self.projection).await
    }
}

#[cfg(test)]
mod same_request_tests {
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
