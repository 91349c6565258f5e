//! The requests a transaction records: validation before any write, and their encoding in the TX
//! record.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use crate::error::{Error, Item, Result};
use crate::expr::{self, UpdateExpr};
use crate::keys::{ItemRef, KeySchema};

/// Largest item DynamoDB stores.
pub(crate) const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Length of the transaction ids the library makes (a UUID).
const TX_ID_LEN: usize = 36;
/// Largest size of a lock stamp (`_TxD`: epoch ms with a 6-digit fraction, 19 digits).
const STAMP_BYTES: usize = 12;
/// Length of an images-table id: the transaction id, `#`, 32 hex digits.
pub(crate) const IMAGE_ID_LEN: usize = TX_ID_LEN + 1 + 32;
/// Room a lock needs in an item: `_TxId` with the transaction id, `_TxD` with the stamp.
pub(crate) const LOCK_ROOM_BYTES: usize = "_TxId".len() + TX_ID_LEN + "_TxD".len() + STAMP_BYTES;
/// Room an applied write needs in its item besides its before-image: the lock, `_TxA`, and `_TxI`
/// (the images-table id of the before-image; a new item's `_TxT` is smaller).
pub(crate) const APPLIED_ROOM_BYTES: usize =
    LOCK_ROOM_BYTES + "_TxA".len() + 1 + "_TxI".len() + IMAGE_ID_LEN;

/// What the errors about item sizes say about the room the library needs.
pub(crate) fn room_note() -> String {
    format!(
        "DynamoDB's item limit is 400 KB ({MAX_ITEM_BYTES} bytes); a transaction needs {LOCK_ROOM_BYTES} bytes of room in an item to lock it (_TxId, _TxD) and {APPLIED_ROOM_BYTES} bytes of room in the item it writes (the lock, _TxA and _TxI)"
    )
}

/// What a request does to its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Put,
    Update,
    Delete,
    /// A read lock.
    Get,
}

impl Op {
    fn code(self) -> &'static str {
        match self {
            Op::Put => "P",
            Op::Update => "U",
            Op::Delete => "D",
            Op::Get => "G",
        }
    }

    fn from_code(c: &str) -> Option<Op> {
        Some(match c {
            "P" => Op::Put,
            "U" => Op::Update,
            "D" => Op::Delete,
            "G" => Op::Get,
            _ => return None,
        })
    }

    pub fn is_write(self) -> bool {
        self != Op::Get
    }
}

/// One request of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    pub op: Op,
    pub table: String,
    pub key: Item,
    /// The full new item of a put.
    pub item: Option<Item>,
    /// The update expression of an update (`None`: only make sure the item exists).
    pub update: Option<String>,
    pub condition: Option<String>,
    pub names: Option<HashMap<String, String>>,
    pub values: Option<HashMap<String, AttributeValue>>,
}

impl Request {
    pub fn item_ref(&self) -> ItemRef {
        ItemRef::new(&self.table, &self.key)
    }

