//! [`Transaction`]: the coordinator of one transaction.
//!
//! Writes without `ReturnValues` are validated at once and buffered; `commit` records them all in the
//! TX record with one write, locks every item concurrently, and then either commits everything with one
//! `TransactWriteItems` (the record's flip to committed, every write, every unlock) or, for larger
//! transactions, applies in batches conditional on the record being pending, flips the record with one
//! write conditional on its version, and unlocks. Reads (`get_item`) and writes that return values
//! drive their item at once. See `docs/PROTOCOL.md`.
//!
//! The handle and its public API live here; [`builders`] has the request builders, [`buffer`]
//! validates, buffers and records requests, [`lock_phase`] locks items (resolving contention),
//! [`batch_lock`] takes the record and the locks in `TransactWriteItems` first
//! (`Settings::batch_locks`),
//! [`commit`] drives a commit through one of its paths ([`write_only`], [`one_request`],
//! [`phased`]), [`finish`] rolls back and completes through [`settle`](crate::settle), and
//! [`drop`](mod@drop) says what dropping an unfinished handle does.

mod batch_lock;
mod buffer;
mod builders;
mod commit;
mod drop;
mod early_apply;
mod finish;
mod in_process;
mod lock_phase;
mod lock_wait;
mod marks;
mod one_request;
mod phased;
mod places;
mod registration;
mod reorder;
mod without_record;
mod write_only;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::OnceCell;
use tracing::instrument;

use crate::TxId;
use crate::error::{Error, Item, Result};
use crate::keys::{ItemRef, KeySchema};
use crate::record::{self, RecordMeta, TxState};
use crate::request::Request;
use crate::settings::Inner;
use crate::settle::Entry;

use buffer::index_request;
pub use builders::{DeleteItemBuilder, GetItemBuilder, PutItemBuilder, UpdateItemBuilder};

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
/// - **Sent nothing** (a [`begin`](crate::TransactionManager::begin) handle whose writes are only
///   buffered, or a [`resume`](crate::TransactionManager::resume) handle used only to inspect):
///   nothing. Buffered requests are forgotten; a transaction another coordinator is driving goes
///   on undisturbed.
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
/// A finished transaction can still be [resumed](crate::TransactionManager::resume) by id (to
/// learn its outcome or finish its cleanup); the resumed handle refuses new requests before
/// sending anything, with [`Error::AlreadyCommitted`] or [`Error::RolledBack`].
///
/// [`TransactionManager::begin`]: crate::TransactionManager::begin
/// [`TransactionManager::resume`]: crate::TransactionManager::resume
/// [`TransactionManager::run`]: crate::TransactionManager::run
/// [`TransactionManager::rollback_transaction`]: crate::TransactionManager::rollback_transaction
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
    /// one unit of work (a first attempt's, see [`Transaction::proposed_ticket`]).
    ticket: Arc<OnceCell<u64>>,
    /// This handle is a retry of its unit of work (`run`'s second attempt or later): it records the
    /// unit of work's ticket in the retries' class, older than every first attempt's.
    retry: bool,
    /// This handle is one of `run`'s attempts: the first may give itself up for a retry
    /// (`Settings::first_attempt_patience`, `Settings::yield_out_of_order`).
    in_run: bool,
    /// The ticket in this transaction's record, once this handle knows it: the only ticket it
    /// contends with (see `contention::Contender::ticket`).
    ticket_recorded: OnceCell<u64>,
    /// Where this unit of work holds a place in an item's queue, shared like `ticket`.
    places: places::Places,
    /// The places are this handle's alone (not a `run` attempt's, whose retries keep them): its
    /// commit or rollback, once finished, takes back the ones left.
    own_places: bool,
    /// Locks this handle has asked for (each lock wait, each item of a batch, a first read's lock
    /// kept from its record's creation; a resumed handle starts with its record's requests): each
    /// may be held until the transaction finishes. A
    /// waiter that holds no other lock is met by nobody, so it does not record what it waits for.
    lock_requests: std::sync::atomic::AtomicUsize,
    /// A lock attempt of this handle met another transaction (its lock or an older queue entry):
    /// while it waited, someone may have rolled it back.
    met_contention: AtomicBool,
}

