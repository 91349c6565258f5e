//! `dynamodb-tx sweep`: the sweeper, once or every INTERVAL.

use std::time::Duration;

use clap::Args;
use dynamodb_transactions::TxId;
use dynamodb_transactions::sweeper::{SweepOptions, SweepReport};
use serde_json::{Value, json};

use crate::error::{CliError, CliResult, Exit, explain};
use crate::output::{Table, fmt_duration, fmt_key, fmt_utc, key_json, now_ms, parse_duration};
use crate::{Ctx, progress_callback, spinner};

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Report what would be done; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Roll back pending transactions idle for this long.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    rollback_after: Duration,
    /// Complete decided, unfinalized transactions idle for this long.
    #[arg(long, value_parser = parse_duration, default_value = "1m")]
    complete_after: Duration,
    /// Finish everything now: roll back every pending transaction and complete every decided one,
    /// whatever its age. Only once every coordinator has stopped: live work is rolled back.
    #[arg(long, conflicts_with_all = ["rollback_after", "complete_after"])]
    now: bool,
    /// Delete finalized records idle for this long (default: keep them, e.g. for TTL).
    #[arg(long, value_parser = parse_duration)]
    delete_after: Option<Duration>,
    /// Also scan this user table for orphaned locks (repeatable; reads the whole table).
    #[arg(long = "scan-table", value_name = "TABLE")]
    scan_tables: Vec<String>,
    /// Do not scan the tables listed as holding locks taken without a record
    /// (`Settings::record_on_demand`) for such locks.
    #[arg(long)]
    no_unrecorded_tables: bool,
    /// Read each table listed as holding locks without record once per PERIOD, a slice at a
    /// time: a pass reads the slices that came due since the last pass of any sweeper. 0 reads
    /// them whole at every pass, as --now does.
    #[arg(
        long,
        value_name = "PERIOD",
        value_parser = parse_duration,
        default_value = "24h",
        conflicts_with_all = ["no_unrecorded_tables", "now"]
    )]
    unrecorded_period: Duration,
    /// In how many slices a listed table is read over --unrecorded-period.
    #[arg(
        long,
        value_name = "K",
        default_value_t = 96,
        conflicts_with_all = ["no_unrecorded_tables", "now"]
    )]
    unrecorded_slices: u32,
    /// Do not delete orphaned images.
    #[arg(long)]
    no_images: bool,
    /// Parallel scan segments.
    #[arg(long, default_value_t = 4)]
    segments: u32,
    /// Sweep again every INTERVAL until stopped (Ctrl-C / SIGTERM are safe at any point).
    #[arg(long, value_parser = parse_duration, value_name = "INTERVAL")]
    watch: Option<Duration>,
    /// With --watch: stop after this many sweeps.
    #[arg(long, requires = "watch")]
    max_passes: Option<u64>,
}

fn report_json(r: &SweepReport) -> Value {
    json!({
        "dry_run": r.dry_run,
        "records_scanned": r.records_scanned,
        "rolled_back": r.rolled_back.iter().map(TxId::to_string).collect::<Vec<_>>(),
        "completed": r.completed.iter().map(TxId::to_string).collect::<Vec<_>>(),
        "deleted": r.deleted,
        "orphan_chunks_deleted": r.orphan_chunks_deleted,
        "pending_left": r.pending_left,
        "decided_left": r.decided_left,
        "finalized_kept": r.finalized_kept,
        "images_scanned": r.images_scanned,
        "orphan_images_deleted": r.orphan_images_deleted,
        "items_scanned": r.items_scanned,
        "unrecorded_slices": r.unrecorded_slices.map(|d| json!({"first": d.first, "count": d.count, "of": d.of})),
        "unrecorded_tables": r.unrecorded_tables,
        "orphan_locks_released": r.orphan_locks_released,
        "marks_removed": r.marks_removed,
        "queue_entries_removed": r.queue_entries_removed,
        "stale_locks_completed": r.stale_locks_completed,
        "applied_orphans": r.applied_orphans.iter().map(|o| json!({
            "table": o.table,
            "key": key_json(&o.key),
            "owner": o.owner.to_string(),
            "image_id": o.image_id,
        })).collect::<Vec<_>>(),
        "errors": r.errors.iter().map(|e| json!({
            "tx_id": e.tx_id.as_ref().map(TxId::to_string),
            "table": e.table,
            "message": e.message,
        })).collect::<Vec<_>>(),
    })
}