    /// What this write leaves of `before` (the whole item, or its key alone if absent), known
    /// without DynamoDB: `Ok(None)` for a delete; `Err` with the reason when only DynamoDB can tell
    /// (an update the evaluator is unsure of, or one DynamoDB would refuse). Conditions are not
    /// judged here.
    pub fn result_on(&self, before: Item) -> std::result::Result<Option<Item>, &'static str> {
        match (self.op, &self.update) {
            (Op::Put, _) => Ok(Some(self.item.clone().unwrap_or_default())),
            (Op::Delete, _) => Ok(None),
            (Op::Update, None) => Ok(Some(before)), // nothing but the item's existence
            (Op::Update, Some(u)) => {
                match expr::apply_update(&before, u, self.names.as_ref(), self.values.as_ref()) {
                    expr::Applied::Item(after) => Ok(Some(after)),
                    expr::Applied::Rejected(why) | expr::Applied::Unsure(why) => Err(why),
                }
            }
            (Op::Get, _) => Err("a read writes nothing"),
        }
    }

    /// Encodes the request as a map attribute of the TX record.
    pub fn encode(&self) -> AttributeValue {
        let mut m = HashMap::new();
        m.insert("o".to_string(), AttributeValue::S(self.op.code().into()));
        m.insert("t".to_string(), AttributeValue::S(self.table.clone()));
        m.insert("k".to_string(), AttributeValue::M(self.key.clone()));
        if let Some(i) = &self.item {
            m.insert("i".to_string(), AttributeValue::M(i.clone()));
        }
        if let Some(u) = &self.update {
            m.insert("u".to_string(), AttributeValue::S(u.clone()));
        }
        if let Some(c) = &self.condition {
            m.insert("c".to_string(), AttributeValue::S(c.clone()));
        }
        if let Some(n) = &self.names {
            m.insert(
                "n".to_string(),
                AttributeValue::M(
                    n.iter()
                        .map(|(k, v)| (k.clone(), AttributeValue::S(v.clone())))
                        .collect(),
                ),
            );
        }
        if let Some(v) = &self.values {
            m.insert("v".to_string(), AttributeValue::M(v.clone()));
        }
        AttributeValue::M(m)
    }

    /// Decodes a request written by [`Request::encode`].
    pub fn decode(v: &AttributeValue) -> Result<Request> {
        let bad = || Error::invariant(format!("malformed request in TX record: {v:?}"));
        let m = v.as_m().map_err(|_| bad())?;
        let s = |k: &str| m.get(k).and_then(|v| v.as_s().ok()).cloned();
        let map = |k: &str| m.get(k).and_then(|v| v.as_m().ok()).cloned();
        Ok(Request {
            op: s("o").and_then(|c| Op::from_code(&c)).ok_or_else(bad)?,
            table: s("t").ok_or_else(bad)?,
            key: map("k").ok_or_else(bad)?,
            item: map("i"),
            update: s("u"),
            condition: s("c"),
            names: map("n").map(|n| {
                n.into_iter()
                    .filter_map(|(k, v)| v.as_s().ok().map(|s| (k, s.clone())))
                    .collect()
            }),
            values: map("v"),
        })
    }

    /// Bytes the encoded request takes in the TX record.
    pub fn encoded_size(&self) -> usize {
        value_size(&self.encode())
    }

    /// Validates the request against its table's key schema. Fills in `key` for puts.
    pub fn validate(&mut self, schema: &KeySchema) -> Result<()> {
        if self.table.is_empty() {
            return Err(Error::invalid("TableName must not be empty"));
        }
        match self.op {
            Op::Put => {
                let item = self
                    .item
                    .as_ref()
                    .ok_or_else(|| Error::invalid("a put needs an item"))?;
                check_item_names("Item", item)?;
                self.key = schema.key_of(&self.table, item)?;
                let size = item_size(item);
                if size + APPLIED_ROOM_BYTES > MAX_ITEM_BYTES {
                    return Err(Error::invalid(format!(
                        "the item for table {} is {size} bytes, too large to write in a transaction: {}",
                        self.table,
                        room_note()
                    )));
                }
            }
            _ => {
                check_item_names("Key", &self.key)?;
                schema.validate_key(&self.table, &self.key)?;
            }
        }
        if self.op != Op::Put && self.item.is_some() {
            return Err(Error::invalid("only a put carries an item"));
        }
        expr::check_names_and_values(self.names.as_ref(), self.values.as_ref())?;
        let mut exprs: Vec<&str> = Vec::new();
        if let Some(u) = &self.update {
            if self.op != Op::Update {
                return Err(Error::invalid("only an update carries an UpdateExpression"));
            }
            expr::check_no_reserved_words("UpdateExpression", u)?;
            let parsed = UpdateExpr::parse(u)?;
            for target in parsed.targets(self.names.as_ref())? {
                if target.starts_with(expr::RESERVED_PREFIX) {
                    return Err(expr::reserved("UpdateExpression", &target));
                }
                if schema.is_key_attribute(&target) {
                    return Err(Error::invalid(format!(
                        "the UpdateExpression changes key attribute {target} of table {}; keys cannot be updated",
                        self.table
                    )));
                }
            }
            exprs.push(u);
        }
        if let Some(c) = &self.condition {
            if self.op == Op::Get {
                return Err(Error::invalid("a read has no ConditionExpression"));
            }
            if c.trim().is_empty() {
                return Err(Error::invalid("ConditionExpression is empty"));
            }
            expr::check_no_reserved_words("ConditionExpression", c)?;
            exprs.push(c);
        }
        if self.op != Op::Get {
            expr::check_placeholders(&exprs, self.names.as_ref(), self.values.as_ref())?;
        }
        Ok(())
    }
}

