//! The shared context of a [`TransactionManager`](crate::TransactionManager): its client, table
//! names and [`Settings`], the [`ContentionPolicy`], and the retry backoff every layer uses. It sits
//! below every protocol module, so that the manager, the coordinator, contention and settling all
//! read their context from here instead of from each other.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use rand::Rng;

use crate::error::{Error, Result};
use crate::keys::{KeySchema, SchemaCache};

/// Tunable settings of a [`TransactionManager`](crate::TransactionManager). Build with
/// [`TransactionManagerBuilder`](crate::TransactionManagerBuilder).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// Most DynamoDB requests one transaction keeps in flight at once (locks, applies, unlocks).
    pub concurrency: usize,
    /// Attempts to lock one item before giving up with [`Error::ItemLocked`]. Under
    /// [`ContentionPolicy::Ordered`] an attempt that finds a new holder after the last one was
    /// resolved (completed, or rolled back) does not count: that is progress, bounded by
    /// `lock_wait`; only a holder resolved before and met again counts.
    pub lock_attempts: u32,
    /// Most items committed by the one-request commit path (a single `TransactWriteItems` that applies
    /// every write, unlocks every item and commits the record). Larger transactions apply, commit and
    /// unlock in phases. 0 disables the one-request path.
    pub one_shot_max_items: usize,
    /// Commit transactions that only write (no reads, no `ReturnValues`) of up to 99 items with a
    /// single `TransactWriteItems` and no locks: every write conditional on its item not being
    /// locked, plus the record written as committed. Falls back to the locking protocol when an item
    /// is locked.
    pub write_only_fast_path: bool,
    /// Whether the write-only fast path marks what it writes so that the change feed
    /// (`dynamodb_transactions::feed`) delivers its transactions whole: each put and update carries
    /// the transaction's id in `_TxM` (about 40 bytes per item; library reads never show it), and
    /// the record, created in the same request, names the items written (`_TxL`: table and key of
    /// each). A transaction that deletes an item then takes the locking path instead (two
    /// requests instead of one): a delete leaves no item to mark. Unmarked, the fast path's writes
    /// reach the feed as single changes. Default [`FastPathStamps::WhenStreamed`]: marked when a
    /// table the transaction writes has a stream with both images, as the table was described when
    /// this manager first used it.
    ///
    /// ```
    /// use dynamodb_transactions::{FastPathStamps, Settings};
    /// let mut s = Settings::default();
    /// // A stream turned on after the coordinators started: mark every fast-path transaction.
    /// s.fast_path_stamps = FastPathStamps::Always;
    /// ```
    pub fast_path_stamps: FastPathStamps,
    /// How a locked read ([`Transaction::get_item`](crate::Transaction::get_item)) records its
    /// request and locks its item. Default [`LockedReads::RecordWithLock`]: one round trip per
    /// read, and the record names every lock unless its coordinator died during that round trip.
    /// See docs/PROTOCOL.md "One round trip per locked read".
    ///
    /// ```
    /// use dynamodb_transactions::{LockedReads, Settings};
    /// let mut s = Settings::default();
    /// // Two round trips per read, and no lock its record does not name, ever.
    /// s.locked_reads = LockedReads::RecordThenLock;
    /// ```
    pub locked_reads: LockedReads,
    /// Attempts of [`TransactionManager::run`](crate::TransactionManager::run) before it gives up.
    pub run_attempts: u32,
    /// When [`TransactionManager::run`](crate::TransactionManager::run) retries a unit of work,
    /// the new attempt first takes locked reads of the items the failed attempt read, in key order
    /// (table, then key), before it runs the closure again; the closure's own reads of those items
    /// then cost nothing. Two units of work that read the same items in opposite orders then lock
    /// them in one order from their second attempt on, so wound-wait no longer has to break that
    /// cycle again and again: the order a user reads in stops mattering after the first conflict.
    /// An item the new attempt no longer reads stays locked (read) until it ends, which is safe
    /// (a read lock) and costs only its request. Default on; off, a retry runs the closure with
    /// nothing locked.
    pub run_relocks_reads: bool,
    /// First backoff of retries; doubles each attempt, with full jitter.
    pub backoff_base: Duration,
    /// Longest backoff of retries.
    pub backoff_max: Duration,
    /// Attempts of a read at `Committed` isolation that finds the item changing under it.
    pub committed_read_attempts: u32,
    /// Whether dropping an unfinished [`Transaction`](crate::Transaction) rolls it back in the
    /// background (needs a Tokio runtime). When false, dropping only abandons it: other coordinators
    /// or the sweeper roll it back later.
    pub rollback_on_drop: bool,
    /// How long to wait for created tables to become ACTIVE.
    pub table_wait: Duration,
    /// What to do when an item is locked by another pending transaction.
    pub contention: ContentionPolicy,
    /// Where [`ContentionPolicy::Ordered`] takes tickets from: the shared counter (default, one
    /// request on one item per ticket) or the coordinator's clock (no request, no shared item).
    pub ticket_source: TicketSource,
    /// Longest a lock attempt waits for an older transaction (ordered contention) before giving up
    /// with [`Error::ItemLocked`].
    pub lock_wait: Duration,
    /// Ordered contention: how long an older transaction lets a younger, running (not blocked)
    /// holder of an item finish before rolling it back (and how long it gives a lock whose
    /// record is not found yet before deciding it). 500 ms by default: the younger holder is most
    /// often on its way to its commit, or itself giving a younger holder its grace, and rolling it
    /// back costs its whole unit of work a second attempt (see docs/PERFORMANCE.md for the figures
    /// of 100 ms against 500 ms). A smaller grace preempts a slow younger holder sooner.
    pub wound_grace: Duration,
    /// Ordered contention: an older transaction waits for a strictly younger holder whose record
    /// shows no wait of its own (running, in its grace, or rolling someone back) for as long as
    /// that stays so, within `lock_wait`, instead of rolling it back once `wound_grace` is over.
    /// It judges the holder again at every poll, and rolls it back as before once the holder
    /// records a wait for a transaction no older than itself. Fewer attempts are rolled back;
    /// an older transaction may wait as long as a younger one runs. Off by default; model-checked
    /// (`tests/model_contention/judge.rs`, docs/PROTOCOL.md "What the hot-item goals still need").
    pub wait_for_running_holders: bool,
    /// Ordered contention: how long [`run`](crate::TransactionManager::run)'s first attempt
    /// waits at one item, holding no other lock, before it gives that attempt up when what it
    /// waits for is a retry (which outranks every first attempt): `run` then retries it, in the
    /// retries' class, with the unit of work's own ticket, older than those of the retries that
    /// arrived after it. Without it, a stream of retries (one per wound-wait cycle broken) goes
    /// ahead of a first attempt for as long as they keep coming. The attempt gives up only a
    /// record and a wait: it holds no lock. It yields only to a retry whose unit of work drew its
    /// ticket after its own (one that outranks it by its class alone), and only `run`'s first
    /// attempt does (the retry it becomes never does), so a unit of work gives up at most one
    /// attempt so. 2 s by default, about twice the median transfer through the DynamoDB profile
    /// at 16 workers on 4 accounts (at 1 s, half the units of work gave their first attempt up,
    /// and retries met each other: up to 3 attempts); `lock_wait` or more turns it off.
    /// Transactions outside `run` never give up so (they have no retry to make).
    pub first_attempt_patience: Duration,
    /// Ordered contention: `run`'s first attempt that meets contention on an item below (in key
    /// order) one it holds gives the attempt up at once, and its retry relocks what it read in key
    /// order. On by default: through the DynamoDB profile it moves 7% more transfers read from
    /// then to, with fewer requests (docs/PERFORMANCE.md "Out of key order, a first attempt
    /// yields at once"); off, such an attempt waits holding its items, as before.
    pub yield_out_of_order: bool,
    /// A lock that meets contention on an item below (in key order) items the transaction holds
    /// only for reading (read, nothing written to them, existing items) releases those reads,
    /// waits for the item, then takes them back in key order, checking each against what it read:
    /// the values its caller already has are still true once the transaction holds every lock, so
    /// a transaction that read from then to waits in key order without a retry. A read found
    /// changed (or any failure once a read is released) rolls the transaction back
    /// (`Error::RolledBack`, which `run` retries); in `run`, a read found changed with every
    /// lock held again and nothing written runs the work again in the same transaction instead,
    /// holding its locks. It goes before [`yield_out_of_order`](Self::yield_out_of_order) where
    /// both apply, and applies to every transaction, not only `run`'s. Not with
    /// [`wait_in_ticket_order`](Self::wait_in_ticket_order). On by default: through the DynamoDB
    /// profile transfers read from then to move 3–9% more, and on both engines their p99 falls
    /// to within about 3× their p50 (3.3–7.0× off; docs/PERFORMANCE.md "Reads taken back in key
    /// order"); off, such a lock waits holding the reads, or `run`'s first attempt gives itself
    /// up.
    pub reorder_held_reads: bool,
    /// With [`reorder_held_reads`](Self::reorder_held_reads): a read released to take an item
    /// below it in key order leaves the transaction's turn at its item (the oldest waiter's mark,
    /// [`mark_oldest_waiter`](Self::mark_oldest_waiter)), in the same write as the release, so
    /// that no younger transaction takes the item before it is taken back. Off by default: the
    /// item is then free for anyone while the transaction waits below it, and taking it back is an
    /// ordinary wait in ticket order. Through the DynamoDB profile, transfers read from then to
    /// moved 16.3–17.5 against 14.0–15.0 tx/s with it off (seven runs each, alternated), with a
    /// third fewer requests (34–40 against 51–56 a transfer): a kept turn idles the item for as
    /// long as its transaction waits below it (docs/PERFORMANCE.md "Reads taken back in key
    /// order"). On, fewer reads taken back have changed, at the cost of that idle time.
    pub reorder_keeps_turn: bool,
    /// When set, finalized TX records get a TTL attribute (`_TxE`, epoch seconds) this far in the
    /// future, so DynamoDB deletes them for free once TTL is enabled on the table.
    pub record_ttl: Option<Duration>,
    /// Take the locks of a commit in `TransactWriteItems` instead of one `UpdateItem` per item: a
    /// transaction of up to 99 items writes its record and every lock in one request (then commits
    /// in one more: 2 requests and 2 round trips), a larger one its locks in requests of up to 99
    /// after its record, then reads the before-images with `BatchGetItem`. A lock inside
    /// `TransactWriteItems` costs 2 write units instead of 1 (and a batched lock of an update
    /// carries padding the size of the update's values plus 135 bytes, removed by the commit):
    /// turn this off to lock item by item (N + 2 requests, fewer write units). A batch that meets a
    /// locked or absent item falls back to per-item locks for it. Default on.
    pub batch_locks: bool,
    /// Transactions larger than [`one_shot_max_items`](Self::one_shot_max_items) (committed in
    /// phases) apply their writes after the commit point, each in the write that unlocks its item,
    /// instead of before it: one write per item fewer (lock, then apply-and-unlock). Only writes
    /// locked in a batch (`batch_locks`) whose outcome the library knows before the commit qualify:
    /// deletes and puts, and updates whose result it computes from the item read under the lock,
    /// without a condition or with one it judges to hold (see
    /// [`judge_conditions`](Self::judge_conditions)); every other write is applied before the
    /// commit, as without this setting. Readers at `Committed` see such an item's new version as soon as
    /// the transaction commits. Default on; off, every write is applied before the commit (one
    /// more write per item). Only versions that know roll-forward complete such transactions
    /// correctly (an older one would release a marked lock without applying its write): upgrade
    /// every coordinator and sweeper before large transactions roll forward. Whoever completes a
    /// transaction applies the writes it rolled forward whatever this setting says. See
    /// docs/PROTOCOL.md "Roll-forward".
    pub roll_forward: bool,
    /// With [`roll_forward`](Self::roll_forward): a write with a `ConditionExpression` rolls
    /// forward when the library judges the condition to hold on the item read under the lock (the
    /// item cannot change while locked); the write after the commit still carries the condition,
    /// so should DynamoDB judge otherwise, it refuses the write and the item stays locked (reported
    /// by whoever completes the transaction) rather than changed against its condition. A condition
    /// judged not to hold is left to DynamoDB before the commit, which rolls the transaction back
    /// with [`Error::ConditionFailed`](crate::Error::ConditionFailed) as before. Default on; off,
    /// only a condition that asks an absent item to be absent rolls forward, and every other
    /// conditional write is applied before the commit (one more write per item).
    pub judge_conditions: bool,
    /// Under [`ContentionPolicy::Ordered`], a transaction that waits for the pending holder of an
    /// item registers its ticket in the holder's record; whoever completes the holder writes those
    /// entries onto the item with its unlock (`_TxQ`, `_TxQF`), and every lock attempt on an
    /// existing item is conditional on no live entry on it being older than the attempt's ticket.
    /// A waiter refused by an older entry on an unlocked item (no holder to register with)
    /// writes its own entry on the item, conditional on it still unlocked and its queue as read.
    /// A newcomer (with a ticket or without) then never takes an item ahead of a live registered
    /// waiter with an older ticket. Entries expire after [`queue_ttl`](Self::queue_ttl) unless
    /// renewed; a unit of work that gives up for good (`run` returning, or a `begin` handle's
    /// failed commit or rollback) takes its entries off the items that are free, and withdraws
    /// them in the holder's record where an item is locked (its unlock then leaves them out), so
    /// that the ones behind it need not wait for them to expire. Readers never see the queue's
    /// attributes.
    ///
    /// Off by default. With the setting on, [`batch_locks`](Self::batch_locks) and the
    /// [`write_only_fast_path`](Self::write_only_fast_path) take only items that carry no queue
    /// (the others are locked on their own, waiting in it). The one-request commit carries the
    /// registrations its coordinator knows into the items' queues and lands only if the record
    /// counts no other (a waiter that registered since cancels it, and the next attempt carries
    /// that waiter too); a phased commit, and whoever else completes a transaction, reads its
    /// record and its items after the decision, before unlocking them.
    /// Ignored under [`ContentionPolicy::RollBackOthers`]. Give every coordinator and sweeper of
    /// one transactions table the same value: one with the setting off neither respects the
    /// queues nor carries the registrations of the transactions it completes. See
    /// docs/PROTOCOL.md "Waiting in ticket order".
    ///
    /// ```no_run
    /// # async fn f(client: aws_sdk_dynamodb::Client) {
    /// use std::time::Duration;
    /// let manager = dynamodb_transactions::TransactionManager::builder(client)
    ///     .configure(|s| {
    ///         s.wait_in_ticket_order = true;
    ///         s.queue_ttl = Duration::from_secs(3);
    ///     })
    ///     .build();
    /// # }
    /// ```
    pub wait_in_ticket_order: bool,
    /// With [`wait_in_ticket_order`](Self::wait_in_ticket_order): how long a waiter's entry counts
    /// after it was last written (a waiter renews it at most every third of this while it waits;
    /// one that crashed or gave up stops counting this long after). Compared with each caller's
    /// clock: clock skew lengthens or shortens it by the skew.
    pub queue_ttl: Duration,
    /// A transaction's record is written only once it needs one: its first locked read
    /// ([`Transaction::get_item`](crate::Transaction::get_item)) takes the item's lock alone,
    /// and a transaction that then writes only that item commits with one conditional write on
    /// it (apply and unlock together) and never writes a record. A read-modify-write of one item
    /// (a counter) costs two single-item requests instead of a record's creation, a lock and a
    /// `TransactWriteItems`, and holds the item about one round trip. A transaction that goes on
    /// to another item, a write applied early or a hand-off creates its record then, naming the
    /// read. See docs/PROTOCOL.md "A record only when needed".
    ///
    /// Until the record exists, the lock carries the holder's ticket (when its unit of work has
    /// one: a retry, or any transaction with [`ContentionPolicy::Ordered`]'s `ticket_at_begin`),
    /// and whoever meets it judges the holder by that ticket as by a record's: an older holder
    /// is waited for while its lock is younger than `dead_after`.
    ///
    /// On by default: a transaction that reads two items and writes them (a transfer) sends one
    /// request fewer (4), on the same 3 round trips, and a hot counter's holds are a round trip
    /// instead of a `TransactWriteItems`'s, so it moves more than twice the increments
    /// (docs/PERFORMANCE.md "Hot items"). What it costs, and why you might turn it off:
    /// - a crashed coordinator's lock is in no record, so only a contender or a sweep that scans
    ///   its table releases it: the sweeper scans every table where such locks were taken
    ///   ([`SweepOptions::scan_unrecorded_tables`](crate::sweeper::SweepOptions::scan_unrecorded_tables),
    ///   on by default; each such table read whole once a day, a slice at a time, see
    ///   [`unrecorded_scan_period`](crate::sweeper::SweepOptions::unrecorded_scan_period)),
    ///   and releases such a lock once it is `rollback_after` old. The lock carries no change
    ///   (readers see through it), but a large table's scan costs read units;
    /// - the first such lock of a manager on a table costs one more request, which lists the
    ///   table for the sweeper;
    /// - a holder whose lock carries no ticket is given [`wound_grace`](Self::wound_grace) by
    ///   any contender and then rolled back (under a tombstone), as a record without a ticket
    ///   would be, and so is one whose lock is `dead_after` old;
    /// - the change feed learns of such a transaction from its one write (its commit, or its
    ///   lock's release), which marks the item when the fast path would
    ///   ([`fast_path_stamps`](Self::fast_path_stamps)), 40 bytes on the item (docs/FEED.md).
    ///
    /// Ignored with [`wait_in_ticket_order`](Self::wait_in_ticket_order) (waiters register in
    /// the holder's record).
    ///
    /// ```no_run
    /// # async fn f(client: aws_sdk_dynamodb::Client) {
    /// // Every transaction writes its record from its first locked read: no table to scan.
    /// let manager = dynamodb_transactions::TransactionManager::builder(client)
    ///     .configure(|s| s.record_on_demand = false)
    ///     .build();
    /// # }
    /// ```
    pub record_on_demand: bool,
    /// A waiter writes its ticket on the item it waits for (the item's *mark*, `_TxH`, with an
    /// expiry [`queue_ttl`](Self::queue_ttl) away, renewed while it waits) when no older live
    /// mark is there, and a lock attempt of a younger or ticketless transaction is refused while
    /// the mark lives: a freed item goes to the oldest waiter that marked it, not to whoever
    /// looks first (the transaction that just released it, starting its next unit of work,
    /// most often). One more write on the item per waiter that becomes the oldest; none on the
    /// uncontended path, whose lock only adds the mark to its condition.
    ///
    /// A waiter that holds no other lock and meets a holder behind an older live mark waits
    /// for that mark without judging the holder: it reads no record. A waiter behind an older
    /// live mark puts its entry in the item's line behind the mark (`_TxHL`, one more write on
    /// the item per waiter), and the lock that takes the item makes the line's next waiter the
    /// mark in the same write: the next holder is marked before the item is free again.
    ///
    /// On by default (docs/PROTOCOL.md "The oldest waiter's mark"; model-checked at one item
    /// and across items inside wound-wait). Through the DynamoDB profile it cuts hot items'
    /// tails 3–4× (p99 / p50 about 4 on contended transfers, 2 on a hot counter) and halves
    /// the waiters' reads, for 3–9% of their goodput. Turn it off where a hot item's goodput
    /// matters more than the order its waiters get it in: with
    /// [`record_on_demand`](Self::record_on_demand) (the default), a hot counter moves about
    /// 1.4× the increments without marks, since a freed item then goes to whichever waiter
    /// looks first instead of waiting for the marked waiter's next look. A waiter that crashes
    /// while marked keeps younger transactions off the free item until its mark expires
    /// (`queue_ttl`).
    ///
    /// Only under [`ContentionPolicy::Ordered`], and ignored with
    /// [`wait_in_ticket_order`](Self::wait_in_ticket_order) (the item's queue orders the
    /// waiters). Batched locks and the write-only fast path do not read the mark.
    ///
    /// ```no_run
    /// # async fn f(client: aws_sdk_dynamodb::Client) {
    /// let manager = dynamodb_transactions::TransactionManager::builder(client)
    ///     .configure(|s| s.mark_oldest_waiter = false)
    ///     .build();
    /// # }
    /// ```
    pub mark_oldest_waiter: bool,
    /// With [`mark_oldest_waiter`](Self::mark_oldest_waiter): a waiter with another waiter
    /// between it and the mark (second or further back in the line behind it, as its last look
    /// found it) looks at the item by reading it, one strongly consistent `GetItem`, instead of
    /// attempting its lock, and attempts the lock at once when the read shows the item free for
    /// it. The marked waiter and the next in line, one of which takes the item next, attempt the
    /// lock at every look, as does a waiter holding other locks (it judges the holder).
    ///
    /// A refused lock attempt is a write: DynamoDB bills it a write unit, and it counts against
    /// the item's write throughput (1,000 units a second per partition); a read is billed a read
    /// unit (a fifth of a write's price on demand) and leaves the item's writes alone. Through
    /// the DynamoDB profile, writes under contention fall by a quarter (transfers read from then
    /// to) to almost a half (a hot counter) for about as many reads, at the same goodput. Off by
    /// default for those reads, which are polls: where a look takes a millisecond (DynamoDB
    /// Local) a contended transfer's waiters read 84–96 times a second, against 3–12 with it off
    /// (docs/PERFORMANCE.md "Looks by reading far back in the line"). Turn it on where a hot
    /// item's write units cost or throttle more than its reads.
    ///
    /// ```no_run
    /// # async fn f(client: aws_sdk_dynamodb::Client) {
    /// let manager = dynamodb_transactions::TransactionManager::builder(client)
    ///     .configure(|s| s.line_looks_read = true)
    ///     .build();
    /// # }
    /// ```
    pub line_looks_read: bool,
    /// With [`mark_oldest_waiter`](Self::mark_oldest_waiter) and
    /// [`record_on_demand`](Self::record_on_demand): a transaction that commits with one write on
    /// the one item it read without a record hands the item over in that write to the item's
    /// oldest live waiter, when that waiter is one that would lock it without a record too: the
    /// write applies the update and writes the waiter's lock, so the item is never free between
    /// the two, nobody else can take it first, and the waiter learns at its next look that it
    /// holds it. Such a waiter names itself (its transaction id) in its mark or its entry in the
    /// line behind the mark. While a lock handed over holds the item (a chain of handovers), the
    /// marked waiter and the next in line look by strongly consistent reads, up to six in
    /// flight, one every sixth of a look and never more than one every 2 ms: the next handover
    /// is seen a fraction of a round trip after it lands, and the looks write nothing. On
    /// DynamoDB each such read costs one read unit (an item under 4 KB): at most 500 a second
    /// per watching waiter, two waiters per hot item. A holder that hands the item to a waiter
    /// of the same manager (tasks of one process sharing it) tells it in process, with the item
    /// as its commit left it, whether the waiter watches or sleeps between looks: that waiter
    /// holds the lock when the commit's answer comes back, not a look later. Whatever this
    /// setting, a waiter under tickets that holds no other lock, has its place on the item
    /// ([`mark_oldest_waiter`](Self::mark_oldest_waiter)) and meets it held by a transaction of
    /// its own manager sends nothing while that holder holds it: it is told the handover or the
    /// item is let go in process, and it looks again at the latest
    /// `min(wound_grace, queue_ttl / 3)` after its last look.
    ///
    /// The write is conditional on the waiter's place being there and live; when it is not
    /// (the waiter left, or its mark expired), the commit is sent again as a plain unlock: one
    /// more round trip. A waiter that stops waiting without the lock looks once more and
    /// releases a lock handed to it. One that crashes (or whose future is dropped) after
    /// naming itself may be handed the item: that lock is one without record like any other,
    /// which whoever meets it releases after [`wound_grace`](Self::wound_grace), and the
    /// sweeper releases if nobody does (docs/PROTOCOL.md "Handing the item over").
    ///
    /// On by default. Through the DynamoDB profile a hot counter (32 coordinators incrementing
    /// one item) commits about 16% more a second with it, with a shorter p99; on
    /// DynamoDB Local, whose one core serves the watching reads too, about 17% fewer
    /// (docs/PERFORMANCE.md "Handing the item over"). Turn it off to spend no reads on watching:
    ///
    /// ```no_run
    /// # async fn f(client: aws_sdk_dynamodb::Client) {
    /// let manager = dynamodb_transactions::TransactionManager::builder(client)
    ///     .configure(|s| s.hand_over = false)
    ///     .build();
    /// # }
    /// ```
    pub hand_over: bool,
}

