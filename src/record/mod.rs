//! The TX record: the single source of truth of a transaction's state.
//!
//! Row 0 (`_TxN = 0`) of a transaction's partition in the transactions table is the header: state
//! (`_TxS`: `P` pending, `C` committed, `R` rolled back), version (`_TxV`, bumped by every append),
//! finalized flag (`_TxF`), timestamps, and the first requests (`_TxR`). Requests that do not fit in
//! the header go to chunk rows `_TxN = 1..=_TxC`, written in the same `TransactWriteItems` as the header
//! update that counts them, so a reader never sees a chunk the header does not own. Every transition is
//! conditional on the state and, where the request list matters, on the version.
//!
//! This module reads and parses the record; [`append`](mod@append) writes requests to it,
//! [`decide`](mod@decide) moves it between states, [`judged`] rolls back another transaction as
//! judged, [`ticket`] holds the contention tickets and [`delete`](mod@delete) removes a finalized
//! record.

mod append;
mod decide;
mod delete;
mod gate;
mod judged;
mod ticket;
mod tombstone;
pub(crate) mod unrecorded_tables;

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::error::{Error, Item, Result};
use crate::request::Request;
use crate::tables::{TX_ID, TX_ROW};

pub(crate) use append::{
    Appended, append, create, creation, creation_inline, fold_into_decision, folds_inline,
};
pub(crate) use decide::{
    Flipped, committed_record_write, create_finished, decide, decide_final_write, finalize,
    pending_check,
};
pub(crate) use delete::delete;
pub(crate) use gate::Gates;
pub(crate) use judged::{Judged, JudgedRollback, roll_back_judged};
pub(crate) use ticket::{
    clear_waiting, load_registrations, register_waiter, set_ticket, take_ticket, withdraw_waiter,
};
pub(crate) use tombstone::{KEEP, Tombstoned, delete_tombstone, put_tombstone};

pub(crate) const STATE: &str = "_TxS";
pub(crate) const VERSION: &str = "_TxV";
pub(crate) const REQUESTS: &str = "_TxR";
pub(crate) const CHUNKS: &str = "_TxC";
pub(crate) const UPDATED: &str = "_TxD";
pub(crate) const CREATED: &str = "_TxB";
pub(crate) const FINALIZED: &str = "_TxF";
pub(crate) const NONCE: &str = "_TxO";
pub(crate) const EXPIRES: &str = "_TxE";
pub(crate) const TICKET: &str = "_TxK";
/// On a record created with gate rows (see [`gate`](mod@gate)): how many. Every decision closes
/// them, and they are deleted with the record.
pub(crate) const GATED: &str = "_TxQ";
/// On a tombstone (see [`tombstone`](mod@tombstone)): until when it must be kept (epoch ms).
pub(crate) const TOMBSTONE: &str = "_TxX";
/// On a record the write-only fast path created with its writes marked (`Settings::fast_path_stamps`):
/// the items it wrote, as requests of their op, table and key only (no values). Only the change feed
/// reads it: the fast path locks nothing, so nothing else ever settles these items.
pub(crate) const WRITTEN: &str = "_TxL";
/// While the transaction waits, the ticket of the (older) transaction it waits for: others decide
/// from it whether they may wait for this one too (see `contention::resolve`).
pub(crate) const WAITING: &str = "_TxW";
/// How many waiters registered in the record (`Settings::wait_in_ticket_order`): every
/// registration adds 1, so that a one-request commit, which carries the registrations it knows
/// into the items' queues, lands only if no other registration arrived since it learned them.
pub(crate) const REGISTERED: &str = "_TxJN";
/// Id of the row (in the transactions table) holding the ticket counter. Not a transaction: ids
/// starting with `~` are never UUIDs.
pub(crate) const TICKET_COUNTER_ID: &str = "~ticket-counter";

/// True for rows of the transactions table that are library bookkeeping (ids starting with `~`,
/// such as the ticket counter), not transactions.
pub(crate) fn is_bookkeeping(row: &Item) -> bool {
    row.get(TX_ID)
        .and_then(|v| v.as_s().ok())
        .is_some_and(|id| id.starts_with('~'))
}

/// State of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TxState {
    /// Not decided yet.
    Pending,
    /// Committed: every write is in effect (items may still be unlocked in the background).
    Committed,
    /// Rolled back: no write is in effect.
    RolledBack,
}

