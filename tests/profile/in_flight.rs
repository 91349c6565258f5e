//! A lock that meets its holder's commit in flight waits for it: DynamoDB refuses every write to an
//! item of a `TransactWriteItems` in flight (`TransactionConflictException`), however long the
//! transaction takes, and on a hot item the holder is committing most of the time. The waiter's
//! attempt is contention on the item, not a failure of its transaction; so is its release of a
//! decided holder's lock refused the same way.

use std::time::Duration;

use dynamodb_transactions::fault::{DynamoDbProfile, LateDelivery, ProfileSettings};

use crate::common::*;

/// A profile that refuses writes to items of a transaction in flight, a gate between it and Local,
/// and an env through both whose table holds the item `hot` (`n = 0`).
async fn hot_item(prefix: &str, seed: u64) -> (DynamoDbProfile, LateDelivery, TestEnv) {
    let mut settings = ProfileSettings::none(seed);
    settings.conflicts = true;
    let profile = DynamoDbProfile::new(settings);
    let late = LateDelivery::new();
    let env = TestEnv::through_profile_late(prefix, &profile, &late, |_| {}).await;
    env.raw_put(&env.table, item(&[("Id", s("hot")), ("n", n(0))]))
        .await;
    (profile, late, env)
}

/// The waiter's read returned `hot` with `n`, it holds the item, and it commits, leaving the item
/// unlocked with that `n`.
async fn read_under_its_lock_then_commits(
    env: &TestEnv,
    waiter: dynamodb_transactions::Transaction,
    read: dynamodb_transactions::GetOutput,
    expected: i64,
) {
    assert_eq!(read.item().and_then(|i| i.get("n")), Some(&n(expected)));
    let raw = env
        .raw_get(&env.table, &key("hot"))
        .await
        .expect("the item");
    assert_eq!(
        raw.get("_TxId").and_then(|v| v.as_s().ok()),
        Some(&waiter.id().to_string())
    );
    waiter.commit().await.expect("the waiter commits");
    let raw = env
        .raw_get(&env.table, &key("hot"))
        .await
        .expect("the item");
    assert!(!has_tx_attrs(&raw), "left locked: {raw:?}");
    assert_eq!(raw.get("n"), Some(&n(expected)));
}

/// A transaction holding `hot` with a locked read.
async fn locked_by_a_read(env: &TestEnv) -> dynamodb_transactions::Transaction {
    let holder = env.manager.begin();
    holder
        .get_item()
        .table_name(&env.table)
        .key("Id", s("hot"))
        .send()
        .await
        .expect("the holder's read");
    holder
}

#[tokio::test]
async fn a_lock_waits_for_the_holders_commit_in_flight_however_long_it_takes() {
    let (profile, late, env) = hot_item("inflight", 31).await;

    // The holder reads the item (locking it) and writes it back, then commits: its one-request
    // commit (record and item in one `TransactWriteItems`) stays in flight until the gate opens.
    let holder = locked_by_a_read(&env).await;
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
    read_under_its_lock_then_commits(&env, waiter, read, 1).await;
}

/// Releasing a decided holder's lock can meet another `TransactWriteItems` in flight on the item
/// (on a hot item, most often the next holder's commit): the release is refused like a lock
/// attempt would be, and the waiter waits for that transaction too instead of failing.
#[tokio::test]
async fn releasing_a_decided_holders_lock_waits_for_a_transaction_in_flight_on_the_item() {
    let (profile, late, env) = hot_item("inflight-rel", 32).await;
    let key = key("hot");

    // The holder locks the item with a read, and its record is then rolled back without the lock
    // being released: a coordinator that crashed right after the decision.
    let holder = locked_by_a_read(&env).await;
    env.client
        .update_item()
        .table_name(env.manager.transactions_table())
        .key("_TxId", s(holder.id().as_str()))
        .key("_TxN", n(0))
        .update_expression("SET #s = :r ADD #v :one")
        .condition_expression("#s = :p")
        .expression_attribute_names("#s", "_TxS")
        .expression_attribute_names("#v", "_TxV")
        .expression_attribute_values(":r", s("R"))
        .expression_attribute_values(":p", s("P"))
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .expect("the holder's decision");

    // Just before the waiter sends the release of that lock (a write naming the holder), another
    // transaction on the item goes in flight, and stays there until the gate opens.
    let (late2, raw, table, key2) = (
        late.clone(),
        env.client.clone(),
        env.table.clone(),
        key.clone(),
    );
    let in_flight = std::sync::Arc::new(std::sync::Mutex::new(None));
    let in_flight2 = in_flight.clone();
    let hook = RunBefore::new("UpdateItem", holder.id().as_str(), move || {
        late2.delay_until_opened("TransactWriteItems", 1);
        let sent = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let check = aws_sdk_dynamodb::types::ConditionCheck::builder()
                    .table_name(table)
                    .set_key(Some(key2))
                    .condition_expression("attribute_exists(Id)")
                    .build()
                    .unwrap();
                raw.transact_write_items()
                    .transact_items(
                        aws_sdk_dynamodb::types::TransactWriteItem::builder()
                            .condition_check(check)
                            .build(),
                    )
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("{e:?}"))
            })
        });
        while late2.first_struck_at().is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        *in_flight2.lock().unwrap() = Some(sent);
    });
    let waiter_manager = dynamodb_transactions::TransactionManager::builder(client_through_late(
        &profile,
        &late,
        vec![shared(hook.clone())],
    ))
    .transactions_table(env.manager.transactions_table())
    .images_table(env.manager.images_table())
    .build();
    let before = profile.stats().writes_in_conflict;
    let waiter = waiter_manager.begin();
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
        for _ in 0..1000 {
            if hook.ran() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        late.open();
    };
    let (read, ()) = tokio::join!(reading, open_later);
    assert!(
        hook.ran(),
        "the waiter released the holder's lock: {read:?}"
    );
    assert!(
        profile.stats().writes_in_conflict > before,
        "the release met the transaction in flight"
    );
    let sent = in_flight.lock().unwrap().take().expect("the hook ran");
    sent.join()
        .unwrap()
        .expect("the transaction in flight lands once the gate opens");

    // The waiter released the decided holder's lock once the item was free, and read it under
    // its own lock.
    let read = read.expect("the waiter waits for the transaction in flight instead of failing");
    assert_eq!(
        env.tx_state(holder.id()).await.map(|s| s.0),
        Some(dynamodb_transactions::TxState::RolledBack)
    );
    read_under_its_lock_then_commits(&env, waiter, read, 0).await;
}
