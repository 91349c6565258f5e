//! Writing requests to the record: its creation, and appends at a known version (inline in the
//! header while they fit, else in chunk rows written with the header update that counts them).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::{self, Placeholders, Transacted, Write, WriteKind, Written};
use crate::error::{Error, Result};
use crate::request::Request;
use crate::tables::TX_ID;

use super::decide::{header_update, pending_at};
use super::{
    CHUNKS, CREATED, GATED, Header, NONCE, REQUESTS, RecordMeta, STATE, TICKET, TxState, UPDATED,
    VERSION, header_key, n, row_key, s,
};

/// Most request bytes kept in the header row.
const INLINE_LIMIT: usize = 300_000;
/// Most request bytes a record is created with in its header. A record created with more keeps
/// none there: its requests go to chunk rows written in the same request as the header. Every
/// check of a pending record, its flip and its finalize read or rewrite the header, and DynamoDB
/// charges by item size (DynamoDB Local takes its time by it too): a 1,000-item transaction's
/// 100 KB of requests in its header were read 11 times by its lock batches, then rewritten twice.
const LEAN_HEADER_LIMIT: usize = 16_000;
/// Most request bytes per chunk row.
const CHUNK_LIMIT: usize = 300_000;
/// Most chunk rows written by one append.
const CHUNKS_PER_APPEND: usize = 10;
/// Most request bytes in the chunk rows of one append: a `TransactWriteItems` carries at most 4 MB,
/// and a chunk row holding one large request can pass `CHUNK_LIMIT` (up to an item's 400 KB).
const CHUNK_BYTES_PER_APPEND: usize = 3_000_000;

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

/// How many of `groups` (in order) one append writes: at most [`CHUNKS_PER_APPEND`] rows of at
/// most [`CHUNK_BYTES_PER_APPEND`] bytes in all, and at least one.
fn groups_per_append(groups: &[Vec<AttributeValue>]) -> usize {
    let mut bytes = 0;
    let mut take = 0;
    for g in groups.iter().take(CHUNKS_PER_APPEND) {
        bytes += g.iter().map(crate::request::value_size).sum::<usize>();
        if take > 0 && bytes > CHUNK_BYTES_PER_APPEND {
            break;
        }
        take += 1;
    }
    take
}

/// Outcome of writing requests to the record.
#[derive(Debug)]
pub(crate) enum Appended {
    /// Written; the record is now at this state.
    Ok(RecordMeta),
    /// The record is no longer pending at the version we expected (header as found, `None` if gone).
    Conflict(Option<Header>),
}

/// The writes that create the record: its header (pending, version 1, conditional on the record's
/// absence) first, then the chunk rows it counts. The header holds every request when they are few
/// ([`LEAN_HEADER_LIMIT`]), else none, and chunk rows hold the first `split`.
pub(crate) struct Creation {
    /// The header's put, then the chunk rows' puts; one request (all or nothing).
    pub writes: Vec<Write>,
    /// Recognises our own creation after a lost answer.
    pub nonce: String,
    /// How many of the requests the creation records (the rest are appended after it).
    pub split: usize,
    /// The record once the write landed.
    pub meta: RecordMeta,
}

/// The writes that create the record with as many of `requests` as one request can carry (all of
/// them but past what one append of chunk rows carries, see [`groups_per_append`]).
pub(crate) fn creation(
    table: &str,
    id: &TxId,
    requests: &[Request],
    ticket: Option<u64>,
) -> Creation {
    creation_within(table, id, requests, ticket, LEAN_HEADER_LIMIT)
}

/// [`creation`] with every request in the header when they fit in a full one (300 KB): one write,
/// for a request that has no room for a chunk row beside it (99 locks and the record).
pub(crate) fn creation_inline(
    table: &str,
    id: &TxId,
    requests: &[Request],
    ticket: Option<u64>,
) -> Creation {
    creation_within(table, id, requests, ticket, INLINE_LIMIT)
}

