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

/// A holder that took the item without contention has no ticket: a waiter judges it younger and,
/// while it gives it `wound_grace` to finish, registers with it all the same, so that its unlock
/// puts the waiter in the item's queue, ahead of any newcomer.
#[tokio::test]
async fn a_waiter_registers_with_a_running_holder_without_a_ticket() {
    let env = TestEnv::new("ct-fifo-ticketless").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    // Tickets at the first contention; a grace long enough for the holder to commit in it.
    let m = fifo_tuned(&env, client(), false, Duration::from_secs(20), |s| {
        s.wound_grace = Duration::from_secs(15)
    });
    let h = m.begin();
    lock(&h, &env.table, "k").await.unwrap();
    let w = Arc::new(m.begin());
    let (w2, table) = (w.clone(), env.table.clone());
    let waiting = tokio::spawn(async move { lock(&w2, &table, "k").await });
    let mut holder = header(&env, h.id()).await;
    for _ in 0..100 {
        if !registrations(&holder).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        holder = header(&env, h.id()).await;
    }
    assert!(
        !holder.contains_key("_TxK"),
        "the holder has no ticket: {holder:?}"
    );
    let theirs = ticket_of(&env, w.id()).await;
    assert_eq!(
        registrations(&holder)
            .iter()
            .map(|r| r.0)
            .collect::<Vec<_>>(),
        vec![theirs],
        "registered during the grace: {holder:?}"
    );
    set_v(&h, &env.table, "k", 2).await.unwrap();
    h.commit().await.unwrap();
    waiting.await.unwrap().unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["v"], n(2));
    assert_eq!(raw["_TxId"], s(w.id().as_str()), "{raw:?}");
    assert_eq!(
        ticket_keys(&raw),
        vec![theirs],
        "carried by the unlock: {raw:?}"
    );
    Arc::into_inner(w).unwrap().rollback().await.unwrap();
}
