//! Before-images in the images table: saved before a crash, lost answers to the save, crashes on
//! the delete; whoever finishes the transaction leaves no image behind.

use aws_sdk_dynamodb::types::ReturnValue;
use dynamodb_transactions::TxState;

use crate::assert_no_images;
use crate::common::*;

/// A manager over `env`'s tables with its own client (no faults): another coordinator.
fn other_coordinator(env: &TestEnv, phased: bool) -> dynamodb_transactions::TransactionManager {
    dynamodb_transactions::TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            if phased {
                s.one_shot_max_items = 0;
            }
        })
        .build()
}

/// An item whose before-image is too large to embed (> 64 KB): it goes to the images table.
fn big_item(id: &str) -> dynamodb_transactions::Item {
    item(&[("Id", s(id)), ("v", n(1)), ("big", s(&"x".repeat(70_000)))])
}

/// Writes the big item `id` (v = 1) and begins a transaction that sets its `v` to 2.
async fn begin_big_item_update(env: &TestEnv, id: &str) -> dynamodb_transactions::Transaction {
    env.raw_put(&env.table, big_item(id)).await;
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    tx
}

/// A phased commit of `SET v = :v` on the big item `id` that crashes (as a process would) after
/// saving the before-image in the images table and before applying: the item is locked, not
/// applied, and one image exists.
async fn crash_after_image_save(env: &TestEnv, id: &str) -> dynamodb_transactions::TxId {
    let tx = begin_big_item_update(env, id).await;
    let tx_id = tx.id().clone();
    // Record (1), lock (2), image PutItem (3), apply (4).
    env.faults
        .crash_at(4, dynamodb_transactions::fault::FaultMode::BeforeSend);
    assert!(tx.commit().await.is_err());
    env.faults.disarm();
    let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
    assert_eq!(raw["_TxId"], s(tx_id.as_str()), "locked");
    assert!(!raw.contains_key("_TxA"), "not applied");
    assert_eq!(
        env.scan_all(env.manager.images_table()).await.len(),
        1,
        "the image was saved"
    );
    tx_id
}

async fn assert_big_item(env: &TestEnv, id: &str, v: i64) {
    let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
    assert!(!has_tx_attrs(&raw), "{id}: lock attributes left");
    assert_eq!(raw["v"], n(v), "{id}");
    assert_eq!(raw["big"], big_item(id)["big"], "{id}");
}

/// Finding 10(b): an images-table image saved by a coordinator that crashed before applying is
/// removed by whoever finishes the transaction: a resumed commit (one request or phased), a resumed
/// rollback, the sweeper (its scan of the images table turned off, so the completion itself must
/// do it).
#[tokio::test]
async fn an_image_saved_before_a_crash_is_removed_by_whoever_finishes() {
    let env = TestEnv::with_settings("imgcrash", |s| {
        s.one_shot_max_items = 0;
        // Writes applied before the commit (rolled forward, they would be applied after it).
        s.roll_forward = false;
    })
    .await;

    let id = crash_after_image_save(&env, "commit1").await;
    other_coordinator(&env, false)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_big_item(&env, "commit1", 2).await;
    assert_no_images(&env, "resume + one-request commit").await;

    let id = crash_after_image_save(&env, "commitph").await;
    other_coordinator(&env, true)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_big_item(&env, "commitph", 2).await;
    assert_no_images(&env, "resume + phased commit").await;

    let id = crash_after_image_save(&env, "rollback").await;
    other_coordinator(&env, false)
        .rollback_transaction(&id)
        .await
        .unwrap();
    assert_big_item(&env, "rollback", 1).await;
    assert_no_images(&env, "resume + rollback").await;

    let id = crash_after_image_save(&env, "sweep").await;
    other_coordinator(&env, false)
        .sweep(
            &dynamodb_transactions::sweeper::SweepOptions::new()
                .rollback_after(std::time::Duration::ZERO)
                .sweep_images(false),
        )
        .await
        .unwrap();
    assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));
    assert_big_item(&env, "sweep", 1).await;
    assert_no_images(&env, "sweep").await;
}

/// Finding 10(b): the answer to the image save is lost; the transaction is finished by a resumed
/// commit, whose save must not leave a second image behind.
#[tokio::test]
async fn a_lost_answer_to_the_image_save_leaves_no_second_image() {
    let env = TestEnv::with_settings("imglost", |s| {
        s.one_shot_max_items = 0;
        // Writes applied before the commit (rolled forward, they would be applied after it).
        s.roll_forward = false;
    })
    .await;
    let tx = begin_big_item_update(&env, "a").await;
    let id = tx.id().clone();
    // Record (1), lock (2), image PutItem (3): it lands, its answer is lost.
    env.faults
        .fail_once_at(3, dynamodb_transactions::fault::FaultMode::AfterSend);
    assert!(tx.commit().await.is_err());
    assert!(env.faults.struck());
    env.manager
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_big_item(&env, "a", 2).await;
    assert_no_images(&env, "after the retried save").await;
}

/// Finding 10(b): a crash on the request that deletes the image (phased commit; rollback of an
/// item applied at once for `ReturnValues`), then the transaction is finished from elsewhere.
#[tokio::test]
async fn a_crash_on_the_image_delete_leaves_no_image() {
    let env = TestEnv::with_settings("imgdel", |s| s.one_shot_max_items = 0).await;
    let tx = begin_big_item_update(&env, "c").await;
    let id = tx.id().clone();
    // Record (1), lock (2), image (3), apply (4), flip (5), unlock (6), image delete (7).
    env.faults
        .crash_at(7, dynamodb_transactions::fault::FaultMode::BeforeSend);
    let _ = tx.commit().await;
    env.faults.disarm();
    assert_eq!(
        env.manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::Committed)
    );
    let _ = other_coordinator(&env, true)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await;
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    assert_big_item(&env, "c", 2).await;
    assert_no_images(&env, "commit").await;

    env.raw_put(&env.table, big_item("r")).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("r"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    assert!(
        env.raw_get(&env.table, &key("r")).await.unwrap()["_TxI"]
            .as_s()
            .is_ok(),
        "applied with an images-table image"
    );
    // Decide (1), read the item (2), load the image (3), restore (4), image delete (5).
    env.faults
        .crash_at(5, dynamodb_transactions::fault::FaultMode::BeforeSend);
    let _ = tx.rollback().await;
    env.faults.disarm();
    other_coordinator(&env, false)
        .rollback_transaction(&id)
        .await
        .unwrap();
    assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));
    assert_big_item(&env, "r", 1).await;
    assert_no_images(&env, "rollback").await;
}
