//! Lag and read rate: from a commit returned to its transaction yielded, and `GetRecords` per
//! shard per second, with the feed following a table while transactions commit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dynamodb_transactions::fault::RequestCounter;
use dynamodb_transactions::feed::ChangeFeed;

use crate::common::TestEnv;
use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_is_yielded_within_a_poll_interval_and_a_round_trip() {
    let env = TestEnv::new("feed-lag").await;
    enable_stream(&env.client, &env.table).await;
    let poll = Duration::from_millis(250);
    let counter = RequestCounter::new();
    let streams = streams_client_with(counter.clone());
    let mut feed = ChangeFeed::builder(crate::common::client())
        .table(&env.table)
        .transactions_table(env.manager.transactions_table())
        .streams_client(streams)
        .from_start()
        .poll_interval(poll)
        .stop_when_idle(Duration::from_secs(3))
        .build()
        .unwrap();
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let consumer = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            while let Some(c) = feed.next().await.unwrap() {
                if let Some(id) = c.transaction_id() {
                    seen.lock()
                        .unwrap()
                        .insert(id.as_str().to_string(), Instant::now());
                }
            }
            started.elapsed()
        })
    };
    let mut committed = Vec::new();
    for i in 0..20 {
        let tx = env.manager.begin();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(&format!("i{}", i % 5)))
            .item("v", n(i))
            .send()
            .await
            .unwrap();
        let id = tx.id().as_str().to_string();
        tx.commit().await.unwrap();
        committed.push((id, Instant::now()));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let ran = consumer.await.unwrap();
    let seen = seen.lock().unwrap();
    let mut lags: Vec<Duration> = committed
        .iter()
        .map(|(id, at)| {
            seen.get(id)
                .expect("every commit yielded")
                .duration_since(*at)
        })
        .collect();
    lags.sort();
    let p50 = lags[lags.len() / 2];
    let max = lags[lags.len() - 1];
    let reads = counter.get("GetRecords");
    let per_second = reads as f64 / ran.as_secs_f64();
    println!(
        "lag p50 {p50:?}, max {max:?} (poll interval {poll:?}); GetRecords {reads} in {ran:?}: \
         {per_second:.1}/s for one shard"
    );
    // Generous for a loaded machine: the bound DynamoDB promises is one interval plus a round
    // trip and a record read.
    assert!(p50 <= poll + Duration::from_secs(1), "p50 {p50:?}");
    assert!(
        per_second <= 1.0 / poll.as_secs_f64() + 0.5,
        "at most one GetRecords per poll interval: {per_second:.1}/s"
    );
}
