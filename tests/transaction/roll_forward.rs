//! Writes rolled forward past the commit point (`Settings::roll_forward`): a large transaction
//! locks, commits, then applies each write in the write that unlocks its item. What DynamoDB could
//! refuse is applied before the commit; readers see the new versions from the commit on; whoever
//! finishes the transaction applies what a dead coordinator left.

use std::time::Duration;

use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::{Error, IsolationLevel, Item, TxId, TxState};

use crate::common::*;

/// More items than the one-request commit takes: the phased commit, where writes roll forward.
const N: usize = 120;

async fn env(prefix: &str) -> TestEnv {
    env_with(prefix, true).await
}

/// `env` with `Settings::judge_conditions` as given.
async fn env_with(prefix: &str, judge_conditions: bool) -> TestEnv {
    let env = TestEnv::with_settings(prefix, |s| {
        s.roll_forward = true;
        s.judge_conditions = judge_conditions;
    })
    .await;
    for i in 0..N {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("k{i}"))), ("hits", n(i))]),
        )
        .await;
    }
    env
}

fn id(i: usize) -> String {
    format!("k{i}")
}

/// Adds an increment of every item to `tx`.
async fn increments(env: &TestEnv, tx: &dynamodb_transactions::Transaction) {
    for i in 0..N {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&id(i)))
            .update_expression("SET hits = hits + :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
    }
}

/// Commits the increments of every item with a coordinator that dies before its `k`-th request.
async fn increments_until_death_at(env: &TestEnv, k: u64) -> TxId {
    let tx = env.manager.begin();
    let tx_id = tx.id().clone();
    increments(env, &tx).await;
    env.faults.crash_at(k, FaultMode::BeforeSend);
    let _ = tx.commit().await;
    env.faults.disarm();
    tx_id
}

async fn hits(env: &TestEnv, i: usize) -> Item {
    env.raw_get(&env.table, &key(&id(i))).await.expect("item")
}

#[tokio::test]
async fn updates_are_applied_by_the_unlock_after_the_commit() {
    let env = env("rf-upd").await;
    let tx = env.manager.begin();
    let tx_id = tx.id().clone();
    increments(&env, &tx).await;
    env.counter.reset();
    tx.commit().await.unwrap();
    for i in 0..N {
        let it = hits(&env, i).await;
        assert_eq!(it["hits"], n(i + 1), "{} incremented once", id(i));
        assert!(!has_tx_attrs(&it), "{it:?}");
    }
    assert_eq!(env.tx_state(&tx_id).await, Some((TxState::Committed, true)));
    // Record (with its gates), 2 lock batches, 2 reads of the locked items, the flip (with the
    // gates), 2 batches that apply and unlock, the finalize: no apply before the commit.
    assert_eq!(
        env.counter.get("TransactWriteItems"),
        6,
        "{:?}",
        env.counter.snapshot()
    );
    assert_eq!(env.counter.get("BatchGetItem"), 2);
}

#[tokio::test]
async fn puts_and_deletes_roll_forward_without_reading_their_items() {
    let env = env("rf-pd").await;
    let tx = env.manager.begin();
    for i in 0..N {
        if i % 2 == 0 {
            tx.delete_item()
                .table_name(&env.table)
                .key("Id", s(&id(i)))
                .send()
                .await
                .unwrap();
        } else {
            tx.put_item()
                .table_name(&env.table)
                .item("Id", s(&id(i)))
                .item("v", s("new"))
                .send()
                .await
                .unwrap();
        }
    }
    // And inserts of absent items.
    for i in N..N + 10 {
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(&id(i)))
            .item("v", s("inserted"))
            .send()
            .await
            .unwrap();
    }
    env.counter.reset();
    tx.commit().await.unwrap();
    assert_eq!(
        env.counter.get("BatchGetItem"),
        0,
        "{:?}",
        env.counter.snapshot()
    );
    let items = env.scan_all(&env.table).await;
    assert_eq!(items.len(), N / 2 + 10);
    for it in &items {
        assert!(!has_tx_attrs(it), "{it:?}");
        let i: usize = it["Id"].as_s().unwrap()[1..].parse().unwrap();
        let want = if i >= N { "inserted" } else { "new" };
        assert_eq!(it["v"], s(want));
        assert!(!it.contains_key("hits"), "a put replaces the whole item");
    }
}

