//! Two handles of one transaction: what each one reports when the other decides it first.
use super::*;
use dynamodb_transactions::{Error, TxOutcome};

/// Handle A buffers a write; another coordinator (handle B, resumed from the record) commits the
/// transaction without it. A's commit must not report the transaction committed as if A's write
/// were in it: the write was never recorded, so it was never applied.
#[tokio::test]
async fn a_handle_whose_writes_missed_the_decision_is_not_told_committed() {
    // Another process's coordinator, and a second handle of the same manager.
    for same_manager in [false, true] {
        missed_writes_are_reported(same_manager).await;
    }
}

async fn missed_writes_are_reported(same_manager: bool) {
    let env = TestEnv::new("tx-handles").await;
    let t1 = env.manager.begin();
    let id = t1.id().clone();
    // A read creates the record, so another coordinator can resume it.
    t1.get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    t1.put_item()
        .table_name(&env.table)
        .item("Id", s("b"))
        .item("v", s("from-t1"))
        .send()
        .await
        .unwrap();

    let (m2, _) = env.second_coordinator();
    let m2 = if same_manager {
        env.manager.clone()
    } else {
        m2
    };
    let t2 = m2.resume(&id).await.unwrap();
    t2.put_item()
        .table_name(&env.table)
        .item("Id", s("c"))
        .item("v", s("from-t2"))
        .send()
        .await
        .unwrap();
    t2.commit().await.unwrap();

    let e = t1.commit().await.unwrap_err();
    // The item A wrote was not written: A's caller must not be told its write committed.
    assert_eq!(env.raw_get(&env.table, &key("b")).await, None);
    assert_eq!(
        env.raw_get(&env.table, &key("c")).await.unwrap()["v"],
        s("from-t2")
    );
    assert_ne!(
        e.transaction_outcome(),
        Some(TxOutcome::Committed),
        "A's commit reports committed although its write was not applied: {e:?}"
    );
    assert!(
        matches!(e, Error::CommittedWithout { unrecorded: 1, .. }),
        "{e:?}"
    );
    assert_eq!(e.transaction_outcome(), Some(TxOutcome::CommittedWithout));
    assert!(!has_tx_attrs(
        &env.raw_get(&env.table, &key("a")).await.unwrap_or_default()
    ));
}
