//! The TX record: the single source of truth of a transaction's state.
//!
//! Row 0 (`_TxN = 0`) of a transaction's partition in the transactions table is the header: state
//! (`_TxS`: `P` pending, `C` committed, `R` rolled back), version (`_TxV`, bumped by every append),
//! finalized flag (`_TxF`), timestamps, and the first requests (`_TxR`). Requests that do not fit in
//! the header go to chunk rows `_TxN = 1..=_TxC`, written in the same `TransactWriteItems` as the header
//! update that counts them, so a reader never sees a chunk the header does not own. Every transition is
//! conditional on the state and, where the request list matters, on the version.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::{self, Placeholders, Transacted, Write, WriteKind, Written};
use crate::error::{Error, Item, Result};
use crate::request::Request;
use crate::tables::{TX_ID, TX_ROW};

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
/// While the transaction waits, the ticket of the (older) transaction it waits for: others decide
/// from it whether they may wait for this one too (see `contention::resolve`).
pub(crate) const WAITING: &str = "_TxW";
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

/// Most request bytes kept in the header row.
const INLINE_LIMIT: usize = 300_000;
/// Most request bytes per chunk row.
const CHUNK_LIMIT: usize = 300_000;
/// Most chunk rows written by one append (keeps a `TransactWriteItems` under its 4 MB limit).
const CHUNKS_PER_APPEND: usize = 10;

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
}

/// What a coordinator knows about the record it writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordMeta {
    pub version: u64,
    pub chunks: u32,
    pub inline_bytes: usize,
}

impl Header {
    pub fn meta(&self) -> RecordMeta {
        RecordMeta {
            version: self.version,
            chunks: self.chunks,
            inline_bytes: self.inline_bytes,
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
        })
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

/// Reads the header (consistently). `None` if the record does not exist.
pub(crate) async fn load_header(client: &Client, table: &str, id: &TxId) -> Result<Option<Header>> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(header_key(id)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e))?;
    out.item.as_ref().map(Header::parse).transpose()
}

/// The row number of a row of a record's partition (0 for the header, 1.. for chunk rows).
fn row_number(row: &Item) -> Option<u32> {
    row.get(TX_ROW)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<u32>().ok())
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
        let page = query.send().await.map_err(|e| Error::sdk("Query", e))?;
        rows.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    Ok(rows)
}

