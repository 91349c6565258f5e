//! Deleting a finalized record (the header first, then its chunk and gate rows, or any rows left
//! in its partition).

use aws_sdk_dynamodb::Client;

use crate::TxId;
use crate::ddb::{self, Placeholders, Write, WriteKind, Written};
use crate::error::{Item, Result};

use super::{FINALIZED, header_key, load_header, partition_rows, row_key, row_number};

/// Deletes a finalized record: the header first (conditional on being finalized), then its chunk
/// rows. Returns false if the record is not finalized.
///
/// Header first, so that an interrupted delete never leaves a header without its chunks (which
/// nobody could load): it leaves chunk rows without a header, which nothing reads, and which a
/// repeated delete or the sweeper removes. When the header is already gone, any rows left in the
/// record's partition are deleted.
pub(crate) async fn delete(client: &Client, table: &str, id: &TxId) -> Result<bool> {
    let Some(h) = load_header(client, table, id).await? else {
        delete_leftover_rows(client, table, id).await?;
        return Ok(true);
    };
    if !h.finalized {
        return Ok(false);
    }
    let mut ph = Placeholders::default();
    let cond = format!("attribute_exists({})", ph.name(FINALIZED));
    let w = Write {
        table: table.into(),
        kind: WriteKind::Delete {
            key: header_key(id),
        },
        condition: Some(cond),
        ph,
    };
    match w.send(client, None).await? {
        Written::Ok(_) | Written::ConditionFailed(None) => {}
        Written::ConditionFailed(Some(_)) => return Ok(false),
    }
    let mut rows: Vec<Item> = (1..=h.chunks).map(|c| row_key(id, c)).collect();
    if h.gated {
        rows.extend(super::gate::gate_keys(id));
    }
    ddb::batch_delete(client, table, rows).await?;
    Ok(true)
}

/// Deletes the rows left in the partition of a record whose header is gone (chunk rows of an
/// interrupted delete, or of a header deleted by TTL).
async fn delete_leftover_rows(client: &Client, table: &str, id: &TxId) -> Result<()> {
    let mut keys = partition_rows(client, table, id, true).await?;
    // Never a header: one written meanwhile would be a new record (ids are never reused). Gate
    // rows (negative numbers) go too.
    keys.retain(|k| row_number(k) != Some(0));
    ddb::batch_delete(client, table, keys).await
}
