//! Before-images kept in the images table for items too large to carry their own: their ids,
//! saving and loading them, and deleting them once the item is settled.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::{Placeholders, Write, WriteKind, Written};
use crate::error::{Error, Item, Result};
use crate::request::{Op, Request};

/// The images-table id of the before-image of the item `table`/`key` under the lock `stamp` of
/// transaction `me`: `<tx id>#<32 hex digits>`, the same for every coordinator and every attempt,
/// so that a repeated save (after a lost answer, or by a resumed coordinator) writes the same row
/// rather than a second one, and whoever finishes the transaction can name the row to delete it
/// even when no item points to it. One lock has one before-image, so the row's content is fixed.
pub(crate) fn image_id(me: &TxId, table: &str, key: &Item, stamp: &str) -> String {
    let item = crate::keys::ItemRef::new(table, key);
    let stamp = crate::keys::normalize_number(stamp).unwrap_or_else(|| stamp.to_string());
    // FNV-1a, 128 bits: stable across processes and versions (std's hasher is not).
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for part in [me.as_str(), &item.table, &item.key, &stamp] {
        for b in part.bytes().chain([0xff]) {
            h ^= u128::from(b);
            h = h.wrapping_mul(0x0000000001000000000000000000013b);
        }
    }
    format!("{}#{h:032x}", me.as_str())
}

/// The images-table id a coordinator may have saved the before-image under for a lock of `me` that
/// is not applied yet (it saves the image just before applying): `None` when that write keeps its
/// image in the item, or needs none.
pub(crate) fn unapplied_image_id(
    me: &TxId,
    req: &Request,
    transient: bool,
    before: Option<&Item>,
    stamp: Option<&str>,
) -> Option<String> {
    if transient || !matches!(req.op, Op::Put | Op::Update) {
        return None;
    }
    let before = before?;
    if crate::request::image_fits_in_item(before, req) {
        return None;
    }
    Some(image_id(me, &req.table, &req.key, stamp?))
}

/// Deletes an images-table row (inside the `TransactWriteItems` that settles its item, so that no
/// crash can separate the two).
pub(crate) fn image_delete_write(image_table: &str, id: &str) -> Write {
    Write {
        table: image_table.into(),
        kind: WriteKind::Delete {
            key: HashMap::from([(
                crate::tables::IMAGE_ID.to_string(),
                AttributeValue::S(id.to_string()),
            )]),
        },
        condition: None,
        ph: Placeholders::default(),
    }
}

/// Saves a before-image in the images table (never overwriting one).
pub(crate) async fn save_table_image(
    client: &Client,
    image_table: &str,
    id: &str,
    before: &Item,
) -> Result<()> {
    let mut item = before.clone();
    item.insert(
        crate::tables::IMAGE_ID.into(),
        AttributeValue::S(id.to_string()),
    );
    let mut ph = Placeholders::default();
    let cond = format!("attribute_not_exists({})", ph.name(crate::tables::IMAGE_ID));
    let w = Write {
        table: image_table.into(),
        kind: WriteKind::Put { item },
        condition: Some(cond),
        ph,
    };
    match w.send(client, None).await? {
        Written::Ok(_) | Written::ConditionFailed(_) => Ok(()),
    }
}

/// Loads a before-image from the images table.
pub(crate) async fn load_table_image(
    client: &Client,
    image_table: &str,
    id: &str,
) -> Result<Option<Item>> {
    let out = client
        .get_item()
        .table_name(image_table)
        .key(crate::tables::IMAGE_ID, AttributeValue::S(id.to_string()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e).on_table(image_table))?;
    Ok(out.item.map(|mut i| {
        i.remove(crate::tables::IMAGE_ID);
        i
    }))
}