/// Reads the whole record (consistent, paginated Query). `None` if it does not exist.
pub(crate) async fn load(client: &Client, table: &str, id: &TxId) -> Result<Option<Record>> {
    let rows = partition_rows(client, table, id, false).await?;
    let Some(head) = rows.iter().find(|r| row_number(r) == Some(0)) else {
        return Ok(None);
    };
    let header = Header::parse(head)?;
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

/// Packs requests into groups of at most `limit` encoded bytes.
fn pack(requests: &[Request], limit: usize) -> Vec<Vec<AttributeValue>> {
    let mut out: Vec<Vec<AttributeValue>> = Vec::new();
    let mut bytes = 0;
    for r in requests {
        let v = r.encode();
        let sz = crate::request::value_size(&v);
        if out.is_empty() || bytes + sz > limit {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += sz;
        out.last_mut().expect("pushed").push(v);
    }
    out
}

/// Outcome of writing requests to the record.
#[derive(Debug)]
pub(crate) enum Appended {
    /// Written; the record is now at this state.
    Ok(RecordMeta),
    /// The record is no longer pending at the version we expected (header as found, `None` if gone).
    Conflict(Option<Header>),
}

/// Creates the record with `requests` (all of them, over several writes if needed).
pub(crate) async fn create(
    client: &Client,
    table: &str,
    id: &TxId,
    requests: &[Request],
    ticket: Option<u64>,
) -> Result<Appended> {
    let now = ddb::now_millis();
    // The header holds what fits inline; the rest is appended.
    let mut inline_bytes = 0;
    let mut split = 0;
    for r in requests {
        let sz = r.encoded_size();
        if inline_bytes + sz > INLINE_LIMIT {
            break;
        }
        inline_bytes += sz;
        split += 1;
    }
    let nonce = uuid::Uuid::new_v4().to_string();
    let mut item = header_key(id);
    item.insert(STATE.into(), s("P"));
    item.insert(VERSION.into(), n(1));
    item.insert(
        REQUESTS.into(),
        AttributeValue::L(requests[..split].iter().map(Request::encode).collect()),
    );
    item.insert(CHUNKS.into(), n(0));
    item.insert(UPDATED.into(), n(now));
    item.insert(CREATED.into(), n(now));
    item.insert(NONCE.into(), s(nonce.clone()));
    if let Some(t) = ticket {
        item.insert(TICKET.into(), n(t));
    }
    let mut ph = Placeholders::default();
    let cond = format!("attribute_not_exists({})", ph.name(TX_ID));
    let w = Write {
        table: table.into(),
        kind: WriteKind::Put { item },
        condition: Some(cond),
        ph,
    };
    let meta = match w.send(client, None).await? {
        Written::Ok(_) => RecordMeta {
            version: 1,
            chunks: 0,
            inline_bytes,
        },
        Written::ConditionFailed(found) => {
            let header = found.as_ref().map(Header::parse).transpose()?;
            match header {
                // Our own create whose response was lost (the SDK retried it).
                Some(h) if h.nonce.as_deref() == Some(&nonce) && h.version == 1 => h.meta(),
                other => return Ok(Appended::Conflict(other)),
            }
        }
    };
    if split == requests.len() {
        return Ok(Appended::Ok(meta));
    }
    append(client, table, id, meta, &requests[split..]).await
}

/// Appends requests to a pending record at `meta.version` (conditional on both).
pub(crate) async fn append(
    client: &Client,
    table: &str,
    id: &TxId,
    meta: RecordMeta,
    requests: &[Request],
) -> Result<Appended> {
    let mut meta = meta;
    let mut rest = requests;
    while !rest.is_empty() {
        let bytes: usize = rest.iter().map(Request::encoded_size).sum();
        if meta.chunks == 0 && meta.inline_bytes + bytes <= INLINE_LIMIT {
            match append_inline(client, table, id, meta, rest, bytes).await? {
                Appended::Ok(m) => return Ok(Appended::Ok(m)),
                conflict => return Ok(conflict),
            }
        }
        // Chunk rows: take as many requests as fit in CHUNKS_PER_APPEND rows.
        let groups = pack(rest, CHUNK_LIMIT);
        let take_groups = groups.len().min(CHUNKS_PER_APPEND);
        let taken: usize = groups[..take_groups].iter().map(Vec::len).sum();
        match append_chunks(
            client,
            table,
            id,
            meta,
            groups.into_iter().take(take_groups).collect(),
        )
        .await?
        {
            Appended::Ok(m) => meta = m,
            conflict => return Ok(conflict),
        }
        rest = &rest[taken..];
    }
    Ok(Appended::Ok(meta))
}

fn pending_at(ph: &mut Placeholders, version: u64) -> String {
    let pending = pending(ph);
    format!(
        "{pending} AND {} = {}",
        ph.name(VERSION),
        ph.value("Ver", n(version))
    )
}

async fn append_inline(
    client: &Client,
    table: &str,
    id: &TxId,
    meta: RecordMeta,
    requests: &[Request],
    bytes: usize,
) -> Result<Appended> {
    let nonce = uuid::Uuid::new_v4().to_string();
    let mut ph = Placeholders::default();
    let cond = pending_at(&mut ph, meta.version);
    let update = format!(
        "SET {r} = list_append({r}, {new}), {d} = {now}, {o} = {nonce} ADD {v} {one}",
        r = ph.name(REQUESTS),
        new = ph.value(
            "New",
            AttributeValue::L(requests.iter().map(Request::encode).collect())
        ),
        d = ph.name(UPDATED),
        now = ph.value("Now", n(ddb::now_millis())),
        o = ph.name(NONCE),
        nonce = ph.value("Nonce", s(nonce.clone())),
        v = ph.name(VERSION),
        one = ph.value("One", n(1)),
    );
    let w = header_update(table, id, update, cond, ph);
    let next = RecordMeta {
        version: meta.version + 1,
        chunks: meta.chunks,
        inline_bytes: meta.inline_bytes + bytes,
    };
    match w.send(client, None).await {
        Ok(Written::Ok(_)) => Ok(Appended::Ok(next)),
        Ok(Written::ConditionFailed(found)) => {
            let header = found.as_ref().map(Header::parse).transpose()?;
            match header {
                Some(h) if h.nonce.as_deref() == Some(&nonce) && h.version == meta.version + 1 => {
                    Ok(Appended::Ok(next))
                }
                other => Ok(Appended::Conflict(other)),
            }
        }
        Err(Error::DynamoDb {
            code: Some(code),
            message,
            ..
        }) if code == "ValidationException" => Err(Error::invalid(format!(
            "the transaction's requests do not fit in its record: {}",
            message.unwrap_or_default()
        ))),
        Err(e) => Err(e),
    }
}

async fn append_chunks(
    client: &Client,
    table: &str,
    id: &TxId,
    meta: RecordMeta,
    groups: Vec<Vec<AttributeValue>>,
) -> Result<Appended> {
    let nonce = uuid::Uuid::new_v4().to_string();
    let count = groups.len() as u32;
    let mut ph = Placeholders::default();
    let cond = pending_at(&mut ph, meta.version);
    let update = format!(
        "SET {c} = {nc}, {d} = {now}, {o} = {nonce} ADD {v} {one}",
        c = ph.name(CHUNKS),
        nc = ph.value("Chunks", n(meta.chunks + count)),
        d = ph.name(UPDATED),
        now = ph.value("Now", n(ddb::now_millis())),
        o = ph.name(NONCE),
        nonce = ph.value("Nonce", s(nonce.clone())),
        v = ph.name(VERSION),
        one = ph.value("One", n(1)),
    );
    let mut writes = vec![header_update(table, id, update, cond, ph)];
    for (i, g) in groups.into_iter().enumerate() {
        let mut item = row_key(id, meta.chunks + 1 + i as u32);
        item.insert(REQUESTS.into(), AttributeValue::L(g));
        writes.push(Write {
            table: table.into(),
            kind: WriteKind::Put { item },
            condition: None,
            ph: Placeholders::default(),
        });
    }
    let next = RecordMeta {
        version: meta.version + 1,
        chunks: meta.chunks + count,
        inline_bytes: meta.inline_bytes,
    };
    match ddb::transact(client, &writes).await? {
        Transacted::Ok => Ok(Appended::Ok(next)),
        Transacted::Cancelled(reasons) => {
            if reasons[0].is_condition_failed() {
                let header = reasons[0].item.as_ref().map(Header::parse).transpose()?;
                return match header {
                    Some(h)
                        if h.nonce.as_deref() == Some(&nonce) && h.version == meta.version + 1 =>
                    {
                        Ok(Appended::Ok(next))
                    }
                    other => Ok(Appended::Conflict(other)),
                };
            }
            let why: Vec<String> = reasons
                .iter()
                .filter(|r| !r.is_ok())
                .map(|r| r.code.clone())
                .collect();
            Err(Error::DynamoDb {
                operation: "TransactWriteItems",
                code: why.first().cloned(),
                message: Some(format!("appending request rows was cancelled: {why:?}")),
                ambiguous: false,
                source: "append cancelled".into(),
            })
        }
    }
}

/// Outcome of a state transition.
#[derive(Debug)]
pub(crate) enum Flipped {
    Ok,
    /// The record was not pending at that version: the header as found (`None` if gone).
    Failed(Option<Header>),
}

/// A conditional update of the header row.
fn header_update(table: &str, id: &TxId, update: String, cond: String, ph: Placeholders) -> Write {
    Write {
        table: table.into(),
        kind: WriteKind::Update {
            key: header_key(id),
            update,
        },
        condition: Some(cond),
        ph,
    }
}

/// The condition that the record is pending.
fn pending(ph: &mut Placeholders) -> String {
    format!("{} = {}", ph.name(STATE), ph.value("P", s("P")))
}

/// The write that decides a pending record at `version` (used alone or inside a batch).
pub(crate) fn decide_write(
    table: &str,
    id: &TxId,
    version: u64,
    to: TxState,
    finalize: bool,
) -> Write {
    let mut ph = Placeholders::default();
    let cond = pending_at(&mut ph, version);
    let mut update = format!(
        "SET {st} = {to}, {d} = {now}",
        st = ph.name(STATE),
        to = ph.value("To", s(to.code())),
        d = ph.name(UPDATED),
        now = ph.value("Now", n(ddb::now_millis())),
    );
    if finalize {
        update.push_str(&format!(
            ", {} = {}",
            ph.name(FINALIZED),
            ph.value("Fin", s("1"))
        ));
    }
    header_update(table, id, update, cond, ph)
}

/// The write that decides a pending record at `version` and finalizes it in the same write (the
/// one-request commit), with the TTL attribute when one is configured: every finalized record
/// carries its TTL, with no later write a crash could skip.
pub(crate) fn decide_final_write(
    table: &str,
    id: &TxId,
    version: u64,
    to: TxState,
    ttl_secs: Option<u64>,
) -> Write {
    let mut w = decide_write(table, id, version, to, true);
    if let (Some(ttl), WriteKind::Update { update, .. }) = (ttl_secs, &mut w.kind) {
        let at = ddb::now_millis() / 1000 + ttl;
        update.push_str(&format!(
            ", {} = {}",
            w.ph.name(EXPIRES),
            w.ph.value("Exp", n(at))
        ));
    }
    w
}

/// A condition that the record is still pending (for `TransactWriteItems`).
pub(crate) fn pending_check(table: &str, id: &TxId) -> Write {
    let mut ph = Placeholders::default();
    let cond = pending(&mut ph);
    Write {
        table: table.into(),
        kind: WriteKind::Check {
            key: header_key(id),
        },
        condition: Some(cond),
        ph,
    }
}

/// Decides the record: pending at `version` → `to`.
pub(crate) async fn decide(
    client: &Client,
    table: &str,
    id: &TxId,
    version: u64,
    to: TxState,
) -> Result<Flipped> {
    let w = decide_write(table, id, version, to, false);
    match w.send(client, None).await? {
        Written::Ok(_) => Ok(Flipped::Ok),
        Written::ConditionFailed(found) => Ok(Flipped::Failed(
            found.as_ref().map(Header::parse).transpose()?,
        )),
    }
}

/// What a rollback of another transaction was judged on: the record as read, and the reason it
/// may be rolled back. The rollback is decided only if the record is still that way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judged {
    /// The version read: pending at exactly this version (no append since).
    pub version: u64,
    /// Judged idle (the sweeper) or dead (`dead_after`): the last-update time `_TxD` read, which
    /// the record must still carry (no append, heartbeat or ticket write since).
    pub idle_since: Option<u64>,
    /// Judged younger (wound-wait): the decider's ticket; the record must still have no ticket or
    /// a larger one (a ticket recorded since the judgement, which does not change the version,
    /// must be younger too).
    pub younger_than: Option<u64>,
}

/// Outcome of [`roll_back_judged`].
#[derive(Debug)]
pub(crate) enum JudgedRollback {
    /// Rolled back (the record was still as judged).
    Decided,
    /// The record is no longer as judged: the header as found (`None` if gone). Nothing was
    /// written.
    Changed(Option<Header>),
    /// The deciding transaction itself is no longer pending: it decides nothing. Nothing was
    /// written.
    DeciderNotPending,
    /// Cancelled for another reason (the codes given: a conflicting transaction, throttling).
    /// Nothing was written.
    Cancelled(Vec<String>),
}

/// Rolls back the pending record `id` only as it was judged (`judged`: its version, and the
/// last-update time or the ticket order the judgement rested on), and, when `decider` is given
/// (a contending transaction wounding a holder), only while the decider's own record is still
/// pending: one `TransactWriteItems` with a condition check on the decider's record, so a
/// transaction rolled back after it decided to wound carries nothing out. Used by the sweeper
/// (idle) and by contention (wound-wait); it never retries on a state it did not judge.
pub(crate) async fn roll_back_judged(
    client: &Client,
    table: &str,
    id: &TxId,
    judged: &Judged,
    decider: Option<&TxId>,
) -> Result<JudgedRollback> {
    let mut w = decide_write(table, id, judged.version, TxState::RolledBack, false);
    let mut extra = String::new();
    if let Some(idle) = judged.idle_since {
        extra.push_str(&format!(
            " AND {} = {}",
            w.ph.name(UPDATED),
            w.ph.value("Idle", n(idle))
        ));
    }
    if let Some(mine) = judged.younger_than {
        let k = w.ph.name(TICKET);
        extra.push_str(&format!(
            " AND (attribute_not_exists({k}) OR {k} > {})",
            w.ph.value("Mine", n(mine))
        ));
    }
    if let Some(c) = w.condition.as_mut() {
        c.push_str(&extra);
    }
    let parse = |i: Option<&Item>| i.map(Header::parse).transpose();
    let Some(decider) = decider else {
        return Ok(match w.send(client, None).await? {
            Written::Ok(_) => JudgedRollback::Decided,
            Written::ConditionFailed(found) => JudgedRollback::Changed(parse(found.as_ref())?),
        });
    };
    match ddb::transact(client, &[pending_check(table, decider), w]).await? {
        Transacted::Ok => Ok(JudgedRollback::Decided),
        Transacted::Cancelled(reasons) => {
            if reasons[0].is_condition_failed() {
                return Ok(JudgedRollback::DeciderNotPending);
            }
            if reasons[1].is_condition_failed() {
                return Ok(JudgedRollback::Changed(parse(reasons[1].item.as_ref())?));
            }
            // Cancelled for another reason (a conflicting transaction, throttling): nothing was
            // written; the caller reads the record again and judges anew.
            Ok(JudgedRollback::Cancelled(
                reasons
                    .iter()
                    .filter(|r| !r.is_ok())
                    .map(|r| r.code.clone())
                    .collect(),
            ))
        }
    }
}

/// Marks a decided record finalized (every lock released). Idempotent, and a repeat changes
/// nothing: the write is conditional on the record not being finalized yet, so it never moves the
/// finalize time (`_TxD`) or the TTL (`_TxE`) of a record finalized earlier (a condition failure
/// showing the record finalized in `state` is success). `ttl_secs` adds a TTL attribute so DynamoDB
/// deletes the record later; a finalized record that has none yet (the one-request commit finalizes
/// in its decisive write) gets it.
pub(crate) async fn finalize(
    client: &Client,
    table: &str,
    id: &TxId,
    state: TxState,
    ttl_secs: Option<u64>,
) -> Result<()> {
    let mut ph = Placeholders::default();
    let mut cond = format!(
        "{} = {} AND (attribute_not_exists({})",
        ph.name(STATE),
        ph.value("St", s(state.code())),
        ph.name(FINALIZED)
    );
    if ttl_secs.is_some() {
        cond.push_str(&format!(" OR attribute_not_exists({})", ph.name(EXPIRES)));
    }
    cond.push(')');
    let mut update = format!(
        "SET {f} = {one}, {d} = {now}",
        f = ph.name(FINALIZED),
        one = ph.value("Fin", s("1")),
        d = ph.name(UPDATED),
        now = ph.value("Now", n(ddb::now_millis())),
    );
    if let Some(ttl) = ttl_secs {
        let at = ddb::now_millis() / 1000 + ttl;
        update.push_str(&format!(
            ", {} = {}",
            ph.name(EXPIRES),
            ph.value("Exp", n(at))
        ));
    }
    let w = header_update(table, id, update, cond, ph);
    match w.send(client, None).await? {
        Written::Ok(_) => Ok(()),
        // Gone (deleted after someone else finalized it): fine.
        Written::ConditionFailed(None) => Ok(()),
        Written::ConditionFailed(Some(found)) => {
            let h = Header::parse(&found)?;
            if h.state == state && h.finalized {
                // Finalized already (by us, in an attempt whose answer was lost, or by another
                // coordinator): done, and its times stay as they are.
                return Ok(());
            }
            Err(Error::invariant(format!(
                "finalizing {id} as {state} but the record is {}",
                h.state
            )))
        }
    }
}

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
    let chunk_keys: Vec<Item> = (1..=h.chunks).map(|c| row_key(id, c)).collect();
    ddb::batch_delete(client, table, chunk_keys).await?;
    Ok(true)
}

