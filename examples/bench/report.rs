//! The report: Markdown tables for docs/PERFORMANCE.md, and the last line, one JSON object for
//! scripts (per-N maps keyed by N). With `--profile`, the same tables through the profile, what
//! the profile did per scenario, the two side by side, and in the JSON a `profile` object of the
//! same shape as the raw figures, `profile_settings` and `profile_stats`.

use std::fmt::Write as _;

use dynamodb_transactions::fault::ProfileSettings;

use crate::contention::{ContentionFigures, ContentionResults, NATIVE};
use crate::drivers::Driver;
use crate::locks::LockResults;
use crate::profile::{self, BRIEF_HEADER, Counts};
use crate::recorder::short_op;
use crate::stats::Stats;
use crate::transactions::{Kind, Row};
use crate::{Args, Results};

/// Formats a per-transaction mean: integer when it is one.
pub fn num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

fn f1(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else {
        format!("{v:.1}")
    }
}

fn path_text(s: &Stats) -> String {
    let (lo, hi, med) = (s.paths.min(), s.paths.max(), s.path_median());
    if lo == hi {
        format!("{med}")
    } else {
        format!("{med} ({lo}–{hi})")
    }
}

fn ops_text(s: &Stats) -> String {
    let mut parts = Vec::new();
    for (op, c) in &s.ops {
        let failed = match s.failed.get(op) {
            Some(&f) => format!(" ({} failed)", num(s.per_tx(f))),
            None => String::new(),
        };
        parts.push(format!("{} {}{failed}", num(s.per_tx(*c)), short_op(op)));
    }
    parts.join(" + ")
}

/// requests / units / path / p50 of one driver, or a dash.
fn brief(s: Option<&Stats>) -> String {
    s.map(|s| {
        format!(
            "{} / {} / {} / {}",
            num(s.requests()),
            num(s.units()),
            path_text(s),
            f1(s.pct(50.0))
        )
    })
    .unwrap_or_else(|| "—".into())
}

pub fn tx_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| op | N | requests by op (per tx) | requests | write units | critical path | p50 ms | p99 ms \
         | locking (fast path off): requests / WU / path / p50 ms \
         | per-item locks (writes) or locked reads (reads): requests / WU / path / p50 ms \
         | sequential: requests / WU / path / p50 ms \
         | native (transfer: optimistic, no library): WU / p50 ms | p50 / native | locking p50 / native | Java model: requests = path |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let native = r.native.as_ref().or(r.native_optimistic.as_ref());
        let ratio = |s: Option<&Stats>| match (s, native) {
            (Some(s), Some(nat)) => format!("{:.2}×", s.pct(50.0) / nat.pct(50.0)),
            _ => "—".into(),
        };
        let java = match r.kind {
            Kind::Update => format!("{}", 7 * r.n + 6),
            _ => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.kind.label(),
            r.n,
            ops_text(&r.lib),
            num(r.lib.requests()),
            num(r.lib.units()),
            path_text(&r.lib),
            f1(r.lib.pct(50.0)),
            f1(r.lib.pct(99.0)),
            brief(r.locking.as_ref()),
            brief(r.alt.as_ref()),
            brief(Some(&r.seq)),
            native
                .map(|s| format!("{} / {}", num(s.units()), f1(s.pct(50.0))))
                .unwrap_or_else(|| "—".into()),
            ratio(Some(&r.lib)),
            ratio(r.locking.as_ref()),
            java,
        );
    }
    out
}

/// Where the time goes: mean latency per request by operation, and the time with no request in
/// flight (client-side work and scheduling).
pub fn breakdown_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| op | N | driver | requests by op (per tx) | mean request latency by op, ms | no request in flight, ms per tx | p50 ms |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|\n");
    for r in rows {
        for (driver, st) in row_drivers(r) {
            let lat: Vec<String> = st
                .op_ms
                .iter()
                .map(|(op, ms)| format!("{} {:.2}", short_op(op), ms / st.ops[op] as f64))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.1} | {} |",
                r.kind.label(),
                r.n,
                driver.label(),
                ops_text(st),
                lat.join(", "),
                st.idle_ms / st.txs.max(1) as f64,
                f1(st.pct(50.0)),
            );
        }
    }
    out
}