/// Checks which `ReturnValues` an operation supports.
pub(crate) fn check_return_values(op: Op, rv: &ReturnValue) -> Result<()> {
    let ok = match op {
        Op::Put | Op::Delete => matches!(rv, ReturnValue::None | ReturnValue::AllOld),
        Op::Update => matches!(
            rv,
            ReturnValue::None
                | ReturnValue::AllOld
                | ReturnValue::AllNew
                | ReturnValue::UpdatedOld
                | ReturnValue::UpdatedNew
        ),
        Op::Get => true,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "ReturnValues {} is not supported for a {op:?}",
            rv.as_str()
        )))
    }
}

/// Rejects reserved top-level attribute names.
pub(crate) fn check_item_names(what: &str, item: &Item) -> Result<()> {
    match item.keys().find(|k| k.starts_with(expr::RESERVED_PREFIX)) {
        Some(k) => Err(expr::reserved(what, k)),
        None => Ok(()),
    }
}

/// DynamoDB's message rejecting an apply, with the room the library needs when it is about the
/// item's size.
pub(crate) fn explain_rejection(message: String) -> String {
    if message.to_ascii_lowercase().contains("size") {
        format!("{message} ({})", room_note())
    } else {
        message
    }
}

/// An upper bound of the size of the item (user attributes only) once `req` is applied to `before`:
/// exact for a put; for an update, the item before plus everything the expression can add (every
/// value and every attribute it names, copied whole: `SET b = a` can double an item).
pub(crate) fn result_size_bound(before: Option<&Item>, req: &Request) -> usize {
    let before_size = before.map_or(0, item_size);
    match (req.op, &req.item, &req.update) {
        (Op::Put, Some(item), _) => item_size(item),
        (Op::Update, _, Some(update)) => {
            before_size
                + expr::growth_bound(
                    update,
                    req.names.as_ref(),
                    |v| {
                        req.values
                            .as_ref()
                            .and_then(|m| m.get(v))
                            .map_or(0, value_size)
                    },
                    |a| before.and_then(|b| b.get(a)).map_or(0, value_size),
                )
        }
        _ => before_size,
    }
}

/// The padding a batched lock writes (`_TxP`, bytes) so that DynamoDB accepts the lock only if
/// the item has room for `req` applied plus [`APPLIED_ROOM_BYTES`]: the room the one-request commit
/// otherwise checks on the before-image, which a batched lock does not read. `None` when that room
/// depends on the item's attributes (an update that copies one): its image must be read. A write
/// whose result size the request alone gives (put, delete) or a read needs no padding.
pub(crate) fn lock_pad(req: &Request) -> Option<usize> {
    let (Op::Update, Some(update)) = (req.op, &req.update) else {
        return Some(0);
    };
    if UpdateExpr::parse(update).map_or(true, |u| u.copies_attributes()) {
        return None;
    }
    // Without the item, every attribute the update names counts only its name: the values it
    // writes (and a number per operator) bound the growth, as nothing is copied.
    let value = |v: &str| {
        req.values
            .as_ref()
            .and_then(|m| m.get(v))
            .map_or(0, value_size)
    };
    Some(expr::growth_bound(update, req.names.as_ref(), value, |_| 0) + APPLIED_ROOM_BYTES)
}

