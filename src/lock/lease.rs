//! Lease locks: exclusive or shared, fail-open or fail-closed, with fencing tokens and a payload.
//!
//! # How it works
//!
//! Each lock is one record `{pk: name, sk: "#lease"}` that is never deleted (release only clears
//! the holder), so its `fence` counter grows with every acquisition, exclusive or shared, and never
//! goes back. An exclusive holder is recorded as `owner` (an id unique to the acquisition) with a
//! heartbeat counter `hb`; shared holders are entries of the map `readers`. Acquiring is one
//! conditional `UpdateItem` (`ReturnValuesOnConditionCheckFailure::AllOld` shows the current holder
//! when it fails).
//!
//! * **Fail-open** (default): holders renew their lease in the background. A waiter takes over from
//!   a holder whose heartbeat counter has not changed for its lease (plus a margin) on the
//!   waiter's own monotonic clock ([`Expiry::Observed`]), or, if opted in, whose stored expiry is
//!   past on the waiter's wall clock ([`Expiry::WallClock`]). The takeover is conditional on the
//!   counter value that was judged.
//! * **Fail-closed** ([`LeaseLockBuilder::fail_closed`]): the lock never expires; only release
//!   frees it. No heartbeats.
//!
//! A renewal whose response is lost is retried with the same target value; since the condition is
//! "the holder is still this acquisition and the counter is not past the target", an applied
//! earlier attempt makes the retry succeed too, and a request of an old renewal that arrives late
//! cannot set the counter back. Renewal never stops silently: it retries until the local lease runs
//! out and then reports the lock lost through the guard.
//!
//! The local lease always counts from the earliest send that may have written what waiters judge
//! (a waiter may see a write from the moment it lands): after a lost acquire response, from the
//! send of the attempt whose write is found on the record, not from the retry that found it; for a
//! renewal, from its first attempt. See "When a lease starts" in `docs/LOCKS.md`.
//!
//! # The simple mutex (try-lock, extend, unlock)
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), dynamodb_transactions::lock::LockError> {
//! use std::time::Duration;
//! use dynamodb_transactions::lock::lease::LeaseLock;
//!
//! let locks = LeaseLock::builder(client)
//!     .table("locks")
//!     .lease_duration(Duration::from_secs(10))
//!     .manual_heartbeat() // renew by hand with `heartbeat()`
//!     .build()?;
//! if let Some(guard) = locks.try_acquire("nightly-report").await? {
//!     guard.heartbeat().await?; // extend
//!     guard.release().await?; // unlock
//! }
//! # Ok(()) }
//! ```
//!
//! Shared locks admit many readers or one writer; a steady stream of readers can starve a writer
//! (use a [`QueueLock`](super::queue::QueueLock) for fairness).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use tokio::time::Instant;

use super::heartbeat::{BeatFn, BeatOutcome, Heartbeat, LostSignal};
use super::util::*;
use super::{Clock, Expiry, LockError, SharedClock, SystemClock, Wait};
use crate::{Error, Item};

const ALL_OLD: ReturnValuesOnConditionCheckFailure = ReturnValuesOnConditionCheckFailure::AllOld;

/// Sort key of a lease record.
pub(crate) const LEASE_SK: &str = "#lease";

const FREE_OF_READERS: &str = "(attribute_not_exists(#readers) OR size(#readers) = :zero)";

/// Builds a [`LeaseLock`]. Get one from [`LeaseLock::builder`].
#[derive(Debug, Clone)]
pub struct LeaseLockBuilder {
    client: Client,
    table: Option<String>,
    lease: Duration,
    heartbeat: Option<Duration>,
    manual: bool,
    fail_closed: bool,
    expiry: Expiry,
    skew_margin: Duration,
    poll: Duration,
    clock: SharedClock,
}

impl LeaseLockBuilder {
    /// The lock table (required). Create it with [`LeaseLock::create_table`].
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// How long a lease lasts without renewal. Default 20 s.
    pub fn lease_duration(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often the background task renews held leases. Default: a quarter of the lease; at most
    /// half of it.
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every);
        self
    }

    /// No background renewal: the holder calls [`LeaseGuard::heartbeat`] itself, at least once
    /// per lease.
    pub fn manual_heartbeat(mut self) -> Self {
        self.manual = true;
        self
    }

    /// Fail-closed locks: they never expire and are never taken over; only release frees them.
    /// If a holder dies, an operator must clear the lock.
    pub fn fail_closed(mut self) -> Self {
        self.fail_closed = true;
        self
    }

    /// How dead holders are recognised. Default [`Expiry::Observed`].
    pub fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// Extra time before a silent holder counts as dead (clock offsets in [`Expiry::WallClock`]
    /// mode, clock-rate drift in [`Expiry::Observed`] mode). Default 2 s.
    pub fn clock_skew_margin(mut self, margin: Duration) -> Self {
        self.skew_margin = margin;
        self
    }

    /// How often a waiter retries. Default 200 ms (sooner when a holder is about to expire).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// The wall clock (default [`SystemClock`]). Replace it to simulate clock skew.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the lock handle.
    pub fn build(self) -> Result<LeaseLock, LockError> {
        let table = self
            .table
            .ok_or_else(|| LockError::InvalidConfig("a table is required".into()))?;
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
        if self.poll.is_zero() {
            return Err(LockError::InvalidConfig(
                "the poll interval must be positive".into(),
            ));
        }
        Ok(LeaseLock {
            inner: Arc::new(Inner {
                client: self.client,
                table,
                lease: self.lease,
                heartbeat: if self.manual { None } else { Some(heartbeat) },
                fail_closed: self.fail_closed,
                expiry: self.expiry,
                skew_margin: self.skew_margin,
                poll: self.poll,
                clock: self.clock,
                observations: Mutex::new(HashMap::new()),
                records: Mutex::new(HashSet::new()),
            }),
        })
    }
}

