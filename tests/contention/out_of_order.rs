//! `Settings::yield_out_of_order`: `run`'s first attempt that meets contention on an item below
//! one it holds gives the attempt up at once, and its retry relocks what it read in key order.

use std::time::Duration;

use dynamodb_transactions::{TicketSource, TxId, TxState};
use tokio::sync::Mutex;

use crate::common::*;
use crate::retries::{read_values, write_values};
use crate::{lock, ordered_with};

/// A unit of work reads `b`, then `a`, which another transaction holds: its first attempt gives
/// itself up at the first look at `a` and releases `b` while `a` is still held (on the code
/// before, and with the setting off, it waited at `a` holding `b`). Its retry relocks `a`, then
/// `b`, once the holder commits, and the closure's second run commits on the holder's value.
#[tokio::test]
async fn a_first_attempt_meeting_contention_below_an_item_it_holds_yields_at_once() {
    let env = TestEnv::new("ct-out-of-order").await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(10))]))
            .await;
    }
    let m = ordered_with(&env, TicketSource::Counter, Duration::from_secs(30), |s| {
        s.yield_out_of_order = true;
        // Held reads would be released and taken back instead (tests/contention/reorder.rs).
        s.reorder_held_reads = false;
        s.backoff_base = Duration::from_millis(1);
        // The retry waits for the holder (younger, running) until it commits.
        s.wound_grace = Duration::from_secs(60);
        s.lock_wait = Duration::from_secs(60);
    });
    // The holder of `a`: a first attempt of another coordinator, older (its ticket at begin).
    let holder = m.begin();
    lock(&holder, &env.table, "a").await.unwrap();
    holder
        .update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(20))
        .send()
        .await
        .unwrap();
    let ids: Mutex<Vec<TxId>> = Mutex::new(Vec::new());
    let table = env.table.clone();
    let unit = m.run(async |tx| {
        ids.lock().await.push(tx.id().clone());
        let v = read_values(tx, &table, ["b", "a"]).await?;
        // Move 1 from `b` to `a`.
        write_values(tx, &table, [("b", v[0] - 1), ("a", v[1] + 1)]).await?;
        Ok(())
    });
    let driver = async {
        // The first attempt is rolled back and `b` released while the holder still holds `a`.
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let first = ids.lock().await.first().cloned();
                let b = env.raw_get(&env.table, &key("b")).await.unwrap();
                if let Some(first) = first
                    && env.tx_state(&first).await.map(|s| s.0) == Some(TxState::RolledBack)
                    && !b.contains_key("_TxId")
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the first attempt kept `b` while it waited at `a`");
        let a = env.raw_get(&env.table, &key("a")).await.unwrap();
        assert_eq!(a["_TxId"], s(holder.id().as_str()), "{a:?}");
        holder.commit().await.unwrap();
    };
    let (done, ()) = tokio::join!(unit, driver);
    done.unwrap();
    let ids = ids.lock().await.clone();
    assert_eq!(ids.len(), 2, "the closure ran twice");
    assert_eq!(
        env.tx_state(&ids[1]).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await.unwrap(),
        item(&[("Id", s("a")), ("v", n(21))])
    );
    assert_eq!(
        env.raw_get(&env.table, &key("b")).await.unwrap(),
        item(&[("Id", s("b")), ("v", n(9))])
    );
}