impl Settings {
    pub(crate) fn record_ttl_secs(&self) -> Option<u64> {
        self.record_ttl.map(|d| d.as_secs().max(1))
    }

    /// Whether waiting follows the items' queues: [`Settings::wait_in_ticket_order`] under
    /// ordered contention.
    pub(crate) fn queues(&self) -> bool {
        self.wait_in_ticket_order && matches!(self.contention, ContentionPolicy::Ordered { .. })
    }

    /// Whether a waiter that would lock an item without a record names itself in its places at
    /// the item, for its holder to hand the item over ([`Settings::hand_over`]).
    pub(crate) fn hands_over(&self) -> bool {
        self.hand_over && self.record_on_demand && self.head_marks()
    }

    /// Whether waiters mark the items they wait for: [`Settings::mark_oldest_waiter`] under
    /// ordered contention, without the items' queues.
    pub(crate) fn head_marks(&self) -> bool {
        self.mark_oldest_waiter
            && !self.queues()
            && matches!(self.contention, ContentionPolicy::Ordered { .. })
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: 128,
            lock_attempts: 6,
            one_shot_max_items: 98,
            write_only_fast_path: true,
            fast_path_stamps: FastPathStamps::WhenStreamed,
            locked_reads: LockedReads::RecordWithLock,
            run_attempts: 10,
            run_relocks_reads: true,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(500),
            committed_read_attempts: 4,
            rollback_on_drop: true,
            table_wait: Duration::from_secs(300),
            contention: ContentionPolicy::default(),
            ticket_source: TicketSource::Counter,
            lock_wait: Duration::from_secs(10),
            wound_grace: Duration::from_millis(500),
            wait_for_running_holders: false,
            first_attempt_patience: Duration::from_secs(2),
            yield_out_of_order: true,
            reorder_held_reads: true,
            reorder_keeps_turn: false,
            record_ttl: None,
            batch_locks: true,
            roll_forward: true,
            judge_conditions: true,
            wait_in_ticket_order: false,
            queue_ttl: Duration::from_secs(3),
            record_on_demand: true,
            mark_oldest_waiter: true,
            line_looks_read: false,
            hand_over: true,
        }
    }
}

