//! Shard lineage: a child shard is read only once its parent is read to its end. DynamoDB Local
//! never splits a shard, so a test interceptor on the Streams client shows the stream as DynamoDB
//! does after a split: Local's shard becomes the child of a closed parent shard, whose records the
//! interceptor serves itself (a few empty pages, then its end).

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodbstreams::config::Intercept;
use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsInput;
use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorInput;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeSerializationInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use rand::SeedableRng;
use serde_json::{Value, json};

use crate::common::TestEnv;
use crate::*;

const PARENT: &str = "shardId-00000000000000000000-parent00";
const PARENT_ITERATOR: &str = "parent-shard-iterator";
/// Empty pages the parent serves before its end.
const PARENT_PAGES: usize = 3;

type HookResult = Result<(), aws_smithy_runtime_api::box_error::BoxError>;

/// Which shard one request is for: the invented parent or a real one.
#[derive(Debug, Clone)]
struct ForParent(bool);

impl Storable for ForParent {
    type Storer = StoreReplace<Self>;
}

/// Shows every real shard as the child of a closed parent shard and serves that parent.
#[derive(Debug, Clone)]
struct SplitStream {
    /// `GetRecords` in the order sent: `true` for the parent.
    reads: Arc<Mutex<Vec<bool>>>,
    /// The stream as `DescribeStream` answers it after the split.
    description: Value,
}

impl SplitStream {
    fn answer(ctx: &mut BeforeDeserializationInterceptorContextMut<'_>, body: &Value) {
        let body = body.to_string();
        let resp = ctx.response_mut();
        *resp.status_mut() = 200u16.try_into().expect("valid status");
        resp.headers_mut().remove("x-amz-crc32");
        resp.headers_mut()
            .insert("content-length", body.len().to_string());
        *resp.body_mut() = aws_smithy_types::body::SdkBody::from(body);
    }
}

impl Intercept for SplitStream {
    fn name(&self) -> &'static str {
        "SplitStream"
    }

    fn read_before_serialization(
        &self,
        ctx: &BeforeSerializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        let input = ctx.input();
        let parent = if let Some(i) = input.downcast_ref::<GetShardIteratorInput>() {
            i.shard_id() == Some(PARENT)
        } else if let Some(i) = input.downcast_ref::<GetRecordsInput>() {
            let parent = i.shard_iterator() == Some(PARENT_ITERATOR);
            self.reads.lock().unwrap().push(parent);
            parent
        } else {
            false
        };
        cfg.interceptor_state().store_put(ForParent(parent));
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        let op = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_string())
            .unwrap_or_default();
        let parent = cfg.load::<ForParent>().is_some_and(|p| p.0);
        match op.as_str() {
            "DescribeStream" => Self::answer(ctx, &self.description),
            // DynamoDB Local does not know the parent: its answers for it are the test's.
            "GetShardIterator" if parent => {
                Self::answer(ctx, &json!({ "ShardIterator": PARENT_ITERATOR }));
            }
            "GetRecords" if parent => {
                let served = self.reads.lock().unwrap().iter().filter(|p| **p).count();
                let page = if served <= PARENT_PAGES {
                    json!({ "Records": [], "NextShardIterator": PARENT_ITERATOR })
                } else {
                    json!({ "Records": [] })
                };
                Self::answer(ctx, &page);
            }
            _ => {}
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_shard_is_read_only_after_its_parent_ends() {
    let env = TestEnv::new("feed-lineage").await;
    enable_stream(&env.client, &env.table).await;
    let tables = [(env.table.as_str(), false)];
    let serial = AtomicI64::new(1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(random_transaction(&env.manager, &tables, &mut rng, 3, false, &serial).await);
    }
    let committed = committed_ids(&env.manager, &ids).await;
    let tx_table = env.manager.transactions_table();
    // The stream as Local describes it, its shards made children of the invented parent.
    let desc = env
        .client
        .describe_table()
        .table_name(&env.table)
        .send()
        .await
        .unwrap();
    let arn = desc
        .table()
        .unwrap()
        .latest_stream_arn()
        .unwrap()
        .to_string();
    let real = streams_client()
        .describe_stream()
        .stream_arn(&arn)
        .send()
        .await
        .unwrap();
    let real = real.stream_description().unwrap();
    let mut shards = vec![json!({
        "ShardId": PARENT,
        "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "2"}
    })];
    for sh in real.shards() {
        let range = sh.sequence_number_range().unwrap();
        let mut r = json!({ "StartingSequenceNumber": range.starting_sequence_number().unwrap() });
        if let Some(end) = range.ending_sequence_number() {
            r["EndingSequenceNumber"] = json!(end);
        }
        shards.push(json!({
            "ShardId": sh.shard_id().unwrap(),
            "ParentShardId": sh.parent_shard_id().unwrap_or(PARENT),
            "SequenceNumberRange": r
        }));
    }
    let split = SplitStream {
        reads: Arc::default(),
        description: json!({"StreamDescription": {
            "StreamArn": arn,
            "StreamLabel": real.stream_label().unwrap_or_default(),
            "StreamStatus": "ENABLED",
            "StreamViewType": "NEW_AND_OLD_IMAGES",
            "TableName": env.table,
            "Shards": shards
        }}),
    };
    let client = streams_client_with(split.clone());
    let mut feed = feed_through(env.client.clone(), tx_table, &[env.table.as_str()])
        .streams_client(client)
        .build()
        .unwrap();
    let got = drain(&mut feed).await;
    assert_clean(&got);
    let yielded: std::collections::HashSet<_> = got
        .iter()
        .filter_map(|c| c.transaction_id().cloned())
        .collect();
    assert_eq!(
        yielded, committed,
        "every committed transaction, from the child"
    );

    let reads = split.reads.lock().unwrap().clone();
    let parent_reads = reads.iter().filter(|p| **p).count();
    assert_eq!(
        parent_reads,
        PARENT_PAGES + 1,
        "the parent is read to its end"
    );
    let first_child = reads.iter().position(|p| !p).expect("the child is read");
    assert!(
        reads[first_child..].iter().all(|p| !p),
        "no child read before the parent's end: {reads:?}"
    );
}
