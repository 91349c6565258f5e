mod common;
use common::*;

#[tokio::test]
async fn basic_commit_and_rollback() {
    let env = TestEnv::new("smoke").await;
    let m = &env.manager;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("bal", n(100))]))
        .await;
    let tx = m.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET bal = bal - :x")
        .expression_attribute_values(":x", n(10))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("b"))
        .item("bal", n(10))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    println!("requests: {:?}", env.counter.snapshot());
    let a = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert_eq!(a["bal"], n(90));
    assert!(!has_tx_attrs(&a));
    let b = env.raw_get(&env.table, &key("b")).await.unwrap();
    assert_eq!(b["bal"], n(10));
    assert!(!has_tx_attrs(&b));

    let tx = m.begin();
    let got = tx
        .get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.item.unwrap()["bal"], n(90));
    let raw = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert!(raw.contains_key("_TxId"));
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("b"))
        .send()
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let a = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert!(!has_tx_attrs(&a), "{a:?}");
    assert!(env.raw_get(&env.table, &key("b")).await.is_some());
}

#[tokio::test]
async fn phased_commit_and_rollback() {
    let env = TestEnv::with_settings("smoke2", |s| s.one_shot_max_items = 0).await;
    let m = &env.manager;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("bal", n(100))]))
        .await;
    let tx = m.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET bal = bal - :x")
        .expression_attribute_values(":x", n(10))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("b"))
        .item("bal", n(10))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    println!("requests: {:?}", env.counter.snapshot());
    let a = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert_eq!(a["bal"], n(90));
    assert!(!has_tx_attrs(&a), "{a:?}");
    let b = env.raw_get(&env.table, &key("b")).await.unwrap();
    assert!(!has_tx_attrs(&b), "{b:?}");

    let tx = m.begin();
    let out = tx
        .update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET bal = bal - :x")
        .expression_attribute_values(":x", n(10))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    assert_eq!(out.attributes.unwrap()["bal"], n(80));
    let raw = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert_eq!(raw["bal"], n(80));
    assert!(raw.contains_key("_TxG"));
    tx.rollback().await.unwrap();
    let a = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert_eq!(a["bal"], n(90));
    assert!(!has_tx_attrs(&a), "{a:?}");
}
