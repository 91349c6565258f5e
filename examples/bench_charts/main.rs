//! SVG charts of the benchmark's figures, drawn from the JSON object that `examples/bench` prints
//! as its last line:
//! - `latency-by-n.svg`: p50 latency of an N-item update through the library (default settings
//!   and the locking protocol) beside native `TransactWriteItems`, by N;
//! - `requests-by-n.svg`: requests per N-item update (library, locking protocol, native, and the
//!   Java library's 7N + 6);
//! - `contention.svg`: goodput and p99 of contended transfers by ticket policy, beside the
//!   optimistic transfer written without the library;
//! - `hot-items.svg`: goodput and p99 of the hot-item runs (transfers in each read order, a hot
//!   counter) beside their native optimistic baseline;
//! - `locks.svg`: acquisitions per second, handoff and re-takes by the releaser of the queue and
//!   lease locks under contention, beside `dynamodb-lease`.
//!
//! With `--profile dynamodb` in the benchmark run, each chart also shows the figures through the
//! profile. Figures missing from the JSON (a part skipped with `--no-tx`, say) leave their chart
//! out or their series empty.
//!
//! ```text
//! cargo run --example bench_charts -- bench.json docs/charts [--note "engine, machine, date"]
//! scripts/charts                # runs the benchmark, then draws the charts into docs/charts/
//! ```
//!
//! The note, if any, is written under each chart: where and when its figures were measured.

use std::error::Error;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

mod plot;

use plot::*;

type Res<T = ()> = Result<T, Box<dyn Error>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

const SIZE: (u32, u32) = (960, 540);
const FONT: &str = "sans-serif";
/// Series colours, in order (colour-blind safe).
const COLOURS: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
];

fn main() -> Res {
    let mut args = std::env::args().skip(1);
    let mut paths = Vec::new();
    let mut note = String::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--note" => note = args.next().unwrap_or_default(),
            _ => paths.push(a),
        }
    }
    let [json, dir] = paths.as_slice() else {
        eprintln!("usage: bench_charts <bench JSON or output> <output directory> [--note TEXT]");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(json)?;
    // The bench's whole output may be given: its JSON is the last line.
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let figures: Value = serde_json::from_str(line)?;
    std::fs::create_dir_all(dir)?;
    for file in draw_all(&figures, Path::new(dir), &note)? {
        println!("{}", file.display());
    }
    Ok(())
}

/// One pass of the run: its name and its figures.
type Pass<'a> = (&'static str, &'a Value);
/// Draws one chart from the passes; false if they hold none of its figures.
type Chart = fn(&[Pass], &Area) -> Res<bool>;