/// Deletes the rows left in the partition of a record whose header is gone (chunk rows of an
/// interrupted delete, or of a header deleted by TTL).
async fn delete_leftover_rows(client: &Client, table: &str, id: &TxId) -> Result<()> {
    let mut keys = partition_rows(client, table, id, true).await?;
    // Never a header: one written meanwhile would be a new record (ids are never reused).
    keys.retain(|k| row_number(k).is_some_and(|n| n != 0));
    ddb::batch_delete(client, table, keys).await
}

/// Takes the next ticket from the counter (one atomic `ADD`).
pub(crate) async fn take_ticket(client: &Client, table: &str) -> Result<u64> {
    let out = client
        .update_item()
        .table_name(table)
        .set_key(Some(header_key(&TxId(TICKET_COUNTER_ID.to_string()))))
        .update_expression("ADD #k :one")
        .expression_attribute_names("#k", TICKET)
        .expression_attribute_values(":one", n(1))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
        .send()
        .await
        .map_err(|e| Error::sdk("UpdateItem", e))?;
    out.attributes
        .as_ref()
        .and_then(|a| a.get(TICKET))
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::invariant("the ticket counter returned no value"))
}

/// Writes `ticket` into a pending record (keeping an earlier one: a record's ticket never changes)
/// and refreshes its last-update time. `None` if the record is no longer pending; else the ticket
/// the record holds after the write (when `ticket` was given), which is the one the transaction
/// must contend with: another handle of the same transaction may have recorded its own first.
pub(crate) async fn set_ticket(
    client: &Client,
    table: &str,
    id: &TxId,
    ticket: Option<u64>,
    waiting_on: Option<u64>,
) -> Result<Option<Option<u64>>> {
    let mut ph = Placeholders::default();
    let cond = pending(&mut ph);
    let mut update = format!(
        "SET {d} = {now}",
        d = ph.name(UPDATED),
        now = ph.value("Now", n(ddb::now_millis()))
    );
    if let Some(on) = waiting_on {
        update.push_str(&format!(
            ", {} = {}",
            ph.name(WAITING),
            ph.value("Wait", n(on))
        ));
    }
    if let Some(t) = ticket {
        let k = ph.name(TICKET);
        update.push_str(&format!(
            ", {k} = if_not_exists({k}, {})",
            ph.value("Ticket", n(t))
        ));
    }
    let w = header_update(table, id, update, cond, ph);
    let updated_new = Some(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew);
    match w.send(client, updated_new).await? {
        Written::Ok(attrs) => Ok(Some(
            attrs
                .as_ref()
                .and_then(|a| a.get(TICKET))
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok()),
        )),
        Written::ConditionFailed(_) => Ok(None),
    }
}

