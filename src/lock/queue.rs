//! A fair (FIFO) ticket queue lock.
//!
//! # How it works
//!
//! Each acquire takes the next ticket `t` of the lock's counter and writes its queue row
//! `{pk: name, sk: "<namespace>#q#<t, zero-padded to 38 digits>"}` **in one `TransactWriteItems`**:
//! the counter update is conditional on the counter still being `t - 1`, the row put on the row not
//! existing. So a ticket exists exactly when its row was committed before any higher ticket was
//! issued, and a waiter's strongly consistent Query can never be overtaken by a lower ticket whose
//! row is not written yet (the race of the naive "increment, then insert" design).
//!
//! The acquirer then polls (strongly consistent, paginated Query of the rows up to its own) until
//! no live row is ahead of its own. Holders and waiters heartbeat their rows; a row whose heartbeat
//! stopped is judged dead (see [`Expiry`]) and deleted with a condition on the heartbeat value that
//! was judged, so a row that renewed in the meantime is never deleted. Release deletes the row.
//!
//! The ticket is the fencing token: tickets are granted in increasing order, and a ticket whose row
//! was deleted can never be granted later.
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), dynamodb_transactions::lock::LockError> {
//! use std::time::Duration;
//! use dynamodb_transactions::lock::Wait;
//! use dynamodb_transactions::lock::queue::QueueLock;
//!
//! let locks = QueueLock::builder(client).table("locks").lease_duration(Duration::from_secs(10)).build()?;
//! locks.create_table().await?;
//! let guard = locks.acquire("invoice-42", Wait::For(Duration::from_secs(30))).await?;
//! println!("holding ticket {}", guard.fencing_token());
//! // ... work, passing the fencing token to the resource ...
//! guard.release().await?;
//! # Ok(()) }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use tokio::time::Instant;

use super::counter::read_counter;
use super::heartbeat::{BeatFn, BeatOutcome, Heartbeat, LostSignal};
use super::util::*;
use super::{Clock, Expiry, LockError, SharedClock, SystemClock, Wait};
use crate::{Error, Item};

const ALL_OLD: ReturnValuesOnConditionCheckFailure = ReturnValuesOnConditionCheckFailure::AllOld;

/// Builds a [`QueueLock`]. Get one from [`QueueLock::builder`].
#[derive(Debug, Clone)]
pub struct QueueLockBuilder {
    client: Client,
    table: Option<String>,
    namespace: String,
    lease: Duration,
    heartbeat: Option<Duration>,
    expiry: Expiry,
    skew_margin: Duration,
    poll_head: Duration,
    poll_max: Duration,
    page_size: i32,
    ttl_grace: Duration,
    clock: SharedClock,
}

impl QueueLockBuilder {
    /// The lock table (required). Create it with [`QueueLock::create_table`].
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// A namespace, so one entity (lock name) can carry several independent queues. Rows of
    /// namespace `ns` have sort keys `"<ns>#q#<ticket>"` and their own counter `"<ns>#ctr"`.
    /// Default: empty. Must not contain `#`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long a row stays alive without a heartbeat. Default 20 s.
    pub fn lease_duration(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often holders and waiters renew their rows. Default: a quarter of the lease. Must be at
    /// most half the lease.
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every);
        self
    }

    /// How dead rows are recognised. Default [`Expiry::Observed`].
    pub fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// Extra time before a silent row counts as dead: covers clock offsets between machines in
    /// [`Expiry::WallClock`] mode and clock-rate drift in [`Expiry::Observed`] mode. Default 2 s.
    pub fn clock_skew_margin(mut self, margin: Duration) -> Self {
        self.skew_margin = margin;
        self
    }

    /// Polling: the waiter at the head of the queue polls every `head`; a waiter `k` places back
    /// polls every `k × head`, at most every `max`. Defaults 50 ms and 2 s (the head of the queue polls about 20 times a second at most).
    pub fn poll_interval(mut self, head: Duration, max: Duration) -> Self {
        self.poll_head = head;
        self.poll_max = max;
        self
    }

    /// Rows read per Query page (1..=1000). Default 25.
    pub fn page_size(mut self, rows: i32) -> Self {
        self.page_size = rows;
        self
    }

    /// How long after its expiry DynamoDB TTL may delete a row (the `ttl` attribute is expiry +
    /// grace, in epoch seconds). TTL is garbage collection only; it never decides ownership.
    /// Default one hour.
    pub fn ttl_grace(mut self, grace: Duration) -> Self {
        self.ttl_grace = grace;
        self
    }

    /// The wall clock (default [`SystemClock`]). Replace it to simulate clock skew.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the lock handle.
    pub fn build(self) -> Result<QueueLock, LockError> {
        let table = self
            .table
            .ok_or_else(|| LockError::InvalidConfig("a table is required".into()))?;
        if self.namespace.contains('#') {
            return Err(LockError::InvalidConfig(format!(
                "namespace {:?} contains '#'",
                self.namespace
            )));
        }
        if self.lease < Duration::from_millis(100) {
            return Err(LockError::InvalidConfig(
                "the lease must be at least 100 ms".into(),
            ));
        }
        let heartbeat = self.heartbeat.unwrap_or(self.lease / 4);
        if heartbeat.is_zero() || heartbeat * 2 > self.lease {
            return Err(LockError::InvalidConfig(format!(
                "the heartbeat interval ({heartbeat:?}) must be positive and at most half the lease ({:?})",
                self.lease
            )));
        }
        if !(1..=1000).contains(&self.page_size)
            || self.poll_head.is_zero()
            || self.poll_max < self.poll_head
        {
            return Err(LockError::InvalidConfig(
                "invalid page size or poll intervals".into(),
            ));
        }
        Ok(QueueLock {
            inner: Arc::new(Inner {
                client: self.client,
                table,
                namespace: self.namespace,
                lease: self.lease,
                heartbeat,
                expiry: self.expiry,
                skew_margin: self.skew_margin,
                poll_head: self.poll_head,
                poll_max: self.poll_max,
                page_size: self.page_size,
                ttl_grace: self.ttl_grace,
                clock: self.clock,
                observations: Mutex::new(HashMap::new()),
                counters: Mutex::new(HashMap::new()),
            }),
        })
    }
}

