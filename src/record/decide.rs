//! The record's transitions: deciding a pending record (commit or rollback) conditional on its
//! version, checking it is still pending inside a batch, finalizing it, and records created
//! already decided.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::{self, Placeholders, Write, WriteKind, Written};
use crate::error::{Error, Item, Result};
use crate::request::Request;
use crate::tables::TX_ID;

use super::{
    CHUNKS, CREATED, EXPIRES, FINALIZED, Header, REQUESTS, STATE, TxState, UPDATED, VERSION,
    WRITTEN, header_key, load_header, n, s,
};

/// Outcome of a state transition.
#[derive(Debug)]
pub(crate) enum Flipped {
    Ok,
    /// The record was not pending at that version: the header as found (`None` if gone).
    Failed(Option<Header>),
}

/// A conditional update of the header row.
pub(super) fn header_update(
    table: &str,
    id: &TxId,
    update: String,
    cond: String,
    ph: Placeholders,
) -> Write {
    Write::update(table, header_key(id), update, cond, ph)
}

/// The condition that the record is pending.
pub(super) fn pending(ph: &mut Placeholders) -> String {
    format!("{} = {}", ph.name(STATE), ph.value("P", s("P")))
}

pub(super) fn pending_at(ph: &mut Placeholders, version: u64) -> String {
    let pending = pending(ph);
    format!(
        "{pending} AND {} = {}",
        ph.name(VERSION),
        ph.value("Ver", n(version))
    )
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

/// Decides the record: pending at `version` → `to`; with its gate rows (`gated`, see
/// [`gate`](super::gate)) in the same `TransactWriteItems`. A gated decision cancelled for a
/// transient reason (a conflict with a batch still in flight, throttling) wrote nothing: a
/// retryable `Error::DynamoDb`.
pub(crate) async fn decide(
    client: &Client,
    table: &str,
    id: &TxId,
    version: u64,
    to: TxState,
    gated: bool,
) -> Result<Flipped> {
    let w = decide_write(table, id, version, to, false);
    let parse = |found: Option<&Item>| -> Result<Flipped> {
        Ok(Flipped::Failed(
            found.map(Header::parse_live).transpose()?.flatten(),
        ))
    };
    if !gated {
        return match w.send(client, None).await? {
            Written::Ok(_) => Ok(Flipped::Ok),
            Written::ConditionFailed(found) => parse(found.as_ref()),
        };
    }
    let mut writes = vec![w];
    writes.extend(super::gate::gate_writes(table, id, to));
    match ddb::transact(client, &writes).await? {
        ddb::Transacted::Ok => Ok(Flipped::Ok),
        ddb::Transacted::Cancelled(reasons) if reasons[0].is_condition_failed() => {
            parse(reasons[0].item.as_ref())
        }
        ddb::Transacted::Cancelled(reasons) => {
            let why = reasons.iter().find(|r| !r.is_ok()).unwrap_or(&reasons[0]);
            Err(Error::DynamoDb {
                operation: "TransactWriteItems",
                table: Some(table.to_string()),
                key: None,
                code: Some(why.code.clone()),
                message: why.message.clone(),
                ambiguous: false,
                source: format!("decision cancelled: {}", why.code).into(),
            })
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
            // A tombstone: the record was deleted once finalized.
            let Some(h) = Header::parse_live(&found)? else {
                return Ok(());
            };
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

/// The write of a record created already committed and finalized (the write-only fast path): no
/// request list, since no item is ever locked for it; with `written` (when the fast path marks its
/// writes for the change feed), the items it writes as key-only requests in `_TxL`.
pub(crate) fn committed_record_write(
    table: &str,
    id: &TxId,
    ttl_secs: Option<u64>,
    written: &[Request],
) -> Write {
    let mut w = finished_record_write(table, id, TxState::Committed, ttl_secs);
    if let (false, WriteKind::Put { item }) = (written.is_empty(), &mut w.kind) {
        item.insert(
            WRITTEN.into(),
            AttributeValue::L(written.iter().map(Request::encode).collect()),
        );
    }
    w
}

/// The write of a record created already decided (`to`) and finalized, without requests,
/// conditional on the record not existing.
pub(super) fn finished_record_write(
    table: &str,
    id: &TxId,
    to: TxState,
    ttl_secs: Option<u64>,
) -> Write {
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
