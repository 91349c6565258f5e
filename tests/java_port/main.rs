//! Port of the Java library's `TransactionsIntegrationTest` (awslabs/dynamodb-transactions), and in
//! spirit of its request-validation tests (`RequestTest`), run against DynamoDB Local.
//!
//! Every test is named after its Java counterpart. Where this library's semantics differ, a one-line
//! comment says how the scenario maps:
//! - writes without `ReturnValues` are buffered until commit, so a scenario that needs the item locked
//!   right after a put uses `ReturnValue::AllOld` (locks now, applies at commit) and one that needs it
//!   applied uses an update with `ReturnValue::AllNew` (or a phased commit crashed before its flip);
//! - before-images are embedded in the item (`_TxG`) in the write that applies the change, not saved in
//!   the images table (only images over 64 KB go there, the item then carries `_TxI`);
//! - `_TxT` is `BOOL true` on a transient item;
//! - conditions are supported, and a request DynamoDB rejects rolls the transaction back;
//! - Java's overridden protocol steps become `FaultInjector` crashes at the matching request, and the
//!   recovery runs on a second coordinator.
//!
//! One module per group of the Java suite; the fixture and assertion helpers they share are here.

#[path = "../common/mod.rs"]
mod common;

use std::fmt::Debug;
use std::future::Future;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::ReturnValue::{AllNew, AllOld};
use common::*;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::fault::FaultMode::{AfterSend, BeforeSend};
use dynamodb_transactions::{
    DeleteItemBuilder, Error, GetItemBuilder, IsolationLevel, Item, PutItemBuilder, Transaction,
    TransactionManager, TxId, TxState, UpdateItemBuilder,
};

// ------------------------------------------------------------------------------------------------
// Fixture and assertion helpers (Java's `IntegrationTest` base class)
// ------------------------------------------------------------------------------------------------

/// A test's environment with `item0` committed, as Java's `@Before`.
struct Fx {
    env: TestEnv,
    item0: Item,
    /// Commits take the phased path (`one_shot_max_items = 0`).
    phased: bool,
}

impl std::ops::Deref for Fx {
    type Target = TestEnv;
    fn deref(&self) -> &TestEnv {
        &self.env
    }
}

fn ss(v: &[&str]) -> AttributeValue {
    AttributeValue::Ss(v.iter().map(|x| x.to_string()).collect())
}

fn item0() -> Item {
    item(&[
        ("Id", s("item0")),
        ("s_someattr", s("val")),
        ("ss_otherattr", ss(&["one", "two"])),
    ])
}

/// `base` with `pairs` added or replaced.
fn with(base: &Item, pairs: &[(&str, AttributeValue)]) -> Item {
    let mut out = base.clone();
    for (k, v) in pairs {
        out.insert(k.to_string(), v.clone());
    }
    out
}

async fn fixture(prefix: &str) -> Fx {
    fixture_with(prefix, false).await
}

/// The fixture; `phased` makes every commit take the phased path. Locks are taken item by item
/// (`batch_locks` off), as the Java library takes them: the scenarios below place their faults by
/// the request numbers of that shape. The batched locks have their own crash sweeps
/// (tests/crash.rs).
async fn fixture_with(prefix: &str, phased: bool) -> Fx {
    let env = TestEnv::with_settings(prefix, |s| {
        s.batch_locks = false;
        if phased {
            s.one_shot_max_items = 0;
        }
    })
    .await;
    let item0 = item0();
    let t = env.manager.begin();
    let out = put(&t, &env.table, &item0)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_eq!(out.attributes, None);
    t.commit().await.unwrap();
    assert_not_locked(&env, &env.table, &key("item0"), Some(&item0)).await;
    env.counter.reset();
    Fx { env, item0, phased }
}

/// A second coordinator over the same tables with the same commit path (and no faults).
fn second(fx: &Fx) -> TransactionManager {
    let phased = fx.phased;
    TransactionManager::builder(client())
        .transactions_table(fx.manager.transactions_table())
        .images_table(fx.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            if phased {
                s.one_shot_max_items = 0;
            }
        })
        .build()
}

fn put<'a>(tx: &'a Transaction, table: &str, it: &Item) -> PutItemBuilder<'a> {
    tx.put_item().table_name(table).set_item(Some(it.clone()))
}

fn update<'a>(tx: &'a Transaction, table: &str, id: &str) -> UpdateItemBuilder<'a> {
    tx.update_item().table_name(table).set_key(Some(key(id)))
}

fn delete<'a>(tx: &'a Transaction, table: &str, id: &str) -> DeleteItemBuilder<'a> {
    tx.delete_item().table_name(table).set_key(Some(key(id)))
}