impl TxState {
    pub(crate) fn code(self) -> &'static str {
        match self {
            TxState::Pending => "P",
            TxState::Committed => "C",
            TxState::RolledBack => "R",
        }
    }

    fn from_code(c: &str) -> Option<TxState> {
        match c {
            "P" => Some(TxState::Pending),
            "C" => Some(TxState::Committed),
            "R" => Some(TxState::RolledBack),
            _ => None,
        }
    }
}

impl fmt::Display for TxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TxState::Pending => "pending",
            TxState::Committed => "committed",
            TxState::RolledBack => "rolled-back",
        })
    }
}

/// The header row, as read.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub state: TxState,
    pub version: u64,
    pub finalized: bool,
    pub chunks: u32,
    pub inline_bytes: usize,
    pub updated_ms: u64,
    pub created_ms: u64,
    pub nonce: Option<String>,
    /// The transaction's contention ticket, once it has one.
    pub ticket: Option<u64>,
    /// The ticket of the older transaction this one last waited for.
    pub waiting_on: Option<u64>,
    pub inline: Vec<Request>,
    /// A tombstone: put by whoever released a lock of this id when it had no record; the
    /// transaction never had a record, or had one that was deleted once finalized. Only the
    /// transaction's own record creation reads it (as rolled back); everything else takes it for
    /// an absent record.
    pub tombstone: bool,
    /// The record has gate rows (see [`gate`](mod@gate)).
    pub gated: bool,
    /// The items the write-only fast path wrote (`_TxL`; key-only requests), when it marked them.
    /// The change feed and `describe_transaction` read them; nothing resumes them.
    pub written: Vec<Request>,
}

/// What a coordinator knows about the record it writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordMeta {
    pub version: u64,
    pub chunks: u32,
    pub inline_bytes: usize,
    /// The record has gate rows (see [`gate`](mod@gate)): every decision closes them.
    pub gated: bool,
}

impl Header {
    pub fn meta(&self) -> RecordMeta {
        RecordMeta {
            version: self.version,
            chunks: self.chunks,
            inline_bytes: self.inline_bytes,
            gated: self.gated,
        }
    }

    pub(crate) fn parse(item: &Item) -> Result<Header> {
        let bad = |what: &str| Error::invariant(format!("TX record header has no valid {what}"));
        let n = |k: &str| {
            item.get(k)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<u64>().ok())
        };
        let inline = match item.get(REQUESTS) {
            Some(AttributeValue::L(l)) => {
                l.iter().map(Request::decode).collect::<Result<Vec<_>>>()?
            }
            _ => Vec::new(),
        };
        Ok(Header {
            state: item
                .get(STATE)
                .and_then(|v| v.as_s().ok())
                .and_then(|s| TxState::from_code(s))
                .ok_or_else(|| bad(STATE))?,
            version: n(VERSION).ok_or_else(|| bad(VERSION))?,
            finalized: item.contains_key(FINALIZED),
            chunks: n(CHUNKS).unwrap_or(0) as u32,
            inline_bytes: inline.iter().map(Request::encoded_size).sum(),
            updated_ms: n(UPDATED).unwrap_or(0),
            created_ms: n(CREATED).unwrap_or(0),
            nonce: item.get(NONCE).and_then(|v| v.as_s().ok()).cloned(),
            ticket: n(TICKET),
            waiting_on: n(WAITING),
            inline,
            tombstone: item.contains_key(TOMBSTONE),
            gated: item.contains_key(GATED),
            written: match item.get(WRITTEN) {
                Some(AttributeValue::L(l)) => {
                    l.iter().map(Request::decode).collect::<Result<Vec<_>>>()?
                }
                _ => Vec::new(),
            },
        })
    }

    /// The header of a record that exists: `None` for a tombstone, which stands for an absent
    /// record everywhere but in the record's creation.
    pub(crate) fn parse_live(item: &Item) -> Result<Option<Header>> {
        let h = Header::parse(item)?;
        Ok((!h.tombstone).then_some(h))
    }
}

/// A whole record: header and every request in order.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub header: Header,
    pub requests: Vec<Request>,
}

