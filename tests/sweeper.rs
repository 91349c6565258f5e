//! The sweeper: transactions abandoned in every state end as they should, orphaned images and locks
//! are cleaned, fresh work is left alone, a dry run writes nothing, and the background sweeper stops.
mod common;

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use common::*;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::sweeper::{ListOptions, SweepOptions};
use dynamodb_transactions::{TransactionManager, TxId, TxState};

const HOUR_MS: u64 = 3_600_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Makes a record look idle: sets its last-update time `ago_ms` in the past.
async fn age_record(env: &TestEnv, id: &TxId, ago_ms: u64) {
    env.client
        .update_item()
        .table_name(env.manager.transactions_table())
        .key("_TxId", s(id.as_str()))
        .key("_TxN", n(0))
        .update_expression("SET #d = :d")
        .condition_expression("attribute_exists(#d)")
        .expression_attribute_names("#d", "_TxD")
        .expression_attribute_values(":d", n(now_ms() - ago_ms))
        .send()
        .await
        .expect("age the record");
}

/// Fetches the table's key schema so it does not count among a crash test's requests.
async fn warm(m: &TransactionManager, table: &str) {
    m.get_item()
        .table_name(table)
        .key("Id", s("warm-up"))
        .send()
        .await
        .unwrap();
}

/// Writes item `id` with `bal` 100 and begins a transaction that adds 10 to it (buffered).
async fn begin_plus_ten(env: &TestEnv, id: &str) -> dynamodb_transactions::Transaction {
    env.raw_put(&env.table, item(&[("Id", s(id)), ("bal", n(100))]))
        .await;
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .send()
        .await
        .unwrap();
    tx
}

/// A transaction that applied `+10` to item `id` (ALL_NEW applies at once) and was abandoned: pending,
/// its item locked and applied with the before-image embedded.
async fn abandoned_pending(env: &TestEnv, id: &str) -> TxId {
    env.raw_put(&env.table, item(&[("Id", s(id)), ("bal", n(100))]))
        .await;
    let tx = env.manager.begin();
    let tx_id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    tx.abandon();
    let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
    assert_eq!(raw["_TxA"], s("1"), "the write is applied");
    tx_id
}

async fn state(env: &TestEnv, id: &TxId) -> Option<(TxState, bool)> {
    env.tx_state(id).await
}

async fn bal(env: &TestEnv, id: &str) -> Option<Item> {
    env.raw_get(&env.table, &key(id)).await
}

fn plain(id: &str, bal: i64) -> Option<Item> {
    Some(item(&[("Id", s(id)), ("bal", n(bal))]))
}

