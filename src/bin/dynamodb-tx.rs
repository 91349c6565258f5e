//! `dynamodb-tx`: see and fix dynamodb-transactions state without writing code.
//!
//! ```text
//! dynamodb-tx [--endpoint URL] [--region R] [--transactions-table T] [--images-table I] [--json] <command>
//!   tables create [--enable-ttl] [--lock-table L] | tables verify [--lock-table L]
//!   tx list [--state pending|committed|rolled-back] [--older-than D] [--unfinalized]
//!   tx show ID | tx commit ID | tx rollback ID
//!   sweep [--dry-run] [--rollback-after D] [--complete-after D] [--delete-after D] [--scan-table T]...
//!         [--no-images] [--segments N] [--watch INTERVAL [--max-passes N]]
//!   lock list NAME --lock-table L
//! ```
//!
//! See `docs/OPERATIONS.md`.

#[path = "dynamodb-tx/output.rs"]
mod output;

use std::process::ExitCode;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{Credentials, Region};
use aws_sdk_dynamodb::types::{AttributeValue, KeyType, TimeToLiveSpecification};
use clap::{Args, Parser, Subcommand, ValueEnum};
use dynamodb_transactions::sweeper::{
    ListOptions, ScanProgress, SweepOptions, SweepReport, TxDetails, TxSummary,
};
use dynamodb_transactions::{
    DEFAULT_IMAGES_TABLE, DEFAULT_TRANSACTIONS_TABLE, Error, Item, TransactionManager, TxId,
    TxState,
};
use indicatif::{ProgressBar, ProgressStyle};
use output::{Table, fmt_ago, fmt_duration, fmt_key, fmt_utc, key_json, now_ms, parse_duration};
use serde_json::{Value, json};

/// Operate dynamodb-transactions: tables, transactions, the sweeper and locks.
#[derive(Parser, Debug)]
#[command(name = "dynamodb-tx", version)]
struct Cli {
    /// DynamoDB endpoint, e.g. http://localhost:8000 for DynamoDB Local.
    #[arg(long, env = "AWS_ENDPOINT_URL_DYNAMODB", global = true)]
    endpoint: Option<String>,
    /// AWS region (default us-east-1 when --endpoint is given).
    #[arg(long, env = "AWS_REGION", global = true)]
    region: Option<String>,
    /// The transactions table.
    #[arg(long, env = "DYNAMODB_TX_TRANSACTIONS_TABLE", default_value = DEFAULT_TRANSACTIONS_TABLE, global = true)]
    transactions_table: String,
    /// The images table.
    #[arg(long, env = "DYNAMODB_TX_IMAGES_TABLE", default_value = DEFAULT_IMAGES_TABLE, global = true)]
    images_table: String,
    /// Print JSON (for scripts) instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Never draw progress bars (they are drawn on stderr, only on a terminal).
    #[arg(long, global = true)]
    no_progress: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create or verify the transactions and images tables (and a lock table).
    Tables {
        #[command(subcommand)]
        action: TablesCmd,
    },
    /// List, inspect, commit or roll back transactions.
    Tx {
        #[command(subcommand)]
        action: TxCmd,
    },
    /// Roll back idle pending transactions, complete decided ones, delete old records and orphans.
    Sweep(SweepArgs),
    /// Inspect distributed locks.
    Lock {
        #[command(subcommand)]
        action: LockCmd,
    },
}

