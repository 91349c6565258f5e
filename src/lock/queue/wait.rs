//! Waiting for our turn: reading the queue when our turn is likely, judging the entries ahead,
//! removing dead ones.

use std::time::Duration;

use tokio::time::Instant;

use super::entry::remove_entry;
use super::guard::Enqueued;
use super::state::{Entry, QueueState};
use super::{Observation, QueueLock};
use crate::Error;
use crate::lock::util::*;
use crate::lock::{Expiry, LockError, Wait};

/// Most reads of the queue a waiter at its head has in flight at once.
const HEAD_READS_IN_FLIGHT: usize = 3;
/// At the head, reads go out this many `poll_interval.head`s apart, whether or not the last one
/// came back.
const HEAD_READ_SPACING: f64 = 1.5;

/// The entries ahead of a waiter after dead ones were removed.
pub(super) struct Ahead {
    /// Live entries ahead (the first one holds the lock).
    pub(super) live: usize,
    /// The earliest time a live entry ahead could be judged dead.
    pub(super) next_death: Option<Instant>,
}

enum Judgement {
    Dead,
    /// Alive; could be judged dead at this time if it stays silent.
    Alive(Instant),
}

impl QueueLock {
    /// Waits until our entry is the first live one. `state` is the queue as our ticket request
    /// left it.
    pub(super) async fn wait_turn(
        &self,
        entry: &Enqueued,
        mut state: QueueState,
        wait: Wait,
        deadline: Option<Instant>,
        start: Instant,
    ) -> Result<(), LockError> {
        let lost = || LockError::Lost {
            name: entry.name.clone(),
        };
        let inner = &self.inner;
        let mut failures = 0u32;
        let mut waited = false;
        // Reads of the queue in flight. At the head, polls go out every `poll_interval.head`
        // without waiting for the one before to come back (at most `HEAD_READS_IN_FLIGHT`), so
        // the release is seen about a one-way trip after it lands rather than up to a round trip
        // plus the interval later.
        let mut polls = futures::stream::FuturesUnordered::new();
        loop {
            let hb = entry
                .heartbeat
                .as_ref()
                .expect("heartbeat present while waiting");
            if hb.is_lost() {
                return Err(lost());
            }
            // Our entry, with our ticket: an entry of our owner id with another ticket was
            // written by a late request of ours after ours was removed as dead.
            if state.find(&entry.owner).map(|e| e.ticket) != Some(entry.ticket) {
                hb.mark_lost("our queue entry was removed while waiting");
                return Err(lost());
            }
            let ahead = match self
                .clear_dead(&entry.name, &state, &entry.owner, Some(entry.ticket))
                .await
            {
                Ok(ahead) => ahead,
                Err(LockError::DynamoDb(e)) if self.retry_poll(&e, deadline) => {
                    failures += 1;
                    tokio::time::sleep(backoff(failures)).await;
                    state = self.read_queue(&entry.name).await.unwrap_or(state);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if ahead.live == 0 {
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
            let mut pause = inner
                .pace
                .lock()
                .expect("poisoned")
                .get(&entry.name)
                .cloned()
                .unwrap_or_default()
                .pause(ahead.live, inner.poll_head, inner.poll_max, now);
            if let Some(death) = ahead.next_death {
                pause = pause.min(death.saturating_duration_since(now) + Duration::from_millis(5));
            }
            if let Some(d) = deadline {
                pause = pause.min(d.saturating_duration_since(now));
            }
            tracing::trace!(lock = %entry.name, ticket = entry.ticket, ahead = ahead.live, ?pause, "waiting in queue");
            waited = true;
            // Polling fast at the head: the next read goes out on time even if the last one is
            // still on its way; whichever answers first is taken (any read that shows no live
            // entry ahead proves our turn, however old: entries ahead only ever leave).
            let polling = ahead.live == 1 && pause <= inner.poll_head * 2;
            let mut first = if polling {
                if polls.is_empty() {
                    polls.push(self.read_queue(&entry.name));
                }
                let mut tick = std::pin::pin!(tokio::time::sleep(pause));
                loop {
                    tokio::select! {
                        Some(read) = futures::StreamExt::next(&mut polls) => break Some(read),
                        () = &mut tick => {
                            if polls.len() < HEAD_READS_IN_FLIGHT {
                                polls.push(self.read_queue(&entry.name));
                            }
                            tick.set(tokio::time::sleep(jitter(inner.poll_head.mul_f64(HEAD_READ_SPACING))));
                        }
                    }
                }
            } else if let Some(read) = futures::StreamExt::next(&mut polls).await {
                // Reads sent while at the head and not yet back: take the next one instead of
                // sending another.
                Some(read)
            } else {
                tokio::time::sleep(pause).await;
                None
            };
            state = loop {
                let read = match first.take() {
                    Some(read) => read,
                    None => self.read_queue(&entry.name).await,
                };
                match read {
                    Ok(s) => {
                        failures = 0;
                        break s;
                    }
                    Err(e) if self.retry_poll(&e, deadline) => {
                        tracing::warn!(lock = %entry.name, error = %e, "queue poll failed; retrying");
                        failures += 1;
                        tokio::time::sleep(backoff(failures)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            self.observe_pace(&entry.name, &state);
        }
    }

    fn retry_poll(&self, e: &Error, deadline: Option<Instant>) -> bool {
        e.is_retryable() && deadline.is_none_or(|d| Instant::now() < d)
    }

    /// Reads the queue (one strongly consistent `GetItem`).
    pub(super) async fn read_queue(&self, name: &str) -> Result<QueueState, Error> {
        let inner = &self.inner;
        let out = inner
            .client
            .get_item()
            .table_name(&inner.table)
            .set_key(Some(key(name, &self.counter_sk())))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| Error::sdk("GetItem", e))?;
        Ok(QueueState::parse(out.item(), self.inner.clock.now_millis()))
    }

    /// Takes a read of the queue into the handle's estimate of its pace.
    pub(super) fn observe_pace(&self, name: &str, state: &QueueState) {
        self.inner
            .pace
            .lock()
            .expect("poisoned")
            .entry(name.to_string())
            .or_default()
            .observe(state.at, state.departed(), state.departed_at);
    }

    /// Judges the entries of others below ticket `below` (all of them if `None`), removes the
    /// dead ones, and counts the live ones.
    pub(super) async fn clear_dead(
        &self,
        name: &str,
        state: &QueueState,
        me: &str,
        below: Option<u64>,
    ) -> Result<Ahead, LockError> {
        let mut ahead = Ahead {
            live: 0,
            next_death: None,
        };
        // Forget observations of entries of this lock that are gone.
        self.inner
            .observations
            .lock()
            .expect("poisoned")
            .retain(|(pk, owner), _| pk != name || state.find(owner).is_some());
        for e in &state.entries {
            if below.is_some_and(|t| e.ticket >= t) || e.owner == me {
                continue;
            }
            match self.judge(name, e, state.at) {
                Judgement::Dead => {
                    if self.remove_dead(name, e).await? {
                        continue;
                    }
                    ahead.live += 1;
                }
                Judgement::Alive(death) => {
                    ahead.live += 1;
                    ahead.next_death = Some(ahead.next_death.map_or(death, |d| d.min(death)));
                }
            }
        }
        Ok(ahead)
    }

    fn judge(&self, name: &str, e: &Entry, now: Instant) -> Judgement {
        let inner = &self.inner;
        let lease = Duration::from_millis(e.lease_ms.unwrap_or(millis(inner.lease) as u64));
        match inner.expiry {
            Expiry::Observed => {
                let mut obs = inner.observations.lock().expect("poisoned");
                let seen = obs
                    .entry((name.to_string(), e.owner.clone()))
                    .or_insert(Observation {
                        hb: e.hb,
                        since: now,
                    });
                if seen.hb != e.hb {
                    *seen = Observation {
                        hb: e.hb,
                        since: now,
                    };
                }
                let death = seen.since + lease + inner.skew_margin;
                if now >= death {
                    Judgement::Dead
                } else {
                    Judgement::Alive(death)
                }
            }
            Expiry::WallClock => {
                let exp = e.exp_ms.unwrap_or(i64::MAX);
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

    /// Removes an entry judged dead, if it still is what was judged. True if the entry is gone.
    async fn remove_dead(&self, name: &str, e: &Entry) -> Result<bool, LockError> {
        let inner = &self.inner;
        let r = remove_entry(inner, name, &self.counter_sk(), &e.owner, Some(e.hb)).await?;
        let gone = match r {
            Ok(()) => {
                tracing::info!(
                    lock = name,
                    ticket = e.ticket,
                    dead_owner = %e.owner,
                    "removed a dead queue entry"
                );
                true
            }
            // The entry renewed meanwhile (still there), or someone else removed it.
            Err(item) => QueueState::parse(item.as_ref(), 0).find(&e.owner).is_none(),
        };
        if gone {
            inner
                .observations
                .lock()
                .expect("poisoned")
                .remove(&(name.to_string(), e.owner.clone()));
        }
        Ok(gone)
    }
}
