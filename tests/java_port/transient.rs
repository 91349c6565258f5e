//! The transient flag and placeholders

use super::*;

#[tokio::test]
async fn transient_flag_is_bool_true() {
    let fx = fixture("jp-txtflag").await;
    let t1 = fx.manager.begin();
    assert_eq!(
        get(&t1, &fx.table, "item1").send().await.unwrap().item,
        None
    );
    let raw = fx.raw_get(&fx.table, &key("item1")).await.unwrap();
    assert_eq!(
        raw.get("_TxT"),
        Some(&AttributeValue::Bool(true)),
        "{raw:?}"
    );
    let raw0 = {
        get(&t1, &fx.table, "item0").send().await.unwrap();
        fx.raw_get(&fx.table, &key("item0")).await.unwrap()
    };
    assert_ne!(
        raw0.get("_TxT"),
        Some(&AttributeValue::Bool(true)),
        "{raw0:?}"
    );
    t1.rollback().await.unwrap();
}

#[tokio::test]
async fn isolated_reads_do_not_see_lock_placeholders() {
    let fx = fixture("jp-placeholderread").await;
    let t1 = fx.manager.begin();
    assert_eq!(
        get(&t1, &fx.table, "item1").send().await.unwrap().item,
        None
    );
    put(&t1, &fx.table, &item(&[("Id", s("item2"))]))
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    for id in ["item1", "item2"] {
        for level in [IsolationLevel::Uncommitted, IsolationLevel::Committed] {
            assert_eq!(
                read(&fx.manager, &fx.table, id, level).await,
                None,
                "{id} at {level:?}"
            );
        }
    }
    t1.rollback().await.unwrap();
}

#[tokio::test]
async fn rollback_by_another_coordinator_deletes_placeholders() {
    let fx = fixture("jp-placeholderrb").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    assert_eq!(
        get(&t1, &fx.table, "item1").send().await.unwrap().item,
        None
    );
    t1.abandon();
    second(&fx).rollback_transaction(&id).await.unwrap();
    assert_not_locked(&fx, &fx.table, &key("item1"), None).await;
}
