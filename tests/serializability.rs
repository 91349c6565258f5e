//! Serializability under chaos, checked the way Jepsen's Elle checks list-append histories.
//!
//! Concurrent coordinators run transactions that read one or two keys (with read locks) and append a
//! globally unique value to one or two other keys, while coordinators crash at random protocol steps,
//! responses are lost and throttling is injected. Every attempt records what it read and what it
//! appended; random requests are also delayed before they are sent or after DynamoDB answered,
//! which reorders concurrent requests and widens race windows. After the sweeper has cleaned up, the final lists give each key's version order, and the
//! checker builds the dependency graph of the committed transactions (write-write, write-read and
//! read-write edges) and fails on any cycle, on a read that is not a prefix of the final list (a read
//! of an aborted, never-written or reordered value), on a value of an aborted transaction in any
//! list, and on a transaction of unknown outcome that is only partly visible.
//!
//! `SER_SEED=<n>` replays a run's fault schedule and choices (thread timing still varies);
//! `SER_SCALE=<k>` multiplies the transactions per coordinator (default 1 in CI).
mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::{Error, Item};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const KEYS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// `commit` returned `Ok`.
    Committed,
    /// Rolled back, or failed before `commit`: none of its values may ever be visible.
    Aborted,
    /// Crashed or undetermined: decided from the final state.
    Unknown,
}

#[derive(Debug, Clone)]
struct Attempt {
    name: String,
    /// Key -> list seen by a locked read (recorded only when the read returned).
    reads: Vec<(String, Vec<String>)>,
    /// Key -> appended value.
    appends: Vec<(String, String)>,
    outcome: Outcome,
    detail: String,
}

fn list_of(item: Option<&Item>) -> Vec<String> {
    match item.and_then(|i| i.get("l")) {
        None => Vec::new(),
        Some(AttributeValue::L(l)) => l.iter().map(|v| v.as_s().unwrap().clone()).collect(),
        Some(other) => panic!("attribute l is not a list: {other:?}"),
    }
}

