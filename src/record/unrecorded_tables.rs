//! The row of the transactions table that lists the user tables where locks were taken without a
//! record (`Settings::record_on_demand`). Such a lock is in no record, so this row is what leads
//! the sweeper to it: a coordinator adds a table here before the first lock it takes there
//! without a record, and a sweep scans every table listed for such locks
//! (`SweepOptions::scan_unrecorded_tables`).

use std::collections::HashSet;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::{Placeholders, Write, Written};
use crate::error::{Error, Result};
use crate::sweeper::SlicesRead;

use super::header_key;

/// Id of the row. Not a transaction: ids starting with `~` are never UUIDs.
pub(crate) const UNRECORDED_TABLES_ID: &str = "~unrecorded-tables";

/// On that row: the tables (SS).
const TABLES: &str = "_TxB";

/// On that row: the time (epoch ms, a sweeper's clock) up to which the slices of the listed
/// tables that came due were read (N).
const READ_UP_TO: &str = "_TxRU";

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

/// What the row says: the tables it lists, and the time up to which their due slices were read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listed {
    /// The tables, sorted.
    pub tables: Vec<String>,
    /// [`READ_UP_TO`], if a paced pass ever claimed slices.
    pub read_up_to: Option<u64>,
}

/// The row as it is (a strongly consistent read: a table added just before is there).
pub(crate) async fn listed(client: &Client, tx_table: &str) -> Result<Listed> {
    let key = header_key(&TxId(UNRECORDED_TABLES_ID.to_string()));
    let out = client
        .get_item()
        .table_name(tx_table)
        .set_key(Some(key.clone()))
        .consistent_read(true)
        .projection_expression("#t, #e")
        .expression_attribute_names("#t", TABLES)
        .expression_attribute_names("#e", READ_UP_TO)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e).on_item(tx_table, &key))?;
    let row = out.item.unwrap_or_default();
    let mut tables: Vec<String> = row
        .get(TABLES)
        .and_then(|v| v.as_ss().ok())
        .cloned()
        .unwrap_or_default();
    tables.sort();
    let read_up_to = row
        .get(READ_UP_TO)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok());
    Ok(Listed { tables, read_up_to })
}

/// The slices of `of` that came due by `now` since `read_up_to`, one every `period / of`: the
/// slice of a window of that width is the window's number modulo `of`, so that every slice comes
/// due once a period. At most `of` (the tables whole, however long no pass came); one, the
/// window's own, when no pass ever claimed any; none while the window is the one last read.
pub(crate) fn due(read_up_to: Option<u64>, now: u64, period_ms: u64, of: u32) -> SlicesRead {
    let of = of.max(1);
    let width = (period_ms / u64::from(of)).max(1);
    let window = now / width;
    let count = match read_up_to {
        None => 1,
        Some(t) => window.saturating_sub(t / width).min(u64::from(of)),
    };
    SlicesRead {
        first: ((window + 1 - count) % u64::from(of)) as u32,
        count: count as u32,
        of,
    }
}

/// Claims the slices due at `now` for this pass: moves [`READ_UP_TO`] from `read_up_to` (as the
/// pass read it) to `now` with one conditional `UpdateItem`. False when another sweeper moved it
/// first (its pass reads them). A lost answer counts as false: the slices it may have claimed are
/// skipped until they come due again, a period later.
pub(crate) async fn claim(
    client: &Client,
    tx_table: &str,
    read_up_to: Option<u64>,
    now: u64,
) -> Result<bool> {
    let key = header_key(&TxId(UNRECORDED_TABLES_ID.to_string()));
    let mut ph = Placeholders::default();
    let e = ph.name(READ_UP_TO);
    let update = format!(
        "SET {e} = {}",
        ph.value("Now", AttributeValue::N(now.to_string()))
    );
    let condition = match read_up_to {
        None => format!("attribute_not_exists({e})"),
        Some(t) => format!(
            "{e} = {}",
            ph.value("Was", AttributeValue::N(t.to_string()))
        ),
    };
    match Write::update(tx_table, key, update, condition, ph)
        .send(client, None)
        .await
    {
        Ok(Written::Ok(_)) => Ok(true),
        Ok(Written::ConditionFailed(_)) => Ok(false),
        Err(e) if e.may_have_landed() => Ok(false),
        Err(e) => Err(e),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000;
    const WIDTH: u64 = DAY / 96;

    #[test]
    fn a_first_pass_reads_the_slice_of_its_window() {
        let now = 1000 * WIDTH + 5;
        assert_eq!(
            due(None, now, DAY, 96),
            SlicesRead {
                first: (1000 % 96) as u32,
                count: 1,
                of: 96
            }
        );
    }

    #[test]
    fn within_the_window_last_read_nothing_is_due() {
        let t = 1000 * WIDTH + 5;
        assert_eq!(due(Some(t), t + WIDTH - 6, DAY, 96).count, 0);
        // A sweeper whose clock is behind the one that read last.
        assert_eq!(due(Some(t), t - 3 * WIDTH, DAY, 96).count, 0);
    }

    #[test]
    fn the_windows_passed_since_are_due_in_order() {
        let t = 95 * WIDTH + 1;
        let d = due(Some(t), t + 3 * WIDTH, DAY, 96);
        // Windows 96, 97, 98: slices 0, 1, 2.
        assert_eq!(
            d,
            SlicesRead {
                first: 0,
                count: 3,
                of: 96
            }
        );
        // Windows 94..=96 after a pass in window 93: slices 94, 95, then 0 (wrapping round).
        let d = due(Some(93 * WIDTH), 96 * WIDTH, DAY, 96);
        assert_eq!((d.first, d.count), (94, 3));
    }

    #[test]
    fn after_a_period_or_more_everything_is_due_once() {
        let t = 7 * WIDTH;
        for later in [DAY, 3 * DAY + 17] {
            let d = due(Some(t), t + later, DAY, 96);
            assert_eq!(d.count, 96, "{later}");
        }
    }

    #[test]
    fn every_slice_comes_due_once_a_period_whatever_the_passes() {
        // Passes at irregular times over about two periods: every window read once, none twice.
        let mut read = vec![0u32; 96];
        let (mut at, mut up_to) = (DAY * 10 + 123, None);
        let start_window = at / WIDTH;
        while at < DAY * 12 + 123 {
            let d = due(up_to, at, DAY, 96);
            for i in d.indexes() {
                read[i as usize] += 1;
            }
            up_to = Some(at);
            at += [WIDTH / 3, WIDTH, 5 * WIDTH / 2, 7][(at % 4) as usize];
        }
        let end_window = up_to.unwrap() / WIDTH;
        assert_eq!(
            read.iter().map(|&r| u64::from(r)).sum::<u64>(),
            end_window - start_window + 1
        );
        // Each window from the first pass's to the last's read once: its slice as often.
        let mut expected = vec![0u32; 96];
        for w in start_window..=end_window {
            expected[(w % 96) as usize] += 1;
        }
        assert_eq!(read, expected);
        assert!(read.iter().all(|&r| r >= 1), "{read:?}");
    }

    #[test]
    fn one_slice_is_the_tables_whole() {
        let d = due(Some(5), DAY * 2, DAY, 1);
        assert_eq!(
            d,
            SlicesRead {
                first: 0,
                count: 1,
                of: 1
            }
        );
    }
}
