//! Items near DynamoDB's 400 KB limit: the room the lock attributes need, on every commit path.

use aws_sdk_dynamodb::types::ReturnValue;
use dynamodb_transactions::fault::DynamoDbProfile;
use dynamodb_transactions::{Error, TxState};

use crate::common::*;
use crate::{PATHS, assert_clean, assert_no_images, coordinator_on};

/// The profile these tests answer through when the run's is on: the run's, without its
/// throttling. Each write of an item of 300–400 KB takes 300–400 of the 1,000 write units a
/// second DynamoDB serves one item, and these tests write such items several times a second:
/// DynamoDB throttles their own writes as the profile does, past the SDK's three attempts at
/// times (a fresh-clone run failed so). What they check is the size rules, which throttling
/// does not change; the library's answer to throttling is checked by `tests/profile` and the
/// chaos workload.
fn unthrottled() -> Option<&'static DynamoDbProfile> {
    static UNTHROTTLED: std::sync::OnceLock<Option<DynamoDbProfile>> = std::sync::OnceLock::new();
    UNTHROTTLED
        .get_or_init(|| {
            profile().map(|p| {
                let mut settings = p.settings().clone();
                settings.throttling = false;
                DynamoDbProfile::new(settings)
            })
        })
        .as_ref()
}

/// A test's environment, through [`unthrottled`] when the profile is on.
async fn env_with(prefix: &str, f: impl FnOnce(&mut dynamodb_transactions::Settings)) -> TestEnv {
    match unthrottled() {
        Some(p) => TestEnv::through_profile(prefix, p, f).await,
        None => TestEnv::with_settings(prefix, f).await,
    }
}

/// `crate::envs`, through [`unthrottled`].
async fn envs(prefix: &str) -> Vec<TestEnv> {
    let mut out = Vec::new();
    for (path, settings) in PATHS {
        out.push(env_with(&format!("{prefix}-{path}"), settings).await);
    }
    out
}

