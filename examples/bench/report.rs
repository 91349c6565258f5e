//! The report: Markdown tables for docs/PERFORMANCE.md, the goals of issue 15 checked against the
//! run, and the last line, one JSON object for scripts (per-N maps keyed by N).

use std::fmt::Write as _;

use crate::Args;
use crate::contention::ContentionFigures;
use crate::drivers::Driver;
use crate::locks::{self, LockResults};
use crate::recorder::short_op;
use crate::stats::Stats;
use crate::transactions::{Kind, Row};

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
         | native: WU / p50 ms | p50 / native | locking p50 / native | Java model: requests = path |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let native = r.native.as_ref();
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
        let mut drivers = vec![(Driver::Library, &r.lib)];
        drivers.extend(r.locking.iter().map(|s| (Driver::Locking, s)));
        let alt = if r.kind.writes_only() {
            Driver::PerItem
        } else {
            Driver::LockedReads
        };
        drivers.extend(r.alt.iter().map(|s| (alt, s)));
        drivers.extend(r.apply_first.iter().map(|s| (Driver::ApplyFirst, s)));
        drivers.push((Driver::Sequential, &r.seq));
        drivers.extend(r.native.iter().map(|s| (Driver::Native, s)));
        drivers.extend(r.native_twice.iter().map(|s| (Driver::NativeTwice, s)));
        for (driver, st) in drivers {
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

pub fn contention_table(args: &Args, figs: &[ContentionFigures]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| tickets ({} workers, {} accounts, ordered policy) | transfers | tx/s (steady / overall) | attempts mean | attempts p99 | attempts max | p50 ms | p99 ms | requests / tx | ticket requests / tx | total conserved |",
        args.workers, args.accounts
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for f in figs {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} / {:.1} | {:.2} | {} | {} | {} | {} | {:.1} | {:.2} | {} |",
            f.mode,
            f.committed,
            f.tx_per_s,
            f.tx_per_s_overall,
            f.attempts.mean(),
            f.attempts.pct(99.0),
            f.attempts.max(),
            f1(f.latency.pct(50.0)),
            f1(f.latency.pct(99.0)),
            f.requests,
            f.ticket_requests,
            f.total_conserved,
        );
    }
    out
}

