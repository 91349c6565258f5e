//! Contention policies: who waits, who is rolled back, and that no schedule deadlocks. One file
//! per concept; the helpers they share are here.
#[path = "../common/mod.rs"]
mod common;

mod handover;
mod in_process;
mod line;
mod lock_tickets;
mod looks;
mod marks;
mod oldest_mark;
mod out_of_order;
mod patience;
mod policies;
mod queue;
mod reorder;
mod retries;
mod running;
mod tickets;
mod wound_races;

use std::time::Duration;

use common::*;
use dynamodb_transactions::{ContentionPolicy, Error, TicketSource, TransactionManager};

/// Managers over the env's tables with tickets taken when a transaction begins (so ticket order is
/// the order in which the transactions first wrote), a short lock wait and the given dead time.
fn ordered(env: &TestEnv, dead_after: Duration) -> TransactionManager {
    ordered_by(env, TicketSource::Counter, dead_after)
}

/// Like [`ordered`], with tickets from `source`.
fn ordered_by(env: &TestEnv, source: TicketSource, dead_after: Duration) -> TransactionManager {
    ordered_with(env, source, dead_after, |_| {})
}

/// Like [`ordered_by`], with further settings.
fn ordered_with(
    env: &TestEnv,
    source: TicketSource,
    dead_after: Duration,
    more: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> TransactionManager {
    TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.contention = ContentionPolicy::Ordered {
                dead_after,
                ticket_at_begin: true,
            };
            s.ticket_source = source;
            // Generous: a loaded machine, or DynamoDB's round trips under the profile, make a
            // resolution (wound, settle) take a few hundred ms.
            s.lock_wait = Duration::from_secs(2);
            s.wound_grace = Duration::from_millis(50);
            // The scenarios stage holders and waiters that have a record from their first lock
            // (`Settings::record_on_demand` has tests of its own).
            s.record_on_demand = false;
            more(s);
        })
        .build()
}

/// A coordinator over the env's tables on `client` (interceptors of a test's own), with the ordered
/// policy (tickets taken when a transaction begins, `dead_after` 30 s), a record from the first
/// lock, and otherwise the default settings, then `more`.
fn ordered_on(
    env: &TestEnv,
    client: aws_sdk_dynamodb::Client,
    more: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> TransactionManager {
    TransactionManager::builder(client)
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.contention = ContentionPolicy::Ordered {
                dead_after: Duration::from_secs(30),
                ticket_at_begin: true,
            };
            s.record_on_demand = false;
            more(s);
        })
        .build()
}

/// `tx` reads "k" (its value 1, as put) and holds its lock.
async fn reads_and_locks_k(env: &TestEnv, tx: &dynamodb_transactions::Transaction) {
    let got = tx
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.item().unwrap()["v"], n(1));
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["_TxId"], s(tx.id().as_str()), "{raw:?}");
}

/// Holds the first `operation` request (`"*"`: any) whose body contains `needle` until `f` has run
/// on a fresh runtime with a fresh coordinator over `env`'s tables; `f`'s output is kept.
fn run_before<T: Send + 'static>(
    env: &TestEnv,
    operation: &'static str,
    needle: &str,
    f: impl AsyncFnOnce(TransactionManager) -> T + Send + 'static,
) -> (RunBefore, std::sync::Arc<std::sync::Mutex<Option<T>>>) {
    run_before_with(env, operation, needle, |_| {}, f)
}

/// Like [`run_before`], the fresh coordinator with further settings.
fn run_before_with<T: Send + 'static>(
    env: &TestEnv,
    operation: &'static str,
    needle: &str,
    more: impl FnOnce(&mut dynamodb_transactions::Settings) + Send + 'static,
    f: impl AsyncFnOnce(TransactionManager) -> T + Send + 'static,
) -> (RunBefore, std::sync::Arc<std::sync::Mutex<Option<T>>>) {
    let (txt, imgt) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
    );
    let out = std::sync::Arc::new(std::sync::Mutex::new(None));
    let out_hook = out.clone();
    let hook = RunBefore::new(operation, needle, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let m = TransactionManager::builder(client())
            .transactions_table(&txt)
            .images_table(&imgt)
            .configure(|s| {
                s.rollback_on_drop = false;
                s.write_only_fast_path = false;
                s.record_on_demand = false;
                more(s);
            })
            .build();
        *out_hook.lock().unwrap() = Some(rt.block_on(f(m)));
    });
    (hook, out)
}

async fn ticket_of(env: &TestEnv, id: &dynamodb_transactions::TxId) -> u64 {
    let row = env
        .raw_get(
            env.manager.transactions_table(),
            &item(&[("_TxId", s(id.as_str())), ("_TxN", n(0))]),
        )
        .await
        .unwrap();
    row["_TxK"].as_n().unwrap().parse().unwrap()
}

/// The key of the ticket counter's row in the transactions table.
fn counter_row() -> dynamodb_transactions::Item {
    item(&[("_TxId", s("~ticket-counter")), ("_TxN", n(0))])
}

async fn lock(tx: &dynamodb_transactions::Transaction, table: &str, k: &str) -> Result<(), Error> {
    tx.get_item()
        .table_name(table)
        .key("Id", s(k))
        .send()
        .await
        .map(|_| ())
}

/// `k` put with `v` 1, then locked and set to 2 (buffered) by a transaction of `m`, returned.
async fn held_by(
    env: &TestEnv,
    m: &TransactionManager,
    k: &str,
) -> dynamodb_transactions::Transaction {
    env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
        .await;
    let holder = m.begin();
    lock(&holder, &env.table, k).await.unwrap();
    set_v(&holder, &env.table, k, 2).await.unwrap();
    holder
}

/// A buffered `SET v = <v>` of `k` in `tx`.
async fn set_v(
    tx: &dynamodb_transactions::Transaction,
    table: &str,
    k: &str,
    v: u64,
) -> Result<dynamodb_transactions::WriteOutput, Error> {
    tx.update_item()
        .table_name(table)
        .key("Id", s(k))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(v))
        .send()
        .await
}
