//! The performance goals checked against this run (DynamoDB Local as it answers).

use std::fmt::Write as _;

use crate::contention::{ContentionFigures, ContentionResults};
use crate::locks::{self, LockResults};
use crate::report::num;
use crate::transactions::{Kind, Row};

/// Throughput of npm `dynamodb-lock-client` 0.7.3 FailClosed under 16 contenders, measured
/// elsewhere on DynamoDB Local (docs/PERFORMANCE.md, peer locks): the queue lock's target.
const PEER_FAIL_CLOSED_ACQ_PER_S: f64 = 56.0;

fn mark(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

pub fn goals(rows: &[Row], locks: &LockResults, contention: &[ContentionFigures]) -> String {
    let mut out = String::new();
    let updates: Vec<&Row> = rows.iter().filter(|r| r.kind == Kind::Update).collect();
    let find = |kind: Kind, n: usize| rows.iter().find(|r| r.kind == kind && r.n == n);
    if !updates.is_empty() {
        let detail: Vec<String> = updates
            .iter()
            .map(|r| format!("N={}: {} ≤ {}", r.n, num(r.lib.requests()), 2 * r.n + 8))
            .collect();
        let ok = updates
            .iter()
            .all(|r| r.lib.requests() <= (2 * r.n + 8) as f64);
        let _ = writeln!(
            out,
            "- Requests per N-item update transaction ≤ 2N + 8: **{}** ({})",
            mark(ok),
            detail.join(", ")
        );
        let small: Vec<&&Row> = updates.iter().filter(|r| r.n <= 100).collect();
        let detail: Vec<String> = small
            .iter()
            .map(|r| format!("N={}: {}", r.n, r.lib.path_median()))
            .collect();
        let _ = writeln!(
            out,
            "- Critical path ≤ 8 round trips for N ≤ 100: **{}** ({})",
            mark(small.iter().all(|r| r.lib.path_median() <= 8)),
            detail.join(", ")
        );
    }
    if let Some(r) = find(Kind::Update, 25)
        && let Some(nat) = &r.native
    {
        let ratio = r.lib.pct(50.0) / nat.pct(50.0);
        let _ = writeln!(
            out,
            "- Commit latency at N = 25 within 3× native: **{}** ({:.1} ms vs {:.1} ms, {:.2}×)",
            mark(ratio <= 3.0),
            r.lib.pct(50.0),
            nat.pct(50.0),
            ratio
        );
        if let Some(l) = &r.locking {
            let ratio = l.pct(50.0) / nat.pct(50.0);
            // The same run's floor for two requests that each write every item.
            let floor = r
                .native_twice
                .as_ref()
                .map(|t| {
                    format!(
                        "; two native requests in a row: {:.1} ms, {:.2}× native, the locking protocol {:.2}× that",
                        t.pct(50.0),
                        t.pct(50.0) / nat.pct(50.0),
                        l.pct(50.0) / t.pct(50.0)
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "- Goal: locking protocol at N = 25 ≤ 2.0× native p50 and ≤ 3 requests: **{}** ({:.2}×, {} requests{floor})",
                mark(ratio <= 2.0 && l.requests() <= 3.0),
                ratio,
                num(l.requests())
            );
        }
    }
    if let Some(r) = find(Kind::Update, 1000) {
        let _ = writeln!(
            out,
            "- A 1,000-item transaction commits: **{}** ({} committed, p50 {:.0} ms); goal ≤ 60 requests: **{}** ({})",
            mark(r.lib.txs > 0),
            r.lib.txs,
            r.lib.pct(50.0),
            mark(r.lib.requests() <= 60.0),
            num(r.lib.requests())
        );
        // The same run's apply-before-commit driver (every write applied before the commit, with
        // batched locks) is measured beside, for scale.
        if let Some(a) = &r.apply_first {
            let _ = writeln!(
                out,
                "- Goal: N = 1,000 p50 ≤ 650 ms: **{}** ({:.0} ms; {:.0} ms applying before the commit in this run, {:.2}×)",
                mark(r.lib.pct(50.0) <= 650.0),
                r.lib.pct(50.0),
                a.pct(50.0),
                r.lib.pct(50.0) / a.pct(50.0)
            );
        }
    }
    // Reads' critical paths are judged with default settings; requests with `LockThenRecord`
    // (the row's other driver), which sends the fewest.
    if let Some(r) = find(Kind::Transfer, 2) {
        let _ = writeln!(
            out,
            "- Goal: transfer (2 reads, 2 writes) critical path ≤ 3 by default: **{}** ({}, {} requests; lock then record: path {}, {} requests)",
            mark(r.lib.path_median() <= 3),
            r.lib.path_median(),
            num(r.lib.requests()),
            r.alt.as_ref().map_or(0, |a| a.path_median()),
            r.alt
                .as_ref()
                .map_or("—".to_string(), |a| num(a.requests()))
        );
    }
    if let Some(r) = find(Kind::Read, 10) {
        let _ = writeln!(
            out,
            "- Goal: read lock N = 10 critical path ≤ N + 1 by default: **{}** ({}, {} requests)",
            mark(r.lib.path_median() <= 11),
            r.lib.path_median(),
            num(r.lib.requests())
        );
        if let Some(a) = r.alt.as_ref() {
            let _ = writeln!(
                out,
                "- Goal: read lock N = 10 requests ≤ N + 2 with lock then record: **{}** ({}, path {})",
                mark(a.requests() <= 12.0),
                num(a.requests()),
                a.path_median()
            );
        }
    }
    let counter = contention.iter().find(|c| c.mode == "counter");
    for c in contention.iter().filter(|c| c.mode != "counter") {
        let goodput_ok = counter.is_none_or(|k| c.tx_per_s >= k.tx_per_s);
        let _ = writeln!(
            out,
            "- Goal: tickets from {}: goodput ≥ the counter's, max attempts ≤ 3, no ticket requests: **{}** ({:.1} tx/s, max {}, {:.2} ticket requests / tx)",
            c.mode,
            mark(goodput_ok && c.attempts.max() <= 3.0 && c.ticket_requests == 0.0),
            c.tx_per_s,
            c.attempts.max(),
            c.ticket_requests
        );
    }
    let (uq, ul) = (
        locks.uncontended(locks::QUEUE),
        locks.uncontended(locks::LEASE),
    );
    if let (Some(q), Some(l)) = (uq, ul) {
        let _ = writeln!(
            out,
            "- Goal: queue lock uncontended ≤ 2 requests and p50 ≤ the lease lock's: **{}** ({} requests, {:.1} ms vs {:.1} ms)",
            mark(q.requests <= 2.0 && q.cycle.pct(50.0) <= l.cycle.pct(50.0)),
            num(q.requests),
            q.cycle.pct(50.0),
            l.cycle.pct(50.0)
        );
    }
    if let Some(q) = locks.contended(locks::QUEUE) {
        let handoff = q.handoff.pct(50.0);
        let _ = writeln!(
            out,
            "- Goal: queue lock under contention ≥ {PEER_FAIL_CLOSED_ACQ_PER_S} acquisitions/s, handoff p50 ≤ 10 ms, ≤ 20 reads per waiter per second, worst wait ≤ 2× ideal: **{}** ({:.1}/s, {:.1} ms, {:.1} reads/s, {:.0} ms vs ideal {:.0} ms)",
            mark(
                q.acq_per_s >= PEER_FAIL_CLOSED_ACQ_PER_S
                    && handoff <= 10.0
                    && q.reads_per_waiter_s <= 20.0
                    && q.wait.max() <= 2.0 * q.wait_max_ideal_ms
            ),
            q.acq_per_s,
            handoff,
            q.reads_per_waiter_s,
            q.wait.max(),
            q.wait_max_ideal_ms
        );
    }
    out
}

/// The hot-item goals (docs/PROTOCOL.md "Contention"), checked against one pass: transfers in
/// either read order with p99 ≤ 3× p50, goodput ≥ 1.2× `baseline_lowest_first` (the lowest-first
/// goodput the goals were set against), at most 2 attempts, no `run` giving up, ≤ 20 reads per
/// waiter per second (their workers with a manager each, and sharing one); the hot counter (its workers with a manager each, and sharing one) at
/// ≥ 0.8× its physical bound, p99 wait ≤ 2× its FIFO ideal, and against its native optimistic
/// equivalent (retried until it commits, by default) ≥ 1.0× goodput and ≤ 0.5× p99.
pub fn hot_goals(c: &ContentionResults, baseline_lowest_first: Option<f64>) -> String {
    let mut out = String::new();
    for name in [
        "transfer, lowest first",
        "transfer, from then to",
        "transfer, lowest first, one manager",
        "transfer, from then to, one manager",
    ] {
        let Some(f) = c.hot(name) else { continue };
        let ratio = f.latency.pct(99.0) / f.latency.pct(50.0);
        let base = baseline_lowest_first.unwrap_or(f64::NAN);
        let ok = ratio <= 3.0
            && f.tx_per_s >= 1.2 * base
            && f.attempts.max() <= 2.0
            && f.gave_up == 0
            && f.reads_per_waiter_s <= 20.0;
        let _ = writeln!(
            out,
            "- Goal: {name}: p99 ≤ 3× p50, goodput ≥ 1.2× {base:.1} tx/s, max attempts ≤ 2, no `run` giving up, ≤ 20 reads / waiter / s: **{}** (p99 {:.1}× p50, {:.1} tx/s, max {}, {} gave up, {:.1} reads / waiter / s)",
            mark(ok),
            ratio,
            f.tx_per_s,
            f.attempts.max(),
            f.gave_up,
            f.reads_per_waiter_s
        );
    }
    for (name, f) in ["hot counter", "hot counter, one manager"]
        .into_iter()
        .filter_map(|name| Some((name, c.hot(name)?)))
    {
        let bound = f.bound_per_s.unwrap_or(f64::NAN);
        let ideal = f.ideal.pct(99.0);
        let native = c.hot("hot counter, native optimistic");
        let (n_tx, n_p99) =
            native.map_or((f64::NAN, f64::NAN), |n| (n.tx_per_s, n.latency.pct(99.0)));
        let ok = f.tx_per_s >= 0.8 * bound
            && f.wait.pct(99.0) <= 2.0 * ideal
            && f.tx_per_s >= n_tx
            && f.latency.pct(99.0) <= 0.5 * n_p99;
        let _ = writeln!(
            out,
            "- Goal: {name}: goodput ≥ 0.8× the physical bound, p99 wait ≤ 2× the FIFO ideal, goodput ≥ native optimistic's, p99 ≤ 0.5× its: **{}** ({:.1} tx/s vs bound {:.1}; wait p99 {:.0} ms vs ideal {:.0} ms; native {:.1} tx/s, p99 {:.0} ms vs {:.0} ms)",
            mark(ok),
            f.tx_per_s,
            bound,
            f.wait.pct(99.0),
            ideal,
            n_tx,
            f.latency.pct(99.0),
            n_p99
        );
    }
    out
}

/// The lowest-first transfer's goodput (default settings) on DynamoDB Local when the hot-item
/// goals were set (the run before `run_relocks_reads`; 2 cores shared with other builds).
pub const HOT_BASELINE_TX_PER_S: Option<f64> = Some(29.1);
/// The same through the DynamoDB profile.
pub const HOT_BASELINE_TX_PER_S_PROFILE: Option<f64> = Some(13.6);
