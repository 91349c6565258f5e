//! The row of the transactions table that lists the user tables where locks were taken without a
//! record (`Settings::record_on_demand`). Such a lock is in no record, so this row is what leads
//! the sweeper to it: a coordinator adds a table here before the first lock it takes there
//! without a record, and a sweep scans every table listed for such locks
//! (`SweepOptions::scan_unrecorded_tables`).

use std::collections::HashSet;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::error::{Error, Result};

use super::header_key;

/// Id of the row. Not a transaction: ids starting with `~` are never UUIDs.
pub(crate) const UNRECORDED_TABLES_ID: &str = "~unrecorded-tables";

/// On that row: the tables (SS).
const TABLES: &str = "_TxB";

/// On that row: how many sweep passes have taken a slice of the listed tables (N).
const SLICES_TAKEN: &str = "_TxC";

/// Adds `table` to the row (one `ADD` to a set: idempotent, so a lost answer is resent as is).
pub(crate) async fn register(client: &Client, tx_table: &str, table: &str) -> Result<()> {
    let key = header_key(&TxId(UNRECORDED_TABLES_ID.to_string()));
    client
        .update_item()
        .table_name(tx_table)
        .set_key(Some(key.clone()))
        .update_expression("ADD #t :t")
        .expression_attribute_names("#t", TABLES)
        .expression_attribute_values(":t", AttributeValue::Ss(vec![table.to_string()]))
        .send()
        .await
        .map_err(|e| Error::sdk("UpdateItem", e).on_item(tx_table, &key))?;
    Ok(())
}

/// The tables the row lists (a strongly consistent read: a table added just before is there).
pub(crate) async fn listed(client: &Client, tx_table: &str) -> Result<Vec<String>> {
    let key = header_key(&TxId(UNRECORDED_TABLES_ID.to_string()));
    let out = client
        .get_item()
        .table_name(tx_table)
        .set_key(Some(key.clone()))
        .consistent_read(true)
        .projection_expression("#t")
        .expression_attribute_names("#t", TABLES)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e).on_item(tx_table, &key))?;
    let mut tables: Vec<String> = out
        .item
        .as_ref()
        .and_then(|i| i.get(TABLES))
        .and_then(|v| v.as_ss().ok())
        .cloned()
        .unwrap_or_default();
    tables.sort();
    Ok(tables)
}

/// The slice of `count` a sweep pass scans: one `ADD` to the row's counter of passes, so that
/// passes of every sweeper take the slices in turn. A lost answer is not resent (the slice it
/// took is skipped this turn, and comes round `count` passes later).
pub(crate) async fn next_slice(client: &Client, tx_table: &str, count: u32) -> Result<u32> {
    let taken =
        super::ticket::count_one(client, tx_table, UNRECORDED_TABLES_ID, SLICES_TAKEN).await?;
    // The first pass takes slice 0.
    Ok((taken.saturating_sub(1) % u64::from(count.max(1))) as u32)
}

/// The tables one manager has added to the row already (it adds each once).
#[derive(Debug, Default)]
pub(crate) struct Registered(std::sync::Mutex<HashSet<String>>);

impl Registered {
    /// Adds `table` to the row unless this manager did already. On an error the table is not
    /// taken as added, and the caller sends no lock.
    pub(crate) async fn ensure(&self, client: &Client, tx_table: &str, table: &str) -> Result<()> {
        if self.0.lock().expect("poisoned").contains(table) {
            return Ok(());
        }
        register(client, tx_table, table).await?;
        self.0.lock().expect("poisoned").insert(table.to_string());
        Ok(())
    }
}