use dynamodb_transactions::Item;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_transactions_in_every_state_end_as_they_should() {
    let env = TestEnv::with_settings("sweep-states", |s| s.one_shot_max_items = 0).await;
    warm(&env.manager, &env.table).await;

    // Pending and idle: rolled back, the item restored from its image.
    let idle = abandoned_pending(&env, "idle").await;
    age_record(&env, &idle, HOUR_MS).await;

    // Pending and fresh: left alone, still locked and applied.
    let fresh = abandoned_pending(&env, "fresh").await;

    // Committed, not finalized: the phased commit died after the flip, before unlocking.
    // Requests: record PutItem, lock UpdateItem, apply TransactWriteItems, flip UpdateItem, unlock.
    let tx = begin_plus_ten(&env, "committed").await;
    let committed = tx.id().clone();
    env.faults.crash_at(5, FaultMode::BeforeSend);
    let _ = tx.commit().await;
    assert!(env.faults.struck());
    env.faults.disarm();
    assert_eq!(
        state(&env, &committed).await,
        Some((TxState::Committed, false))
    );
    assert!(has_tx_attrs(&bal(&env, "committed").await.unwrap()));
    age_record(&env, &committed, HOUR_MS).await;

    // Rolled back, not finalized: the rollback died after the decision.
    let tx_rb = {
        env.raw_put(&env.table, item(&[("Id", s("rolled")), ("bal", n(100))]))
            .await;
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("rolled"))
            .update_expression("SET bal = bal + :x")
            .expression_attribute_values(":x", n(10))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
        tx
    };
    let rolled = tx_rb.id().clone();
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx_rb.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(
        state(&env, &rolled).await,
        Some((TxState::RolledBack, false))
    );
    assert_eq!(bal(&env, "rolled").await.unwrap()["bal"], n(110));
    age_record(&env, &rolled, HOUR_MS).await;

    // Finalized and old: deleted. Finalized and recent: kept.
    let mut finished = Vec::new();
    for name in ["old", "recent"] {
        let tx = env.manager.begin();
        finished.push(tx.id().clone());
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(name))
            .item("bal", n(1))
            .send()
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let (old, recent) = (finished[0].clone(), finished[1].clone());
    age_record(&env, &old, 2 * 24 * HOUR_MS).await;

    let report = env
        .manager
        .sweep(
            &SweepOptions::new()
                .rollback_after(Duration::from_secs(600))
                .delete_after(Some(Duration::from_secs(86_400))),
        )
        .await
        .unwrap();

    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.records_scanned, 6, "{report:?}");
    assert_eq!(report.rolled_back, vec![idle.clone()]);
    let completed: HashSet<_> = report.completed.iter().cloned().collect();
    assert_eq!(
        completed,
        HashSet::from([committed.clone(), rolled.clone()])
    );
    assert_eq!(report.deleted, 1);
    assert_eq!(report.pending_left, 1);
    assert_eq!(report.finalized_kept, 1);

    assert_eq!(state(&env, &idle).await, Some((TxState::RolledBack, true)));
    assert_eq!(bal(&env, "idle").await, plain("idle", 100));

    assert_eq!(state(&env, &fresh).await, Some((TxState::Pending, false)));
    let f = bal(&env, "fresh").await.unwrap();
    assert_eq!(f["_TxId"], s(fresh.as_str()));
    assert_eq!(f["bal"], n(110));

    assert_eq!(
        state(&env, &committed).await,
        Some((TxState::Committed, true))
    );
    assert_eq!(bal(&env, "committed").await, plain("committed", 110));

    assert_eq!(
        state(&env, &rolled).await,
        Some((TxState::RolledBack, true))
    );
    assert_eq!(bal(&env, "rolled").await, plain("rolled", 100));

    assert_eq!(state(&env, &old).await, None);
    assert_eq!(state(&env, &recent).await, Some((TxState::Committed, true)));
    assert_eq!(bal(&env, "old").await, plain("old", 1));

    // A second sweep finds nothing more to do.
    let again = env
        .manager
        .sweep(
            &SweepOptions::new()
                .rollback_after(Duration::from_secs(600))
                .delete_after(Some(Duration::from_secs(86_400))),
        )
        .await
        .unwrap();
    assert_eq!(again.actions(), 0, "{again:?}");
    assert_eq!(again.pending_left, 1);

    // With rollback_after = 0 every pending transaction counts as idle.
    let now = env
        .manager
        .sweep(&SweepOptions::new().rollback_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(now.rolled_back, vec![fresh.clone()]);
    assert_eq!(bal(&env, "fresh").await, plain("fresh", 100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_decided_transactions_are_left_to_their_coordinator() {
    let env = TestEnv::new("sweep-recent").await;
    let tx = env.manager.begin();
    env.raw_put(&env.table, item(&[("Id", s("r")), ("bal", n(100))]))
        .await;
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("r"))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let id = tx.id().clone();
    warm(&env.manager, &env.table).await;
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, false)));

    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert_eq!(report.decided_left, 1, "{report:?}");
    assert!(report.completed.is_empty());
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, false)));

    let report = env
        .manager
        .sweep(&SweepOptions::new().complete_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(report.completed, vec![id.clone()]);
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, true)));
    assert_eq!(bal(&env, "r").await, plain("r", 100));
}