pub fn lock_tables(args: &Args, locks: &LockResults) -> String {
    let mut out = String::new();
    out.push_str(
        "| lock, uncontended (acquire + release) | cycles | p50 ms | p99 ms | requests |\n",
    );
    out.push_str("|---|---|---|---|---|\n");
    for u in &locks.uncontended {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            u.name,
            u.cycle.len(),
            f1(u.cycle.pct(50.0)),
            f1(u.cycle.pct(99.0)),
            num(u.requests),
        );
    }
    let _ = writeln!(
        out,
        "\n| lock ({} contenders × {}, hold {} ms + counter get/put) | acquisitions | acquisitions/s | handoff p50 ms | handoff p99 ms | re-taken by the releaser | wait p50 ms | wait max ms | ideal max wait ms (position × hold) | mean hold ms | reads / waiter / s | requests / waiter / s | requests / acquisition | overlaps | counter exact |",
        args.contenders, args.rounds, args.hold_ms
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for c in &locks.contended {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} |",
            c.name,
            c.acquisitions,
            c.acq_per_s,
            f1(c.handoff.pct(50.0)),
            f1(c.handoff.pct(99.0)),
            c.reacquired,
            f1(c.wait.pct(50.0)),
            f1(c.wait.max()),
            f1(c.wait_max_ideal_ms),
            f1(c.hold_mean_ms),
            c.reads_per_waiter_s,
            c.requests_per_waiter_s,
            c.requests_per_acq,
            c.overlaps,
            c.counter_exact,
        );
    }
    out
}

pub fn contention_table(args: &Args, figs: &ContentionResults) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| tickets ({} workers, {} accounts, ordered policy) | transfers | tx/s (steady / overall) | attempts mean | attempts p99 | attempts max | p50 ms | p99 ms | requests / tx | ticket requests / tx | total conserved | gave up |",
        args.workers, args.accounts
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for f in figs.modes.iter().chain(&figs.native) {
        let name = match f.attempt_bound {
            Some(b) => format!("{NATIVE}: no library, at most {b} attempts"),
            None => f.mode.to_string(),
        };
        let ticket = if f.attempt_bound.is_some() {
            "—".to_string()
        } else {
            format!("{:.2}", f.ticket_requests)
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} / {:.1} | {:.2} | {} | {} | {} | {} | {:.1} | {} | {} | {} |",
            name,
            f.committed,
            f.tx_per_s,
            f.tx_per_s_overall,
            f.attempts.mean(),
            f.attempts.pct(99.0),
            f.attempts.max(),
            f1(f.latency.pct(50.0)),
            f1(f.latency.pct(99.0)),
            f.requests,
            ticket,
            f.total_conserved,
            f.gave_up,
        );
    }
    out
}

/// The hot items: the native transfer and the hot-item runs, each cell DynamoDB Local as it
/// answers, then through the profile when it ran. Goodput beside the physical bound (as many
/// holders at once as disjoint item sets fit, each for the mean hold); the wait (arrival → the
/// committing attempt's first read) beside its FIFO ideal (workers on a needed item at arrival ×
/// the mean hold).
pub fn hot_table(args: &Args, raw: &ContentionResults, p: Option<&ContentionResults>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| hot items ({} workers × {} transfers over {} accounts; {} workers × {} increments of one counter){} | done | goodput tx/s | physical bound tx/s | p50 ms | p99 ms | p99 / p50 | attempts max | gave up | wait p99 ms | FIFO ideal wait p99 ms | mean hold ms | reads / waiter / s | refused writes / waiter / s | requests / tx | conserved |",
        args.workers,
        args.transfers,
        args.accounts,
        args.counter_workers,
        args.increments,
        if p.is_some() { "; Local / profile" } else { "" },
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for f in raw.native.iter().chain(&raw.hot) {
        let q = p.and_then(|p| {
            if f.mode == NATIVE {
                p.native.as_ref()
            } else {
                p.hot(f.mode)
            }
        });
        let cell = |g: &dyn Fn(&ContentionFigures) -> String| match q {
            Some(q) => format!("{} / {}", g(f), g(q)),
            None => g(f),
        };
        let name = if f.mode == NATIVE {
            format!(
                "transfer, {NATIVE} (at most {} attempts)",
                args.native_attempts
            )
        } else {
            f.mode.to_string()
        };
        let opt = |v: Option<f64>| v.map_or("—".to_string(), f1);
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&|f| f.committed.to_string()),
            cell(&|f| format!("{:.1}", f.tx_per_s)),
            cell(&|f| opt(f.bound_per_s)),
            cell(&|f| f1(f.latency.pct(50.0))),
            cell(&|f| f1(f.latency.pct(99.0))),
            cell(&|f| format!("{:.1}", f.latency.pct(99.0) / f.latency.pct(50.0))),
            cell(&|f| format!("{}", f.attempts.max())),
            cell(&|f| f.gave_up.to_string()),
            cell(&|f| f1(f.wait.pct(99.0))),
            cell(&|f| if f.hold_mean_ms.is_some() {
                f1(f.ideal.pct(99.0))
            } else {
                "—".into()
            }),
            cell(&|f| opt(f.hold_mean_ms)),
            cell(&|f| format!("{:.1}", f.reads_per_waiter_s)),
            cell(&|f| format!("{:.1}", f.refused_writes_per_waiter_s)),
            cell(&|f| format!("{:.1}", f.requests)),
            cell(&|f| f.total_conserved.to_string()),
        );
    }
    out
}