/// When the write-only fast path ([`Settings::write_only_fast_path`]) marks its writes for the
/// change feed ([`Settings::fast_path_stamps`]; docs/FEED.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FastPathStamps {
    /// When a table the transaction writes has a DynamoDB stream with `NEW_AND_OLD_IMAGES` (what
    /// the feed reads), as `DescribeTable` said when the manager first used the table (once per
    /// table and manager): a stream turned on later is seen by managers built after it.
    #[default]
    WhenStreamed,
    /// Always.
    Always,
    /// Never: the fast path's writes reach the feed as single changes, and deletes keep the fast
    /// path.
    Never,
}

/// How a locked read inside a transaction records its request in the transaction's record and
/// locks its item ([`Settings::locked_reads`]; docs/PROTOCOL.md "One round trip per locked read").
///
/// Whoever completes a transaction (its coordinator, another handle, a contender that rolls it
/// back, the sweeper) settles the items its record names. A lock the record does not name, which
/// only a read takes, carries no change: readers see through it, nobody releases it while the
/// transaction is pending, and once it is decided whoever meets it releases it; a sweep of the
/// items ([`SweepOptions::tables_to_scan`](crate::sweeper::SweepOptions::tables_to_scan)) finds the
/// ones nobody meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LockedReads {
    /// The read's request is recorded, then its item is locked: two round trips and two requests
    /// per read, and the record names every lock before it is taken. `N` reads and a commit: `2N + 1`
    /// requests, all sequential.
    RecordThenLock,
    /// The record's write (its creation for the first read, an append after) and the lock go out
    /// together: one round trip and two requests per read. The record names every lock unless the
    /// coordinator died (or lost the record write's answer and then died) during that round trip:
    /// at most one lock per crashed handle. `N` reads and a commit: `2N + 1` requests on a critical
    /// path of `N + 1` round trips.
    #[default]
    RecordWithLock,
    /// Once the record exists a read sends only its lock, and its request is recorded with the
    /// record's next write (a commit that has only held reads left to record records nothing for
    /// them); the first read's lock goes with the record's creation. `N` reads and a commit:
    /// `N + 2` requests on `N + 1` round trips. The cost: a read's lock the record does not name is
    /// not found by whoever completes the transaction when this handle dies (a crash, `abandon`)
    /// or another handle decides it, which leaves every such lock of the handle on its item,
    /// unapplied, until a transaction that needs the item or a sweep of the items meets it.
    LockThenRecord,
}

