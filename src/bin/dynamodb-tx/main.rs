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
//!   feed --table T [--table U ...] [--from-start] [--until-idle D] [--checkpoint-table C]
//! ```
//!
//! One module per subcommand group (`tables`, `tx`, `sweep`, `lock`, `feed`), beside the error handling
//! (`error`) and the output formatting (`output`). See `docs/OPERATIONS.md`.

/// `println!` that survives a closed stdout (see [`output_failed`]).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            $crate::output_failed(e);
        }
    }};
}

/// `print!` that survives a closed stdout (see [`output_failed`]).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout(), $($arg)*) {
            $crate::output_failed(e);
        }
    }};
}

mod error;
mod feed;
mod lock;
mod output;
mod sweep;
mod tables;
mod tx;

use std::process::ExitCode;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{Credentials, ProvideCredentials, Region};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use dynamodb_transactions::sweeper::ScanProgress;
use dynamodb_transactions::{DEFAULT_IMAGES_TABLE, DEFAULT_TRANSACTIONS_TABLE, TransactionManager};
use error::{CliError, CliResult, EXIT_CODES_HELP, Exit};
use indicatif::{ProgressBar, ProgressStyle};
use lock::LockCmd;
use serde_json::Value;
use sweep::SweepArgs;
use tables::TablesCmd;
use tx::TxCmd;

/// Operate dynamodb-transactions: tables, transactions, the sweeper and locks.
#[derive(Parser, Debug)]
#[command(
    name = "dynamodb-tx",
    version,
    after_help = EXIT_CODES_HELP,
    arg_required_else_help = false
)]
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
    #[command(arg_required_else_help = false)]
    Tables {
        #[command(subcommand)]
        action: TablesCmd,
    },
    /// List, inspect, commit or roll back transactions.
    #[command(arg_required_else_help = false)]
    Tx {
        #[command(subcommand)]
        action: TxCmd,
    },
    /// Roll back idle pending transactions, complete decided ones, delete old records and orphans.
    Sweep(SweepArgs),
    /// Inspect distributed locks.
    #[command(arg_required_else_help = false)]
    Lock {
        #[command(subcommand)]
        action: LockCmd,
    },
    /// Print the committed changes of user tables from their streams: one JSON object a line,
    /// a whole transaction or a single write (see docs/FEED.md).
    Feed(feed::FeedArgs),
}

struct Ctx {
    cli: Cli,
    /// The AWS configuration the client was made from (the change feed's Streams client too).
    sdk: aws_config::SdkConfig,
    client: Client,
    mgr: TransactionManager,
}

fn main() -> ExitCode {
    let cli = match command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Other as u8);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit as u8)
        }
    }
}

/// The command line. `--help` shows `[env: NAME=value]` for an environment variable that is set
/// and `[env: NAME]` for one that is not (clap alone prints `[env: NAME=]`, as if it were set to
/// nothing).
fn command() -> clap::Command {
    fn unset_values_hidden(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            let unset = a
                .get_env()
                .is_some_and(|v| std::env::var_os(v).is_none_or(|x| x.is_empty()));
            if unset { a.hide_env_values(true) } else { a }
        })
        .mut_subcommands(unset_values_hidden)
    }
    unset_values_hidden(Cli::command())
}

/// Ends the process when stdout cannot be written. A reader that went away (`dynamodb-tx tx list |
/// head -1`) ends it quietly with exit 141, as a tool killed by SIGPIPE would; another failure (a
/// full disk) is one line on stderr and exit 1. Interrupting a command here is safe: every step it
/// takes is repeatable, like an interrupted sweep.
fn output_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(141);
    }
    eprintln!("error: cannot write the output: {e}");
    std::process::exit(Exit::Other as u8 as i32);
}

/// Prints `--help` and `--version` as clap does; any other argument error as one line, exit 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let text = e.render().to_string();
    let mut parts: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .map(String::from)
        .collect();
    parts.push("see `dynamodb-tx --help` (or `dynamodb-tx COMMAND --help`)".into());
    // Lines of one message (`... not provided:` then the arguments) join with a space.
    let mut line = String::new();
    for p in parts {
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(&p);
    }
    if line.starts_with("error:") {
        eprintln!("{line}");
    } else {
        eprintln!("error: {line}");
    }
    ExitCode::from(Exit::Usage as u8)
}

async fn client_for(cli: &Cli) -> CliResult<(Client, aws_config::SdkConfig)> {
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
    let chain_credentials = [
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    let local_credentials = cli.endpoint.is_some() && !chain_credentials;
    if local_credentials {
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
        )
        .exit(Exit::Unreachable));
    }
    if !local_credentials {
        // Resolve the credentials once before any request, so that missing ones are reported as
        // such (and `sweep --watch` does not retry forever without them). The client resolves
        // them again (and refreshes them) itself.
        let resolved = match conf.credentials_provider() {
            Some(p) => p
                .provide_credentials()
                .await
                .map(|_| ())
                .map_err(|e| error::root_cause(&e)),
            None => Err("no credentials provider".into()),
        };
        if let Err(cause) = resolved {
            return Err(CliError::new(
                format!("no AWS credentials found ({cause})"),
                Some(error::credentials_hint()),
            )
            .exit(Exit::Unreachable));
        }
    }
    Ok((Client::new(&conf), conf))
}

async fn run(cli: Cli) -> CliResult<u8> {
    let (client, sdk) = client_for(&cli).await?;
    let mgr = TransactionManager::builder(client.clone())
        .transactions_table(&cli.transactions_table)
        .images_table(&cli.images_table)
        .configure(|s| s.rollback_on_drop = false)
        .build();
    let ctx = Ctx {
        cli,
        sdk,
        client,
        mgr,
    };
    match &ctx.cli.command {
        Command::Tables { action } => tables::run(&ctx, action).await,
        Command::Tx { action } => tx::run(&ctx, action).await,
        Command::Sweep(args) => sweep::run(&ctx, args).await,
        Command::Lock { action } => lock::run(&ctx, action).await,
        Command::Feed(args) => feed::run(&ctx, args).await,
    }
}

fn print_json(v: &Value) {
    outln!(
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
