//! A lock that meets its holder's commit in flight waits for it: DynamoDB refuses every write to an
//! item of a `TransactWriteItems` in flight (`TransactionConflictException`), however long the
//! transaction takes, and on a hot item the holder is committing most of the time. The waiter's
//! attempt is contention on the item, not a failure of its transaction.

use std::time::Duration;

use dynamodb_transactions::fault::{DynamoDbProfile, LateDelivery, ProfileSettings};

use crate::common::*;

#[tokio::test]
async fn a_lock_waits_for_the_holders_commit_in_flight_however_long_it_takes() {
    let mut settings = ProfileSettings::none(31);
    settings.conflicts = true;
    let profile = DynamoDbProfile::new(settings);
    let late = LateDelivery::new();
    let env = TestEnv::through_profile_late("inflight", &profile, &late, |_| {}).await;
    let key = key("hot");
    env.raw_put(&env.table, item(&[("Id", s("hot")), ("n", n(0))]))
        .await;

    // The holder reads the item (locking it) and writes it back, then commits: its one-request
    // commit (record and item in one `TransactWriteItems`) stays in flight until the gate opens.
    let holder = env.manager.begin();
    holder
        .get_item()
        .table_name(&env.table)
        .key("Id", s("hot"))
        .send()
        .await
        .expect("the holder's read");
    holder
        .update_item()
        .table_name(&env.table)
        .key("Id", s("hot"))
        .update_expression("SET n = :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .expect("the holder's write");
    late.delay_until_opened("TransactWriteItems", 1);
    let committing = tokio::spawn(async move { holder.commit().await });
    while late.first_struck_at().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = profile.stats().writes_in_conflict;

    // The waiter's lock attempts meet the commit in flight for longer than DynamoDB's refusals are
    // resent (about 75 ms).
    let waiter = env.manager.begin();
    let table = env.table.clone();
    let reading = async {
        waiter
            .get_item()
            .table_name(&table)
            .key("Id", s("hot"))
            .send()
            .await
    };
    let open_later = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        late.open();
    };
    let (read, ()) = tokio::join!(reading, open_later);
    assert!(
        profile.stats().writes_in_conflict > before,
        "the waiter met the commit in flight"
    );
    committing
        .await
        .unwrap()
        .expect("the holder's commit lands once the gate opens");

    // The waiter read the holder's write, under its own lock, and commits.
    let read = read.expect("the waiter waits for the commit instead of failing");
    assert_eq!(read.item().and_then(|i| i.get("n")), Some(&n(1)));
    let raw = env.raw_get(&env.table, &key).await.expect("the item");
    assert_eq!(
        raw.get("_TxId").and_then(|v| v.as_s().ok()),
        Some(&waiter.id().to_string())
    );
    waiter.commit().await.expect("the waiter commits");
    let raw = env.raw_get(&env.table, &key).await.expect("the item");
    assert!(!has_tx_attrs(&raw), "left locked: {raw:?}");
    assert_eq!(raw.get("n"), Some(&n(1)));
}
