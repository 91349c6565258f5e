//! Acquiring a lease lock: the conditional write, takeover of dead holders, adoption of our own
//! ambiguous writes.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tokio::time::Instant;

use super::guard::{lease_beat, spawn_release};
use super::{ALL_OLD, FREE_OF_READERS, LEASE_SK, LeaseGuard, LeaseLock};
use crate::lock::heartbeat::Heartbeat;
use crate::lock::util::*;
use crate::lock::{LockError, Wait};
use crate::{Error, Item};

impl LeaseLock {
    pub(super) fn entry_value(&self, hb: u64) -> AttributeValue {
        let inner = &self.inner;
        let exp = inner.clock.now_millis() + millis(inner.lease);
        AttributeValue::M(Item::from([
            (HB.to_string(), n(hb)),
            (LEASE_MS.to_string(), n(millis(inner.lease))),
            (EXP_MS.to_string(), n(exp)),
            (CLOSED.to_string(), AttributeValue::Bool(inner.fail_closed)),
        ]))
    }

    pub(super) async fn acquire_inner(
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
                        let ambiguous = e.may_have_landed();
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

    pub(super) fn granted(
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
    pub(super) async fn ensure_record(&self, name: &str) -> Result<(), LockError> {
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

    pub(super) fn remove_strays(&self, name: &str, strays: &[String]) {
        for rid in strays {
            spawn_release(self.inner.clone(), name.to_string(), rid.clone(), true);
        }
    }

    pub(super) async fn remove_dead_reader(
        &self,
        name: &str,
        reader: &str,
        hb: u64,
    ) -> Result<(), LockError> {
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
}
