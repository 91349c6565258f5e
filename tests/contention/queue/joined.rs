//! A waiter refused by an older entry on an unlocked item takes its own place on the item, so
//! that a newcomer coming after it queues behind it even if it never meets a holder to register
//! with: asserted on the item's queue attributes and on who takes the item.

use super::*;

/// The tickets an item's queue carries, and the queue's version.
fn queue_of(raw: &Item) -> (Vec<u64>, u64) {
    let version = raw["_TxQV"].as_n().unwrap().parse().unwrap();
    (ticket_keys(raw), version)
}

#[tokio::test]
async fn a_waiter_refused_by_the_queue_on_a_free_item_keeps_its_place_on_it() {
    let env = TestEnv::new("ct-fifo-join").await;
    // An older waiter (ticket 0) has its entry on the free item and has not come back yet.
    env.raw_put(&env.table, queued_item("k", &[(0, now_ms() + 600_000)], 1))
        .await;
    let m = fifo(&env, true, Duration::from_millis(300));
    let waiter = m.begin();
    let err = lock(&waiter, &env.table, "k").await.unwrap_err();
    assert!(is_locked_out(&err), "{err:?}");
    let mine = ticket_of(&env, waiter.id()).await;
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(
        queue_of(&raw),
        (vec![0, mine], 2),
        "the refused waiter wrote its entry beside the older one: {raw:?}"
    );
    assert!(!raw.contains_key("_TxId"), "and did not lock it: {raw:?}");
    assert_eq!(raw["_TxQF"].as_m().unwrap()["t"], n(0), "the oldest first");

    // The older waiter gave up: its entry expires. A newcomer, younger than the waiter, is now
    // refused by the waiter's entry instead of taking the item.
    expire_oldest_entry(&env, &env.table, "k").await;
    let newcomer = m.begin();
    let err = lock(&newcomer, &env.table, "k").await.unwrap_err();
    assert!(is_locked_out(&err), "the newcomer waits: {err:?}");
    let theirs = ticket_of(&env, newcomer.id()).await;
    assert!(mine < theirs);
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
    assert_eq!(
        queue_of(&raw).0,
        vec![mine, theirs],
        "the expired entry dropped, the newcomer behind the waiter: {raw:?}"
    );

    // The waiter's turn: it takes the item, commits, and its unlock leaves the newcomer's entry.
    lock(&waiter, &env.table, "k").await.unwrap();
    set_v(&waiter, &env.table, "k", 2).await.unwrap();
    waiter.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["v"], n(2));
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
    assert_eq!(queue_of(&raw).0, vec![theirs], "{raw:?}");
    lock(&newcomer, &env.table, "k").await.unwrap();
    newcomer.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert!(
        !raw.contains_key("_TxQ") && !raw.contains_key("_TxId"),
        "{raw:?}"
    );
}