/// A fair (FIFO) distributed mutual-exclusion lock; see the [module docs](self).
///
/// Cheap to clone; clones share configuration and observations. One handle serves any number of
/// lock names.
#[derive(Debug, Clone)]
pub struct QueueLock {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    table: String,
    namespace: String,
    lease: Duration,
    heartbeat: Duration,
    expiry: Expiry,
    skew_margin: Duration,
    poll_head: Duration,
    poll_max: Duration,
    page_size: i32,
    ttl_grace: Duration,
    clock: SharedClock,
    /// What this handle saw of other rows: (name, sk) -> observation.
    observations: Mutex<HashMap<(String, String), Observation>>,
    /// Last known counter value per lock name.
    counters: Mutex<HashMap<String, u64>>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueLock")
            .field("table", &self.table)
            .field("namespace", &self.namespace)
            .field("lease", &self.lease)
            .field("heartbeat", &self.heartbeat)
            .field("expiry", &self.expiry)
            .field("skew_margin", &self.skew_margin)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct Observation {
    owner: String,
    hb: u64,
    since: Instant,
}

/// What one look at the queue found.
struct Scan {
    /// Live rows ahead of ours (counted up to the first page that had one).
    live_ahead: usize,
    /// Whether our own row is there with our owner id (`None`: not read).
    found_self: Option<bool>,
    /// The earliest time a live row ahead could be judged dead.
    next_death: Option<Instant>,
}

impl QueueLock {
    /// A builder over `client`.
    pub fn builder(client: Client) -> QueueLockBuilder {
        QueueLockBuilder {
            client,
            table: None,
            namespace: String::new(),
            lease: Duration::from_secs(20),
            heartbeat: None,
            expiry: Expiry::Observed,
            skew_margin: Duration::from_secs(2),
            poll_head: Duration::from_millis(50),
            poll_max: Duration::from_secs(2),
            page_size: 25,
            ttl_grace: Duration::from_secs(3600),
            clock: Arc::new(SystemClock),
        }
    }

