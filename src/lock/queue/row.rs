//! Writes to our own queue row: renewal and deletion.

use std::sync::Arc;
use std::time::Duration;

use super::{ALL_OLD, Inner};
use crate::Error;
use crate::lock::heartbeat::{BeatFn, BeatOutcome};
use crate::lock::util::*;

pub(super) fn ttl_secs(exp_ms: i64, grace: Duration) -> i64 {
    exp_ms / 1000 + i64::try_from(grace.as_secs()).unwrap_or(i64::MAX / 2)
}

/// Renews a queue row: sets the heartbeat counter to the target, conditional on still owning it.
pub(super) fn row_beat(inner: Arc<Inner>, name: String, sk: String, owner: String) -> BeatFn {
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
pub(super) async fn delete_own(
    inner: &Inner,
    name: &str,
    sk: &str,
    owner: &str,
) -> Result<bool, Error> {
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
pub(super) fn spawn_delete(inner: Arc<Inner>, name: String, sk: String, owner: String) {
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
