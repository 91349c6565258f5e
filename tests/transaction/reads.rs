//! Reads and return values: a transaction reads its own writes, values round-trip, a committed
//! delete reads as absent, and return values survive a retried apply.

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use dynamodb_transactions::TxState;

use crate::common::*;
use crate::{assert_clean, envs};

#[tokio::test]
async fn reads_see_the_transactions_own_writes() {
    for env in envs("ryw").await {
        env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
            .await;
        env.raw_put(&env.table, item(&[("Id", s("d")), ("v", n(1))]))
            .await;
        let tx = env.manager.begin();
        let get = |id: &'static str| tx.get_item().table_name(&env.table).key("Id", s(id));
        // Lock upgrade: read, then write the same item.
        assert_eq!(get("a").send().await.unwrap().item.unwrap()["v"], n(1));
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .update_expression("SET v = v + :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
        assert_eq!(get("a").send().await.unwrap().item.unwrap()["v"], n(2));
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s("p"))
            .item("v", n(7))
            .send()
            .await
            .unwrap();
        assert_eq!(get("p").send().await.unwrap().item.unwrap()["v"], n(7));
        tx.delete_item()
            .table_name(&env.table)
            .key("Id", s("d"))
            .send()
            .await
            .unwrap();
        assert_eq!(get("d").send().await.unwrap().item, None);
        assert_eq!(get("none").send().await.unwrap().item, None);
        // Outside the transaction, committed reads see none of it yet.
        let committed = env
            .manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        assert_eq!(committed.item.unwrap()["v"], n(1));
        tx.commit().await.unwrap();
        assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(2));
        assert_eq!(env.raw_get(&env.table, &key("p")).await.unwrap()["v"], n(7));
        assert!(env.raw_get(&env.table, &key("d")).await.is_none());
        assert!(
            env.raw_get(&env.table, &key("none")).await.is_none(),
            "read placeholder removed"
        );
        assert_clean(&env).await;
    }
}

#[tokio::test]
async fn binary_and_nested_attributes_round_trip() {
    for env in envs("types").await {
        let blob = aws_sdk_dynamodb::primitives::Blob::new(b"\n\t\xc4\xa3\x00".to_vec());
        let nested = AttributeValue::M(
            [
                ("s".to_string(), s("x")),
                ("n".to_string(), n(1.5)),
                ("b".to_string(), AttributeValue::B(blob.clone())),
                (
                    "ss".to_string(),
                    AttributeValue::Ss(vec!["a".into(), "b".into()]),
                ),
                (
                    "ns".to_string(),
                    AttributeValue::Ns(vec!["1".into(), "2".into()]),
                ),
                ("bs".to_string(), AttributeValue::Bs(vec![blob.clone()])),
                ("bool".to_string(), AttributeValue::Bool(true)),
                ("null".to_string(), AttributeValue::Null(true)),
                (
                    "l".to_string(),
                    AttributeValue::L(vec![n(1), AttributeValue::L(vec![s("deep")])]),
                ),
            ]
            .into_iter()
            .collect(),
        );
        let full = item(&[
            ("Id", s("t")),
            ("m", nested.clone()),
            ("b", AttributeValue::B(blob.clone())),
        ]);
        let tx = env.manager.begin();
        tx.put_item()
            .table_name(&env.table)
            .set_item(Some(full.clone()))
            .send()
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(env.raw_get(&env.table, &key("t")).await.unwrap(), full);
        // Update it (the image carries every type) and roll back: restored exactly.
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("t"))
            .update_expression("REMOVE m")
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(env.raw_get(&env.table, &key("t")).await.unwrap(), full);
    }
}

#[tokio::test]
async fn a_committed_delete_not_yet_executed_reads_as_absent() {
    let env = TestEnv::with_settings("deldec", |s| {
        s.one_shot_max_items = 0;
        // Writes applied before the commit (rolled forward, they would be applied after it).
        s.roll_forward = false;
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("d")), ("v", n(1))]))
        .await;
    env.manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
    env.counter.reset();
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .send()
        .await
        .unwrap();
    // record, lock, apply (marks the delete), flip; the coordinator dies before the unlock.
    env.faults
        .crash_at(5, dynamodb_transactions::fault::FaultMode::BeforeSend);
    // Committed, but the crash stops the cleanup: commit says "committed, not finished".
    let r = tx.commit().await;
    assert_eq!(
        r.as_ref().err().and_then(|e| e.transaction_outcome()),
        Some(dynamodb_transactions::TxOutcome::Committed)
    );
    assert!(
        matches!(
            r,
            Err(dynamodb_transactions::Error::AlreadyCommitted { .. })
        ),
        "{r:?}"
    );
    env.faults.disarm();
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, false)));
    let raw = env.raw_get(&env.table, &key("d")).await.unwrap();
    assert_eq!(
        raw["_TxA"],
        s("D"),
        "the delete is marked, not executed: {raw:?}"
    );
    // Consistent: an eventually consistent read may show the item as it was before the commit.
    let committed = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(committed.item, None, "committed readers see it deleted");
    // Whoever completes it executes the delete.
    let (m2, _) = env.second_coordinator();
    m2.complete_transaction(&id).await.unwrap();
    assert!(env.raw_get(&env.table, &key("d")).await.is_none());
}

