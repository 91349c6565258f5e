//! Typed items: serde types round-trip through transactions and isolated reads, for every attribute
//! type, nested.
mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use common::*;
use dynamodb_transactions::{Error, IsolationLevel, from_item, to_item};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Inner {
    label: String,
    weights: Vec<f64>,
    flags: BTreeMap<String, bool>,
    raw: Bytes,
    nothing: Option<()>,
    deeper: Option<Box<Inner>>,
}

/// Bytes stored as a DynamoDB binary (B), not as a list of numbers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Bytes(Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// Every attribute type: S, N, B, SS, NS, BS, M, L, BOOL, NULL, nested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Everything {
    #[serde(rename = "Id")]
    id: String,
    text: String,
    int: i64,
    float: f64,
    big: u64,
    bytes: Bytes,
    #[serde(with = "serde_dynamo::string_set")]
    strings: BTreeSet<String>,
    #[serde(with = "serde_dynamo::number_set")]
    numbers: BTreeSet<i32>,
    #[serde(with = "serde_dynamo::binary_set")]
    blobs: BTreeSet<Bytes>,
    map: HashMap<String, i32>,
    list: Vec<Inner>,
    yes: bool,
    null: Option<String>,
    inner: Inner,
    unicode: String,
}

fn everything(id: &str, salt: i64) -> Everything {
    let inner = |label: &str, deeper: Option<Box<Inner>>| Inner {
        label: label.to_string(),
        weights: vec![0.5, -1.25, salt as f64],
        flags: BTreeMap::from([("a".into(), true), ("b".into(), false)]),
        raw: Bytes(vec![0, 255, salt as u8]),
        nothing: None,
        deeper,
    };
    Everything {
        id: id.to_string(),
        text: format!("hello {salt}"),
        int: -42 * salt,
        float: 3.5 + salt as f64,
        big: u64::MAX - salt as u64,
        bytes: Bytes(vec![1, 2, 3, salt as u8]),
        strings: BTreeSet::from(["x".into(), format!("y{salt}")]),
        numbers: BTreeSet::from([1, 2, salt as i32 + 10]),
        blobs: BTreeSet::from([Bytes(vec![9, 9]), Bytes(vec![salt as u8 + 1])]),
        map: HashMap::from([("k".into(), salt as i32), ("z".into(), 0)]),
        list: vec![
            inner("first", None),
            inner("second", Some(Box::new(inner("nested", None)))),
        ],
        yes: salt % 2 == 0,
        null: None,
        inner: inner(
            "top",
            Some(Box::new(inner(
                "mid",
                Some(Box::new(inner("bottom", None))),
            ))),
        ),
        unicode: "žluťoučký kůň 🐎".to_string(),
    }
}

#[derive(Serialize)]
struct IdKey<'a> {
    #[serde(rename = "Id")]
    id: &'a str,
}

fn k(id: &str) -> dynamodb_transactions::Item {
    to_item(&IdKey { id }).unwrap()
}

