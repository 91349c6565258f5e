//! Read-only inspection of TX records for operators: [`TransactionManager::list_transactions`]
//! and [`TransactionManager::describe_transaction`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use aws_sdk_dynamodb::Client;

use super::options::ListOptions;
use super::scan::{header_scan, parallel_scan};
use super::{age_ms, millis};
use crate::TxId;
use crate::ddb;
use crate::error::{Error, Item, Result};
use crate::item_lock::{self, Observed};
use crate::keys::ItemRef;
use crate::manager::TransactionManager;
use crate::record::{self, Header, TxState};
use crate::request::Op;
use crate::tables::TX_ID;

/// A TX record's header, as listed by [`TransactionManager::list_transactions`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxSummary {
    /// The transaction.
    pub id: TxId,
    /// Its state.
    pub state: TxState,
    /// Every item settled (locks released, images deleted).
    pub finalized: bool,
    /// Record version (1 at creation, +1 per append of requests).
    pub version: u64,
    /// Chunk rows holding requests beyond the header.
    pub chunks: u32,
    /// Creation time, epoch milliseconds (the coordinator's clock).
    pub created_ms: u64,
    /// Last update, epoch milliseconds (the coordinator's clock).
    pub updated_ms: u64,
    /// DynamoDB TTL of a finalized record, epoch seconds.
    pub expires_at_s: Option<u64>,
    /// A tombstone: no transaction ever wrote this record. It was put, rolled back, by whoever
    /// released a lock of this id while the id had no record, so that the transaction (whose
    /// record may have been on its way) can never create it later (docs/PROTOCOL.md
    /// "Tombstones").
    pub tombstone: bool,
}

/// What a recorded request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestKind {
    /// `PutItem`.
    Put,
    /// `UpdateItem`.
    Update,
    /// `DeleteItem`.
    Delete,
    /// A read lock (`GetItem`).
    Read,
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestKind::Put => "put",
            RequestKind::Update => "update",
            RequestKind::Delete => "delete",
            RequestKind::Read => "read",
        })
    }
}

/// One request of a transaction, without its attribute values.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RequestInfo {
    /// What it does.
    pub kind: RequestKind,
    /// The table.
    pub table: String,
    /// The item's key.
    pub key: Item,
    /// The update expression, if any.
    pub update_expression: Option<String>,
    /// The condition expression, if any.
    pub condition_expression: Option<String>,
}

/// The state of one item a transaction touches, as read now.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ItemStatus {
    /// The table.
    pub table: String,
    /// The item's key.
    pub key: Item,
    /// The item exists (a transient placeholder counts).
    pub exists: bool,
    /// The transaction holding a lock on it, if any (not necessarily the one inspected).
    pub locked_by: Option<TxId>,
    /// The lock holder's write is applied.
    pub applied: bool,
    /// The item is a placeholder inserted to lock an absent item.
    pub transient: bool,
    /// The before-image is in the images table.
    pub image_in_table: bool,
    /// The lock holder's write is rolled forward: applied after the commit, by the write that
    /// unlocks (docs/PROTOCOL.md "Roll-forward"); while the lock stands and it is not applied,
    /// the item still holds what it held before the transaction.
    pub rolls_forward: bool,
}

impl ItemStatus {
    /// True when `id` holds a lock on the item.
    pub fn locked_by_tx(&self, id: &TxId) -> bool {
        self.locked_by.as_ref() == Some(id)
    }
}

/// A transaction in detail: [`TransactionManager::describe_transaction`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TxDetails {
    /// The header.
    pub summary: TxSummary,
    /// Every recorded request, in order.
    pub requests: Vec<RequestInfo>,
    /// Every item the requests name, in order of first mention, as it is now.
    pub items: Vec<ItemStatus>,
}

impl TxDetails {
    /// Items still locked by this transaction.
    pub fn locked_items(&self) -> impl Iterator<Item = &ItemStatus> {
        self.items
            .iter()
            .filter(|i| i.locked_by_tx(&self.summary.id))
    }
}

