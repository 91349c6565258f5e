//! One round trip per locked read (`Settings::locked_reads`). With `LockThenRecord`, once the record
//! exists a read sends only its lock, and its request is recorded with the record's next write (or
//! never, when the commit has only held reads to record). Request counts, contenders meeting a
//! read's lock its record does not name, and a crash at every request of the path.

use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_transactions::fault::{FaultMode, LateDelivery};
use dynamodb_transactions::sweeper::SweepOptions;
use dynamodb_transactions::{Transaction, TransactionManager, TxId, TxState};

use crate::common::*;
use crate::{assert_clean, header_row, read, seed, set, warm};

fn lock_first(s: &mut dynamodb_transactions::Settings) {
    s.locked_reads = dynamodb_transactions::LockedReads::LockThenRecord;
}

/// Both commit paths, reads locked before they are recorded.
async fn lock_first_envs(prefix: &str) -> Vec<TestEnv> {
    vec![
        TestEnv::with_settings(&format!("{prefix}-os"), lock_first).await,
        TestEnv::with_settings(&format!("{prefix}-ph"), |s| {
            lock_first(s);
            s.one_shot_max_items = 0;
        })
        .await,
    ]
}

/// Ten items seeded, then one transaction that reads each under lock and commits, its requests
/// alone counted. Returns the transaction's id and the items' keys.
async fn ten_locked_reads_and_a_commit(env: &TestEnv) -> (TxId, Vec<String>) {
    let ids: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    seed(env, &refs).await;
    warm(env).await;
    env.counter.reset();
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for k in &refs {
        assert_eq!(read(&tx, &env.table, k).await.unwrap(), Some(1));
    }
    tx.commit().await.unwrap();
    (id, ids)
}

#[tokio::test]
async fn n_locked_reads_cost_n_plus_two_requests() {
    let env = TestEnv::with_settings("rl-count", lock_first).await;
    ten_locked_reads_and_a_commit(&env).await;
    let c = env.counter.snapshot();
    // The record's creation, one lock per read, the commit.
    assert_eq!(env.counter.total(), 12, "{c:?}");
    assert_clean(&env).await;
}

/// With default settings, ten locked reads and the commit wait for 11 round trips (each read's
/// record write goes with its lock), and the record names every read.
#[tokio::test]
async fn by_default_n_locked_reads_and_a_commit_take_n_plus_one_round_trips() {
    let env = TestEnv::new("rl-default-n").await;
    let (id, ids) = ten_locked_reads_and_a_commit(&env).await;
    let c = env.counter.snapshot();
    assert_eq!(env.counter.round_trips(), 11, "{c:?}");
    // Each read's record write and lock, the commit.
    assert_eq!(env.counter.total(), 21, "{c:?}");
    assert_eq!(named_keys(&env, &id).await, ids);
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_transfer_reads_with_one_lock_request_each() {
    let env = TestEnv::with_settings("rl-transfer", lock_first).await;
    seed(&env, &["a", "b"]).await;
    warm(&env).await;
    env.counter.reset();
    let tx = env.manager.begin();
    let a = read(&tx, &env.table, "a").await.unwrap().unwrap();
    let b = read(&tx, &env.table, "b").await.unwrap().unwrap();
    set(&tx, &env.table, "a", a - 1).await.unwrap();
    set(&tx, &env.table, "b", b + 1).await.unwrap();
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    // Create + lock, lock, the commit, which records the two writes and the second read itself
    // (was 6: one append per read, then the writes' append).
    assert_eq!(env.counter.total(), 4, "{c:?}");
    assert_eq!(c.get("TransactWriteItems"), Some(&1), "{c:?}");
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(0));
    assert_eq!(env.raw_get(&env.table, &key("b")).await.unwrap()["v"], n(2));
    assert_clean(&env).await;
}

