//! A caller cannot forge, clear or read through a lock: every request that names a `_Tx*`
//! attribute, on any path, is an `InvalidRequest` before anything is sent.

use super::*;

#[tokio::test]
async fn callers_cannot_forge_clear_or_read_through_a_lock() {
    let env = TestEnv::new("sec-lock").await;
    let t = env.table.clone();
    for id in ["a", "b", "free"] {
        env.raw_put(&t, original(id)).await;
    }
    // `a`: applied but uncommitted (before-image in `_TxG`); `b`: read-locked; `free`: no lock.
    let owner = env.manager.begin();
    apply_update(&env, &owner, "a").await;
    owner
        .get_item()
        .table_name(&t)
        .key("Id", s("b"))
        .send()
        .await
        .unwrap();
    let owner_id = s(owner.id().as_str());
    let mut before = HashMap::new();
    for id in ["a", "b", "free"] {
        before.insert(id, env.raw_get(&t, &key(id)).await.unwrap());
    }
    assert!(has_tx_attrs(&before["b"]) && !has_tx_attrs(&before["free"]));

    // Requests come from another transaction of the same manager and from a second coordinator.
    let (other_manager, _) = env.second_coordinator();
    let attackers = [env.manager.begin(), other_manager.begin()];
    let sent_before = env.counter.snapshot();
    let mut cases = 0;
    for tx in &attackers {
        for id in ["a", "b", "free"] {
            // Forge: write lock attributes, claiming the owner's lock or one of one's own.
            for name in LOCK_NAMES {
                for value in [owner_id.clone(), s(tx.id().as_str()), n(1)] {
                    let mut it = original(id);
                    it.insert(name.to_string(), value.clone());
                    expect_invalid(
                        &format!("put {id} with {name}"),
                        tx.put_item()
                            .table_name(&t)
                            .set_item(Some(it.clone()))
                            .return_values(ReturnValue::AllOld)
                            .send()
                            .await,
                    );
                    expect_invalid(
                        &format!("typed put {id} with {name}"),
                        tx.put(&t, &it_as_json(&it)).await,
                    );
                    cases += 2;
                }
                // Forge or clear with updates: direct, through a name placeholder, through a
                // reserved value placeholder, nested below the attribute.
                let updates: [(&str, Option<(&str, &str)>); 6] = [
                    ("SET #n = :v", Some(("#n", name))),
                    ("REMOVE #n", Some(("#n", name))),
                    ("SET #n.x = :v", Some(("#n", name))),
                    ("SET v = :v REMOVE #m[0]", Some(("#m", name))),
                    ("SET x = :v REMOVE #n.secret", Some(("#n", name))),
                    ("SET v = :v, #_TxX = :v", Some(("#_TxX", "v2"))),
                ];
                for (expr, names) in updates {
                    let mut u = tx
                        .update_item()
                        .table_name(&t)
                        .key("Id", s(id))
                        .update_expression(expr);
                    if expr.contains(":v") {
                        u = u.expression_attribute_values(":v", owner_id.clone());
                    }
                    if let Some((k, v)) = names {
                        u = u.expression_attribute_names(k, v);
                    }
                    expect_invalid(&format!("update {id}: {expr} ({name})"), u.send().await);
                    cases += 1;
                }
                for expr in [
                    format!("SET {name} = :v"),
                    format!("REMOVE {name}"),
                    format!("SET v = :v REMOVE {name}"),
                    format!("SET {name}.v = :v"),
                ] {
                    let mut u = tx
                        .update_item()
                        .table_name(&t)
                        .key("Id", s(id))
                        .update_expression(&expr);
                    if expr.contains(":v") {
                        u = u.expression_attribute_values(":v", n(3));
                    }
                    expect_invalid(&format!("update {id}: {expr}"), u.send().await);
                    cases += 1;
                }
            }
            expect_invalid(
                "reserved value placeholder",
                tx.update_item()
                    .table_name(&t)
                    .key("Id", s(id))
                    .update_expression("SET v = :_TxV")
                    .expression_attribute_values(":_TxV", n(3))
                    .send()
                    .await,
            );
            // Read through with update operands: copy the before-image or the owner into the item.
            for (expr, names) in [
                ("SET stolen = _TxG", None),
                ("SET stolen = _TxG.secret", None),
                ("SET stolen = #g.secret", Some(("#g", "_TxG"))),
                ("SET stolen = if_not_exists(_TxId, :v)", None),
                ("ADD #a :one", Some(("#a", "_TxA"))),
            ] {
                let mut u = tx
                    .update_item()
                    .table_name(&t)
                    .key("Id", s(id))
                    .update_expression(expr);
                u = match expr {
                    e if e.contains(":one") => u.expression_attribute_values(":one", n(1)),
                    e if e.contains(":v") => u.expression_attribute_values(":v", n(1)),
                    _ => u,
                };
                if let Some((k, v)) = names {
                    u = u.expression_attribute_names(k, v);
                }
                expect_invalid(&format!("update {id}: {expr}"), u.send().await);
            }
            // Read through with conditions: learn who holds the lock, or whether it is applied.
            for (cond, names) in [
                ("_TxId = :v", None),
                ("attribute_exists(_TxA)", None),
                ("#o = :v", Some(("#o", "_TxId"))),
                ("v = :v OR size(#g) > :v", Some(("#g", "_TxG"))),
                ("contains(_TxG.secret, :v)", None),
            ] {
                let vals = cond.contains(":v");
                let mut d = tx.delete_item().table_name(&t).key("Id", s(id));
                let mut p = tx.put_item().table_name(&t).set_item(Some(original(id)));
                let mut u = tx
                    .update_item()
                    .table_name(&t)
                    .key("Id", s(id))
                    .update_expression("SET x = :x")
                    .expression_attribute_values(":x", n(1));
                d = d.condition_expression(cond);
                p = p.condition_expression(cond);
                u = u.condition_expression(cond);
                if vals {
                    d = d.expression_attribute_values(":v", owner_id.clone());
                    p = p.expression_attribute_values(":v", owner_id.clone());
                    u = u.expression_attribute_values(":v", owner_id.clone());
                }
                if let Some((k, v)) = names {
                    d = d.expression_attribute_names(k, v);
                    p = p.expression_attribute_names(k, v);
                    u = u.expression_attribute_names(k, v);
                }
                expect_invalid(&format!("delete {id} if {cond}"), d.send().await);
                expect_invalid(&format!("put {id} if {cond}"), p.send().await);
                expect_invalid(&format!("update {id} if {cond}"), u.send().await);
                cases += 3;
            }
            // Read through with a transactional read's projection or key.
            for (proj, names) in [
                ("_TxG", None),
                ("v, _TxId", None),
                ("_TxG.secret", None),
                ("#g", Some(("#g", "_TxG"))),
                ("Id, #g.secret", Some(("#g", "_TxG"))),
            ] {
                let mut g = tx
                    .get_item()
                    .table_name(&t)
                    .key("Id", s(id))
                    .projection_expression(proj);
                if let Some((k, v)) = names {
                    g = g.expression_attribute_names(k, v);
                }
                expect_invalid(&format!("tx get {id} projecting {proj}"), g.send().await);
                cases += 1;
            }
            let mut k = key(id);
            k.insert("_TxId".into(), owner_id.clone());
            expect_invalid(
                "tx get with a lock attribute in the key",
                tx.get_item().table_name(&t).set_key(Some(k)).send().await,
            );
        }
    }
    // Read through outside transactions, at every level and on every read path.
    let m = &env.manager;
    for level in LEVELS {
        for (proj, names) in [
            ("_TxG", None),
            ("Id, _TxG.secret", None),
            ("#g", Some(("#g", "_TxG"))),
            ("Id, #i", Some(("#i", "_TxId"))),
        ] {
            let names: Option<HashMap<String, String>> =
                names.map(|(k, v)| HashMap::from([(k.to_string(), v.to_string())]));
            let what = format!("{proj} at {level:?}");
            expect_invalid(
                &format!("get projecting {what}"),
                m.get_item()
                    .table_name(&t)
                    .key("Id", s("a"))
                    .projection_expression(proj)
                    .set_expression_attribute_names(names.clone())
                    .isolation(level)
                    .send()
                    .await,
            );
            let ka = KeysAndAttributes::builder()
                .keys(key("a"))
                .projection_expression(proj)
                .set_expression_attribute_names(names.clone())
                .build()
                .unwrap();
            expect_invalid(
                &format!("batch get projecting {what}"),
                m.batch_get_item()
                    .request_items(&t, ka)
                    .isolation(level)
                    .send()
                    .await,
            );
            expect_invalid(
                &format!("query projecting {what}"),
                m.query()
                    .table_name(&t)
                    .key_condition_expression("Id = :id")
                    .expression_attribute_values(":id", s("a"))
                    .projection_expression(proj)
                    .set_expression_attribute_names(names.clone())
                    .isolation(level)
                    .send_all()
                    .await,
            );
            expect_invalid(
                &format!("scan projecting {what}"),
                m.scan()
                    .table_name(&t)
                    .projection_expression(proj)
                    .set_expression_attribute_names(names)
                    .isolation(level)
                    .send_all()
                    .await,
            );
            cases += 4;
        }
        // Filters that would tell locked items (or their owner) from others.
        for (filter, names) in [
            ("attribute_exists(_TxId)", None),
            ("#a = :v", Some(("#a", "_TxA"))),
            ("v = :v OR _TxG.v = :v", None),
        ] {
            let mut q = m
                .query()
                .table_name(&t)
                .key_condition_expression("Id = :id")
                .expression_attribute_values(":id", s("a"))
                .filter_expression(filter)
                .isolation(level);
            let mut sc = m.scan().table_name(&t).filter_expression(filter);
            if filter.contains(":v") {
                q = q.expression_attribute_values(":v", n(1));
                sc = sc.expression_attribute_values(":v", n(1));
            }
            if let Some((k, v)) = names {
                q = q.expression_attribute_names(k, v);
                sc = sc.expression_attribute_names(k, v);
            }
            expect_invalid(&format!("query filter {filter}"), q.send().await);
            expect_invalid(
                &format!("scan filter {filter}"),
                sc.isolation(level).send().await,
            );
            cases += 2;
        }
        expect_invalid(
            "query key condition on a lock attribute",
            m.query()
                .table_name(&t)
                .key_condition_expression("Id = :id AND _TxA = :v")
                .expression_attribute_values(":id", s("a"))
                .expression_attribute_values(":v", s("1"))
                .isolation(level)
                .send()
                .await,
        );
        // The legacy AttributesToGet, and lock attributes in keys.
        let legacy = KeysAndAttributes::builder()
            .keys(key("a"))
            .attributes_to_get("_TxG")
            .build()
            .unwrap();
        expect_invalid_because(
            "batch get AttributesToGet",
            "AttributesToGet",
            m.batch_get_item()
                .request_items(&t, legacy)
                .isolation(level)
                .send()
                .await,
        );
        let mut locked_key = key("a");
        locked_key.insert("_TxId".into(), owner_id.clone());
        expect_invalid(
            "get with a lock attribute in the key",
            m.get_item()
                .table_name(&t)
                .set_key(Some(locked_key.clone()))
                .isolation(level)
                .send()
                .await,
        );
        expect_invalid(
            "scan starting at a key with a lock attribute",
            m.scan()
                .table_name(&t)
                .set_exclusive_start_key(Some(locked_key))
                .isolation(level)
                .send()
                .await,
        );
        cases += 4;
    }
    println!("{cases} requests rejected");
    assert!(cases > 500, "{cases} cases");

    // Nothing but key-schema lookups went out, and every lock is as it was.
    let sent_after = env.counter.snapshot();
    for (op, count) in &sent_after {
        let earlier = sent_before.get(op).copied().unwrap_or(0);
        assert!(
            op == "DescribeTable" || *count == earlier,
            "{op} sent {} times by rejected requests",
            count - earlier
        );
    }
    for id in ["a", "b", "free"] {
        assert_eq!(
            env.raw_get(&t, &key(id)).await.as_ref(),
            Some(&before[id]),
            "{id} changed by rejected requests"
        );
    }
    // The attackers' transactions wrote nothing; the owner's commits as if nothing had happened.
    for tx in attackers {
        tx.commit().await.unwrap();
    }
    owner.commit().await.unwrap();
    assert_eq!(env.raw_get(&t, &key("a")).await, Some(updated("a")));
    assert_eq!(env.raw_get(&t, &key("b")).await, Some(original("b")));
    assert_eq!(env.raw_get(&t, &key("free")).await, Some(original("free")));
    let records: Vec<Item> = env
        .scan_all(env.manager.transactions_table())
        .await
        .into_iter()
        .filter(|r| !r["_TxId"].as_s().unwrap().starts_with('~'))
        .collect();
    assert_eq!(records.len(), 1, "only the owner's record: {records:?}");
}
