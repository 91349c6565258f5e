//! Conflicts DynamoDB answers are the library's to absorb: transfers driven by hand on a few hot
//! accounts meet `TransactionConflictException` and `TransactionConflict` cancellations from each
//! other's `TransactWriteItems`, and no call returns them raw.

use std::sync::{Arc, Mutex};

use dynamodb_transactions::fault::{DynamoDbProfile, ProfileSettings};
use dynamodb_transactions::{ContentionPolicy, Error, TxOutcome};

use crate::common::*;

const ACCOUNTS: usize = 6;
const WORKERS: usize = 8;
const TRANSFERS: usize = 25;

fn account(i: usize) -> String {
    format!("acct{i}")
}

/// DynamoDB's conflict as DynamoDB words it, instead of the typed `Error::Conflict`.
fn raw_conflict(e: &Error) -> bool {
    if let Error::Conflict { .. } = e {
        // What a conflict the resends could not absorb must say: retryable, still pending.
        assert!(e.is_retryable(), "{e}");
        assert_eq!(e.transaction_outcome(), Some(TxOutcome::Pending), "{e}");
        assert!(e.to_string().contains("still pending"), "{e}");
    }
    matches!(e, Error::DynamoDb { code: Some(c), .. }
        if c == "TransactionConflictException" || c == "TransactionConflict")
}

#[tokio::test]
async fn hand_driven_transfers_on_hot_accounts_never_see_a_raw_conflict() {
    let mut settings = ProfileSettings::all(21);
    settings.stale_reads = false;
    let profile = DynamoDbProfile::new(settings);
    let env = TestEnv::through_profile("absorb", &profile, |s| {
        s.contention = ContentionPolicy::Ordered {
            dead_after: std::time::Duration::from_secs(2),
            ticket_at_begin: false,
        };
    })
    .await;
    for i in 0..ACCOUNTS {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&account(i))), ("bal", n(1000))]),
        )
        .await;
    }
    let raw: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let m = env.manager.clone();
        let table = env.table.clone();
        let raw = raw.clone();
        workers.push(tokio::spawn(async move {
            let mut committed = 0;
            for t in 0..TRANSFERS {
                let from = (w + t) % ACCOUNTS;
                let to = (w * 3 + t + 1) % ACCOUNTS;
                if from == to {
                    continue;
                }
                let tx = m.begin();
                let step = async {
                    tx.get_item()
                        .table_name(&table)
                        .key("Id", s(&account(from)))
                        .send()
                        .await?;
                    tx.get_item()
                        .table_name(&table)
                        .key("Id", s(&account(to)))
                        .send()
                        .await?;
                    for (k, d) in [(from, -1), (to, 1)] {
                        tx.update_item()
                            .table_name(&table)
                            .key("Id", s(&account(k)))
                            .update_expression("SET bal = bal + :d")
                            .expression_attribute_values(":d", n(d))
                            .send()
                            .await?;
                    }
                    Ok::<(), Error>(())
                }
                .await;
                let id = tx.id().clone();
                let note = |what: &str, e: &Error| {
                    if raw_conflict(e) {
                        raw.lock().unwrap().push(format!("{what} of {id}: {e}"));
                    }
                };
                match step {
                    Ok(()) => match tx.commit().await {
                        Ok(()) => committed += 1,
                        Err(e) => {
                            note("commit", &e);
                            if let Err(e) = m.rollback_transaction(&id).await {
                                note("rollback_transaction", &e);
                            }
                        }
                    },
                    Err(e) => {
                        note("transfer", &e);
                        if let Err(e) = tx.rollback().await {
                            note("rollback", &e);
                        }
                    }
                }
            }
            committed
        }));
    }
    let mut committed = 0;
    for w in workers {
        committed += w.await.unwrap();
    }
    let raw = raw.lock().unwrap().clone();
    assert!(raw.is_empty(), "raw conflicts returned: {raw:#?}");
    // Settle whatever a failed rollback left (the sweeper meets the profile too), then check
    // the books.
    let report = env
        .manager
        .sweep(
            &dynamodb_transactions::sweeper::SweepOptions::finish_everything_now()
                .tables_to_scan([env.table.clone()]),
        )
        .await
        .expect("the sweep absorbs conflicts too");
    assert!(
        report.errors.is_empty(),
        "sweep errors: {:?}",
        report.errors
    );
    let mut total = 0i64;
    for it in env.scan_all(&env.table).await {
        assert!(!has_tx_attrs(&it), "left locked: {it:?}");
        total += it["bal"].as_n().unwrap().parse::<i64>().unwrap();
    }
    assert_eq!(total, 1000 * ACCOUNTS as i64, "money is conserved");
    let stats = profile.stats();
    eprintln!("{committed} transfers committed; profile: {stats:?}");
    assert!(committed > 0);
    assert!(
        stats.writes_in_conflict + stats.transactions_in_conflict > 0,
        "the workload met DynamoDB's conflicts"
    );
}