#[tokio::test]
async fn every_attribute_type_round_trips() {
    let env = TestEnv::new("typed-all").await;
    let v = everything("e1", 7);
    // The stored item has the DynamoDB types we mean.
    let it = to_item(&v).unwrap();
    for (attr, ty) in [
        ("text", "S"),
        ("int", "N"),
        ("float", "N"),
        ("big", "N"),
        ("bytes", "B"),
        ("strings", "SS"),
        ("numbers", "NS"),
        ("blobs", "BS"),
        ("map", "M"),
        ("list", "L"),
        ("yes", "BOOL"),
        ("null", "NULL"),
        ("inner", "M"),
    ] {
        let got = match &it[attr] {
            AttributeValue::S(_) => "S",
            AttributeValue::N(_) => "N",
            AttributeValue::B(_) => "B",
            AttributeValue::Ss(_) => "SS",
            AttributeValue::Ns(_) => "NS",
            AttributeValue::Bs(_) => "BS",
            AttributeValue::M(_) => "M",
            AttributeValue::L(_) => "L",
            AttributeValue::Bool(_) => "BOOL",
            AttributeValue::Null(_) => "NULL",
            _ => "?",
        };
        assert_eq!(got, ty, "{attr}");
    }

    // Put in a transaction, read back inside it (read-your-writes) and outside at both levels.
    let tx = env.manager.begin();
    tx.put(&env.table, &v).await.unwrap();
    let mine: Option<Everything> = tx.get(&env.table, k("e1")).await.unwrap();
    assert_eq!(mine.as_ref(), Some(&v));
    tx.commit().await.unwrap();
    for level in [IsolationLevel::Uncommitted, IsolationLevel::Committed] {
        let got: Option<Everything> = env.manager.get(&env.table, k("e1"), level).await.unwrap();
        assert_eq!(got.as_ref(), Some(&v), "{level:?}");
    }
    // Raw and typed APIs see the same item.
    let raw = env.raw_get(&env.table, &k("e1")).await.unwrap();
    assert_eq!(from_item::<Everything>(raw).unwrap(), v);

    // Outside a transaction: put, then read-modify-write.
    let w = everything("e2", 8);
    env.manager.put(&env.table, &w).await.unwrap();
    let updated: Option<Everything> = env
        .manager
        .update(&env.table, k("e2"), |e: &mut Everything| {
            e.inner.deeper.as_mut().unwrap().label = "changed".into();
            e.numbers.insert(99);
            e.null = Some("now set".into());
        })
        .await
        .unwrap();
    let mut want = w.clone();
    want.inner.deeper.as_mut().unwrap().label = "changed".into();
    want.numbers.insert(99);
    want.null = Some("now set".into());
    assert_eq!(updated.as_ref(), Some(&want));
    let got: Option<Everything> = env
        .manager
        .get(&env.table, k("e2"), IsolationLevel::Committed)
        .await
        .unwrap();
    assert_eq!(got, Some(want));
    // Missing items.
    let none: Option<Everything> = env
        .manager
        .get(&env.table, k("nope"), IsolationLevel::Committed)
        .await
        .unwrap();
    assert_eq!(none, None);
    let none: Option<Everything> = env
        .manager
        .update(&env.table, k("nope"), |e: &mut Everything| e.int += 1)
        .await
        .unwrap();
    assert_eq!(none, None);
    assert!(env.raw_get(&env.table, &k("nope")).await.is_none());

    // Query and scan results as typed values.
    let page = env
        .manager
        .scan()
        .table_name(&env.table)
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let mut all: Vec<Everything> = page.items_as().unwrap();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(all.len(), 2);
    assert_eq!(all[0], v);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Account {
    #[serde(rename = "Id")]
    id: String,
    balance: i64,
    history: Vec<String>,
}

#[tokio::test]
async fn typed_transfer_is_isolated_until_commit() {
    let env = TestEnv::new("typed-transfer").await;
    for (id, b) in [("alice", 100), ("bob", 0)] {
        env.manager
            .put(
                &env.table,
                &Account {
                    id: id.into(),
                    balance: b,
                    history: vec![],
                },
            )
            .await
            .unwrap();
    }
    let tx = env.manager.begin();
    let a: Account = tx
        .update(&env.table, k("alice"), |a: &mut Account| {
            a.balance -= 30;
            a.history.push("sent 30".into());
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.balance, 70);
    tx.update(&env.table, k("bob"), |a: &mut Account| {
        a.balance += 30;
        a.history.push("got 30".into());
    })
    .await
    .unwrap()
    .unwrap();
    // Other readers still see the old balances at both levels (the puts are buffered until commit).
    for level in [IsolationLevel::Committed, IsolationLevel::Uncommitted] {
        let bob: Account = env
            .manager
            .get(&env.table, k("bob"), level)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(bob.balance, 0, "{level:?}");
    }
    // Inside the transaction, its own writes.
    let bob: Account = tx.get(&env.table, k("bob")).await.unwrap().unwrap();
    assert_eq!(bob.balance, 30);
    tx.commit().await.unwrap();
    let all: Vec<Account> = dynamodb_transactions::from_items(
        env.manager
            .query()
            .table_name(&env.table)
            .key_condition_expression("Id = :a")
            .expression_attribute_values(":a", s("alice"))
            .into_stream()
            .try_collect()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        all,
        vec![Account {
            id: "alice".into(),
            balance: 70,
            history: vec!["sent 30".into()]
        }]
    );
}

#[tokio::test]
async fn typed_reads_at_committed_see_the_before_image() {
    let env = TestEnv::new("typed-image").await;
    env.manager
        .put(
            &env.table,
            &Account {
                id: "a".into(),
                balance: 5,
                history: vec!["open".into()],
            },
        )
        .await
        .unwrap();
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET balance = :b")
        .expression_attribute_values(":b", n(500))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let c: Account = env
        .manager
        .get(&env.table, k("a"), IsolationLevel::Committed)
        .await
        .unwrap()
        .unwrap();
    let u: Account = env
        .manager
        .get(&env.table, k("a"), IsolationLevel::Uncommitted)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((c.balance, u.balance), (5, 500));
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn conversion_errors_are_serde_errors() {
    let env = TestEnv::new("typed-errors").await;
    env.raw_put(
        &env.table,
        item(&[("Id", s("x")), ("balance", s("not a number"))]),
    )
    .await;
    let got = env
        .manager
        .get::<Account>(&env.table, k("x"), IsolationLevel::Committed)
        .await;
    assert!(matches!(got, Err(Error::Serde(_))), "{got:?}");
    // A value that is not a map cannot be an item.
    let tx = env.manager.begin();
    let got = tx.put(&env.table, &42).await;
    assert!(matches!(got, Err(Error::Serde(_))), "{got:?}");
    // Changing the key in an update is refused, and nothing is written.
    env.manager
        .put(
            &env.table,
            &Account {
                id: "y".into(),
                balance: 1,
                history: vec![],
            },
        )
        .await
        .unwrap();
    let got = tx
        .update(&env.table, k("y"), |a: &mut Account| a.id = "z".into())
        .await;
    assert!(got.unwrap_err().is_invalid_request());
    tx.rollback().await.unwrap();
    assert!(env.raw_get(&env.table, &k("z")).await.is_none());
}
