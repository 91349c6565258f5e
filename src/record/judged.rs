//! Rolling back another transaction exactly as it was judged (idle, or younger than the judge):
//! one conditional request, so that a judgement made on a record that has since moved on never
//! lands.

use aws_sdk_dynamodb::Client;

use crate::TxId;
use crate::ddb::{self, Transacted, Written};
use crate::error::{Error, Item, Result};

use super::decide::{decide_write, pending_check};
use super::{Header, TICKET, TxState, UPDATED, n};

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
    /// The record has gate rows (its header's `_TxQ`): the rollback decides them too.
    pub gated: bool,
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
    let parse = |i: Option<&Item>| Ok::<_, Error>(i.map(Header::parse_live).transpose()?.flatten());
    if decider.is_none() && !judged.gated {
        return Ok(match w.send(client, None).await? {
            Written::Ok(_) => JudgedRollback::Decided,
            Written::ConditionFailed(found) => JudgedRollback::Changed(parse(found.as_ref())?),
        });
    }
    // The decider's check first (when there is one), then the decision and its gates.
    let mut writes: Vec<_> = decider
        .map(|d| pending_check(table, d))
        .into_iter()
        .collect();
    let at = writes.len();
    writes.push(w);
    if judged.gated {
        writes.extend(super::gate::gate_writes(table, id, TxState::RolledBack));
    }
    match ddb::transact(client, &writes).await? {
        Transacted::Ok => Ok(JudgedRollback::Decided),
        Transacted::Cancelled(reasons) => {
            if at == 1 && reasons[0].is_condition_failed() {
                return Ok(JudgedRollback::DeciderNotPending);
            }
            if reasons[at].is_condition_failed() {
                return Ok(JudgedRollback::Changed(parse(reasons[at].item.as_ref())?));
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
