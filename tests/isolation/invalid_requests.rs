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
