//! Reads of global and local secondary indexes.

use super::*;

/// A table with hash `Id`, a global index `all` (status, at) projecting everything and a global
/// index `keys` on the same keys projecting keys only.
async fn gsi_table(env: &TestEnv) -> String {
    let name = unique_name("iso-gsi");
    env.guard.add(&name);
    let ks = |h: &str, r: &str| {
        vec![
            KeySchemaElement::builder()
                .attribute_name(h)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
            KeySchemaElement::builder()
                .attribute_name(r)
                .key_type(KeyType::Range)
                .build()
                .unwrap(),
        ]
    };
    let def = |a: &str, t: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(a)
            .attribute_type(t)
            .build()
            .unwrap()
    };
    let gsi = |name: &str, p: ProjectionType| {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .set_key_schema(Some(ks("status", "at")))
            .projection(Projection::builder().projection_type(p).build())
            .build()
            .unwrap()
    };
    env.client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(def("Id", ScalarAttributeType::S))
        .attribute_definitions(def("status", ScalarAttributeType::S))
        .attribute_definitions(def("at", ScalarAttributeType::N))
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("Id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .global_secondary_indexes(gsi("all", ProjectionType::All))
        .global_secondary_indexes(gsi("keys", ProjectionType::KeysOnly))
        .send()
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn global_index_reads_resolve_against_the_committed_version() {
    let env = TestEnv::new("iso-gsi").await;
    let t = gsi_table(&env).await;
    for (id, status, at, v) in [
        ("a", "open", 1, 1),
        ("b", "open", 2, 2),
        ("c", "closed", 3, 3),
    ] {
        env.raw_put(
            &t,
            item(&[
                ("Id", s(id)),
                ("status", s(status)),
                ("at", n(at)),
                ("v", n(v)),
            ]),
        )
        .await;
    }
    // Pending: a leaves "open", c joins "open", d is inserted as "open", b's value changes.
    let tx = env.manager.begin();
    for (id, update) in [
        ("a", "SET #st = :closed"),
        ("c", "SET #st = :open"),
        ("d", "SET #st = :open, #at = :four, v = :four"),
        ("b", "SET v = :big"),
    ] {
        let mut u = tx
            .update_item()
            .table_name(&t)
            .key("Id", s(id))
            .update_expression(update)
            .return_values(ReturnValue::AllNew);
        if id != "b" {
            u = u.expression_attribute_names("#st", "status");
        }
        u = match id {
            "a" => u.expression_attribute_values(":closed", s("closed")),
            "c" => u.expression_attribute_values(":open", s("open")),
            "d" => u
                .expression_attribute_names("#at", "at")
                .expression_attribute_values(":open", s("open"))
                .expression_attribute_values(":four", n(4)),
            _ => u.expression_attribute_values(":big", n(200)),
        };
        u.send().await.unwrap();
    }
    let open = |index: &'static str, level: IsolationLevel| {
        env.manager
            .query()
            .table_name(&t)
            .index_name(index)
            .key_condition_expression("#st = :open")
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":open", s("open"))
            .isolation(level)
    };
    let ids = |items: &[Item]| -> Vec<String> {
        items
            .iter()
            .map(|i| i["Id"].as_s().unwrap().clone())
            .collect()
    };
    // Uncommitted: what the index holds.
    let got = open("all", UNCOMMITTED).send_all().await.unwrap();
    assert_eq!(ids(&got), ["b", "c", "d"]);
    let got = open("keys", UNCOMMITTED).send_all().await.unwrap();
    assert_eq!(ids(&got), ["b", "c", "d"]);
    assert!(got.iter().all(|i| i.len() == 3), "keys only: {got:?}");
    // Committed: c's committed version is not "open" and d does not exist; b is served from its
    // image. (a, whose committed version is "open", has left the index: no phantom protection.)
    for index in ["all", "keys"] {
        let got = open(index, COMMITTED).send_all().await.unwrap();
        assert_eq!(ids(&got), ["b"], "{index}");
        let b = &got[0];
        assert!(!has_tx_attrs(b));
        if index == "all" {
            assert_eq!(b["v"], n(2));
        } else {
            assert_eq!(b.len(), 3, "keys only: {b:?}");
        }
    }
    // A filter on the index at Committed sees b's committed value.
    let got = open("all", COMMITTED)
        .filter_expression("v < :x")
        .expression_attribute_values(":x", n(100))
        .send_all()
        .await
        .unwrap();
    assert_eq!(ids(&got), ["b"]);
    let got = open("all", UNCOMMITTED)
        .filter_expression("v < :x")
        .expression_attribute_values(":x", n(100))
        .send_all()
        .await
        .unwrap();
    assert_eq!(ids(&got), ["c", "d"]);
    // Scans of the index.
    for index in ["all", "keys"] {
        let got = env
            .manager
            .scan()
            .table_name(&t)
            .index_name(index)
            .isolation(COMMITTED)
            .send_all()
            .await
            .unwrap();
        let mut got = ids(&got);
        got.sort();
        // a's index entry is "closed" now but its committed version is "open": still in the index.
        assert_eq!(got, ["a", "b", "c"], "{index}");
    }
    tx.commit().await.unwrap();
    for index in ["all", "keys"] {
        let got = open(index, COMMITTED).send_all().await.unwrap();
        assert_eq!(ids(&got), ["b", "c", "d"], "{index} after commit");
    }
}

