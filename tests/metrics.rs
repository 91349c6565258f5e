//! Metrics and tracing: the counters, histograms and span fields the library emits, observed with
//! an in-memory recorder and a capturing tracing layer against DynamoDB Local.
//!
//! Each test installs its recorder (and subscriber) for its own thread only, so tests running in
//! parallel do not see each other's metrics. `#[tokio::test]` runs on a current-thread runtime, so
//! tasks the library spawns (heartbeats, drop rollbacks) run on that thread too and are seen.
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use dynamodb_transactions::lock::lease::LeaseLock;
use dynamodb_transactions::lock::queue::QueueLock;
use dynamodb_transactions::lock::{Wait, create_lock_table};
use dynamodb_transactions::sweeper::SweepOptions;
use dynamodb_transactions::{ContentionPolicy, Error};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What a snapshot holds: per metric name and label set, a counter's increase since the last
/// snapshot, or a histogram's number of samples.
struct Seen(Vec<(String, Labels, DebugValue)>);

type Labels = Vec<(String, String)>;

impl Seen {
    fn take(s: &Snapshotter) -> Seen {
        Seen(
            s.snapshot()
                .into_vec()
                .into_iter()
                .map(|(k, _, _, v)| {
                    let key = k.key();
                    let labels = key
                        .labels()
                        .map(|l| (l.key().to_string(), l.value().to_string()))
                        .collect();
                    (key.name().to_string(), labels, v)
                })
                .collect(),
        )
    }

