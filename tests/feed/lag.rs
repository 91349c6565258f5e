//! Following a table while transactions commit: every commit yielded, `GetRecords` per shard per
//! second within the poll interval's bound, and the lag from a commit returned to its transaction
//! yielded printed (its figures are the benchmark's: `examples/bench/feed.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dynamodb_transactions::fault::RequestCounter;
use dynamodb_transactions::feed::ChangeFeed;

use crate::common::TestEnv;
use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_commit_is_yielded_and_a_shard_is_read_at_most_once_per_poll_interval() {
    const COMMITS: usize = 20;
    let env = TestEnv::new("feed-lag").await;
    enable_stream(&env.client, &env.table).await;
    let poll = Duration::from_millis(250);
    let counter = RequestCounter::new();
    let streams = streams_client_with(counter.clone());
    // No idle stop: the consumer ends once it has every commit (a slow machine may pause the
    // committer for longer than any idle time); the lag's figures are the benchmark's
    // (`examples/bench/feed.rs`), this test only prints them.
    let mut feed = ChangeFeed::builder(crate::common::client())
        .table(&env.table)
        .transactions_table(env.manager.transactions_table())
        .streams_client(streams)
        .from_start()
        .poll_interval(poll)
        .build()
        .unwrap();
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let consumer = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            while seen.lock().unwrap().len() < COMMITS {
                let c = feed.next().await.unwrap().expect("the stream does not end");
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
    for i in 0..COMMITS {
        let tx = env.manager.begin();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(&format!("i{}", i % 5)))
            .item("v", n(i as i64))
            .send()
            .await
            .unwrap();
        let id = tx.id().as_str().to_string();
        tx.commit().await.unwrap();
        committed.push((id, Instant::now()));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let ran = match tokio::time::timeout(Duration::from_secs(120), consumer).await {
        Ok(ran) => ran.unwrap(),
        Err(_) => {
            let seen = seen.lock().unwrap();
            let missing: Vec<_> = committed
                .iter()
                .map(|(id, _)| id)
                .filter(|id| !seen.contains_key(*id))
                .collect();
            panic!("commits not yielded within 2 minutes: {missing:?}");
        }
    };
    let seen = seen.lock().unwrap();
    let mut lags: Vec<Duration> = committed
        .iter()
        .map(|(id, at)| {
            seen.get(id)
                .unwrap_or_else(|| panic!("{id} yielded"))
                .saturating_duration_since(*at)
        })
        .collect();
    assert_eq!(seen.len(), COMMITS, "only the transactions committed");
    lags.sort();
    let p50 = lags[lags.len() / 2];
    let max = lags[lags.len() - 1];
    let reads = counter.get("GetRecords");
    let per_second = reads as f64 / ran.as_secs_f64();
    println!(
        "lag p50 {p50:?}, max {max:?} (poll interval {poll:?}); GetRecords {reads} in {ran:?}: \
         {per_second:.1}/s for one shard"
    );
    // A bound a slow machine only lowers: records or not, a shard waits a poll interval between
    // reads (the half read of slack: the first and last reads of the run).
    assert!(
        per_second <= 1.0 / poll.as_secs_f64() + 0.5,
        "at most one GetRecords per poll interval: {per_second:.1}/s"
    );
}