/// How a transaction treats another, pending transaction that holds an item it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContentionPolicy {
    /// Roll the other transaction back at once, whatever its age (the Java library's behaviour).
    /// Competing coordinators can roll each other back repeatedly under heavy contention.
    RollBackOthers,
    /// Tickets order contending transactions (wound-wait). A transaction takes a ticket (from the
    /// [`Settings::ticket_source`]: an atomic counter by default, or the coordinator's clock) the
    /// first time it meets contention, and keeps it when
    /// [`TransactionManager::run`](crate::TransactionManager::run) retries it, so it only ever
    /// gets older. The ticket lives in the transaction's record, written once and never changed,
    /// and every handle of the transaction contends with that ticket: a handle made by
    /// [`TransactionManager::resume`](crate::TransactionManager::resume) starts with it, and a
    /// handle whose record already got a ticket from another handle adopts that one.
    /// Meeting a lock of a pending transaction:
    /// - if the holder is older (smaller ticket), wait for it (back off and retry the lock);
    /// - if it is younger or has no ticket, roll it back;
    /// - whatever its ticket, roll it back if its record has not been touched for `dead_after`
    ///   (its coordinator is presumed dead; waiting coordinators touch their record as they wait).
    ///
    /// Waits only go from younger to older transactions (as their records say, which is why a
    /// handle never contends with another ticket than its record's), so no cycle of waits can
    /// form: deadlock is impossible. A rollback decides exactly what was judged: it is one
    /// conditional request that lands only while the other transaction's record is still as it
    /// was read (same version; still no ticket or a younger one, or, if judged dead, untouched
    /// since) and this transaction's own record is still pending. So the transaction whose record
    /// holds the oldest ticket is never rolled back by another one's ticket rule (only when dead),
    /// and every transaction eventually commits.
    Ordered {
        /// How long a pending transaction's record may stay untouched before others treat its
        /// coordinator as dead.
        dead_after: Duration,
        /// Take the ticket when the transaction first writes its record (with the counter, one
        /// more request per transaction; with the clock, none), instead of at its first
        /// contention. Orders transactions by when they began, which is fairer under heavy
        /// contention; the counter item then takes one write per transaction (DynamoDB allows
        /// about 1,000 writes per second on one item).
        ticket_at_begin: bool,
    },
}

