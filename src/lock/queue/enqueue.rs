//! Entering the queue: one `UpdateItem` issues the ticket and writes the entry with it, and
//! recovers the entry of an earlier attempt whose answer was lost.

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tokio::time::Instant;

use super::entry::{entry_beat, spawn_delete};
use super::guard::Enqueued;
use super::state::{ENTRIES, QueueState, entry_attr, ticket_attr};
use super::{ALL_OLD, QueueLock};
use crate::lock::heartbeat::Heartbeat;
use crate::lock::util::*;
use crate::lock::{LockError, Wait};
use crate::{Error, Item};

impl QueueLock {
    /// The entry written for a new acquirer.
    fn entry_value(&self) -> AttributeValue {
        let inner = &self.inner;
        let now = inner.clock.now_millis();
        AttributeValue::M(Item::from([
            (HB.to_string(), n(0)),
            (LEASE_MS.to_string(), n(millis(inner.lease))),
            (EXP_MS.to_string(), n(now + millis(inner.lease))),
            (CREATED_MS.to_string(), n(now)),
        ]))
    }

    /// Takes a ticket and writes our entry in one request; returns the queue as that request left
    /// it. With [`Wait::NoWait`] the request is conditional on an empty queue, so a refusal writes
    /// nothing.
    pub(super) async fn enqueue(
        &self,
        name: &str,
        owner: &str,
        wait: Wait,
        deadline: Option<Instant>,
        start: Instant,
    ) -> Result<(Enqueued, QueueState), LockError> {
        let inner = &self.inner;
        let sk = self.counter_sk();
        let only_if_empty = matches!(wait, Wait::NoWait);
        // The first send of a request of ours that failed ambiguously: it may have written our
        // entry (and a waiter may have seen it) from then on.
        let mut first_send: Option<Instant> = None;
        // Until an `Enqueued` owns our entry, this removes it if this call ends without one: an
        // error, or the future dropped (with a request in flight, or after an ambiguous one).
        let mut doubt = EntryInDoubt {
            inner,
            name,
            sk: &sk,
            owner,
            armed: false,
        };
        let mut attempt = 0u32;
        loop {
            if attempt > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(LockError::Timeout {
                    name: name.to_string(),
                    waited: start.elapsed(),
                });
            }
            let condition = if only_if_empty {
                "attribute_not_exists(#e) AND (attribute_not_exists(#c) OR #c = :zero)"
            } else {
                "attribute_not_exists(#e)"
            };
            let sent_at = Instant::now();
            doubt.armed = true;
            // Every operand reads the item as it was: `#t` gets the ticket that `#n` moves to.
            let r = inner
                .client
                .update_item()
                .table_name(&inner.table)
                .set_key(Some(key(name, &sk)))
                .update_expression(
                    "SET #n = if_not_exists(#n, :zero) + :one, #t = if_not_exists(#n, :zero) + :one, #e = :entry ADD #c :one",
                )
                .condition_expression(condition)
                .expression_attribute_names("#n", COUNT)
                .expression_attribute_names("#t", ticket_attr(owner))
                .expression_attribute_names("#e", entry_attr(owner))
                .expression_attribute_names("#c", ENTRIES)
                .expression_attribute_values(":zero", n(0))
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":entry", self.entry_value())
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(ALL_OLD)
                .send()
                .await;
            // Answered: only an earlier ambiguous request may still write our entry.
            doubt.armed = first_send.is_some();
            attempt += 1;
            let found = match r {
                Ok(out) => QueueState::parse(out.attributes(), self.inner.clock.now_millis()),
                Err(e) => match update_failure(e) {
                    WriteFailure::Condition(item) => {
                        let state = QueueState::parse(item.as_ref(), self.inner.clock.now_millis());
                        if state.find(owner).is_none() {
                            // NoWait, and the queue is not empty: clear dead entries, if that
                            // empties it try again, else refuse (nothing of ours is written).
                            let ahead = self.clear_dead(name, &state, owner, None).await?;
                            if ahead.live == 0 {
                                continue;
                            }
                            return Err(LockError::WouldBlock {
                                name: name.to_string(),
                            });
                        }
                        // Our entry is there: written by an earlier attempt of ours, or by an
                        // SDK retry of this one.
                        state
                    }
                    WriteFailure::Other(e) => {
                        if e.may_have_landed() {
                            first_send.get_or_insert(sent_at);
                            doubt.armed = true;
                        }
                        if e.is_retryable() {
                            tracing::debug!(lock = name, error = %e, "ticket request failed; retrying");
                            tokio::time::sleep(backoff(attempt.min(5))).await;
                            continue;
                        }
                        return Err(e.into());
                    }
                },
            };
            let Some(me) = found.find(owner) else {
                return Err(Error::invariant(format!(
                    "queue lock {name}: the ticket request succeeded but the entry is missing"
                ))
                .into());
            };
            // The lease counts from the earliest send that may have written the entry.
            let from = first_send.unwrap_or(sent_at).min(sent_at);
            let entered = self.entered(name, owner, me.ticket, from);
            doubt.armed = false;
            self.observe_pace(name, &found);
            return Ok((entered, found));
        }
    }

    fn entered(&self, name: &str, owner: &str, ticket: u64, sent_at: Instant) -> Enqueued {
        tracing::debug!(lock = name, ticket, "entered the queue");
        let sk = self.counter_sk();
        let heartbeat = Heartbeat::start(
            name,
            entry_beat(
                self.inner.clone(),
                name.to_string(),
                sk.clone(),
                owner.to_string(),
                ticket,
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
}

/// Our entry as it may stand on the queue item before an [`Enqueued`] owns it. Dropped armed (the
/// call ended without an entry of its own, or its future was dropped while a ticket request that
/// may have landed was in flight or unanswered), it removes the entry in the background.
struct EntryInDoubt<'a> {
    inner: &'a std::sync::Arc<super::Inner>,
    name: &'a str,
    sk: &'a str,
    owner: &'a str,
    armed: bool,
}

impl Drop for EntryInDoubt<'_> {
    fn drop(&mut self) {
        if self.armed {
            spawn_delete(
                self.inner.clone(),
                self.name.to_string(),
                self.sk.to_string(),
                self.owner.to_string(),
            );
        }
    }
}