fn creation_within(
    table: &str,
    id: &TxId,
    requests: &[Request],
    ticket: Option<u64>,
    header_limit: usize,
) -> Creation {
    let now = ddb::now_millis();
    let total: usize = requests.iter().map(Request::encoded_size).sum();
    let (inline, inline_bytes, groups) = if total <= header_limit {
        (requests.len(), total, Vec::new())
    } else {
        let mut groups = pack(requests, CHUNK_LIMIT);
        groups.truncate(groups_per_append(&groups));
        (0, 0, groups)
    };
    let split = inline + groups.iter().map(Vec::len).sum::<usize>();
    let chunks = groups.len() as u32;
    let nonce = uuid::Uuid::new_v4().to_string();
    let mut item = header_key(id);
    item.insert(STATE.into(), s("P"));
    item.insert(VERSION.into(), n(1));
    item.insert(
        REQUESTS.into(),
        AttributeValue::L(requests[..inline].iter().map(Request::encode).collect()),
    );
    item.insert(CHUNKS.into(), n(u64::from(chunks)));
    item.insert(UPDATED.into(), n(now));
    item.insert(CREATED.into(), n(now));
    item.insert(NONCE.into(), s(nonce.clone()));
    if let Some(t) = ticket {
        item.insert(TICKET.into(), n(t));
    }
    // A transaction of more items than one batch locks gets gate rows, in the same request.
    let gated = super::gate::needs_gates(requests);
    if gated {
        item.insert(GATED.into(), n(u64::from(super::gate::GATES)));
    }
    let mut ph = Placeholders::default();
    let cond = format!("attribute_not_exists({})", ph.name(TX_ID));
    let mut writes = vec![Write {
        table: table.into(),
        kind: WriteKind::Put { item },
        condition: Some(cond),
        ph,
    }];
    writes.extend(chunk_puts(table, id, 0, groups));
    if gated {
        writes.extend(super::gate::gate_writes(table, id, TxState::Pending));
    }
    Creation {
        writes,
        nonce,
        split,
        meta: RecordMeta {
            version: 1,
            chunks,
            inline_bytes,
            gated,
        },
    }
}

/// The puts of chunk rows `after + 1..`, one per group. Unconditional: they are only ever written
/// in the request that makes the header count them, conditional on the header.
fn chunk_puts(table: &str, id: &TxId, after: u32, groups: Vec<Vec<AttributeValue>>) -> Vec<Write> {
    groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let mut item = row_key(id, after + 1 + i as u32);
            item.insert(REQUESTS.into(), AttributeValue::L(g));
            Write {
                table: table.into(),
                kind: WriteKind::Put { item },
                condition: None,
                ph: Placeholders::default(),
            }
        })
        .collect()
}

