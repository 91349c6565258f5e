//! The assembler from stream records to released changes: whole transactions after their
//! decision, rolled-back ones never, commit order per item, marked fast-path writes, and items
//! whose lock was never seen.

use aws_sdk_dynamodb::types::AttributeValue;

use super::*;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn item(pairs: &[(&str, AttributeValue)]) -> Item {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn rec(seq: u32, id: &str, old: Option<Item>, new: Option<Item>) -> StreamRec {
    StreamRec {
        id: RecId {
            shard: 0,
            seq: format!("{seq:05}"),
        },
        table: "T".into(),
        key: item(&[("Id", s(id))]),
        old,
        new,
        time: None,
    }
}

fn locked(id: &str, v: &str, tx: &str) -> Item {
    item(&[
        ("Id", s(id)),
        ("v", s(v)),
        ("_TxId", s(tx)),
        ("_TxD", AttributeValue::N("1".into())),
    ])
}

fn plain(id: &str, v: &str) -> Item {
    item(&[("Id", s(id)), ("v", s(v))])
}

fn expected(ids: &[&str]) -> Option<HashSet<ItemRef>> {
    Some(
        ids.iter()
            .map(|i| ItemRef::new("T", &item(&[("Id", s(i))])))
            .collect(),
    )
}

#[test]
fn a_committed_transaction_is_released_whole_after_its_decision() {
    let mut a = Assembler::new();
    let now = Instant::now();
    assert!(
        a.push(
            rec(1, "a", Some(plain("a", "0")), Some(locked("a", "0", "x"))),
            now
        )
        .is_empty()
    );
    assert!(
        a.push(
            rec(
                2,
                "b",
                None,
                Some(item(&[
                    ("Id", s("b")),
                    ("_TxId", s("x")),
                    ("_TxT", AttributeValue::Bool(true))
                ]))
            ),
            now
        )
        .is_empty()
    );
    a.push(
        rec(3, "a", Some(locked("a", "0", "x")), Some(plain("a", "1"))),
        now,
    );
    // An outside write of another item goes at once.
    a.push(rec(4, "c", None, Some(plain("c", "9"))), now);
    let out = a.release(now);
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0].0, Some(Change::Single(c)) if c.after == Some(plain("c", "9"))));
    a.push(
        rec(5, "b", Some(locked("b", "", "x")), Some(plain("b", "2"))),
        now,
    );
    assert_eq!(a.to_check(now).len(), 1);
    a.decide(
        &TxId("x".into()),
        Decision::Committed(expected(&["a", "b"])),
        now,
    );
    let out = a.release(now);
    assert_eq!(out.len(), 1);
    let (Some(Change::Transaction { id, items }), recs) = &out[0] else {
        panic!("a transaction")
    };
    assert_eq!(id.as_str(), "x");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].before, Some(plain("a", "0")));
    assert_eq!(items[0].after, Some(plain("a", "1")));
    assert_eq!(items[1].before, None);
    assert_eq!(recs.len(), 4);
    assert_eq!(a.buffered(), 0);
}

#[test]
fn a_rolled_back_transaction_yields_nothing_and_later_writes_wait_for_its_decision() {
    let mut a = Assembler::new();
    let now = Instant::now();
    a.push(
        rec(1, "a", Some(plain("a", "0")), Some(locked("a", "0", "x"))),
        now,
    );
    let mut applied = locked("a", "5", "x");
    applied.insert("_TxA".into(), s("1"));
    assert_eq!(
        a.push(
            rec(2, "a", Some(locked("a", "0", "x")), Some(applied.clone())),
            now
        )
        .len(),
        1
    );
    a.push(rec(3, "a", Some(applied), Some(plain("a", "0"))), now);
    a.push(
        rec(4, "a", Some(plain("a", "0")), Some(plain("a", "7"))),
        now,
    );
    assert!(
        a.release(now).is_empty(),
        "the outside write waits behind the undecided one"
    );
    let done = a.decide(&TxId("x".into()), Decision::RolledBack, now);
    assert_eq!(done.len(), 2);
    let out = a.release(now);
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0].0, Some(Change::Single(c)) if c.after == Some(plain("a", "7"))));
}

