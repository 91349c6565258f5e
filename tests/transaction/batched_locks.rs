//! `Settings::batch_locks`: the record and the locks in `TransactWriteItems`. Request counts of an
//! N-item update transaction through the locking protocol (the write-only fast path is off in
//! `TestEnv`), and the per-item fallback when a batch meets another transaction's lock.

use dynamodb_transactions::{Error, Transaction, TxState};

use crate::assert_clean;
use crate::common::*;

async fn batched_env(prefix: &str) -> TestEnv {
    TestEnv::with_settings(prefix, |s| s.batch_locks = true).await
}

async fn seed(env: &TestEnv, n_items: usize) {
    for i in 0..n_items {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("k{i}"))), ("v", n(0))]),
        )
        .await;
    }
    // Warm the key-schema cache.
    env.manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k0"))
        .send()
        .await
        .unwrap();
}

/// Commits `SET v = v + 1` on `k0..k{n_items}` and returns the requests it took.
async fn commit_updates(env: &TestEnv, n_items: usize) -> std::collections::BTreeMap<String, u64> {
    env.counter.reset();
    let tx = env.manager.begin();
    for i in 0..n_items {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("k{i}")))
            .update_expression("SET v = v + :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
    }
    let id = tx.id().clone();
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    for i in 0..n_items {
        let it = env
            .raw_get(&env.table, &key(&format!("k{i}")))
            .await
            .unwrap();
        assert_eq!(it, item(&[("Id", s(&format!("k{i}"))), ("v", n(1))]));
    }
    c
}

#[tokio::test]
async fn twenty_five_updates_take_two_requests() {
    let env = batched_env("batch25").await;
    seed(&env, 25).await;
    let c = commit_updates(&env, 25).await;
    println!("N=25 batched: {c:?}");
    // Record + 25 locks; the one-request commit. No item is read: the commit needs no image.
    assert_eq!(c.values().sum::<u64>(), 2, "{c:?}");
    assert_eq!(c.get("TransactWriteItems"), Some(&2));
    assert_clean(&env).await;
}

/// An update that copies an attribute (`SET b = a`) can grow its item by what the item holds: its
/// room is judged on the item, read after the lock (one `BatchGetItem`); the others are not read.
#[tokio::test]
async fn an_update_that_copies_an_attribute_reads_its_item() {
    let env = batched_env("batchcopy").await;
    seed(&env, 3).await;
    env.counter.reset();
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("k0"))
        .update_expression("SET w = v")
        .send()
        .await
        .unwrap();
    for k in ["k1", "k2"] {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(k))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(7))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(c.get("TransactWriteItems"), Some(&2), "{c:?}");
    assert_eq!(c.get("BatchGetItem"), Some(&1), "{c:?}");
    assert_eq!(c.values().sum::<u64>(), 3, "{c:?}");
    assert_eq!(
        env.raw_get(&env.table, &key("k0")).await,
        Some(item(&[("Id", s("k0")), ("v", n(0)), ("w", n(0))]))
    );
    assert_eq!(
        env.raw_get(&env.table, &key("k2")).await,
        Some(item(&[("Id", s("k2")), ("v", n(7))]))
    );
    assert_clean(&env).await;
}

/// A batched lock carries padding (`_TxP`) so that DynamoDB judges the update's room in the lock;
/// a phased commit reads the items it did not read, applies with their images, and leaves
/// neither padding nor images behind; a rollback removes the padding too.
#[tokio::test]
async fn batched_locks_leave_no_padding_on_any_path() {
    let env = TestEnv::with_settings("batchpad", |s| {
        s.batch_locks = true;
        s.one_shot_max_items = 0;
        // Applied before the commit (a write rolled forward carries no padding).
        s.roll_forward = false;
    })
    .await;
    seed(&env, 3).await;
    env.counter.reset();
    let c = commit_updates(&env, 3).await;
    // Record + locks, the images, 1 apply, the flip, the unlock and finalize.
    assert_eq!(c.get("BatchGetItem"), Some(&1), "{c:?}");
    assert_clean(&env).await;

    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("k0"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", s("big"))
        .send()
        .await
        .unwrap();
    // Lock the item the way commit does, then give up before applying.
    let (m2, _) = env.second_coordinator();
    env.faults
        .crash_at(2, dynamodb_transactions::fault::FaultMode::BeforeSend);
    assert!(tx.commit().await.is_err());
    env.faults.disarm();
    let raw = env.raw_get(&env.table, &key("k0")).await.unwrap();
    assert!(
        raw.contains_key("_TxP"),
        "the lock carries its padding: {raw:?}"
    );
    m2.resume(&id).await.unwrap().rollback().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k0")).await,
        Some(item(&[("Id", s("k0")), ("v", n(1))]))
    );
    assert_eq!(
        env.tx_state(&id).await.map(|s| s.0),
        Some(TxState::RolledBack)
    );
    assert_clean(&env).await;
}

