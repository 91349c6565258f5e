//! `dynamodb-tx tx`: list, show, commit and roll back transactions.

use super::*;

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