pub(crate) use places::Places;

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
    /// Nonces of the one-request commits sent with the unrecorded requests folded in: a committed
    /// record carrying one of them holds every request of this handle.
    fold_nonces: Vec<String>,
    /// With `Settings::wait_in_ticket_order`: the waiters registered in the record as this handle
    /// last learned them (their count, `_TxJN`, and the entries by item), which a one-request
    /// commit carries into the items' queues.
    registrations: one_request::Registrations,
    /// With `Settings::record_on_demand`: the item read first is locked without a record, and its
    /// lock's first attempt went out then. Cleared once a commit without record is decided or the
    /// record is created (the lock is then trusted, or the transaction rolled back).
    unrecorded_lock_sent: Option<tokio::time::Instant>,
    /// Reads released to take an item in key order (`Settings::reorder_held_reads`), with what
    /// each read, until they are all taken back and found unchanged: while any is here, a commit
    /// is refused (the caller may hold a value the transaction no longer vouches for).
    released: BTreeMap<ItemRef, Option<crate::error::Item>>,
    /// `run`'s attempt runs its work again in this transaction: a read taken back in key order
    /// changed, and the handle holds every lock it asked for, with nothing written. Until `run`
    /// takes the flag, a commit is refused (the caller may hold the value that changed).
    restart: bool,
}