#[tokio::test]
async fn an_update_dynamodb_refuses_is_applied_before_the_commit_and_rolls_back() {
    let env = env("rf-rej").await;
    env.raw_put(&env.table, item(&[("Id", s(&id(7))), ("hits", s("text"))]))
        .await;
    let tx = env.manager.begin();
    increments(&env, &tx).await;
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::RequestRejected { .. }), "{err:?}");
    for i in 0..N {
        let it = hits(&env, i).await;
        assert!(!has_tx_attrs(&it), "{it:?}");
        if i != 7 {
            assert_eq!(it["hits"], n(i), "nothing applied");
        }
    }
}

#[tokio::test]
async fn readers_see_the_rolled_forward_versions_once_committed_and_another_coordinator_applies_them()
 {
    let env = env("rf-crash").await;
    // Record, 2 lock batches, 2 reads, the flip; then the coordinator dies.
    let tx_id = increments_until_death_at(&env, 7).await;
    assert_eq!(
        env.tx_state(&tx_id).await,
        Some((TxState::Committed, false))
    );
    let raw = hits(&env, 3).await;
    assert_eq!(raw["hits"], n(3), "not applied: {raw:?}");
    assert!(
        raw.contains_key("_TxU") && !raw.contains_key("_TxA"),
        "{raw:?}"
    );
    assert!(
        !raw.contains_key("_TxP"),
        "no padding on a lock rolled forward: {raw:?}"
    );
    let d = env
        .manager
        .describe_transaction(&tx_id)
        .await
        .unwrap()
        .expect("described");
    assert_eq!(d.items.len(), N);
    assert!(
        d.items.iter().all(|i| i.rolls_forward && !i.applied),
        "{:?}",
        d.items[0]
    );
    // Committed readers see each write's result, uncommitted ones the stored item. (Reads here
    // are consistent: an eventually consistent one may show the item as it was before the lock.)
    let get = |level| {
        env.manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s(&id(3)))
            .isolation(level)
            .consistent_read(true)
            .send()
    };
    assert_eq!(
        get(IsolationLevel::Committed)
            .await
            .unwrap()
            .item()
            .unwrap()["hits"],
        n(4)
    );
    assert_eq!(
        get(IsolationLevel::Uncommitted)
            .await
            .unwrap()
            .item()
            .unwrap()["hits"],
        n(3)
    );
    // A filter is judged on the version the level sees, and a projection applied to it.
    let got = env
        .manager
        .scan()
        .table_name(&env.table)
        .isolation(IsolationLevel::Committed)
        .consistent_read(true)
        .filter_expression("hits = :h")
        .expression_attribute_values(":h", n(4))
        .projection_expression("hits")
        .send_all()
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0], item(&[("hits", n(4))]));
    // A batch read at `Committed` sees every write's result: one read of the record's state, then
    // per item the whole item, and the record's requests once for the page.
    env.counter.reset();
    // Consistent: an eventually consistent read may show an item before the commit, with its
    // own request count.
    let mut ka = aws_sdk_dynamodb::types::KeysAndAttributes::builder().consistent_read(true);
    for i in 0..10 {
        ka = ka.keys(key(&id(i)));
    }
    let out = env
        .manager
        .batch_get_item()
        .request_items(&env.table, ka.build().unwrap())
        .isolation(IsolationLevel::Committed)
        .send()
        .await
        .unwrap();
    let got = &out.responses()[&env.table];
    assert_eq!(got.len(), 10);
    let c = env.counter.snapshot();
    assert_eq!(c.get("Query"), Some(&1), "{c:?}");
    assert_eq!(c.get("GetItem"), Some(&11), "{c:?}");
    for it in got {
        let i: usize = it["Id"].as_s().unwrap()[1..].parse().unwrap();
        assert_eq!(it["hits"], n(i + 1), "{it:?}");
        assert!(!has_tx_attrs(it));
    }
    // Another coordinator finishes: every write applied once, every item unlocked.
    let (m2, _) = env.second_coordinator();
    assert_eq!(
        m2.complete_transaction(&tx_id).await.unwrap(),
        TxState::Committed
    );
    for i in 0..N {
        let it = hits(&env, i).await;
        assert_eq!(it["hits"], n(i + 1), "{} incremented once", id(i));
        assert!(!has_tx_attrs(&it), "{it:?}");
    }
    assert_eq!(env.tx_state(&tx_id).await, Some((TxState::Committed, true)));
    // Finishing again changes nothing.
    m2.complete_transaction(&tx_id).await.unwrap();
    assert_eq!(hits(&env, 0).await["hits"], n(1));
}

