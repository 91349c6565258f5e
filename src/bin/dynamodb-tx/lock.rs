//! `dynamodb-tx lock`: inspect distributed locks.

use aws_sdk_dynamodb::types::AttributeValue;
use clap::Subcommand;
use dynamodb_transactions::Item;
use serde_json::{Value, json};

use crate::error::{CliError, CliResult, Exit, endpoint_name, sdk_error};
use crate::output::{Table, fmt_ago, now_ms};
use crate::{Ctx, print_json};
#[derive(Subcommand, Debug)]
pub enum LockCmd {
    /// List the rows of a lock: ticket counters with their queue entries (holder and waiters), lease record.
    List {
        /// The lock (entity) name.
        name: String,
        /// The lock table.
        #[arg(long, env = "DYNAMODB_TX_LOCK_TABLE")]
        lock_table: String,
    },
}

/// Runs `lock ...`.
pub async fn run(ctx: &Ctx, cmd: &LockCmd) -> CliResult<u8> {
    match cmd {
        LockCmd::List { name, lock_table } => lock_list(ctx, lock_table, name).await,
    }
}

fn attr_s<'a>(i: &'a Item, k: &str) -> Option<&'a str> {
    i.get(k).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn attr_n(i: &Item, k: &str) -> Option<i64> {
    i.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
}

async fn lock_list(ctx: &Ctx, table: &str, name: &str) -> CliResult<u8> {
    let mut rows: Vec<Item> = Vec::new();
    let mut start = None;
    loop {
        let page = ctx
            .client
            .query()
            .table_name(table)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_values(":pk", AttributeValue::S(name.to_string()))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| {
                let not_found = e
                    .as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception());
                if not_found {
                    CliError::new(
                        format!("lock table {table} does not exist"),
                        Some(format!(
                            "pass the right --lock-table (DYNAMODB_TX_LOCK_TABLE), or create it with \
                             `dynamodb-tx tables create --lock-table NAME`; looking at {}",
                            endpoint_name(&ctx.cli)
                        )),
                    )
                    .exit(Exit::Tables)
                } else {
                    sdk_error(ctx, "Query", table, e)
                }
            })?;
        rows.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    let now = now_ms() as i64;
    let mut out: Vec<Value> = Vec::new();
    // Queue rows come sorted by sk, so by namespace then ticket.
    let mut holder_seen: Vec<String> = Vec::new();
    for r in &rows {
        let sk = attr_s(r, "sk").unwrap_or_default();
        let exp = attr_n(r, "exp_ms");
        let expired = exp.is_some_and(|e| e < now);
        let base = |kind: &str, ns: &str| {
            json!({
                "kind": kind,
                "namespace": ns,
                "sk": sk,
            })
        };
        if let Some(ns) = sk.strip_suffix("#ctr") {
            let mut v = base("counter", ns);
            v["last_ticket"] = json!(attr_n(r, "n"));
            out.push(v);
            // The queue lives in the counter item: `w#<owner>` (entry) and `t#<owner>` (ticket).
            let mut entries: Vec<(i64, &str, &Item)> = r
                .iter()
                .filter_map(|(k, e)| {
                    let owner = k.strip_prefix("w#")?;
                    Some((attr_n(r, &format!("t#{owner}"))?, owner, e.as_m().ok()?))
                })
                .collect();
            entries.sort_by_key(|(t, _, _)| *t);
            for (i, (ticket, owner, e)) in entries.into_iter().enumerate() {
                let exp = attr_n(e, "exp_ms");
                let mut v = base("queue", ns);
                v["ticket"] = json!(ticket);
                v["owner"] = json!(owner);
                v["heartbeat"] = json!(attr_n(e, "hb"));
                v["lease_ms"] = json!(attr_n(e, "lease_ms"));
                v["expires_ms"] = json!(exp);
                v["created_ms"] = json!(attr_n(e, "created_ms"));
                v["status"] = json!(if exp.is_some_and(|x| x < now) {
                    "expired (by this clock)"
                } else if i == 0 {
                    "holder"
                } else {
                    "waiting"
                });
                out.push(v);
            }
        } else if sk == "#lease" {
            let mut v = base("lease", "");
            let readers: Vec<String> = r
                .get("readers")
                .and_then(|x| x.as_m().ok())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let owner = attr_s(r, "owner");
            v["fence"] = json!(attr_n(r, "fence"));
            v["owner"] = json!(owner);
            v["readers"] = json!(readers);
            v["heartbeat"] = json!(attr_n(r, "hb"));
            v["lease_ms"] = json!(attr_n(r, "lease_ms"));
            v["expires_ms"] = json!(exp);
            v["closed"] = json!(r.get("closed").and_then(|x| x.as_bool().ok()).copied());
            v["status"] = json!(match (owner, readers.len()) {
                (Some(_), _) if expired => "held (lease expired by this clock)".to_string(),
                (Some(_), _) => "held exclusively".to_string(),
                (None, 0) => "free".to_string(),
                (None, n) => format!("held shared by {n} reader(s)"),
            });
            out.push(v);
        } else if let Some((ns, ticket)) = sk.split_once("#q#") {
            let mut v = base("queue", ns);
            v["ticket"] = json!(ticket.trim_start_matches('0').parse::<u64>().unwrap_or(0));
            v["owner"] = json!(attr_s(r, "owner"));
            v["heartbeat"] = json!(attr_n(r, "hb"));
            v["lease_ms"] = json!(attr_n(r, "lease_ms"));
            v["expires_ms"] = json!(exp);
            v["created_ms"] = json!(attr_n(r, "created_ms"));
            let status = if expired {
                "expired (by this clock)"
            } else if holder_seen.iter().any(|n| n == ns) {
                "waiting"
            } else {
                holder_seen.push(ns.to_string());
                "holder"
            };
            v["status"] = json!(status);
            out.push(v);
        } else {
            let mut v = base("other", "");
            v["attributes"] = json!(r.keys().cloned().collect::<Vec<_>>());
            out.push(v);
        }
    }
    if ctx.cli.json {
        print_json(&json!({ "lock_table": table, "name": name, "rows": out }));
        return Ok(0);
    }
    if out.is_empty() {
        outln!("no rows for lock {name:?} in {table}");
        return Ok(0);
    }
    let mut t = Table::new(&[
        "KIND",
        "NAMESPACE",
        "TICKET/FENCE",
        "OWNER",
        "HEARTBEAT",
        "EXPIRES",
        "STATUS",
    ]);
    let s = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for v in &out {
        let number = match v["kind"].as_str() {
            Some("counter") => &v["last_ticket"],
            Some("lease") => &v["fence"],
            _ => &v["ticket"],
        };
        let expires = v["expires_ms"]
            .as_i64()
            .map(|e| fmt_ago(e.max(0) as u64))
            .unwrap_or_else(|| "-".into());
        let owner = match (v["kind"].as_str(), v["readers"].as_array()) {
            (Some("lease"), Some(r)) if !r.is_empty() && v["owner"].is_null() => {
                format!("{} reader(s)", r.len())
            }
            _ => s(&v["owner"]),
        };
        t.row(vec![
            s(&v["kind"]),
            s(&v["namespace"]),
            s(number),
            owner,
            s(&v["heartbeat"]),
            expires,
            s(&v["status"]),
        ]);
    }
    out!("{}", t.render());
    outln!("(holder and expiry are judged by this machine's wall clock)");
    Ok(0)
}
