//! Read-only inspection: listing and describing transactions.

use super::*;

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

#[tokio::test]
async fn a_marked_fast_path_transaction_is_described_with_its_writes() {
    let env = TestEnv::with_settings("sw-describe-fast", |s| {
        s.fast_path_stamps = dynamodb_transactions::FastPathStamps::Always;
    })
    .await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for k in ["a", "b"] {
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(k))
            .item("v", n(1))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let d = env
        .manager
        .describe_transaction(&id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.summary.state, TxState::Committed);
    assert!(
        d.summary.finalized,
        "the fast path creates its record settled"
    );
    let mut keys: Vec<_> = d.requests.iter().map(|r| r.key.clone()).collect();
    keys.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(keys, vec![key("a"), key("b")]);
    assert!(
        d.requests
            .iter()
            .all(|r| r.kind == dynamodb_transactions::sweeper::RequestKind::Put)
    );
    assert_eq!(d.items.len(), 2);
    assert!(d.items.iter().all(|i| i.exists && i.locked_by.is_none()));
}