/// The preset: a fresh pending transaction is rolled back and a fresh decided one completed, which
/// the defaults leave to their coordinators; finalized records stay unless deletion is asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_everything_now_settles_fresh_transactions() {
    let env = TestEnv::new("sweep-now").await;
    let pending = abandoned_pending(&env, "p").await;
    // Rolled back, not finalized: the rollback died after its decision.
    env.raw_put(&env.table, item(&[("Id", s("d")), ("bal", n(100))]))
        .await;
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let decided = tx.id().clone();
    warm(&env.manager, &env.table).await;
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(
        state(&env, &decided).await,
        Some((TxState::RolledBack, false))
    );

    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert_eq!(
        (report.pending_left, report.decided_left),
        (1, 1),
        "{report:?}"
    );

    let report = env
        .manager
        .sweep(&SweepOptions::finish_everything_now())
        .await
        .unwrap();
    assert_eq!(report.rolled_back, vec![pending.clone()], "{report:?}");
    assert_eq!(report.completed, vec![decided.clone()]);
    assert_eq!((report.pending_left, report.decided_left), (0, 0));
    assert_eq!(report.deleted, 0);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        state(&env, &pending).await,
        Some((TxState::RolledBack, true))
    );
    assert_eq!(
        state(&env, &decided).await,
        Some((TxState::RolledBack, true))
    );
    assert_eq!(bal(&env, "p").await, plain("p", 100));
    assert_eq!(bal(&env, "d").await, plain("d", 100));

    let report = env
        .manager
        .sweep(&SweepOptions::finish_everything_now().delete_after(Some(Duration::ZERO)))
        .await
        .unwrap();
    assert_eq!(report.deleted, 2, "{report:?}");
    assert_eq!(state(&env, &pending).await, None);
    assert_eq!(state(&env, &decided).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_images_and_locks_of_deleted_records_are_cleaned() {
    let env = TestEnv::new("sweep-orphans").await;
    let images = env.manager.images_table().to_string();

    // A finalized transaction that read-locked "late" (committed), and one still pending.
    env.raw_put(&env.table, item(&[("Id", s("late")), ("v", s("x"))]))
        .await;
    let tx = env.manager.begin();
    let finalized = tx.id().clone();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("late"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        state(&env, &finalized).await,
        Some((TxState::Committed, true))
    );
    // A slow coordinator's lock that landed after the transaction finished.
    env.raw_put(
        &env.table,
        item(&[
            ("Id", s("late")),
            ("v", s("x")),
            ("_TxId", s(finalized.as_str())),
            ("_TxD", n(now_ms())),
        ]),
    )
    .await;
    let pending = abandoned_pending(&env, "pending").await;

    // Images: of a vanished transaction, of a finalized one, of a pending one.
    let gone = TxId::new_random();
    for owner in [&gone, &finalized, &pending] {
        env.raw_put(
            &images,
            item(&[
                (
                    "_TxI",
                    s(&format!("{owner}#{}", uuid::Uuid::new_v4().simple())),
                ),
                ("bal", n(1)),
            ]),
        )
        .await;
    }

    // Request rows of a record whose header is gone (deleted by TTL), and one of a live record.
    for (owner, row) in [(&gone, 1), (&gone, 2), (&pending, 7)] {
        env.raw_put(
            env.manager.transactions_table(),
            item(&[
                ("_TxId", s(owner.as_str())),
                ("_TxN", n(row)),
                ("_TxR", AttributeValue::L(vec![])),
            ]),
        )
        .await;
    }

    // Locks of the vanished transaction: unapplied on an existing item, a transient placeholder, and
    // an applied write (which only an operator can judge).
    env.raw_put(
        &env.table,
        item(&[
            ("Id", s("held")),
            ("v", s("keep me")),
            ("_TxId", s(gone.as_str())),
            ("_TxD", n(now_ms())),
        ]),
    )
    .await;
    env.raw_put(
        &env.table,
        item(&[
            ("Id", s("placeholder")),
            ("_TxId", s(gone.as_str())),
            ("_TxD", n(now_ms())),
            ("_TxT", AttributeValue::Bool(true)),
        ]),
    )
    .await;
    let applied = item(&[
        ("Id", s("applied")),
        ("v", s("new")),
        ("_TxId", s(gone.as_str())),
        ("_TxD", n(now_ms())),
        ("_TxA", s("1")),
        (
            "_TxG",
            AttributeValue::M(item(&[("Id", s("applied")), ("v", s("old"))])),
        ),
    ]);
    env.raw_put(&env.table, applied.clone()).await;
    // The same, with its before-image in the images table: the image must survive for the operator.
    let kept_image = format!("{gone}#needed");
    env.raw_put(
        &images,
        item(&[
            ("_TxI", s(&kept_image)),
            ("Id", s("applied2")),
            ("v", s("old")),
        ]),
    )
    .await;
    let applied2 = item(&[
        ("Id", s("applied2")),
        ("v", s("new")),
        ("_TxId", s(gone.as_str())),
        ("_TxD", n(now_ms())),
        ("_TxA", s("1")),
        ("_TxI", s(&kept_image)),
    ]);
    env.raw_put(&env.table, applied2.clone()).await;
    env.raw_put(&env.table, item(&[("Id", s("free")), ("v", s("f"))]))
        .await;

    let report = env
        .manager
        .sweep(
            &SweepOptions::new()
                .tables_to_scan([env.table.clone()])
                .segments(3),
        )
        .await
        .unwrap();

    assert_eq!(report.records_scanned, 2, "{report:?}");
    assert_eq!(report.orphan_chunks_deleted, 2, "{report:?}");
    let rows: Vec<(String, String)> = env
        .scan_all(env.manager.transactions_table())
        .await
        .iter()
        .map(|i| {
            (
                i["_TxId"].as_s().unwrap().clone(),
                i["_TxN"].as_n().unwrap().clone(),
            )
        })
        .filter(|(_, r)| r != "0")
        .collect();
    assert_eq!(rows, vec![(pending.to_string(), "7".to_string())]);
    assert_eq!(report.images_scanned, 4, "{report:?}");
    assert_eq!(report.orphan_images_deleted, 2, "{report:?}");
    let mut left: Vec<String> = env
        .scan_all(&images)
        .await
        .iter()
        .map(|i| i["_TxI"].as_s().unwrap().clone())
        .collect();
    left.sort_by_key(|i| i != &kept_image);
    assert_eq!(left.len(), 2, "{left:?}");
    assert_eq!(left[0], kept_image);
    assert!(left[1].starts_with(pending.as_str()), "{left:?}");

    assert_eq!(report.orphan_locks_released, 2, "{report:?}");
    assert_eq!(report.stale_locks_completed, 1, "{report:?}");
    let mut orphans = report.applied_orphans.clone();
    orphans.sort_by_key(|o| o.image_id.is_some());
    assert_eq!(orphans.len(), 2, "{report:?}");
    assert!(orphans.iter().all(|o| o.owner == gone));
    assert_eq!(orphans[0].key, key("applied"));
    assert_eq!(orphans[0].image_id, None);
    assert_eq!(orphans[1].key, key("applied2"));
    assert_eq!(orphans[1].image_id.as_deref(), Some(kept_image.as_str()));
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.pending_left, 1);

    assert_eq!(
        bal(&env, "held").await,
        Some(item(&[("Id", s("held")), ("v", s("keep me"))]))
    );
    assert_eq!(bal(&env, "placeholder").await, None);
    assert_eq!(bal(&env, "applied").await, Some(applied));
    assert_eq!(bal(&env, "applied2").await, Some(applied2));
    assert_eq!(
        bal(&env, "late").await,
        Some(item(&[("Id", s("late")), ("v", s("x"))]))
    );
    // The pending transaction keeps its lock.
    assert_eq!(
        bal(&env, "pending").await.unwrap()["_TxId"],
        s(pending.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_nothing() {
    let env = TestEnv::new("sweep-dry").await;
    let idle = abandoned_pending(&env, "idle").await;
    let gone = TxId::new_random();
    env.raw_put(
        env.manager.images_table(),
        item(&[("_TxI", s(&format!("{gone}#x")))]),
    )
    .await;
    let before = env.scan_all(&env.table).await;

    let report = env
        .manager
        .sweep(
            &SweepOptions::new()
                .rollback_after(Duration::ZERO)
                .tables_to_scan([env.table.clone()])
                .dry_run(true),
        )
        .await
        .unwrap();
    assert!(report.dry_run);
    assert_eq!(report.rolled_back, vec![idle.clone()]);
    assert_eq!(report.orphan_images_deleted, 1);
    assert_eq!(state(&env, &idle).await, Some((TxState::Pending, false)));
    assert_eq!(env.scan_all(&env.table).await, before);
    assert_eq!(env.scan_all(env.manager.images_table()).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_sweeper_rolls_back_and_stops() {
    let env = TestEnv::new("sweep-bg").await;
    let idle = abandoned_pending(&env, "idle").await;
    let sweeper = env.manager.spawn_sweeper(
        Duration::from_millis(50),
        SweepOptions::new().rollback_after(Duration::ZERO),
    );
    // Wait (bounded) for two passes.
    for _ in 0..400 {
        if sweeper.passes() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(sweeper.passes() >= 2, "the sweeper kept running");
    assert!(sweeper.last_report().is_some());
    let totals = sweeper.stop().await;
    assert_eq!(totals.rolled_back, vec![idle.clone()]);
    assert!(totals.records_scanned >= 2);
    assert_eq!(state(&env, &idle).await, Some((TxState::RolledBack, true)));
    assert_eq!(bal(&env, "idle").await, plain("idle", 100));

    // sweep_every stops when its shutdown future resolves.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut tx = Some(tx);
    let mut passes = 0;
    let totals = env
        .manager
        .sweep_every(
            Duration::from_millis(10),
            &SweepOptions::new(),
            async {
                let _ = rx.await;
            },
            |r| {
                assert!(r.is_ok());
                passes += 1;
                if passes == 3 {
                    let _ = tx.take().unwrap().send(());
                }
            },
        )
        .await;
    assert_eq!(passes, 3);
    assert_eq!(totals.records_scanned, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_describe_transactions() {
    let env = TestEnv::new("sweep-list").await;
    let pending = abandoned_pending(&env, "p").await;
    let tx = env.manager.begin();
    let done = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("q"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    age_record(&env, &done, HOUR_MS).await;

    let all = env
        .manager
        .list_transactions(&ListOptions::new())
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    let p = env
        .manager
        .list_transactions(&ListOptions::new().state(Some(TxState::Pending)))
        .await
        .unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].id, pending);
    assert!(!p[0].finalized);
    let old = env
        .manager
        .list_transactions(&ListOptions::new().older_than(Some(Duration::from_secs(600))))
        .await
        .unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].id, done);
    let unfinished = env
        .manager
        .list_transactions(&ListOptions::new().unfinalized(true))
        .await
        .unwrap();
    assert_eq!(unfinished.len(), 1);

    let d = env
        .manager
        .describe_transaction(&pending)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.summary.state, TxState::Pending);
    assert_eq!(d.requests.len(), 1);
    assert_eq!(d.requests[0].table, env.table);
    assert_eq!(d.requests[0].key, key("p"));
    let locked: Vec<_> = d.locked_items().collect();
    assert_eq!(locked.len(), 1);
    assert!(locked[0].applied);
    let d = env
        .manager
        .describe_transaction(&done)
        .await
        .unwrap()
        .unwrap();
    assert!(d.summary.finalized);
    assert_eq!(d.locked_items().count(), 0);
    assert!(
        env.manager
            .describe_transaction(&TxId::new_random())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn the_ticket_counter_row_is_not_a_transaction() {
    let env = TestEnv::with_settings("sw-ticket", |s| {
        s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(10),
            ticket_at_begin: true,
        }
    })
    .await;
    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("x"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // The counter row exists next to the record...
    let rows = env.scan_all(env.manager.transactions_table()).await;
    assert!(rows.iter().any(|r| r["_TxId"] == s("~ticket-counter")));
    // ...and the sweeper neither counts it as a record nor reports it as broken, and leaves it.
    let report = env
        .manager
        .sweep(&SweepOptions::new().delete_after(Some(Duration::ZERO)))
        .await
        .unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.records_scanned, 1);
    assert_eq!(report.deleted, 1);
    let rows = env.scan_all(env.manager.transactions_table()).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["_TxId"], s("~ticket-counter"));
    let listed = env
        .manager
        .list_transactions(&Default::default())
        .await
        .unwrap();
    assert!(listed.is_empty(), "{listed:?}");
}

// ---------------------------------------------------------------------------------------------
// Finishing leaves nothing behind, and finishing twice is harmless.
// ---------------------------------------------------------------------------------------------

/// Runs `f` on a fresh runtime with a fresh coordinator over `env`'s tables (for hooks).
fn on_other_coordinator<T>(
    tx_table: &str,
    image_table: &str,
    f: impl AsyncFnOnce(TransactionManager) -> T,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let m = TransactionManager::builder(client())
        .transactions_table(tx_table)
        .images_table(image_table)
        .configure(|s| {
            s.rollback_on_drop = false;
            s.write_only_fast_path = false;
        })
        .build();
    rt.block_on(f(m))
}

/// A coordinator over `env`'s tables whose client carries `hook`.
fn coordinator_with(env: &TestEnv, hook: &RunBefore) -> TransactionManager {
    TransactionManager::builder(client_with(vec![shared(hook.clone())]))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.write_only_fast_path = false;
        })
        .build()
}

/// Rows of a transaction in the transactions table (header and chunks).
async fn record_rows(env: &TestEnv, id: &TxId) -> Vec<String> {
    env.scan_all(env.manager.transactions_table())
        .await
        .iter()
        .filter(|i| i["_TxId"].as_s().unwrap() == id.as_str())
        .map(|i| i["_TxN"].as_n().unwrap().clone())
        .collect()
}

/// Finding 5: two completers of a rolled-back transaction whose before-image is in the images
/// table. The slower one read the item (locked, applied, image in the table) before the faster
/// one restored it and deleted the image: it must see that someone else settled the item and
/// succeed, not fail with "before-image missing".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_completers_with_an_images_table_image_both_succeed() {
    let env = TestEnv::new("sweep-race-img").await;
    warm(&env.manager, &env.table).await;
    let big = "x".repeat(70 * 1024);
    let original = item(&[("Id", s("big")), ("bal", n(100)), ("blob", s(&big))]);
    env.raw_put(&env.table, original.clone()).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("big"))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let raw = bal(&env, "big").await.unwrap();
    assert!(raw.contains_key("_TxI"), "the image is in the images table");
    assert_eq!(env.scan_all(env.manager.images_table()).await.len(), 1);
    // Rolled back, not completed: the rollback died right after its decision.
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, false)));

    // The slower completer is held just before it loads the image; meanwhile the faster one
    // completes everything (restores the item, deletes the image, finalizes).
    let (txt, imgt) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
    );
    let first = std::sync::Arc::new(std::sync::Mutex::new(None));
    let first_out = first.clone();
    let hook_id = id.clone();
    let hook = RunBefore::new("GetItem", env.manager.images_table(), move || {
        let r = on_other_coordinator(&txt, &imgt, async move |m| {
            m.complete_transaction(&hook_id).await
        });
        *first_out.lock().unwrap() = Some(r);
    });
    let slower = coordinator_with(&env, &hook);
    let r = slower.complete_transaction(&id).await;
    assert!(hook.ran(), "the race was staged");
    let first = first.lock().unwrap().take().unwrap();
    assert!(
        matches!(first, Ok(TxState::RolledBack)),
        "faster: {first:?}"
    );
    assert!(matches!(r, Ok(TxState::RolledBack)), "slower: {r:?}");
    assert_eq!(bal(&env, "big").await, Some(original));
    assert!(env.scan_all(env.manager.images_table()).await.is_empty());
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, true)));
}

