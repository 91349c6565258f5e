//! Security through the library's own API, against items that really are locked:
//!
//! - a caller cannot forge a lock (write `_Tx*` attributes), clear one (remove or overwrite them,
//!   directly or through `#name` placeholders, nested paths or update operands) or read through one
//!   (project, filter, condition on or copy `_Tx*` attributes, among them the before-image `_TxG`),
//!   on any write or read path, in or out of a transaction: every such request is an
//!   `InvalidRequest` before anything is sent, and the lock is intact afterwards;
//! - no result carries `_Tx*` attributes while the item is read-locked, applied but uncommitted, or
//!   committed: isolated reads at both levels (get, batch get, query, scan, streams, typed),
//!   `Transaction::get_item`, every `ReturnValues`, and `Error::ConditionFailed::item`;
//! - a finished transaction, resumed by id, accepts no new request and writes nothing.
//!
//! `tests/isolation/` checks the isolated reads' contents in every lock state and
//! `tests/transaction/validation.rs` the validation of unlocked requests; this file covers what they do not.
#[path = "../common/mod.rs"]
mod common;

mod finished;
mod leaks;
mod reserved_attributes;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{KeysAndAttributes, ReturnValue};
use common::*;
use dynamodb_transactions::{Error, IsolationLevel, Item, Transaction, TxState};
use futures::TryStreamExt;

const LEVELS: [IsolationLevel; 2] = [IsolationLevel::Uncommitted, IsolationLevel::Committed];

/// Every lock attribute the protocol writes, and one it does not (the whole prefix is reserved).
const LOCK_NAMES: [&str; 7] = ["_TxId", "_TxD", "_TxT", "_TxA", "_TxG", "_TxI", "_TxNew"];

fn original(id: &str) -> Item {
    item(&[("Id", s(id)), ("v", n(1)), ("secret", s("before"))])
}

fn updated(id: &str) -> Item {
    item(&[("Id", s(id)), ("v", n(2)), ("secret", s("after"))])
}

/// `owner` updates `id` from `original` to `updated` and applies it at once (ReturnValues ALL_NEW):
/// the stored item carries the owner's lock and the before-image `_TxG`.
async fn apply_update(env: &TestEnv, owner: &Transaction, id: &str) {
    let got = owner
        .update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET v = :v, secret = :s")
        .expression_attribute_values(":v", n(2))
        .expression_attribute_values(":s", s("after"))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    assert_eq!(got.attributes, Some(updated(id)));
    let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
    assert_eq!(raw.get("_TxId"), Some(&s(owner.id().as_str())), "{raw:?}");
    assert!(
        raw.contains_key("_TxA") && raw.contains_key("_TxG"),
        "{raw:?}"
    );
}

/// Expects `InvalidRequest` for a reserved `_Tx` name, naming the case on failure.
fn expect_invalid<T: std::fmt::Debug>(case: &str, got: Result<T, Error>) {
    expect_invalid_because(case, "_Tx", got)
}

/// Expects `InvalidRequest` whose reason mentions `needle` (so it was rejected for the reason
/// under test, not for another mistake in the request).
fn expect_invalid_because<T: std::fmt::Debug>(case: &str, needle: &str, got: Result<T, Error>) {
    match got {
        Err(Error::InvalidRequest { reason }) if reason.contains(needle) => {}
        other => panic!("{case}: expected InvalidRequest mentioning {needle}, got {other:?}"),
    }
}

/// An item as a JSON map, for the typed API.
fn it_as_json(it: &Item) -> HashMap<String, serde_json::Value> {
    dynamodb_transactions::from_item(it.clone()).unwrap()
}
