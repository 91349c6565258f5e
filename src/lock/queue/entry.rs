//! Writes to our own queue entry: renewal and removal.

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;

use super::state::{DEPARTED_AT, ENTRIES, entry_attr, ticket_attr};
use super::{ALL_OLD, Inner};
use crate::Error;
use crate::lock::heartbeat::{BeatFn, BeatOutcome};
use crate::lock::util::*;

/// Renews a queue entry: sets its heartbeat counter to the target, conditional on the entry still
/// being there with our ticket and its counter not past the target.
pub(super) fn entry_beat(
    inner: Arc<Inner>,
    name: String,
    sk: String,
    owner: String,
    ticket: u64,
) -> BeatFn {
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
                .update_expression("SET #e.#hb = :hb, #e.#exp = :exp")
                // Never back: a late request of an earlier renewal must not undo a newer one.
                .condition_expression("#e.#hb <= :hb AND #t = :ticket")
                .expression_attribute_names("#e", entry_attr(&owner))
                .expression_attribute_names("#t", ticket_attr(&owner))
                .expression_attribute_values(":ticket", n(ticket))
                .expression_attribute_names("#hb", HB)
                .expression_attribute_names("#exp", EXP_MS)
                .expression_attribute_values(":hb", n(target))
                .expression_attribute_values(":exp", n(exp))
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

/// Removes the entry of `owner` (and its ticket) if `condition` holds, keeping the entry count.
/// `Ok(true)`: removed by this call; `Ok(false)`: the condition was false (`None` item: gone).
pub(super) async fn remove_entry(
    inner: &Inner,
    name: &str,
    sk: &str,
    owner: &str,
    judged_hb: Option<u64>,
) -> Result<Result<(), Option<crate::Item>>, Error> {
    let mut req = inner
        .client
        .update_item()
        .table_name(&inner.table)
        .set_key(Some(key(name, sk)))
        .update_expression("REMOVE #e, #t ADD #c :minus SET #d = :now")
        .expression_attribute_names("#e", entry_attr(owner))
        .expression_attribute_names("#t", ticket_attr(owner))
        .expression_attribute_names("#c", ENTRIES)
        .expression_attribute_names("#d", DEPARTED_AT)
        .expression_attribute_values(":minus", AttributeValue::N("-1".into()))
        .expression_attribute_values(":now", n(inner.clock.now_millis()))
        .return_values_on_condition_check_failure(ALL_OLD);
    req = match judged_hb {
        Some(hb) => req
            .condition_expression("#e.#hb = :hb")
            .expression_attribute_names("#hb", HB)
            .expression_attribute_values(":hb", n(hb)),
        None => req.condition_expression("attribute_exists(#e)"),
    };
    match req.send().await {
        Ok(_) => Ok(Ok(())),
        Err(e) => match update_failure(e) {
            WriteFailure::Condition(item) => Ok(Err(item)),
            WriteFailure::Other(e) => Err(e),
        },
    }
}

/// Removes our own entry. `Ok(true)`: removed by us (or already gone after an ambiguous attempt of
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
        match remove_entry(inner, name, sk, owner, None).await {
            Ok(Ok(())) => return Ok(true),
            Ok(Err(_)) => return Ok(ambiguous),
            Err(e) if e.is_retryable() && attempt < 5 => {
                ambiguous |= e.may_have_landed();
                tracing::debug!(lock = name, error = %e, "removing queue entry failed; retrying");
                attempt += 1;
                tokio::time::sleep(backoff(attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Removes our entry in the background (from `Drop`): needs a Tokio runtime; without one the entry
/// is left to expire.
pub(super) fn spawn_delete(inner: Arc<Inner>, name: String, sk: String, owner: String) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(async move {
                if let Err(e) = delete_own(&inner, &name, &sk, &owner).await {
                    tracing::warn!(lock = %name, error = %e, "could not remove queue entry; it will expire");
                }
            });
        }
        Err(_) => {
            tracing::warn!(lock = %name, "no Tokio runtime to remove the queue entry; it will expire")
        }
    }
}