#[test]
fn transactions_sharing_an_item_come_in_commit_order() {
    let mut a = Assembler::new();
    let now = Instant::now();
    a.push(
        rec(1, "a", Some(plain("a", "0")), Some(locked("a", "0", "x"))),
        now,
    );
    a.push(
        rec(2, "a", Some(locked("a", "0", "x")), Some(plain("a", "1"))),
        now,
    );
    a.push(
        rec(3, "a", Some(plain("a", "1")), Some(locked("a", "1", "y"))),
        now,
    );
    a.push(
        rec(4, "a", Some(locked("a", "1", "y")), Some(plain("a", "2"))),
        now,
    );
    a.decide(
        &TxId("y".into()),
        Decision::Committed(expected(&["a"])),
        now,
    );
    assert!(a.release(now).is_empty(), "y waits for x");
    a.decide(
        &TxId("x".into()),
        Decision::Committed(expected(&["a"])),
        now,
    );
    let out = a.release(now);
    let ids: Vec<_> = out
        .iter()
        .map(|(c, _)| match c {
            Some(Change::Transaction { id, .. }) => id.as_str().to_string(),
            _ => panic!("transactions"),
        })
        .collect();
    assert_eq!(ids, ["x", "y"]);
}

fn marked(id: &str, v: &str, tx: &str) -> Item {
    item(&[("Id", s(id)), ("v", s(v)), ("_TxM", s(tx))])
}

