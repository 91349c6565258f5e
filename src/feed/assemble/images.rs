//! What a stream record's images say: the transaction that locks the item (`_TxId`), the
//! fast-path transaction that marked it (`_TxM`), its user attributes, and the item before a
//! transaction whose lock was not seen.

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::Item;
use crate::expr::value_eq;
use crate::item_lock::{APPLIED, IMAGE, MADE, OWNER, TRANSIENT};

/// The protocol owner of an image (`_TxId`), if any.
pub(super) fn owner(image: Option<&Item>) -> Option<&str> {
    image
        .and_then(|i| i.get(OWNER))
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// The fast-path transaction that marked an image (`_TxM`), if any.
pub(super) fn made_by(image: Option<&Item>) -> Option<&str> {
    image
        .and_then(|i| i.get(MADE))
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// The user attributes of an item: every `_Tx` attribute removed.
pub(crate) fn strip(mut item: Item) -> Item {
    item.retain(|k, _| !k.starts_with("_Tx"));
    item
}

pub(super) fn same(a: &Option<Item>, b: &Option<Item>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| value_eq(v, w)))
        }
        _ => false,
    }
}

/// The item before the transaction, from the record that settles it, when its lock was not
/// seen: an unapplied lock left the user attributes as they were; an applied one carries the
/// before-image (`_TxG`) unless it was kept in the images table (then unknown: `None`).
pub(super) fn before_from_settled(old: &Item) -> Option<Item> {
    let applied = old
        .get(APPLIED)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        == Some("1");
    let transient = old.contains_key(TRANSIENT);
    if applied {
        match old.get(IMAGE) {
            Some(AttributeValue::M(m)) => Some(strip(m.clone())),
            _ => None,
        }
    } else if transient {
        None
    } else {
        Some(strip(old.clone()))
    }
}
