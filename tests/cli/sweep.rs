//! `dynamodb-tx sweep`: a dry run, a real sweep, and `--watch`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_dry_run_then_for_real_then_watch() {
    let env = TestEnv::new("cli-sweep").await;
    let idle = abandoned_pending(&env, "idle").await;
    let gone = TxId::new_random();
    env.raw_put(
        &env.table,
        item(&[
            ("Id", s("orphan")),
            ("v", s("keep")),
            ("_TxId", s(gone.as_str())),
            ("_TxD", n(1)),
        ]),
    )
    .await;
    env.raw_put(
        env.manager.images_table(),
        item(&[("_TxI", s(&format!("{gone}#img")))]),
    )
    .await;

    let dry = json_of(tx_bin(&env).args([
        "sweep",
        "--dry-run",
        "--rollback-after",
        "0s",
        "--scan-table",
        &env.table,
    ]));
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["rolled_back"][0], idle.as_str());
    assert_eq!(dry["orphan_locks_released"], 1);
    assert_eq!(dry["orphan_images_deleted"], 1);
    assert_eq!(state(&env, &idle).await, Some((TxState::Pending, false)));
    // --now is SweepOptions::finish_everything_now: the same decision without thresholds.
    let now = json_of(tx_bin(&env).args(["sweep", "--dry-run", "--now", "--no-images"]));
    assert_eq!(now["rolled_back"][0], idle.as_str());
    assert_eq!(now["pending_left"], 0);
    fails_with(
        tx_bin(&env).args(["sweep", "--now", "--rollback-after", "1m"]),
        2,
        &["--now", "--rollback-after"],
    );
    tx_bin(&env)
        .args(["sweep", "--dry-run", "--rollback-after", "0s"])
        .assert()
        .success()
        .stdout(predicate::str::contains("dry run: nothing was changed"))
        .stdout(predicate::str::contains(format!("would roll back {idle}")));

    // Fresh by the default threshold: left alone.
    let v = json_of(tx_bin(&env).args(["sweep", "--no-images"]));
    assert_eq!(v["pending_left"], 1);
    assert_eq!(v["rolled_back"], Value::Array(vec![]));

    let v = json_of(tx_bin(&env).args([
        "sweep",
        "--rollback-after",
        "0s",
        "--segments",
        "2",
        "--scan-table",
        &env.table,
    ]));
    assert_eq!(v["dry_run"], false);
    assert_eq!(v["rolled_back"][0], idle.as_str());
    assert_eq!(v["orphan_locks_released"], 1);
    assert_eq!(v["orphan_images_deleted"], 1);
    assert_eq!(v["errors"], Value::Array(vec![]));
    assert_eq!(state(&env, &idle).await, Some((TxState::RolledBack, true)));
    assert_eq!(
        env.raw_get(&env.table, &key("idle")).await,
        Some(item(&[("Id", s("idle")), ("bal", n(100))]))
    );
    assert_eq!(
        env.raw_get(&env.table, &key("orphan")).await,
        Some(item(&[("Id", s("orphan")), ("v", s("keep"))]))
    );
    assert!(env.scan_all(env.manager.images_table()).await.is_empty());

    // Delete the finalized record; the human report says so. It counts the locked items it
    // found in the scanned table (two items, neither locked any more).
    tx_bin(&env)
        .args(["sweep", "--delete-after", "0s", "--scan-table", &env.table])
        .assert()
        .success()
        .stdout(predicate::str::contains("deleted (finalized, old)"))
        .stdout(predicate::str::is_match(r"deleted \(finalized, old\)\s+1").unwrap())
        .stdout(predicate::str::is_match(r"locked items found\s+0").unwrap());
    assert_eq!(state(&env, &idle).await, None);

    // Watch mode: one JSON line per sweep, stopped after two.
    let out = tx_bin(&env)
        .args(["sweep", "--json", "--watch", "100ms", "--max-passes", "2"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    // Only the tombstone the orphan's release put under its owner's id is left: kept (a creation
    // of that record may still be on its way for 15 minutes).
    assert!(
        lines
            .iter()
            .all(|l| l["records_scanned"] == 1 && l["deleted"] == 0 && l["finalized_kept"] == 1),
        "{lines:?}"
    );
    // `tx list` shows it as what it is.
    let listed = json_of(tx_bin(&env).args(["--json", "tx", "list"]));
    let stone = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == gone.as_str())
        .unwrap_or_else(|| panic!("the tombstone is listed: {listed}"));
    assert_eq!(stone["tombstone"], true);
    assert_eq!(stone["state"], "rolled-back");

    // An applied lock of a vanished transaction: reported, exit code 3.
    env.raw_put(
        &env.table,
        item(&[
            ("Id", s("applied")),
            ("_TxId", s(gone.as_str())),
            ("_TxA", s("1")),
            ("_TxG", AttributeValue::M(item(&[("Id", s("applied"))]))),
        ]),
    )
    .await;
    tx_bin(&env)
        .args(["sweep", "--scan-table", &env.table])
        .assert()
        .code(3)
        .stdout(predicate::str::contains("NEEDS AN OPERATOR"))
        .stdout(predicate::str::contains(gone.as_str()));
}

/// `--no-unrecorded-tables`: the tables listed as holding locks taken without a record are not
/// scanned; without it the sweep finds such a lock there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_scans_the_tables_listed_for_locks_without_record_unless_told_not_to() {
    let env = TestEnv::with_settings("cli-sweep-unrec", |s| s.record_on_demand = true).await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    tx.abandon();
    let args = [
        "sweep",
        "--dry-run",
        "--rollback-after",
        "0s",
        "--no-images",
    ];
    let off = json_of(tx_bin(&env).args(args).arg("--no-unrecorded-tables"));
    assert_eq!(off["orphan_locks_released"], 0);
    let on = json_of(tx_bin(&env).args(args));
    assert_eq!(on["orphan_locks_released"], 1);
    assert_eq!(on["unrecorded_slices"], serde_json::Value::Null);
    // Paced: the first pass reads the slice of its window, one of 2; the next, moments later
    // (within the same 2-day window), none.
    let paced = [
        "sweep",
        "--rollback-after",
        "1h",
        "--no-images",
        "--unrecorded-period",
        "4d",
        "--unrecorded-slices",
        "2",
    ];
    let first = json_of(tx_bin(&env).args(paced));
    assert_eq!(first["unrecorded_slices"]["count"], 1, "{first}");
    assert_eq!(first["unrecorded_slices"]["of"], 2, "{first}");
    assert_eq!(first["unrecorded_tables"][0], env.table.as_str(), "{first}");
    tx_bin(&env)
        .args(paced)
        .assert()
        .success()
        .stdout(predicate::str::contains("0 of 2 slices read"));
    // A zero period reads them whole.
    let whole = json_of(tx_bin(&env).args([
        "sweep",
        "--rollback-after",
        "1h",
        "--unrecorded-period",
        "0",
    ]));
    assert_eq!(
        whole["unrecorded_slices"],
        serde_json::Value::Null,
        "{whole}"
    );
    tx_bin(&env)
        .args([
            "sweep",
            "--rollback-after",
            "1h",
            "--unrecorded-period",
            "0",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "tables listed as holding locks without record, read whole: {}",
            env.table
        )));
    // `--now` finishes everything in one pass: not in slices.
    tx_bin(&env)
        .args(["sweep", "--now", "--unrecorded-slices", "2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be used with"));
    assert!(
        has_tx_attrs(&env.raw_get(&env.table, &key("a")).await.unwrap()),
        "a dry run releases nothing"
    );
}
