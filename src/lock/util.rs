//! Attribute names and small helpers shared by the locks.

use std::fmt;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use rand::Rng;

use crate::Item;

/// Hash key: the lock (or counter) name.
pub(crate) const PK: &str = "pk";
/// Range key: what the row is (counter with its queue, lease record).
pub(crate) const SK: &str = "sk";
/// Owner id of a lease holder: unique per acquisition.
pub(crate) const OWNER: &str = "owner";
/// Heartbeat counter: changes with every heartbeat.
pub(crate) const HB: &str = "hb";
/// Lease duration of the holder, in milliseconds.
pub(crate) const LEASE_MS: &str = "lease_ms";
/// Wall-clock expiry, epoch milliseconds.
pub(crate) const EXP_MS: &str = "exp_ms";
/// DynamoDB TTL attribute, epoch seconds (garbage collection only).
pub(crate) const TTL: &str = "ttl";
/// Counter value.
pub(crate) const COUNT: &str = "n";
/// Fencing counter of a lease record.
pub(crate) const FENCE: &str = "fence";
/// Map of shared holders of a lease record.
pub(crate) const READERS: &str = "readers";
/// True when the holder never expires (fail-closed).
pub(crate) const CLOSED: &str = "closed";
/// Payload of a lease record.
pub(crate) const DATA: &str = "data";
/// Creation time of a queue entry, epoch milliseconds (informational).
pub(crate) const CREATED_MS: &str = "created_ms";

/// Sort key of the default ticket counter of a lock name.
pub(crate) const COUNTER_SK: &str = "#ctr";

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl fmt::Display) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn key(pk: &str, sk: &str) -> Item {
    Item::from([(PK.to_string(), s(pk)), (SK.to_string(), s(sk))])
}

pub(crate) fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

pub(crate) fn get_u64(item: &Item, name: &str) -> Option<u64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

pub(crate) fn get_i64(item: &Item, name: &str) -> Option<i64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

pub(crate) fn get_bool(item: &Item, name: &str) -> bool {
    item.get(name)
        .and_then(|v| v.as_bool().ok())
        .copied()
        .unwrap_or(false)
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `d` scaled by a random factor in [0.8, 1.2].
pub(crate) fn jitter(d: Duration) -> Duration {
    let f: f64 = rand::rng().random_range(0.8..1.2);
    d.mul_f64(f)
}

/// Exponential backoff for attempt `attempt` (0-based): 20 ms doubling, capped at 1 s, jittered.
pub(crate) fn backoff(attempt: u32) -> Duration {
    jitter(
        Duration::from_millis(20)
            .saturating_mul(1 << attempt.min(6))
            .min(Duration::from_secs(1)),
    )
}

/// The outcome of a conditional write that failed.
pub(crate) enum WriteFailure {
    /// The condition was false; the item as it was (`ReturnValuesOnConditionCheckFailure::AllOld`),
    /// `None` if it did not exist.
    Condition(Option<Item>),
    /// Any other failure.
    Other(crate::Error),
}

macro_rules! classify {
    ($name:ident, $err:ident, $op:literal) => {
        pub(crate) fn $name<R>(e: SdkError<$err, R>) -> WriteFailure
        where
            R: fmt::Debug + Send + Sync + 'static,
        {
            if let Some($err::ConditionalCheckFailedException(c)) = e.as_service_error() {
                return WriteFailure::Condition(c.item().cloned());
            }
            WriteFailure::Other(crate::Error::sdk($op, e))
        }
    };
}

classify!(update_failure, UpdateItemError, "UpdateItem");
