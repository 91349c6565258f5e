//! DynamoDB Streams answering badly: expired iterators, throttled and failed `GetRecords` and
//! `GetShardIterator`. The feed delivers what it delivers without them: the same transactions,
//! once and whole, and the same single writes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodbstreams::config::Intercept;
use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorInput;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeSerializationInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use rand::{Rng, SeedableRng};

use crate::common::TestEnv;
use crate::*;

/// Replaces the second, third and fourth answers of `GetRecords` and of `GetShardIterator`, then
/// every third (after DynamoDB Local served them: records read are lost with the answer), with an
/// error, taking turns: an expired iterator (`GetRecords` only), throttling, an internal error.
#[derive(Debug, Clone, Default)]
struct StreamFaults {
    seen: Arc<Mutex<HashMap<String, u64>>>,
    injected: Arc<Mutex<HashMap<&'static str, u64>>>,
}

impl Intercept for StreamFaults {
    fn name(&self) -> &'static str {
        "StreamFaults"
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let Some(op) = cfg.load::<Metadata>().map(|m| m.name().to_string()) else {
            return Ok(());
        };
        if op != "GetRecords" && op != "GetShardIterator" {
            return Ok(());
        }
        let n = {
            let mut seen = self.seen.lock().unwrap();
            let n = seen.entry(op.clone()).or_default();
            *n += 1;
            *n
        };
        // Calls 2, 3 and 4 take one fault each, so every kind is injected however few calls a
        // loaded machine makes in the feed's idle time; then every third call.
        let turn = match n {
            2..=4 => n - 2,
            _ if n > 4 && n % 3 == 0 => (n / 3) % 3,
            _ => return Ok(()),
        };
        let (status, code) = match turn {
            0 if op == "GetRecords" => (400u16, "ExpiredIteratorException"),
            0 | 1 => (400, "LimitExceededException"),
            _ => (500, "InternalServerError"),
        };
        *self.injected.lock().unwrap().entry(code).or_default() += 1;
        answer_with_error(ctx, status, code);
        Ok(())
    }
}

/// Replaces the answer with the error `code`, as DynamoDB Streams sends it with `status`.
fn answer_with_error(
    ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
    status: u16,
    code: &str,
) {
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"injected {code}"}}"#
    );
    let resp = ctx.response_mut();
    *resp.status_mut() = status.try_into().expect("valid status");
    resp.headers_mut().remove("x-amz-crc32");
    resp.headers_mut()
        .insert("content-length", body.len().to_string());
    *resp.body_mut() = aws_smithy_types::body::SdkBody::from(body);
}

/// Streams on both of `env`'s tables, then [`workload`]: the transactions that committed.
async fn streams_and_workload(
    env: &TestEnv,
) -> std::collections::HashSet<dynamodb_transactions::TxId> {
    enable_stream(&env.client, &env.table).await;
    enable_stream(&env.client, &env.range_table).await;
    let ids = workload(env).await;
    committed_ids(&env.manager, &ids).await
}

