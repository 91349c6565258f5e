//! The `dynamodb-tx` binary, run as a process against DynamoDB Local: every subcommand, its output
//! (JSON parsed where practical) and the state it leaves in DynamoDB.
#[path = "../common/mod.rs"]
mod common;

mod failures;
mod lock;
mod sweep;
mod tables;
mod tx;

use std::time::Duration;

use assert_cmd::Command;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use common::*;
use dynamodb_transactions::lock::Wait;
use dynamodb_transactions::lock::queue::QueueLock;
use dynamodb_transactions::{TxId, TxState};
use predicates::prelude::*;
use serde_json::Value;

/// The binary, pointed at the test endpoint, with no table names from the environment.
fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dynamodb-tx"));
    c.env_remove("DYNAMODB_TX_TRANSACTIONS_TABLE")
        .env_remove("DYNAMODB_TX_IMAGES_TABLE")
        .env_remove("DYNAMODB_TX_LOCK_TABLE")
        .args(["--endpoint", endpoint(), "--no-progress"]);
    c
}

/// The binary, on the test environment's tables.
fn tx_bin(env: &TestEnv) -> Command {
    let mut c = bin();
    c.args([
        "--transactions-table",
        env.manager.transactions_table(),
        "--images-table",
        env.manager.images_table(),
    ]);
    c
}

/// Runs a command that must succeed and print JSON.
fn json_of(c: &mut Command) -> Value {
    let out = c
        .arg("--json")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&out).into_owned()
        )
    })
}

/// Runs a command that must fail with exit `code` and exactly one line on stderr containing every
/// one of `words`, and nothing on stdout. Returns that line.
fn fails_with(c: &mut Command, code: i32, words: &[&str]) -> String {
    let out = c.output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line on stderr: {stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    for w in words {
        assert!(stderr.contains(w), "{w:?} not in {stderr:?}");
    }
    assert!(
        !stderr.contains("panicked") && !stderr.contains("{ "),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// The binary with no endpoint, table or credentials settings from the environment.
fn bare_bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dynamodb-tx"));
    for v in [
        "DYNAMODB_TX_TRANSACTIONS_TABLE",
        "DYNAMODB_TX_IMAGES_TABLE",
        "DYNAMODB_TX_LOCK_TABLE",
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL",
    ] {
        c.env_remove(v);
    }
    c.arg("--no-progress");
    c
}

/// A pending transaction whose update of item `id` (bal 100 → 110) is applied, abandoned.
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
    tx_id
}

async fn state(env: &TestEnv, id: &TxId) -> Option<(TxState, bool)> {
    env.tx_state(id).await
}
