//! Metrics and tracing: the counters, histograms and span fields the library emits, observed with
//! an in-memory recorder and a capturing tracing layer against DynamoDB Local.
//!
//! Each test installs its recorder (and subscriber) for its own thread only, so tests running in
//! parallel do not see each other's metrics. `#[tokio::test]` runs on a current-thread runtime, so
//! tasks the library spawns (heartbeats, drop rollbacks) run on that thread too and are seen.
#[path = "../common/mod.rs"]
mod common;

mod locks;
mod spans;
mod transactions;

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
