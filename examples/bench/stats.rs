//! Aggregates: latency and count distributions (HdrHistogram), and what one driver did over the
//! measured transactions of one row.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::profile::Counts;
use crate::recorder::{Rec, busy, critical_path, write_units};

/// A distribution of non-negative values (latencies in ms, round trips, attempts), kept by
/// HdrHistogram with three significant digits; latencies are recorded in microseconds.
#[derive(Debug, Clone)]
pub struct Dist {
    hist: Histogram<u64>,
    /// Recorded values are multiplied by this before they go in (1000 for ms → µs).
    scale: f64,
}

impl Dist {
    /// Latencies in milliseconds (1 µs to 1 hour).
    pub fn millis() -> Self {
        Self::with_scale(1000.0)
    }

    /// Whole counts (round trips, attempts).
    pub fn counts() -> Self {
        Self::with_scale(1.0)
    }

    fn with_scale(scale: f64) -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds"),
            scale,
        }
    }

    pub fn record(&mut self, v: f64) {
        self.hist.saturating_record((v * self.scale).round() as u64);
    }

    pub fn record_duration(&mut self, d: Duration) {
        self.record(d.as_secs_f64() * 1000.0);
    }

    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// The `p`-th percentile (0..=100); NaN when empty.
    pub fn pct(&self, p: f64) -> f64 {
        if self.hist.is_empty() {
            return f64::NAN;
        }
        self.hist.value_at_quantile(p / 100.0) as f64 / self.scale
    }

    pub fn min(&self) -> f64 {
        if self.hist.is_empty() {
            return f64::NAN;
        }
        self.hist.min() as f64 / self.scale
    }

    pub fn max(&self) -> f64 {
        if self.hist.is_empty() {
            return f64::NAN;
        }
        self.hist.max() as f64 / self.scale
    }

    pub fn mean(&self) -> f64 {
        if self.hist.is_empty() {
            return f64::NAN;
        }
        self.hist.mean() / self.scale
    }
}

/// What one driver did over the measured transactions of one row.
#[derive(Debug, Clone)]
pub struct Stats {
    pub txs: usize,
    pub ops: BTreeMap<String, u64>,
    /// Failed requests per operation (conditions that did not hold, conflicts).
    pub failed: BTreeMap<String, u64>,
    pub requests: u64,
    pub units: u64,
    pub paths: Dist,
    pub latency: Dist,
    /// Sum of request latencies per operation, ms.
    pub op_ms: BTreeMap<String, f64>,
    /// Sum over transactions of the time no request of it was in flight, ms.
    pub idle_ms: f64,
    /// Measured transactions that failed (not in the figures above).
    pub errors: usize,
    /// What the profile did during the measured transactions (zero when raw).
    pub profile: Counts,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            txs: 0,
            ops: BTreeMap::new(),
            failed: BTreeMap::new(),
            requests: 0,
            units: 0,
            paths: Dist::counts(),
            latency: Dist::millis(),
            op_ms: BTreeMap::new(),
            idle_ms: 0.0,
            errors: 0,
            profile: Counts::default(),
        }
    }
}

impl Stats {
    pub fn add(&mut self, recs: &[Rec], elapsed: Duration) {
        self.txs += 1;
        for r in recs {
            *self.ops.entry(r.op.clone()).or_default() += 1;
            if !r.ok {
                *self.failed.entry(r.op.clone()).or_default() += 1;
            }
            *self.op_ms.entry(r.op.clone()).or_default() +=
                r.end.duration_since(r.start).as_secs_f64() * 1000.0;
            self.units += u64::from(write_units(r));
        }
        self.idle_ms += (elapsed.as_secs_f64() - busy(recs).as_secs_f64()).max(0.0) * 1000.0;
        self.requests += recs.len() as u64;
        self.paths.record(critical_path(recs) as f64);
        self.latency.record_duration(elapsed);
    }

    pub fn per_tx(&self, v: u64) -> f64 {
        v as f64 / self.txs.max(1) as f64
    }

    pub fn requests(&self) -> f64 {
        self.per_tx(self.requests)
    }

    pub fn units(&self) -> f64 {
        self.per_tx(self.units)
    }

    pub fn path_median(&self) -> usize {
        let p = self.paths.pct(50.0);
        if p.is_nan() { 0 } else { p as usize }
    }

    pub fn pct(&self, p: f64) -> f64 {
        self.latency.pct(p)
    }
}
