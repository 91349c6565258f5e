//! The `dynamodb-tx` binary, run as a process against DynamoDB Local: every subcommand, its output
//! (JSON parsed where practical) and the state it leaves in DynamoDB.
mod common;

use std::time::Duration;

use assert_cmd::Command;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use common::*;
use dynamodb_transactions::lock::Wait;
use dynamodb_transactions::lock::queue::QueueLock;
use dynamodb_transactions::{TxId, TxState};
use predicates::prelude::*;
use serde_json::Value;

/// The binary, pointed at the test endpoint, with no table names from the environment.
fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dynamodb-tx"));
    c.env_remove("DYNAMODB_TX_TRANSACTIONS_TABLE")
        .env_remove("DYNAMODB_TX_IMAGES_TABLE")
        .env_remove("DYNAMODB_TX_LOCK_TABLE")
        .args(["--endpoint", endpoint(), "--no-progress"]);
    c
}

/// The binary, on the test environment's tables.
fn tx_bin(env: &TestEnv) -> Command {
    let mut c = bin();
    c.args([
        "--transactions-table",
        env.manager.transactions_table(),
        "--images-table",
        env.manager.images_table(),
    ]);
    c
}

/// Runs a command that must succeed and print JSON.
fn json_of(c: &mut Command) -> Value {
    let out = c
        .arg("--json")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&out).into_owned()
        )
    })
}