/// Draws every chart the figures allow into `dir`, `note` under each; returns the files written.
fn draw_all(figures: &Value, dir: &Path, note: &str) -> Res<Vec<PathBuf>> {
    let passes = passes(figures);
    let mut written = Vec::new();
    let charts: [(&str, Chart); 5] = [
        ("latency-by-n.svg", latency_by_n),
        ("requests-by-n.svg", requests_by_n),
        ("contention.svg", contention),
        ("hot-items.svg", hot_items),
        ("locks.svg", locks),
    ];
    for (name, draw) in charts {
        let path = dir.join(name);
        let drawn = {
            let root = SVGBackend::new(&path, SIZE).into_drawing_area();
            root.fill(&WHITE)?;
            let (chart, foot) = root.split_vertically(SIZE.1 - 22);
            let grey = BLACK.mix(0.6);
            let style = TextStyle::from((FONT, 13)).color(&grey);
            foot.draw(&Text::new(note, (16, 2), style))?;
            let drawn = draw(&passes, &chart)?;
            root.present()?;
            drawn
        };
        if drawn {
            written.push(path);
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(written)
}

/// The passes of the run: DynamoDB Local as it answers, and through the profile if it ran.
fn passes(figures: &Value) -> Vec<Pass<'_>> {
    let mut out = vec![("DynamoDB Local", figures)];
    if let Some(p) = figures.get("profile").filter(|p| p.is_object()) {
        out.push(("through the profile", p));
    }
    out
}

/// A per-N map (`{"1": 2.0, "10": 3.5}`) as points sorted by N; nulls left out.
fn per_n(figures: &Value, key: &str) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = figures
        .get(key)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(n, v)| Some((n.parse().ok()?, v.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

fn latency_by_n(passes: &[Pass], area: &Area) -> Res<bool> {
    let mut lines = Vec::new();
    for (i, (pass, f)) in passes.iter().enumerate() {
        // The profile's lines dashed, in the same colours.
        let (dashed, suffix) = if i == 0 {
            (false, String::new())
        } else {
            (true, format!(", {pass}"))
        };
        for (c, (key, name)) in [
            ("p50_ms", "library, default settings"),
            ("locking_p50_ms", "library, locking protocol"),
            ("native_p50_ms", "native TransactWriteItems"),
            ("native_twice_p50_ms", "two native requests in a row"),
        ]
        .into_iter()
        .enumerate()
        {
            lines.push(Line {
                name: format!("{name}{suffix}"),
                points: per_n(f, key),
                colour: COLOURS[c],
                dashed,
            });
        }
    }
    log_log_chart(
        area,
        "N-item update: p50 latency (begin to commit) beside native",
        "items per transaction (N)",
        "p50 latency, ms",
        &lines,
    )
}

fn requests_by_n(passes: &[Pass], area: &Area) -> Res<bool> {
    // Requests do not depend on the engine's speed: the first pass is enough.
    let Some((_, f)) = passes.first() else {
        return Ok(false);
    };
    let lib = per_n(f, "requests");
    let ns: Vec<f64> = lib.iter().map(|p| p.0).collect();
    let mut lines = vec![
        Line {
            name: "library, default settings".into(),
            points: lib,
            colour: COLOURS[0],
            dashed: false,
        },
        Line {
            name: "library, locking protocol".into(),
            points: per_n(f, "locking_requests"),
            colour: COLOURS[1],
            dashed: false,
        },
        Line {
            name: "native TransactWriteItems (N ≤ 100)".into(),
            points: ns
                .iter()
                .filter(|&&n| n <= 100.0)
                .map(|&n| (n, 1.0))
                .collect(),
            colour: COLOURS[2],
            dashed: false,
        },
        Line {
            name: "Java library's shape: 7N + 6 in sequence".into(),
            points: ns.iter().map(|&n| (n, 7.0 * n + 6.0)).collect(),
            colour: COLOURS[3],
            dashed: true,
        },
    ];
    // The library's lines last, drawn over native's where the two coincide (one request).
    lines.rotate_left(2);
    log_log_chart(
        area,
        "N-item update: requests per transaction",
        "items per transaction (N)",
        "requests",
        &lines,
    )
}

/// A contention run's figure (`contention.<mode>.<key>`).
fn field(run: &Value, key: &str) -> Option<f64> {
    run.get(key).and_then(Value::as_f64)
}

fn contention(passes: &[Pass], area: &Area) -> Res<bool> {
    // Categories: the ticket policies of the first pass, then the native optimistic transfer.
    let Some(modes) = passes[0].1.get("contention").and_then(Value::as_object) else {
        return Ok(false);
    };
    // The ticket policies in the bench's order (the JSON map comes back sorted by name).
    let mut categories: Vec<String> = modes.keys().cloned().collect();
    categories.sort_by_key(|m| {
        let known = ["counter", "clock", "clock-begin"];
        (
            known.iter().position(|k| k == m).unwrap_or(known.len()),
            m.clone(),
        )
    });
    let native = "contention_native_optimistic";
    let with_native = passes.iter().any(|(_, f)| f.get(native).is_some());
    if with_native {
        // Its goodput counts the transfers it committed: say how many it gave up on.
        let gave_up = passes
            .iter()
            .filter_map(|(_, f)| f.get(native)?.get("gave_up")?.as_u64())
            .map(|n| n.to_string())
            .collect::<Vec<_>>();
        categories.push(match gave_up.as_slice() {
            [] => "native optimistic".into(),
            n => format!("native optimistic\n({} gave up)", n.join(" / ")),
        });
    }
    let run = |f: &Value, i: usize| -> Option<Value> {
        if i < modes.len() {
            f.get("contention")?.get(&categories[i]).cloned()
        } else {
            f.get(native).cloned()
        }
    };
    let series = |key: &str, scale: f64| -> Vec<(String, Vec<Option<f64>>)> {
        passes
            .iter()
            .map(|(pass, f)| {
                let name = pass.to_string();
                let values = (0..categories.len())
                    .map(|i| run(f, i).and_then(|r| field(&r, key)).map(|v| v * scale))
                    .collect();
                (name, values)
            })
            .collect()
    };
    let (goodput, p99) = (series("tx_per_s", 1.0), series("p99_ms", 0.001));
    two_panels(
        area,
        "Contended transfers by ticket policy, beside native optimistic",
        |l, r| {
            bar_panel(
                l,
                "goodput",
                "committed transfers per second",
                &categories,
                &goodput,
                &|v| format!("{v:.1}"),
            )?;
            bar_panel(r, "p99 latency", "seconds", &categories, &p99, &|v| {
                format!("{v:.2}")
            })
        },
    )?;
    Ok(true)
}

fn hot_items(passes: &[Pass], area: &Area) -> Res<bool> {
    // The runs of the first pass (the JSON map comes back sorted by name, which keeps a run
    // beside its native baseline), named as the bench's report names them.
    let Some(runs) = passes[0].1.get("hot").and_then(Value::as_object) else {
        return Ok(false);
    };
    let keys: Vec<&String> = runs.keys().collect();
    let run = |f: &Value, k: &str| f.get("hot")?.get(k).cloned();
    let categories: Vec<String> = keys
        .iter()
        .map(|k| {
            let gave_up: Vec<String> = passes
                .iter()
                .filter_map(|(_, f)| run(f, k)?.get("gave_up")?.as_u64())
                .map(|n| n.to_string())
                .collect();
            let name = wrap(&k.replace('_', " "), 26);
            if gave_up.iter().all(|n| n == "0") {
                name
            } else {
                format!("{name}\n({} gave up)", gave_up.join(" / "))
            }
        })
        .collect();
    let series = |key: &str, scale: f64| -> Vec<(String, Vec<Option<f64>>)> {
        passes
            .iter()
            .map(|(pass, f)| {
                let values = keys
                    .iter()
                    .map(|k| run(f, k).and_then(|r| field(&r, key)).map(|v| v * scale))
                    .collect();
                (pass.to_string(), values)
            })
            .collect()
    };
    let (goodput, p99) = (series("tx_per_s", 1.0), series("p99_ms", 0.001));
    two_rows(
        area,
        "Hot items: transfers and a counter beside native optimistic",
        |l, r| {
            bar_panel(
                l,
                "goodput",
                "committed per second",
                &categories,
                &goodput,
                &|v| format!("{v:.1}"),
            )?;
            bar_panel(r, "p99 latency", "seconds", &categories, &p99, &|v| {
                format!("{v:.2}")
            })
        },
    )?;
    Ok(true)
}

fn locks(passes: &[Pass], area: &Area) -> Res<bool> {
    let libs = [
        ("queue", "QueueLock"),
        ("lease", "LeaseLock"),
        ("dynamodb_lease", "dynamodb-lease"),
    ];
    let present: Vec<_> = libs
        .iter()
        .filter(|(k, _)| passes[0].1.get(format!("{k}_acquisitions_per_s")).is_some())
        .collect();
    if present.is_empty() {
        return Ok(false);
    }
    let categories: Vec<String> = present.iter().map(|(_, name)| name.to_string()).collect();
    let values = |f: &Value, key: &str| -> Vec<Option<f64>> {
        present
            .iter()
            .map(|(k, _)| f.get(format!("{k}_{key}")).and_then(Value::as_f64))
            .collect()
    };
    // The handoff's series: p50 and p99, and each through the profile.
    let pass_name = |i: usize, pass: &str| {
        if i == 0 {
            String::new()
        } else {
            format!(", {pass}")
        }
    };
    let throughput: Vec<_> = passes
        .iter()
        .map(|(pass, f)| (pass.to_string(), values(f, "acquisitions_per_s")))
        .collect();
    let handoff: Vec<_> = passes
        .iter()
        .enumerate()
        .flat_map(|(i, (pass, f))| {
            [
                (
                    format!("p50{}", pass_name(i, pass)),
                    values(f, "handoff_p50_ms"),
                ),
                (
                    format!("p99{}", pass_name(i, pass)),
                    values(f, "handoff_p99_ms"),
                ),
            ]
        })
        .collect();
    let retakes: Vec<_> = passes
        .iter()
        .map(|(pass, f)| (pass.to_string(), values(f, "releaser_retakes")))
        .collect();
    three_panels(
        area,
        "One contended lock: throughput, handoff and fairness beside dynamodb-lease",
        |l, m, r| {
            bar_panel(
                l,
                "acquisitions per second",
                "acquisitions / s",
                &categories,
                &throughput,
                &|v| format!("{v:.1}"),
            )?;
            bar_panel(
                m,
                "handoff (release to next holder)",
                "ms",
                &categories,
                &handoff,
                &|v| format!("{v:.1}"),
            )?;
            bar_panel(
                r,
                "re-taken by the releaser",
                "acquisitions",
                &categories,
                &retakes,
                &|v| format!("{v:.0}"),
            )
        },
    )?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest JSON the bench prints with every part, and a profile pass.
    const FIXTURE: &str = r#"{"requests":{"1":1,"10":1,"100":7},"p50_ms":{"1":2.0,"10":2.6,"100":74.0},
        "locking_requests":{"1":2,"10":2,"100":7},"locking_p50_ms":{"1":4.2,"10":6.8,"100":72.0},
        "native_p50_ms":{"1":1.5,"10":2.3,"100":10.9},"native_twice_p50_ms":{"1":3.0,"10":null},
        "queue_acquisitions_per_s":81.3,"queue_handoff_p50_ms":5.0,"queue_handoff_p99_ms":20.0,
        "dynamodb_lease_acquisitions_per_s":96.2,"dynamodb_lease_handoff_p50_ms":2.2,
        "contention":{"counter":{"tx_per_s":80.0,"p99_ms":900.0},"clock":{"tx_per_s":85.0,"p99_ms":1000.0}},
        "contention_native_optimistic":{"tx_per_s":46.8,"p99_ms":1400.0},
        "hot":{"hot_counter":{"tx_per_s":19.8,"p99_ms":6800.0,"gave_up":0},
        "transfer_from_then_to":{"tx_per_s":6.0,"p99_ms":8900.0,"gave_up":2}},
        "profile":{"p50_ms":{"1":14.8},"native_p50_ms":{"1":12.8},
        "contention":{"counter":{"tx_per_s":18.0,"p99_ms":4000.0}},"queue_acquisitions_per_s":19.5}}"#;

    #[test]
    fn draws_every_chart_from_a_minimal_run() {
        let dir = std::env::temp_dir().join(format!("bench-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let figures: Value = serde_json::from_str(FIXTURE).unwrap();
        let written = draw_all(&figures, &dir, "a note").unwrap();
        assert_eq!(written.len(), 5, "{written:?}");
        for file in &written {
            let svg = std::fs::read_to_string(file).unwrap();
            assert!(svg.starts_with("<svg"), "{}", file.display());
            // Text is written as SVG text, no font files needed.
            assert!(svg.contains("<text"), "{}", file.display());
        }
        let locks = std::fs::read_to_string(dir.join("locks.svg")).unwrap();
        assert!(locks.contains("dynamodb-lease"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_run_draws_nothing() {
        let dir = std::env::temp_dir().join(format!("bench-charts-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(
            draw_all(&Value::Object(Default::default()), &dir, "")
                .unwrap()
                .is_empty()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn labels_and_ticks() {
        assert_eq!(label(1000.0), "1,000");
        assert_eq!(label(25.0), "25");
        assert_eq!(label(2.5), "2.5");
        assert_eq!(
            log_ticks(1.0, 100.0),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(
            wrap("hot counter native optimistic", 17),
            "hot counter\nnative optimistic"
        );
    }
}