impl Default for ContentionPolicy {
    fn default() -> Self {
        ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(10),
            ticket_at_begin: false,
        }
    }
}

/// What every protocol step needs: the client, the tables, the settings, the key schemas.
#[derive(Debug)]
pub(crate) struct Inner {
    pub client: Client,
    pub tx_table: String,
    pub image_table: String,
    pub settings: Settings,
    pub schemas: SchemaCache,
    /// The user tables this manager listed as holding locks taken without a record.
    pub unrecorded_tables: crate::record::unrecorded_tables::Registered,
    /// This manager's waiters watching for a handover, which its holders tell in process.
    pub notices: crate::item_lock::notice::Notices,
}

impl Inner {
    /// The key schema of `table` (described once, then cached).
    pub(crate) async fn schema(&self, table: &str) -> Result<Arc<KeySchema>> {
        if table.is_empty() {
            return Err(Error::invalid("TableName must not be empty"));
        }
        self.schemas.get(&self.client, table).await
    }

    /// Whether writes to `table` that stand for a whole transaction carry its id for the change
    /// feed (`_TxM`; [`Settings::fast_path_stamps`]). A table whose schema is not cached counts
    /// as streamed.
    pub(crate) fn marks_writes_to(&self, table: &str) -> bool {
        match self.settings.fast_path_stamps {
            FastPathStamps::Never => false,
            FastPathStamps::Always => true,
            FastPathStamps::WhenStreamed => self.schemas.cached(table).is_none_or(|s| s.streamed),
        }
    }
}