fn json_map(rows: &[&Row], f: impl Fn(&Row) -> Option<String>) -> String {
    let parts: Vec<String> = rows
        .iter()
        .filter_map(|r| f(r).map(|v| format!("\"{}\":{}", r.n, v)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

fn jnum(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "null".into()
    }
}

/// Fields of one driver's per-N maps: `{prefix}requests`, `{prefix}units`, ...
fn driver_fields(
    fields: &mut Vec<String>,
    prefix: &str,
    rows: &[&Row],
    of: impl Fn(&Row) -> Option<&Stats> + Copy,
) {
    let field = |name: &str, f: &dyn Fn(&Stats) -> String| {
        format!("\"{prefix}{name}\":{}", json_map(rows, |r| of(r).map(f)))
    };
    fields.push(field("requests", &|s| num(s.requests())));
    fields.push(field("units", &|s| num(s.units())));
    fields.push(field("critical_path", &|s| s.path_median().to_string()));
    fields.push(field("p50_ms", &|s| jnum(s.pct(50.0))));
}

/// One row's figures as `{prefix}_requests`, `{prefix}_critical_path`, `{prefix}_p50_ms`.
fn single_fields(fields: &mut Vec<String>, prefix: &str, s: Option<&Stats>) {
    let v = |f: &dyn Fn(&Stats) -> String| s.map(f).unwrap_or_else(|| "null".into());
    fields.push(format!(
        "\"{prefix}_requests\":{}",
        v(&|s| num(s.requests()))
    ));
    fields.push(format!(
        "\"{prefix}_critical_path\":{}",
        v(&|s| s.path_median().to_string())
    ));
    fields.push(format!("\"{prefix}_p50_ms\":{}", v(&|s| jnum(s.pct(50.0)))));
}

pub fn json(rows: &[Row], locks: &LockResults, contention: &[ContentionFigures]) -> String {
    let updates: Vec<&Row> = rows.iter().filter(|r| r.kind == Kind::Update).collect();
    let mut fields = Vec::new();
    driver_fields(&mut fields, "", &updates, |r| Some(&r.lib));
    fields.push(format!(
        "\"p99_ms\":{}",
        json_map(&updates, |r| Some(jnum(r.lib.pct(99.0))))
    ));
    fields.push(format!(
        "\"native_p50_ms\":{}",
        json_map(&updates, |r| r.native.as_ref().map(|s| jnum(s.pct(50.0))))
    ));
    fields.push(format!(
        "\"native_twice_p50_ms\":{}",
        json_map(&updates, |r| r
            .native_twice
            .as_ref()
            .map(|s| jnum(s.pct(50.0))))
    ));
    driver_fields(&mut fields, "locking_", &updates, |r| r.locking.as_ref());
    driver_fields(&mut fields, "per_item_locking_", &updates, |r| {
        r.alt.as_ref()
    });
    driver_fields(&mut fields, "apply_first_", &updates, |r| {
        r.apply_first.as_ref()
    });
    driver_fields(&mut fields, "sequential_", &updates, |r| Some(&r.seq));
    for kind in [Kind::Insert, Kind::Delete, Kind::Read] {
        let of: Vec<&Row> = rows.iter().filter(|r| r.kind == kind).collect();
        if of.is_empty() {
            continue;
        }
        let mut inner = Vec::new();
        driver_fields(&mut inner, "", &of, |r| Some(&r.lib));
        if kind.writes_only() {
            driver_fields(&mut inner, "locking_", &of, |r| r.locking.as_ref());
            driver_fields(&mut inner, "per_item_locking_", &of, |r| r.alt.as_ref());
            driver_fields(&mut inner, "apply_first_", &of, |r| r.apply_first.as_ref());
        } else {
            driver_fields(&mut inner, "locked_reads_", &of, |r| r.alt.as_ref());
        }
        let key = kind.label().replace(' ', "_");
        fields.push(format!("\"{key}\":{{{}}}", inner.join(",")));
    }
    let find = |kind: Kind, n: usize| rows.iter().find(|r| r.kind == kind && r.n == n);
    let read10 = find(Kind::Read, 10);
    let transfer = find(Kind::Transfer, 2);
    single_fields(&mut fields, "readlock", read10.map(|r| &r.lib));
    single_fields(&mut fields, "transfer", transfer.map(|r| &r.lib));
    // The same with `lock_reads_before_recording` on.
    single_fields(
        &mut fields,
        "readlock_locked_reads",
        read10.and_then(|r| r.alt.as_ref()),
    );
    single_fields(
        &mut fields,
        "transfer_locked_reads",
        transfer.and_then(|r| r.alt.as_ref()),
    );

    for (prefix, name) in [("queue", locks::QUEUE), ("lease", locks::LEASE)] {
        if let Some(u) = locks.uncontended(name) {
            fields.push(format!(
                "\"{prefix}_uncontended_p50_ms\":{}",
                jnum(u.cycle.pct(50.0))
            ));
            fields.push(format!(
                "\"{prefix}_uncontended_requests\":{}",
                jnum(u.requests)
            ));
        }
        if let Some(c) = locks.contended(name) {
            let figures = [
                ("handoff_p50_ms", c.handoff.pct(50.0)),
                ("handoff_p99_ms", c.handoff.pct(99.0)),
                ("acquisitions_per_s", c.acq_per_s),
                ("wait_p50_ms", c.wait.pct(50.0)),
                ("wait_max_ms", c.wait.max()),
                ("wait_max_ideal_ms", c.wait_max_ideal_ms),
                ("reads_per_waiter_per_s", c.reads_per_waiter_s),
                ("requests_per_acquisition", c.requests_per_acq),
                ("releaser_retakes", c.reacquired as f64),
            ];
            for (k, v) in figures {
                fields.push(format!("\"{prefix}_{k}\":{}", jnum(v)));
            }
            fields.push(format!(
                "\"{prefix}_mutual_exclusion\":{}",
                c.overlaps == 0 && c.counter_exact
            ));
        }
    }
    if !contention.is_empty() {
        let per_mode = |f: &dyn Fn(&ContentionFigures) -> String| {
            let parts: Vec<String> = contention
                .iter()
                .map(|c| format!("\"{}\":{}", c.mode, f(c)))
                .collect();
            format!("{{{}}}", parts.join(","))
        };
        fields.push(format!(
            "\"ticket_requests\":{}",
            per_mode(&|c| jnum(c.ticket_requests))
        ));
        fields.push(format!(
            "\"contention\":{}",
            per_mode(&|c| format!(
                "{{\"tx_per_s\":{},\"tx_per_s_overall\":{},\"attempts_mean\":{},\"attempts_max\":{},\"p50_ms\":{},\"p99_ms\":{},\"requests\":{},\"total_conserved\":{}}}",
                jnum(c.tx_per_s),
                jnum(c.tx_per_s_overall),
                jnum(c.attempts.mean()),
                c.attempts.max(),
                jnum(c.latency.pct(50.0)),
                jnum(c.latency.pct(99.0)),
                jnum(c.requests),
                c.total_conserved
            ))
        ));
    }
    format!("{{{}}}", fields.join(","))
}
