//! `dynamodb-tx tables`: create and verify the library's tables.

use super::*;

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
