//! The profile itself: it refuses what DynamoDB refuses, serves what an eventually consistent read
//! may serve, and throttles past an item's throughput — on DynamoDB Local, which does none of it.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use dynamodb_transactions::fault::{DynamoDbProfile, LateDelivery, ProfileSettings};

use crate::common::*;

async fn table(client: &Client, guard: &TableGuard, prefix: &str) -> String {
    let name = unique_name(prefix);
    guard.add(&name);
    create_table(
        client,
        &name,
        ("Id", aws_sdk_dynamodb::types::ScalarAttributeType::S),
        None,
    )
    .await;
    name
}

fn put(table: &str, id: &str, v: i64) -> TransactWriteItem {
    TransactWriteItem::builder()
        .put(
            Put::builder()
                .table_name(table)
                .set_item(Some(item(&[("Id", s(id)), ("v", n(v))])))
                .build()
                .unwrap(),
        )
        .build()
}

#[tokio::test]
async fn a_transaction_in_flight_refuses_writes_and_transactions_on_its_items() {
    let mut settings = ProfileSettings::none(3);
    settings.conflicts = true;
    let profile = DynamoDbProfile::new(settings);
    let guard = TableGuard::default();
    let fast = client_through(&profile, vec![]);
    let t = table(&fast, &guard, "prof-conflict").await;
    // The first transaction is admitted, then held on its way to DynamoDB Local until opened:
    // in flight while the others arrive.
    let late = LateDelivery::new();
    late.delay_until_opened("TransactWriteItems", 1);
    let held = {
        let conf = fast
            .config()
            .to_builder()
            .http_client(profile.wrap(late.http_client()))
            .build();
        Client::from_conf(conf)
    };
    let first = {
        let t = t.clone();
        tokio::spawn(async move {
            held.transact_write_items()
                .transact_items(put(&t, "a", 1))
                .transact_items(put(&t, "b", 1))
                .send()
                .await
        })
    };
    while late.struck() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = fast
        .put_item()
        .table_name(&t)
        .set_item(Some(item(&[("Id", s("a")), ("v", n(2))])))
        .send()
        .await
        .expect_err("a put on an item of a transaction in flight is refused");
    assert_eq!(refused.code(), Some("TransactionConflictException"));
    let cancelled = fast
        .transact_write_items()
        .transact_items(put(&t, "b", 3))
        .transact_items(put(&t, "c", 3))
        .send()
        .await
        .expect_err("a transaction sharing an item is cancelled");
    let reasons: Vec<String> = cancelled
        .as_service_error()
        .and_then(|e| match e {
            TransactWriteItemsError::TransactionCanceledException(c) => Some(c),
            _ => None,
        })
        .map(|e| {
            e.cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or_default().to_string())
                .collect()
        })
        .expect("TransactionCanceledException");
    assert_eq!(reasons, ["TransactionConflict", "None"]);
    late.open();
    first.await.unwrap().expect("the first transaction commits");
    // Nothing of the refused requests reached DynamoDB Local.
    let raw = local_client();
    for (id, want) in [("a", Some(1)), ("b", Some(1)), ("c", None)] {
        let got = raw
            .get_item()
            .table_name(&t)
            .set_key(Some(key(id)))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .map(|i| i["v"].as_n().unwrap().parse::<i64>().unwrap());
        assert_eq!(got, want, "item {id}");
    }
    // Once answered, the items are free.
    fast.put_item()
        .table_name(&t)
        .set_item(Some(item(&[("Id", s("a")), ("v", n(4))])))
        .send()
        .await
        .expect("free again");
    let stats = profile.stats();
    assert_eq!(
        (stats.writes_in_conflict, stats.transactions_in_conflict),
        (1, 1)
    );
}