/// Runs a command that must fail with exit `code` and exactly one line on stderr containing every
/// one of `words`, and nothing on stdout. Returns that line.
fn fails_with(c: &mut Command, code: i32, words: &[&str]) -> String {
    let out = c.output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line on stderr: {stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    for w in words {
        assert!(stderr.contains(w), "{w:?} not in {stderr:?}");
    }
    assert!(
        !stderr.contains("panicked") && !stderr.contains("{ "),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// The binary with no endpoint, table or credentials settings from the environment.
fn bare_bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dynamodb-tx"));
    for v in [
        "DYNAMODB_TX_TRANSACTIONS_TABLE",
        "DYNAMODB_TX_IMAGES_TABLE",
        "DYNAMODB_TX_LOCK_TABLE",
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL",
    ] {
        c.env_remove(v);
    }
    c.arg("--no-progress");
    c
}

/// A pending transaction whose update of item `id` (bal 100 → 110) is applied, abandoned.
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
    tx_id
}

async fn state(env: &TestEnv, id: &TxId) -> Option<(TxState, bool)> {
    env.tx_state(id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_create_and_verify() {
    let env = TestEnv::new("cli-tables").await;
    let tx_table = unique_name("cli-tables-newtx");
    let img_table = unique_name("cli-tables-newimg");
    let lock_table = unique_name("cli-tables-locks");
    for t in [&tx_table, &img_table, &lock_table] {
        env.guard.add(t);
    }
    let on = |c: &mut Command| {
        c.args([
            "--transactions-table",
            &tx_table,
            "--images-table",
            &img_table,
        ]);
    };

    // Missing tables: an error that says what to do, exit 5.
    let mut c = bin();
    on(&mut c);
    fails_with(
        c.args(["tables", "verify"]),
        5,
        &[
            &format!("table {tx_table} does not exist"),
            "dynamodb-tx tables create",
        ],
    );

    let mut c = bin();
    on(&mut c);
    let v = json_of(c.args([
        "tables",
        "create",
        "--enable-ttl",
        "--lock-table",
        &lock_table,
    ]));
    assert_eq!(v["status"], "ok");
    assert_eq!(v["transactions_table"], tx_table.as_str());
    assert_eq!(v["record_ttl"], "ENABLED");

    let mut c = bin();
    on(&mut c);
    let v = json_of(c.args(["tables", "verify", "--lock-table", &lock_table]));
    assert_eq!(v["status"], "ok");
    assert_eq!(v["lock_table"], lock_table.as_str());

    // Human output, and idempotence of create.
    let mut c = bin();
    on(&mut c);
    c.args(["tables", "create"])
        .assert()
        .success()
        .stdout(predicate::str::contains("are active"))
        .stdout(predicate::str::contains("TTL on _TxE: ENABLED"));

    // The environment's own tables verify too; TTL is off there and the output says what it means.
    tx_bin(&env)
        .args(["tables", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("have the right keys"))
        .stdout(predicate::str::contains("--delete-after"));

    // A user table is not a lock table.
    fails_with(
        tx_bin(&env).args(["tables", "verify", "--lock-table", &env.table]),
        5,
        &["Id (HASH)", "expected pk (HASH) and sk (RANGE)"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tx_list_show_commit_rollback() {
    let env = TestEnv::new("cli-tx").await;
    let a = abandoned_pending(&env, "a").await;
    let b = abandoned_pending(&env, "b").await;
    let tx = env.manager.begin();
    let c_id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("c"))
        .item("bal", n(1))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let all = json_of(tx_bin(&env).args(["tx", "list"]));
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");
    let pending = json_of(tx_bin(&env).args(["tx", "list", "--state", "pending"]));
    let mut ids: Vec<&str> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![a.as_str(), b.as_str()];
    want.sort();
    assert_eq!(ids, want);
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["state"] == "pending" && t["finalized"] == false)
    );
    let committed = json_of(tx_bin(&env).args(["tx", "list", "--state", "committed"]));
    assert_eq!(committed[0]["id"], c_id.as_str());
    assert_eq!(committed[0]["finalized"], true);
    let old = json_of(tx_bin(&env).args(["tx", "list", "--older-than", "1h"]));
    assert_eq!(old, Value::Array(vec![]));
    tx_bin(&env)
        .args(["tx", "list", "--unfinalized"])
        .assert()
        .success()
        .stdout(predicate::str::contains(a.as_str()))
        .stdout(predicate::str::contains(c_id.as_str()).not())
        .stdout(predicate::str::contains("2 transaction(s)"));

    // show: state, version, requests, locked items.
    let shown = json_of(tx_bin(&env).args(["tx", "show", a.as_str()]));
    assert_eq!(shown["state"], "pending");
    assert_eq!(shown["version"], 1);
    assert_eq!(shown["requests"][0]["kind"], "update");
    assert_eq!(shown["requests"][0]["table"], env.table.as_str());
    assert_eq!(shown["requests"][0]["key"]["Id"]["S"], "a");
    assert_eq!(
        shown["requests"][0]["update_expression"],
        "SET bal = bal + :x"
    );
    assert_eq!(shown["locked_items"], 1);
    assert_eq!(shown["items"][0]["locked_by_this"], true);
    assert_eq!(shown["items"][0]["applied"], true);
    tx_bin(&env)
        .args(["tx", "show", a.as_str()])
        .assert()
        .success()
        .stdout(predicate::str::contains("state      pending"))
        .stdout(predicate::str::contains("Id=\"a\""))
        .stdout(predicate::str::contains(
            "LOCKED by this transaction, write applied",
        ))
        .stdout(predicate::str::contains(
            "1 item(s) still locked by this transaction",
        ));

    // commit a, roll back b.
    let v = json_of(tx_bin(&env).args(["tx", "commit", a.as_str()]));
    assert_eq!(v["state"], "committed");
    assert_eq!(v["finalized"], true);
    assert_eq!(state(&env, &a).await, Some((TxState::Committed, true)));
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await,
        Some(item(&[("Id", s("a")), ("bal", n(110))]))
    );
    tx_bin(&env)
        .args(["tx", "rollback", b.as_str()])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("rolled back {b}")));
    assert_eq!(state(&env, &b).await, Some((TxState::RolledBack, true)));
    assert_eq!(
        env.raw_get(&env.table, &key("b")).await,
        Some(item(&[("Id", s("b")), ("bal", n(100))]))
    );
    let shown = json_of(tx_bin(&env).args(["tx", "show", b.as_str()]));
    assert_eq!(shown["state"], "rolled-back");
    assert_eq!(shown["locked_items"], 0);

    // Impossible requests fail with a hint (exit 1), an unknown id with exit 4.
    fails_with(
        tx_bin(&env).args(["tx", "rollback", c_id.as_str()]),
        1,
        &["already committed", "cannot be rolled back"],
    );
    fails_with(
        tx_bin(&env).args(["tx", "commit", b.as_str()]),
        1,
        &["cannot be committed"],
    );
    let nobody = TxId::new_random();
    for cmd in ["show", "commit", "rollback"] {
        fails_with(
            tx_bin(&env).args(["tx", cmd, nobody.as_str()]),
            4,
            &[
                &format!("transaction {nobody} not found"),
                "dynamodb-tx tx list",
            ],
        );
    }
    // Durations are humantime's: `5 minutes` and `1h30m` work, an unknown unit does not.
    let old = json_of(tx_bin(&env).args(["tx", "list", "--older-than", "5 minutes"]));
    assert_eq!(old, Value::Array(vec![]));
    fails_with(
        tx_bin(&env).args(["tx", "list", "--older-than", "5 parsecs"]),
        2,
        &["invalid duration", "--older-than", "parsecs"],
    );
}

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

    // Delete the finalized record; the human report says so.
    tx_bin(&env)
        .args(["sweep", "--delete-after", "0s"])
        .assert()
        .success()
        .stdout(predicate::str::contains("deleted (finalized, old)"))
        .stdout(predicate::str::is_match(r"deleted \(finalized, old\)\s+1").unwrap());
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
    assert!(lines.iter().all(|l| l["records_scanned"] == 0));

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_list_shows_holder_and_waiter() {
    let env = TestEnv::new("cli-lock").await;
    let table = unique_name("cli-lock-table");
    env.guard.add(&table);
    let locks = QueueLock::builder(env.client.clone())
        .table(&table)
        .lease_duration(Duration::from_secs(30))
        .build()
        .unwrap();
    locks.create_table().await.unwrap();
    let holder = locks.acquire("printer", Wait::NoWait).await.unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .acquire("printer", Wait::For(Duration::from_secs(20)))
                .await
        })
    };
    // Wait (bounded) until the waiter's row is in the queue.
    let mut rows = Value::Null;
    for _ in 0..100 {
        let v = json_of(bin().args(["lock", "list", "printer", "--lock-table", &table]));
        rows = v["rows"].clone();
        let queued = rows
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "queue")
            .count();
        if queued == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = rows.as_array().unwrap().clone();
    let queue: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "queue").collect();
    assert_eq!(queue.len(), 2, "{rows:?}");
    assert_eq!(queue[0]["ticket"], 1);
    assert_eq!(queue[0]["owner"], holder.owner());
    assert_eq!(queue[0]["status"], "holder");
    assert_eq!(queue[1]["ticket"], 2);
    assert_eq!(queue[1]["status"], "waiting");
    let counter: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "counter").collect();
    assert_eq!(counter[0]["last_ticket"], 2);

    bin()
        .args(["lock", "list", "printer", "--lock-table", &table])
        .assert()
        .success()
        .stdout(predicate::str::contains("holder"))
        .stdout(predicate::str::contains("waiting"))
        .stdout(predicate::str::contains(holder.owner()));
    bin()
        .args(["lock", "list", "nobody", "--lock-table", &table])
        .assert()
        .success()
        .stdout(predicate::str::contains("no rows for lock"));
    fails_with(
        bin().args([
            "lock",
            "list",
            "printer",
            "--lock-table",
            "no-such-lock-table",
        ]),
        5,
        &[
            "lock table no-such-lock-table does not exist",
            "--lock-table",
        ],
    );

    holder.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert_eq!(next.fencing_token(), 2);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tx_show_summarises_a_large_transaction() {
    let env = TestEnv::new("cli-big").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for i in 0..150 {
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(&format!("i{i:03}")))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    // Default: the first 20 requests and items, and how many more.
    let out = tx_bin(&env)
        .args(["tx", "show", id.as_str()])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("Id=\"i019\""), "{out}");
    assert!(!out.contains("Id=\"i020\""), "{out}");
    assert!(
        out.contains("... and 130 more request(s) (150 in all): `--all` shows every one"),
        "{out}"
    );
    assert!(
        out.contains("... and 130 more item(s) (150 in all"),
        "{out}"
    );
    assert!(out.lines().count() < 70, "summarised: {out}");

    // --limit and --all.
    let out = tx_bin(&env)
        .args(["tx", "show", id.as_str(), "--limit", "5"])
        .output()
        .unwrap();
    let out = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.contains("Id=\"i004\"") && !out.contains("Id=\"i005\""),
        "{out}"
    );
    assert!(out.contains("... and 145 more request(s)"), "{out}");
    let out = tx_bin(&env)
        .args(["tx", "show", id.as_str(), "--all"])
        .output()
        .unwrap();
    let out = String::from_utf8(out.stdout).unwrap();
    assert!(out.contains("Id=\"i149\""), "{out}");
    assert!(!out.contains("more request(s)"), "{out}");

    // JSON says how many are left out.
    let v = json_of(tx_bin(&env).args(["tx", "show", id.as_str()]));
    assert_eq!(v["requests"].as_array().unwrap().len(), 20);
    assert_eq!(v["requests_total"], 150);
    assert_eq!(v["requests_omitted"], 130);
    assert_eq!(v["items"].as_array().unwrap().len(), 20);
    assert_eq!(v["items_total"], 150);
    assert_eq!(v["items_omitted"], 130);
    assert_eq!(v["requests"][19]["key"]["Id"]["S"], "i019");
    let v = json_of(tx_bin(&env).args(["tx", "show", id.as_str(), "--all"]));
    assert_eq!(v["requests"].as_array().unwrap().len(), 150);
    assert_eq!(v["requests_omitted"], 0);
    assert_eq!(v["items_omitted"], 0);
    tx_bin(&env)
        .args(["tx", "show", id.as_str(), "--all", "--limit", "3"])
        .assert()
        .code(2);
}

