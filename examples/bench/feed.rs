//! The change feed's lag: transactions commit at a steady pace while a `ChangeFeed` follows the
//! table; each transaction's lag runs from its `commit` returning to the feed yielding it. Also the
//! `GetRecords` requests per shard per second the feed spent doing so.
//!
//! The transactions go through the scenario's target (raw Local or the profile); the feed's own
//! DynamoDB reads (the TX records) too. Its Streams reads go to DynamoDB Local directly: the
//! profile models DynamoDB, not DynamoDB Streams.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::config::SharedInterceptor;
use dynamodb_transactions::TransactionManager;
use dynamodb_transactions::fault::RequestCounter;
use dynamodb_transactions::feed::ChangeFeed;

use crate::Args;
use crate::common;
use crate::profile::{Counts, Target};
use crate::transactions::s;

/// The feed's poll interval in this scenario (its default).
pub const POLL: Duration = Duration::from_millis(250);

/// One run's figures.
#[derive(Debug, Clone)]
pub struct FeedFigures {
    pub transactions: usize,
    pub lag_p50: Duration,
    pub lag_p99: Duration,
    pub lag_max: Duration,
    /// `GetRecords` per shard per second over the run (one shard here).
    pub get_records_per_shard_s: f64,
    /// What the profile did over the run (`None`: raw).
    pub profile: Option<Counts>,
}

/// A Streams client for DynamoDB Local that counts its requests with `counter`.
fn streams_client(counter: RequestCounter) -> aws_sdk_dynamodbstreams::Client {
    let conf = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(aws_sdk_dynamodbstreams::config::BehaviorVersion::latest())
        .endpoint_url(std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("endpoint"))
        .region(aws_sdk_dynamodbstreams::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodbstreams::config::Credentials::new(
            "local", "local", None, None, "static",
        ))
        .interceptor(SharedInterceptor::new(counter))
        .build();
    aws_sdk_dynamodbstreams::Client::from_conf(conf)
}

/// Commits `--feed-transactions` transactions of 3 puts every 100 ms, with default settings (the
/// write-only fast path, its writes marked for the feed since the table has a stream), while a
/// feed follows the table, on `target`.
pub async fn run(args: &Args, prefix: &str, target: &Target) -> FeedFigures {
    let client = target.client(vec![]).await;
    let tag = if target.is_profiled() { "p" } else { "r" };
    let table = format!("{prefix}-feed-{tag}");
    let tx_table = format!("{prefix}-feedtx-{tag}");
    common::create_table(&client, &table).await;
    common::enable_stream(&client, &table).await;
    let manager = TransactionManager::builder(client.clone())
        .transactions_table(&tx_table)
        .images_table(format!("{prefix}-feedimg-{tag}"))
        .build();
    manager.create_tables().await.expect("tables");
    let counter = RequestCounter::new();
    let mut feed = ChangeFeed::builder(client.clone())
        .table(&table)
        .transactions_table(&tx_table)
        .streams_client(streams_client(counter.clone()))
        .from_start()
        .poll_interval(POLL)
        .stop_when_idle(Duration::from_secs(3))
        .build()
        .expect("feed");
    let before = target.counts();
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let consumer = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            while let Some(c) = feed.next().await.expect("feed") {
                if let Some(id) = c.transaction_id() {
                    seen.lock()
                        .expect("seen")
                        .insert(id.as_str().to_string(), Instant::now());
                }
            }
            started.elapsed()
        })
    };
    let mut committed = Vec::new();
    for i in 0..args.feed_transactions {
        let tx = manager.begin();
        for k in 0..3 {
            tx.put_item()
                .table_name(&table)
                .item("Id", s(&format!("i{}", (i * 3 + k) % 30)))
                .item("v", AttributeValue::N(i.to_string()))
                .send()
                .await
                .expect("put");
        }
        let id = tx.id().as_str().to_string();
        tx.commit().await.expect("commit");
        committed.push((id, Instant::now()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ran = consumer.await.expect("consumer");
    let profile = target.counts_since(before);
    let mut lags: Vec<Duration> = {
        let seen = seen.lock().expect("seen");
        committed
            .iter()
            .map(|(id, at)| {
                seen.get(id)
                    .expect("every commit yielded")
                    .saturating_duration_since(*at)
            })
            .collect()
    };
    lags.sort();
    common::drop_tables(
        &client,
        &[table, tx_table, format!("{prefix}-feedimg-{tag}")],
    )
    .await;
    FeedFigures {
        transactions: lags.len(),
        lag_p50: common::percentile(&lags, 50.0),
        lag_p99: common::percentile(&lags, 99.0),
        lag_max: lags.last().copied().unwrap_or_default(),
        get_records_per_shard_s: counter.get("GetRecords") as f64 / ran.as_secs_f64(),
        profile,
    }
}

/// The feed scenario on raw Local and, with `--profile`, through it.
pub async fn bench_feed(
    args: &Args,
    prefix: &str,
    settings: Option<&dynamodb_transactions::fault::ProfileSettings>,
) -> (Option<FeedFigures>, Option<FeedFigures>) {
    let raw = run(args, prefix, &Target::raw()).await;
    let profiled = match settings {
        Some(s) => Some(run(args, prefix, &Target::profiled(s)).await),
        None => None,
    };
    (Some(raw), profiled)
}

/// The report's table: one row per target.
pub fn table(raw: &FeedFigures, profiled: Option<&FeedFigures>) -> String {
    let mut out = format!(
        "| change feed (poll {} ms) | transactions | lag p50 | lag p99 | lag max | GetRecords per shard per s |\n|---|---|---|---|---|---|\n",
        POLL.as_millis()
    );
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    for (name, f) in [
        ("DynamoDB Local", Some(raw)),
        ("through the profile", profiled),
    ] {
        if let Some(f) = f {
            out.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {:.1} |\n",
                f.transactions,
                ms(f.lag_p50),
                ms(f.lag_p99),
                ms(f.lag_max),
                f.get_records_per_shard_s
            ));
        }
    }
    let met = [Some(raw), profiled].into_iter().flatten().all(|f| {
        f.lag_p50 <= POLL + Duration::from_millis(100)
            && f.get_records_per_shard_s <= 1.0 / POLL.as_secs_f64() + 0.5
    });
    out.push_str(&format!(
        "\n- Goal: lag p50 ≤ one poll interval plus one `GetRecords` round trip (taken as 100 ms), at most one `GetRecords` per shard per poll interval: **{}**\n",
        if met { "met" } else { "not met" }
    ));
    out
}

/// The figures as JSON fields: `feed_lag_p50_ms`, `feed_lag_p99_ms`, `feed_lag_max_ms`,
/// `feed_get_records_per_shard_s`, `feed_transactions`.
pub fn json_fields(f: &FeedFigures) -> Vec<String> {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    vec![
        format!("\"feed_transactions\":{}", f.transactions),
        format!("\"feed_lag_p50_ms\":{}", ms(f.lag_p50)),
        format!("\"feed_lag_p99_ms\":{}", ms(f.lag_p99)),
        format!("\"feed_lag_max_ms\":{}", ms(f.lag_max)),
        format!(
            "\"feed_get_records_per_shard_s\":{:.2}",
            f.get_records_per_shard_s
        ),
    ]
}