impl TransactionManager {
    /// Lists TX records (header rows only, by a parallel scan), most recently updated first.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn list_transactions(&self, options: &ListOptions) -> Result<Vec<TxSummary>> {
        let now = crate::ddb::now_millis();
        let out: Mutex<Vec<TxSummary>> = Mutex::new(Vec::new());
        let bad: Mutex<Option<Error>> = Mutex::new(None);
        let spec = header_scan(
            &self.inner.tx_table,
            true,
            options.segments.unwrap_or(4),
            1,
            options.progress.as_ref(),
        );
        let (out_ref, bad_ref) = (&out, &bad);
        parallel_scan(&self.inner.client, &spec, |item| async move {
            if record::is_bookkeeping(&item) {
                return;
            }
            match summary_of(&item) {
                Ok(s) => {
                    let keep = options.state.is_none_or(|st| st == s.state)
                        && (!options.unfinalized || !s.finalized)
                        && options
                            .older_than
                            .is_none_or(|d| age_ms(now, s.updated_ms) >= millis(d));
                    if keep {
                        out_ref.lock().expect("poisoned").push(s);
                    }
                }
                Err(e) => {
                    bad_ref.lock().expect("poisoned").get_or_insert(e);
                }
            }
        })
        .await?;
        if let Some(e) = bad.into_inner().expect("poisoned") {
            return Err(e);
        }
        let mut v = out.into_inner().expect("poisoned");
        v.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then(a.id.cmp(&b.id)));
        Ok(v)
    }

    /// Reads a transaction's record and the current state of every item it names (consistent
    /// reads). `None` if the record does not exist.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn describe_transaction(&self, id: &TxId) -> Result<Option<TxDetails>> {
        let c = &self.inner.client;
        let Some(rec) = record::load(c, &self.inner.tx_table, id).await? else {
            return Ok(None);
        };
        let h = &rec.header;
        let expires_at_s = client_expiry(c, &self.inner.tx_table, id).await?;
        let summary = TxSummary {
            id: id.clone(),
            state: h.state,
            finalized: h.finalized,
            version: h.version,
            chunks: h.chunks,
            created_ms: h.created_ms,
            updated_ms: h.updated_ms,
            expires_at_s,
            tombstone: false,
        };
        // A marked fast-path record holds its writes (key-only) in `_TxL` instead of requests.
        let recorded = || rec.requests.iter().chain(&h.written);
        let requests: Vec<RequestInfo> = recorded()
            .map(|r| RequestInfo {
                kind: match r.op {
                    Op::Put => RequestKind::Put,
                    Op::Update => RequestKind::Update,
                    Op::Delete => RequestKind::Delete,
                    Op::Get => RequestKind::Read,
                },
                table: r.table.clone(),
                key: r.key.clone(),
                update_expression: r.update.clone(),
                condition_expression: r.condition.clone(),
            })
            .collect();
        // Distinct items in order of first mention.
        let mut order: Vec<(ItemRef, String, Item)> = Vec::new();
        for r in recorded() {
            let k = r.item_ref();
            if !order.iter().any(|(o, _, _)| *o == k) {
                order.push((k, r.table.clone(), r.key.clone()));
            }
        }
        let keys: Vec<(String, Item)> = order
            .iter()
            .map(|(_, t, k)| (t.clone(), k.clone()))
            .collect();
        let mut found: BTreeMap<ItemRef, Item> = BTreeMap::new();
        for (table, item) in ddb::batch_get(c, &keys).await? {
            let schema = self.inner.schemas.get(c, &table).await?;
            let key = item_lock::key_of(&schema, &item);
            found.insert(ItemRef::new(&table, &key), item);
        }
        let items = order
            .into_iter()
            .map(|(r, table, key)| {
                let obs = Observed::of(found.get(&r));
                ItemStatus {
                    table,
                    key,
                    exists: obs.exists,
                    locked_by: obs.owner.clone().map(TxId),
                    applied: obs.applied,
                    transient: obs.transient,
                    image_in_table: obs.image_ref.is_some(),
                    rolls_forward: obs.roll.is_some() && !obs.applied,
                }
            })
            .collect();
        Ok(Some(TxDetails {
            summary,
            requests,
            items,
        }))
    }
}

/// The TTL attribute of a record's header (not part of the parsed header).
async fn client_expiry(client: &Client, table: &str, id: &TxId) -> Result<Option<u64>> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(record::header_key(id)))
        .projection_expression("#e")
        .expression_attribute_names("#e", record::EXPIRES)
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e).on_item(table, &record::header_key(id)))?;
    Ok(out
        .item
        .and_then(|i| i.get(record::EXPIRES).and_then(|v| v.as_n().ok()).cloned())
        .and_then(|n| n.parse().ok()))
}

pub(super) fn summary_of(item: &Item) -> Result<TxSummary> {
    let id = item
        .get(TX_ID)
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| Error::invariant("a TX record row has no _TxId"))?;
    let h = Header::parse(item)?;
    Ok(TxSummary {
        id: TxId(id.clone()),
        state: h.state,
        finalized: h.finalized,
        version: h.version,
        chunks: h.chunks,
        created_ms: h.created_ms,
        updated_ms: h.updated_ms,
        expires_at_s: item
            .get(record::EXPIRES)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok()),
        tombstone: h.tombstone,
    })
}
