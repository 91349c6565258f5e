//! Gates: rows of a record that the concurrent batches of a large transaction check instead of
//! its header, so that they never conflict with each other.
//!
//! DynamoDB cancels a `TransactWriteItems` any of whose items is part of another one in flight
//! (`TransactionConflict`), a `ConditionCheck` included. A transaction of more than 99 items
//! locks and applies its items in batches of up to 99 sent concurrently, and each batch must land
//! only while the transaction is pending (see docs/PROTOCOL.md, "Gates"). Checking the header in
//! every batch made concurrent batches conflict with each other on DynamoDB: a transaction of 300
//! items never committed.
//!
//! So a record created with more than 99 items has [`GATES`] gate rows, `_TxN = -1 .. -GATES`,
//! written pending (`_TxS = P`) in the same request as the header (which counts them in `_TxQ`),
//! and every decision writes them decided in the same `TransactWriteItems` as the header. A gate
//! is pending exactly when the header is: each batch in flight checks a gate of its own
//! ([`Gates`] hands each a free one), which is the header's check without the conflict. A gone
//! gate (a record deleted once finalized) fails the check, as a gone header does. Rounds of more
//! than one batch on a record without gates send their batches one at a time.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::{Placeholders, Write, WriteKind};
use crate::error::Item;
use crate::keys::ItemRef;
use crate::request::Request;
use crate::tables::{TX_ID, TX_ROW};

use super::{STATE, TxState};

/// Gate rows per gated record: as many batches as a transaction sends at once (at most 8).
pub(crate) const GATES: u32 = 8;

/// A record is created with gates when its requests name at least this many items: more than one
/// batch of locks (99 and the record's check).
pub(crate) const GATED_FROM: usize = 100;

/// Whether a record created with `requests` gets gate rows.
pub(crate) fn needs_gates(requests: &[Request]) -> bool {
    let mut items = std::collections::HashSet::new();
    requests
        .iter()
        .any(|r| items.insert(ItemRef::new(&r.table, &r.key)) && items.len() >= GATED_FROM)
}

/// The key of gate `slot` (0-based): row `_TxN = -(slot + 1)` of the record's partition.
fn gate_key(id: &TxId, slot: u32) -> Item {
    HashMap::from([
        (TX_ID.to_string(), AttributeValue::S(id.0.clone())),
        (
            TX_ROW.to_string(),
            AttributeValue::N(format!("-{}", slot + 1)),
        ),
    ])
}

/// Keys of every gate of a record (to delete them with it).
pub(super) fn gate_keys(id: &TxId) -> Vec<Item> {
    (0..GATES).map(|slot| gate_key(id, slot)).collect()
}

/// The puts that write every gate in `state`: pending with the record's creation, decided with
/// its decision (unconditional: they travel with the header's conditional write).
pub(crate) fn gate_writes(table: &str, id: &TxId, state: TxState) -> Vec<Write> {
    (0..GATES)
        .map(|slot| {
            let mut item = gate_key(id, slot);
            item.insert(STATE.to_string(), AttributeValue::S(state.code().into()));
            Write {
                table: table.into(),
                kind: WriteKind::Put { item },
                condition: None,
                ph: Placeholders::default(),
            }
        })
        .collect()
}

/// The gates of one round of concurrent batches: each batch takes a free one for as long as it
/// is in flight.
#[derive(Debug)]
pub(crate) struct Gates {
    free: Mutex<Vec<u32>>,
}

impl Gates {
    /// Every gate free.
    pub(crate) fn new() -> Gates {
        Gates {
            free: Mutex::new((0..GATES).rev().collect()),
        }
    }

    /// How many batches may be in flight at once.
    pub(crate) fn capacity() -> usize {
        GATES as usize
    }

    /// A free gate, held until the returned slot is dropped (`None`: all are taken — more
    /// batches in flight than gates, which the callers' concurrency bound rules out).
    pub(crate) fn take(&self) -> Option<GateSlot<'_>> {
        let slot = self.free.lock().expect("gates poisoned").pop()?;
        Some(GateSlot { gates: self, slot })
    }
}

/// One gate, taken by one batch in flight.
#[derive(Debug)]
pub(crate) struct GateSlot<'a> {
    gates: &'a Gates,
    slot: u32,
}

impl GateSlot<'_> {
    /// A `ConditionCheck` that this gate is pending, as the header is.
    pub(crate) fn pending_check(&self, table: &str, id: &TxId) -> Write {
        let mut ph = Placeholders::default();
        let cond = format!(
            "{} = {}",
            ph.name(STATE),
            ph.value("P", AttributeValue::S("P".into()))
        );
        Write {
            table: table.into(),
            kind: WriteKind::Check {
                key: gate_key(id, self.slot),
            },
            condition: Some(cond),
            ph,
        }
    }
}

impl Drop for GateSlot<'_> {
    fn drop(&mut self) {
        if let Ok(mut free) = self.gates.free.lock() {
            free.push(self.slot);
        }
    }
}
