//! Projections and filters applied to the version a reader sees, before-images included.

use super::*;

/// Projections with nested paths and name placeholders are applied to images too.
#[tokio::test]
async fn nested_projection_applies_to_images() {
    let env = TestEnv::new("iso-nested").await;
    let doc = |v: i32| {
        item(&[
            ("Id", s("a")),
            (
                "doc",
                AttributeValue::M(HashMap::from([
                    ("x".to_string(), n(v)),
                    ("y".to_string(), n(v + 100)),
                    (
                        "l".to_string(),
                        AttributeValue::L(vec![n(v), n(v + 1), n(v + 2)]),
                    ),
                ])),
            ),
            ("other", s("o")),
        ])
    };
    env.raw_put(&env.table, doc(1)).await;
    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .set_item(Some(doc(50)))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    // A put with ALL_OLD only locks: apply it with an update returning ALL_NEW on another item.
    let tx2 = pending_update(&env, "b").await;
    tx.rollback().await.unwrap();
    // Now a real pending change of "a".
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET doc.x = :v, doc.l[1] = :v")
        .expression_attribute_values(":v", n(999))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let expect = |x: i32, l1: i32| {
        item(&[(
            "doc",
            AttributeValue::M(HashMap::from([
                ("x".to_string(), n(x)),
                ("l".to_string(), AttributeValue::L(vec![n(l1)])),
            ])),
        )])
    };
    for (level, x, l1) in [(UNCOMMITTED, 999, 999), (COMMITTED, 1, 2)] {
        let got = env
            .manager
            .query()
            .table_name(&env.table)
            .key_condition_expression("Id = :id")
            .expression_attribute_values(":id", s("a"))
            .projection_expression("#d.x, #d.l[1]")
            .expression_attribute_names("#d", "doc")
            .isolation(level)
            .send_all()
            .await
            .unwrap();
        assert_eq!(got, vec![expect(x, l1)], "{level:?}");
        let got = env
            .manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .projection_expression("doc.x, doc.l[1]")
            .isolation(level)
            .send()
            .await
            .unwrap();
        assert_eq!(got.item, Some(expect(x, l1)), "{level:?}");
    }
    tx.rollback().await.unwrap();
    tx2.rollback().await.unwrap();
}

/// At `Committed`, a filter is evaluated on the version served, not on the stored item.
#[tokio::test]
async fn filters_see_the_committed_version() {
    let env = TestEnv::new("iso-filter").await;
    // a: committed 1, pending 10; b: committed 10, pending 1; c: committed 10, untouched;
    // d: pending insert 10.
    for (id, v) in [("a", 1), ("b", 10), ("c", 10)] {
        env.raw_put(&env.table, item(&[("Id", s(id)), ("v", n(v))]))
            .await;
    }
    let tx = env.manager.begin();
    for (id, v) in [("a", 10), ("b", 1), ("d", 10)] {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    }
    let ids = |items: Vec<Item>| -> BTreeSet<String> {
        items
            .iter()
            .map(|i| i["Id"].as_s().unwrap().clone())
            .collect()
    };
    for (level, want) in [(UNCOMMITTED, ["a", "c", "d"]), (COMMITTED, ["b", "c", "c"])] {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        let got = env
            .manager
            .scan()
            .table_name(&env.table)
            .filter_expression("v >= :min")
            .projection_expression("Id")
            .expression_attribute_values(":min", n(5))
            .isolation(level)
            .send_all()
            .await
            .unwrap();
        assert!(got.iter().all(|i| i.len() == 1), "projection kept: {got:?}");
        assert_eq!(ids(got), want, "{level:?}");
    }
    tx.rollback().await.unwrap();
}

