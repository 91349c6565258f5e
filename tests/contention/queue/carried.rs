//! A waiter whose entry the locked item already carries, with life enough left, registers nothing
//! with the holder: the holder's unlock keeps the item's entries, so the registration would only
//! write the holder's record (and cancel its one-request commit). With less than two thirds of
//! its life left, the entry is renewed through the holder as before. Asserted on the holder's
//! registrations and on the queue its unlock leaves.

use super::*;

/// The holder of `k`, a younger waiter whose entry on `k` expires at `now + left`, and the
/// waiter's failed attempt: the holder's registrations, and the item's queue after its commit.
async fn wait_with_entry_left(left: Duration) -> (u64, Vec<(u64, u64)>, Item) {
    let env = TestEnv::new("ct-fifo-carried").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    // The entry's life: 600 s (two thirds: 400 s).
    let m = fifo(&env, true, Duration::from_millis(300));
    let h = m.begin();
    lock(&h, &env.table, "k").await.unwrap();
    let w = m.begin();
    lock(&w, &env.table, "other").await.unwrap();
    let theirs = ticket_of(&env, w.id()).await;
    // The waiter's entry, carried on the item from an earlier wait (a library never writes the
    // queue of a locked item; its holder's lock read it so).
    let expiry = now_ms() + left.as_millis() as u64;
    env.client
        .update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET #q = :q, #f = :f, #v = :one")
        .expression_attribute_names("#q", "_TxQ")
        .expression_attribute_names("#f", "_TxQF")
        .expression_attribute_names("#v", "_TxQV")
        .expression_attribute_values(":q", queue_value(&[(theirs, expiry)]))
        .expression_attribute_values(":f", first_value(&[(theirs, expiry)]))
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    let err = lock(&w, &env.table, "k").await.unwrap_err();
    assert!(is_locked_out(&err), "{err:?}");
    let registered = registrations(&header(&env, h.id()).await);
    set_v(&h, &env.table, "k", 2).await.unwrap();
    h.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["v"], n(2));
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
    w.rollback().await.unwrap();
    (theirs, registered, raw)
}

#[tokio::test]
async fn a_waiter_whose_entry_the_locked_item_carries_registers_nothing() {
    let (theirs, registered, raw) = wait_with_entry_left(Duration::from_secs(590)).await;
    assert_eq!(registered, vec![], "no registration in the holder's record");
    let expiry = raw["_TxQ"].as_m().unwrap()[&theirs.to_string()].clone();
    assert_eq!(
        ticket_keys(&raw),
        vec![theirs],
        "the unlock kept the waiter's entry: {raw:?}"
    );
    assert_eq!(raw["_TxQF"].as_m().unwrap()["e"], expiry, "{raw:?}");
}

#[tokio::test]
async fn a_waiter_whose_carried_entry_runs_low_renews_it_through_the_holder() {
    let (theirs, registered, raw) = wait_with_entry_left(Duration::from_secs(100)).await;
    assert_eq!(registered.len(), 1, "{registered:?}");
    assert_eq!(registered[0].0, theirs);
    let renewed = registered[0].1;
    assert!(renewed > now_ms() + 500_000, "a whole new life: {renewed}");
    assert_eq!(
        raw["_TxQ"],
        queue_value(&[(theirs, renewed)]),
        "the unlock carried the renewed entry: {raw:?}"
    );
}
