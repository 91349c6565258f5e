//! Entering the queue: the ticket transaction (counter and row in one `TransactWriteItems`) and
//! the recovery of ambiguous ticket requests.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use tokio::time::Instant;

use super::guard::Enqueued;
use super::row::{row_beat, spawn_delete};
use super::{ALL_OLD, QueueLock};
use crate::lock::LockError;
use crate::lock::counter::read_counter;
use crate::lock::heartbeat::Heartbeat;
use crate::lock::util::*;
use crate::{Error, Item};

impl QueueLock {
    /// Takes a ticket and writes the queue row atomically.
    pub(super) async fn enqueue(
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

    pub(super) fn entered(
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
    pub(super) fn cleanup_strays(
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

    pub(super) async fn row_owned(
        &self,
        name: &str,
        sk: &str,
        owner: &str,
    ) -> Result<bool, LockError> {
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
}