/// Sleeps before retry `attempt` (0-based): full jitter over an exponentially growing window.
pub(crate) async fn backoff(settings: &Settings, attempt: u32) {
    let cap = settings.backoff_max.as_micros() as u64;
    let window = (settings.backoff_base.as_micros() as u64)
        .saturating_mul(1u64 << attempt.min(20))
        .min(cap)
        .max(1);
    let us = rand::rng().random_range(0..=window);
    tokio::time::sleep(Duration::from_micros(us)).await;
}

/// Where [`ContentionPolicy::Ordered`](crate::ContentionPolicy::Ordered) takes a transaction's
/// ticket (its age) from. Set it in [`Settings::ticket_source`](crate::Settings::ticket_source).
///
/// Both sources give tickets that are compared the same way (smaller is older) and live in the
/// transaction's record, written once; [`TransactionManager::run`](crate::TransactionManager::run)
/// keeps one ticket across its retries (recorded in the retries' class: every retry is older than
/// every first attempt) and
/// [`TransactionManager::resume`](crate::TransactionManager::resume) adopts the record's, whatever
/// its source. Coordinators of one transactions table may use different sources (while a setting
/// is rolled out, say): counter tickets are far smaller than clock tickets, so they count as
/// older; the order stays total and safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TicketSource {
    /// One atomic `ADD` on the counter row (`~ticket-counter`) of the transactions table per
    /// ticket. Tickets are unique and strictly in the order they were taken, but every contending
    /// transaction writes the same item: DynamoDB allows about 1,000 writes per second on one item,
    /// which caps how many transactions per second can meet contention.
    #[default]
    Counter,
    /// The coordinator's clock: epoch microseconds × 2048 plus an 11-bit random tie-breaker (and,
    /// within one process, always larger than the previous one). No request and no shared item.
    /// Tickets are unique with overwhelming probability; two equal tickets (another process, same
    /// microsecond, same random bits) neither wait for nor wound each other, which costs time, not
    /// safety. A clock that runs ahead makes its transactions look younger, one that lags makes
    /// them look older: skew costs fairness only. Keep the clocks synchronised (NTP) so that "older"
    /// means "began (or met contention) earlier". With the clock, taking the ticket as a
    /// transaction begins ([`ContentionPolicy::Ordered`]'s `ticket_at_begin`) costs nothing and
    /// orders transactions by when they began.
    Clock,
}