/// Every class of error is one line on stderr and its own exit code (see `dynamodb-tx --help`).
#[test]
fn error_paths_are_one_line_with_distinct_exit_codes() {
    // No DynamoDB at the endpoint: exit 6, whatever the command.
    for args in [
        &["tx", "list"][..],
        &["tx", "show", "some-id"],
        &["tables", "verify"],
        &["sweep"],
        &["lock", "list", "x", "--lock-table", "locks"],
    ] {
        fails_with(
            bare_bin()
                .args(["--endpoint", "http://127.0.0.1:1"])
                .args(args),
            6,
            &[
                "cannot reach DynamoDB at http://127.0.0.1:1",
                "Connection refused",
                "--endpoint",
            ],
        );
    }

    // No credentials anywhere (a profile that does not exist, an empty home, no instance
    // metadata), against a live endpoint: exit 6 before any request.
    let home = std::env::temp_dir().join(unique_name("cli-empty-home"));
    std::fs::create_dir_all(&home).unwrap();
    let mut c = bare_bin();
    for v in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
    ] {
        c.env_remove(v);
    }
    c.env("AWS_PROFILE", "no-such-profile-for-dynamodb-tx")
        .env("HOME", &home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .args(["--endpoint", endpoint(), "tx", "list"]);
    fails_with(
        &mut c,
        6,
        &[
            "no AWS credentials found",
            "AWS_ACCESS_KEY_ID",
            "AWS_PROFILE=no-such-profile-for-dynamodb-tx",
        ],
    );
    std::fs::remove_dir_all(&home).unwrap();

    // No region and no endpoint: exit 6.
    fails_with(
        bare_bin()
            .env_remove("AWS_REGION")
            .env_remove("AWS_DEFAULT_REGION")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_CONFIG_FILE")
            .env(
                "HOME",
                std::env::temp_dir().join(unique_name("cli-no-home")),
            )
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .args(["tx", "list"]),
        6,
        &["no AWS region configured", "--region"],
    );

    // Missing tables: exit 5, whichever request finds them missing.
    let tx_table = unique_name("cli-missing-tx");
    let img_table = unique_name("cli-missing-img");
    for args in [
        &["tx", "list"][..],
        &["tx", "show", "some-id"],
        &["tx", "rollback", "some-id"],
        &["tables", "verify"],
        &["sweep"],
    ] {
        fails_with(
            bin()
                .args([
                    "--transactions-table",
                    &tx_table,
                    "--images-table",
                    &img_table,
                ])
                .args(args),
            5,
            &["does not exist", "dynamodb-tx tables create", &tx_table],
        );
    }

    // Bad arguments: exit 2, one line, even where clap would print several.
    for (args, words) in [
        (
            &["tx", "list", "--older-than", "soon"][..],
            &["invalid duration", "--older-than"][..],
        ),
        (
            &["sweep", "--rollback-after", "5x"],
            &["invalid duration", "--rollback-after"],
        ),
        (&["tx", "list", "--bogus"], &["--bogus", "--help"]),
        (&["tx", "show"], &["required", "<ID>"]),
        (&["tx"], &["requires a subcommand", "list, show"]),
        (&[], &["requires a subcommand", "tables, tx, sweep, lock"]),
        (&["frobnicate"], &["frobnicate"]),
        (&["sweep", "--max-passes", "2"], &["--watch"]),
    ] {
        fails_with(bin().args(args), 2, words);
    }

    // --help documents the exit codes.
    bin()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Exit codes:"))
        .stdout(predicate::str::contains("6  cannot reach DynamoDB"));
}

/// A reader that goes away (`dynamodb-tx ... | head -1`) ends the process quietly, like a tool
/// killed by SIGPIPE (exit 141), not with a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_stdout_is_not_a_panic() {
    let env = TestEnv::new("cli-pipe").await;
    abandoned_pending(&env, "a").await;
    for args in [
        &["tx", "list"][..],
        &["sweep", "--dry-run"],
        &["--json", "tx", "list"],
    ] {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_dynamodb-tx"));
        c.env_remove("DYNAMODB_TX_TRANSACTIONS_TABLE")
            .env_remove("DYNAMODB_TX_IMAGES_TABLE")
            .args(["--endpoint", endpoint(), "--no-progress"])
            .args([
                "--transactions-table",
                env.manager.transactions_table(),
                "--images-table",
                env.manager.images_table(),
            ])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is printed
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}