#[tokio::test]
async fn a_transaction_rolled_back_before_its_commit_leaves_its_items_unchanged() {
    let env = env("rf-rb").await;
    // Dies before the flip (after the record, the locks and the reads).
    let tx_id = increments_until_death_at(&env, 6).await;
    assert!(hits(&env, 0).await.contains_key("_TxU"));
    let (m2, _) = env.second_coordinator();
    m2.rollback_transaction(&tx_id).await.unwrap();
    for i in 0..N {
        let it = hits(&env, i).await;
        assert_eq!(it["hits"], n(i));
        assert!(!has_tx_attrs(&it), "{it:?}");
    }
    assert_eq!(
        env.tx_state(&tx_id).await,
        Some((TxState::RolledBack, true))
    );
}

/// Inserts that must not overwrite roll forward too: their condition asks only that the item be
/// absent, which the placeholder their lock inserted shows. One of them meets an existing item:
/// its batch falls back item by item, the insert is applied before the commit, and DynamoDB's
/// refusal rolls everything back.
#[tokio::test]
async fn inserts_that_must_not_overwrite_roll_forward() {
    let env = TestEnv::with_settings("rf-ins", |s| s.roll_forward = true).await;
    async fn insert(env: &TestEnv, tx: &dynamodb_transactions::Transaction, i: usize) {
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(&id(i)))
            .item("v", n(i))
            .condition_expression("attribute_not_exists(Id)")
            .send()
            .await
            .unwrap();
    }
    let tx = env.manager.begin();
    for i in 0..N {
        insert(&env, &tx, i).await;
    }
    env.counter.reset();
    tx.commit().await.unwrap();
    // The record (with its gates), 2 batches of placeholder locks, the flip (with the gates),
    // 2 batches of writes that apply and unlock, the finalize: nothing read, nothing applied
    // before the flip.
    let c = env.counter.snapshot();
    assert_eq!(c.get("BatchGetItem"), None, "{c:?}");
    assert_eq!(c.get("TransactWriteItems"), Some(&6), "{c:?}");
    let items = env.scan_all(&env.table).await;
    assert_eq!(items.len(), N);
    for it in &items {
        assert!(!has_tx_attrs(it), "{it:?}");
    }

    env.raw_put(
        &env.table,
        item(&[("Id", s(&id(N + 5))), ("v", s("there"))]),
    )
    .await;
    let tx = env.manager.begin();
    for i in N..2 * N {
        insert(&env, &tx, i).await;
    }
    let err = tx.commit().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::ConditionFailed { .. } | Error::RequestRejected { .. }
        ),
        "{err:?}"
    );
    let items = env.scan_all(&env.table).await;
    assert_eq!(items.len(), N + 1, "nothing of the second transaction");
    for it in &items {
        assert!(!has_tx_attrs(it), "{it:?}");
    }
}

/// A put whose condition the library does not judge (`judge_conditions` off) is applied before
/// the commit, with its item's before-image: a rollback restores every item (it once did not: a
/// marked put skipped the read of its item, and its image was empty).
#[tokio::test]
async fn conditional_puts_are_applied_with_their_images_and_roll_back() {
    let env = env_with("rf-cput", false).await;
    // The coordinator dies at each request in turn until it leaves its puts applied, not committed.
    for k in 1..20 {
        let tx = env.manager.begin();
        let tx_id = tx.id().clone();
        for i in 0..N {
            conditional_put(&env, &tx, i).await;
        }
        env.faults.crash_at(k, FaultMode::BeforeSend);
        let _ = tx.commit().await;
        env.faults.disarm();
        let pending = env.tx_state(&tx_id).await.map(|s| s.0) == Some(TxState::Pending);
        let applied = hits(&env, 0).await.contains_key("_TxA");
        let (m2, _) = env.second_coordinator();
        match m2.rollback_transaction(&tx_id).await {
            Ok(()) | Err(Error::TransactionNotFound { .. }) => {}
            Err(e) => panic!("rollback after a crash at request {k}: {e}"),
        }
        for i in 0..N {
            let it = hits(&env, i).await;
            assert_eq!(
                it,
                item(&[("Id", s(&id(i))), ("hits", n(i))]),
                "restored after a crash at request {k}"
            );
        }
        if pending && applied {
            return;
        }
    }
    panic!("no crash left the puts applied and the transaction pending");
}

/// Adds to `tx` a put of item `i` conditional on `attribute_exists(hits)`.
async fn conditional_put(env: &TestEnv, tx: &dynamodb_transactions::Transaction, i: usize) {
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s(&id(i)))
        .item("v", s("new"))
        .condition_expression("attribute_exists(hits)")
        .send()
        .await
        .unwrap();
}