#[tokio::test]
async fn eventually_consistent_reads_may_return_a_recent_version_and_consistent_reads_never() {
    let mut settings = ProfileSettings::none(5);
    settings.stale_reads = true;
    settings.stale_probability = 1.0;
    settings.stale_window = Duration::from_millis(1500);
    let profile = DynamoDbProfile::new(settings);
    let guard = TableGuard::default();
    let c = client_through(&profile, vec![]);
    let t = table(&c, &guard, "prof-stale").await;
    for v in [1, 2] {
        c.put_item()
            .table_name(&t)
            .set_item(Some(item(&[("Id", s("a")), ("v", n(v))])))
            .send()
            .await
            .unwrap();
        // A version is observed by a read in the background after its write: wait for it before
        // the next write, or a late observation of v1 on a loaded machine reads v2.
        while profile.stats().versions_observed < v {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let v_of =
        |i: Option<&dynamodb_transactions::Item>| i.map(|i| i["v"].as_n().unwrap().to_string());
    let get = |consistent: bool| {
        let c = c.clone();
        let t = t.clone();
        async move {
            c.get_item()
                .table_name(&t)
                .set_key(Some(key("a")))
                .consistent_read(consistent)
                .send()
                .await
                .unwrap()
                .item
        }
    };
    assert_eq!(v_of(get(true).await.as_ref()).as_deref(), Some("2"));
    // With probability 1 an eventually consistent read returns another recent version: v1.
    assert_eq!(v_of(get(false).await.as_ref()).as_deref(), Some("1"));
    let batch = c
        .batch_get_item()
        .request_items(
            &t,
            aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                .keys(key("a"))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let items = &batch.responses.unwrap()[&t];
    assert_eq!(v_of(items.first()).as_deref(), Some("1"));
    let q = c
        .query()
        .table_name(&t)
        .key_condition_expression("Id = :a")
        .expression_attribute_values(":a", s("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(v_of(q.items().first()).as_deref(), Some("1"));
    let q = c
        .query()
        .table_name(&t)
        .key_condition_expression("Id = :a")
        .expression_attribute_values(":a", s("a"))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(v_of(q.items().first()).as_deref(), Some("2"));
    // Past the window, only the current version is left.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(v_of(get(false).await.as_ref()).as_deref(), Some("2"));
    assert!(profile.stats().stale_items >= 3);
}

#[tokio::test]
async fn writes_past_an_items_throughput_are_throttled_and_not_applied() {
    let mut settings = ProfileSettings::none(9);
    settings.throttling = true;
    // One unit a second, and a second's worth saved up: the first write goes through, most of
    // the next ones in quick succession do not (however slow the machine).
    settings.write_units_per_second = 1.0;
    let profile = DynamoDbProfile::new(settings);
    let guard = TableGuard::default();
    let setup = client_through(&profile, vec![]);
    let t = table(&setup, &guard, "prof-throttle").await;
    let c = without_retries(&setup);
    let mut ok = 0;
    let mut throttled = 0;
    for _ in 0..12 {
        match c
            .update_item()
            .table_name(&t)
            .set_key(Some(key("hot")))
            .update_expression("ADD v :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
        {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!(e.code(), Some("ThrottlingException"));
                throttled += 1;
            }
        }
    }
    assert!(throttled >= 4 && ok >= 1, "ok {ok}, throttled {throttled}");
    let got = local_client()
        .get_item()
        .table_name(&t)
        .set_key(Some(key("hot")))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(got["v"], n(ok), "only the writes served were applied");
    assert_eq!(profile.stats().throttled, throttled);
}

#[tokio::test]
async fn batches_past_an_items_throughput_come_back_unprocessed() {
    use aws_sdk_dynamodb::types::{KeysAndAttributes, PutRequest, WriteRequest};
    let mut settings = ProfileSettings::none(10);
    settings.throttling = true;
    // One unit a second each way: an item written (or read) once has none left for a while.
    settings.write_units_per_second = 1.0;
    settings.read_units_per_second = 1.0;
    let profile = DynamoDbProfile::new(settings);
    let guard = TableGuard::default();
    let setup = client_through(&profile, vec![]);
    let t = table(&setup, &guard, "prof-batch").await;
    let c = without_retries(&setup);
    let mut hot = key("hot");
    hot.insert("v".into(), s("first"));
    c.put_item()
        .table_name(&t)
        .set_item(Some(hot.clone()))
        .send()
        .await
        .unwrap();
    let put = |id: &str| {
        let mut it = key(id);
        it.insert("v".into(), s("batch"));
        WriteRequest::builder()
            .put_request(PutRequest::builder().set_item(Some(it)).build().unwrap())
            .build()
    };
    let out = c
        .batch_write_item()
        .request_items(&t, vec![put("hot"), put("a"), put("b")])
        .send()
        .await
        .unwrap();
    let left = out.unprocessed_items.unwrap_or_default();
    let left: Vec<_> = left[&t]
        .iter()
        .map(|w| w.put_request().unwrap().item()["Id"].clone())
        .collect();
    assert_eq!(
        left,
        vec![s("hot")],
        "the item short of units comes back unprocessed"
    );
    let stored = |id: &'static str| {
        let t = t.clone();
        async move {
            local_client()
                .get_item()
                .table_name(&t)
                .set_key(Some(key(id)))
                .consistent_read(true)
                .send()
                .await
                .unwrap()
                .item
                .unwrap()["v"]
                .clone()
        }
    };
    assert_eq!(
        stored("hot").await,
        s("first"),
        "the unprocessed put was not applied"
    );
    assert_eq!(stored("a").await, s("batch"));
    assert_eq!(stored("b").await, s("batch"));

    // Reads: one consistent read of hot takes its unit.
    c.get_item()
        .table_name(&t)
        .set_key(Some(key("hot")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let keys = KeysAndAttributes::builder()
        .set_keys(Some(vec![key("hot"), key("a"), key("b")]))
        .consistent_read(true)
        .build()
        .unwrap();
    let out = c
        .batch_get_item()
        .request_items(&t, keys)
        .send()
        .await
        .unwrap();
    let mut got: Vec<_> = out.responses.unwrap_or_default()[&t]
        .iter()
        .map(|i| i["Id"].clone())
        .collect();
    got.sort_by_key(|v| v.as_s().unwrap().clone());
    assert_eq!(got, vec![s("a"), s("b")]);
    let left = out.unprocessed_keys.unwrap_or_default();
    assert_eq!(
        left[&t].keys(),
        &[key("hot")],
        "the key short of units comes back unprocessed"
    );

    // A batch of which no item has units is refused whole.
    let err = c
        .batch_write_item()
        .request_items(&t, vec![put("hot")])
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("ProvisionedThroughputExceededException"));
    assert_eq!(stored("hot").await, s("first"));
    assert_eq!(profile.stats().throttled, 3);
}

/// The same client without the SDK's retries: every refusal reaches the caller.
fn without_retries(c: &Client) -> Client {
    Client::from_conf(
        c.config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build(),
    )
}

#[tokio::test]
async fn answers_take_dynamodbs_service_time_not_locals() {
    // Round trip and jitter off: what is left is DynamoDB's time, which the profile waits out
    // where DynamoDB Local answers sooner. Lower bounds only (the profile never answers earlier).
    let mut settings = ProfileSettings::none(12);
    settings.service_time = true;
    let profile = DynamoDbProfile::new(settings);
    let guard = TableGuard::default();
    let client = client_through(&profile, vec![]);
    let t = table(&client, &guard, "prof-service").await;
    let started = std::time::Instant::now();
    let mut twi = client.transact_write_items();
    for i in 0..25 {
        twi = twi.transact_items(put(&t, &format!("k{i}"), i));
    }
    twi.send().await.expect("25 puts commit");
    let transaction = started.elapsed();
    // 18.6 ms + 0.34 ms per action.
    assert!(
        transaction >= Duration::from_micros(18_600 + 25 * 340),
        "a 25-action TransactWriteItems answered in {transaction:?}"
    );
    let started = std::time::Instant::now();
    let got = client
        .get_item()
        .table_name(&t)
        .key("Id", s("k3"))
        .consistent_read(true)
        .send()
        .await
        .expect("get");
    assert_eq!(got.item().and_then(|i| i.get("v")), Some(&n(3)));
    let single = started.elapsed();
    assert!(
        single >= Duration::from_micros(2_550),
        "a GetItem answered in {single:?}"
    );
}

#[tokio::test]
async fn queries_and_scans_past_an_items_read_throughput_are_throttled() {
    let mut settings = ProfileSettings::none(13);
    settings.throttling = true;
    // Three read units a second (and a second's worth saved up); the hot item's 8 KB cost two a
    // consistent read: the first page is served, the next ones in quick succession are not.
    settings.read_units_per_second = 3.0;
    let profile = DynamoDbProfile::new(settings);
    let guard = TableGuard::default();
    let setup = client_through(&profile, vec![]);
    let t = table(&setup, &guard, "prof-scan-throttle").await;
    setup
        .put_item()
        .table_name(&t)
        .set_item(Some(item(&[
            ("Id", s("hot")),
            ("pad", s(&"x".repeat(8000))),
        ])))
        .send()
        .await
        .unwrap();
    let c = without_retries(&setup);
    let scan = || c.scan().table_name(&t).consistent_read(true).send();
    let first = scan().await.expect("the first scan has the units");
    assert_eq!(first.items().len(), 1);
    let refused = scan().await.expect_err("the second scan is short of units");
    assert_eq!(refused.code(), Some("ThrottlingException"));
    let query = c
        .query()
        .table_name(&t)
        .key_condition_expression("Id = :h")
        .expression_attribute_values(":h", s("hot"))
        .consistent_read(true)
        .send()
        .await
        .expect_err("a query of the hot item is short of units too");
    assert_eq!(query.code(), Some("ThrottlingException"));
    assert_eq!(profile.stats().throttled, 2);
    // A page without the hot item bills nothing to it: another item reads freely.
    let cold = c
        .query()
        .table_name(&t)
        .key_condition_expression("Id = :c")
        .expression_attribute_values(":c", s("cold"))
        .consistent_read(true)
        .send()
        .await
        .expect("an empty page has nothing to bill");
    assert!(cold.items().is_empty());
}