/// A local index projecting keys only: read directly (DynamoDB fetches the lock attributes from the
/// table), results trimmed to the index's projection, images checked against the key condition.
#[tokio::test]
async fn local_index_reads() {
    use aws_sdk_dynamodb::types::LocalSecondaryIndex;
    let env = TestEnv::new("iso-lsi").await;
    let t = unique_name("iso-lsi");
    env.guard.add(&t);
    let el = |a: &str, k: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(a)
            .key_type(k)
            .build()
            .unwrap()
    };
    let def = |a: &str, ty: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(a)
            .attribute_type(ty)
            .build()
            .unwrap()
    };
    env.client
        .create_table()
        .table_name(&t)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(def("Id", ScalarAttributeType::S))
        .attribute_definitions(def("r", ScalarAttributeType::N))
        .attribute_definitions(def("v", ScalarAttributeType::N))
        .key_schema(el("Id", KeyType::Hash))
        .key_schema(el("r", KeyType::Range))
        .local_secondary_indexes(
            LocalSecondaryIndex::builder()
                .index_name("by_v")
                .key_schema(el("Id", KeyType::Hash))
                .key_schema(el("v", KeyType::Range))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::KeysOnly)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    for (r, v) in [(1, 3), (2, 10), (3, 20)] {
        env.raw_put(
            &t,
            item(&[("Id", s("p")), ("r", n(r)), ("v", n(v)), ("extra", s("x"))]),
        )
        .await;
    }
    // Pending: r=1 moves into the range (3 -> 30), r=3 changes within it (20 -> 25).
    let tx = env.manager.begin();
    for (r, v) in [(1, 30), (3, 25)] {
        tx.update_item()
            .table_name(&t)
            .key("Id", s("p"))
            .key("r", n(r))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    }
    let q = |level| {
        env.manager
            .query()
            .table_name(&t)
            .index_name("by_v")
            .key_condition_expression("Id = :p AND v > :min")
            .expression_attribute_values(":p", s("p"))
            .expression_attribute_values(":min", n(5))
            .isolation(level)
    };
    let rv = |items: &[Item]| -> Vec<(String, String)> {
        items
            .iter()
            .map(|i| {
                assert_eq!(i.len(), 3, "keys only: {i:?}");
                (
                    i["r"].as_n().unwrap().clone(),
                    i["v"].as_n().unwrap().clone(),
                )
            })
            .collect()
    };
    let got = q(UNCOMMITTED).send_all().await.unwrap();
    assert_eq!(
        rv(&got),
        [("2", "10"), ("3", "25"), ("1", "30")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let got = q(COMMITTED).send_all().await.unwrap();
    assert_eq!(
        rv(&got),
        [("2", "10"), ("3", "20")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // With a projection of an attribute the index does not hold: fetched from the table.
    let got = q(COMMITTED)
        .projection_expression("r, extra")
        .send_all()
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    assert!(
        got.iter().all(|i| i.len() == 2 && i["extra"] == s("x")),
        "{got:?}"
    );
    tx.rollback().await.unwrap();
}
