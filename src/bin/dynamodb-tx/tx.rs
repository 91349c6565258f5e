//! `dynamodb-tx tx`: list, show, commit and roll back transactions.

use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use dynamodb_transactions::sweeper::{ItemStatus, ListOptions, TxDetails, TxSummary};
use dynamodb_transactions::{Error, TxId, TxState};
use serde_json::{Value, json};

use crate::error::{CliResult, explain};
use crate::output::{Table, fmt_ago, fmt_key, fmt_utc, key_json, parse_duration};
use crate::{Ctx, print_json, progress_callback, spinner};
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StateArg {
    Pending,
    Committed,
    RolledBack,
}

impl From<StateArg> for TxState {
    fn from(s: StateArg) -> TxState {
        match s {
            StateArg::Pending => TxState::Pending,
            StateArg::Committed => TxState::Committed,
            StateArg::RolledBack => TxState::RolledBack,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum TxCmd {
    /// List transactions, most recently updated first.
    List {
        /// Only transactions in this state.
        #[arg(long, value_enum)]
        state: Option<StateArg>,
        /// Only records not updated for at least this long (30s, 5m, 2h, 1d).
        #[arg(long, value_parser = parse_duration)]
        older_than: Option<Duration>,
        /// Only transactions that are not finalized.
        #[arg(long)]
        unfinalized: bool,
    },
    /// Show a transaction: state, version, requests, and which items are still locked.
    ///
    /// A large transaction is summarised: the first --limit requests and items (items still locked
    /// first), and how many more there are.
    Show {
        /// The transaction id.
        id: String,
        /// Show at most this many requests and items.
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: usize,
        /// Show every request and item.
        #[arg(long, conflicts_with = "limit")]
        all: bool,
    },
    /// Commit a pending transaction (or finish a committed one).
    Commit {
        /// The transaction id.
        id: String,
    },
    /// Roll back a pending transaction (or finish a rolled-back one).
    Rollback {
        /// The transaction id.
        id: String,
    },
}

/// Runs `tx ...`.
pub async fn run(ctx: &Ctx, cmd: &TxCmd) -> CliResult<u8> {
    match cmd {
        TxCmd::List {
            state,
            older_than,
            unfinalized,
        } => tx_list(ctx, state.map(TxState::from), *older_than, *unfinalized).await,
        TxCmd::Show { id, limit, all } => {
            let limit = if *all { usize::MAX } else { *limit };
            tx_show(ctx, &TxId::from(id.as_str()), limit).await
        }
        TxCmd::Commit { id } => tx_commit(ctx, &TxId::from(id.as_str())).await,
        TxCmd::Rollback { id } => tx_rollback(ctx, &TxId::from(id.as_str())).await,
    }
}

fn summary_json(s: &TxSummary) -> Value {
    json!({
        "id": s.id.as_str(),
        "state": s.state.to_string(),
        "finalized": s.finalized,
        "version": s.version,
        "chunks": s.chunks,
        "created_ms": s.created_ms,
        "updated_ms": s.updated_ms,
        "expires_at_s": s.expires_at_s,
        "tombstone": s.tombstone,
    })
}

async fn tx_list(
    ctx: &Ctx,
    state: Option<TxState>,
    older_than: Option<Duration>,
    unfinalized: bool,
) -> CliResult<u8> {
    let pb = spinner(ctx);
    let list = ctx
        .mgr
        .list_transactions(
            &ListOptions::new()
                .state(state)
                .older_than(older_than)
                .unfinalized(unfinalized)
                .progress(progress_callback(&pb)),
        )
        .await
        .map_err(|e| explain(ctx, &e))?;
    pb.finish_and_clear();
    if ctx.cli.json {
        print_json(&Value::Array(list.iter().map(summary_json).collect()));
        return Ok(0);
    }
    if list.is_empty() {
        outln!("no transactions match");
        return Ok(0);
    }
    let mut t = Table::new(&["ID", "STATE", "FINALIZED", "VERSION", "UPDATED", "CREATED"]);
    for s in &list {
        // A tombstone: put when a lock of this id was released while the id had no record.
        let state = if s.tombstone {
            format!("{} (tombstone)", s.state)
        } else {
            s.state.to_string()
        };
        t.row(vec![
            s.id.to_string(),
            state,
            if s.finalized { "yes" } else { "no" }.into(),
            s.version.to_string(),
            fmt_ago(s.updated_ms),
            fmt_utc(s.created_ms),
        ]);
    }
    out!("{}", t.render());
    outln!("{} transaction(s)", list.len());
    Ok(0)
}

async fn describe(ctx: &Ctx, id: &TxId) -> CliResult<TxDetails> {
    ctx.mgr
        .describe_transaction(id)
        .await
        .map_err(|e| explain(ctx, &e))?
        .ok_or_else(|| explain(ctx, &Error::TransactionNotFound { tx_id: id.clone() }))
}

/// The items `tx show` prints, at most `limit`: in order of first mention, or, when some must be
/// left out, those still locked (by this or another transaction) first.
fn shown_items(d: &TxDetails, limit: usize) -> Vec<&ItemStatus> {
    let mut items: Vec<&ItemStatus> = d.items.iter().collect();
    if items.len() > limit {
        items.sort_by_key(|i| i.locked_by.is_none());
        items.truncate(limit);
    }
    items
}

fn details_json(d: &TxDetails, limit: usize) -> Value {
    let id = &d.summary.id;
    let mut v = summary_json(&d.summary);
    let items = shown_items(d, limit);
    v["requests_total"] = json!(d.requests.len());
    v["requests_omitted"] = json!(d.requests.len().saturating_sub(limit));
    v["items_total"] = json!(d.items.len());
    v["items_omitted"] = json!(d.items.len() - items.len());
    v["requests"] = Value::Array(
        d.requests
            .iter()
            .take(limit)
            .map(|r| {
                json!({
                    "kind": r.kind.to_string(),
                    "table": r.table,
                    "key": key_json(&r.key),
                    "update_expression": r.update_expression,
                    "condition_expression": r.condition_expression,
                })
            })
            .collect(),
    );
    v["items"] = Value::Array(
        items
            .into_iter()
            .map(|i| {
                json!({
                    "table": i.table,
                    "key": key_json(&i.key),
                    "exists": i.exists,
                    "locked_by": i.locked_by.as_ref().map(|o| o.to_string()),
                    "locked_by_this": i.locked_by_tx(id),
                    "applied": i.applied,
                    "transient": i.transient,
                    "image_in_table": i.image_in_table,
                    "rolls_forward": i.rolls_forward,
                })
            })
            .collect(),
    );
    v["locked_items"] = json!(d.locked_items().count());
    v
}

async fn tx_show(ctx: &Ctx, id: &TxId, limit: usize) -> CliResult<u8> {
    let d = describe(ctx, id).await?;
    if ctx.cli.json {
        print_json(&details_json(&d, limit));
        return Ok(0);
    }
    let s = &d.summary;
    outln!("transaction {}", s.id);
    outln!(
        "  state      {}{}",
        s.state,
        if s.finalized { " (finalized)" } else { "" }
    );
    outln!("  version    {}", s.version);
    outln!(
        "  created    {} ({})",
        fmt_utc(s.created_ms),
        fmt_ago(s.created_ms)
    );
    outln!(
        "  updated    {} ({})",
        fmt_utc(s.updated_ms),
        fmt_ago(s.updated_ms)
    );
    if let Some(e) = s.expires_at_s {
        outln!("  expires    {} (TTL)", fmt_utc(e * 1000));
    }
    outln!();
    let mut t = Table::new(&["#", "REQUEST", "TABLE", "KEY", "EXPRESSIONS"]);
    for (i, r) in d.requests.iter().enumerate().take(limit) {
        let mut ex = Vec::new();
        if let Some(u) = &r.update_expression {
            ex.push(format!("update: {u}"));
        }
        if let Some(c) = &r.condition_expression {
            ex.push(format!("condition: {c}"));
        }
        t.row(vec![
            i.to_string(),
            r.kind.to_string(),
            r.table.clone(),
            fmt_key(&r.key),
            ex.join("; "),
        ]);
    }
    out!("{}", t.render());
    let more = d.requests.len().saturating_sub(limit);
    if more > 0 {
        outln!(
            "... and {more} more request(s) ({} in all): `--all` shows every one, `--limit N` the first N",
            d.requests.len()
        );
    }
    outln!();
    let items = shown_items(&d, limit);
    let more = d.items.len() - items.len();
    let mut t = Table::new(&["TABLE", "KEY", "ITEM"]);
    for i in items {
        let status = match &i.locked_by {
            Some(o) if *o == s.id => {
                let mut st = "LOCKED by this transaction".to_string();
                if i.applied {
                    st.push_str(", write applied");
                }
                if i.rolls_forward {
                    st.push_str(", write applied when unlocked");
                }
                if i.transient {
                    st.push_str(", placeholder");
                }
                if i.image_in_table {
                    st.push_str(", image in images table");
                }
                st
            }
            Some(o) => format!("locked by another transaction {o}"),
            None if i.exists => "unlocked".into(),
            None => "absent".into(),
        };
        t.row(vec![i.table.clone(), fmt_key(&i.key), status]);
    }
    out!("{}", t.render());
    if more > 0 {
        outln!(
            "... and {more} more item(s) ({} in all; locked ones are listed first): `--all` shows every one",
            d.items.len()
        );
    }
    let locked = d.locked_items().count();
    outln!("{locked} item(s) still locked by this transaction");
    if locked > 0 {
        let what = match s.state {
            TxState::Pending => {
                "`dynamodb-tx tx commit ID` or `dynamodb-tx tx rollback ID` decides it"
            }
            _ => {
                "`dynamodb-tx tx commit ID` (committed) or `tx rollback ID` (rolled back) finishes it"
            }
        };
        outln!("  {what}");
    }
    Ok(0)
}

async fn state_json(ctx: &Ctx, id: &TxId) -> CliResult<Value> {
    let st = ctx
        .mgr
        .transaction_state(id)
        .await
        .map_err(|e| explain(ctx, &e))?;
    Ok(match st {
        Some(s) => {
            json!({ "id": id.as_str(), "state": s.state.to_string(), "finalized": s.finalized })
        }
        None => json!({ "id": id.as_str(), "state": Value::Null, "finalized": Value::Null }),
    })
}

async fn tx_commit(ctx: &Ctx, id: &TxId) -> CliResult<u8> {
    let tx = ctx.mgr.resume(id).await.map_err(|e| explain(ctx, &e))?;
    tx.commit().await.map_err(|e| explain(ctx, &e))?;
    let v = state_json(ctx, id).await?;
    if ctx.cli.json {
        print_json(&v);
    } else {
        outln!(
            "committed {id} (finalized: {})",
            v["finalized"].as_bool().unwrap_or(false)
        );
    }
    Ok(0)
}

async fn tx_rollback(ctx: &Ctx, id: &TxId) -> CliResult<u8> {
    ctx.mgr
        .rollback_transaction(id)
        .await
        .map_err(|e| explain(ctx, &e))?;
    let v = state_json(ctx, id).await?;
    if ctx.cli.json {
        print_json(&v);
    } else {
        outln!(
            "rolled back {id} (finalized: {})",
            v["finalized"].as_bool().unwrap_or(false)
        );
    }
    Ok(0)
}