    /// Creates this handle's table unless it exists (idempotent; see
    /// [`create_lock_table`](super::create_lock_table)).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the table without TTL enabled; call again.
    pub async fn create_table(&self) -> Result<(), LockError> {
        Ok(super::create_lock_table(&self.inner.client, &self.inner.table).await?)
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// A ticket counter over the same table. `counter.next(name)` shares the counter of the
    /// default namespace of lock `name`.
    pub fn ticket_counter(&self) -> super::TicketCounter {
        super::TicketCounter::new(self.inner.client.clone(), self.inner.table.clone())
    }

    /// Acquires lock `name`, waiting as `wait` says.
    ///
    /// Costs, when nobody else is around: one `TransactWriteItems` (two writes) to take a ticket
    /// and enter the queue (plus one `GetItem` the first time this handle sees the lock), and one
    /// Query. Each poll while waiting is one Query; the waiter's row is renewed every heartbeat
    /// interval. A waiter that gives up removes its row.
    ///
    /// Errors: [`LockError::WouldBlock`] ([`Wait::NoWait`] and someone is ahead),
    /// [`LockError::Timeout`], [`LockError::Lost`] (our own row was judged dead and deleted while
    /// we waited, e.g. after a long pause), [`LockError::DynamoDb`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the row was written, the row's heartbeat stops at once and
    /// a background task (spawned on the current Tokio runtime) deletes the row, so the queue
    /// does not wait for it. If it is dropped while the ticket request is in flight and that
    /// request lands afterwards, the row is never renewed: waiters behind it skip it once it has
    /// been silent for a lease (plus margin). Nothing is ever granted to a dropped future.
    pub async fn acquire(&self, name: &str, wait: Wait) -> Result<QueueGuard, LockError> {
        let start = Instant::now();
        let deadline = wait.deadline(start);
        let enqueue_deadline = match wait {
            Wait::NoWait => Some(start + self.inner.lease),
            _ => deadline,
        };
        let owner = uuid::Uuid::new_v4().to_string();
        let mut entry = self.enqueue(name, &owner, enqueue_deadline, start).await?;
        match self.wait_turn(&entry, wait, deadline, start).await {
            Ok(()) => {
                tracing::debug!(lock = name, ticket = entry.ticket, waited = ?start.elapsed(), "queue lock acquired");
                Ok(entry.into_guard())
            }
            Err(e) => {
                tracing::debug!(lock = name, ticket = entry.ticket, error = %e, "giving up; leaving the queue");
                crate::metrics::lock_failed(crate::metrics::QUEUE_LOCK, e.is_timeout());
                entry.remove().await;
                Err(e)
            }
        }
    }

    /// Acquires lock `name` if nobody holds it or waits ahead: `Ok(None)` otherwise.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, name: &str) -> Result<Option<QueueGuard>, LockError> {
        match self.acquire(name, Wait::NoWait).await {
            Ok(g) => Ok(Some(g)),
            Err(LockError::WouldBlock { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn counter_sk(&self) -> String {
        format!("{}{COUNTER_SK}", self.inner.namespace)
    }

    fn queue_prefix(&self) -> String {
        format!("{}#q#", self.inner.namespace)
    }

    fn row_sk(&self, ticket: u64) -> String {
        format!("{}{ticket:038}", self.queue_prefix())
    }

    fn row_item(&self, name: &str, sk: &str, owner: &str) -> Item {
        let inner = &self.inner;
        let now = inner.clock.now_millis();
        let exp = now + millis(inner.lease);
        let mut item = key(name, sk);
        item.insert(OWNER.into(), s(owner));
        item.insert(HB.into(), n(0));
        item.insert(LEASE_MS.into(), n(millis(inner.lease)));
        item.insert(EXP_MS.into(), n(exp));
        item.insert(TTL.into(), n(ttl_secs(exp, inner.ttl_grace)));
        item.insert(CREATED_MS.into(), n(now));
        item
    }

    /// Takes a ticket and writes the queue row atomically.
    async fn enqueue(
        &self,
        name: &str,
        owner: &str,
        deadline: Option<Instant>,
        start: Instant,
    ) -> Result<Enqueued, LockError> {
        let inner = &self.inner;
        let counter_sk = self.counter_sk();
        let mut known = inner.counters.lock().expect("poisoned").get(name).copied();
        // Tickets whose request failed ambiguously: their row may exist (or appear later). Each
        // with the first send of any request for it: the row may have been written (and seen by
        // a waiter) from then on.
        let mut ambiguous: HashMap<u64, Instant> = HashMap::new();
        let mut attempt = 0u32;
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) && attempt > 0 {
                let e = LockError::Timeout {
                    name: name.to_string(),
                    waited: start.elapsed(),
                };
                self.cleanup_strays(name, owner, &ambiguous, None);
                return Err(e);
            }
            let current = match known {
                Some(c) => c,
                None => read_counter(&inner.client, &inner.table, name, &counter_sk).await?,
            };
            let ticket = current + 1;
            let sk = self.row_sk(ticket);
            let update = Update::builder()
                .table_name(&inner.table)
                .set_key(Some(key(name, &counter_sk)))
                .update_expression("SET #n = :t")
                .condition_expression(if current == 0 {
                    "attribute_not_exists(#n)"
                } else {
                    "#n = :c"
                })
                .expression_attribute_names("#n", COUNT)
                .set_expression_attribute_values(Some(if current == 0 {
                    Item::from([(":t".to_string(), n(ticket))])
                } else {
                    Item::from([
                        (":t".to_string(), n(ticket)),
                        (":c".to_string(), n(current)),
                    ])
                }))
                .return_values_on_condition_check_failure(ALL_OLD)
                .build()
                .map_err(|e| Error::invalid(e.to_string()))?;
            let put = Put::builder()
                .table_name(&inner.table)
                .set_item(Some(self.row_item(name, &sk, owner)))
                .condition_expression("attribute_not_exists(#sk)")
                .expression_attribute_names("#sk", SK)
                .return_values_on_condition_check_failure(ALL_OLD)
                .build()
                .map_err(|e| Error::invalid(e.to_string()))?;
            let items = vec![
                TransactWriteItem::builder().update(update).build(),
                TransactWriteItem::builder().put(put).build(),
            ];
            let token = uuid::Uuid::new_v4().to_string();
            let sent_at = Instant::now();
            // Send; on an ambiguous failure resend the identical request with the same token, which
            // DynamoDB treats as idempotent: success means it is applied exactly once.
            let mut replays = 0;
            let result = loop {
                let r = inner
                    .client
                    .transact_write_items()
                    .set_transact_items(Some(items.clone()))
                    .client_request_token(&token)
                    .send()
                    .await;
                match r {
                    Err(e)
                        if replays < 3
                            && matches!(
                                &e,
                                aws_sdk_dynamodb::error::SdkError::TimeoutError(_)
                                    | aws_sdk_dynamodb::error::SdkError::DispatchFailure(_)
                                    | aws_sdk_dynamodb::error::SdkError::ResponseError(_)
                            ) =>
                    {
                        tracing::debug!(
                            lock = name,
                            ticket,
                            "ticket request failed ambiguously; replaying it"
                        );
                        ambiguous.entry(ticket).or_insert(sent_at);
                        replays += 1;
                        tokio::time::sleep(backoff(replays)).await;
                    }
                    other => break other,
                }
            };
            attempt += 1;
            match result {
                Ok(_) => {
                    // Written by this request (an earlier one for this ticket would have moved the
                    // counter); counting from an earlier send is merely conservative.
                    let from = ambiguous.remove(&ticket).unwrap_or(sent_at).min(sent_at);
                    return Ok(self.entered(name, owner, ticket, sk, from, &ambiguous));
                }
                Err(e) => {
                    if let Some(TransactWriteItemsError::TransactionCanceledException(c)) =
                        e.as_service_error()
                    {
                        let reasons = c.cancellation_reasons();
                        let code =
                            |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
                        if code(0) == "ConditionalCheckFailed" {
                            // Someone else took ticket `ticket` (or a later one) first; or our own
                            // earlier, ambiguous attempt did.
                            let now_at = reasons[0]
                                .item()
                                .and_then(|i| get_u64(i, COUNT))
                                .unwrap_or(0);
                            if ambiguous.contains_key(&ticket)
                                && self.row_owned(name, &sk, owner).await?
                            {
                                // An earlier request for this ticket wrote the row: its lease runs
                                // from the first send for this ticket, not from this request.
                                let from = ambiguous.remove(&ticket).unwrap_or(sent_at);
                                return Ok(self.entered(name, owner, ticket, sk, from, &ambiguous));
                            }
                            known = Some(now_at);
                            tracing::trace!(
                                lock = name,
                                ticket,
                                counter = now_at,
                                "ticket taken; retrying"
                            );
                            tokio::time::sleep(contention_backoff(attempt)).await;
                            continue;
                        }
                        if code(1) == "ConditionalCheckFailed" {
                            let row = reasons.get(1).and_then(|r| r.item());
                            if row.and_then(|r| get_s(r, OWNER)) == Some(owner) {
                                let from =
                                    ambiguous.remove(&ticket).unwrap_or(sent_at).min(sent_at);
                                return Ok(self.entered(name, owner, ticket, sk, from, &ambiguous));
                            }
                            return Err(Error::invariant(format!(
                                "queue row {sk} of lock {name} exists but the counter is below it: was the counter item deleted?"
                            ))
                            .into());
                        }
                        // TransactionConflict or throttling inside the transaction: back off.
                        tracing::trace!(lock = name, ticket, reasons = ?(code(0), code(1)), "ticket transaction cancelled; retrying");
                        known = None;
                        tokio::time::sleep(contention_backoff(attempt)).await;
                        continue;
                    }
                    let err = Error::sdk("TransactWriteItems", e);
                    if err.is_retryable() {
                        tracing::debug!(lock = name, error = %err, "ticket request failed; retrying");
                        known = None;
                        tokio::time::sleep(backoff(attempt.min(5))).await;
                        continue;
                    }
                    self.cleanup_strays(name, owner, &ambiguous, None);
                    return Err(err.into());
                }
            }
        }
    }

    fn entered(
        &self,
        name: &str,
        owner: &str,
        ticket: u64,
        sk: String,
        sent_at: Instant,
        ambiguous: &HashMap<u64, Instant>,
    ) -> Enqueued {
        self.inner
            .counters
            .lock()
            .expect("poisoned")
            .insert(name.to_string(), ticket);
        self.cleanup_strays(name, owner, ambiguous, Some(ticket));
        tracing::debug!(lock = name, ticket, "entered the queue");
        let heartbeat = Heartbeat::start(
            name,
            row_beat(
                self.inner.clone(),
                name.to_string(),
                sk.clone(),
                owner.to_string(),
            ),
            Some(self.inner.lease),
            Some(self.inner.heartbeat),
            0,
            sent_at,
        );
        Enqueued {
            inner: self.inner.clone(),
            name: name.to_string(),
            sk,
            ticket,
            owner: owner.to_string(),
            heartbeat: Some(heartbeat),
            armed: true,
        }
    }

    /// Deletes, in the background, rows of ours that ambiguous requests may have written.
    fn cleanup_strays(
        &self,
        name: &str,
        owner: &str,
        tickets: &HashMap<u64, Instant>,
        keep: Option<u64>,
    ) {
        for &t in tickets.keys().filter(|t| Some(**t) != keep) {
            spawn_delete(
                self.inner.clone(),
                name.to_string(),
                self.row_sk(t),
                owner.to_string(),
            );
        }
    }

    async fn row_owned(&self, name: &str, sk: &str, owner: &str) -> Result<bool, LockError> {
        let out = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(key(name, sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| Error::sdk("GetItem", e))?;
        Ok(out.item().and_then(|i| get_s(i, OWNER)) == Some(owner))
    }

    async fn wait_turn(
        &self,
        entry: &Enqueued,
        wait: Wait,
        deadline: Option<Instant>,
        start: Instant,
    ) -> Result<(), LockError> {
        let lost = || LockError::Lost {
            name: entry.name.clone(),
        };
        let mut failures = 0u32;
        let mut waited = false;
        loop {
            let hb = entry
                .heartbeat
                .as_ref()
                .expect("heartbeat present while waiting");
            if hb.is_lost() {
                return Err(lost());
            }
            let scan = match self.scan(&entry.name, &entry.sk, &entry.owner).await {
                Ok(scan) => {
                    failures = 0;
                    scan
                }
                Err(LockError::DynamoDb(e))
                    if e.is_retryable() && deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    tracing::warn!(lock = %entry.name, error = %e, "queue poll failed; retrying");
                    failures += 1;
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if scan.found_self == Some(false) {
                hb.mark_lost("our queue row was deleted while waiting");
                return Err(lost());
            }
            if scan.live_ahead == 0 {
                if hb.is_lost() {
                    return Err(lost());
                }
                crate::metrics::lock_acquired(crate::metrics::QUEUE_LOCK, false, waited);
                return Ok(());
            }
            let now = Instant::now();
            match (wait, deadline) {
                (Wait::NoWait, _) => {
                    return Err(LockError::WouldBlock {
                        name: entry.name.clone(),
                    });
                }
                (_, Some(d)) if now >= d => {
                    return Err(LockError::Timeout {
                        name: entry.name.clone(),
                        waited: start.elapsed(),
                    });
                }
                _ => {}
            }
            let inner = &self.inner;
            let position = u32::try_from(scan.live_ahead).unwrap_or(u32::MAX);
            let mut pause = jitter(inner.poll_head.saturating_mul(position).min(inner.poll_max));
            if let Some(death) = scan.next_death {
                pause = pause.min(death.saturating_duration_since(now) + Duration::from_millis(5));
            }
            if let Some(d) = deadline {
                pause = pause.min(d.saturating_duration_since(now));
            }
            tracing::trace!(lock = %entry.name, ticket = entry.ticket, ahead = scan.live_ahead, ?pause, "waiting in queue");
            waited = true;
            tokio::time::sleep(pause).await;
        }
    }

    /// Reads the queue up to our row, deleting dead rows (and stray rows of ours) on the way.
    async fn scan(&self, name: &str, my_sk: &str, owner: &str) -> Result<Scan, LockError> {
        let inner = &self.inner;
        let mut scan = Scan {
            live_ahead: 0,
            found_self: None,
            next_death: None,
        };
        let mut start_key = None;
        let mut seen: HashSet<String> = HashSet::new();
        'pages: loop {
            let out = inner
                .client
                .query()
                .table_name(&inner.table)
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
                .projection_expression("#sk, #owner, #hb, #lease, #exp")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_names("#sk", SK)
                .expression_attribute_names("#owner", OWNER)
                .expression_attribute_names("#hb", HB)
                .expression_attribute_names("#lease", LEASE_MS)
                .expression_attribute_names("#exp", EXP_MS)
                .expression_attribute_values(":pk", s(name))
                .expression_attribute_values(":lo", s(self.queue_prefix()))
                .expression_attribute_values(":hi", s(my_sk))
                .consistent_read(true)
                .limit(inner.page_size)
                .set_exclusive_start_key(start_key)
                .send()
                .await
                .map_err(|e| Error::sdk("Query", e))?;
            let now = Instant::now();
            for row in out.items() {
                let Some(sk) = get_s(row, SK) else { continue };
                let row_owner = get_s(row, OWNER).unwrap_or_default();
                if sk == my_sk {
                    scan.found_self = Some(row_owner == owner);
                    break 'pages;
                }
                if row_owner == owner {
                    // Written by an ambiguous request of ours that we did not keep.
                    spawn_delete(
                        inner.clone(),
                        name.to_string(),
                        sk.to_string(),
                        owner.to_string(),
                    );
                    continue;
                }
                seen.insert(sk.to_string());
                let hb = get_u64(row, HB).unwrap_or(0);
                match self.judge(name, sk, row_owner, hb, row, now) {
                    Judgement::Dead => {
                        if self.delete_dead(name, sk, row_owner, hb).await? {
                            continue;
                        }
                        scan.live_ahead += 1;
                    }
                    Judgement::Alive(death) => {
                        scan.live_ahead += 1;
                        scan.next_death = Some(scan.next_death.map_or(death, |d| d.min(death)));
                    }
                }
            }
            if scan.live_ahead > 0 {
                break;
            }
            match out.last_evaluated_key {
                Some(k) => start_key = Some(k),
                None => break,
            }
        }
        if scan.live_ahead == 0 && scan.found_self.is_none() {
            // Read to the end of our range without meeting our row: it is gone.
            scan.found_self = Some(false);
        }
        // Forget observations of rows of this lock that are gone.
        let prefix = self.queue_prefix();
        inner
            .observations
            .lock()
            .expect("poisoned")
            .retain(|(pk, sk), _| {
                pk != name || !sk.starts_with(&prefix) || sk.as_str() >= my_sk || seen.contains(sk)
            });
        Ok(scan)
    }

    fn judge(
        &self,
        name: &str,
        sk: &str,
        owner: &str,
        hb: u64,
        row: &Item,
        now: Instant,
    ) -> Judgement {
        let inner = &self.inner;
        let lease =
            Duration::from_millis(get_u64(row, LEASE_MS).unwrap_or(millis(inner.lease) as u64));
        match inner.expiry {
            Expiry::Observed => {
                let mut obs = inner.observations.lock().expect("poisoned");
                let entry = obs
                    .entry((name.to_string(), sk.to_string()))
                    .or_insert_with(|| Observation {
                        owner: owner.to_string(),
                        hb,
                        since: now,
                    });
                if entry.owner != owner || entry.hb != hb {
                    *entry = Observation {
                        owner: owner.to_string(),
                        hb,
                        since: now,
                    };
                }
                let death = entry.since + lease + inner.skew_margin;
                if now >= death {
                    Judgement::Dead
                } else {
                    Judgement::Alive(death)
                }
            }
            Expiry::WallClock => {
                let exp = get_i64(row, EXP_MS).unwrap_or(i64::MAX);
                let left = exp
                    .saturating_add(millis(inner.skew_margin))
                    .saturating_sub(inner.clock.now_millis());
                if left < 0 {
                    Judgement::Dead
                } else {
                    Judgement::Alive(now + Duration::from_millis(left as u64))
                }
            }
        }
    }

    /// Deletes a row judged dead, if it still is what was judged. True if the row is gone.
    async fn delete_dead(
        &self,
        name: &str,
        sk: &str,
        owner: &str,
        hb: u64,
    ) -> Result<bool, LockError> {
        let inner = &self.inner;
        let r = inner
            .client
            .delete_item()
            .table_name(&inner.table)
            .set_key(Some(key(name, sk)))
            .condition_expression("#owner = :owner AND #hb = :hb")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#hb", HB)
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":hb", n(hb))
            .return_values_on_condition_check_failure(ALL_OLD)
            .send()
            .await;
        match r {
            Ok(_) => {
                tracing::info!(
                    lock = name,
                    row = sk,
                    dead_owner = owner,
                    "deleted a dead queue row"
                );
                inner
                    .observations
                    .lock()
                    .expect("poisoned")
                    .remove(&(name.to_string(), sk.to_string()));
                Ok(true)
            }
            Err(e) => match delete_failure(e) {
                WriteFailure::Condition(None) => Ok(true),
                WriteFailure::Condition(Some(_)) => Ok(false),
                WriteFailure::Other(e) => Err(e.into()),
            },
        }
    }
}

enum Judgement {
    Dead,
    /// Alive; could be judged dead at this time if it stays silent.
    Alive(Instant),
}

fn ttl_secs(exp_ms: i64, grace: Duration) -> i64 {
    exp_ms / 1000 + i64::try_from(grace.as_secs()).unwrap_or(i64::MAX / 2)
}

/// Renews a queue row: sets the heartbeat counter to the target, conditional on still owning it.
fn row_beat(inner: Arc<Inner>, name: String, sk: String, owner: String) -> BeatFn {
    Arc::new(move |target| {
        let inner = inner.clone();
        let (name, sk, owner) = (name.clone(), sk.clone(), owner.clone());
        Box::pin(async move {
            let exp = inner.clock.now_millis() + millis(inner.lease);
            let r = inner
                .client
                .update_item()
                .table_name(&inner.table)
                .set_key(Some(key(&name, &sk)))
                .update_expression("SET #hb = :hb, #exp = :exp, #ttl = :ttl")
                // Never back: a late request of an earlier renewal must not undo a newer one.
                .condition_expression("#owner = :owner AND #hb <= :hb")
                .expression_attribute_names("#hb", HB)
                .expression_attribute_names("#exp", EXP_MS)
                .expression_attribute_names("#ttl", TTL)
                .expression_attribute_names("#owner", OWNER)
                .expression_attribute_values(":hb", n(target))
                .expression_attribute_values(":exp", n(exp))
                .expression_attribute_values(":ttl", n(ttl_secs(exp, inner.ttl_grace)))
                .expression_attribute_values(":owner", s(&owner))
                .return_values_on_condition_check_failure(ALL_OLD)
                .send()
                .await;
            match r {
                Ok(_) => BeatOutcome::Done,
                Err(e) => match update_failure(e) {
                    WriteFailure::Condition(_) => BeatOutcome::Gone,
                    WriteFailure::Other(e) => BeatOutcome::Failed(e),
                },
            }
        })
    })
}

/// Deletes our own row. `Ok(true)`: deleted by us (or already gone after an ambiguous attempt of
/// ours); `Ok(false)`: it was already gone (someone judged it dead).
async fn delete_own(inner: &Inner, name: &str, sk: &str, owner: &str) -> Result<bool, Error> {
    let mut ambiguous = false;
    let mut attempt = 0;
    loop {
        let r = inner
            .client
            .delete_item()
            .table_name(&inner.table)
            .set_key(Some(key(name, sk)))
            .condition_expression("#owner = :owner")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_values(":owner", s(owner))
            .return_values_on_condition_check_failure(ALL_OLD)
            .send()
            .await;
        match r {
            Ok(_) => return Ok(true),
            Err(e) => match delete_failure(e) {
                WriteFailure::Condition(_) => return Ok(ambiguous),
                WriteFailure::Other(e) if e.is_retryable() && attempt < 5 => {
                    ambiguous |= is_ambiguous(&e);
                    tracing::debug!(lock = name, row = sk, error = %e, "deleting queue row failed; retrying");
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                WriteFailure::Other(e) => return Err(e),
            },
        }
    }
}

/// Deletes our row in the background (from `Drop`): needs a Tokio runtime; without one the row is
/// left to expire.
fn spawn_delete(inner: Arc<Inner>, name: String, sk: String, owner: String) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(async move {
                if let Err(e) = delete_own(&inner, &name, &sk, &owner).await {
                    tracing::warn!(lock = %name, row = %sk, error = %e, "could not delete queue row; it will expire");
                }
            });
        }
        Err(_) => {
            tracing::warn!(lock = %name, row = %sk, "no Tokio runtime to delete the queue row; it will expire")
        }
    }
}

/// A row in the queue, not yet granted. Dropping it removes the row in the background.
struct Enqueued {
    inner: Arc<Inner>,
    name: String,
    sk: String,
    ticket: u64,
    owner: String,
    heartbeat: Option<Heartbeat>,
    armed: bool,
}

impl Enqueued {
    fn into_guard(mut self) -> QueueGuard {
        self.armed = false;
        QueueGuard {
            inner: self.inner.clone(),
            name: std::mem::take(&mut self.name),
            sk: std::mem::take(&mut self.sk),
            ticket: self.ticket,
            owner: std::mem::take(&mut self.owner),
            heartbeat: self.heartbeat.take().expect("heartbeat present"),
            released: false,
        }
    }

