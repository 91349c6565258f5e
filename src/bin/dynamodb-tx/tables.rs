//! `dynamodb-tx tables`: create and verify the transactions, images and lock tables.

use aws_sdk_dynamodb::types::{KeyType, TimeToLiveSpecification};
use clap::Subcommand;
use serde_json::json;

use crate::error::{CliError, CliResult, Exit, explain, sdk_error};
use crate::{Ctx, print_json, spinner};
#[derive(Subcommand, Debug)]
pub enum TablesCmd {
    /// Create the tables unless they exist (idempotent) and wait until they are active.
    Create {
        /// Also enable DynamoDB TTL on the transactions table's `_TxE` attribute.
        #[arg(long)]
        enable_ttl: bool,
        /// Also create this lock table (with TTL on `ttl`).
        #[arg(long, env = "DYNAMODB_TX_LOCK_TABLE")]
        lock_table: Option<String>,
    },
    /// Check that the tables exist with the right keys; show whether TTL is enabled.
    Verify {
        /// Also verify this lock table.
        #[arg(long, env = "DYNAMODB_TX_LOCK_TABLE")]
        lock_table: Option<String>,
    },
}

/// Runs `tables ...`.
pub async fn run(ctx: &Ctx, cmd: &TablesCmd) -> CliResult<u8> {
    match cmd {
        TablesCmd::Create {
            enable_ttl,
            lock_table,
        } => tables_create(ctx, *enable_ttl, lock_table.as_deref()).await,
        TablesCmd::Verify { lock_table } => tables_verify(ctx, lock_table.as_deref()).await,
    }
}

async fn tables_create(ctx: &Ctx, enable_ttl: bool, lock_table: Option<&str>) -> CliResult<u8> {
    let pb = spinner(ctx);
    pb.set_message("creating tables");
    ctx.mgr
        .create_tables()
        .await
        .map_err(|e| explain(ctx, &e))?;
    if enable_ttl {
        enable_record_ttl(ctx).await?;
    }
    if let Some(l) = lock_table {
        dynamodb_transactions::lock::create_lock_table(&ctx.client, l)
            .await
            .map_err(|e| explain(ctx, &e))?;
    }
    pb.finish_and_clear();
    let line = format!(
        "ok: transactions table {}, images table {}{} are active",
        ctx.cli.transactions_table,
        ctx.cli.images_table,
        lock_suffix(lock_table)
    );
    print_tables_ok(ctx, lock_table, &line, false).await
}

async fn enable_record_ttl(ctx: &Ctx) -> CliResult {
    if ttl_status(ctx, &ctx.cli.transactions_table).await? == "ENABLED" {
        return Ok(());
    }
    let spec = TimeToLiveSpecification::builder()
        .attribute_name("_TxE")
        .enabled(true)
        .build()
        .map_err(|e| CliError::new(e.to_string(), None))?;
    ctx.client
        .update_time_to_live()
        .table_name(&ctx.cli.transactions_table)
        .time_to_live_specification(spec)
        .send()
        .await
        .map_err(|e| sdk_error(ctx, "UpdateTimeToLive", &ctx.cli.transactions_table, e))?;
    Ok(())
}

/// `ENABLED`, `DISABLED` (or another DynamoDB status), or `ENABLED on <attr>` when TTL uses another
/// attribute.
async fn ttl_status(ctx: &Ctx, table: &str) -> CliResult<String> {
    let out = ctx
        .client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| sdk_error(ctx, "DescribeTimeToLive", table, e))?;
    let d = out.time_to_live_description();
    let status = d
        .and_then(|d| d.time_to_live_status())
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|| "DISABLED".into());
    Ok(match d.and_then(|d| d.attribute_name()) {
        Some(a) if a != "_TxE" && status == "ENABLED" => format!("ENABLED on {a} (not _TxE)"),
        _ => status,
    })
}

async fn tables_verify(ctx: &Ctx, lock_table: Option<&str>) -> CliResult<u8> {
    ctx.mgr
        .verify_tables()
        .await
        .map_err(|e| explain(ctx, &e))?;
    if let Some(l) = lock_table {
        verify_lock_table(ctx, l).await?;
    }
    let line = format!(
        "ok: transactions table {} and images table {}{} have the right keys",
        ctx.cli.transactions_table,
        ctx.cli.images_table,
        lock_suffix(lock_table)
    );
    print_tables_ok(ctx, lock_table, &line, true).await
}

fn lock_suffix(lock_table: Option<&str>) -> String {
    lock_table
        .map(|l| format!(", lock table {l}"))
        .unwrap_or_default()
}

/// Reports tables that are as they should be (in text: `line`), with the TTL status of the
/// transactions table (with `ttl_hint`, what an unenabled TTL means).
async fn print_tables_ok(
    ctx: &Ctx,
    lock_table: Option<&str>,
    line: &str,
    ttl_hint: bool,
) -> CliResult<u8> {
    let ttl = ttl_status(ctx, &ctx.cli.transactions_table).await?;
    if ctx.cli.json {
        print_json(&json!({
            "status": "ok",
            "transactions_table": ctx.cli.transactions_table,
            "images_table": ctx.cli.images_table,
            "lock_table": lock_table,
            "record_ttl": ttl,
        }));
        return Ok(0);
    }
    outln!("{line}");
    outln!("TTL on _TxE: {ttl}");
    if ttl_hint && ttl != "ENABLED" {
        outln!(
            "  (finalized records stay until `dynamodb-tx sweep --delete-after D` deletes them; \
             `dynamodb-tx tables create --enable-ttl` lets DynamoDB remove them for free)"
        );
    }
    Ok(0)
}

async fn verify_lock_table(ctx: &Ctx, table: &str) -> CliResult {
    let out = ctx
        .client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| {
            let not_found = e
                .as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception());
            if not_found {
                CliError::new(
                    format!("lock table {table} does not exist"),
                    Some(
                        "create it with `dynamodb-tx tables create --lock-table NAME`, or pass \
                         the right --lock-table"
                            .into(),
                    ),
                )
                .exit(Exit::Tables)
            } else {
                sdk_error(ctx, "DescribeTable", table, e)
            }
        })?;
    let keys: Vec<(String, KeyType)> = out
        .table()
        .map(|t| {
            t.key_schema()
                .iter()
                .map(|k| (k.attribute_name().to_string(), k.key_type().clone()))
                .collect()
        })
        .unwrap_or_default();
    let want = vec![
        ("pk".to_string(), KeyType::Hash),
        ("sk".to_string(), KeyType::Range),
    ];
    let mut got = keys.clone();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    if got != want {
        let keys: Vec<String> = keys
            .iter()
            .map(|(name, kind)| format!("{name} ({})", kind.as_str()))
            .collect();
        return Err(CliError::new(
            format!(
                "lock table {table} has keys {}, expected pk (HASH) and sk (RANGE)",
                keys.join(", ")
            ),
            Some("use another --lock-table name".into()),
        )
        .exit(Exit::Tables));
    }
    Ok(())
}
