//! Many coordinators transferring money between accounts at once: the total is conserved, and no
//! lock or pending record is left behind.
mod common;

use common::*;
use dynamodb_transactions::{Error, TransactionManager};
use rand::{Rng, SeedableRng};

fn balance(item: &dynamodb_transactions::Item) -> i64 {
    item["bal"].as_n().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_from_eight_coordinators_conserve_the_total() {
    let env = TestEnv::new("conc").await;
    let accounts = 10;
    for i in 0..accounts {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("acct{i}"))), ("bal", n(100))]),
        )
        .await;
    }
    let mut handles = Vec::new();
    for w in 0..8u64 {
        let client = client();
        let m = TransactionManager::builder(client)
            .transactions_table(env.manager.transactions_table())
            .images_table(env.manager.images_table())
            .configure(|s| {
                s.run_attempts = 100;
                // Half the workers commit in phases, to mix both commit paths.
                if w % 2 == 1 {
                    s.one_shot_max_items = 0;
                }
                // Each way of taking locked reads: a quarter of the workers record first, a quarter
                // lock first, the rest send both together (the default).
                s.locked_reads = match w % 4 {
                    2 => dynamodb_transactions::LockedReads::RecordThenLock,
                    3 => dynamodb_transactions::LockedReads::LockThenRecord,
                    _ => dynamodb_transactions::LockedReads::RecordWithLock,
                };
            })
            .build();
        let table = env.table.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(w);
            let mut done = 0;
            for _ in 0..15 {
                let from = rng.random_range(0..accounts);
                let to = (from + rng.random_range(1..accounts)) % accounts;
                let amount = rng.random_range(1..20);
                let table = table.clone();
                let r = m
                    .run(async move |tx| {
                        // Read-modify-write under read locks: a lost update would break the total.
                        let a = tx
                            .get_item()
                            .table_name(&table)
                            .key("Id", s(&format!("acct{from}")))
                            .send()
                            .await?;
                        let b = tx
                            .get_item()
                            .table_name(&table)
                            .key("Id", s(&format!("acct{to}")))
                            .send()
                            .await?;
                        let (a, b) = (balance(a.item().unwrap()), balance(b.item().unwrap()));
                        tx.put_item()
                            .table_name(&table)
                            .item("Id", s(&format!("acct{from}")))
                            .item("bal", n(a - amount))
                            .send()
                            .await?;
                        tx.put_item()
                            .table_name(&table)
                            .item("Id", s(&format!("acct{to}")))
                            .item("bal", n(b + amount))
                            .send()
                            .await?;
                        Ok::<_, Error>(())
                    })
                    .await;
                match r {
                    Ok(()) => done += 1,
                    Err(e) => panic!("worker {w}: transfer failed: {e}"),
                }
            }
            done
        }));
    }
    let mut committed = 0;
    for h in handles {
        committed += h.await.unwrap();
    }
    assert_eq!(committed, 8 * 15);
    let items = env.scan_all(&env.table).await;
    assert_eq!(items.len(), accounts);
    let total: i64 = items.iter().map(balance).sum();
    assert_eq!(total, 100 * accounts as i64, "total conserved");
    for i in &items {
        assert!(!has_tx_attrs(i), "lock left: {i:?}");
    }
    // Every record is decided and finalized.
    for row in env.scan_all(env.manager.transactions_table()).await {
        // Ids starting with `~` are bookkeeping (the ticket counter), not transactions.
        if row["_TxId"].as_s().unwrap().starts_with('~') {
            continue;
        }
        if row
            .get("_TxN")
            .and_then(|v| v.as_n().ok())
            .map(String::as_str)
            == Some("0")
        {
            assert!(
                row.contains_key("_TxF"),
                "record not finalized: {:?}",
                row.get("_TxS")
            );
        }
    }
    assert!(env.scan_all(env.manager.images_table()).await.is_empty());
}