/// Adds to `tx` an update of every item conditional on its current count (`hits = :was`, which
/// holds), and for the first ten items instead a put conditional on `attribute_exists(hits)` (even
/// ones) or a delete conditional on `hits < :big` (odd ones).
async fn conditional_writes(env: &TestEnv, tx: &dynamodb_transactions::Transaction) {
    for i in 0..N {
        if i < 10 && i % 2 == 0 {
            conditional_put(env, tx, i).await;
        } else if i < 10 {
            tx.delete_item()
                .table_name(&env.table)
                .key("Id", s(&id(i)))
                .condition_expression("hits < :big")
                .expression_attribute_values(":big", n(1000))
                .send()
                .await
                .unwrap();
        } else {
            tx.update_item()
                .table_name(&env.table)
                .key("Id", s(&id(i)))
                .update_expression("SET hits = hits + :one")
                .condition_expression("hits = :was")
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":was", n(i))
                .send()
                .await
                .unwrap();
        }
    }
}

/// Asserts what `conditional_writes` leaves once committed: puts, deletes and increments, and no
/// lock attribute anywhere.
async fn assert_conditional_writes_committed(env: &TestEnv) {
    for i in 0..N {
        let got = env.raw_get(&env.table, &key(&id(i))).await;
        let want = if i < 10 && i % 2 == 0 {
            Some(item(&[("Id", s(&id(i))), ("v", s("new"))]))
        } else if i < 10 {
            None
        } else {
            Some(item(&[("Id", s(&id(i))), ("hits", n(i + 1))]))
        };
        assert_eq!(got, want, "{}", id(i));
    }
}

/// Conditional writes whose condition the library judges to hold on the item read under the lock
/// roll forward like unconditional ones: no write before the commit (the same requests as
/// `updates_are_applied_by_the_unlock_after_the_commit`; before, every one of them was applied
/// before the commit, 2 more `TransactWriteItems`). The puts' and deletes' items are read too: a
/// condition is judged on the item.
#[tokio::test]
async fn conditional_writes_judged_to_hold_roll_forward() {
    let env = env("rf-cond").await;
    let tx = env.manager.begin();
    let tx_id = tx.id().clone();
    conditional_writes(&env, &tx).await;
    env.counter.reset();
    tx.commit().await.unwrap();
    assert_eq!(env.tx_state(&tx_id).await, Some((TxState::Committed, true)));
    assert_eq!(
        env.counter.get("TransactWriteItems"),
        6,
        "the record and the flip (each with the gates), 2 lock batches, 2 that apply and unlock: {:?}",
        env.counter.snapshot()
    );
    assert_eq!(env.counter.get("BatchGetItem"), 2);
    assert_conditional_writes_committed(&env).await;

    // With `judge_conditions` off, the same writes are applied before the commit.
    let env = env_with("rf-condoff", false).await;
    let tx = env.manager.begin();
    conditional_writes(&env, &tx).await;
    env.counter.reset();
    tx.commit().await.unwrap();
    assert_eq!(
        env.counter.get("TransactWriteItems"),
        8,
        "the record and the flip (each with the gates), 2 lock batches, 2 applies, 2 unlocks: {:?}",
        env.counter.snapshot()
    );
    assert_conditional_writes_committed(&env).await;
}

/// A condition judged not to hold is left to DynamoDB before the commit: the transaction rolls
/// back with `ConditionFailed` naming the request, and no item changes.
#[tokio::test]
async fn a_condition_judged_false_is_left_to_dynamodb_and_rolls_back() {
    let env = env("rf-condno").await;
    env.raw_put(&env.table, item(&[("Id", s(&id(42))), ("hits", n(-1))]))
        .await;
    let tx = env.manager.begin();
    conditional_writes(&env, &tx).await;
    let err = tx.commit().await.unwrap_err();
    match &err {
        Error::ConditionFailed { request_index, .. } => assert_eq!(*request_index, 42),
        other => panic!("{other:?}"),
    }
    for i in 0..N {
        let it = hits(&env, i).await;
        assert!(!has_tx_attrs(&it), "{it:?}");
        let want = if i == 42 { -1 } else { i as i64 };
        assert_eq!(it["hits"], n(want), "{}", id(i));
    }
}