fn get<'a>(tx: &'a Transaction, table: &str, id: &str) -> GetItemBuilder<'a> {
    tx.get_item().table_name(table).set_key(Some(key(id)))
}

/// An update `SET asdf = :v`.
fn set_asdf<'a>(tx: &'a Transaction, table: &str, id: &str, v: &str) -> UpdateItemBuilder<'a> {
    update(tx, table, id)
        .update_expression("SET asdf = :v")
        .expression_attribute_values(":v", s(v))
}

/// Reads outside any transaction at an isolation level.
async fn read(
    m: &TransactionManager,
    table: &str,
    id: &str,
    level: IsolationLevel,
) -> Option<Item> {
    m.get_item()
        .table_name(table)
        .set_key(Some(key(id)))
        .isolation(level)
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

fn user_attrs(i: &Item) -> Item {
    i.iter()
        .filter(|(k, _)| !k.starts_with("_Tx"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Java's `assertItemLocked`: owner, transient and applied flags, lock date, contents without the
/// lock attributes, and the owner's TX record lists a request for the item. Returns the raw item.
#[allow(clippy::too_many_arguments)]
async fn assert_locked(
    env: &TestEnv,
    table: &str,
    k: &Item,
    expected: Option<&Item>,
    owner: &TxId,
    transient: bool,
    applied: bool,
) -> Item {
    let raw = env
        .raw_get(table, k)
        .await
        .unwrap_or_else(|| panic!("item {k:?} should exist, locked by {owner}"));
    assert_eq!(raw.get("_TxId"), Some(&s(owner.as_str())), "owner: {raw:?}");
    assert!(raw.contains_key("_TxD"), "lock date: {raw:?}");
    assert_transient_flag(&raw, transient);
    assert_eq!(raw.contains_key("_TxA"), applied, "applied: {raw:?}");
    if applied {
        assert_eq!(raw.get("_TxA"), Some(&s("1")), "applied flag: {raw:?}");
    }
    if let Some(e) = expected {
        assert_eq!(&user_attrs(&raw), e, "contents of {raw:?}");
    }
    assert!(
        record_mentions(env, owner, table, k).await,
        "TX record of {owner} should list a request for {k:?}"
    );
    raw
}

/// `_TxT` is `BOOL true` on a transient placeholder and absent otherwise.
fn assert_transient_flag(raw: &Item, transient: bool) {
    let is_true = raw.get("_TxT") == Some(&AttributeValue::Bool(true));
    assert_eq!(is_true, transient, "transient: {raw:?}");
    if !transient {
        assert!(!raw.contains_key("_TxT"), "transient: {raw:?}");
    }
}

/// Java's `assertItemNotLocked`: `expected` None means the item must not exist.
async fn assert_not_locked(env: &TestEnv, table: &str, k: &Item, expected: Option<&Item>) {
    let raw = env.raw_get(table, k).await;
    match expected {
        None => assert!(raw.is_none(), "item {k:?} should not exist: {raw:?}"),
        Some(e) => {
            let raw = raw.unwrap_or_else(|| panic!("item {k:?} should exist"));
            assert!(!has_tx_attrs(&raw), "item should not be locked: {raw:?}");
            assert_eq!(&raw, e);
        }
    }
}

/// Java's `assertOldItemImage`: the locked, applied item carries its before-image.
async fn assert_image(env: &TestEnv, table: &str, k: &Item, old: &Item) {
    let raw = env.raw_get(table, k).await.expect("item exists");
    assert_eq!(
        raw.get("_TxG"),
        Some(&AttributeValue::M(old.clone())),
        "embedded before-image of {raw:?}"
    );
}

async fn assert_no_image(env: &TestEnv, table: &str, k: &Item) {
    if let Some(raw) = env.raw_get(table, k).await {
        assert!(
            !raw.contains_key("_TxG") && !raw.contains_key("_TxI"),
            "no image expected: {raw:?}"
        );
    }
}

async fn assert_images_empty(env: &TestEnv) {
    let rows = env.scan_all(env.manager.images_table()).await;
    assert!(rows.is_empty(), "images table should be empty: {rows:?}");
}

async fn assert_state(env: &TestEnv, id: &TxId, state: TxState, finalized: bool) {
    assert_eq!(
        env.tx_state(id).await,
        Some((state, finalized)),
        "state of {id}"
    );
}

/// Java's `assertTransactionDeleted`.
async fn assert_tx_deleted(env: &TestEnv, id: &TxId) {
    assert_eq!(env.tx_state(id).await, None);
    let e = env.manager.resume(id).await.unwrap_err();
    assert!(matches!(e, Error::TransactionNotFound { .. }), "{e:?}");
    let rows = env.record_rows(id).await;
    assert!(rows.is_empty(), "record rows left: {rows:?}");
}

/// True if a request map in the record names `table` and has `key` as a value.
async fn record_mentions(env: &TestEnv, id: &TxId, table: &str, k: &Item) -> bool {
    let want_key = AttributeValue::M(k.clone());
    let want_table = s(table);
    env.record_rows(id)
        .await
        .iter()
        .filter_map(|r| r.get("_TxR").and_then(|v| v.as_l().ok()))
        .flatten()
        .any(|req| match req {
            AttributeValue::M(m) => {
                m.values().any(|v| v == &want_key) && m.values().any(|v| v == &want_table)
            }
            _ => false,
        })
}

/// Requests of the TX record write that records buffered requests (a `PutItem` creating it or an
/// `UpdateItem` appending).
const RECORD: u64 = 1;

/// Requests that lock one item an update or a delete writes: an existing item takes one
/// `UpdateItem`; an absent one takes two (the lock conditional on the item existing fails, then a
/// second `UpdateItem` inserts the placeholder conditional on it still being absent).
fn lock_requests(absent: bool) -> u64 {
    if absent { 2 } else { 1 }
}

/// Requests that lock one item a put without a condition writes: the first write assumes a create
/// (the placeholder, conditional on the item being absent), so an absent item takes one `UpdateItem`
/// and an existing one two.
fn put_lock_requests(absent: bool) -> u64 {
    if absent { 1 } else { 2 }
}

/// The operation named by an injected fault in `e`'s source chain
/// (`injected fault (<mode>) at request <n> (<operation>)`), if `e` comes from one.
fn struck_operation(e: &Error) -> Option<String> {
    let text = format!("{e:?}");
    let rest = &text[text.find("injected fault")?..];
    let rest = &rest[rest.find(" at request ")?..];
    let open = rest.find('(')?;
    let close = open + rest[open..].find(')')?;
    Some(rest[open + 1..close].to_string())
}

/// Runs `f` with a crash armed at the `n`-th request from now (that request and every later one of
/// the manager's client fail), then disarms so the test can read the tables again. `op` is the
/// operation the `n`-th request must be: checked whenever `f` fails with the injected fault, so a
/// change in the protocol's request sequence shows up as a wrong crash point, not as a puzzling
/// state later.
async fn crashing<T, F>(env: &TestEnv, n: u64, mode: FaultMode, op: &str, f: F) -> Result<T, Error>
where
    F: Future<Output = Result<T, Error>>,
{
    env.counter.reset();
    env.faults.crash_at(n, mode);
    let r = f.await;
    assert!(
        env.faults.struck(),
        "the crash at request {n} ({op}) did not strike; requests: {:?}",
        env.counter.snapshot()
    );
    if let Err(e) = &r
        && let Some(struck) = struck_operation(e)
    {
        assert_eq!(
            struck,
            op,
            "the crash at request {n} hit another operation; requests: {:?}; error: {e}",
            env.counter.snapshot()
        );
    }
    env.faults.disarm();
    r
}

fn expect_err<T: Debug>(r: Result<T, Error>) -> Error {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e,
    }
}

fn is_rolled_back(e: &Error) -> bool {
    matches!(e, Error::RolledBack { .. })
}

fn is_invalid(e: &Error) -> bool {
    matches!(e, Error::InvalidRequest { .. })
}

/// Write operations counted by the request counter.
fn writes_made(env: &TestEnv) -> u64 {
    [
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "TransactWriteItems",
        "BatchWriteItem",
    ]
    .iter()
    .map(|op| env.counter.get(op))
    .sum()
}

/// Two tests per scenario: `<name>::one_shot` and `<name>::phased` (commits in phases).
macro_rules! both_paths {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn one_shot() {
                super::$name(false).await
            }
            #[tokio::test]
            async fn phased() {
                super::$name(true).await
            }
        }
    };
}

/// item0 with an attribute big enough that its before-image goes to the images table.
async fn make_item0_big(fx: &Fx) -> Item {
    let big = with(&fx.item0, &[("big", s(&"x".repeat(70_000)))]);
    fx.raw_put(&fx.table, big.clone()).await;
    big
}

fn item1() -> Item {
    item(&[("Id", s("item1")), ("asdf", s("wef"))])
}

// The groups of the Java suite, one module each (declared after the helpers and the
// `both_paths!` macro above, which they use).
mod basics;
mod isolated_reads;
mod locks;
mod recovery;
mod request_validation;
mod return_values;
mod rollback_races;
mod state_machine;
mod transient;