/// Creates the record with `requests` (all of them, over several writes if needed).
pub(crate) async fn create(
    client: &Client,
    table: &str,
    id: &TxId,
    requests: &[Request],
    ticket: Option<u64>,
) -> Result<Appended> {
    // The creation records what one request carries; the rest is appended.
    let Creation {
        writes,
        nonce,
        split,
        meta,
    } = creation(table, id, requests, ticket);
    let found = if let [w] = writes.as_slice() {
        match w.send(client, None).await? {
            Written::Ok(_) => None,
            Written::ConditionFailed(found) => Some(found),
        }
    } else {
        // The SDK's retries reuse the token: a retry of a creation that landed writes nothing.
        let token = Some(uuid::Uuid::new_v4().to_string());
        match ddb::transact_with_token(client, &writes, token).await? {
            Transacted::Ok => None,
            Transacted::Cancelled(reasons) if reasons[0].is_condition_failed() => {
                Some(reasons.into_iter().next().and_then(|r| r.item))
            }
            Transacted::Cancelled(reasons) => {
                return Err(cancelled("creating the record", &reasons));
            }
        }
    };
    let meta = match found {
        None => meta,
        Some(found) => {
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

/// Whether `requests` can be appended to the record's header row by the decisive write itself
/// (no chunk rows needed): see [`fold_into_decision`].
pub(crate) fn folds_inline(meta: RecordMeta, requests: &[Request]) -> bool {
    let bytes: usize = requests.iter().map(Request::encoded_size).sum();
    meta.chunks == 0 && meta.inline_bytes + bytes <= INLINE_LIMIT
}

/// Makes the decisive write of a pending record (`decide_final_write`, conditional on the version
/// the requests are appended at) also append `requests`, bump the version and set `nonce`, so that
/// the record names every request in the same write that decides it. The nonce tells a committed
/// record this write decided from one another handle decided without these requests.
pub(crate) fn fold_into_decision(decision: &mut Write, requests: &[Request], nonce: &str) {
    let WriteKind::Update { update, .. } = &mut decision.kind else {
        unreachable!("a decision is an update of the header");
    };
    let ph = &mut decision.ph;
    let set = format!(
        "SET {r} = list_append({r}, {new}), {o} = {nonce}, ",
        r = ph.name(REQUESTS),
        new = ph.value(
            "New",
            AttributeValue::L(requests.iter().map(Request::encode).collect())
        ),
        o = ph.name(NONCE),
        nonce = ph.value("Nonce", s(nonce.to_string())),
    );
    let rest = update
        .strip_prefix("SET ")
        .expect("a decision sets the state")
        .to_string();
    *update = format!(
        "{set}{rest} ADD {v} {one}",
        v = ph.name(VERSION),
        one = ph.value("One", n(1))
    );
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
        // Chunk rows: take as many requests as one append carries.
        let groups = pack(rest, CHUNK_LIMIT);
        let take_groups = groups_per_append(&groups);
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
        gated: meta.gated,
    };
    match w.send(client, None).await {
        Ok(Written::Ok(_)) => Ok(Appended::Ok(next)),
        Ok(Written::ConditionFailed(found)) => {
            let header = found
                .as_ref()
                .map(Header::parse_live)
                .transpose()?
                .flatten();
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
    writes.extend(chunk_puts(table, id, meta.chunks, groups));
    let next = RecordMeta {
        version: meta.version + 1,
        chunks: meta.chunks + count,
        inline_bytes: meta.inline_bytes,
        gated: meta.gated,
    };
    match ddb::transact(client, &writes).await? {
        Transacted::Ok => Ok(Appended::Ok(next)),
        Transacted::Cancelled(reasons) => {
            if reasons[0].is_condition_failed() {
                let header = reasons[0]
                    .item
                    .as_ref()
                    .map(Header::parse_live)
                    .transpose()?
                    .flatten();
                return match header {
                    Some(h)
                        if h.nonce.as_deref() == Some(&nonce) && h.version == meta.version + 1 =>
                    {
                        Ok(Appended::Ok(next))
                    }
                    other => Ok(Appended::Conflict(other)),
                };
            }
            Err(cancelled("appending request rows", &reasons))
        }
    }
}

/// The error of a record write cancelled for another reason than the header's condition.
fn cancelled(what: &str, reasons: &[ddb::Reason]) -> Error {
    let why: Vec<String> = reasons
        .iter()
        .filter(|r| !r.is_ok())
        .map(|r| r.code.clone())
        .collect();
    Error::DynamoDb {
        operation: "TransactWriteItems",
        table: None,
        key: None,
        code: why.first().cloned(),
        message: Some(format!("{what} was cancelled: {why:?}")),
        ambiguous: false,
        source: format!("{what} cancelled").into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Item;
    use crate::request::Op;

    /// A put of an item carrying `pad` bytes.
    fn put(i: usize, pad: usize) -> Request {
        let key = Item::from([("Id".to_string(), s(format!("k{i}")))]);
        let mut item = key.clone();
        item.insert("p".into(), s("x".repeat(pad)));
        Request {
            op: Op::Put,
            table: "t".into(),
            key,
            item: Some(item),
            update: None,
            condition: None,
            names: None,
            values: None,
        }
    }

    fn id() -> TxId {
        TxId("00000000-0000-4000-8000-000000000000".into())
    }

    fn inline_count(c: &Creation) -> usize {
        match &c.writes[0].kind {
            WriteKind::Put { item } => item[REQUESTS].as_l().expect("a list").len(),
            _ => unreachable!("the header is put"),
        }
    }

    #[test]
    fn a_record_of_a_hundred_items_is_created_with_its_gates_pending() {
        let reqs: Vec<Request> = (0..100).map(|i| put(i, 10)).collect();
        let c = creation("tx", &id(), &reqs, None);
        assert!(c.meta.gated);
        let WriteKind::Put { item } = &c.writes[0].kind else {
            panic!("the header is put")
        };
        assert_eq!(item[GATED], n(8));
        let gates: Vec<_> = c.writes[1..]
            .iter()
            .map(|w| match &w.kind {
                WriteKind::Put { item } => {
                    (item[crate::tables::TX_ROW].clone(), item[STATE].clone())
                }
                _ => panic!("a gate is put"),
            })
            .collect();
        assert_eq!(gates.len(), 8);
        assert!(gates.iter().all(|(_, st)| *st == s("P")));
        assert_eq!(gates[0].0, n("-1"));
        // 99 items (one batch of locks): no gates.
        let c = creation("tx", &id(), &reqs[..99], None);
        assert!(!c.meta.gated && c.writes.len() == 1);
    }

    #[test]
    fn few_request_bytes_stay_in_the_header() {
        let reqs: Vec<Request> = (0..50).map(|i| put(i, 100)).collect();
        assert!(reqs.iter().map(Request::encoded_size).sum::<usize>() <= LEAN_HEADER_LIMIT);
        let c = creation("tx", &id(), &reqs, None);
        assert_eq!(c.writes.len(), 1, "the header alone");
        assert_eq!((c.split, inline_count(&c), c.meta.chunks), (50, 50, 0));
    }

    #[test]
    fn more_request_bytes_go_to_chunk_rows_written_with_the_header() {
        let reqs: Vec<Request> = (0..200).map(|i| put(i, 100)).collect();
        let c = creation("tx", &id(), &reqs, None);
        assert_eq!(inline_count(&c), 0, "a lean header");
        assert_eq!((c.split, c.meta.chunks, c.meta.inline_bytes), (200, 1, 0));
        // The header, the chunk row, and the gates of a record of 100 items or more.
        assert!(c.meta.gated);
        assert_eq!(c.writes.len(), 2 + super::super::gate::GATES as usize);
        match &c.writes[1].kind {
            WriteKind::Put { item } => {
                assert_eq!(item[crate::tables::TX_ROW], n(1));
                assert_eq!(item[REQUESTS].as_l().expect("a list").len(), 200);
            }
            _ => panic!("a chunk row is put"),
        }
        assert!(c.writes[1].condition.is_none());
    }

    #[test]
    fn an_inline_creation_keeps_up_to_a_full_header() {
        let reqs: Vec<Request> = (0..200).map(|i| put(i, 100)).collect();
        let c = creation_inline("tx", &id(), &reqs, None);
        assert_eq!(
            c.writes.len(),
            1 + super::super::gate::GATES as usize,
            "the header, the gates"
        );
        assert_eq!((c.split, inline_count(&c), c.meta.chunks), (200, 200, 0));
        // Past a full header it is the lean creation.
        let big: Vec<Request> = (0..2).map(|i| put(i, 200_000)).collect();
        let c = creation_inline("tx", &id(), &big, None);
        assert_eq!((inline_count(&c), c.meta.chunks), (0, 2));
    }

    #[test]
    fn a_creation_carries_at_most_its_chunk_rows_and_leaves_the_rest_to_appends() {
        // 12 requests of ~200 KB: one per chunk row, ten rows in the creation.
        let reqs: Vec<Request> = (0..12).map(|i| put(i, 200_000)).collect();
        let c = creation("tx", &id(), &reqs, None);
        assert_eq!(c.meta.chunks as usize, CHUNKS_PER_APPEND);
        assert_eq!(c.split, CHUNKS_PER_APPEND);
        assert_eq!(c.writes.len(), 1 + CHUNKS_PER_APPEND);
    }

    #[test]
    fn an_append_of_chunk_rows_stays_under_the_request_size_limit() {
        // Requests of ~390 KB each fill a chunk row alone: ten of them would be 3.9 MB.
        let reqs: Vec<Request> = (0..10).map(|i| put(i, 390_000)).collect();
        let c = creation("tx", &id(), &reqs, None);
        let bytes: usize = c.writes.iter().map(Write::size).sum();
        assert!(bytes < ddb::MAX_TRANSACT_BYTES, "{bytes}");
        assert_eq!(c.split, 7, "the rest is appended");
        assert_eq!(groups_per_append(&pack(&reqs, CHUNK_LIMIT)), 7);
        // A single request larger than the budget still goes (alone).
        assert_eq!(groups_per_append(&pack(&reqs[..1], 1)), 1);
    }
}
