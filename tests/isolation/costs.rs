//! What each isolated read costs in requests.

use super::*;

/// What each read costs in requests.
#[tokio::test]
async fn request_costs() {
    let env = TestEnv::new("iso-cost").await;
    for id in ["a", "b", "c", "d"] {
        env.raw_put(&env.table, v1(id)).await;
    }
    let get = |id: &'static str, level| {
        env.manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .isolation(level)
            .send()
    };
    // Unlocked item: one GetItem at either level (after the key schema is cached).
    get("a", COMMITTED).await.unwrap();
    for level in [UNCOMMITTED, COMMITTED] {
        env.counter.reset();
        get("a", level).await.unwrap();
        assert_eq!(env.counter.total(), 1, "{level:?}");
    }
    // Three items changed by one pending transaction.
    let tx = env.manager.begin();
    for id in ["b", "c", "d"] {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .update_expression("SET n_other = :n")
            .expression_attribute_values(":n", n(9))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    }
    env.counter.reset();
    get("b", UNCOMMITTED).await.unwrap();
    assert_eq!(env.counter.total(), 1);
    env.counter.reset();
    get("b", COMMITTED).await.unwrap();
    assert_eq!(env.counter.get("GetItem"), 2, "item + owner's record");
    // A scan page: one Scan, plus one record read per transaction (not per item).
    env.counter.reset();
    let items = env
        .manager
        .scan()
        .table_name(&env.table)
        .isolation(COMMITTED)
        .send_all()
        .await
        .unwrap();
    assert_eq!(items.len(), 4);
    assert!(items.iter().all(|i| i["n_other"] == n(1)));
    assert_eq!(env.counter.get("Scan"), 1);
    assert_eq!(env.counter.get("GetItem"), 1);
    // A batch read: one BatchGetItem and one record read.
    env.counter.reset();
    let mut ka = KeysAndAttributes::builder();
    for id in ["a", "b", "c", "d"] {
        ka = ka.keys(key(id));
    }
    let out = env
        .manager
        .batch_get_item()
        .request_items(&env.table, ka.build().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(out.responses()[&env.table].len(), 4);
    assert_eq!(env.counter.get("BatchGetItem"), 1);
    assert_eq!(env.counter.get("GetItem"), 1);
    tx.rollback().await.unwrap();
}