fn key_name(i: usize) -> String {
    format!("k{i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_append_histories_are_serializable_under_chaos() {
    // A fixed schedule by default (a seed that has passed), so CI is repeatable; `SER_SEED=random`
    // explores new schedules, `SER_SEED=<n>` replays one.
    let (seed, scale) = seed_and_scale("SER_SEED", 12189938399142948097, "SER_SCALE");
    println!("serializability seed {seed} (replay with SER_SEED={seed}), scale {scale}");
    let started = Instant::now();
    let env = TestEnv::new("ser").await;
    for i in 0..KEYS {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&key_name(i))), ("l", AttributeValue::L(vec![]))]),
        )
        .await;
    }

    let workers = 4;
    let per_worker = 15 * scale;
    let mut handles = Vec::new();
    for w in 0..workers {
        let ChaosWorker {
            manager: m,
            faults,
            throttle,
            delays,
            ..
        } = ChaosWorker::new(&env, seed, w);
        let table = env.table.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_add(w as u64 * 7919));
            let mut history = Vec::new();
            // Crashes armed, lost responses armed, faults that struck.
            let mut armed = (0u64, 0u64, 0u64);
            for t in 0..per_worker {
                let mut keys: Vec<usize> = (0..KEYS).collect();
                keys.shuffle(&mut rng);
                let nr = rng.random_range(1..=2);
                let nw = rng.random_range(1..=2);
                let read_keys: Vec<String> = keys[..nr].iter().map(|&k| key_name(k)).collect();
                let write_keys: Vec<String> =
                    keys[nr..nr + nw].iter().map(|&k| key_name(k)).collect();
                let fault = rng.random_range(0..15);
                match fault {
                    0 | 1 => armed.0 += 1,
                    2 => armed.1 += 1,
                    _ => {}
                }
                match fault {
                    0 => faults.crash_at(rng.random_range(1..=8), FaultMode::BeforeSend),
                    1 => faults.crash_at(rng.random_range(1..=8), FaultMode::AfterSend),
                    _ => faults.disarm(),
                }
                if fault == 2 {
                    faults.fail_once_at(rng.random_range(1..=8), FaultMode::AfterSend);
                }
                let name = format!("w{w}-t{t}");
                let mut att = Attempt {
                    name: name.clone(),
                    reads: Vec::new(),
                    appends: write_keys
                        .iter()
                        .enumerate()
                        .map(|(i, k)| (k.clone(), format!("{name}-{i}")))
                        .collect(),
                    outcome: Outcome::Aborted,
                    detail: String::new(),
                };
                let tx = m.begin();
                let body = async {
                    for k in &read_keys {
                        let out = tx
                            .get_item()
                            .table_name(&table)
                            .key("Id", s(k))
                            .send()
                            .await?;
                        att.reads.push((k.clone(), list_of(out.item())));
                    }
                    for (k, v) in &att.appends {
                        tx.update_item()
                            .table_name(&table)
                            .key("Id", s(k))
                            .update_expression("SET l = list_append(if_not_exists(l, :empty), :v)")
                            .expression_attribute_values(":empty", AttributeValue::L(vec![]))
                            .expression_attribute_values(":v", AttributeValue::L(vec![s(v)]))
                            .send()
                            .await?;
                    }
                    Ok::<_, Error>(())
                }
                .await;
                let (outcome, detail) = match body {
                    Err(e) => {
                        // Nothing was committed: the transaction never reached `commit`.
                        tx.abandon();
                        (Outcome::Aborted, format!("before commit: {e}"))
                    }
                    Ok(()) => match tx.commit().await {
                        Ok(()) => (Outcome::Committed, String::new()),
                        Err(e) if faults.struck() || e.is_undetermined() => {
                            (Outcome::Unknown, format!("{e}"))
                        }
                        Err(e)
                            if e.is_rolled_back()
                                || e.is_condition_failed()
                                || e.is_item_locked()
                                || matches!(e, Error::RequestRejected { .. }) =>
                        {
                            (Outcome::Aborted, format!("{e}"))
                        }
                        // Not promised to be rolled back: let the final state decide.
                        Err(e) => (Outcome::Unknown, format!("other: {e}")),
                    },
                };
                att.outcome = outcome;
                att.detail = detail;
                if faults.struck() {
                    armed.2 += 1;
                }
                faults.disarm();
                history.push(att);
            }
            (history, armed, throttle.injected(), delays.injected())
        }));
    }
    let mut history: Vec<Attempt> = Vec::new();
    let (mut throttled, mut delayed) = (0, 0);
    let (mut crashes, mut lost, mut struck) = (0, 0, 0);
    for h in handles {
        let (hist, (c, l, st), t, d) = h.await.unwrap();
        history.extend(hist);
        crashes += c;
        lost += l;
        struck += st;
        throttled += t;
        delayed += d;
    }

    sweep_left_work(&env, &[&env.table]).await;

    // Final state: each key's list is its version order.
    let mut finals: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for it in env.scan_all(&env.table).await {
        assert!(
            !has_tx_attrs(&it),
            "lock attributes left (seed {seed}): {it:?}"
        );
        finals.insert(it["Id"].as_s().unwrap().clone(), list_of(Some(&it)));
    }
    assert_eq!(finals.len(), KEYS, "keys created or lost (seed {seed})");

    let errors = check(&history, &finals);
    let summary = summarize(&history, &finals);
    println!(
        "serializability: {}; {crashes} crashes and {lost} lost responses armed, {struck} struck, \
         {throttled} throttled responses, {delayed} requests delayed; {:.1}s",
        summary,
        started.elapsed().as_secs_f64()
    );
    if !errors.is_empty() {
        for a in &history {
            println!(
                "  {} {:?} reads {:?} appends {:?} {}",
                a.name, a.outcome, a.reads, a.appends, a.detail
            );
        }
        for (k, l) in &finals {
            println!("  final {k}: {l:?}");
        }
        panic!(
            "history not serializable (seed {seed}):\n{}",
            errors.join("\n")
        );
    }
}

/// Position of every value in the final lists: value -> (key, index).
fn positions(finals: &BTreeMap<String, Vec<String>>) -> HashMap<String, (String, usize)> {
    let mut pos = HashMap::new();
    for (k, l) in finals {
        for (i, v) in l.iter().enumerate() {
            pos.insert(v.clone(), (k.clone(), i));
        }
    }
    pos
}

