//! A held lease lock: renewal, payload updates and release.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use super::{ALL_OLD, Inner, LEASE_SK};
use crate::lock::LockError;
use crate::lock::heartbeat::{BeatFn, BeatOutcome, Heartbeat, LostSignal};
use crate::lock::util::*;
use crate::{Error, Item};

/// Renews a holder: exclusive holders set `hb`/`exp_ms` on the record, shared holders rewrite their
/// entry; both conditional on still being the holder.
pub(super) fn lease_beat(inner: Arc<Inner>, name: String, holder: String, shared: bool) -> BeatFn {
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
pub(super) async fn release_holder(
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
                    ambiguous |= e.may_have_landed();
                    tracing::debug!(lock = name, error = %e, "release failed; retrying");
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                WriteFailure::Other(e) => return Err(e),
            },
        }
    }
}

pub(super) fn spawn_release(inner: Arc<Inner>, name: String, holder: String, shared: bool) {
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

/// A held [`LeaseLock`](super::LeaseLock). Release it with [`release`](Self::release); dropping it releases in the
/// background.
#[derive(Debug)]
pub struct LeaseGuard {
    pub(super) inner: Arc<Inner>,
    pub(super) name: String,
    pub(super) holder: String,
    pub(super) shared: bool,
    pub(super) fence: u64,
    pub(super) data: Option<Vec<u8>>,
    pub(super) heartbeat: Heartbeat,
    pub(super) released: bool,
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

    /// Renews the lease now ("extend"). With [`LeaseLockBuilder::manual_heartbeat`](super::LeaseLockBuilder::manual_heartbeat) this is the
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
