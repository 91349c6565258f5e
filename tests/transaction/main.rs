//! Transactions end to end: large transactions, conditions, rejections, bad input, read-your-writes,
//! lock upgrades and request counts, on both commit paths. One file per concept; the helpers they
//! share are here.
#[path = "../common/mod.rs"]
mod common;

mod after_image;
mod batched_locks;
mod commit_paths;
mod drop;
mod folded_commit;
mod hand_off;
mod handles;
mod images;
mod in_doubt;
mod item_size;
mod large;
mod locked_reads;
mod lost_record_writes;
mod reads;
mod record_on_demand;
mod roll_forward;
mod unrecorded_holders;
mod validation;

use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use dynamodb_transactions::{Item, Transaction, TxId};

/// How a commit path configures the library.
type Configure = fn(&mut dynamodb_transactions::Settings);

/// The commit paths the suite runs each test on, by the suffix of their environments' names:
/// one `TransactWriteItems`, phases, and phases locking item by item.
const PATHS: [(&str, Configure); 3] = [
    ("os", |_| {}),
    ("ph", |s| s.one_shot_max_items = 0),
    ("pi", |s| s.batch_locks = false),
];

/// An environment for each of the [`PATHS`].
async fn envs(prefix: &str) -> Vec<TestEnv> {
    let mut out = Vec::new();
    for (path, settings) in PATHS {
        out.push(TestEnv::with_settings(&format!("{prefix}-{path}"), settings).await);
    }
    out
}

async fn assert_clean(env: &TestEnv) {
    for i in env.scan_all(&env.table).await {
        assert!(!has_tx_attrs(&i), "lock attributes left: {i:?}");
    }
    assert!(
        env.scan_all(env.manager.images_table()).await.is_empty(),
        "images left"
    );
}

async fn counts(env: &TestEnv, ids: &[&str]) -> Vec<AttributeValue> {
    let mut out = Vec::new();
    for id in ids {
        let i = env.raw_get(&env.table, &key(id)).await.unwrap();
        assert!(!has_tx_attrs(&i), "lock attributes left: {i:?}");
        out.push(i["n"].clone());
    }
    out
}

async fn assert_no_images(env: &TestEnv, what: &str) {
    let images = env.scan_all(env.manager.images_table()).await;
    assert!(images.is_empty(), "{what}: images left: {}", images.len());
}

/// Puts each of `ids` with `v = 1`.
async fn seed(env: &TestEnv, ids: &[&str]) {
    for id in ids {
        env.raw_put(&env.table, item(&[("Id", s(id)), ("v", n(1))]))
            .await;
    }
}

/// Warms the manager's key-schema cache for `env.table`.
async fn warm(env: &TestEnv) {
    env.manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
}

/// A locked read of `id`: its `v`, if it has one.
async fn read(
    tx: &Transaction,
    table: &str,
    id: &str,
) -> dynamodb_transactions::Result<Option<i64>> {
    let out = tx
        .get_item()
        .table_name(table)
        .key("Id", s(id))
        .send()
        .await?;
    Ok(out
        .item
        .and_then(|i| i.get("v").and_then(|v| v.as_n().ok()?.parse().ok())))
}

/// Buffers `SET v = <v>` on `id`.
async fn set(tx: &Transaction, table: &str, id: &str, v: i64) -> dynamodb_transactions::Result<()> {
    tx.update_item()
        .table_name(table)
        .key("Id", s(id))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(v))
        .send()
        .await
        .map(|_| ())
}

/// Another coordinator over `env`'s tables, through `client`, with `f`'s settings.
fn coordinator_on(
    env: &TestEnv,
    client: aws_sdk_dynamodb::Client,
    f: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> dynamodb_transactions::TransactionManager {
    dynamodb_transactions::TransactionManager::builder(client)
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.write_only_fast_path = false;
            f(s)
        })
        .build()
}

/// Another coordinator over `env`'s tables with `f`'s settings.
fn coordinator_with(
    env: &TestEnv,
    f: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> dynamodb_transactions::TransactionManager {
    coordinator_on(env, client(), f)
}

/// The raw header row of a transaction's record (a tombstone included).
async fn header_row(env: &TestEnv, id: &TxId) -> Option<Item> {
    env.raw_get(
        env.manager.transactions_table(),
        &item(&[("_TxId", s(id.as_str())), ("_TxN", n(0))]),
    )
    .await
}