/// Should DynamoDB judge a condition otherwise than the library did (simulated here: the item is
/// changed behind the lock after the commit), the write rolled forward still carries the
/// condition: DynamoDB refuses it and the item stays locked, unchanged, instead of being written
/// against its condition (as it was before the write kept the condition); every other item is
/// settled, and the record is not finalized. The sweeper reports it among its errors.
#[tokio::test]
async fn a_misjudged_condition_leaves_its_item_locked_and_the_others_settled() {
    let env = env("rf-condmis").await;
    let tx = env.manager.begin();
    let tx_id = tx.id().clone();
    conditional_writes(&env, &tx).await;
    // Record, 2 lock batches, 2 reads, the flip; then the coordinator dies.
    env.faults.crash_at(7, FaultMode::BeforeSend);
    let _ = tx.commit().await;
    env.faults.disarm();
    assert_eq!(
        env.tx_state(&tx_id).await,
        Some((TxState::Committed, false))
    );
    let mut moved = hits(&env, 42).await;
    assert!(moved.contains_key("_TxU"), "{moved:?}");
    moved.insert("hits".into(), n(-7));
    env.raw_put(&env.table, moved.clone()).await;

    let (m2, _) = env.second_coordinator();
    let err = m2.resume(&tx_id).await.unwrap().commit().await.unwrap_err();
    // Committed, not finished (completing logs DynamoDB's refusal at each attempt).
    assert!(matches!(err, Error::AlreadyCommitted { .. }), "{err:?}");
    assert_eq!(hits(&env, 42).await, moved, "refused, still locked");
    assert_eq!(
        env.tx_state(&tx_id).await,
        Some((TxState::Committed, false))
    );
    for i in (0..N).filter(|&i| i != 42) {
        let got = env.raw_get(&env.table, &key(&id(i))).await;
        assert!(got.as_ref().is_none_or(|it| !has_tx_attrs(it)), "{got:?}");
    }
    assert_sweep_reports_refusal(&m2, &tx_id).await;
    assert_eq!(hits(&env, 42).await, moved);

    // The operator's fix (docs/OPERATIONS.md): the item as it should be, without the lock; the
    // transaction then finishes.
    env.raw_put(&env.table, item(&[("Id", s(&id(42))), ("hits", n(-7))]))
        .await;
    m2.resume(&tx_id).await.unwrap().commit().await.unwrap();
    assert_eq!(env.tx_state(&tx_id).await, Some((TxState::Committed, true)));
    assert_eq!(
        hits(&env, 42).await,
        item(&[("Id", s(&id(42))), ("hits", n(-7))])
    );
}

/// The same for an update rolled forward that DynamoDB refuses after the commit (simulated: the
/// item's count turned into text behind the lock, so `hits + :one` is invalid): the refusal
/// leaves that item locked and unchanged, not its whole batch (before, the completer gave up on the
/// first refusal, leaving up to 99 other items of the batch locked).
#[tokio::test]
async fn an_update_refused_after_the_commit_leaves_only_its_item_locked() {
    let env = env("rf-refused").await;
    // Record, 2 lock batches, 2 reads, the flip; then the coordinator dies.
    let tx_id = increments_until_death_at(&env, 7).await;
    assert_eq!(
        env.tx_state(&tx_id).await,
        Some((TxState::Committed, false))
    );
    let mut moved = hits(&env, 3).await;
    assert!(moved.contains_key("_TxU"), "{moved:?}");
    moved.insert("hits".into(), s("text"));
    env.raw_put(&env.table, moved.clone()).await;

    let (m2, _) = env.second_coordinator();
    let err = m2.resume(&tx_id).await.unwrap().commit().await.unwrap_err();
    assert!(matches!(err, Error::AlreadyCommitted { .. }), "{err:?}");
    assert_eq!(hits(&env, 3).await, moved, "refused, still locked");
    for i in (0..N).filter(|&i| i != 3) {
        let it = hits(&env, i).await;
        assert!(!has_tx_attrs(&it), "{it:?}");
        assert_eq!(it["hits"], n(i + 1), "{}", id(i));
    }
    assert_sweep_reports_refusal(&m2, &tx_id).await;
    assert_eq!(
        env.tx_state(&tx_id).await,
        Some((TxState::Committed, false))
    );
}

/// Asserts that a sweep completing `tx_id` now reports DynamoDB's refusal of a write rolled forward.
async fn assert_sweep_reports_refusal(m: &dynamodb_transactions::TransactionManager, tx_id: &TxId) {
    let report = m
        .sweep(&dynamodb_transactions::sweeper::SweepOptions::new().complete_after(Duration::ZERO))
        .await
        .unwrap();
    assert!(
        report
            .errors
            .iter()
            .any(|f| f.tx_id.as_ref() == Some(tx_id) && f.message.contains("refused")),
        "{report:?}"
    );
}