/// A lease lock handle; see the [module docs](self).
///
/// Cheap to clone; clones share configuration and observations. One handle serves any number of
/// lock names.
#[derive(Debug, Clone)]
pub struct LeaseLock {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    table: String,
    lease: Duration,
    heartbeat: Option<Duration>,
    fail_closed: bool,
    expiry: Expiry,
    skew_margin: Duration,
    poll: Duration,
    clock: SharedClock,
    /// (name, holder id) -> (heartbeat value, first seen).
    observations: Mutex<HashMap<(String, String), (u64, Instant)>>,
    /// Lock records known to exist.
    records: Mutex<HashSet<String>>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseLock")
            .field("table", &self.table)
            .field("lease", &self.lease)
            .field("heartbeat", &self.heartbeat)
            .field("fail_closed", &self.fail_closed)
            .field("expiry", &self.expiry)
            .field("skew_margin", &self.skew_margin)
            .finish_non_exhaustive()
    }
}

/// What a failed attempt found on the record.
#[derive(Default)]
struct Verdict {
    /// The exclusive holder, if it is dead: (owner, hb).
    dead_writer: Option<(String, u64)>,
    /// Dead shared holders: (id, hb).
    dead_readers: Vec<(String, u64)>,
    /// A live writer holds it.
    live_writer: bool,
    /// Live readers hold it.
    live_readers: bool,
    /// Earliest time a live holder could be judged dead.
    next_death: Option<Instant>,
}