    /// The sum of counter `name` over the label sets that include `labels`.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .map(|v| match v {
                DebugValue::Counter(c) => *c,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    /// The number of samples of histogram `name` over the label sets that include `labels`.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.matching(name, labels)
            .map(|v| match v {
                DebugValue::Histogram(h) => h.len(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .sum()
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a DebugValue> + 'a {
        self.0
            .iter()
            .filter(move |(n, ls, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
    }

    /// Every name starts with the crate's prefix and no label value looks like a transaction id.
    fn assert_well_named(&self) {
        for (name, labels, _) in &self.0 {
            assert!(name.starts_with("dynamodb_tx_"), "{name}");
            for (k, v) in labels {
                assert!(
                    v.len() < 32 && !uuid_like(v),
                    "{name}: label {k}={v} is not from a small fixed set"
                );
            }
        }
    }
}

fn uuid_like(v: &str) -> bool {
    v.len() == 36 && v.chars().filter(|&c| c == '-').count() == 4
}

#[tokio::test]
async fn a_commit_counts_its_path_and_times_its_phases() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::new("mt-commit").await;
    Seen::take(&snap); // forget table creation

    let tx = env.manager.begin();
    for k in ["a", "b"] {
        tx.put_item()
            .table_name(&env.table)
            .set_item(Some(item(&[("Id", s(k)), ("v", n(1))])))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter("dynamodb_tx_commits_total", &[("path", "one_request")]),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_commits_total", &[]), 1);
    assert_eq!(seen.counter("dynamodb_tx_rollbacks_total", &[]), 0);
    assert_eq!(seen.counter("dynamodb_tx_commit_errors_total", &[]), 0);
    // The two inserts' batch met them absent and went again with their placeholders.
    assert_eq!(
        seen.counter(
            "dynamodb_tx_retries_total",
            &[("kind", "lock_batch_absent")]
        ),
        1
    );
    assert_eq!(
        seen.counter(
            "dynamodb_tx_retries_total",
            &[("kind", "lock_batch_fallback")]
        ),
        0
    );
    // (A one-request commit unlocks the items in its own request: no separate settle phase.)
    for phase in ["record", "lock", "commit"] {
        assert!(
            seen.samples("dynamodb_tx_phase_seconds", &[("phase", phase)]) >= 1,
            "no {phase} sample"
        );
    }

    // The write-only fast path is counted as such.
    let fast = TestEnv::with_settings("mt-fast", |s| s.write_only_fast_path = true).await;
    Seen::take(&snap);
    let tx = fast.manager.begin();
    tx.put_item()
        .table_name(&fast.table)
        .set_item(Some(item(&[("Id", s("f")), ("v", n(1))])))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let seen = Seen::take(&snap);
    assert_eq!(
        seen.counter("dynamodb_tx_commits_total", &[("path", "fast_path")]),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_commits_total", &[]), 1);
}

#[tokio::test]
async fn a_phased_commit_counts_the_writes_it_rolls_forward() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::with_settings("mt-roll", |s| s.one_shot_max_items = 1).await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    Seen::take(&snap);
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = v + :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    // A condition only DynamoDB judges: applied before the commit.
    tx.put_item()
        .table_name(&env.table)
        .set_item(Some(item(&[("Id", s("b")), ("v", n(5))])))
        .condition_expression("v = :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter("dynamodb_tx_commits_total", &[("path", "phased")]),
        1
    );
    assert_eq!(
        seen.counter("dynamodb_tx_rolled_forward_writes_total", &[]),
        2
    );
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await,
        Some(item(&[("Id", s("a")), ("v", n(2))]))
    );
    assert_eq!(
        env.raw_get(&env.table, &key("b")).await,
        Some(item(&[("Id", s("b")), ("v", n(5))]))
    );
}

#[tokio::test]
async fn a_false_condition_counts_a_rollback_and_a_commit_error() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::new("mt-cond").await;
    Seen::take(&snap);

    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .set_item(Some(item(&[("Id", s("c")), ("v", n(1))])))
        .condition_expression("attribute_exists(Id)")
        .send()
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::ConditionFailed { .. }), "{err:?}");
    assert_eq!(env.raw_get(&env.table, &key("c")).await, None);

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter(
            "dynamodb_tx_rollbacks_total",
            &[("cause", "condition_failed")]
        ),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_rollbacks_total", &[]), 1);
    assert_eq!(
        seen.counter(
            "dynamodb_tx_commit_errors_total",
            &[("kind", "condition_failed")]
        ),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_commits_total", &[]), 0);

    // An explicit rollback is counted as requested.
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .send()
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let seen = Seen::take(&snap);
    assert_eq!(
        seen.counter("dynamodb_tx_rollbacks_total", &[("cause", "requested")]),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_rollbacks_total", &[]), 1);
}

#[tokio::test]
async fn a_wound_and_a_wait_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::with_settings("mt-wound", |s| {
        s.contention = ContentionPolicy::RollBackOthers
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    Seen::take(&snap);

    let holder = env.manager.begin();
    holder
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    let other = env.manager.begin();
    other
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    let err = holder.commit().await.unwrap_err();
    assert!(err.is_rolled_back(), "{err:?}");
    other.commit().await.unwrap();

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(seen.counter("dynamodb_tx_contention_wounds_total", &[]), 1);
    assert_eq!(seen.counter("dynamodb_tx_contention_waits_total", &[]), 0);
    // The wound is the holder's rollback.
    assert_eq!(
        seen.counter("dynamodb_tx_rollbacks_total", &[("cause", "wounded")]),
        1
    );
    assert_eq!(
        seen.counter(
            "dynamodb_tx_commit_errors_total",
            &[("kind", "rolled_back")]
        ),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_commits_total", &[]), 1);

    // Ordered contention: a younger transaction meeting an older one's lock waits.
    let ordered = TestEnv::with_settings("mt-wait", |s| {
        s.contention = ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(30),
            ticket_at_begin: true,
        };
        s.lock_wait = Duration::from_millis(300);
    })
    .await;
    ordered
        .raw_put(&ordered.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    Seen::take(&snap);
    let old = ordered.manager.begin();
    old.get_item()
        .table_name(&ordered.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    let young = ordered.manager.begin();
    young
        .put_item()
        .table_name(&ordered.table)
        .set_item(Some(item(&[("Id", s("y")), ("v", n(1))])))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    let err = young
        .get_item()
        .table_name(&ordered.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ItemLocked { .. }), "{err:?}");
    young.rollback().await.unwrap();
    old.commit().await.unwrap();
    let seen = Seen::take(&snap);
    assert!(seen.counter("dynamodb_tx_contention_waits_total", &[]) >= 1);
    assert_eq!(seen.counter("dynamodb_tx_contention_wounds_total", &[]), 0);
}

#[tokio::test]
async fn a_sweep_counts_its_actions() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::new("mt-sweep").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;

    // A transaction left pending (its handle dropped; the test env does not roll back on drop).
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    drop(tx);
    Seen::take(&snap);

    let report = env
        .manager
        .sweep(&SweepOptions::new().rollback_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(report.rolled_back.len(), 1, "{report:?}");

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter(
            "dynamodb_tx_sweeper_actions_total",
            &[("action", "rolled_back")]
        ),
        1
    );
    assert_eq!(
        seen.counter("dynamodb_tx_rollbacks_total", &[("cause", "sweeper")]),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_rollbacks_total", &[]), 1);

    // A dry run counts nothing.
    env.manager
        .sweep(&SweepOptions::finish_everything_now().dry_run(true))
        .await
        .unwrap();
    assert_eq!(
        Seen::take(&snap).counter("dynamodb_tx_sweeper_actions_total", &[]),
        0
    );
}

#[tokio::test]
async fn a_dropped_handle_is_counted_and_rolled_back_in_the_background() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::with_settings("mt-drop", |s| s.rollback_on_drop = true).await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    Seen::take(&snap);

    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    drop(tx);
    // The background rollback runs on this (current-thread) runtime: wait for the item's lock to go.
    let mut waited = 0;
    while has_tx_attrs(&env.raw_get(&env.table, &key("k")).await.unwrap()) {
        waited += 1;
        assert!(waited < 200, "the dropped handle was never rolled back");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let seen = Seen::take(&snap);
    assert_eq!(seen.counter("dynamodb_tx_dropped_handles_total", &[]), 1);
    assert_eq!(
        seen.counter("dynamodb_tx_rollbacks_total", &[("cause", "requested")]),
        1
    );
}

#[tokio::test]
async fn lock_acquisitions_releases_and_timeouts_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let client = client();
    let guard = TableGuard::default();
    let table = unique_name("mt-locks");
    guard.add(&table);
    create_lock_table(&client, &table).await.unwrap();
    Seen::take(&snap);

    let queue = QueueLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_millis(1500))
        .heartbeat_interval(Duration::from_millis(300))
        .clock_skew_margin(Duration::from_millis(300))
        .build()
        .unwrap();
    let g = queue
        .acquire("q", Wait::For(Duration::from_secs(5)))
        .await
        .unwrap();
    let timed_out = queue
        .acquire("q", Wait::For(Duration::from_millis(200)))
        .await;
    assert!(timed_out.is_err());
    // A waiter queued behind the holder gets the lock handed over when it is released.
    let waiter = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.acquire("q", Wait::For(Duration::from_secs(30))).await })
    };
    let mut polls = 0;
    while queue_rows(&client, &table, "q").await < 2 {
        polls += 1;
        assert!(polls < 400, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    g.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();

    let lease = LeaseLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_millis(1500))
        .heartbeat_interval(Duration::from_millis(300))
        .clock_skew_margin(Duration::from_millis(300))
        .build()
        .unwrap();
    let l = lease
        .acquire("l", Wait::For(Duration::from_secs(5)))
        .await
        .unwrap();
    let other = LeaseLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_millis(1500))
        .clock_skew_margin(Duration::from_millis(300))
        .build()
        .unwrap();
    assert!(
        other
            .acquire("l", Wait::For(Duration::from_millis(200)))
            .await
            .is_err()
    );
    l.release().await.unwrap();

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter(
            "dynamodb_tx_lock_acquisitions_total",
            &[("lock", "queue"), ("how", "handoff")]
        ),
        1
    );
    assert_eq!(
        seen.counter("dynamodb_tx_lock_releases_total", &[("lock", "queue")]),
        2
    );
    assert_eq!(
        seen.counter("dynamodb_tx_lock_releases_total", &[("lock", "lease")]),
        1
    );
    for lock in ["queue", "lease"] {
        assert_eq!(
            seen.counter(
                "dynamodb_tx_lock_acquisitions_total",
                &[("lock", lock), ("how", "free")]
            ),
            1,
            "{lock}"
        );
        assert_eq!(
            seen.counter(
                "dynamodb_tx_lock_acquisitions_total",
                &[("lock", lock), ("how", "takeover")]
            ),
            0,
            "{lock}"
        );
        assert_eq!(
            seen.counter("dynamodb_tx_lock_timeouts_total", &[("lock", lock)]),
            1,
            "{lock}"
        );
    }
    assert_eq!(seen.counter("dynamodb_tx_lock_lost_total", &[]), 0);
}

