//! Reads the library rejects before sending anything.

use super::*;

#[tokio::test]
async fn read_lock_outside_a_transaction_is_an_error() {
    let env = TestEnv::new("iso-readlock").await;
    env.raw_put(&env.table, v1("a")).await;
    for got in four_reads(&env, IsolationLevel::ReadLock, "a", false).await {
        assert!(got.unwrap_err().is_invalid_request());
    }
}

#[tokio::test]
async fn bad_expressions_are_rejected_before_any_read() {
    let env = TestEnv::new("iso-bad").await;
    let m = &env.manager;
    let t = &env.table;
    let cases = [
        m.scan().table_name(t).projection_expression("_TxId"),
        m.scan()
            .table_name(t)
            .filter_expression("attribute_exists(_TxA)"),
        m.scan()
            .table_name(t)
            .filter_expression("#a = :v")
            .expression_attribute_names("#a", "_TxG")
            .expression_attribute_values(":v", n(1)),
        m.scan().table_name(t).filter_expression("a = :undefined"),
        m.scan()
            .table_name(t)
            .filter_expression("a = :v")
            .expression_attribute_values(":v", n(1))
            .expression_attribute_values(":unused", n(1)),
        m.scan()
            .table_name(t)
            .filter_expression("a == :v")
            .expression_attribute_values(":v", n(1)),
    ];
    env.counter.reset();
    for c in cases {
        let got = c.send().await;
        assert!(got.as_ref().unwrap_err().is_invalid_request(), "{got:?}");
    }
    let got = m.query().table_name(t).send().await;
    assert!(got.unwrap_err().is_invalid_request());
    // Only the key schema lookup may have been sent.
    assert_eq!(env.counter.get("Scan") + env.counter.get("Query"), 0);
}

/// The library's expressions share one lexer, which knows `!` is no DynamoDB syntax (`<>` is "not
/// equal"). Reads always rejected it; a transaction's `ConditionExpression` or `UpdateExpression`
/// with it is now also rejected when it is buffered, before any request, instead of by DynamoDB
/// when applied. The transaction stays usable.
#[tokio::test]
async fn bang_is_rejected_by_every_expression_before_any_request() {
    let env = TestEnv::new("iso-bang").await;
    env.raw_put(&env.table, v1("a")).await;
    env.counter.reset();
    let got = env
        .manager
        .scan()
        .table_name(&env.table)
        .filter_expression("n_other != :v")
        .expression_attribute_values(":v", n(1))
        .send()
        .await;
    assert!(got.unwrap_err().is_invalid_request());
    let tx = env.manager.begin();
    let got = tx
        .update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET n_other = :v")
        .condition_expression("n_other != :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await;
    assert!(got.unwrap_err().is_invalid_request());
    let got = tx
        .update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET n_other = !n_other")
        .send()
        .await;
    assert!(got.unwrap_err().is_invalid_request());
    assert_eq!(
        env.counter.total() - env.counter.get("DescribeTable"),
        0,
        "nothing but key schema lookups may have been sent"
    );
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET n_other = :v")
        .condition_expression("n_other <> :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_reads(
        &env,
        COMMITTED,
        "a",
        Some(&item(&[
            ("Id", s("a")),
            ("s_someattr", s("val1")),
            ("n_other", n(2)),
        ])),
    )
    .await;
}
