//! The heartbeat shared by both locks: renews a row (or lease entry) until stopped, retries
//! ambiguous and failed renewals with the same target value, and reports a lost lock through a
//! watch channel instead of dying silently.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::LockError;
use super::util::backoff;

/// The result of one renewal request.
pub(crate) enum BeatOutcome {
    /// The row now carries the target heartbeat value.
    Done,
    /// The row is gone or belongs to someone else: the lock is lost.
    Gone,
    /// The request failed (maybe ambiguously); retry with the same target.
    Failed(crate::Error),
}

pub(crate) type BeatFuture = Pin<Box<dyn Future<Output = BeatOutcome> + Send>>;
/// Sends one renewal that sets the heartbeat counter to the given target value.
pub(crate) type BeatFn = Arc<dyn Fn(u64) -> BeatFuture + Send + Sync>;

struct Core {
    name: String,
    beat: BeatFn,
    /// `None`: the lock never expires (fail-closed); nothing to renew.
    lease: Option<Duration>,
    /// The last confirmed heartbeat value; the mutex serializes renewals.
    hb: tokio::sync::Mutex<u64>,
    /// When the lease runs out locally unless renewed: (time the last successful renewal was
    /// first sent) + lease. Waiters can judge the holder dead only after this.
    deadline: Arc<Mutex<Option<Instant>>>,
    lost_tx: watch::Sender<bool>,
}

impl Core {
    fn set_lost(&self, why: &str) {
        if !*self.lost_tx.borrow() {
            tracing::warn!(lock = %self.name, why, "lock lost");
            crate::metrics::lock_lost();
        }
        self.lost_tx.send_replace(true);
    }

    fn is_lost(&self) -> bool {
        *self.lost_tx.borrow()
            || self
                .deadline
                .lock()
                .expect("deadline poisoned")
                .is_some_and(|d| Instant::now() >= d)
    }

    async fn beat_once(&self) -> Result<(), LockError> {
        let mut hb = self.hb.lock().await;
        let lost = || LockError::Lost {
            name: self.name.clone(),
        };
        if *self.lost_tx.borrow() {
            return Err(lost());
        }
        let Some(lease) = self.lease else {
            return Ok(());
        };
        let target = *hb + 1;
        let first_send = Instant::now();
        let mut attempt = 0;
        loop {
            let deadline = self
                .deadline
                .lock()
                .expect("deadline poisoned")
                .unwrap_or(first_send + lease);
            let now = Instant::now();
            if now >= deadline {
                self.set_lost("the lease ran out before a heartbeat succeeded");
                return Err(lost());
            }
            match tokio::time::timeout(deadline - now, (self.beat)(target)).await {
                Ok(BeatOutcome::Done) => {
                    *hb = target;
                    *self.deadline.lock().expect("deadline poisoned") = Some(first_send + lease);
                    tracing::trace!(lock = %self.name, hb = target, "heartbeat");
                    return Ok(());
                }
                Ok(BeatOutcome::Gone) => {
                    self.set_lost("the row was taken over or deleted");
                    return Err(lost());
                }
                Ok(BeatOutcome::Failed(e)) => {
                    tracing::warn!(lock = %self.name, hb = target, attempt, error = %e, "heartbeat failed; retrying");
                    let pause =
                        backoff(attempt).min(deadline.saturating_duration_since(Instant::now()));
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                Err(_) => {
                    tracing::warn!(lock = %self.name, hb = target, "heartbeat timed out at the lease deadline");
                }
            }
        }
    }
}

/// Renews a held row in the background (if an interval is set) and on demand.
pub(crate) struct Heartbeat {
    core: Arc<Core>,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heartbeat")
            .field("lock", &self.core.name)
            .field("lost", &self.core.is_lost())
            .finish()
    }
}

impl Heartbeat {
    /// Starts renewing. `sent_at` is when the write that created the row (with heartbeat value
    /// `hb`) was first sent: the earliest send that may have written it, since a waiter may have
    /// seen the row from then on. The local lease runs from there.
    pub(crate) fn start(
        name: &str,
        beat: BeatFn,
        lease: Option<Duration>,
        interval: Option<Duration>,
        hb: u64,
        sent_at: Instant,
    ) -> Heartbeat {
        let (lost_tx, _) = watch::channel(false);
        let core = Arc::new(Core {
            name: name.to_string(),
            beat,
            lease,
            hb: tokio::sync::Mutex::new(hb),
            deadline: Arc::new(Mutex::new(lease.map(|l| sent_at + l))),
            lost_tx,
        });
        let task = match (lease, interval) {
            (Some(lease), Some(every)) => {
                let core = core.clone();
                // The first renewal comes sooner when less than a lease is left (the row was
                // written by an earlier send that may have landed long ago).
                let left = (sent_at + lease).saturating_duration_since(Instant::now());
                let mut pause = every.min(left / 2);
                Some(tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(pause).await;
                        pause = every;
                        if core.beat_once().await.is_err() {
                            return;
                        }
                    }
                }))
            }
            _ => None,
        };
        Heartbeat { core, task }
    }

    /// Renews now.
    pub(crate) async fn beat_now(&self) -> Result<(), LockError> {
        self.core.beat_once().await
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.core.is_lost()
    }

    pub(crate) fn mark_lost(&self, why: &str) {
        self.core.set_lost(why)
    }

    /// Time left on the local lease (`None`: never expires).
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.core
            .deadline
            .lock()
            .expect("deadline poisoned")
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    pub(crate) fn signal(&self) -> LostSignal {
        LostSignal {
            rx: self.core.lost_tx.subscribe(),
            deadline: self.core.deadline.clone(),
        }
    }

    /// Stops renewing and waits until no renewal is in flight.
    pub(crate) async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        let _serialize = self.core.hb.lock().await;
    }

    /// Stops renewing without waiting, and clears the local deadline (the lock was released).
    pub(crate) fn finish(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        *self.core.deadline.lock().expect("deadline poisoned") = None;
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Tells when a held lock is lost: its lease ran out locally before a heartbeat succeeded, or its
/// row was taken over or deleted by someone else.
///
/// Cheap to clone. Once the lock is released normally the signal never fires.
#[derive(Debug, Clone)]
pub struct LostSignal {
    rx: watch::Receiver<bool>,
    deadline: Arc<Mutex<Option<Instant>>>,
}

impl LostSignal {
    /// True if the lock is lost (or its local lease ran out).
    pub fn is_lost(&self) -> bool {
        *self.rx.borrow()
            || self
                .deadline
                .lock()
                .expect("deadline poisoned")
                .is_some_and(|d| Instant::now() >= d)
    }

    /// Resolves when the lock is lost; never resolves if it is held until released.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future has no effect, and it can be awaited again.
    pub async fn lost(&self) {
        let mut rx = self.rx.clone();
        loop {
            if *rx.borrow_and_update() {
                return;
            }
            let deadline = *self.deadline.lock().expect("deadline poisoned");
            match deadline {
                Some(d) if Instant::now() >= d => return,
                Some(d) => {
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { std::future::pending::<()>().await },
                        _ = tokio::time::sleep_until(d) => {}
                    }
                }
                None => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}
