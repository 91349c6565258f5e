//! The change feed (`dynamodb_transactions::feed`) against DynamoDB Local's streams: committed
//! transactions delivered once and whole with their items before and after, rolled-back ones
//! never, outside writes as they are; restarts from a checkpoint at every point; a chaos workload
//! replayed from the start rebuilding every table.
#[path = "../common/mod.rs"]
mod common;

mod basic;
mod chaos;
mod cli;
mod faults;
mod lag;
mod lineage;
mod restart;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, StreamSpecification, StreamViewType, TableStatus};
use dynamodb_transactions::Item;
use dynamodb_transactions::feed::{Change, ChangeFeed, ChangeFeedBuilder};

/// Turns the table's stream on (`NEW_AND_OLD_IMAGES`) and waits until the table is active.
pub async fn enable_stream(client: &Client, table: &str) {
    client
        .update_table()
        .table_name(table)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("UpdateTable (stream)");
    for _ in 0..100 {
        let d = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .unwrap();
        let t = d.table().unwrap();
        if t.table_status() == Some(&TableStatus::Active) && t.latest_stream_arn().is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the stream of {table} did not become active");
}

/// A DynamoDB Streams client for the test endpoint.
pub fn streams_client() -> aws_sdk_dynamodbstreams::Client {
    let conf = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(aws_sdk_dynamodbstreams::config::BehaviorVersion::latest())
        .endpoint_url(common::endpoint())
        .region(aws_sdk_dynamodbstreams::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodbstreams::config::Credentials::new(
            "local", "local", None, None, "static",
        ))
        .build();
    aws_sdk_dynamodbstreams::Client::from_conf(conf)
}

/// [`streams_client`] with `interceptor` on every request.
pub fn streams_client_with(
    interceptor: impl aws_sdk_dynamodbstreams::config::Intercept + 'static,
) -> aws_sdk_dynamodbstreams::Client {
    aws_sdk_dynamodbstreams::Client::from_conf(
        streams_client()
            .config()
            .to_builder()
            .interceptor(aws_sdk_dynamodbstreams::config::SharedInterceptor::new(
                interceptor,
            ))
            .build(),
    )
}

/// A feed over `tables` from the start, polling fast, ending after 3 s without a record.
pub fn feed(tx_table: &str, tables: &[&str]) -> ChangeFeedBuilder {
    feed_through(common::client(), tx_table, tables)
}

/// [`feed`], with its DynamoDB requests (table descriptions, TX records) through `client`.
pub fn feed_through(client: Client, tx_table: &str, tables: &[&str]) -> ChangeFeedBuilder {
    let mut b = ChangeFeed::builder(client)
        .transactions_table(tx_table)
        .streams_client(streams_client())
        .from_start()
        .poll_interval(Duration::from_millis(100))
        .stop_when_idle(Duration::from_secs(3));
    for t in tables {
        b = b.table(*t);
    }
    b
}

/// Every change until the feed stops.
pub async fn drain(feed: &mut ChangeFeed) -> Vec<Change> {
    let mut out = Vec::new();
    while let Some(c) = feed.next().await.expect("next") {
        out.push(c);
    }
    out
}

/// An item's identity for the replayed state: table and key, printed in a stable order.
pub fn ident(table: &str, key: &Item) -> String {
    let sorted: BTreeMap<_, _> = key.iter().collect();
    format!("{table}/{sorted:?}")
}

/// Applies changes to a state (table/key → item), checking each `before` against the state.
pub fn replay(state: &mut HashMap<String, Item>, changes: &[Change], check_before: bool) {
    for c in changes {
        for it in c.items() {
            let id = ident(&it.table, &it.key);
            if check_before {
                assert_eq!(
                    state.get(&id),
                    it.before.as_ref(),
                    "the before-image of {id} is the state the feed left it in ({c:?})"
                );
            }
            match &it.after {
                Some(a) => state.insert(id, a.clone()),
                None => state.remove(&id),
            };
        }
    }
}

/// No `_Tx` attribute anywhere in a change.
pub fn assert_clean(changes: &[Change]) {
    for c in changes {
        for it in c.items() {
            for img in [&it.before, &it.after].into_iter().flatten() {
                assert!(
                    img.keys().all(|k| !k.starts_with("_Tx")),
                    "protocol attributes in {c:?}"
                );
            }
        }
    }
}

/// Every item of a table, by identity, with its user attributes (`_Tx` attributes removed).
pub async fn scan(client: &Client, table: &str, keys: &[&str]) -> HashMap<String, Item> {
    let mut out = HashMap::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("Scan");
        for item in page.items() {
            let key: Item = keys
                .iter()
                .filter_map(|k| item.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect();
            let mut user = item.clone();
            user.retain(|k, _| !k.starts_with("_Tx"));
            out.insert(ident(table, &key), user);
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    out
}

pub fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A random transaction over `tables` (hash `Id`, or `Id` + `RangeAttr`): 1 to `max_items`
/// writes on items `k0`..`k9`, at least one put of a value never written before (so every
/// committed transaction changes something). With `roll_back`, the writes are applied at once
/// (`ReturnValues`) and the transaction rolled back. Returns its id: what became of it, its
/// record says.
pub async fn random_transaction(
    manager: &dynamodb_transactions::TransactionManager,
    tables: &[(&str, bool)],
    rng: &mut rand::rngs::StdRng,
    max_items: usize,
    roll_back: bool,
    serial: &std::sync::atomic::AtomicI64,
) -> dynamodb_transactions::TxId {
    use aws_sdk_dynamodb::types::ReturnValue;
    use rand::Rng;
    use std::sync::atomic::Ordering;
    let tx = manager.begin();
    let id = tx.id().clone();
    let count = rng.random_range(1..=max_items);
    let mut used = std::collections::HashSet::new();
    let mut result = Ok(());
    for i in 0..count {
        let (table, ranged) = tables[rng.random_range(0..tables.len())];
        let item = format!("k{}", rng.random_range(0..10));
        if !used.insert((table, item.clone())) {
            continue;
        }
        let value = serial.fetch_add(1, Ordering::SeqCst);
        let op = if i == 0 { 0 } else { rng.random_range(0..3) };
        let r = match op {
            0 => {
                let mut b = tx
                    .put_item()
                    .table_name(table)
                    .item("Id", s(&item))
                    .item("v", n(value));
                if ranged {
                    b = b.item("RangeAttr", n(1));
                }
                if roll_back {
                    b = b.return_values(ReturnValue::AllOld);
                }
                b.send().await.map(|_| ())
            }
            1 => {
                let mut b = tx
                    .update_item()
                    .table_name(table)
                    .key("Id", s(&item))
                    .update_expression("SET v = :v")
                    .expression_attribute_values(":v", n(value));
                if ranged {
                    b = b.key("RangeAttr", n(1));
                }
                if roll_back {
                    b = b.return_values(ReturnValue::AllNew);
                }
                b.send().await.map(|_| ())
            }
            _ => {
                let mut b = tx.delete_item().table_name(table).key("Id", s(&item));
                if ranged {
                    b = b.key("RangeAttr", n(1));
                }
                if roll_back {
                    b = b.return_values(ReturnValue::AllOld);
                }
                b.send().await.map(|_| ())
            }
        };
        if let Err(e) = r {
            result = Err(e);
            break;
        }
    }
    if result.is_err() || roll_back {
        let _ = tx.rollback().await;
    } else {
        let _ = tx.commit().await;
    }
    id
}

/// The ids among `ids` whose record says committed.
pub async fn committed_ids(
    manager: &dynamodb_transactions::TransactionManager,
    ids: &[dynamodb_transactions::TxId],
) -> std::collections::HashSet<dynamodb_transactions::TxId> {
    let mut out = std::collections::HashSet::new();
    for id in ids {
        if let Some(st) = manager
            .transaction_state(id)
            .await
            .expect("transaction_state")
            && st.state == dynamodb_transactions::TxState::Committed
        {
            out.insert(id.clone());
        }
    }
    out
}

/// How many of `ids` committed on the write-only fast path with their writes marked (their record
/// names the items it wrote, `_TxL`): the feed must yield them whole like the others.
pub async fn marked_fast_path(
    client: &Client,
    tx_table: &str,
    ids: &[dynamodb_transactions::TxId],
) -> usize {
    let mut count = 0;
    for id in ids {
        let header = client
            .get_item()
            .table_name(tx_table)
            .key("_TxId", s(id.as_str()))
            .key("_TxN", AttributeValue::N("0".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem (record)")
            .item;
        count += usize::from(header.is_some_and(|h| h.contains_key("_TxL")));
    }
    count
}
