//! Reads outside transactions at a chosen isolation level: GetItem, BatchGetItem, Query and Scan.
//!
//! Every read fetches the stored items (with the lock attributes it needs to decide, whatever the
//! caller's projection), decides what a reader at the level may see of each (`resolve`), and returns
//! the result without any `_Tx*` attribute. See `docs/ISOLATION.md`.
//!
//! - `resolve`: what a reader at a level may see of one stored item, and settling the items a read
//!   returned into what the reader sees (TX-record lookups, before-images, re-reads).
//! - `context`: the context of one read: the caller's expressions validated, what is sent to
//!   DynamoDB, and the final shape of each version (filter, key condition, projection).
//! - `index`: what a secondary index holds.
//! - one file per read kind: `get` (GetItem), `batch_get` (BatchGetItem), `pages` (Query and Scan,
//!   page by page).

mod batch_get;
mod context;
mod get;
mod index;
mod pages;
mod resolve;

pub use batch_get::{BatchGetOutput, IsolatedBatchGetItemBuilder};
pub use get::IsolatedGetItemBuilder;
pub use pages::{IsolatedQueryBuilder, IsolatedScanBuilder, Page};

use crate::error::Error;

/// What a read may see of transactions in flight.
///
/// See `docs/ISOLATION.md` for what each level guarantees and costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// The item as stored, including writes of transactions that are not committed (and may never
    /// be). An item inserted only to hold a lock does not exist. No extra request.
    Uncommitted,
    /// Only committed state: an item changed by a transaction that has not committed is served from
    /// its before-image; an item a pending transaction inserted does not exist; a pending delete still
    /// shows the item. No consistent cut across items. One extra read of the owner's TX record per
    /// item (per transaction and page for queries) changed by a transaction in flight.
    #[default]
    Committed,
    /// A locked read; only inside a transaction ([`Transaction::get_item`](crate::Transaction::get_item)).
    /// Outside one, reads at this level fail with [`Error::InvalidRequest`].
    ReadLock,
}

fn read_lock_error() -> Error {
    Error::invalid(
        "ReadLock isolation needs a transaction: use Transaction::get_item, outside of which no lock can be held",
    )
}