#[derive(Subcommand, Debug)]
enum TablesCmd {
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

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StateArg {
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
enum TxCmd {
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
    Show {
        /// The transaction id.
        id: String,
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

#[derive(Args, Debug)]
struct SweepArgs {
    /// Report what would be done; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Roll back pending transactions idle for this long.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    rollback_after: Duration,
    /// Complete decided, unfinalized transactions idle for this long.
    #[arg(long, value_parser = parse_duration, default_value = "1m")]
    complete_after: Duration,
    /// Delete finalized records idle for this long (default: keep them, e.g. for TTL).
    #[arg(long, value_parser = parse_duration)]
    delete_after: Option<Duration>,
    /// Also scan this user table for orphaned locks (repeatable; reads the whole table).
    #[arg(long = "scan-table", value_name = "TABLE")]
    scan_tables: Vec<String>,
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

#[derive(Subcommand, Debug)]
enum LockCmd {
    /// List the rows of a lock: ticket counters, queue rows (holder and waiters), lease record.
    List {
        /// The lock (entity) name.
        name: String,
        /// The lock table.
        #[arg(long, env = "DYNAMODB_TX_LOCK_TABLE")]
        lock_table: String,
    },
}

/// An error for the operator: what happened and what to do.
struct CliError {
    message: String,
    hint: Option<String>,
    code: u8,
}

impl CliError {
    fn new(message: impl Into<String>, hint: Option<String>) -> CliError {
        CliError {
            message: message.into(),
            hint,
            code: 1,
        }
    }
}

type CliResult<T = ()> = Result<T, CliError>;

struct Ctx {
    cli: Cli,
    client: Client,
    mgr: TransactionManager,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", e.message);
            if let Some(h) = e.hint {
                eprintln!("  hint: {h}");
            }
            ExitCode::from(e.code)
        }
    }
}

async fn client_for(cli: &Cli) -> CliResult<Client> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(ep) = &cli.endpoint {
        loader = loader.endpoint_url(ep);
    }
    let region = cli
        .region
        .clone()
        .or_else(|| cli.endpoint.as_ref().map(|_| "us-east-1".to_string()));
    if let Some(r) = region {
        loader = loader.region(Region::new(r));
    }
    let has_creds = [
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if cli.endpoint.is_some() && !has_creds {
        // DynamoDB Local accepts any credentials.
        loader = loader.credentials_provider(Credentials::new(
            "local",
            "local",
            None,
            None,
            "dynamodb-tx",
        ));
    }
    let conf = loader.load().await;
    if conf.region().is_none() {
        return Err(CliError::new(
            "no AWS region configured",
            Some("pass --region or set AWS_REGION (or give --endpoint for DynamoDB Local)".into()),
        ));
    }
    Ok(Client::new(&conf))
}

async fn run(cli: Cli) -> CliResult<u8> {
    let client = client_for(&cli).await?;
    let mgr = TransactionManager::builder(client.clone())
        .transactions_table(&cli.transactions_table)
        .images_table(&cli.images_table)
        .configure(|s| s.rollback_on_drop = false)
        .build();
    let ctx = Ctx { cli, client, mgr };
    match &ctx.cli.command {
        Command::Tables { action } => match action {
            TablesCmd::Create {
                enable_ttl,
                lock_table,
            } => tables_create(&ctx, *enable_ttl, lock_table.as_deref()).await,
            TablesCmd::Verify { lock_table } => tables_verify(&ctx, lock_table.as_deref()).await,
        },
        Command::Tx { action } => match action {
            TxCmd::List {
                state,
                older_than,
                unfinalized,
            } => tx_list(&ctx, state.map(TxState::from), *older_than, *unfinalized).await,
            TxCmd::Show { id } => tx_show(&ctx, &TxId::from(id.as_str())).await,
            TxCmd::Commit { id } => tx_commit(&ctx, &TxId::from(id.as_str())).await,
            TxCmd::Rollback { id } => tx_rollback(&ctx, &TxId::from(id.as_str())).await,
        },
        Command::Sweep(args) => sweep(&ctx, args).await,
        Command::Lock {
            action: LockCmd::List { name, lock_table },
        } => lock_list(&ctx, lock_table, name).await,
    }
}

/// Turns a library error into a message and a hint.
fn explain(ctx: &Ctx, e: Error) -> CliError {
    let cli = &ctx.cli;
    let hint = match &e {
        Error::TableNotFound { table } => Some(if *table == cli.transactions_table
            || *table == cli.images_table
        {
            format!(
                "create the tables with `dynamodb-tx tables create`, or name the right ones with \
                 --transactions-table/--images-table (DYNAMODB_TX_TRANSACTIONS_TABLE, \
                 DYNAMODB_TX_IMAGES_TABLE); looking at {}",
                endpoint_name(cli)
            )
        } else {
            format!("check the table name; looking at {}", endpoint_name(cli))
        }),
        Error::TableMismatch { .. } => Some(
            "another table has this name: pick other names with --transactions-table/--images-table"
                .into(),
        ),
        Error::TransactionNotFound { tx_id } => Some(format!(
            "no record {tx_id} in table {}: check the id with `dynamodb-tx tx list` (finalized records may have been deleted)",
            cli.transactions_table
        )),
        Error::AlreadyCommitted { .. } => {
            Some("a committed transaction cannot be rolled back".into())
        }
        Error::RolledBack { .. } => Some("a rolled-back transaction cannot be committed".into()),
        Error::UnknownOutcome { .. } | Error::Undetermined { .. } => {
            Some("run `dynamodb-tx tx show ID` later to learn the outcome".into())
        }
        Error::ItemLocked { owner, .. } => Some(format!(
            "another transaction holds the item: inspect it with `dynamodb-tx tx show {owner}`, or run `dynamodb-tx sweep`"
        )),
        Error::DynamoDb { code, message, .. } => {
            let msg = message.as_deref().unwrap_or_default().to_lowercase();
            match code.as_deref() {
                Some("ResourceNotFoundException") => Some(format!(
                    "a table is missing: run `dynamodb-tx tables create` or check the table names; looking at {}",
                    endpoint_name(cli)
                )),
                Some(
                    "AccessDeniedException"
                    | "UnrecognizedClientException"
                    | "InvalidSignatureException"
                    | "ExpiredTokenException",
                ) => Some(
                    "check your AWS credentials and IAM permissions (docs/OPERATIONS.md lists the ones each command needs)"
                        .into(),
                ),
                Some(
                    "ThrottlingException"
                    | "ProvisionedThroughputExceededException"
                    | "RequestLimitExceeded",
                ) => Some("DynamoDB throttled the requests: try again, or use fewer --segments".into()),
                _ if msg.contains("credential") => Some(
                    "no AWS credentials found: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (any value works for DynamoDB Local)"
                        .into(),
                ),
                None => Some(format!(
                    "cannot reach DynamoDB at {}: check --endpoint (AWS_ENDPOINT_URL_DYNAMODB), --region and the network, or start DynamoDB Local",
                    endpoint_name(cli)
                )),
                _ => None,
            }
        }
        _ => None,
    };
    CliError::new(e.to_string(), hint)
}

fn endpoint_name(cli: &Cli) -> String {
    match (&cli.endpoint, &cli.region) {
        (Some(e), _) => e.clone(),
        (None, Some(r)) => format!("DynamoDB in {r}"),
        (None, None) => "DynamoDB (default region)".into(),
    }
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("JSON values serialize")
    );
}

/// A spinner on stderr, hidden unless stderr is a terminal.
fn spinner(ctx: &Ctx) -> ProgressBar {
    if ctx.cli.no_progress || ctx.cli.json {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

fn progress_callback(pb: &ProgressBar) -> impl Fn(&ScanProgress) + Send + Sync + 'static {
    let pb = pb.clone();
    move |p: &ScanProgress| {
        pb.set_message(format!(
            "scanning {} of {}: {}",
            p.phase, p.table, p.scanned
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// tables

async fn tables_create(ctx: &Ctx, enable_ttl: bool, lock_table: Option<&str>) -> CliResult<u8> {
    let pb = spinner(ctx);
    pb.set_message("creating tables");
    ctx.mgr.create_tables().await.map_err(|e| explain(ctx, e))?;
    if enable_ttl {
        enable_record_ttl(ctx).await?;
    }
    if let Some(l) = lock_table {
        dynamodb_transactions::lock::create_lock_table(&ctx.client, l)
            .await
            .map_err(|e| explain(ctx, e))?;
    }
    pb.finish_and_clear();
    let ttl = ttl_status(ctx, &ctx.cli.transactions_table).await?;
    if ctx.cli.json {
        print_json(&json!({
            "status": "ok",
            "transactions_table": ctx.cli.transactions_table,
            "images_table": ctx.cli.images_table,
            "lock_table": lock_table,
            "record_ttl": ttl,
        }));
    } else {
        println!(
            "ok: transactions table {}, images table {}{} are active",
            ctx.cli.transactions_table,
            ctx.cli.images_table,
            lock_table
                .map(|l| format!(", lock table {l}"))
                .unwrap_or_default()
        );
        println!("TTL on _TxE: {ttl}");
    }
    Ok(0)
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
        .map_err(|e| {
            CliError::new(
                format!(
                    "cannot enable TTL: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(&e)
                ),
                Some("the caller needs dynamodb:UpdateTimeToLive".into()),
            )
        })?;
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
        .map_err(|e| {
            CliError::new(
                format!(
                    "cannot read the TTL setting of {table}: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(&e)
                ),
                None,
            )
        })?;
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
    ctx.mgr.verify_tables().await.map_err(|e| explain(ctx, e))?;
    if let Some(l) = lock_table {
        verify_lock_table(ctx, l).await?;
    }
    let ttl = ttl_status(ctx, &ctx.cli.transactions_table).await?;
    if ctx.cli.json {
        print_json(&json!({
            "status": "ok",
            "transactions_table": ctx.cli.transactions_table,
            "images_table": ctx.cli.images_table,
            "lock_table": lock_table,
            "record_ttl": ttl,
        }));
    } else {
        println!(
            "ok: transactions table {} and images table {}{} have the right keys",
            ctx.cli.transactions_table,
            ctx.cli.images_table,
            lock_table
                .map(|l| format!(", lock table {l}"))
                .unwrap_or_default()
        );
        println!("TTL on _TxE: {ttl}");
        if ttl != "ENABLED" {
            println!(
                "  (finalized records stay until `dynamodb-tx sweep --delete-after D` deletes them; \
                 `dynamodb-tx tables create --enable-ttl` lets DynamoDB remove them for free)"
            );
        }
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
                    Some("create it with `dynamodb-tx tables create --lock-table NAME`".into()),
                )
            } else {
                CliError::new(
                    format!(
                        "cannot describe {table}: {}",
                        aws_sdk_dynamodb::error::DisplayErrorContext(&e)
                    ),
                    None,
                )
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
        return Err(CliError::new(
            format!("lock table {table} has keys {keys:?}, expected pk (HASH) and sk (RANGE)"),
            Some("use another --lock-table name".into()),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// tx

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
        .map_err(|e| explain(ctx, e))?;
    pb.finish_and_clear();
    if ctx.cli.json {
        print_json(&Value::Array(list.iter().map(summary_json).collect()));
        return Ok(0);
    }
    if list.is_empty() {
        println!("no transactions match");
        return Ok(0);
    }
    let mut t = Table::new(&["ID", "STATE", "FINALIZED", "VERSION", "UPDATED", "CREATED"]);
    for s in &list {
        t.row(vec![
            s.id.to_string(),
            s.state.to_string(),
            if s.finalized { "yes" } else { "no" }.into(),
            s.version.to_string(),
            fmt_ago(s.updated_ms),
            fmt_utc(s.created_ms),
        ]);
    }
    print!("{}", t.render());
    println!("{} transaction(s)", list.len());
    Ok(0)
}

async fn describe(ctx: &Ctx, id: &TxId) -> CliResult<TxDetails> {
    ctx.mgr
        .describe_transaction(id)
        .await
        .map_err(|e| explain(ctx, e))?
        .ok_or_else(|| explain(ctx, Error::TransactionNotFound { tx_id: id.clone() }))
}

fn details_json(d: &TxDetails) -> Value {
    let id = &d.summary.id;
    let mut v = summary_json(&d.summary);
    v["requests"] = Value::Array(
        d.requests
            .iter()
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
        d.items
            .iter()
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
                })
            })
            .collect(),
    );
    v["locked_items"] = json!(d.locked_items().count());
    v
}

async fn tx_show(ctx: &Ctx, id: &TxId) -> CliResult<u8> {
    let d = describe(ctx, id).await?;
    if ctx.cli.json {
        print_json(&details_json(&d));
        return Ok(0);
    }
    let s = &d.summary;
    println!("transaction {}", s.id);
    println!(
        "  state      {}{}",
        s.state,
        if s.finalized { " (finalized)" } else { "" }
    );
    println!("  version    {}", s.version);
    println!(
        "  created    {} ({})",
        fmt_utc(s.created_ms),
        fmt_ago(s.created_ms)
    );
    println!(
        "  updated    {} ({})",
        fmt_utc(s.updated_ms),
        fmt_ago(s.updated_ms)
    );
    if let Some(e) = s.expires_at_s {
        println!("  expires    {} (TTL)", fmt_utc(e * 1000));
    }
    println!();
    let mut t = Table::new(&["#", "REQUEST", "TABLE", "KEY", "EXPRESSIONS"]);
    for (i, r) in d.requests.iter().enumerate() {
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
    print!("{}", t.render());
    println!();
    let mut t = Table::new(&["TABLE", "KEY", "ITEM"]);
    for i in &d.items {
        let status = match &i.locked_by {
            Some(o) if *o == s.id => {
                let mut st = "LOCKED by this transaction".to_string();
                if i.applied {
                    st.push_str(", write applied");
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
    print!("{}", t.render());
    let locked = d.locked_items().count();
    println!("{locked} item(s) still locked by this transaction");
    if locked > 0 {
        let what = match s.state {
            TxState::Pending => {
                "`dynamodb-tx tx commit ID` or `dynamodb-tx tx rollback ID` decides it"
            }
            _ => {
                "`dynamodb-tx tx commit ID` (committed) or `tx rollback ID` (rolled back) finishes it"
            }
        };
        println!("  {what}");
    }
    Ok(0)
}

async fn state_json(ctx: &Ctx, id: &TxId) -> CliResult<Value> {
    let st = ctx
        .mgr
        .transaction_state(id)
        .await
        .map_err(|e| explain(ctx, e))?;
    Ok(match st {
        Some((s, f)) => json!({ "id": id.as_str(), "state": s.to_string(), "finalized": f }),
        None => json!({ "id": id.as_str(), "state": Value::Null, "finalized": Value::Null }),
    })
}

async fn tx_commit(ctx: &Ctx, id: &TxId) -> CliResult<u8> {
    let tx = ctx.mgr.resume(id).await.map_err(|e| explain(ctx, e))?;
    tx.commit().await.map_err(|e| explain(ctx, e))?;
    let v = state_json(ctx, id).await?;
    if ctx.cli.json {
        print_json(&v);
    } else {
        println!(
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
        .map_err(|e| explain(ctx, e))?;
    let v = state_json(ctx, id).await?;
    if ctx.cli.json {
        print_json(&v);
    } else {
        println!(
            "rolled back {id} (finalized: {})",
            v["finalized"].as_bool().unwrap_or(false)
        );
    }
    Ok(0)
}

// ---------------------------------------------------------------------------------------------
// sweep

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
        "orphan_locks_released": r.orphan_locks_released,
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
        println!(
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
        ("items scanned".into(), r.items_scanned),
        (
            verb("orphan locks released", "orphan locks to release").into(),
            r.orphan_locks_released,
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
        println!("dry run: nothing was changed");
    }
    print!("{}", t.render());
    for id in &r.rolled_back {
        println!("{} {id}", verb("rolled back", "would roll back"));
    }
    for id in &r.completed {
        println!("{} {id}", verb("completed", "would complete"));
    }
    for o in &r.applied_orphans {
        println!(
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
    for e in &r.errors {
        println!("error: {e}");
    }
}

async fn sweep(ctx: &Ctx, a: &SweepArgs) -> CliResult<u8> {
    let pb = spinner(ctx);
    let opts = SweepOptions::new()
        .dry_run(a.dry_run)
        .rollback_after(a.rollback_after)
        .complete_after(a.complete_after)
        .delete_after(a.delete_after)
        .segments(a.segments)
        .sweep_images(!a.no_images)
        .tables_to_scan(a.scan_tables.clone())
        .progress(progress_callback(&pb));
    let Some(interval) = a.watch else {
        let r = ctx.mgr.sweep(&opts).await.map_err(|e| explain(ctx, e))?;
        pb.finish_and_clear();
        print_report(ctx, &r);
        return Ok(if r.is_clean() { 0 } else { 3 });
    };
    if !ctx.cli.json {
        eprintln!(
            "sweeping every {} (rollback after {}, delete after {}); stop with Ctrl-C",
            fmt_duration(interval),
            fmt_duration(a.rollback_after),
            a.delete_after
                .map(fmt_duration)
                .unwrap_or_else(|| "never".into())
        );
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut stop = Some(stop);
    let mut passes = 0u64;
    let mut failed: Option<String> = None;
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
                            pb.suspend(|| println!("-- sweep {passes} at {}", fmt_utc(now_ms())));
                        }
                        pb.suspend(|| print_report(ctx, r));
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        pb.suspend(|| eprintln!("sweep {passes} failed: {msg}"));
                        failed = Some(msg);
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
    if let Some(msg) = failed
        && total.records_scanned == 0
    {
        return Err(CliError::new(format!("every sweep failed: {msg}"), None));
    }
    Ok(if total.is_clean() { 0 } else { 3 })
}

// ---------------------------------------------------------------------------------------------
// lock

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
                        Some(
                            "pass the right --lock-table (DYNAMODB_TX_LOCK_TABLE), or create it with \
                             `dynamodb-tx tables create --lock-table NAME`"
                                .into(),
                        ),
                    )
                } else {
                    CliError::new(
                        format!(
                            "cannot query {table}: {}",
                            aws_sdk_dynamodb::error::DisplayErrorContext(&e)
                        ),
                        Some(format!(
                            "check --endpoint, --region and credentials; looking at {}",
                            endpoint_name(&ctx.cli)
                        )),
                    )
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
        println!("no rows for lock {name:?} in {table}");
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
    print!("{}", t.render());
    println!("(holder and expiry are judged by this machine's wall clock)");
    Ok(0)
}