/// Throttles the response of the first request whose body contains `needle`, after DynamoDB applied
/// it: the SDK retries, and the retry meets the first attempt's effect.
#[derive(Debug, Clone)]
struct ThrottleFirstMatch {
    needle: String,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Debug, Clone)]
struct Struck;

impl aws_smithy_types::config_bag::Storable for Struck {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

impl aws_sdk_dynamodb::config::Intercept for ThrottleFirstMatch {
    fn name(&self) -> &'static str {
        "ThrottleFirstMatch"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let body = ctx.request().body().bytes().unwrap_or_default();
        if String::from_utf8_lossy(body).contains(&self.needle)
            && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            cfg.interceptor_state().store_put(Struck);
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextMut<
            '_,
        >,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if cfg.load::<Struck>().is_some() {
            cfg.interceptor_state().unset::<Struck>();
            let resp = ctx.response_mut();
            *resp.status_mut() = 400u16.try_into().expect("status");
            *resp.body_mut() = aws_smithy_types::body::SdkBody::from(
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"injected"}"#,
            );
            resp.headers_mut().remove("x-amz-crc32");
        }
        Ok(())
    }
}

/// An update asking for return values whose apply lands but whose response is throttled: the
/// SDK's retry finds the write applied, and the library must still answer what DynamoDB would have
/// (compared with DynamoDB's own answer to the same plain UpdateItem on a twin item).
#[tokio::test]
async fn return_values_survive_a_retried_apply() {
    let env = TestEnv::new("rv-retry").await;
    let before = |id: &str| {
        item(&[
            ("Id", s(id)),
            ("v", n(1)),
            ("w", s("gone")),
            ("keep", s("k")),
            (
                "m",
                AttributeValue::M(
                    [("a".to_string(), n(1)), ("b".to_string(), n(2))]
                        .into_iter()
                        .collect(),
                ),
            ),
        ])
    };
    let update = "SET v = :v, m.a = :a REMOVE w";
    for rv in [
        ReturnValue::UpdatedOld,
        ReturnValue::UpdatedNew,
        ReturnValue::AllNew,
    ] {
        let (ours, twin) = (
            format!("tx-{}", rv.as_str()),
            format!("twin-{}", rv.as_str()),
        );
        env.raw_put(&env.table, before(&ours)).await;
        env.raw_put(&env.table, before(&twin)).await;
        let expected = env
            .client
            .update_item()
            .table_name(&env.table)
            .key("Id", s(&twin))
            .update_expression(update)
            .expression_attribute_values(":v", n(2))
            .expression_attribute_values(":a", n(10))
            .return_values(rv.clone())
            .send()
            .await
            .unwrap()
            .attributes;
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let m = dynamodb_transactions::TransactionManager::builder(client_with(vec![shared(
            ThrottleFirstMatch {
                needle: format!("\"ReturnValues\":\"{}\"", rv.as_str()),
                fired: fired.clone(),
            },
        )]))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| s.rollback_on_drop = false)
        .build();
        let tx = m.begin();
        let got = tx
            .update_item()
            .table_name(&env.table)
            .key("Id", s(&ours))
            .update_expression(update)
            .expression_attribute_values(":v", n(2))
            .expression_attribute_values(":a", n(10))
            .return_values(rv.clone())
            .send()
            .await
            .unwrap();
        assert!(
            fired.load(std::sync::atomic::Ordering::SeqCst),
            "{rv:?}: not throttled"
        );
        let mut want = expected.unwrap_or_default();
        if rv == ReturnValue::AllNew {
            want.insert("Id".into(), s(&ours));
        }
        assert_eq!(got.attributes.unwrap_or_default(), want, "{rv:?}");
        tx.commit().await.unwrap();
        let mut stored = env.raw_get(&env.table, &key(&ours)).await.unwrap();
        stored.insert("Id".into(), s(&twin));
        assert_eq!(
            Some(stored),
            env.raw_get(&env.table, &key(&twin)).await,
            "{rv:?}"
        );
    }
}