#[test]
fn marked_fast_path_writes_are_one_transaction_and_a_later_outside_update_is_single() {
    let mut a = Assembler::new();
    let now = Instant::now();
    a.push(
        rec(1, "a", Some(plain("a", "0")), Some(marked("a", "1", "x"))),
        now,
    );
    a.push(rec(2, "b", None, Some(marked("b", "2", "x"))), now);
    // An outside update of a keeps the mark: not x's.
    a.push(
        rec(
            3,
            "a",
            Some(marked("a", "1", "x")),
            Some(marked("a", "5", "x")),
        ),
        now,
    );
    // A second fast-path transaction re-marks b.
    a.push(
        rec(
            4,
            "b",
            Some(marked("b", "2", "x")),
            Some(marked("b", "3", "y")),
        ),
        now,
    );
    assert!(a.release(now).is_empty(), "everything waits for x");
    let mut checked: Vec<_> = a.to_check(now).into_iter().map(|t| t.0).collect();
    checked.sort();
    assert_eq!(checked, ["x", "y"]);
    a.decide(
        &TxId("x".into()),
        Decision::Committed(expected(&["a", "b"])),
        now,
    );
    a.decide(
        &TxId("y".into()),
        Decision::Committed(expected(&["b"])),
        now,
    );
    let out = a.release(now);
    assert_eq!(out.len(), 3, "{out:?}");
    let Some(Change::Transaction { id, items }) = &out[0].0 else {
        panic!("x first: {out:?}")
    };
    assert_eq!(id.as_str(), "x");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].before, Some(plain("a", "0")));
    assert_eq!(items[0].after, Some(plain("a", "1")));
    assert_eq!(items[1].before, None);
    assert_eq!(items[1].after, Some(plain("b", "2")));
    let singles: Vec<_> = out
        .iter()
        .filter_map(|(c, _)| match c {
            Some(Change::Single(c)) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(singles.len(), 1);
    assert_eq!(singles[0].before, Some(plain("a", "1")), "stripped");
    assert_eq!(singles[0].after, Some(plain("a", "5")), "stripped");
    assert!(
        out.iter()
            .any(|(c, _)| matches!(c, Some(Change::Transaction { id, .. }) if id.as_str() == "y"))
    );
    assert_eq!(a.buffered(), 0);
}

#[test]
fn an_item_never_seen_locked_is_given_up_only_once_every_shard_is_read_past_the_commit() {
    let mut a = Assembler::new();
    a.grace = Duration::ZERO;
    let now = Instant::now();
    let mut settle = rec(2, "a", Some(locked("a", "0", "x")), Some(plain("a", "1")));
    settle.time = Some(100);
    a.push(settle, now);
    a.decide(
        &TxId("x".into()),
        Decision::Committed(expected(&["a", "b"])),
        now,
    );
    // A shard is still at second 100: b's lock may be in it.
    a.horizon = Some(100);
    assert!(a.release(now).is_empty());
    a.horizon = Some(101);
    let out = a.release(now);
    assert_eq!(out.len(), 1);
}

#[test]
fn a_write_of_the_protocols_attributes_alone_on_an_unlocked_item_is_no_change() {
    let mut a = Assembler::new();
    let now = Instant::now();
    let with = |v: &str, mark: &str| {
        let mut i = plain("a", v);
        i.insert(
            "_TxH".into(),
            AttributeValue::M(
                [
                    ("t".to_string(), AttributeValue::N(mark.into())),
                    ("e".to_string(), AttributeValue::N("9".into())),
                ]
                .into(),
            ),
        );
        i
    };
    // A waiter's mark, then its renewal: consumed at once, nothing to release.
    let consumed = a.push(
        rec(1, "a", Some(plain("a", "0")), Some(with("0", "7"))),
        now,
    );
    assert_eq!(consumed.len(), 1, "{consumed:?}");
    let consumed = a.push(rec(2, "a", Some(with("0", "7")), Some(with("0", "5"))), now);
    assert_eq!(consumed.len(), 1, "{consumed:?}");
    // An outside write that changes the item is still one.
    a.push(rec(3, "a", Some(with("0", "5")), Some(with("1", "5"))), now);
    let out = a.release(now);
    assert_eq!(out.len(), 1, "{out:?}");
    let Some(Change::Single(c)) = &out[0].0 else {
        panic!("a single change: {out:?}")
    };
    assert_eq!(c.before, Some(plain("a", "0")));
    assert_eq!(c.after, Some(plain("a", "1")));
    assert_eq!(a.buffered(), 0);
}

#[test]
fn only_transactions_that_go_without_another_record_keep_an_idle_feed() {
    let mut a = Assembler::new();
    let now = Instant::now();
    // x locks a and b, settles a: undecided so far, its record not read yet.
    a.push(
        rec(1, "a", Some(plain("a", "0")), Some(locked("a", "0", "x"))),
        now,
    );
    a.push(
        rec(2, "b", Some(plain("b", "0")), Some(locked("b", "0", "x"))),
        now,
    );
    a.push(
        rec(3, "a", Some(locked("a", "0", "x")), Some(plain("a", "1"))),
        now,
    );
    assert!(a.releases_in_time(), "its record is read next");
    a.decide(&TxId("x".into()), Decision::Pending, now);
    assert!(!a.releases_in_time(), "undecided: its coordinator decides");
    a.decide(
        &TxId("x".into()),
        Decision::Committed(expected(&["a", "b"])),
        now,
    );
    assert!(!a.releases_in_time(), "b is still locked by x");
    // y settles c, then a after x's write; its record is gone: it goes after the grace, but
    // behind x's entry of a.
    a.push(
        rec(4, "c", Some(locked("c", "0", "y")), Some(plain("c", "1"))),
        now,
    );
    a.push(
        rec(5, "a", Some(locked("a", "1", "y")), Some(plain("a", "2"))),
        now,
    );
    a.decide(&TxId("y".into()), Decision::Committed(None), now);
    assert!(!a.releases_in_time(), "y waits behind x");
    // x's lock of b was not seen after all (a fresh feed): x waits for the grace alone.
    a.open_locks.clear();
    assert!(a.releases_in_time(), "x and then y go after the grace");
    assert!(a.release(now).is_empty(), "not before the grace");
    let later = now + a.grace;
    assert_eq!(a.release(later).len(), 2);
    assert!(!a.releases_in_time());
}

#[test]
fn a_commit_without_record_marked_with_its_own_id_goes_at_once_and_another_mark_does_not() {
    let mut a = Assembler::new();
    let now = Instant::now();
    // x locks a without a record and commits it with one write marked with its id.
    a.push(
        rec(1, "a", Some(plain("a", "0")), Some(locked("a", "0", "x"))),
        now,
    );
    a.push(
        rec(
            2,
            "a",
            Some(locked("a", "0", "x")),
            Some(marked("a", "1", "x")),
        ),
        now,
    );
    // y, with a record, settles b, which still carries an older transaction's mark.
    a.push(
        rec(
            3,
            "b",
            Some(marked("b", "0", "w")),
            Some(locked("b", "0", "y")),
        ),
        now,
    );
    a.push(
        rec(
            4,
            "b",
            Some(locked("b", "0", "y")),
            Some(marked("b", "2", "w")),
        ),
        now,
    );
    assert_eq!(
        a.to_check(now).into_iter().map(|t| t.0).collect::<Vec<_>>(),
        ["y"],
        "x's record is not read"
    );
    let out = a.release(now);
    assert_eq!(out.len(), 1, "{out:?}");
    let Some(Change::Transaction { id, items }) = &out[0].0 else {
        panic!("x: {out:?}")
    };
    assert_eq!(id.as_str(), "x");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].before, Some(plain("a", "0")));
    assert_eq!(items[0].after, Some(plain("a", "1")), "stripped");
    assert_eq!(out[0].1.len(), 2, "the lock's record and the commit's");
    assert_eq!(a.buffered(), 1, "y waits for its record");
    // z settles c, then d with its own mark: z had a record (two items), which decides.
    a.push(
        rec(5, "c", Some(locked("c", "0", "z")), Some(plain("c", "1"))),
        now,
    );
    a.push(
        rec(
            6,
            "d",
            Some(locked("d", "0", "z")),
            Some(marked("d", "1", "z")),
        ),
        now,
    );
    assert!(a.release(now).is_empty(), "z waits for its record");
    assert!(a.to_check(now).iter().any(|t| t.0 == "z"));
}
