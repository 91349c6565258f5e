//! The benchmark's last line: every figure of a run as one JSON object, for scripts and charts.

use dynamodb_transactions::fault::ProfileSettings;

use crate::contention::ContentionFigures;
use std::fmt::Write as _;

use crate::Results;
use crate::locks;
use crate::profile;
use crate::report::num;
use crate::stats::Stats;
use crate::transactions::{Kind, Row};

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

/// The figures of one pass as the fields of a JSON object.
fn json_fields(res: &Results) -> Vec<String> {
    let (rows, locks) = (&res.rows, &res.locks);
    let contention = &res.contention.modes;
    let updates: Vec<&Row> = rows.iter().filter(|r| r.kind == Kind::Update).collect();
    let mut fields = Vec::new();
    if let Some(f) = &res.feed {
        fields.extend(crate::feed::json_fields(f));
    }
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
    // The same with `locked_reads = LockThenRecord`.
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
    if let Some(t) = transfer.and_then(|r| r.native_optimistic.as_ref()) {
        single_fields(&mut fields, "transfer_native_optimistic", Some(t));
    }

    for (prefix, name) in [
        ("queue", locks::QUEUE),
        ("lease", locks::LEASE),
        ("dynamodb_lease", locks::PEER),
    ] {
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
        fields.push(format!("\"contention\":{}", per_mode(&contention_json)));
    }
    if let Some(n) = &res.contention.native {
        let mut o = contention_json(n);
        o.pop();
        let _ = write!(
            o,
            ",\"gave_up\":{},\"attempts_bound\":{}}}",
            n.gave_up,
            n.attempt_bound.unwrap_or(0)
        );
        fields.push(format!("\"contention_native_optimistic\":{o}"));
    }
    if !res.contention.hot.is_empty() {
        let parts: Vec<String> = res
            .contention
            .hot
            .iter()
            .map(|c| {
                let mut o = contention_json(c);
                o.pop();
                let _ = write!(
                    o,
                    ",\"gave_up\":{},\"wait_p99_ms\":{},\"ideal_wait_p99_ms\":{},\"ideal_wait_max_ms\":{},\"hold_mean_ms\":{},\"bound_tx_per_s\":{},\"reads_per_waiter_s\":{},\"refused_writes_per_waiter_s\":{}}}",
                    c.gave_up,
                    jnum(c.wait.pct(99.0)),
                    jnum(c.ideal.pct(99.0)),
                    jnum(c.ideal.max()),
                    c.hold_mean_ms.map_or("null".into(), jnum),
                    c.bound_per_s.map_or("null".into(), jnum),
                    jnum(c.reads_per_waiter_s),
                    jnum(c.refused_writes_per_waiter_s),
                );
                format!("\"{}\":{o}", slug(c.mode))
            })
            .collect();
        fields.push(format!("\"hot\":{{{}}}", parts.join(",")));
    }
    fields
}

fn contention_json(c: &ContentionFigures) -> String {
    format!(
        "{{\"tx_per_s\":{},\"tx_per_s_overall\":{},\"attempts_mean\":{},\"attempts_max\":{},\"p50_ms\":{},\"p99_ms\":{},\"requests\":{},\"total_conserved\":{}}}",
        jnum(c.tx_per_s),
        jnum(c.tx_per_s_overall),
        jnum(c.attempts.mean()),
        c.attempts.max(),
        jnum(c.latency.pct(50.0)),
        jnum(c.latency.pct(99.0)),
        jnum(c.requests),
        c.total_conserved
    )
}

/// A name as a JSON key: lower case, runs of other characters as one `_`.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for ch in name.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_string()
}

/// What the profile did per scenario: per kind a map keyed by N (the whole row), contention per
/// mode, the uncontended locks together and each contended lock run.
fn profile_stats_json(p: &Results) -> String {
    let mut fields = Vec::new();
    for kind in [
        Kind::Update,
        Kind::Insert,
        Kind::Delete,
        Kind::Read,
        Kind::Transfer,
    ] {
        let of: Vec<&Row> = p.rows.iter().filter(|r| r.kind == kind).collect();
        if !of.is_empty() {
            let key = kind.label().replace(' ', "_");
            fields.push(format!(
                "\"{key}\":{}",
                json_map(&of, |r| r.profile.map(|c| profile::counts_json(&c)))
            ));
        }
    }
    let runs: Vec<String> = p
        .contention
        .modes
        .iter()
        .chain(&p.contention.native)
        .chain(&p.contention.hot)
        .filter_map(|f| {
            f.profile
                .map(|c| format!("\"{}\":{}", slug(f.mode), profile::counts_json(&c)))
        })
        .collect();
    fields.push(format!("\"contention\":{{{}}}", runs.join(",")));
    if let Some(c) = p.feed.as_ref().and_then(|f| f.profile) {
        fields.push(format!("\"feed\":{}", profile::counts_json(&c)));
    }
    if let Some(c) = p.locks.uncontended_profile {
        fields.push(format!(
            "\"locks_uncontended\":{}",
            profile::counts_json(&c)
        ));
    }
    let runs: Vec<String> = p
        .locks
        .contended
        .iter()
        .filter_map(|l| {
            l.profile
                .map(|c| format!("\"{}\":{}", slug(&l.name), profile::counts_json(&c)))
        })
        .collect();
    fields.push(format!("\"locks_contended\":{{{}}}", runs.join(",")));
    format!("{{{}}}", fields.join(","))
}

/// The last line: the raw figures' fields; with the profile, also `profile` (the same fields),
/// `profile_settings` and `profile_stats`.
pub fn json(raw: &Results, profile: Option<(&Results, &ProfileSettings)>) -> String {
    let mut fields = json_fields(raw);
    if let Some((p, settings)) = profile {
        fields.push(format!("\"profile\":{{{}}}", json_fields(p).join(",")));
        fields.push(format!(
            "\"profile_settings\":{}",
            profile::settings_json(settings)
        ));
        fields.push(format!("\"profile_stats\":{}", profile_stats_json(p)));
    }
    format!("{{{}}}", fields.join(","))
}
