//! Readers at `Committed` racing writers that roll back half of their transactions.

use super::*;

/// Writers set tags (their transaction id) on items and roll back half of their transactions on
/// purpose; readers at `Committed` read all the while and must never see the tag of a transaction
/// that rolled back or had not started committing by the end of the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn committed_readers_never_see_uncommitted_tags() {
    const ITEMS: usize = 6;
    const WRITERS: usize = 4;
    const TXS: usize = 20;
    const READERS: usize = 4;
    let env = Arc::new(TestEnv::new("iso-race").await);
    let ids: Vec<String> = (0..ITEMS).map(|i| format!("k{i}")).collect();
    for id in &ids {
        env.raw_put(&env.table, item(&[("Id", s(id)), ("tag", s("init"))]))
            .await;
    }
    let commit_started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let committed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let rolled_back: Arc<Mutex<HashSet<String>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let env = env.clone();
        let ids = ids.clone();
        let (commit_started, committed, rolled_back) = (
            commit_started.clone(),
            committed.clone(),
            rolled_back.clone(),
        );
        writers.push(tokio::spawn(async move {
            for t in 0..TXS {
                let tx = env.manager.begin();
                let tag = tx.id().as_str().to_string();
                let targets = [
                    ids[(w + t) % ITEMS].clone(),
                    ids[(w * 3 + 2 * t + 1) % ITEMS].clone(),
                ];
                let mut ok = true;
                for id in targets.iter().collect::<BTreeSet<_>>() {
                    let r = tx
                        .update_item()
                        .table_name(&env.table)
                        .key("Id", s(id))
                        .update_expression("SET tag = :t")
                        .expression_attribute_values(":t", s(&tag))
                        .return_values(ReturnValue::AllNew)
                        .send()
                        .await;
                    if r.is_err() {
                        ok = false;
                        break;
                    }
                }
                // Leave the applied, uncommitted state visible for a moment.
                tokio::time::sleep(Duration::from_millis(3)).await;
                let id = TxId::from(tag.as_str());
                if ok && t % 2 == 0 {
                    commit_started
                        .lock()
                        .unwrap()
                        .insert(tag.clone(), Instant::now());
                    let _ = tx.commit().await;
                } else {
                    let _ = tx.rollback().await;
                }
                // The outcome, as recorded (a competitor may have rolled it back).
                match env
                    .manager
                    .transaction_state(&id)
                    .await
                    .unwrap()
                    .map(|s| (s.state, s.finalized))
                {
                    Some((TxState::Committed, _)) => committed.lock().unwrap().insert(tag),
                    Some((TxState::RolledBack, _)) => rolled_back.lock().unwrap().insert(tag),
                    other => panic!("transaction {id} left {other:?}"),
                };
            }
        }));
    }

    let mut readers = Vec::new();
    for r in 0..READERS {
        let env = env.clone();
        let ids = ids.clone();
        let (commit_started, done) = (commit_started.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut seen: HashSet<String> = HashSet::new();
            let mut reads = 0u32;
            let mut round = r;
            while !done.load(Ordering::SeqCst) || reads < 8 {
                round += 1;
                let m = &env.manager;
                let items: Vec<Item> = match round % 4 {
                    0 => {
                        let mut v = Vec::new();
                        for id in &ids {
                            v.extend(
                                m.get_item()
                                    .table_name(&env.table)
                                    .key("Id", s(id))
                                    .consistent_read(true)
                                    .send()
                                    .await
                                    .unwrap()
                                    .item,
                            );
                        }
                        v
                    }
                    1 => m
                        .scan()
                        .table_name(&env.table)
                        .projection_expression("tag")
                        .consistent_read(true)
                        .send_all()
                        .await
                        .unwrap(),
                    2 => {
                        let id = &ids[round % ITEMS];
                        m.query()
                            .table_name(&env.table)
                            .key_condition_expression("Id = :id")
                            .filter_expression("attribute_exists(tag)")
                            .expression_attribute_values(":id", s(id))
                            .consistent_read(true)
                            .send_all()
                            .await
                            .unwrap()
                    }
                    _ => {
                        let mut ka = KeysAndAttributes::builder().consistent_read(true);
                        for id in &ids {
                            ka = ka.keys(key(id));
                        }
                        m.batch_get_item()
                            .request_items(&env.table, ka.build().unwrap())
                            .send()
                            .await
                            .unwrap()
                            .responses
                            .remove(&env.table)
                            .unwrap()
                    }
                };
                let end = Instant::now();
                reads += 1;
                assert!(!items.is_empty(), "reader {r}: items vanished");
                for i in items {
                    assert!(!has_tx_attrs(&i));
                    let tag = i["tag"].as_s().unwrap().clone();
                    if tag != "init" {
                        let started = commit_started.lock().unwrap().get(&tag).copied();
                        assert!(
                            started.is_some_and(|t| t <= end),
                            "reader {r} saw tag {tag} of a transaction that had not committed"
                        );
                    }
                    seen.insert(tag);
                }
            }
            (seen, reads)
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let mut all_seen = HashSet::new();
    for r in readers {
        let (seen, reads) = r.await.unwrap();
        assert!(reads >= 8);
        all_seen.extend(seen);
    }
    let committed = committed.lock().unwrap().clone();
    let rolled_back = rolled_back.lock().unwrap().clone();
    assert!(committed.len() >= 5, "{} committed", committed.len());
    assert!(
        rolled_back.len() >= WRITERS * TXS / 2,
        "{} rolled back",
        rolled_back.len()
    );
    assert!(all_seen.len() > 1, "readers saw no committed write");
    for tag in &all_seen {
        assert!(
            tag == "init" || committed.contains(tag),
            "a reader saw tag {tag}, whose transaction did not commit"
        );
    }
    // Everything settled: both levels agree, and every tag is a committed one.
    let c = env
        .manager
        .scan()
        .table_name(&env.table)
        .isolation(COMMITTED)
        .send_all()
        .await
        .unwrap();
    let u = env
        .manager
        .scan()
        .table_name(&env.table)
        .isolation(UNCOMMITTED)
        .send_all()
        .await
        .unwrap();
    let tags = |v: &[Item]| -> BTreeSet<(String, String)> {
        v.iter()
            .map(|i| {
                (
                    i["Id"].as_s().unwrap().clone(),
                    i["tag"].as_s().unwrap().clone(),
                )
            })
            .collect()
    };
    assert_eq!(tags(&c), tags(&u));
    for (_, tag) in tags(&c) {
        assert!(tag == "init" || committed.contains(&tag));
    }
}