/// Which attempts count as committed: `Some(true)` committed, `Some(false)` not, `None` for a
/// partly visible attempt (reported as an error by `check`).
fn resolved(a: &Attempt, pos: &HashMap<String, (String, usize)>) -> Option<bool> {
    let visible = a
        .appends
        .iter()
        .filter(|(k, v)| pos.get(v).is_some_and(|(pk, _)| pk == k))
        .count();
    if visible == a.appends.len() {
        Some(true)
    } else if visible == 0 {
        Some(false)
    } else {
        None
    }
}

fn summarize(history: &[Attempt], finals: &BTreeMap<String, Vec<String>>) -> String {
    let pos = positions(finals);
    let count = |o: Outcome| history.iter().filter(|a| a.outcome == o).count();
    let unknown_committed = history
        .iter()
        .filter(|a| a.outcome == Outcome::Unknown && resolved(a, &pos) == Some(true))
        .count();
    let (edges, ww, wr, rw) = graph(history, finals).1;
    format!(
        "{} attempts: {} committed, {} aborted, {} unknown ({} of them committed); \
         {} edges ({} ww, {} wr, {} rw); final lengths {:?}",
        history.len(),
        count(Outcome::Committed),
        count(Outcome::Aborted),
        count(Outcome::Unknown),
        unknown_committed,
        edges,
        ww,
        wr,
        rw,
        finals.values().map(Vec::len).collect::<Vec<_>>()
    )
}

type Graph = BTreeMap<usize, BTreeSet<usize>>;

/// The dependency graph over committed attempts (indices into `history`), and edge counts
/// (total distinct, ww, wr, rw).
fn graph(
    history: &[Attempt],
    finals: &BTreeMap<String, Vec<String>>,
) -> (Graph, (usize, usize, usize, usize)) {
    let pos = positions(finals);
    let writer: HashMap<&str, usize> = history
        .iter()
        .enumerate()
        .flat_map(|(i, a)| a.appends.iter().map(move |(_, v)| (v.as_str(), i)))
        .collect();
    let committed: Vec<bool> = history
        .iter()
        .map(|a| resolved(a, &pos) == Some(true))
        .collect();
    let mut g: Graph = BTreeMap::new();
    let (mut ww, mut wr, mut rw) = (0, 0, 0);
    let add = |g: &mut Graph, from: usize, to: usize, counter: &mut usize| {
        if from != to && committed[from] && committed[to] && g.entry(from).or_default().insert(to) {
            *counter += 1;
        }
    };
    for l in finals.values() {
        for pair in l.windows(2) {
            if let (Some(&a), Some(&b)) =
                (writer.get(pair[0].as_str()), writer.get(pair[1].as_str()))
            {
                add(&mut g, a, b, &mut ww);
            }
        }
    }
    for (t, a) in history.iter().enumerate() {
        if !committed[t] {
            continue;
        }
        for (k, seen) in &a.reads {
            if let Some(&w) = seen.last().and_then(|v| writer.get(v.as_str())) {
                add(&mut g, w, t, &mut wr);
            }
            if let Some(&w) = finals
                .get(k)
                .and_then(|l| l.get(seen.len()))
                .and_then(|v| writer.get(v.as_str()))
            {
                add(&mut g, t, w, &mut rw);
            }
        }
    }
    let total = g.values().map(BTreeSet::len).sum();
    (g, (total, ww, wr, rw))
}

/// A cycle in `g`, if any (iterative three-colour DFS).
fn find_cycle(g: &Graph, n: usize) -> Option<Vec<usize>> {
    let mut colour = vec![0u8; n]; // 0 white, 1 on stack, 2 done
    let mut parent = vec![usize::MAX; n];
    for start in 0..n {
        if colour[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, Vec<usize>)> = vec![(
            start,
            g.get(&start)
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default(),
        )];
        colour[start] = 1;
        while let Some((node, succ)) = stack.last_mut() {
            let node = *node;
            match succ.pop() {
                Some(next) if colour[next] == 0 => {
                    colour[next] = 1;
                    parent[next] = node;
                    stack.push((
                        next,
                        g.get(&next)
                            .map(|s| s.iter().copied().collect())
                            .unwrap_or_default(),
                    ));
                }
                Some(next) if colour[next] == 1 => {
                    let mut cycle = vec![next];
                    let mut cur = node;
                    while cur != next {
                        cycle.push(cur);
                        cur = parent[cur];
                    }
                    cycle.reverse();
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    colour[node] = 2;
                    stack.pop();
                }
            }
        }
    }
    None
}