impl LeaseLock {
    /// A builder over `client`.
    pub fn builder(client: Client) -> LeaseLockBuilder {
        LeaseLockBuilder {
            client,
            table: None,
            lease: Duration::from_secs(20),
            heartbeat: None,
            manual: false,
            fail_closed: false,
            expiry: Expiry::Observed,
            skew_margin: Duration::from_secs(2),
            poll: Duration::from_millis(200),
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

    /// Acquires lock `name` exclusively, waiting as `wait` says.
    ///
    /// Costs one `UpdateItem` when the lock is free; each retry while waiting is one more.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped while an acquiring write is in flight, that write may land: the
    /// lock is then held by nobody alive. In fail-open mode it is never renewed and waiters take
    /// it over after a lease (plus margin); in fail-closed mode it stays locked until cleared.
    pub async fn acquire(&self, name: &str, wait: Wait) -> Result<LeaseGuard, LockError> {
        self.acquire_inner(name, wait, false).await
    }

    /// Acquires lock `name` shared (as one of many readers; no writer at the same time).
    ///
    /// Costs one `UpdateItem` (plus one `PutItem` the first time this handle meets the lock).
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire): a shared entry written by a dropped future is never
    /// renewed and is removed by the next writer once it has been silent for a lease.
    pub async fn acquire_shared(&self, name: &str, wait: Wait) -> Result<LeaseGuard, LockError> {
        self.acquire_inner(name, wait, true).await
    }

    /// Acquires lock `name` exclusively if it is free (or its holder is known dead): `Ok(None)`
    /// otherwise. Repeated calls on the same handle keep observing the holder, so they take over a
    /// dead holder's lock once it has been silent for a lease.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, name: &str) -> Result<Option<LeaseGuard>, LockError> {
        match self.acquire(name, Wait::NoWait).await {
            Ok(g) => Ok(Some(g)),
            Err(LockError::WouldBlock { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The lock's fencing counter: the token of its latest acquisition (0 if never acquired).
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future has no effect.
    pub async fn current_fencing_token(&self, name: &str) -> Result<u64, LockError> {
        let out = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(key(name, LEASE_SK)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| Error::sdk("GetItem", e))?;
        Ok(out.item().and_then(|i| get_u64(i, FENCE)).unwrap_or(0))
    }

    fn entry_value(&self, hb: u64) -> AttributeValue {
        let inner = &self.inner;
        let exp = inner.clock.now_millis() + millis(inner.lease);
        AttributeValue::M(Item::from([
            (HB.to_string(), n(hb)),
            (LEASE_MS.to_string(), n(millis(inner.lease))),
            (EXP_MS.to_string(), n(exp)),
            (CLOSED.to_string(), AttributeValue::Bool(inner.fail_closed)),
        ]))
    }

    async fn acquire_inner(
        &self,
        name: &str,
        wait: Wait,
        shared: bool,
    ) -> Result<LeaseGuard, LockError> {
        let inner = &self.inner;
        let start = Instant::now();
        let deadline = wait.deadline(start);
        let mut owner = uuid::Uuid::new_v4().to_string();
        // Owner ids of ambiguous exclusive attempts, each with its send instant: one of them may
        // be on the record. The next attempt after an ambiguous one uses a fresh id, so a record
        // found carrying one of these ids names the very attempt that wrote it.
        let mut mine: Vec<(String, Instant)> = Vec::new();
        let mut takeover: Option<(String, u64)> = None;
        // Reader ids of ambiguous shared attempts: their entries may exist.
        let mut strays: Vec<String> = Vec::new();
        let mut rid = owner.clone();
        let mut failures = 0u32;
        let mut waited = false;
        loop {
            if shared && !inner.records.lock().expect("poisoned").contains(name) {
                self.ensure_record(name).await?;
            }
            let sent_at = Instant::now();
            let mut req = inner
                .client
                .update_item()
                .table_name(&inner.table)
                .set_key(Some(key(name, LEASE_SK)))
                .expression_attribute_names("#owner", OWNER)
                .expression_attribute_names("#fence", FENCE)
                .expression_attribute_names("#readers", READERS)
                .expression_attribute_values(":zero", n(0))
                .expression_attribute_values(":one", n(1))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(ALL_OLD);
            let takeover_cond = if let Some((dead, dead_hb)) = &takeover {
                req = req
                    .expression_attribute_values(":dead", s(dead))
                    .expression_attribute_values(":deadhb", n(dead_hb));
                " OR (#owner = :dead AND #hb = :deadhb)"
            } else {
                ""
            };
            req = if shared {
                req.expression_attribute_names("#rid", &rid)
                    .expression_attribute_values(":entry", self.entry_value(0))
                    .update_expression(if takeover.is_some() {
                        "SET #readers.#rid = :entry, #fence = if_not_exists(#fence, :zero) + :one REMOVE #owner, #hb, #lease, #exp, #closed"
                    } else {
                        "SET #readers.#rid = :entry, #fence = if_not_exists(#fence, :zero) + :one"
                    })
                    .condition_expression(format!("attribute_exists(#readers) AND (attribute_not_exists(#owner){takeover_cond})"))
            } else {
                req.update_expression(
                    "SET #owner = :me, #hb = :zero, #lease = :lease, #exp = :exp, #closed = :closed, \
                     #fence = if_not_exists(#fence, :zero) + :one, #readers = :empty",
                )
                .condition_expression(format!("(attribute_not_exists(#owner){takeover_cond}) AND {FREE_OF_READERS}"))
                .expression_attribute_values(":me", s(&owner))
                .expression_attribute_values(":closed", AttributeValue::Bool(inner.fail_closed))
                .expression_attribute_values(":empty", AttributeValue::M(Item::new()))
                .expression_attribute_values(":exp", n(inner.clock.now_millis() + millis(inner.lease)))
            };
            if takeover.is_some() || !shared {
                req = req
                    .expression_attribute_names("#hb", HB)
                    .expression_attribute_names("#lease", LEASE_MS)
                    .expression_attribute_names("#exp", EXP_MS)
                    .expression_attribute_names("#closed", CLOSED);
            }
            if !shared {
                req = req.expression_attribute_values(":lease", n(millis(inner.lease)));
            }
            match req.send().await {
                Ok(out) => {
                    let item = out.attributes.unwrap_or_default();
                    inner
                        .records
                        .lock()
                        .expect("poisoned")
                        .insert(name.to_string());
                    self.remove_strays(name, &strays);
                    crate::metrics::lock_acquired(
                        crate::metrics::LEASE_LOCK,
                        takeover.is_some(),
                        waited,
                    );
                    return Ok(self.granted(name, owner, rid, shared, &item, sent_at));
                }
                Err(e) => match update_failure(e) {
                    WriteFailure::Condition(item) => {
                        let Some(item) = item else {
                            // Only a shared attempt can fail on a missing record.
                            inner.records.lock().expect("poisoned").remove(name);
                            continue;
                        };
                        // This very attempt may have landed too (an SDK retry of it failing on
                        // its own first try).
                        let landed = get_s(&item, OWNER)
                            .and_then(|o| {
                                if o == owner {
                                    Some((owner.clone(), sent_at))
                                } else {
                                    mine.iter().find(|(id, _)| id == o).cloned()
                                }
                            })
                            .filter(|_| !shared);
                        if let Some((id, first_sent)) = landed {
                            // An earlier, ambiguous attempt of ours landed. A waiter may have seen
                            // the record from the moment it landed, so the lease runs from that
                            // attempt's send, not from this retry.
                            let left = (first_sent + inner.lease)
                                .saturating_duration_since(Instant::now());
                            if inner.fail_closed || left >= inner.lease / 2 {
                                tracing::debug!(lock = name, "an ambiguous acquire had landed");
                                self.remove_strays(name, &strays);
                                crate::metrics::lock_acquired(
                                    crate::metrics::LEASE_LOCK,
                                    false,
                                    waited,
                                );
                                return Ok(self.granted(name, id, rid, shared, &item, first_sent));
                            }
                            // Too little of that lease is left to hand out: take our own write
                            // over like a dead holder's (conditional on what we saw), as a new
                            // owner id (a waiter's observation of the old one must not carry
                            // over), which starts a fresh lease.
                            tracing::debug!(
                                lock = name,
                                "an ambiguous acquire had landed long ago; renewing it by takeover"
                            );
                            takeover = Some((id, get_u64(&item, HB).unwrap_or(0)));
                            owner = uuid::Uuid::new_v4().to_string();
                            continue;
                        }
                        if shared && !item.contains_key(READERS) {
                            inner.records.lock().expect("poisoned").remove(name);
                            continue;
                        }
                        let verdict = self.judge(name, &item);
                        if !shared && !verdict.dead_readers.is_empty() {
                            for (reader, hb) in &verdict.dead_readers {
                                self.remove_dead_reader(name, reader, *hb).await?;
                            }
                        }
                        takeover = verdict.dead_writer.clone();
                        let blocked = verdict.live_writer || (!shared && verdict.live_readers);
                        if !blocked {
                            continue;
                        }
                        let now = Instant::now();
                        match (wait, deadline) {
                            (Wait::NoWait, _) => {
                                self.remove_strays(name, &strays);
                                return Err(LockError::WouldBlock {
                                    name: name.to_string(),
                                });
                            }
                            (_, Some(d)) if now >= d => {
                                self.remove_strays(name, &strays);
                                crate::metrics::lock_timeout(crate::metrics::LEASE_LOCK);
                                return Err(LockError::Timeout {
                                    name: name.to_string(),
                                    waited: start.elapsed(),
                                });
                            }
                            _ => {}
                        }
                        let mut pause = jitter(inner.poll);
                        if let Some(death) = verdict.next_death {
                            pause = pause.min(
                                death.saturating_duration_since(now) + Duration::from_millis(5),
                            );
                        }
                        if let Some(d) = deadline {
                            pause = pause.min(d.saturating_duration_since(now));
                        }
                        waited = true;
                        tokio::time::sleep(pause).await;
                    }
                    WriteFailure::Other(e) => {
                        if e.dynamodb_code() == Some("ValidationException") && shared {
                            // The record lost its readers map: recreate it.
                            inner.records.lock().expect("poisoned").remove(name);
                            failures += 1;
                            if failures > 3 {
                                return Err(e.into());
                            }
                            continue;
                        }
                        // After an ambiguous failure keep trying (even past the deadline) to learn
                        // whether the write landed: the next attempt's condition failure shows it.
                        let ambiguous = is_ambiguous(&e);
                        if shared && ambiguous {
                            strays.push(std::mem::replace(
                                &mut rid,
                                uuid::Uuid::new_v4().to_string(),
                            ));
                        }
                        if ambiguous && !shared {
                            let id =
                                std::mem::replace(&mut owner, uuid::Uuid::new_v4().to_string());
                            mine.push((id, sent_at));
                        }
                        let late = !ambiguous && deadline.is_some_and(|d| Instant::now() >= d);
                        if !e.is_retryable() || late || failures >= 8 {
                            self.remove_strays(name, &strays);
                            for (id, _) in &mine {
                                spawn_release(inner.clone(), name.to_string(), id.clone(), false);
                            }
                            return Err(e.into());
                        }
                        tracing::debug!(lock = name, error = %e, "acquire failed; retrying");
                        failures += 1;
                        tokio::time::sleep(backoff(failures)).await;
                    }
                },
            }
        }
    }

    fn granted(
        &self,
        name: &str,
        owner: String,
        rid: String,
        shared: bool,
        item: &Item,
        sent_at: Instant,
    ) -> LeaseGuard {
        let inner = &self.inner;
        let fence = get_u64(item, FENCE).unwrap_or(0);
        let data = item
            .get(DATA)
            .and_then(|v| v.as_b().ok())
            .map(|b| b.as_ref().to_vec());
        let holder = if shared { rid } else { owner };
        let lease = if inner.fail_closed {
            None
        } else {
            Some(inner.lease)
        };
        let heartbeat = Heartbeat::start(
            name,
            lease_beat(inner.clone(), name.to_string(), holder.clone(), shared),
            lease,
            inner.heartbeat,
            0,
            sent_at,
        );
        tracing::debug!(lock = name, fence, shared, "lease lock acquired");
        LeaseGuard {
            inner: inner.clone(),
            name: name.to_string(),
            holder,
            shared,
            fence,
            data,
            heartbeat,
            released: false,
        }
    }

    /// Creates the lock record (fence 0, no holders) unless it exists.
    async fn ensure_record(&self, name: &str) -> Result<(), LockError> {
        let inner = &self.inner;
        let r = inner
            .client
            .update_item()
            .table_name(&inner.table)
            .set_key(Some(key(name, LEASE_SK)))
            .update_expression("SET #readers = if_not_exists(#readers, :empty), #fence = if_not_exists(#fence, :zero)")
            .expression_attribute_names("#readers", READERS)
            .expression_attribute_names("#fence", FENCE)
            .expression_attribute_values(":empty", AttributeValue::M(Item::new()))
            .expression_attribute_values(":zero", n(0))
            .send()
            .await;
        r.map_err(|e| Error::sdk("UpdateItem", e))?;
        inner
            .records
            .lock()
            .expect("poisoned")
            .insert(name.to_string());
        Ok(())
    }

    fn remove_strays(&self, name: &str, strays: &[String]) {
        for rid in strays {
            spawn_release(self.inner.clone(), name.to_string(), rid.clone(), true);
        }
    }

    async fn remove_dead_reader(&self, name: &str, reader: &str, hb: u64) -> Result<(), LockError> {
        let inner = &self.inner;
        let r = inner
            .client
            .update_item()
            .table_name(&inner.table)
            .set_key(Some(key(name, LEASE_SK)))
            .update_expression("REMOVE #readers.#rid")
            .condition_expression("#readers.#rid.#hb = :hb")
            .expression_attribute_names("#readers", READERS)
            .expression_attribute_names("#rid", reader)
            .expression_attribute_names("#hb", HB)
            .expression_attribute_values(":hb", n(hb))
            .send()
            .await;
        match r {
            Ok(_) => {
                tracing::info!(lock = name, reader, "removed a dead shared holder");
                Ok(())
            }
            Err(e) => match update_failure(e) {
                WriteFailure::Condition(_) => Ok(()),
                WriteFailure::Other(e) => Err(e.into()),
            },
        }
    }

    /// Judges the holders recorded in `item`.
    fn judge(&self, name: &str, item: &Item) -> Verdict {
        let mut v = Verdict::default();
        let now = Instant::now();
        let mut seen = Vec::new();
        if let Some(owner) = get_s(item, OWNER) {
            let hb = get_u64(item, HB).unwrap_or(0);
            seen.push(owner.to_string());
            match self.judge_one(name, owner, hb, item, now) {
                None => v.dead_writer = Some((owner.to_string(), hb)),
                Some(death) => {
                    v.live_writer = true;
                    v.next_death = death;
                }
            }
        }
        if let Some(readers) = item.get(READERS).and_then(|r| r.as_m().ok()) {
            for (rid, entry) in readers {
                let Ok(entry) = entry.as_m() else { continue };
                let hb = get_u64(entry, HB).unwrap_or(0);
                seen.push(rid.clone());
                match self.judge_one(name, rid, hb, entry, now) {
                    None => v.dead_readers.push((rid.clone(), hb)),
                    Some(death) => {
                        v.live_readers = true;
                        v.next_death = match (v.next_death, death) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                }
            }
        }
        self.inner
            .observations
            .lock()
            .expect("poisoned")
            .retain(|(n, h), _| n != name || seen.contains(h));
        v
    }

    /// `None`: dead. `Some(t)`: alive, could be judged dead at `t` (`Some(None)`: never).
    fn judge_one(
        &self,
        name: &str,
        holder: &str,
        hb: u64,
        rec: &Item,
        now: Instant,
    ) -> Option<Option<Instant>> {
        let inner = &self.inner;
        if get_bool(rec, CLOSED) {
            return Some(None);
        }
        let lease =
            Duration::from_millis(get_u64(rec, LEASE_MS).unwrap_or(millis(inner.lease) as u64));
        match inner.expiry {
            Expiry::Observed => {
                let mut obs = inner.observations.lock().expect("poisoned");
                let e = obs
                    .entry((name.to_string(), holder.to_string()))
                    .or_insert((hb, now));
                if e.0 != hb {
                    *e = (hb, now);
                }
                let death = e.1 + lease + inner.skew_margin;
                if now >= death {
                    None
                } else {
                    Some(Some(death))
                }
            }
            Expiry::WallClock => {
                let exp = get_i64(rec, EXP_MS).unwrap_or(i64::MAX);
                let left = exp
                    .saturating_add(millis(inner.skew_margin))
                    .saturating_sub(inner.clock.now_millis());
                if left < 0 {
                    None
                } else {
                    Some(Some(now + Duration::from_millis(left as u64)))
                }
            }
        }
    }
}

/// Renews a holder: exclusive holders set `hb`/`exp_ms` on the record, shared holders rewrite their
/// entry; both conditional on still being the holder.
fn lease_beat(inner: Arc<Inner>, name: String, holder: String, shared: bool) -> BeatFn {
    Arc::new(move |target| {
        let inner = inner.clone();
        let (name, holder) = (name.clone(), holder.clone());
        Box::pin(async move {
            let exp = inner.clock.now_millis() + millis(inner.lease);
            let req = inner
                .client
                .update_item()
                .table_name(&inner.table)
                .set_key(Some(key(&name, LEASE_SK)))
                .return_values_on_condition_check_failure(ALL_OLD);
            // Conditional on the counter not being past the target: a request of an earlier
            // renewal that reaches DynamoDB late (after it was retried and confirmed, and a newer
            // renewal landed) must not set the counter back, or a waiter that saw the old value
            // before would judge the holder by that old observation.
            let req = if shared {
                req.update_expression("SET #readers.#rid = :entry")
                    .condition_expression(
                        "attribute_exists(#readers.#rid) AND #readers.#rid.#hb <= :hb",
                    )
                    .expression_attribute_names("#readers", READERS)
                    .expression_attribute_names("#rid", &holder)
                    .expression_attribute_names("#hb", HB)
                    .expression_attribute_values(":hb", n(target))
                    .expression_attribute_values(
                        ":entry",
                        AttributeValue::M(Item::from([
                            (HB.to_string(), n(target)),
                            (LEASE_MS.to_string(), n(millis(inner.lease))),
                            (EXP_MS.to_string(), n(exp)),
                            (CLOSED.to_string(), AttributeValue::Bool(false)),
                        ])),
                    )
            } else {
                req.update_expression("SET #hb = :hb, #exp = :exp")
                    .condition_expression("#owner = :me AND #hb <= :hb")
                    .expression_attribute_names("#hb", HB)
                    .expression_attribute_names("#exp", EXP_MS)
                    .expression_attribute_names("#owner", OWNER)
                    .expression_attribute_values(":hb", n(target))
                    .expression_attribute_values(":exp", n(exp))
                    .expression_attribute_values(":me", s(&holder))
            };
            match req.send().await {
                Ok(_) => BeatOutcome::Done,
                Err(e) => match update_failure(e) {
                    WriteFailure::Condition(_) => BeatOutcome::Gone,
                    WriteFailure::Other(e) => BeatOutcome::Failed(e),
                },
            }
        })
    })
}

/// Clears a holder from the record. `Ok(true)`: cleared by us (or gone after an ambiguous attempt
/// of ours); `Ok(false)`: we were no longer the holder.
async fn release_holder(
    inner: &Inner,
    name: &str,
    holder: &str,
    shared: bool,
    data: Option<Option<Vec<u8>>>,
) -> Result<bool, Error> {
    let mut ambiguous = false;
    let mut attempt = 0;
    loop {
        let req = inner
            .client
            .update_item()
            .table_name(&inner.table)
            .set_key(Some(key(name, LEASE_SK)))
            .return_values_on_condition_check_failure(ALL_OLD);
        let req = if shared {
            req.update_expression("REMOVE #readers.#rid")
                .condition_expression("attribute_exists(#readers.#rid)")
                .expression_attribute_names("#readers", READERS)
                .expression_attribute_names("#rid", holder)
        } else {
            let req = req
                .condition_expression("#owner = :me")
                .expression_attribute_names("#owner", OWNER)
                .expression_attribute_names("#hb", HB)
                .expression_attribute_names("#lease", LEASE_MS)
                .expression_attribute_names("#exp", EXP_MS)
                .expression_attribute_names("#closed", CLOSED)
                .expression_attribute_values(":me", s(holder));
            let clear = "REMOVE #owner, #hb, #lease, #exp, #closed";
            match &data {
                None => req.update_expression(clear),
                Some(None) => req
                    .update_expression(format!("{clear}, #data"))
                    .expression_attribute_names("#data", DATA),
                Some(Some(bytes)) => req
                    .update_expression(format!("SET #data = :data {clear}"))
                    .expression_attribute_names("#data", DATA)
                    .expression_attribute_values(
                        ":data",
                        AttributeValue::B(Blob::new(bytes.clone())),
                    ),
            }
        };
        match req.send().await {
            Ok(_) => return Ok(true),
            Err(e) => match update_failure(e) {
                WriteFailure::Condition(_) => return Ok(ambiguous),
                WriteFailure::Other(e) if e.is_retryable() && attempt < 5 => {
                    ambiguous |= is_ambiguous(&e);
                    tracing::debug!(lock = name, error = %e, "release failed; retrying");
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                WriteFailure::Other(e) => return Err(e),
            },
        }
    }
}

fn spawn_release(inner: Arc<Inner>, name: String, holder: String, shared: bool) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(async move {
                if let Err(e) = release_holder(&inner, &name, &holder, shared, None).await {
                    tracing::warn!(lock = %name, error = %e, "background release failed; the lease will expire");
                }
            });
        }
        Err(_) => {
            tracing::warn!(lock = %name, "no Tokio runtime to release the lock; the lease will expire")
        }
    }
}

/// A held [`LeaseLock`]. Release it with [`release`](Self::release); dropping it releases in the
/// background.
#[derive(Debug)]
pub struct LeaseGuard {
    inner: Arc<Inner>,
    name: String,
    holder: String,
    shared: bool,
    fence: u64,
    data: Option<Vec<u8>>,
    heartbeat: Heartbeat,
    released: bool,
}

impl LeaseGuard {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token: the lock's acquisition count at this grant. Strictly greater than every
    /// token granted before, across releases and takeovers.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// True for a shared (read) lock.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The holder id (unique per acquisition).
    pub fn holder_id(&self) -> &str {
        &self.holder
    }

    /// The payload stored on the lock record when it was acquired (or last set by this guard).
    pub fn data(&self) -> Option<&[u8]> {
        self.data.as_deref()
    }

    /// True once the lock is lost (or its local lease ran out without a successful renewal).
    /// Never true for fail-closed locks.
    pub fn is_lost(&self) -> bool {
        self.heartbeat.is_lost()
    }

    /// Time left on the local lease before the lock counts as lost unless renewed
    /// (`Duration::MAX` for fail-closed locks). The lease counts from the first send of the write
    /// that made this guard the holder (or of its last confirmed renewal), so right after an
    /// acquire whose response was lost it can be well short of the full lease (at least half of it
    /// when granted).
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

    /// Renews the lease now ("extend"). With [`LeaseLockBuilder::manual_heartbeat`] this is the
    /// only renewal. One `UpdateItem`; retried with the same target until the lease runs out.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave a renewal applied, which is harmless.
    pub async fn heartbeat(&self) -> Result<(), LockError> {
        self.heartbeat.beat_now().await
    }

    /// Replaces the payload on the lock record (exclusive locks only). One `UpdateItem`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not leave the payload written.
    pub async fn set_data(&mut self, data: Option<Vec<u8>>) -> Result<(), LockError> {
        if self.shared {
            return Err(LockError::InvalidConfig(
                "a shared holder cannot write the payload".into(),
            ));
        }
        let inner = &self.inner;
        let req = inner
            .client
            .update_item()
            .table_name(&inner.table)
            .set_key(Some(key(&self.name, LEASE_SK)))
            .condition_expression("#owner = :me")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#data", DATA)
            .expression_attribute_values(":me", s(&self.holder));
        let req = match &data {
            Some(bytes) => req
                .update_expression("SET #data = :data")
                .expression_attribute_values(":data", AttributeValue::B(Blob::new(bytes.clone()))),
            None => req.update_expression("REMOVE #data"),
        };
        match req.send().await {
            Ok(_) => {
                self.data = data;
                Ok(())
            }
            Err(e) => match update_failure(e) {
                WriteFailure::Condition(_) => {
                    self.heartbeat.mark_lost("the record has another holder");
                    Err(LockError::Lost {
                        name: self.name.clone(),
                    })
                }
                WriteFailure::Other(e) => Err(e.into()),
            },
        }
    }

    /// Releases the lock, keeping the record (and so the fencing counter). One `UpdateItem`.
    ///
    /// Returns [`LockError::Lost`] if someone had taken the lock over.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped midway, the guard's `Drop` releases in the background.
    pub async fn release(self) -> Result<(), LockError> {
        self.release_inner(None).await
    }

    /// Releases the lock and stores `data` as the record's payload in the same write (exclusive
    /// locks only; `None` removes the payload).
    ///
    /// # Cancel safety
    ///
    /// As for [`release`](Self::release).
    pub async fn release_with_data(self, data: Option<Vec<u8>>) -> Result<(), LockError> {
        if self.shared {
            return Err(LockError::InvalidConfig(
                "a shared holder cannot write the payload".into(),
            ));
        }
        self.release_inner(Some(data)).await
    }

    async fn release_inner(mut self, data: Option<Option<Vec<u8>>>) -> Result<(), LockError> {
        self.heartbeat.stop().await;
        let r = release_holder(&self.inner, &self.name, &self.holder, self.shared, data).await;
        self.released = true;
        self.heartbeat.finish();
        match r {
            Ok(true) => {
                tracing::debug!(lock = %self.name, fence = self.fence, "lease lock released");
                crate::metrics::lock_released(crate::metrics::LEASE_LOCK);
                Ok(())
            }
            Ok(false) => Err(LockError::Lost {
                name: self.name.clone(),
            }),
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.released {
            self.heartbeat.finish();
            spawn_release(
                self.inner.clone(),
                self.name.clone(),
                self.holder.clone(),
                self.shared,
            );
        }
    }
}