/// What the profile did in each scenario: requests it saw, `TransactWriteItems` it cancelled for
/// a conflict, single writes it refused for one, requests it throttled, stale items it served.
pub fn profile_events_table(p: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| scenario | who | {BRIEF_HEADER} | failed transactions |"
    );
    out.push_str("|---|---|---|---|\n");
    let mut line = |scenario: &str, who: &str, c: Option<&Counts>, failed: String| {
        if let Some(c) = c {
            let _ = writeln!(
                out,
                "| {scenario} | {who} | {} | {failed} |",
                profile::counts_brief(c)
            );
        }
    };
    for r in &p.rows {
        let scenario = format!("{} N = {}", r.kind.label(), r.n);
        line(
            &scenario,
            "whole row, warm-ups included",
            r.profile.as_ref(),
            "—".into(),
        );
        for (d, st) in row_drivers(r) {
            line(
                &scenario,
                d.label(),
                Some(&st.profile),
                st.errors.to_string(),
            );
        }
    }
    for f in p.contention.modes.iter().chain(&p.contention.native) {
        let who = if f.attempt_bound.is_some() {
            NATIVE.to_string()
        } else {
            format!("library, tickets from {}", f.mode)
        };
        line(
            "contention",
            &who,
            f.profile.as_ref(),
            f.gave_up.to_string(),
        );
    }
    for f in &p.contention.hot {
        line(
            "hot items",
            f.mode,
            f.profile.as_ref(),
            f.gave_up.to_string(),
        );
    }
    line(
        "locks, uncontended",
        "all locks, taking turns",
        p.locks.uncontended_profile.as_ref(),
        "—".into(),
    );
    for c in &p.locks.contended {
        line("locks, contended", &c.name, c.profile.as_ref(), "—".into());
    }
    out
}

/// Every driver of a row with its figures.
fn row_drivers(r: &Row) -> Vec<(Driver, &Stats)> {
    let alt = if r.kind.writes_only() {
        Driver::PerItem
    } else {
        Driver::LockedReads
    };
    let mut d = vec![(Driver::Library, &r.lib)];
    d.extend(r.locking.iter().map(|s| (Driver::Locking, s)));
    d.extend(r.alt.iter().map(|s| (alt, s)));
    d.extend(r.apply_first.iter().map(|s| (Driver::ApplyFirst, s)));
    d.push((Driver::Sequential, &r.seq));
    d.extend(r.native.iter().map(|s| (Driver::Native, s)));
    d.extend(r.native_twice.iter().map(|s| (Driver::NativeTwice, s)));
    d.extend(
        r.native_optimistic
            .iter()
            .map(|s| (Driver::NativeOptimistic, s)),
    );
    d
}

/// Picks one driver's figures out of a row.
type StatsOf = fn(&Row) -> Option<&Stats>;

/// `a / b`, each with `f`, a dash for a missing one.
fn pair<T>(a: Option<T>, b: Option<T>, f: impl Fn(T) -> String) -> String {
    let one = |v: Option<T>| v.map(&f).unwrap_or_else(|| "—".into());
    format!("{} / {}", one(a), one(b))
}

