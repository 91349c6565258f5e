//! Reads outside transactions at `Uncommitted` and `Committed`: GetItem, Scan, Query and BatchGetItem
//! against every state an item can be in (the Java library's facade cases and more), projections,
//! filters evaluated on before-images, pagination, secondary indexes, and readers racing writers that
//! roll back half of their transactions.
//!
//! One file per concept: `item_states` (every state an item can be in), `costs` (requests per
//! read), `invalid_requests`, `projections_and_filters`, `pagination`, `indexes` (secondary
//! indexes) and `racing_writers`.
#[path = "../common/mod.rs"]
mod common;

mod costs;
mod indexes;
mod invalid_requests;
mod item_states;
mod pagination;
mod projections_and_filters;
mod racing_writers;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, KeysAndAttributes, Projection, ProjectionType, ReturnValue, ScalarAttributeType,
};
use common::*;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::{Error, IsolationLevel, Item, Transaction, TxId, TxState};
use futures::TryStreamExt;

const UNCOMMITTED: IsolationLevel = IsolationLevel::Uncommitted;
const COMMITTED: IsolationLevel = IsolationLevel::Committed;

fn v1(id: &str) -> Item {
    item(&[("Id", s(id)), ("s_someattr", s("val1")), ("n_other", n(1))])
}

fn v2(id: &str) -> Item {
    item(&[("Id", s(id)), ("s_someattr", s("val2")), ("n_other", n(2))])
}

/// What the Java tests project: `Id, s_someattr`.
fn projected(i: &Item) -> Item {
    i.iter()
        .filter(|(k, _)| *k == "Id" || *k == "s_someattr")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Reads item `id` of `env.table` four ways (GetItem, Scan of the whole table, Query on the key,
/// BatchGetItem), optionally with the projection `Id, s_someattr`.
async fn four_reads(
    env: &TestEnv,
    level: IsolationLevel,
    id: &str,
    projection: bool,
) -> Vec<Result<Vec<Item>, Error>> {
    let m = &env.manager;
    let proj = projection.then(|| "Id, #s".to_string());
    let names = projection.then(|| HashMap::from([("#s".to_string(), "s_someattr".to_string())]));
    let get = m
        .get_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .set_projection_expression(proj.clone())
        .set_expression_attribute_names(names.clone())
        .isolation(level)
        .send()
        .await
        .map(|o| o.item.into_iter().collect());
    let mut scan = m
        .scan()
        .table_name(&env.table)
        .set_expression_attribute_names(names.clone())
        .isolation(level);
    let mut query = m
        .query()
        .table_name(&env.table)
        .key_condition_expression("Id = :id")
        .expression_attribute_values(":id", s(id))
        .set_expression_attribute_names(names.clone())
        .isolation(level);
    if let Some(p) = &proj {
        scan = scan.projection_expression(p);
        query = query.projection_expression(p);
    }
    let scan = scan.send_all().await;
    let query = query.send_all().await;
    let keys = KeysAndAttributes::builder()
        .keys(key(id))
        .set_projection_expression(proj)
        .set_expression_attribute_names(names)
        .build()
        .unwrap();
    let batch = m
        .batch_get_item()
        .request_items(&env.table, keys)
        .isolation(level)
        .send()
        .await
        .map(|mut o| o.responses.remove(&env.table).expect("table in responses"));
    vec![get, scan, query, batch]
}

/// Asserts every way of reading `id` at `level`, with and without projection, sees `expected`.
async fn assert_reads(env: &TestEnv, level: IsolationLevel, id: &str, expected: Option<&Item>) {
    for projection in [false, true] {
        let want: Vec<Item> = expected
            .map(|i| if projection { projected(i) } else { i.clone() })
            .into_iter()
            .collect();
        for (how, got) in ["GetItem", "Scan", "Query", "BatchGetItem"]
            .iter()
            .zip(four_reads(env, level, id, projection).await)
        {
            let got = got.unwrap_or_else(|e| panic!("{how} at {level:?} failed: {e}"));
            assert_eq!(
                got, want,
                "{how} at {level:?}, projection {projection}: wrong result"
            );
            assert!(
                got.iter().all(|i| !has_tx_attrs(i)),
                "{how}: _Tx attributes"
            );
        }
    }
}

/// A pending transaction that applied a change to `id` (an update returning ALL_NEW applies at once).
async fn pending_update(env: &TestEnv, id: &str) -> Transaction {
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET s_someattr = :s, n_other = :n")
        .expression_attribute_values(":s", s("val2"))
        .expression_attribute_values(":n", n(2))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    tx
}

/// A pending transaction (its record exists, state P) for fabricated lock states.
async fn pending_record(env: &TestEnv) -> Transaction {
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.range_table)
        .key("Id", s("anchor"))
        .key("RangeAttr", n(0))
        .update_expression("SET x = :x")
        .expression_attribute_values(":x", n(1))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    tx
}