/// How many queue entries lock `name` has (holder and waiters), read consistently: the queue
/// lives in the lock's counter item, one `w#<owner>` attribute per entry.
async fn queue_rows(client: &aws_sdk_dynamodb::Client, table: &str, name: &str) -> usize {
    client
        .get_item()
        .table_name(table)
        .key("pk", s(name))
        .key("sk", s("#ctr"))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item()
        .map_or(0, |i| i.keys().filter(|k| k.starts_with("w#")).count())
}

/// The fields of every closed span named `commit` or `rollback`, as `name -> field -> value`.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(String, SpanFields)>>>);

type SpanFields = HashMap<String, String>;

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

struct Open(Mutex<HashMap<String, String>>);

impl<S> tracing_subscriber::Layer<S> for Captured
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Open(Mutex::new(fields)));
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions().get::<Open>()
        {
            values.record(&mut Fields(&mut open.0.lock().unwrap()));
        }
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(open) = span.extensions().get::<Open>()
        {
            let fields = open.0.lock().unwrap().clone();
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_string(), fields));
        }
    }
}

impl Captured {
    fn spans(&self, name: &str) -> Vec<HashMap<String, String>> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .collect()
    }
}

#[tokio::test]
async fn a_failed_commit_span_carries_its_id_outcome_and_error_kind() {
    use tracing_subscriber::layer::SubscriberExt;
    // A global subscriber: a thread-local one (`set_default`) races with the other tests of this
    // binary over tracing's global callsite interest cache. Spans are told apart by their `tx`.
    static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    let captured = CAPTURED.get_or_init(|| {
        let c = Captured::default();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(c.clone()))
            .expect("no other global subscriber in this test binary");
        c
    });
    let env = TestEnv::new("mt-span").await;

    let tx = env.manager.begin();
    let id = tx.id().to_string();
    tx.put_item()
        .table_name(&env.table)
        .set_item(Some(item(&[("Id", s("c")), ("v", n(1))])))
        .condition_expression("attribute_exists(Id)")
        .send()
        .await
        .unwrap();
    assert!(tx.commit().await.is_err());

    let ok = env.manager.begin();
    let ok_id = ok.id().to_string();
    ok.put_item()
        .table_name(&env.table)
        .set_item(Some(item(&[("Id", s("d")), ("v", n(1))])))
        .send()
        .await
        .unwrap();
    ok.commit().await.unwrap();

    let rb = env.manager.begin();
    let rb_id = rb.id().to_string();
    rb.get_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .send()
        .await
        .unwrap();
    rb.rollback().await.unwrap();

    let commits = captured.spans("commit");
    let failed = commits
        .iter()
        .find(|f| f.get("tx") == Some(&id))
        .unwrap_or_else(|| panic!("no commit span for {id}: {commits:?}"));
    assert_eq!(
        failed.get("outcome").map(String::as_str),
        Some("rolled_back")
    );
    assert_eq!(
        failed.get("error.kind").map(String::as_str),
        Some("condition_failed")
    );
    let good = commits
        .iter()
        .find(|f| f.get("tx") == Some(&ok_id))
        .expect("a commit span for the committed transaction");
    assert_eq!(good.get("outcome").map(String::as_str), Some("committed"));
    assert_eq!(good.get("error.kind"), None);

    // `run`'s span says how its last attempt ended and how many attempts it made.
    let table = env.table.clone();
    let err = env
        .manager
        .run(async |tx| {
            tx.delete_item()
                .table_name(&table)
                .key("Id", s("never-there"))
                .condition_expression("attribute_exists(Id)")
                .send()
                .await?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ConditionFailed { .. }), "{err:?}");
    let runs = captured.spans("run");
    assert!(
        runs.iter().any(
            |f| f.get("outcome").map(String::as_str) == Some("rolled_back")
                && f.get("error.kind").map(String::as_str) == Some("condition_failed")
                && f.get("attempts").map(String::as_str) == Some("1")
        ),
        "{runs:?}"
    );

    let rollbacks = captured.spans("rollback");
    let rolled = rollbacks
        .iter()
        .find(|f| f.get("tx") == Some(&rb_id) && f.contains_key("outcome"))
        .unwrap_or_else(|| {
            panic!(
                "no rollback span for {rb_id}: {rollbacks:?} {:?}",
                captured.0.lock().unwrap()
            )
        });
    assert_eq!(
        rolled.get("outcome").map(String::as_str),
        Some("rolled_back")
    );
}