/// The key figures of DynamoDB Local as it answers beside the same scenarios through the profile.
pub fn side_by_side(args: &Args, raw: &Results, p: &Results, settings: &ProfileSettings) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Each cell: DynamoDB Local / through the profile ({}).\n",
        profile::describe(settings)
    );
    let find_p = |kind: Kind, n: usize| p.rows.iter().find(|r| r.kind == kind && r.n == n);
    let updates: Vec<&Row> = raw.rows.iter().filter(|r| r.kind == Kind::Update).collect();
    if !updates.is_empty() {
        out.push_str(
            "| N-item update (library) | requests | critical path | p50 ms | native p50 ms | p50 / native | TWI cancelled for conflict (library / whole row) |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|\n");
        for r in updates {
            let q = find_p(Kind::Update, r.n);
            let ratio = |r: &Row| {
                r.native
                    .as_ref()
                    .map(|n| format!("{:.2}×", r.lib.pct(50.0) / n.pct(50.0)))
                    .unwrap_or_else(|| "—".into())
            };
            let _ = writeln!(
                out,
                "| N = {} | {} | {} | {} | {} | {} / {} | {} |",
                r.n,
                pair(Some(r), q, |r| num(r.lib.requests())),
                pair(Some(r), q, |r| path_text(&r.lib)),
                pair(Some(r), q, |r| f1(r.lib.pct(50.0))),
                pair(
                    r.native.as_ref(),
                    q.and_then(|q| q.native.as_ref()),
                    |s| f1(s.pct(50.0))
                ),
                ratio(r),
                q.map(ratio).unwrap_or_else(|| "—".into()),
                q.map(|q| format!(
                    "{} / {}",
                    q.lib.profile.transactions_in_conflict,
                    q.profile.map_or(0, |c| c.transactions_in_conflict)
                ))
                .unwrap_or_else(|| "—".into()),
            );
        }
        out.push('\n');
    }
    if let Some(r) = raw.rows.iter().find(|r| r.kind == Kind::Transfer) {
        let q = find_p(Kind::Transfer, r.n);
        out.push_str("| transfer, one at a time | requests | critical path | p50 ms |\n");
        out.push_str("|---|---|---|---|\n");
        let drivers: [(&str, StatsOf); 3] = [
            ("library", |r| Some(&r.lib)),
            ("library, locked reads before recording", |r| r.alt.as_ref()),
            ("native optimistic (no library)", |r| {
                r.native_optimistic.as_ref()
            }),
        ];
        for (label, of) in drivers {
            let (a, b) = (of(r), q.and_then(of));
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {} |",
                pair(a, b, |s| num(s.requests())),
                pair(a, b, path_text),
                pair(a, b, |s| f1(s.pct(50.0))),
            );
        }
        out.push('\n');
    }
    let contention: Vec<&ContentionFigures> = raw
        .contention
        .modes
        .iter()
        .chain(&raw.contention.native)
        .collect();
    if !contention.is_empty() {
        let _ = writeln!(
            out,
            "| contention ({} workers, {} accounts, {} transfers) | goodput tx/s | p50 ms | p99 ms | attempts max | gave up | profile: TWI cancelled / single writes refused for conflict |",
            args.workers, args.accounts, args.transfers
        );
        out.push_str("|---|---|---|---|---|---|---|\n");
        for f in contention {
            let q = p
                .contention
                .modes
                .iter()
                .chain(&p.contention.native)
                .find(|g| g.mode == f.mode);
            let who = if f.attempt_bound.is_some() {
                format!("{NATIVE} (no library)")
            } else {
                format!("library, tickets from {}", f.mode)
            };
            let _ = writeln!(
                out,
                "| {who} | {} | {} | {} | {} | {} | {} |",
                pair(Some(f), q, |f| format!("{:.1}", f.tx_per_s)),
                pair(Some(f), q, |f| f1(f.latency.pct(50.0))),
                pair(Some(f), q, |f| f1(f.latency.pct(99.0))),
                pair(Some(f), q, |f| format!("{}", f.attempts.max())),
                pair(Some(f), q, |f| f.gave_up.to_string()),
                q.and_then(|q| q.profile).map_or("—".into(), |c| format!(
                    "{} / {}",
                    c.transactions_in_conflict, c.writes_in_conflict
                )),
            );
        }
        out.push('\n');
    }
    if !raw.locks.contended.is_empty() || !raw.locks.uncontended.is_empty() {
        let _ = writeln!(
            out,
            "| lock | uncontended p50 ms | contended acquisitions/s ({} × {}, hold {} ms) | handoff p50 ms | re-taken by the releaser |",
            args.contenders, args.rounds, args.hold_ms
        );
        out.push_str("|---|---|---|---|---|\n");
        for c in &raw.locks.contended {
            let q = p.locks.contended(&c.name);
            let (u, uq) = (raw.locks.uncontended(&c.name), p.locks.uncontended(&c.name));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                c.name,
                if u.is_some() {
                    pair(u, uq, |u| f1(u.cycle.pct(50.0)))
                } else {
                    "—".into()
                },
                pair(Some(c), q, |c| format!("{:.1}", c.acq_per_s)),
                pair(Some(c), q, |c| f1(c.handoff.pct(50.0))),
                pair(Some(c), q, |c| c.reacquired.to_string()),
            );
        }
    }
    out
}
