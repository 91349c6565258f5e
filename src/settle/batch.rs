//! Grouping writes into `TransactWriteItems` batches (within its limits on actions and bytes), keeping
//! the writes of one item together and each write's item beside it, and sending a settle batch so
//! that one refused write does not hold back the others ([`send_isolating`]).

use std::collections::HashMap;

use crate::ddb::{self, Transacted, Write};
use crate::error::{Error, Result};
use crate::keys::ItemRef;

/// The error of a `TransactWriteItems` cancelled for `reason` (not a condition the protocol reads).
pub(crate) fn cancelled_error(reason: &ddb::Reason) -> Error {
    Error::DynamoDb {
        operation: "TransactWriteItems",
        table: None,
        key: None,
        code: Some(reason.code.clone()),
        message: reason.message.clone(),
        ambiguous: false,
        source: format!("transaction cancelled: {}", reason.code).into(),
    }
}

/// A batch of writes and, beside each write, the item it belongs to.
pub(crate) type Group = (Vec<Write>, Vec<Option<ItemRef>>);

/// One group per item (its writes stay together).
pub(crate) fn group_by_owner(writes: Vec<Write>, owners: Vec<Option<ItemRef>>) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for (w, o) in writes.into_iter().zip(owners) {
        match out.last_mut() {
            Some((ws, os)) if os.last() == Some(&o) => {
                ws.push(w);
                os.push(o);
            }
            _ => out.push((vec![w], vec![o])),
        }
    }
    out
}

/// Splits writes into `TransactWriteItems` groups, never separating the writes of one item (its
/// settle write and the delete of its images-table row).
pub(crate) fn group_items(writes: Vec<Write>, owners: Vec<Option<ItemRef>>) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    let mut bytes = 0;
    for (ws, os) in group_by_owner(writes, owners) {
        let size: usize = ws.iter().map(|w| w.size()).sum();
        match out.last_mut() {
            Some(cur)
                if cur.0.len() + ws.len() <= ddb::MAX_TRANSACT_ACTIONS
                    && bytes + size <= ddb::MAX_TRANSACT_BYTES =>
            {
                cur.0.extend(ws);
                cur.1.extend(os);
                bytes += size;
            }
            _ => {
                out.push((ws, os));
                bytes = size;
            }
        }
    }
    out
}

/// Splits writes into `TransactWriteItems` groups, keeping each write's owner beside it.
pub(crate) fn group_with_owners(
    writes: Vec<Write>,
    owners: Vec<Option<ItemRef>>,
    reserve: usize,
) -> Vec<Group> {
    let tagged: Vec<(Write, Option<ItemRef>)> = writes.into_iter().zip(owners).collect();
    let mut out: Vec<Group> = Vec::new();
    let mut cur: Group = (Vec::new(), Vec::new());
    let mut bytes = 0;
    for (w, o) in tagged {
        let sz = w.size();
        if !cur.0.is_empty()
            && (cur.0.len() + reserve >= ddb::MAX_TRANSACT_ACTIONS
                || bytes + sz > ddb::MAX_TRANSACT_BYTES)
        {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += sz;
        cur.0.push(w);
        cur.1.push(o);
    }
    if !cur.0.is_empty() {
        out.push(cur);
    }
    out
}

/// What [`send_isolating`] sent: each request's items and outcome, and the items whose write
/// rolled forward DynamoDB refused on its own, with what it said.
pub(crate) type Isolated = (
    Vec<(Vec<Option<ItemRef>>, Transacted)>,
    Vec<(ItemRef, String)>,
);

/// Sends one settle batch. DynamoDB may refuse a whole `TransactWriteItems` with a
/// `ValidationException` that names no action (DynamoDB Local does, for an update whose operand
/// has the wrong type): when the batch holds a write rolled forward (`forwarded`), which the
/// library judged DynamoDB would take, the batch is sent again in halves, down to single items,
/// so that only the item DynamoDB refuses is left locked and the others settle. Any other failure
/// is returned as before.
pub(crate) async fn send_isolating(
    c: &aws_sdk_dynamodb::Client,
    group: Group,
    forwarded: &HashMap<ItemRef, usize>,
) -> Result<Isolated> {
    let mut outs = Vec::new();
    let mut refusals = Vec::new();
    let mut todo = vec![group];
    while let Some((ws, os)) = todo.pop() {
        let e = match ddb::transact(c, &ws).await {
            Ok(out) => {
                outs.push((os, out));
                continue;
            }
            Err(e) => e,
        };
        let refused_whole = matches!(
            &e,
            Error::DynamoDb { code: Some(code), ambiguous: false, .. } if code == "ValidationException"
        );
        let holds_forwarded = os.iter().flatten().any(|k| forwarded.contains_key(k));
        if !refused_whole || !holds_forwarded {
            return Err(e);
        }
        let mut items = group_by_owner(ws, os);
        if items.len() == 1 {
            let (_, os) = items.pop().expect("one item");
            match os.into_iter().flatten().next() {
                Some(k) if forwarded.contains_key(&k) => refusals.push((k, e.to_string())),
                _ => return Err(e),
            }
            continue;
        }
        let second = items.split_off(items.len() / 2);
        for half in [items, second] {
            let mut g: Group = (Vec::new(), Vec::new());
            for (ws, os) in half {
                g.0.extend(ws);
                g.1.extend(os);
            }
            todo.push(g);
        }
    }
    Ok((outs, refusals))
}