/// Twenty transactions of 1 to 3 items over two tables, a quarter rolled back, with outside writes.
async fn workload(env: &TestEnv) -> Vec<dynamodb_transactions::TxId> {
    let tables = [
        (env.table.as_str(), false),
        (env.range_table.as_str(), true),
    ];
    let serial = AtomicI64::new(1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let mut ids = Vec::new();
    for _ in 0..20 {
        let roll_back = rng.random_bool(0.25);
        ids.push(random_transaction(&env.manager, &tables, &mut rng, 3, roll_back, &serial).await);
        if rng.random_bool(0.3) {
            env.client
                .put_item()
                .table_name(&env.table)
                .item("Id", s(&format!("k{}", rng.random_range(0..10))))
                .item("v", n(serial.fetch_add(1, Ordering::SeqCst)))
                .send()
                .await
                .unwrap();
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_iterators_throttled_and_failed_reads_lose_and_split_nothing() {
    let env = TestEnv::new("feed-faults").await;
    let committed = streams_and_workload(&env).await;
    let tables = [env.table.as_str(), env.range_table.as_str()];
    let tx_table = env.manager.transactions_table();

    let mut clean = feed_through(env.client.clone(), tx_table, &tables)
        .build()
        .unwrap();
    let reference = drain(&mut clean).await;

    let faults = StreamFaults::default();
    let mut faulted = feed_through(env.client.clone(), tx_table, &tables)
        .streams_client(streams_client_with(faults.clone()))
        .build()
        .unwrap();
    let got = drain(&mut faulted).await;
    assert_clean(&got);

    let injected = faults.injected.lock().unwrap().clone();
    for code in [
        "ExpiredIteratorException",
        "LimitExceededException",
        "InternalServerError",
    ] {
        assert!(
            injected.get(code).copied().unwrap_or(0) > 0,
            "{code} injected: {injected:?}"
        );
    }
    // The same transactions, each once and whole, as without the faults.
    let by_id = |changes: &[Change]| {
        let mut m = HashMap::new();
        for c in changes {
            if let Some(id) = c.transaction_id() {
                assert!(
                    m.insert(id.clone(), c.clone()).is_none(),
                    "{id} delivered twice"
                );
            }
        }
        m
    };
    let (want, have) = (by_id(&reference), by_id(&got));
    assert_eq!(
        want.keys().collect::<std::collections::HashSet<_>>(),
        committed.iter().collect(),
        "the reference run yields exactly the committed transactions"
    );
    assert_eq!(have, want, "the faulted run yields the same transactions");
    // And the same single writes: replaying either gives the same tables.
    let singles = |changes: &[Change]| {
        changes
            .iter()
            .filter(|c| c.transaction_id().is_none())
            .count()
    };
    assert_eq!(singles(&got), singles(&reference));
    let (mut a, mut b) = (HashMap::new(), HashMap::new());
    replay(&mut a, &reference, true);
    replay(&mut b, &got, true);
    assert_eq!(a, b);
}

/// Throttles every `GetShardIterator` of one table's stream until a deadline, so that the feed
/// cannot open that table's shard for longer than its idle time.
#[derive(Debug, Clone)]
struct ThrottledOpen {
    table: String,
    until: std::time::Instant,
    throttled: Arc<Mutex<u32>>,
}

/// Marks one call of [`ThrottledOpen`] to be answered with throttling.
#[derive(Debug, Clone)]
struct Throttle;

impl aws_smithy_types::config_bag::Storable for Throttle {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

impl Intercept for ThrottledOpen {
    fn name(&self) -> &'static str {
        "ThrottledOpen"
    }

    fn read_before_serialization(
        &self,
        ctx: &BeforeSerializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let of_table = ctx
            .input()
            .downcast_ref::<GetShardIteratorInput>()
            .and_then(|i| i.stream_arn())
            .is_some_and(|arn| arn.contains(&format!("table/{}/", self.table)));
        if of_table && std::time::Instant::now() < self.until {
            cfg.interceptor_state().store_put(Throttle);
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if cfg.load::<Throttle>().is_some() {
            *self.throttled.lock().unwrap() += 1;
            answer_with_error(ctx, 400, "LimitExceededException");
        }
        Ok(())
    }
}

/// Regression: a feed stopping when idle (`stop_when_idle`, 3 s here) stopped once no record had
/// arrived for that long even while a shard could not be read (throttled for longer than that),
/// leaving its records unread: a fresh-clone run lost all but one transaction of
/// `expired_iterators_throttled_and_failed_reads_lose_and_split_nothing` on a loaded machine.
/// Here the range table's shard cannot be opened for 4 s: the feed still delivers every
/// committed transaction, as a feed without the throttling does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_stopping_when_idle_waits_for_a_shard_it_cannot_read_yet() {
    let env = TestEnv::new("feed-idle").await;
    let committed = streams_and_workload(&env).await;
    let tables = [env.table.as_str(), env.range_table.as_str()];
    let tx_table = env.manager.transactions_table();
    let throttled = ThrottledOpen {
        table: env.range_table.clone(),
        until: std::time::Instant::now() + std::time::Duration::from_secs(4),
        throttled: Arc::default(),
    };
    let mut feed = feed_through(env.client.clone(), tx_table, &tables)
        .streams_client(streams_client_with(throttled.clone()))
        .build()
        .unwrap();
    let got = drain(&mut feed).await;
    assert!(
        *throttled.throttled.lock().unwrap() > 0,
        "no open throttled"
    );
    let delivered: std::collections::HashSet<_> =
        got.iter().filter_map(|c| c.transaction_id()).collect();
    assert_eq!(
        delivered,
        committed.iter().collect(),
        "every committed transaction, the range table's too"
    );
}