/// Finding 8: the sweeper judged version v idle; just before its decision a live coordinator
/// appends (v+1). The sweeper must not decide a version it never judged idle: the transaction
/// stays pending and its coordinator commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeper_decides_only_the_version_it_judged_idle() {
    let env = TestEnv::new("sweep-judged").await;
    warm(&env.manager, &env.table).await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("bal", n(100))]))
        .await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    age_record(&env, &id, HOUR_MS).await;

    // When the sweeper's decision (an UpdateItem setting the state) is about to be sent, another
    // coordinator of the transaction appends a request (version 2) and locks its item.
    let (txt, imgt, table) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
        env.table.clone(),
    );
    let appended = std::sync::Arc::new(std::sync::Mutex::new(None));
    let appended_out = appended.clone();
    let hook_id = id.clone();
    let hook = RunBefore::new("UpdateItem", ":_TxTo", move || {
        let r = on_other_coordinator(&txt, &imgt, async move |m| {
            let live = m.resume(&hook_id).await?;
            live.put_item()
                .table_name(&table)
                .item("Id", s("b"))
                .item("v", s("new"))
                .return_values(ReturnValue::AllOld)
                .send()
                .await?;
            live.abandon();
            Ok::<_, dynamodb_transactions::Error>(())
        });
        *appended_out.lock().unwrap() = Some(r);
    });
    let sweeper = coordinator_with(&env, &hook);
    let report = sweeper
        .sweep(&SweepOptions::new().rollback_after(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(hook.ran(), "the race was staged");
    appended.lock().unwrap().take().unwrap().unwrap();
    assert!(report.rolled_back.is_empty(), "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(state(&env, &id).await, Some((TxState::Pending, false)));

    tx.commit().await.unwrap();
    assert_eq!(state(&env, &id).await, Some((TxState::Committed, true)));
    assert_eq!(bal(&env, "a").await, plain("a", 110));
    assert_eq!(
        bal(&env, "b").await,
        Some(item(&[("Id", s("b")), ("v", s("new"))]))
    );
}

/// Finding 10(a): a phased commit whose unlock answer is lost (the unlock landed) still finishes:
/// `commit` returning Ok means the record is finalized and no item keeps a lock attribute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phased_commit_with_a_lost_unlock_answer_still_finishes() {
    let env = TestEnv::with_settings("sweep-lost-unlock", |s| s.one_shot_max_items = 0).await;
    warm(&env.manager, &env.table).await;
    let tx = begin_plus_ten(&env, "a").await;
    let id = tx.id().clone();
    // Requests: record PutItem, lock UpdateItem, apply TransactWriteItems, flip UpdateItem,
    // unlock UpdateItem (its answer is lost), finalize.
    env.faults.fail_once_at(5, FaultMode::AfterSend);
    tx.commit().await.unwrap();
    assert!(env.faults.struck());
    assert_eq!(state(&env, &id).await, Some((TxState::Committed, true)));
    let a = bal(&env, "a").await.unwrap();
    assert!(!has_tx_attrs(&a), "{a:?}");
    assert_eq!(Some(a), plain("a", 110));
}

/// Finding 10(d): a crash between the deletes of a record's rows must not leave a record that
/// `resume` cannot load; calling delete again, or a sweep, removes whatever is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_record_delete_leaves_nothing_a_sweep_misses() {
    let env = TestEnv::with_settings("sweep-del-crash", |s| s.one_shot_max_items = 0).await;
    warm(&env.manager, &env.table).await;
    // Two 200 KB puts: the second request does not fit in the header and goes to a chunk row.
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for k in ["c1", "c2"] {
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(k))
            .item("blob", s(&"y".repeat(200 * 1024)))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    assert_eq!(state(&env, &id).await, Some((TxState::Committed, true)));
    assert_eq!(
        record_rows(&env, &id).await.len(),
        2,
        "header and one chunk"
    );

    // Requests of a delete: read the header, then the two deletes. Crash between them.
    env.faults.crash_at(3, FaultMode::BeforeSend);
    assert!(env.manager.delete_transaction(&id).await.is_err());
    env.faults.disarm();
    match env.manager.resume(&id).await {
        Ok(_) | Err(dynamodb_transactions::Error::TransactionNotFound { .. }) => {}
        Err(e) => panic!("resume after an interrupted delete: {e}"),
    }
    env.manager.describe_transaction(&id).await.unwrap();
    // What the crash left (a request row without its header), the next sweep removes.
    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.orphan_chunks_deleted, 1, "{report:?}");
    assert!(record_rows(&env, &id).await.is_empty());
    assert!(env.manager.delete_transaction(&id).await.unwrap());
    let report = env
        .manager
        .sweep(&SweepOptions::new().delete_after(Some(Duration::ZERO)))
        .await
        .unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(record_rows(&env, &id).await.is_empty());
}

/// Finding 10(e): finalizing again (completing a finished transaction) leaves the finalize time
/// `_TxD` and the TTL `_TxE` alone, so a repeated completion never pushes deletion back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizing_again_does_not_push_deletion_back() {
    let env = TestEnv::with_settings("sweep-refinal", |s| {
        s.one_shot_max_items = 0;
        s.record_ttl = Some(Duration::from_secs(3600));
    })
    .await;
    warm(&env.manager, &env.table).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("f"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let header = || async {
        let h = env
            .raw_get(
                env.manager.transactions_table(),
                &item(&[("_TxId", s(id.as_str())), ("_TxN", n(0))]),
            )
            .await
            .unwrap();
        (h["_TxF"].clone(), h["_TxD"].clone(), h["_TxE"].clone())
    };
    let before = header().await;
    // Let the clock move past a second, so that a rewrite would show in `_TxE` (seconds) too.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        env.manager.complete_transaction(&id).await.unwrap(),
        TxState::Committed
    );
    let again = env.manager.resume(&id).await.unwrap();
    again.commit().await.unwrap();
    assert_eq!(header().await, before);
}
