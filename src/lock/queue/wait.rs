//! Waiting for our turn: polling the queue, judging the rows ahead, deleting dead ones.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::Enqueued;
use super::row::spawn_delete;
use super::{ALL_OLD, Observation, QueueLock};
use crate::lock::util::*;
use crate::lock::{Expiry, LockError, Wait};
use crate::{Error, Item};

/// What one look at the queue found.
pub(super) struct Scan {
    /// Live rows ahead of ours (counted up to the first page that had one).
    live_ahead: usize,
    /// Whether our own row is there with our owner id (`None`: not read).
    found_self: Option<bool>,
    /// The earliest time a live row ahead could be judged dead.
    next_death: Option<Instant>,
}

impl QueueLock {
    pub(super) async fn wait_turn(
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
    pub(super) async fn scan(
        &self,
        name: &str,
        my_sk: &str,
        owner: &str,
    ) -> Result<Scan, LockError> {
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

    pub(super) fn judge(
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
    pub(super) async fn delete_dead(
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

pub(super) enum Judgement {
    Dead,
    /// Alive; could be judged dead at this time if it stays silent.
    Alive(Instant),
}