/// `crate::coordinator_with`, through [`unthrottled`].
fn coordinator_with(
    env: &TestEnv,
    f: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> dynamodb_transactions::TransactionManager {
    let c = match unthrottled() {
        Some(p) => client_through(p, vec![]),
        None => client(),
    };
    coordinator_on(env, c, f)
}

/// Finding 11: an update whose expression makes the item grow (`SET b = a` copying a large
/// attribute) to ~360 KB, which DynamoDB accepts, commits on every path: the before-image estimate
/// must count the growth (an embedded 60 KB image would push the applied item past 400 KB).
#[tokio::test]
async fn an_update_that_copies_a_large_attribute_commits_on_every_path() {
    let env = env_with("grow", |_| {}).await;
    let a = s(&"y".repeat(60_000));
    let update = "SET b = a, c = a, d = a, e = a, f = a";
    // What DynamoDB itself does with the plain update.
    env.raw_put(&env.table, item(&[("Id", s("twin")), ("a", a.clone())]))
        .await;
    env.client
        .update_item()
        .table_name(&env.table)
        .key("Id", s("twin"))
        .update_expression(update)
        .send()
        .await
        .expect("DynamoDB accepts the plain update");
    let paths: Vec<(&str, dynamodb_transactions::TransactionManager, bool)> = vec![
        ("one-request", coordinator_with(&env, |_| {}), false),
        (
            "phased",
            coordinator_with(&env, |s| s.one_shot_max_items = 0),
            false,
        ),
        ("return-values", coordinator_with(&env, |_| {}), true),
        (
            "write-only",
            coordinator_with(&env, |s| s.write_only_fast_path = true),
            false,
        ),
    ];
    for (path, m, rv) in paths {
        env.raw_put(&env.table, item(&[("Id", s(path)), ("a", a.clone())]))
            .await;
        let tx = m.begin();
        let mut b = tx
            .update_item()
            .table_name(&env.table)
            .key("Id", s(path))
            .update_expression(update);
        if rv {
            b = b.return_values(ReturnValue::AllNew);
        }
        let r = b.send().await;
        let r = match r {
            Ok(_) => tx.commit().await,
            Err(e) => Err(e),
        };
        assert!(r.is_ok(), "{path}: {r:?}");
        let got = env.raw_get(&env.table, &key(path)).await.unwrap();
        assert!(!has_tx_attrs(&got), "{path}");
        for attr in ["b", "c", "d", "e", "f"] {
            assert_eq!(got.get(attr), Some(&a), "{path}: {attr}");
        }
        assert_no_images(&env, path).await;
    }
}

/// An item of exactly `size` bytes by DynamoDB's rules (`Id` + `blob`).
fn item_of_size(id: &str, size: usize) -> dynamodb_transactions::Item {
    let fixed = "Id".len() + id.len() + "blob".len();
    item(&[("Id", s(id)), ("blob", s(&"z".repeat(size - fixed)))])
}

const MAX_ITEM: usize = 400 * 1024;

fn assert_room_error(what: &str, r: Result<impl std::fmt::Debug, Error>) {
    match r {
        Err(Error::InvalidRequest { reason }) => {
            assert!(
                reason.contains("400 KB") && reason.contains("bytes of room"),
                "{what}: the error must name the limit and the room needed: {reason}"
            );
        }
        other => panic!("{what}: expected InvalidRequest, got {other:?}"),
    }
}

/// Finding 11: items near DynamoDB's 400 KB limit. A put DynamoDB accepts and that leaves the
/// room the library needs is accepted; an item within a few dozen bytes of the limit cannot carry a
/// lock (not even a read lock): the library says so with a typed error naming the room it needs,
/// writes nothing to the item and leaves nothing pending.
#[tokio::test]
async fn items_near_the_size_limit() {
    for env in envs("near").await {
        // A put 1,000 bytes under the limit: DynamoDB accepts it, and the library needs less.
        let tx = env.manager.begin();
        let big = item_of_size("put", MAX_ITEM - 1_000);
        tx.put_item()
            .table_name(&env.table)
            .set_item(Some(big.clone()))
            .send()
            .await
            .expect("a put leaving 1,000 bytes of room");
        tx.commit().await.unwrap();
        assert_eq!(env.raw_get(&env.table, &key("put")).await, Some(big));
        // A put 20 bytes under the limit: the library cannot lock it; rejected before any write.
        let tx = env.manager.begin();
        let before = env.counter.total();
        assert_room_error(
            "put",
            tx.put_item()
                .table_name(&env.table)
                .set_item(Some(item_of_size("put2", MAX_ITEM - 20)))
                .send()
                .await,
        );
        assert_eq!(env.counter.total(), before, "nothing sent");
        tx.rollback().await.unwrap();

        // An existing item 30 bytes under the limit.
        let near = item_of_size("near", MAX_ITEM - 30);
        env.raw_put(&env.table, near.clone()).await;
        let tx = env.manager.begin();
        let id = tx.id().clone();
        assert_room_error(
            "read lock",
            tx.get_item()
                .table_name(&env.table)
                .key("Id", s("near"))
                .send()
                .await,
        );
        assert_eq!(
            env.raw_get(&env.table, &key("near")).await,
            Some(near.clone())
        );
        tx.rollback().await.unwrap();
        assert_eq!(
            env.manager
                .transaction_state(&id)
                .await
                .unwrap()
                .map(|s| s.state),
            Some(TxState::RolledBack)
        );

        let tx = env.manager.begin();
        let id = tx.id().clone();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("near"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(1))
            .send()
            .await
            .unwrap();
        assert_room_error("write", tx.commit().await);
        assert_eq!(
            env.raw_get(&env.table, &key("near")).await,
            Some(near.clone())
        );
        assert_ne!(
            env.manager
                .transaction_state(&id)
                .await
                .unwrap()
                .map(|s| s.state),
            Some(TxState::Pending),
            "nothing left pending"
        );
        assert_clean(&env).await;
    }
}

/// Finding 11: an update whose result DynamoDB would store, but which leaves less room than the
/// lock attributes need while the item is locked and applied, gets the same answer on every path
/// that locks: rejected (rolled back) with an error that names the room, the item unchanged. (The
/// one-request path used to accept it and the phased path to reject it.)
#[tokio::test]
async fn an_update_into_the_lock_room_gets_the_same_answer_on_every_path() {
    for env in envs("room").await {
        let start = item_of_size("r", MAX_ITEM - 5_000);
        env.raw_put(&env.table, start.clone()).await;
        // `v` (1 + 4,949 bytes) takes the item to 50 bytes under the limit.
        let v = s(&"q".repeat(4_949));
        env.raw_put(&env.table, with_id(&start, "twin")).await;
        env.client
            .update_item()
            .table_name(&env.table)
            .key("Id", s("twin"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", v.clone())
            .send()
            .await
            .expect("DynamoDB accepts the plain update");
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("r"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", v.clone())
            .send()
            .await
            .unwrap();
        match tx.commit().await {
            Err(Error::RequestRejected { message, .. }) => {
                assert!(message.contains("bytes of room"), "{message}")
            }
            other => panic!("expected RequestRejected, got {other:?}"),
        }
        assert_eq!(env.raw_get(&env.table, &key("r")).await, Some(start));
        let _ = env
            .client
            .delete_item()
            .table_name(&env.table)
            .key("Id", s("twin"))
            .send()
            .await;
        assert_clean(&env).await;
    }
}

fn with_id(i: &dynamodb_transactions::Item, id: &str) -> dynamodb_transactions::Item {
    let mut i = i.clone();
    i.insert("Id".into(), s(id));
    i
}