/// Whether the before-image can travel in the item itself (`_TxG`) when `req` is applied: it is at
/// most 64 KB and the applied item, image and lock attributes included, surely fits in 400 KB.
/// Otherwise it goes to the images table. Deterministic, so that whoever finishes a transaction
/// knows whether an images-table image may have been saved for an item.
pub(crate) fn image_fits_in_item(before: &Item, req: &Request) -> bool {
    let image = item_size(before);
    let embedded = "_TxG".len() + value_size(&AttributeValue::M(before.clone()));
    image <= EMBED_IMAGE_MAX
        && result_size_bound(Some(before), req) + embedded + APPLIED_ROOM_BYTES <= MAX_ITEM_BYTES
}

/// Before-images larger than this go to the images table instead of into the item.
pub(crate) const EMBED_IMAGE_MAX: usize = 64 * 1024;

/// DynamoDB's size of an item, in bytes.
pub(crate) fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

/// DynamoDB's size of one value, in bytes (approximate for numbers, exact enough for limits).
pub(crate) fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => n.len().div_ceil(2) + 1,
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(ss) => ss.iter().map(|s| s.len()).sum(),
        AttributeValue::Ns(ns) => ns.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
        AttributeValue::Bs(bs) => bs.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| 1 + k.len() + value_size(v))
                .sum::<usize>()
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::ScalarAttributeType;

    fn schema() -> KeySchema {
        KeySchema {
            hash: ("Id".into(), ScalarAttributeType::S),
            range: None,
            streamed: false,
        }
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    fn update(expr: &str) -> Request {
        Request {
            op: Op::Update,
            table: "t".into(),
            key: HashMap::from([("Id".into(), s("a"))]),
            item: None,
            update: Some(expr.into()),
            condition: None,
            names: None,
            values: Some(HashMap::from([(":v".into(), s("x"))])),
        }
    }

    #[test]
    fn round_trips_through_the_record_encoding() {
        let mut r = update("SET #a = :v");
        r.names = Some(HashMap::from([("#a".into(), "attr".into())]));
        r.condition = Some("attribute_exists(#a)".into());
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        let p = Request {
            op: Op::Put,
            table: "t".into(),
            key: HashMap::new(),
            item: Some(HashMap::from([
                ("Id".into(), s("a")),
                ("b".into(), AttributeValue::Bs(vec![])),
            ])),
            update: None,
            condition: None,
            names: None,
            values: None,
        };
        assert_eq!(Request::decode(&p.encode()).unwrap(), p);
    }

    #[test]
    fn validation() {
        assert!(update("SET a = :v").validate(&schema()).is_ok());
        let e = update("SET Id = :v").validate(&schema()).unwrap_err();
        assert!(e.to_string().contains("key attribute Id"), "{e}");
        assert!(update("SET _TxA = :v").validate(&schema()).is_err());
        assert!(update("SET a = :w").validate(&schema()).is_err());
        let mut r = update("SET a = :v");
        r.key.insert("extra".into(), s("x"));
        assert!(r.validate(&schema()).is_err());
        let mut r = update("SET a = :v");
        r.key = HashMap::from([("Id".into(), AttributeValue::N("1".into()))]);
        assert!(r.validate(&schema()).is_err());
        let mut r = update("SET a = :v");
        r.key.clear();
        assert!(r.validate(&schema()).is_err());
        assert!(check_return_values(Op::Put, &ReturnValue::AllNew).is_err());
        assert!(check_return_values(Op::Update, &ReturnValue::UpdatedNew).is_ok());
    }

    #[test]
    fn sizes() {
        let item: Item = HashMap::from([
            ("ab".into(), s("xyz")),
            ("n".into(), AttributeValue::N("12345".into())),
        ]);
        assert_eq!(item_size(&item), 2 + 3 + 1 + 4);
    }
}