fn row_key(id: &TxId, row: u32) -> Item {
    HashMap::from([
        (TX_ID.to_string(), AttributeValue::S(id.0.clone())),
        (TX_ROW.to_string(), AttributeValue::N(row.to_string())),
    ])
}

/// Key of the header row.
pub(crate) fn header_key(id: &TxId) -> Item {
    row_key(id, 0)
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// The header row as stored, read consistently (`None`: no such row).
pub(crate) async fn load_header_row(
    client: &Client,
    table: &str,
    id: &TxId,
) -> Result<Option<Item>> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(header_key(id)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e).on_item(table, &header_key(id)))?;
    Ok(out.item)
}

/// Reads the header (consistently). `None` if the record does not exist (or is a tombstone).
pub(crate) async fn load_header(client: &Client, table: &str, id: &TxId) -> Result<Option<Header>> {
    Ok(load_header_row(client, table, id)
        .await?
        .as_ref()
        .map(Header::parse_live)
        .transpose()?
        .flatten())
}

/// The row number of a row of a record's partition (0 for the header, 1.. for chunk rows).
fn row_number(row: &Item) -> Option<u32> {
    row.get(TX_ROW)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<u32>().ok())
}

/// Reads two headers (consistently) in one `BatchGetItem`: one round trip where two `GetItem`s
/// would take two. `None` for a record that does not exist (or is a tombstone).
pub(crate) async fn load_two_headers(
    client: &Client,
    table: &str,
    ids: [&TxId; 2],
) -> Result<[Option<Header>; 2]> {
    let keys = ids.map(|id| (table.to_string(), header_key(id)));
    let rows = crate::ddb::batch_get(client, &keys).await?;
    let mut out = [None, None];
    for (_, row) in &rows {
        let id = row.get(TX_ID).and_then(|v| v.as_s().ok());
        for (i, t) in ids.iter().enumerate() {
            if Some(&t.0) == id {
                out[i] = Header::parse_live(row)?;
            }
        }
    }
    Ok(out)
}

/// Every row of the record's partition (header and chunk rows), with a consistent, paginated
/// Query; only their keys when `keys_only`.
async fn partition_rows(
    client: &Client,
    table: &str,
    id: &TxId,
    keys_only: bool,
) -> Result<Vec<Item>> {
    let mut rows: Vec<Item> = Vec::new();
    let mut start = None;
    loop {
        let mut query = client
            .query()
            .table_name(table)
            .key_condition_expression("#id = :id")
            .expression_attribute_names("#id", TX_ID)
            .expression_attribute_values(":id", s(id.0.clone()))
            .consistent_read(true)
            .set_exclusive_start_key(start);
        if keys_only {
            query = query
                .projection_expression("#id, #n")
                .expression_attribute_names("#n", TX_ROW);
        }
        let page = query
            .send()
            .await
            .map_err(|e| Error::sdk("Query", e).on_table(table))?;
        rows.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    Ok(rows)
}

/// Reads the whole record (consistent, paginated Query). `None` if it does not exist (or is a
/// tombstone).
pub(crate) async fn load(client: &Client, table: &str, id: &TxId) -> Result<Option<Record>> {
    let rows = partition_rows(client, table, id, false).await?;
    let Some(head) = rows.iter().find(|r| row_number(r) == Some(0)) else {
        return Ok(None);
    };
    let Some(header) = Header::parse_live(head)? else {
        return Ok(None);
    };
    let mut requests = header.inline.clone();
    let mut chunks: Vec<(u32, &Item)> = rows
        .iter()
        .filter_map(|r| row_number(r).map(|n| (n, r)))
        .filter(|(n, _)| *n >= 1 && *n <= header.chunks)
        .collect();
    chunks.sort_by_key(|(n, _)| *n);
    // A finalized record whose chunk rows are (partly) gone is being deleted, or its delete was
    // interrupted (older versions deleted chunks before the header): a finalized transaction
    // settles nothing, so the requests left are enough.
    if chunks.len() != header.chunks as usize && !header.finalized {
        return Err(Error::invariant(format!(
            "TX record {id} counts {} chunk rows but has {}",
            header.chunks,
            chunks.len()
        )));
    }
    for (_, row) in chunks {
        if let Some(AttributeValue::L(l)) = row.get(REQUESTS) {
            for r in l {
                requests.push(Request::decode(r)?);
            }
        }
    }
    Ok(Some(Record { header, requests }))
}