    async fn remove(&mut self) {
        self.armed = false;
        if let Some(mut hb) = self.heartbeat.take() {
            hb.stop().await;
            hb.finish();
        }
        if let Err(e) = delete_own(&self.inner, &self.name, &self.sk, &self.owner).await {
            tracing::warn!(lock = %self.name, row = %self.sk, error = %e, "could not delete queue row; it will expire");
        }
    }
}

impl Drop for Enqueued {
    fn drop(&mut self) {
        if self.armed {
            self.heartbeat.take();
            spawn_delete(
                self.inner.clone(),
                self.name.clone(),
                self.sk.clone(),
                self.owner.clone(),
            );
        }
    }
}

/// A held [`QueueLock`]. Release it with [`release`](Self::release); dropping it releases in the
/// background.
///
/// While held, a background task renews the row. If the lease runs out before a renewal succeeds
/// (e.g. DynamoDB unreachable) or the row was deleted by a waiter that judged it dead, the lock is
/// lost: see [`is_lost`](Self::is_lost) and [`lost`](Self::lost).
#[derive(Debug)]
pub struct QueueGuard {
    inner: Arc<Inner>,
    name: String,
    sk: String,
    ticket: u64,
    owner: String,
    heartbeat: Heartbeat,
    released: bool,
}

impl QueueGuard {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ticket this acquisition drew.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }

