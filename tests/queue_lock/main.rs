//! The ticket queue lock against DynamoDB Local.
#[path = "../common/mod.rs"]
mod common;

mod expiry;
mod faults;
mod grants;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use common::*;
use dynamodb_transactions::Item;
use dynamodb_transactions::fault::{FaultInjector, FaultMode, LateDelivery};
use dynamodb_transactions::lock::queue::{QueueLock, QueueLockBuilder};
use dynamodb_transactions::lock::{
    Expiry, LockError, OffsetClock, TicketCounter, Wait, create_lock_table,
};

/// A fresh lock table, deleted when the guard drops.
async fn lock_table(prefix: &str) -> (Client, String, TableGuard) {
    let client = client();
    let guard = TableGuard::default();
    let table = unique_name(prefix);
    guard.add(&table);
    create_lock_table(&client, &table)
        .await
        .expect("create_lock_table");
    (client, table, guard)
}

/// Short leases so crash tests stay fast.
fn builder(client: Client, table: &str) -> QueueLockBuilder {
    QueueLock::builder(client)
        .table(table)
        .lease_duration(Duration::from_millis(1500))
        .heartbeat_interval(Duration::from_millis(300))
        .clock_skew_margin(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
}

/// The queue entries of lock `name` (default namespace), read consistently, in ticket order.
async fn rows(client: &Client, table: &str, name: &str) -> Vec<Item> {
    rows_ns(client, table, name, "").await
}

/// The queue lives in the lock's counter item (`<ns>#ctr`): one map `w#<owner>` per holder or
/// waiter and its ticket `t#<owner>`. Each entry is returned as an item of its own, with `owner`,
/// `ticket`, its map's fields, and `sk` = `<ns>#q#<ticket, 38 digits>` (its place in the queue).
async fn rows_ns(client: &Client, table: &str, name: &str, ns: &str) -> Vec<Item> {
    let Some(item) = get(client, table, name, &format!("{ns}#ctr")).await else {
        return Vec::new();
    };
    let mut entries: Vec<Item> = item
        .iter()
        .filter_map(|(k, v)| {
            let owner = k.strip_prefix("w#")?;
            let ticket = num(&item, &format!("t#{owner}"));
            let mut e = v.as_m().expect("entry map").clone();
            e.insert("owner".into(), s(owner));
            e.insert("ticket".into(), n(ticket));
            e.insert("sk".into(), s(&format!("{ns}#q#{ticket:038}")));
            Some(e)
        })
        .collect();
    entries.sort_by_key(|e| num(e, "ticket"));
    assert_eq!(
        item.get("c").map(|_| num(&item, "c")).unwrap_or(0),
        entries.len() as u64,
        "the entry count is exact"
    );
    entries
}

fn n(v: u64) -> aws_sdk_dynamodb::types::AttributeValue {
    aws_sdk_dynamodb::types::AttributeValue::N(v.to_string())
}

/// Removes the entry of `owner` the way a waiter that judged it dead does.
async fn remove_entry(client: &Client, table: &str, name: &str, owner: &str) {
    client
        .update_item()
        .table_name(table)
        .key("pk", s(name))
        .key("sk", s("#ctr"))
        .update_expression("REMOVE #e, #t ADD c :minus")
        .condition_expression("attribute_exists(#e)")
        .expression_attribute_names("#e", format!("w#{owner}"))
        .expression_attribute_names("#t", format!("t#{owner}"))
        .expression_attribute_values(":minus", n_signed(-1))
        .send()
        .await
        .expect("entry removed");
}

fn n_signed(v: i64) -> aws_sdk_dynamodb::types::AttributeValue {
    aws_sdk_dynamodb::types::AttributeValue::N(v.to_string())
}

async fn get(client: &Client, table: &str, pk: &str, sk: &str) -> Option<Item> {
    client
        .get_item()
        .table_name(table)
        .key("pk", s(pk))
        .key("sk", s(sk))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
}

fn num(item: &Item, attr: &str) -> u64 {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .expect("number attribute")
}

fn text<'a>(item: &'a Item, attr: &str) -> &'a str {
    item.get(attr)
        .and_then(|v| v.as_s().ok())
        .expect("string attribute")
}

/// Polls until `cond` holds on the rows of `name` (fails the test after 10 s).
async fn until_rows(
    client: &Client,
    table: &str,
    name: &str,
    what: &str,
    cond: impl Fn(&[Item]) -> bool,
) {
    for _ in 0..500 {
        if cond(&rows(client, table, name).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("queue of {name} never reached: {what}");
}

/// A client for the test endpoint whose requests go through `late`.
fn client_through(late: &LateDelivery) -> Client {
    let conf = client()
        .config()
        .to_builder()
        .http_client(late.http_client())
        .build();
    Client::from_conf(conf)
}
