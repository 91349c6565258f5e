//! The evaluator's rules, case by case, without a server (`tests/transaction/after_image.rs` checks
//! them against DynamoDB Local).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue as V;

use super::{Applied, apply_update};
use crate::error::Item;

fn n(x: &str) -> V {
    V::N(x.into())
}

fn s(x: &str) -> V {
    V::S(x.into())
}

fn item(attrs: &[(&str, V)]) -> Item {
    attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn run(before: &Item, expr: &str, values: &[(&str, V)]) -> Applied {
    let values: HashMap<String, V> = values
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let names = HashMap::from([("#h".to_string(), "hits".to_string())]);
    apply_update(before, expr, Some(&names), Some(&values))
}

fn after(before: &Item, expr: &str, values: &[(&str, V)]) -> Item {
    match run(before, expr, values) {
        Applied::Item(i) => i,
        other => panic!("{expr}: {other:?}"),
    }
}

fn rejected(before: &Item, expr: &str, values: &[(&str, V)]) -> bool {
    matches!(run(before, expr, values), Applied::Rejected(_))
}

#[test]
fn arithmetic_reads_the_item_before_the_update() {
    let base = item(&[("Id", s("k")), ("hits", n("1.50")), ("b", n("7"))]);
    let a = after(
        &base,
        "SET #h = #h + :one, b = hits - b",
        &[(":one", n("1"))],
    );
    assert_eq!(a["hits"], n("2.5"));
    assert_eq!(a["b"], n("-5.5"), "b reads hits before its own action");
    assert!(rejected(
        &base,
        "SET c = missing + :one",
        &[(":one", n("1"))]
    ));
    assert!(rejected(&base, "SET hits = Id + :one", &[(":one", n("1"))]));
    let d38 = "9".repeat(38);
    assert!(matches!(
        run(
            &base,
            "SET hits = :a + :b",
            &[(":a", V::N(d38)), (":b", n("0.5"))]
        ),
        Applied::Unsure(_)
    ));
}

#[test]
fn functions_default_and_append() {
    let base = item(&[("Id", s("k")), ("l", V::L(vec![n("1")]))]);
    let a = after(
        &base,
        "SET c = if_not_exists(c, :z), l = list_append(l, :l), m = list_append(:l, if_not_exists(l, :l))",
        &[(":z", n("0")), (":l", V::L(vec![s("x")]))],
    );
    assert_eq!(a["c"], n("0"));
    assert_eq!(a["l"], V::L(vec![n("1"), s("x")]));
    assert_eq!(a["m"], V::L(vec![s("x"), n("1")]));
    assert!(rejected(
        &base,
        "SET l = list_append(Id, :l)",
        &[(":l", V::L(vec![]))]
    ));
}

#[test]
fn nested_paths_need_their_parents() {
    let base = item(&[
        ("Id", s("k")),
        ("m", V::M(HashMap::from([("x".to_string(), n("1"))]))),
        ("l", V::L(vec![n("1"), n("2")])),
    ]);
    let a = after(
        &base,
        "SET m.y = :v, l[1] = :v REMOVE m.x",
        &[(":v", s("v"))],
    );
    assert_eq!(a["m"], V::M(HashMap::from([("y".to_string(), s("v"))])));
    assert_eq!(a["l"], V::L(vec![n("1"), s("v")]));
    assert!(matches!(
        run(&base, "SET l[1] = :v, l[9] = :v", &[(":v", s("v"))]),
        Applied::Unsure(_)
    ));
    let a = after(&base, "SET l[9] = :v", &[(":v", s("v"))]);
    assert_eq!(
        a["l"],
        V::L(vec![n("1"), n("2"), s("v")]),
        "past the end appends"
    );
    assert!(rejected(&base, "SET nope.y = :v", &[(":v", s("v"))]));
    assert!(rejected(&base, "SET l.y = :v", &[(":v", s("v"))]));
    assert!(rejected(&base, "SET m = :v, m.x = :v", &[(":v", s("v"))]));
    assert!(rejected(
        &base,
        "SET m.x = :v, m[0] = :v",
        &[(":v", s("v"))]
    ));
}

#[test]
fn add_and_delete_on_numbers_and_sets() {
    let base = item(&[
        ("Id", s("k")),
        ("c", n("1")),
        ("ss", V::Ss(vec!["a".into(), "b".into()])),
        ("ns", V::Ns(vec!["1".into()])),
    ]);
    let a = after(
        &base,
        "ADD c :two, ss :ss, fresh :two, ns :ns",
        &[
            (":two", n("2")),
            (":ss", V::Ss(vec!["c".into()])),
            (":ns", V::Ns(vec!["1.0".into(), "2".into()])),
        ],
    );
    assert_eq!(a["c"], n("3"));
    assert_eq!(a["fresh"], n("2"));
    assert_eq!(a["ss"], V::Ss(vec!["a".into(), "b".into(), "c".into()]));
    assert_eq!(a["ns"], V::Ns(vec!["1".into(), "2".into()]));
    assert!(rejected(
        &base,
        "ADD ss :b DELETE ss :b",
        &[(":b", V::Ss(vec!["b".into()]))]
    ));
    let a = after(
        &base,
        "DELETE ss :b",
        &[(":b", V::Ss(vec!["b".into(), "z".into()]))],
    );
    assert_eq!(a["ss"], V::Ss(vec!["a".into()]));
    assert!(rejected(&base, "ADD c :s", &[(":s", s("x"))]));
    assert!(rejected(&base, "ADD ss :two", &[(":two", n("2"))]));
    assert!(rejected(
        &base,
        "DELETE c :ns",
        &[(":ns", V::Ns(vec!["1".into()]))]
    ));
    let a = after(
        &base,
        "DELETE ns :ns, nothing :ns",
        &[(":ns", V::Ns(vec!["1".into()]))],
    );
    assert!(!a.contains_key("ns"), "a set emptied by DELETE goes");
}

#[test]
fn overlapping_actions_are_refused() {
    let base = item(&[("Id", s("k")), ("a", n("1"))]);
    assert!(rejected(&base, "SET a = :v REMOVE a", &[(":v", n("2"))]));
    assert!(rejected(&base, "SET a = :v ADD a :v", &[(":v", n("2"))]));
    assert!(matches!(
        run(&base, "SET a = nonsense(", &[]),
        Applied::Unsure(_)
    ));
}