    /// The fencing token: the ticket. Grants of one lock (and namespace) have strictly increasing
    /// tokens; a resource that remembers the highest token it has seen can reject a stale holder.
    pub fn fencing_token(&self) -> u64 {
        self.ticket
    }

    /// The owner id written into the row (unique per acquisition).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// True once the lock is lost (or its local lease ran out without a successful renewal).
    pub fn is_lost(&self) -> bool {
        self.heartbeat.is_lost()
    }

    /// Time left on the local lease before the lock counts as lost unless renewed. The lease counts
    /// from the first send of a ticket request that may have written this guard's row (or of its
    /// last confirmed renewal): after lost responses it can be short of the full lease.
    pub fn lease_remaining(&self) -> Duration {
        self.heartbeat.remaining().unwrap_or(Duration::MAX)
    }

    /// A handle that tells when the lock is lost; it can be moved into the worker.
    pub fn lost_signal(&self) -> LostSignal {
        self.heartbeat.signal()
    }

    /// Resolves when the lock is lost; never if it stays held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn lost(&self) {
        self.heartbeat.signal().lost().await
    }

    /// Renews the row now (the background task also does, every heartbeat interval).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave a renewal applied; that is harmless.
    pub async fn heartbeat(&self) -> Result<(), LockError> {
        self.heartbeat.beat_now().await
    }

    /// Releases the lock: stops the heartbeat and deletes the row (one `DeleteItem`).
    ///
    /// Returns [`LockError::Lost`] if the row had already been taken over: the critical section may
    /// have overlapped with the next holder's.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped midway, the guard's `Drop` deletes the row in the background.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.heartbeat.stop().await;
        let deleted = delete_own(&self.inner, &self.name, &self.sk, &self.owner).await;
        self.released = true;
        self.heartbeat.finish();
        match deleted {
            Ok(true) => {
                tracing::debug!(lock = %self.name, ticket = self.ticket, "queue lock released");
                crate::metrics::lock_released(crate::metrics::QUEUE_LOCK);
                Ok(())
            }
            Ok(false) => Err(LockError::Lost {
                name: self.name.clone(),
            }),
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        if !self.released {
            self.heartbeat.finish();
            spawn_delete(
                self.inner.clone(),
                self.name.clone(),
                self.sk.clone(),
                self.owner.clone(),
            );
        }
    }
}