/// Clears the "waiting on" marker of a pending record (the wait is over).
pub(crate) async fn clear_waiting(client: &Client, table: &str, id: &TxId) -> Result<()> {
    let mut ph = Placeholders::default();
    let cond = pending(&mut ph);
    let update = format!(
        "SET {d} = {now} REMOVE {w}",
        d = ph.name(UPDATED),
        now = ph.value("Now", n(ddb::now_millis())),
        w = ph.name(WAITING)
    );
    let w = header_update(table, id, update, cond, ph);
    w.send(client, None).await?;
    Ok(())
}

/// The write of a record created already committed and finalized (the write-only fast path): no
/// request list, since no item is ever locked for it.
pub(crate) fn committed_record_write(table: &str, id: &TxId, ttl_secs: Option<u64>) -> Write {
    finished_record_write(table, id, TxState::Committed, ttl_secs)
}

/// The write of a record created already decided (`to`) and finalized, without requests,
/// conditional on the record not existing.
fn finished_record_write(table: &str, id: &TxId, to: TxState, ttl_secs: Option<u64>) -> Write {
    let now = ddb::now_millis();
    let mut item = header_key(id);
    item.insert(STATE.into(), s(to.code()));
    item.insert(VERSION.into(), n(1));
    item.insert(REQUESTS.into(), AttributeValue::L(Vec::new()));
    item.insert(CHUNKS.into(), n(0));
    item.insert(UPDATED.into(), n(now));
    item.insert(CREATED.into(), n(now));
    item.insert(FINALIZED.into(), s("1"));
    if let Some(ttl) = ttl_secs {
        item.insert(EXPIRES.into(), n(now / 1000 + ttl));
    }
    let mut ph = Placeholders::default();
    let cond = format!("attribute_not_exists({})", ph.name(TX_ID));
    Write {
        table: table.into(),
        kind: WriteKind::Put { item },
        condition: Some(cond),
        ph,
    }
}

/// Creates the record already decided (`to`, normally rolled back) and finalized, unless it
/// exists: used when the creation of the real record may have landed (or may still land) and the
/// transaction is to end without it. `None`: written, so no earlier creation can land any more;
/// `Some`: the record exists, as found.
pub(crate) async fn create_finished(
    client: &Client,
    table: &str,
    id: &TxId,
    to: TxState,
    ttl_secs: Option<u64>,
) -> Result<Option<Header>> {
    let w = finished_record_write(table, id, to, ttl_secs);
    match w.send(client, None).await? {
        Written::Ok(_) => Ok(None),
        Written::ConditionFailed(Some(found)) => Header::parse(&found).map(Some),
        // The answer did not carry the record: read it.
        Written::ConditionFailed(None) => match load_header(client, table, id).await? {
            Some(h) => Ok(Some(h)),
            None => Err(Error::UnknownOutcome { tx_id: id.clone() }),
        },
    }
}