/// The keys of the items a transaction's record names.
async fn named_keys(env: &TestEnv, id: &TxId) -> Vec<String> {
    let mut keys: Vec<String> = env
        .record_rows(id)
        .await
        .iter()
        .filter_map(|r| r.get("_TxR").and_then(|v| v.as_l().ok()))
        .flatten()
        .filter_map(|req| {
            let AttributeValue::M(m) = req else {
                return None;
            };
            m.values().find_map(|v| match v {
                AttributeValue::M(k) => k.get("Id").and_then(|id| id.as_s().ok()).cloned(),
                _ => None,
            })
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// With the default `LockedReads::RecordWithLock` (and a record from the first read: the test
/// environment sets `record_on_demand` off) a locked read waits for one round trip: its record
/// write (the record's creation for the first, an append after) goes out together with its
/// lock. A transfer then waits for 3 round trips, and its record names both reads before the
/// commit, so whoever completes the transaction, if this handle dies, finds every lock it took.
/// (With the default `record_on_demand`, see
/// `record_on_demand::by_default_a_transfer_is_four_requests_on_three_round_trips`.)
#[tokio::test]
async fn by_default_a_read_is_recorded_and_locked_in_one_round_trip() {
    let env = TestEnv::new("rl-default").await;
    seed(&env, &["a", "b"]).await;
    warm(&env).await;
    env.counter.reset();
    let tx = env.manager.begin();
    let a = read(&tx, &env.table, "a").await.unwrap().unwrap();
    let b = read(&tx, &env.table, "b").await.unwrap().unwrap();
    let c = env.counter.snapshot();
    // The record's creation with a's lock, then its append with b's lock.
    assert_eq!(env.counter.round_trips(), 2, "{c:?}");
    assert_eq!(env.counter.total(), 4, "{c:?}");
    assert_eq!(named_keys(&env, tx.id()).await, ["a", "b"]);
    for k in ["a", "b"] {
        let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
        assert_eq!(raw["_TxId"], s(tx.id().as_str()), "{raw:?}");
    }
    env.counter.reset();
    set(&tx, &env.table, "a", a - 1).await.unwrap();
    set(&tx, &env.table, "b", b + 1).await.unwrap();
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    // One more: the commit, which records the two writes on held items itself.
    assert_eq!(env.counter.round_trips(), 1, "{c:?}");
    assert_eq!(env.counter.total(), 1, "{c:?}");
    assert_eq!(c.get("TransactWriteItems"), Some(&1), "{c:?}");
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(0));
    assert_eq!(env.raw_get(&env.table, &key("b")).await.unwrap()["v"], n(2));
    assert_clean(&env).await;
}

/// A transaction reads `a` (creating its record), then `b` and the absent `c` (locks its record
/// does not name), and is abandoned. A contender that writes all three wounds it, completes it
/// and releases the unnamed locks; on both commit paths.
#[tokio::test]
async fn a_contender_releases_read_locks_the_record_does_not_name() {
    for env in lock_first_envs("rl-contend").await {
        seed(&env, &["a", "b"]).await;
        let tx = env.manager.begin();
        let id = tx.id().clone();
        read(&tx, &env.table, "a").await.unwrap();
        read(&tx, &env.table, "b").await.unwrap();
        assert_eq!(read(&tx, &env.table, "c").await.unwrap(), None);
        tx.abandon();
        for k in ["b", "c"] {
            let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
            assert!(has_tx_attrs(&raw), "{k} locked: {raw:?}");
        }
        let (m2, _) = env.second_coordinator();
        let writer = contender(&m2, &env.table, 7).await;
        writer.unwrap_or_else(|e| panic!("contender: {e}"));
        for k in ["a", "b", "c"] {
            assert_eq!(env.raw_get(&env.table, &key(k)).await.unwrap()["v"], n(7));
        }
        assert_eq!(
            env.tx_state(&id).await.map(|s| s.0),
            Some(TxState::RolledBack)
        );
        assert_clean(&env).await;
    }
}

/// Writes `v` to `a`, `b` and `c` in one transaction, retrying a rolled-back attempt.
async fn contender(
    m: &dynamodb_transactions::TransactionManager,
    table: &str,
    v: i64,
) -> dynamodb_transactions::Result<()> {
    let mut last = None;
    for _ in 0..5 {
        let tx = m.begin();
        let attempt = async {
            for k in ["a", "b", "c"] {
                set(&tx, table, k, v).await?;
            }
            Ok::<_, dynamodb_transactions::Error>(())
        }
        .await;
        let out = match attempt {
            Ok(()) => tx.commit().await,
            Err(e) => {
                let _ = tx.rollback().await;
                Err(e)
            }
        };
        match out {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("an attempt"))
}

/// The workload whose every request is crashed at: three reads (the first creates the record, the
/// last inserts a placeholder), a buffered write, the commit.
async fn reads_then_write(tx: Transaction, table: &str) -> dynamodb_transactions::Result<()> {
    let steps = async {
        read(&tx, table, "a").await?;
        read(&tx, table, "b").await?;
        read(&tx, table, "c").await?;
        set(&tx, table, "d", 5).await
    };
    match steps.await {
        Ok(()) => tx.commit().await,
        Err(e) => {
            // The coordinator died: it decides nothing.
            tx.abandon();
            Err(e)
        }
    }
}

/// Crash before and after each request of the path; a contender that writes the items read then
/// finishes whatever was left. The crashed transaction's outcome is what it reported (committed:
/// `d` was written), no lock or image is left, and its record is decided.
#[tokio::test]
async fn a_crash_at_every_request_of_the_read_path_is_recovered_by_a_contender() {
    for env in lock_first_envs("rl-crash").await {
        // Requests: create, lock a, lock b, lock c (absent: two), append d, lock d, commit (one
        // request) — the phased path has more; crash beyond the end is skipped.
        for k in 0..12u64 {
            for mode in [FaultMode::BeforeSend, FaultMode::AfterSend] {
                seed(&env, &["a", "b", "d"]).await;
                env.raw_put(&env.table, item(&[("Id", s("d")), ("v", n(1))]))
                    .await;
                if env.raw_get(&env.table, &key("c")).await.is_some() {
                    env.client
                        .delete_item()
                        .table_name(&env.table)
                        .set_key(Some(key("c")))
                        .send()
                        .await
                        .unwrap();
                }
                warm(&env).await;
                env.faults.crash_at(k, mode);
                let tx = env.manager.begin();
                let id = tx.id().clone();
                let outcome = reads_then_write(tx, &env.table).await;
                let struck = env.faults.struck();
                env.faults.disarm();
                if !struck {
                    outcome.unwrap();
                    continue;
                }
                let label = format!("crash {mode:?} at request {k}: {outcome:?}");
                let d = env.raw_get(&env.table, &key("d")).await.unwrap();
                if outcome.is_ok() {
                    assert_eq!(
                        env.tx_state(&id).await.map(|s| s.0),
                        Some(TxState::Committed),
                        "{label}"
                    );
                    assert_eq!(d["v"], n(5), "{label}");
                }
                let (m2, _) = env.second_coordinator();
                contender(&m2, &env.table, 9)
                    .await
                    .unwrap_or_else(|e| panic!("{label}: contender: {e}"));
                // `d` was not touched by the contender: finish the crashed transaction wherever
                // its record says it is.
                if let Some((state, _)) = env.tx_state(&id).await {
                    if state == TxState::Pending {
                        m2.rollback_transaction(&id).await.unwrap();
                    } else {
                        m2.complete_transaction(&id).await.unwrap();
                    }
                    let (state, _) = env.tx_state(&id).await.unwrap();
                    let d = env.raw_get(&env.table, &key("d")).await.unwrap();
                    let want = if state == TxState::Committed { 5 } else { 1 };
                    assert_eq!(d["v"], n(want), "{label}: d after {state:?}");
                }
                for k in ["a", "b", "c"] {
                    let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
                    assert_eq!(raw["v"], n(9), "{label}: {k}");
                }
                assert_clean(&env).await;
            }
        }
    }
}

/// A manager over `env`'s tables whose requests go through `late`, reads locked before they are
/// recorded.
fn lock_first_through(env: &TestEnv, late: &LateDelivery) -> TransactionManager {
    let conf = client()
        .config()
        .to_builder()
        .http_client(late.http_client())
        .build();
    TransactionManager::builder(aws_sdk_dynamodb::Client::from_conf(conf))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            lock_first(s);
            s.rollback_on_drop = false;
            // The first read's lock goes with the record's creation, not alone.
            s.record_on_demand = false;
        })
        .build()
}

/// The first read's lock goes out with the record's creation (one round trip for both). Here the
/// creation is held back until the lock has landed and a contender has met it: with no record to
/// judge, the contender puts a tombstone under the transaction's id before it releases the lock,
/// and the creation, let go, fails on it: the read reports the transaction rolled back, the
/// contender's write stands, and the tombstone passes for an absent record.
#[tokio::test]
async fn a_contender_tombstones_a_lock_whose_record_is_on_its_way() {
    let env = TestEnv::with_settings("rl-tomb", lock_first).await;
    seed(&env, &["a"]).await;
    warm(&env).await;
    let late = LateDelivery::new();
    let m = lock_first_through(&env, &late);
    m.get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
    late.delay_until_opened("PutItem", 1);
    let tx = m.begin();
    let id = tx.id().clone();
    let table = env.table.clone();
    let reader = tokio::spawn(async move { read(&tx, &table, "a").await });

    // The lock lands while the creation waits.
    let mut locked = false;
    for _ in 0..200 {
        let raw = env.raw_get(&env.table, &key("a")).await.unwrap();
        if raw.get("_TxId").and_then(|v| v.as_s().ok()) == Some(&id.as_str().to_string()) {
            locked = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        locked,
        "the lock was not sent before the record's creation answered"
    );
    assert_eq!(late.struck(), 1, "the creation is held");
    assert!(header_row(&env, &id).await.is_none());

    // A contender writes `a`: it tombstones the transaction, releases its lock and commits.
    let (m2, _) = env.second_coordinator();
    let w = m2.begin();
    set(&w, &env.table, "a", 7).await.unwrap();
    w.commit().await.unwrap();
    let stone = header_row(&env, &id).await.expect("a tombstone");
    assert_eq!(stone["_TxS"], s("R"), "{stone:?}");
    assert!(
        stone.contains_key("_TxF") && stone.contains_key("_TxX"),
        "{stone:?}"
    );
    assert_eq!(stone["_TxR"], AttributeValue::L(vec![]), "{stone:?}");
    // Everywhere but in the creation, a tombstone is an absent record.
    assert_eq!(env.tx_state(&id).await, None);
    assert!(matches!(
        m2.resume(&id).await,
        Err(dynamodb_transactions::Error::TransactionNotFound { .. })
    ));

    late.open();
    let r = reader.await.unwrap();
    assert!(
        matches!(r, Err(dynamodb_transactions::Error::RolledBack { .. })),
        "{r:?}"
    );
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(7));
    assert_clean(&env).await;
    // The sweeper keeps a fresh tombstone (a creation may still be on its way), deletes one past
    // its time, and reports both among finalized records.
    let old = TxId::new_random();
    env.raw_put(
        env.manager.transactions_table(),
        item(&[
            ("_TxId", s(old.as_str())),
            ("_TxN", n(0)),
            ("_TxS", s("R")),
            ("_TxV", n(1)),
            ("_TxR", AttributeValue::L(vec![])),
            ("_TxF", s("1")),
            ("_TxD", n(1)),
            ("_TxB", n(1)),
            ("_TxX", n(1)),
        ]),
    )
    .await;
    let report = env
        .manager
        .sweep(&SweepOptions::finish_everything_now().delete_after(Some(std::time::Duration::ZERO)))
        .await
        .unwrap();
    assert!(header_row(&env, &old).await.is_none(), "{report:?}");
    assert!(header_row(&env, &id).await.is_some(), "{report:?}");
    assert_eq!(report.errors.len(), 0, "{report:?}");
}