/// The library's own evaluation of filters on before-images agrees with DynamoDB's evaluation of the
/// same filters on the same items.
#[tokio::test]
async fn filters_on_images_agree_with_dynamodb() {
    let env = TestEnv::new("iso-eval").await;
    let images = unique_name("iso-eval-img");
    env.guard.add(&images);
    create_table(&env.client, &images, ("Id", ScalarAttributeType::S), None).await;
    let tx = pending_record(&env).await;
    let l = |v: Vec<AttributeValue>| AttributeValue::L(v);
    let m = |v: Vec<(&str, AttributeValue)>| {
        AttributeValue::M(v.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    };
    let b = |v: &[u8]| AttributeValue::B(Blob::new(v.to_vec()));
    let ss = |v: &[&str]| AttributeValue::Ss(v.iter().map(|s| s.to_string()).collect());
    let ns = |v: &[&str]| AttributeValue::Ns(v.iter().map(|s| s.to_string()).collect());
    let items: Vec<Vec<(&str, AttributeValue)>> = vec![
        vec![("a", n(1)), ("s", s("abc")), ("ss", ss(&["x", "abc"]))],
        vec![("a", n("5.00")), ("s", s("ab")), ("ns", ns(&["1", "5"]))],
        vec![
            ("a", n(10)),
            ("s", s("héllo")),
            ("l", l(vec![n(1), s("ab")])),
        ],
        vec![
            ("a", n(-3)),
            ("s", s("b")),
            ("m", m(vec![("x", n(1)), ("y", s("ab"))])),
        ],
        vec![
            ("a", n("1e2")),
            ("bin", b(b"\x01\x02\x03")),
            ("bo", AttributeValue::Bool(true)),
        ],
        vec![
            ("a", s("5")),
            ("nu", AttributeValue::Null(true)),
            ("l", l(vec![])),
        ],
        vec![("s", s("")), ("m", m(vec![])), ("ss", ss(&["ab"]))],
        vec![
            ("a", n("0.0001")),
            ("s", s("zzz")),
            ("ns", ns(&["5.0", "-1"])),
        ],
        vec![
            ("l", l(vec![n(5), l(vec![s("deep")])])),
            ("bin", b(b"\x01")),
        ],
        vec![],
    ];
    for (i, attrs) in items.iter().enumerate() {
        let id = format!("i{i}");
        let mut it = item(&[("Id", s(&id))]);
        it.extend(attrs.iter().map(|(k, v)| (k.to_string(), v.clone())));
        env.raw_put(&env.table, it.clone()).await;
        // The same item as the before-image of a pending change: stored is something else.
        let locked = item(&[
            ("Id", s(&id)),
            ("junk", s("stored")),
            ("_TxId", s(tx.id().as_str())),
            ("_TxA", s("1")),
            ("_TxD", n(1)),
            ("_TxG", AttributeValue::M(it)),
        ]);
        env.raw_put(&images, locked).await;
    }
    let values: HashMap<String, AttributeValue> = [
        (":n1", n(1)),
        (":n2", n(2)),
        (":n3", n(3)),
        (":n5", n(5)),
        (":n10", n("10.0")),
        (":big", n("99.5")),
        (":s", s("ab")),
        (":pre", s("a")),
        (":sub", s("b")),
        (":tN", s("N")),
        (":tS", s("S")),
        (":tL", s("L")),
        (":b", b(b"\x01")),
        (":t", AttributeValue::Bool(true)),
        (":null", AttributeValue::Null(true)),
        (":ss", ss(&["abc", "x"])),
        (":ns", ns(&["5", "1.0"])),
        (":deep", s("deep")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let filters = [
        "a = :n5",
        "a <> :n5",
        "a < :n5",
        "a <= :n5",
        "a > :n1",
        "a >= :n10",
        "a BETWEEN :n1 AND :n5",
        "a BETWEEN :n1 AND :big",
        "a IN (:n1, :n5, :s)",
        "s < :s",
        "s >= :s",
        "s <> :s",
        "begins_with(s, :pre)",
        "begins_with(bin, :b)",
        "contains(s, :sub)",
        "contains(ss, :s)",
        "contains(ns, :n5)",
        "contains(l, :n1)",
        "contains(l, :s)",
        "size(s) > :n3",
        "size(s) = :n5",
        "size(l) = :n2",
        "size(m) >= :n1",
        "size(bin) < :n2",
        "size(ss) = :n1",
        "attribute_type(a, :tN)",
        "attribute_type(a, :tS)",
        "attribute_type(l, :tL)",
        "attribute_exists(m.x)",
        "attribute_not_exists(a)",
        "attribute_exists(l[1][0])",
        "l[1][0] = :deep",
        "NOT a = :n5",
        "NOT (a < :n5 OR s = :s)",
        "m.x = :n1 OR l[1] = :s",
        "m.y = :s AND a < :n1",
        "bin = :b",
        "bo = :t",
        "nu = :null",
        "ss = :ss",
        "ns = :ns",
        "a = :big OR (a > :n1 AND NOT (a > :n10))",
        "size(s) <> :n2",
        "nope <> :n1",
        "NOT nope = :n1",
        "NOT begins_with(s, :pre)",
        "#A > :n2 and attribute_exists(#S)",
    ];
    let names = HashMap::from([
        ("#A".to_string(), "a".to_string()),
        ("#S".to_string(), "s".to_string()),
    ]);
    let mut failures = Vec::new();
    for f in filters {
        let (n_used, v_used): (Vec<_>, Vec<_>) = (
            names
                .iter()
                .filter(|(k, _)| f.contains(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            values
                .iter()
                .filter(|(k, _)| {
                    f.split(|c: char| !(c.is_alphanumeric() || c == ':' || c == '_'))
                        .any(|w| w == k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        let n_used: Option<HashMap<_, _>> =
            (!n_used.is_empty()).then(|| n_used.into_iter().collect());
        let v_used: Option<HashMap<_, _>> =
            (!v_used.is_empty()).then(|| v_used.into_iter().collect());
        let server = env
            .client
            .scan()
            .table_name(&env.table)
            .filter_expression(f)
            .set_expression_attribute_names(n_used.clone())
            .set_expression_attribute_values(v_used.clone())
            .consistent_read(true)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{f}: {e:?}"));
        let server: BTreeSet<String> = server
            .items()
            .iter()
            .map(|i| i["Id"].as_s().unwrap().clone())
            .collect();
        let ours: BTreeSet<String> = env
            .manager
            .scan()
            .table_name(&images)
            .filter_expression(f)
            .set_expression_attribute_names(n_used)
            .set_expression_attribute_values(v_used)
            .isolation(COMMITTED)
            .send_all()
            .await
            .unwrap_or_else(|e| panic!("{f}: {e}"))
            .iter()
            .map(|i| i["Id"].as_s().unwrap().clone())
            .collect();
        if server != ours {
            failures.push(format!("{f}: DynamoDB {server:?}, library {ours:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    tx.rollback().await.unwrap();
}