#[tokio::test]
async fn ninety_eight_updates_take_two_requests() {
    let env = batched_env("batch98").await;
    seed(&env, 98).await;
    let c = commit_updates(&env, 98).await;
    println!("N=98 batched: {c:?}");
    assert_eq!(c.values().sum::<u64>(), 2, "{c:?}");
    assert_eq!(c.get("TransactWriteItems"), Some(&2));
}

#[tokio::test]
async fn a_thousand_updates_take_at_most_sixty_requests() {
    let env = batched_env("batch1000").await;
    seed(&env, 1000).await;
    let c = commit_updates(&env, 1000).await;
    println!("N=1000 batched: {c:?}");
    assert!(c.values().sum::<u64>() <= 60, "{c:?}");
    // Every lock went in a batch; the flip decides the record's gates with it (a
    // TransactWriteItems): the finalize is the only UpdateItem.
    assert_eq!(
        c.get("UpdateItem").copied().unwrap_or(0),
        1,
        "finalize: {c:?}"
    );
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_batch_that_meets_a_lock_falls_back_and_commits() {
    let env = batched_env("batchlocked").await;
    seed(&env, 3).await;
    // Another transaction holds k1 (a read lock), and is younger (no ticket): ours wounds it.
    let other = env.manager.begin();
    other
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k1"))
        .send()
        .await
        .unwrap();
    let c = commit_updates(&env, 3).await;
    println!("N=3 batched, one item locked: {c:?}");
    // The batch was cancelled (it wrote nothing): the record on its own, then the locks.
    assert_eq!(c.get("PutItem"), Some(&1), "{c:?}");
    assert!(matches!(
        other.commit().await,
        Err(Error::RolledBack { .. })
    ));
    assert_clean(&env).await;
}

/// Buffers a put of `{Id: k, v}` in `tx`, with `condition` if any.
async fn put(tx: &Transaction, table: &str, k: &str, v: i64, condition: Option<&str>) {
    let mut b = tx
        .put_item()
        .table_name(table)
        .item("Id", s(k))
        .item("v", n(v));
    if let Some(c) = condition {
        b = b.condition_expression(c);
    }
    b.send().await.unwrap();
}

/// Buffers an update of item `k` in `tx`, with `:v` bound to `v`.
async fn update(tx: &Transaction, table: &str, k: &str, expression: &str, v: i64) {
    tx.update_item()
        .table_name(table)
        .key("Id", s(k))
        .update_expression(expression)
        .expression_attribute_values(":v", n(v))
        .send()
        .await
        .unwrap();
}

/// Asserts that item `k` is exactly `{Id: k, v}`, lock attributes included (`None`: absent).
async fn assert_v(env: &TestEnv, k: &str, v: Option<i64>) {
    let expected = v.map(|v| item(&[("Id", s(k)), ("v", n(v))]));
    assert_eq!(env.raw_get(&env.table, &key(k)).await, expected, "{k}");
}

/// Puts and updates of absent items are locked in batches too: the batch of the record and the
/// locks is cancelled because some items are absent, and sent once more with a transient
/// placeholder for each of those (whose lock is then known whole: no read, even for the put with
/// a condition, judged on a phantom key). Three requests; before, every item was then locked one by
/// one (23 requests for 10 inserts). Nothing of the locks is left on any item.
#[tokio::test]
async fn inserts_and_upserts_are_locked_in_the_batch() {
    let env = batched_env("batchins").await;
    seed(&env, 1).await;
    env.counter.reset();
    let tx = env.manager.begin();
    let id = tx.id().clone();
    put(&tx, &env.table, "new1", 1, None).await;
    put(&tx, &env.table, "new2", 2, Some("attribute_not_exists(Id)")).await;
    update(&tx, &env.table, "new3", "SET v = :v", 3).await;
    update(&tx, &env.table, "k0", "SET v = v + :v", 1).await;
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(c.get("TransactWriteItems"), Some(&3), "{c:?}");
    assert_eq!(c.values().sum::<u64>(), 3, "{c:?}");
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    for (k, v) in [("new1", 1), ("new2", 2), ("new3", 3), ("k0", 1)] {
        assert_v(&env, k, Some(v)).await;
    }
    assert_clean(&env).await;
}

/// A put without a condition assumes a create: the batch's first request locks its item with a
/// placeholder, so new items take the two requests of any batched transaction (three before: the
/// batch assumed existing items and was cancelled by the absent ones). A put that overwrites an
/// existing item pays the wrong guess: one more request, and the item is replaced as it must be.
#[tokio::test]
async fn plain_puts_of_new_items_take_two_requests() {
    let env = batched_env("batchplain").await;
    seed(&env, 2).await;
    env.counter.reset();
    let tx = env.manager.begin();
    let id = tx.id().clone();
    put(&tx, &env.table, "new1", 1, None).await;
    put(&tx, &env.table, "new2", 2, None).await;
    update(&tx, &env.table, "k0", "SET v = v + :v", 1).await;
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(c.get("TransactWriteItems"), Some(&2), "{c:?}");
    assert_eq!(c.values().sum::<u64>(), 2, "{c:?}");
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    for (k, v) in [("new1", 1), ("new2", 2), ("k0", 1)] {
        assert_v(&env, k, Some(v)).await;
    }

    // An overwrite: the placeholder lock of k1 fails, the batch goes again with k1 locked as
    // existing.
    env.counter.reset();
    let tx = env.manager.begin();
    put(&tx, &env.table, "k1", 7, None).await;
    put(&tx, &env.table, "new3", 3, None).await;
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(c.get("TransactWriteItems"), Some(&3), "{c:?}");
    assert_eq!(c.values().sum::<u64>(), 3, "{c:?}");
    for (k, v) in [("k1", 7), ("new3", 3)] {
        assert_v(&env, k, Some(v)).await;
    }
    assert_clean(&env).await;
}

/// With per-item locks (`batch_locks` off) and item `k0` seeded: commits puts of three new items
/// with `condition` and asserts that each took one lock write (record, 3 locks, commit) and
/// landed.
async fn per_item_puts_of_new_items(prefix: &str, condition: Option<&str>) -> TestEnv {
    let env = TestEnv::with_settings(prefix, |s| s.batch_locks = false).await;
    seed(&env, 1).await;
    env.counter.reset();
    let tx = env.manager.begin();
    for k in ["new1", "new2", "new3"] {
        put(&tx, &env.table, k, 1, condition).await;
    }
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(c.get("UpdateItem"), Some(&3), "one lock each: {c:?}");
    assert_eq!(c.values().sum::<u64>(), 5, "record, 3 locks, commit: {c:?}");
    for k in ["new1", "new2", "new3"] {
        assert_v(&env, k, Some(1)).await;
    }
    env
}

/// The same guess on the per-item path: a put without a condition of a new item is locked in one
/// write (two before), an overwrite in two.
#[tokio::test]
async fn per_item_locks_of_plain_puts_assume_a_create() {
    let env = per_item_puts_of_new_items("peritemplain", None).await;
    env.counter.reset();
    let tx = env.manager.begin();
    put(&tx, &env.table, "k0", 9, None).await;
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(
        c.get("UpdateItem"),
        Some(&2),
        "placeholder, then the lock: {c:?}"
    );
    assert_v(&env, "k0", Some(9)).await;
    assert_clean(&env).await;
}

/// A batch's lock on an absent item is a placeholder (`_TxT` true). A rollback (here by a second
/// coordinator, after a crash before the apply) deletes it and leaves the existing item as it was.
#[tokio::test]
async fn a_rolled_back_batch_deletes_its_placeholders() {
    let env = TestEnv::with_settings("batchinsrb", |s| {
        s.batch_locks = true;
        s.one_shot_max_items = 0;
    })
    .await;
    seed(&env, 1).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    put(&tx, &env.table, "new1", 1, None).await;
    update(&tx, &env.table, "k0", "SET v = :v", 9).await;
    // Request 1 is the record and both locks (a placeholder for new1: a put assumes a create);
    // crash at the next (the read of k0's before-image).
    env.faults
        .crash_at(2, dynamodb_transactions::fault::FaultMode::BeforeSend);
    assert!(tx.commit().await.is_err());
    env.faults.disarm();
    let placeholder = env.raw_get(&env.table, &key("new1")).await.unwrap();
    assert_eq!(
        placeholder.get("_TxT"),
        Some(&aws_sdk_dynamodb::types::AttributeValue::Bool(true)),
        "{placeholder:?}"
    );
    assert_eq!(placeholder.get("_TxId"), Some(&s(id.as_str())));
    assert!(!placeholder.contains_key("v"), "{placeholder:?}");
    let existing = env.raw_get(&env.table, &key("k0")).await.unwrap();
    assert_eq!(existing.get("_TxT"), None, "{existing:?}");
    assert_eq!(existing.get("_TxId"), Some(&s(id.as_str())));

    // A reader sees neither lock's effect: no item new1, k0 as it was.
    let got = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("new1"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.item, None);

    let (m2, _) = env.second_coordinator();
    m2.resume(&id).await.unwrap().rollback().await.unwrap();
    assert_v(&env, "new1", None).await;
    assert_v(&env, "k0", Some(0)).await;
    assert_clean(&env).await;
}

/// An update DynamoDB rejects on a placeholder (`SET v = v + :one` on an item that did not exist)
/// fails the one-request commit: the transaction rolls back and its placeholders are deleted, not
/// left as items holding only their key.
#[tokio::test]
async fn an_update_rejected_on_a_placeholder_rolls_back_without_a_trace() {
    let env = batched_env("batchinsrej").await;
    seed(&env, 1).await;
    let tx = env.manager.begin();
    put(&tx, &env.table, "new1", 1, None).await;
    update(&tx, &env.table, "new2", "SET v = v + :v", 1).await;
    let err = tx.commit().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::RequestRejected {
                request_index: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.transaction_outcome(),
        Some(dynamodb_transactions::TxOutcome::RolledBack)
    );
    assert_v(&env, "new1", None).await;
    assert_v(&env, "new2", None).await;
    assert_v(&env, "k0", Some(0)).await;
    assert_clean(&env).await;
}

/// A transaction too large for one request locks in batches after its record; a batch cancelled
/// only by absent items is sent again with their placeholders, so 120 inserts take no per-item
/// lock.
#[tokio::test]
async fn large_inserts_are_locked_in_batches() {
    let env = batched_env("batchins120").await;
    seed(&env, 1).await;
    env.counter.reset();
    let tx = env.manager.begin();
    for i in 0..120 {
        put(&tx, &env.table, &format!("new{i}"), i, None).await;
    }
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    println!("120 inserts: {c:?}");
    // Every lock went in a batch; the flip decides the record's gates with it (a
    // TransactWriteItems): the finalize is the only UpdateItem.
    assert_eq!(
        c.get("UpdateItem").copied().unwrap_or(0),
        1,
        "finalize only: {c:?}"
    );
    for i in 0..120 {
        assert_v(&env, &format!("new{i}"), Some(i)).await;
    }
    assert_clean(&env).await;
}

/// A put that may only create its item (`attribute_not_exists` of the hash key) is locked with a
/// placeholder from the batch's first request: such inserts take the two requests of any batched
/// transaction. On an item that exists after all, the guess costs one request, and the put's
/// condition then fails as it must: the transaction rolls back and the item is left as it was.
#[tokio::test]
async fn inserts_that_must_not_overwrite_take_two_requests() {
    let env = batched_env("batchinsnx").await;
    seed(&env, 1).await;
    async fn insert(tx: &dynamodb_transactions::Transaction, table: &str, k: &str, v: i64) {
        tx.put_item()
            .table_name(table)
            .item("Id", s(k))
            .item("v", n(v))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", "Id")
            .send()
            .await
            .unwrap();
    }
    env.counter.reset();
    let tx = env.manager.begin();
    for (k, v) in [("new1", 1), ("new2", 2)] {
        insert(&tx, &env.table, k, v).await;
    }
    update(&tx, &env.table, "k0", "SET v = :v", 5).await;
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(c.get("TransactWriteItems"), Some(&2), "{c:?}");
    assert_eq!(c.values().sum::<u64>(), 2, "{c:?}");
    for (k, v) in [("new1", 1), ("new2", 2), ("k0", 5)] {
        assert_v(&env, k, Some(v)).await;
    }

    // The same insert of an item that exists: the guess is corrected, the condition fails.
    let tx = env.manager.begin();
    insert(&tx, &env.table, "new1", 9).await;
    insert(&tx, &env.table, "new3", 3).await;
    let err = tx.commit().await.unwrap_err();
    assert_eq!(
        err.transaction_outcome(),
        Some(dynamodb_transactions::TxOutcome::RolledBack),
        "{err:?}"
    );
    assert_v(&env, "new1", Some(1)).await;
    assert_v(&env, "new3", None).await;
    assert_clean(&env).await;
}

/// The same guess on the per-item path (`batch_locks` off): an insert that must not overwrite is
/// locked with its placeholder in one write (two before: the lock of an existing item failed
/// first).
#[tokio::test]
async fn per_item_locks_of_inserts_that_must_not_overwrite_take_one_write() {
    let env = per_item_puts_of_new_items("peritemnx", Some("attribute_not_exists(Id)")).await;
    // On an item that exists, the guess costs one write and the condition fails at commit.
    let tx = env.manager.begin();
    put(&tx, &env.table, "k0", 9, Some("attribute_not_exists(Id)")).await;
    let err = tx.commit().await.unwrap_err();
    assert_eq!(
        err.transaction_outcome(),
        Some(dynamodb_transactions::TxOutcome::RolledBack),
        "{err:?}"
    );
    assert_v(&env, "k0", Some(0)).await;
    assert_clean(&env).await;
}

/// 99 items (phased) whose requests pass the 16 KB a record's header is created with: a chunk row
/// would not fit beside the record and 99 locks in one request (100 actions), so the record keeps
/// its requests in the header, and the record and every lock still go in one request.
#[tokio::test]
async fn ninety_nine_locks_and_a_record_too_large_for_a_lean_header_take_one_request() {
    let env = TestEnv::with_settings("batch99", |s| {
        s.batch_locks = true;
        s.write_only_fast_path = false;
    })
    .await;
    seed(&env, 99).await;
    let wide = "w".repeat(300);
    env.counter.reset();
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for i in 0..99 {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("k{i}")))
            .update_expression("SET v = :v, w = :w")
            .expression_attribute_values(":v", n(i))
            .expression_attribute_values(":w", s(&wide))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    // The record and the locks; the writes rolled forward.
    assert_eq!(c.get("TransactWriteItems"), Some(&2), "{c:?}");
    let rows = env.record_rows(&id).await;
    assert_eq!(rows.len(), 1, "no chunk row");
    assert_eq!(rows[0]["_TxR"].as_l().unwrap().len(), 99);
    for i in 0..99 {
        let it = env
            .raw_get(&env.table, &key(&format!("k{i}")))
            .await
            .unwrap();
        assert_eq!(
            it,
            item(&[("Id", s(&format!("k{i}"))), ("v", n(i)), ("w", s(&wide))])
        );
    }
}