fn check(history: &[Attempt], finals: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut errors = Vec::new();
    let pos = positions(finals);
    let all_values: usize = finals.values().map(Vec::len).sum();
    if pos.len() != all_values {
        errors.push("a value appears twice in the final lists".to_string());
    }
    let owner: HashMap<&str, (&Attempt, &str)> = history
        .iter()
        .flat_map(|a| {
            a.appends
                .iter()
                .map(move |(k, v)| (v.as_str(), (a, k.as_str())))
        })
        .collect();
    for (k, l) in finals {
        for v in l {
            match owner.get(v.as_str()) {
                None => errors.push(format!("{k} holds never-written value {v}")),
                Some((_, wk)) if *wk != k => {
                    errors.push(format!("{k} holds {v}, which was appended to {wk}"))
                }
                _ => {}
            }
        }
    }
    for a in history {
        match (a.outcome, resolved(a, &pos)) {
            (_, None) => errors.push(format!(
                "{} ({:?}) is partly visible: appends {:?}",
                a.name, a.outcome, a.appends
            )),
            (Outcome::Committed, Some(false)) => errors.push(format!(
                "{} committed but its appends {:?} are lost",
                a.name, a.appends
            )),
            (Outcome::Aborted, Some(true)) => errors.push(format!(
                "{} aborted ({}) but its appends {:?} are visible",
                a.name, a.detail, a.appends
            )),
            _ => {}
        }
        // Every locked read, even of an attempt that later aborted, saw a committed prefix.
        for (k, seen) in &a.reads {
            let fin = &finals[k];
            if seen.len() > fin.len() || fin[..seen.len()] != seen[..] {
                errors.push(format!(
                    "{} ({:?}) read {k} = {seen:?}, not a prefix of the final {fin:?}",
                    a.name, a.outcome
                ));
            }
        }
    }
    let (g, _) = graph(history, finals);
    if let Some(cycle) = find_cycle(&g, history.len()) {
        let names: Vec<&str> = cycle.iter().map(|&i| history[i].name.as_str()).collect();
        errors.push(format!("dependency cycle: {}", names.join(" -> ")));
    }
    errors
}

/// The checker itself: a write skew (two anti-dependencies forming a cycle), an aborted value in a
/// list and a read of a value that was never committed are all caught.
#[test]
fn checker_finds_write_skew_and_aborted_reads() {
    let att =
        |name: &str, reads: &[(&str, &[&str])], appends: &[(&str, &str)], o: Outcome| Attempt {
            name: name.to_string(),
            reads: reads
                .iter()
                .map(|(k, l)| (k.to_string(), l.iter().map(|v| v.to_string()).collect()))
                .collect(),
            appends: appends
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            outcome: o,
            detail: String::new(),
        };
    let finals = |pairs: &[(&str, &[&str])]| -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(k, l)| (k.to_string(), l.iter().map(|v| v.to_string()).collect()))
            .collect()
    };
    let skew = vec![
        att("a", &[("k0", &[])], &[("k1", "a0")], Outcome::Committed),
        att("b", &[("k1", &[])], &[("k0", "b0")], Outcome::Committed),
    ];
    let errs = check(&skew, &finals(&[("k0", &["b0"]), ("k1", &["a0"])]));
    assert!(errs.iter().any(|e| e.contains("cycle")), "{errs:?}");

    let serial = vec![
        att("a", &[("k0", &[])], &[("k1", "a0")], Outcome::Committed),
        att("b", &[("k1", &["a0"])], &[("k0", "b0")], Outcome::Committed),
    ];
    let errs = check(&serial, &finals(&[("k0", &["b0"]), ("k1", &["a0"])]));
    assert!(errs.is_empty(), "{errs:?}");

    let dirty = vec![
        att("a", &[], &[("k1", "a0")], Outcome::Aborted),
        att("b", &[("k1", &["a0"])], &[("k0", "b0")], Outcome::Committed),
    ];
    let errs = check(&dirty, &finals(&[("k0", &["b0"]), ("k1", &[])]));
    assert!(errs.iter().any(|e| e.contains("not a prefix")), "{errs:?}");
    let errs = check(&dirty, &finals(&[("k0", &["b0"]), ("k1", &["a0"])]));
    assert!(errs.iter().any(|e| e.contains("aborted")), "{errs:?}");
}