fn print_report(ctx: &Ctx, r: &SweepReport) {
    if ctx.cli.json {
        // One compact object per line, so that --watch output is JSON lines.
        outln!(
            "{}",
            serde_json::to_string(&report_json(r)).expect("JSON values serialize")
        );
        return;
    }
    let verb = |done: &'static str, would: &'static str| if r.dry_run { would } else { done };
    let mut t = Table::new(&["WHAT", "COUNT"]);
    let rows: Vec<(String, u64)> = vec![
        ("records scanned".into(), r.records_scanned),
        (
            verb(
                "rolled back (idle pending)",
                "would roll back (idle pending)",
            )
            .into(),
            r.rolled_back.len() as u64,
        ),
        (
            verb("completed (decided)", "would complete (decided)").into(),
            r.completed.len() as u64,
        ),
        (
            verb("deleted (finalized, old)", "would delete (finalized, old)").into(),
            r.deleted,
        ),
        (
            verb(
                "request rows of deleted records removed",
                "request rows of deleted records to remove",
            )
            .into(),
            r.orphan_chunks_deleted,
        ),
        ("left alone (recent pending)".into(), r.pending_left),
        ("left alone (recent decided)".into(), r.decided_left),
        ("kept (finalized)".into(), r.finalized_kept),
        ("images scanned".into(), r.images_scanned),
        (
            verb("orphan images deleted", "orphan images to delete").into(),
            r.orphan_images_deleted,
        ),
        ("locked items found".into(), r.items_scanned),
        (
            verb("orphan locks released", "orphan locks to release").into(),
            r.orphan_locks_released,
        ),
        (
            verb("waiters' marks taken off", "waiters' marks to take off").into(),
            r.marks_removed,
        ),
        (
            verb(
                "expired queue entries taken off",
                "expired queue entries to take off",
            )
            .into(),
            r.queue_entries_removed,
        ),
        (
            verb(
                "stale locks of finished transactions cleared",
                "stale locks of finished transactions to clear",
            )
            .into(),
            r.stale_locks_completed,
        ),
        (
            "applied orphan locks (need an operator)".into(),
            r.applied_orphans.len() as u64,
        ),
        ("errors".into(), r.errors.len() as u64),
    ];
    for (k, v) in rows {
        t.row(vec![k, v.to_string()]);
    }
    if r.dry_run {
        outln!("dry run: nothing was changed");
    }
    out!("{}", t.render());
    for id in &r.rolled_back {
        outln!("{} {id}", verb("rolled back", "would roll back"));
    }
    for id in &r.completed {
        outln!("{} {id}", verb("completed", "would complete"));
    }
    for o in &r.applied_orphans {
        outln!(
            "NEEDS AN OPERATOR: item {} of {} carries an applied write of transaction {} whose record is gone; \
             restore it from its before-image ({}) or keep it, then remove the _Tx* attributes (docs/OPERATIONS.md)",
            fmt_key(&o.key),
            o.table,
            o.owner,
            match &o.image_id {
                Some(i) => format!("images-table entry {i}"),
                None => "the _TxG attribute".to_string(),
            }
        );
    }
    if let Some(d) = r.unrecorded_slices {
        let read: Vec<String> = d.indexes().map(|i| (i + 1).to_string()).collect();
        outln!(
            "tables listed as holding locks without record: {} of {} slices read{}",
            d.count,
            d.of,
            if read.is_empty() {
                String::new()
            } else {
                format!(
                    " ({}) of {}",
                    read.join(", "),
                    r.unrecorded_tables.join(", ")
                )
            }
        );
    } else if !r.unrecorded_tables.is_empty() {
        outln!(
            "tables listed as holding locks without record, read whole: {}",
            r.unrecorded_tables.join(", ")
        );
    }
    for e in &r.errors {
        outln!("error: {e}");
    }
}

/// Runs `sweep`.
pub async fn run(ctx: &Ctx, a: &SweepArgs) -> CliResult<u8> {
    let pb = spinner(ctx);
    let opts = if a.now {
        SweepOptions::finish_everything_now()
    } else {
        SweepOptions::new()
            .rollback_after(a.rollback_after)
            .complete_after(a.complete_after)
            .unrecorded_scan_period(a.unrecorded_period)
    };
    let opts = opts
        .dry_run(a.dry_run)
        .delete_after(a.delete_after)
        .segments(a.segments)
        .sweep_images(!a.no_images)
        .tables_to_scan(a.scan_tables.clone())
        .scan_unrecorded_tables(!a.no_unrecorded_tables)
        .unrecorded_table_slices(a.unrecorded_slices)
        .progress(progress_callback(&pb));
    let Some(interval) = a.watch else {
        let r = ctx.mgr.sweep(&opts).await.map_err(|e| explain(ctx, &e))?;
        pb.finish_and_clear();
        print_report(ctx, &r);
        return Ok(if r.is_clean() {
            0
        } else {
            Exit::NeedsOperator as u8
        });
    };
    if !ctx.cli.json {
        eprintln!(
            "sweeping every {} (rollback after {}, delete after {}); stop with Ctrl-C",
            fmt_duration(interval),
            fmt_duration(opts.rollback_after_value()),
            a.delete_after
                .map(fmt_duration)
                .unwrap_or_else(|| "never".into())
        );
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut stop = Some(stop);
    let mut passes = 0u64;
    let mut failed: Option<CliError> = None;
    let total = ctx
        .mgr
        .sweep_every(
            interval,
            &opts,
            async {
                let _ = stopped.await;
            },
            |r| {
                passes += 1;
                pb.set_message("");
                match r {
                    Ok(r) => {
                        if !ctx.cli.json {
                            pb.suspend(|| outln!("-- sweep {passes} at {}", fmt_utc(now_ms())));
                        }
                        pb.suspend(|| print_report(ctx, r));
                    }
                    Err(e) => {
                        let e = explain(ctx, e);
                        pb.suspend(|| eprintln!("sweep {passes} failed: {e}"));
                        failed = Some(e);
                    }
                }
                if a.max_passes.is_some_and(|m| passes >= m)
                    && let Some(s) = stop.take()
                {
                    let _ = s.send(());
                }
            },
        )
        .await;
    pb.finish_and_clear();
    if let Some(e) = failed
        && total.records_scanned == 0
    {
        return Err(CliError {
            message: format!("every sweep failed: {}", e.message),
            ..e
        });
    }
    Ok(if total.is_clean() {
        0
    } else {
        Exit::NeedsOperator as u8
    })
}
