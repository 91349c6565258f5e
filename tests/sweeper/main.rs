//! The sweeper: transactions abandoned in every state end as they should, orphaned images and locks
//! are cleaned, fresh work is left alone, a dry run writes nothing, and the background sweeper stops.
#[path = "../common/mod.rs"]
mod common;

mod abandoned;
mod finishing;
mod inspect;
mod marks;
mod orphans;
mod queues;
mod running;
mod unrecorded;

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use common::*;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::sweeper::{ListOptions, SweepOptions};
use dynamodb_transactions::{TransactionManager, TxId, TxState};

const HOUR_MS: u64 = 3_600_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Makes a record look idle: sets its last-update time `ago_ms` in the past.
async fn age_record(env: &TestEnv, id: &TxId, ago_ms: u64) {
    env.client
        .update_item()
        .table_name(env.manager.transactions_table())
        .key("_TxId", s(id.as_str()))
        .key("_TxN", n(0))
        .update_expression("SET #d = :d")
        .condition_expression("attribute_exists(#d)")
        .expression_attribute_names("#d", "_TxD")
        .expression_attribute_values(":d", n(now_ms() - ago_ms))
        .send()
        .await
        .expect("age the record");
}

/// Fetches the table's key schema so it does not count among a crash test's requests.
async fn warm(m: &TransactionManager, table: &str) {
    m.get_item()
        .table_name(table)
        .key("Id", s("warm-up"))
        .send()
        .await
        .unwrap();
}

/// Writes item `id` with `bal` 100 and begins a transaction that adds 10 to it (buffered).
async fn begin_plus_ten(env: &TestEnv, id: &str) -> dynamodb_transactions::Transaction {
    env.raw_put(&env.table, item(&[("Id", s(id)), ("bal", n(100))]))
        .await;
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .send()
        .await
        .unwrap();
    tx
}

/// A transaction that applied `+10` to item `id` (ALL_NEW applies at once) and was abandoned: pending,
/// its item locked and applied with the before-image embedded.
async fn abandoned_pending(env: &TestEnv, id: &str) -> TxId {
    env.raw_put(&env.table, item(&[("Id", s(id)), ("bal", n(100))]))
        .await;
    let tx = env.manager.begin();
    let tx_id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    tx.abandon();
    let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
    assert_eq!(raw["_TxA"], s("1"), "the write is applied");
    tx_id
}

async fn state(env: &TestEnv, id: &TxId) -> Option<(TxState, bool)> {
    env.tx_state(id).await
}

async fn bal(env: &TestEnv, id: &str) -> Option<Item> {
    env.raw_get(&env.table, &key(id)).await
}

fn plain(id: &str, bal: i64) -> Option<Item> {
    Some(item(&[("Id", s(id)), ("bal", n(bal))]))
}

use dynamodb_transactions::Item;