impl State {
    /// The lock this handle holds on `r`'s item (an invariant where it is called: the item is
    /// known and locked).
    fn held_mut(&mut self, r: &ItemRef) -> &mut crate::item_lock::LockInfo {
        self.items
            .get_mut(r)
            .expect("entry")
            .lock
            .as_mut()
            .expect("locked")
    }
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
        let mut tx = Transaction::with_ticket(inner, id, Arc::default(), Places::default(), false);
        tx.own_places = true;
        tx
    }

    /// A new transaction that inherits the ticket (and the places in items' queues taken with it)
    /// of earlier attempts of the same unit of work; `retry` for an attempt after the first.
    pub(crate) fn with_ticket(
        inner: Arc<Inner>,
        id: TxId,
        ticket: Arc<OnceCell<u64>>,
        places: Places,
        retry: bool,
    ) -> Transaction {
        Transaction {
            inner,
            id,
            state: tokio::sync::Mutex::new(State::default()),
            finished: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            ticket,
            retry,
            in_run: false,
            ticket_recorded: OnceCell::new(),
            places,
            own_places: false,
            lock_requests: Default::default(),
            met_contention: AtomicBool::new(false),
        }
    }

    /// This handle as one of `run`'s attempts (see [`Transaction::in_run`]).
    pub(crate) fn in_run(mut self) -> Transaction {
        self.in_run = true;
        self
    }

    /// Whether `run` runs its work again in this transaction, holding its locks (a read taken
    /// back in key order changed: see [`reorder`]); clears the request.
    pub(crate) async fn take_restart(&self) -> bool {
        std::mem::take(&mut self.state.lock().await.restart)
    }

    /// `Error::RolledBack` for this transaction: someone decided it while this handle worked.
    fn rolled_back(&self) -> Error {
        Error::RolledBack {
            tx_id: self.id.clone(),
        }
    }

    /// The items this handle read (a locked read of them was asked), in key order (table, then
    /// key): what a retry of its unit of work locks first (`Settings::run_relocks_reads`).
    pub(crate) async fn read_items(&self) -> Vec<(String, Item)> {
        let st = self.state.lock().await;
        let read: BTreeSet<ItemRef> = st
            .requests
            .iter()
            .filter(|q| q.op == crate::request::Op::Get)
            .map(Request::item_ref)
            .collect();
        read.iter()
            .filter_map(|r| st.items.get(r).map(|e| (e.table.clone(), e.key.clone())))
            .collect()
    }

    /// Takes locked reads of `items`, one after the other in the order given (key order, so that
    /// every coordinator doing this takes them in the same order).
    ///
    /// If a lock met contention, the record is read once they are all held: an older transaction
    /// may have rolled this one back while it waited, and a look that then took the item does not
    /// learn it. `Err(RolledBack)` then, before `run` hands the handle to the closure (which would
    /// run its work for nothing and learn the decision only at the commit).
    pub(crate) async fn lock_reads(&self, items: &[(String, Item)]) -> Result<()> {
        for (table, key) in items {
            let mut req = builders::blank_get();
            req.table = table.clone();
            req.key = key.clone();
            // As a read through the builders says it: a refusal for a conflict in flight is this
            // transaction's `Error::Conflict` (pending, retryable), not DynamoDB's raw error.
            self.read(req, None)
                .await
                .map_err(|e| e.in_transaction(&self.id))?;
        }
        if self.met_contention.load(Ordering::SeqCst) {
            let record_known = self.state.lock().await.meta.is_some();
            if self.decided_meanwhile(record_known).await? {
                tracing::debug!(tx = %self.id, "rolled back while relocking; the closure does not run");
                return Err(self.rolled_back());
            }
        }
        Ok(())
    }

    /// Whether this transaction's record, read now, shows it decided by someone else while this
    /// handle waited (a look that then took an item does not learn it). `record_known`: this
    /// handle knows its record exists; without it, no record (`Settings::record_on_demand`) and
    /// no tombstone means nothing decided it.
    async fn decided_meanwhile(&self, record_known: bool) -> Result<bool> {
        let c = &self.inner.client;
        let header = record::load_header(c, &self.inner.tx_table, &self.id).await?;
        Ok(match header.map(|h| h.state) {
            Some(TxState::Pending) => false,
            None => record_known,
            Some(_) => true,
        })
    }

    pub(crate) fn from_record(inner: Arc<Inner>, id: TxId, rec: record::Record) -> Transaction {
        // A resumed handle is the transaction others see in the record: it contends with the
        // record's ticket (a fresh one would make it younger in its own eyes only).
        let ticket = Arc::new(OnceCell::new_with(rec.header.ticket));
        let mut tx = Transaction::with_ticket(inner, id, ticket, Places::default(), false);
        tx.own_places = true;
        if let Some(t) = rec.header.ticket {
            let _ = tx.ticket_recorded.set(t);
        }
        {
            let mut st = tx.state.try_lock().expect("new transaction is not shared");
            st.meta = Some(rec.header.meta());
            st.recorded = rec.requests.len();
            tx.lock_requests.store(rec.requests.len(), Ordering::SeqCst);
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
    ///
    /// [`TransactionManager::resume`]: crate::TransactionManager::resume
    pub fn id(&self) -> &TxId {
        &self.id
    }

    /// Starts a put (a full replacement of an item) in this transaction.
    pub fn put_item(&self) -> PutItemBuilder<'_> {
        PutItemBuilder::new(self)
    }

    /// Starts an update of an item in this transaction.
    pub fn update_item(&self) -> UpdateItemBuilder<'_> {
        UpdateItemBuilder::new(self)
    }

    /// Starts a delete of an item in this transaction.
    pub fn delete_item(&self) -> DeleteItemBuilder<'_> {
        DeleteItemBuilder::new(self)
    }

    /// Starts a locked read: the item as this transaction sees it, locked until the transaction ends.
    pub fn get_item(&self) -> GetItemBuilder<'_> {
        GetItemBuilder::new(self)
    }

    /// The ticket to write in a new record: with `ticket_at_begin`, taken now (from the
    /// configured source) if this unit of work has none yet; otherwise the one it already has,
    /// if any. Every way of creating the record goes through here, so a record's ticket always
    /// comes from one source.
    async fn ticket_for_record(&self) -> Result<Option<u64>> {
        if let crate::settings::ContentionPolicy::Ordered {
            ticket_at_begin: true,
            ..
        } = self.inner.settings.contention
        {
            crate::ticket::take_once(&self.inner, &self.ticket).await?;
        }
        Ok(self.proposed_ticket())
    }

    /// The ticket this handle proposes for its record, if its unit of work has one: the unit of
    /// work's, in this attempt's class (a retry's is older than every first attempt's).
    fn proposed_ticket(&self) -> Option<u64> {
        let t = *self.ticket.get()?;
        Some(crate::ticket::for_attempt(t, self.retry))
    }

    /// The ticket this handle contends with as far as it knows now: its record's, or else the one
    /// its record will hold.
    fn known_ticket(&self) -> Option<u64> {
        self.ticket_recorded
            .get()
            .copied()
            .or_else(|| self.proposed_ticket())
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
    ///
    /// [`TransactionManager::resume`]: crate::TransactionManager::resume
    #[instrument(level = "info", skip_all, fields(tx = %self.id, outcome = tracing::field::Empty, error.kind = tracing::field::Empty))]
    pub async fn commit(self) -> Result<()> {
        let r = self
            .commit_inner()
            .await
            .map_err(|e| e.in_transaction(&self.id));
        // Its waiters of this manager look again (or were told the handover).
        self.inner.notices.ended(self.id.as_str());
        crate::metrics::commit_result(&r);
        crate::metrics::record_outcome(&r, "committed");
        self.finished.store(true, Ordering::SeqCst);
        self.leave_own_places().await;
        r
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
        .await
        .map_err(|e| e.in_transaction(&self.id));
        self.inner.notices.ended(self.id.as_str());
        self.finished.store(true, Ordering::SeqCst);
        crate::metrics::record_outcome(&r, "rolled_back");
        self.leave_own_places().await;
        r
    }

    /// Takes back the places this handle's transaction holds in items' queues, unless they belong
    /// to a `run` whose next attempt keeps them.
    async fn leave_own_places(&self) {
        if self.own_places {
            self.places.leave(&self.inner).await;
        }
    }

    /// Leaves the transaction as it is, without committing or rolling back, as if this process had
    /// died. Its record and locks stay until another coordinator or the sweeper resolves them.
    ///
    /// **Buffered writes are lost**: a `put_item`, `update_item` or `delete_item` sent without
    /// `ReturnValues` is kept in this handle until the commit records it, and `abandon` records
    /// nothing. A coordinator that resumes the transaction ([`TransactionManager::resume`]) sees
    /// only what the record holds (reads, and writes that were driven at once), and a commit there
    /// commits exactly that. To hand the transaction to another process with its writes, use
    /// [`hand_off`](Self::hand_off).
    ///
    /// [`TransactionManager::resume`]: crate::TransactionManager::resume
    pub fn abandon(self) {
        self.finished.store(true, Ordering::SeqCst);
    }

    /// Records every request of this handle in the transaction's record — buffered writes and
    /// reads included — and leaves the transaction pending for another coordinator: whoever
    /// resumes it by id ([`TransactionManager::resume`]) commits or rolls back exactly what this
    /// handle did. Returns the id to hand over; the handle is then finished (dropping it does
    /// nothing). Nothing is locked or applied beyond what was already (a write is locked and
    /// applied by the commit that follows the hand-off).
    ///
    /// A pending transaction is rolled back by a contender that needs its items once it has been
    /// idle for `dead_after` (or by the sweeper after `rollback_after`): resume it soon.
    ///
    /// ```no_run
    /// # async fn demo(manager: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// let tx = manager.begin();
    /// tx.update_item()
    ///     .table_name("Accounts")
    ///     .key("Id", AttributeValue::S("bob".into()))
    ///     .update_expression("SET balance = balance + :d")
    ///     .expression_attribute_values(":d", AttributeValue::N("5".into()))
    ///     .send()
    ///     .await?;
    /// let id = tx.hand_off().await?;
    /// // ... in another process, with `id`:
    /// manager.resume(&id).await?.commit().await?; // bob gets his 5
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// What recording can fail with: the transaction was then not handed off and the handle stays
    /// usable (call `hand_off` again — a lost answer is recognised, nothing is recorded twice —
    /// or roll back); [`Error::TransactionFinished`] on a finished handle.
    ///
    /// # Cancel safety
    /// Dropping the future midway may leave some requests unrecorded and the handle unusable for
    /// them; the transaction stays pending (rolled back by contenders or the sweeper), never
    /// half-applied.
    ///
    /// [`TransactionManager::resume`]: crate::TransactionManager::resume
    pub async fn hand_off(&self) -> Result<TxId> {
        let mut st = self.state.lock().await;
        if self.finished.load(Ordering::SeqCst) {
            return Err(Error::TransactionFinished {
                tx_id: self.id.clone(),
            });
        }
        self.flush_requests(&mut st, true)
            .await
            .map_err(|e| e.in_transaction(&self.id))?;
        self.finished.store(true, Ordering::SeqCst);
        Ok(self.id.clone())
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
