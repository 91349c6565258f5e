//! Contention tickets in the record: taking one from the counter, recording it once, and the
//! "waiting on" marker a blocked transaction shows.

use aws_sdk_dynamodb::Client;

use crate::TxId;
use crate::ddb::{self, Placeholders, Written};
use crate::error::{Error, Result};

use super::decide::{header_update, pending};
use super::{REGISTERED, TICKET, TICKET_COUNTER_ID, UPDATED, WAITING, header_key, n};

/// Takes the next ticket from the counter (one atomic `ADD`).
pub(crate) async fn take_ticket(client: &Client, table: &str) -> Result<u64> {
    count_one(client, table, TICKET_COUNTER_ID, TICKET).await
}

/// Adds 1 to the number `attr` of the row `id` of the transactions table `table` (one atomic
/// `ADD`; 1 on a row or attribute that does not exist yet), returning the new value.
pub(crate) async fn count_one(client: &Client, table: &str, id: &str, attr: &str) -> Result<u64> {
    let key = header_key(&TxId(id.to_string()));
    let out = client
        .update_item()
        .table_name(table)
        .set_key(Some(key.clone()))
        .update_expression("ADD #k :one")
        .expression_attribute_names("#k", attr)
        .expression_attribute_values(":one", n(1))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
        .send()
        .await
        .map_err(|e| Error::sdk("UpdateItem", e).on_item(table, &key))?;
    out.attributes
        .as_ref()
        .and_then(|a| a.get(attr))
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::invariant(format!("the counter {id} returned no value")))
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

/// Clears the "waiting on" marker of a pending record (the wait is over). False when the record
/// is no longer pending (decided while the transaction waited).
pub(crate) async fn clear_waiting(client: &Client, table: &str, id: &TxId) -> Result<bool> {
    let mut ph = Placeholders::default();
    let cond = pending(&mut ph);
    let update = format!(
        "SET {d} = {now} REMOVE {w}",
        d = ph.name(UPDATED),
        now = ph.value("Now", n(ddb::now_millis())),
        w = ph.name(WAITING)
    );
    let w = header_update(table, id, update, cond, ph);
    Ok(matches!(w.send(client, None).await?, Written::Ok(_)))
}

/// Registers a waiter (`Settings::wait_in_ticket_order`): `ticket`, expiring at `expiry` (epoch
/// ms), waits for the item named `item` (`queue::item_hash`) that the transaction `holder` holds,
/// and counts itself in `_TxJN` ([`REGISTERED`]).
/// Conditional on the holder's record being pending; changes neither its version nor its
/// last-update time (a waiter must not keep a dead holder alive, nor disturb a wound judged on
/// its version). True when it landed; false when the holder was decided (or has no record), and
/// then nothing is registered.
pub(crate) async fn register_waiter(
    client: &Client,
    table: &str,
    holder: &TxId,
    item: &str,
    ticket: u64,
    expiry: u64,
) -> Result<bool> {
    write_registration(client, table, holder, item, ticket, expiry, false).await
}

/// Withdraws `ticket`'s entry for the item named `item` that the transaction `holder` holds
/// (`Settings::wait_in_ticket_order`): its registration becomes [`queue::WITHDRAWN`], which the
/// unlock's merge reads as "drop this ticket", whether the entry was registered or carried by the
/// item. Written by a unit of work that gives up for good while the item is locked, so that the
/// entry does not hold up the item's next waiters until it expires. Counted in `_TxJN` like a
/// registration (a one-request commit that did not carry it is cancelled). `registered_only`:
/// land only over a registration of the ticket (the item does not carry it). Conditional on the
/// holder's record being pending, as a registration. True when it landed.
///
/// [`queue::WITHDRAWN`]: crate::item_lock::queue::WITHDRAWN
pub(crate) async fn withdraw_waiter(
    client: &Client,
    table: &str,
    holder: &TxId,
    item: &str,
    ticket: u64,
    registered_only: bool,
) -> Result<bool> {
    let withdrawn = crate::item_lock::queue::WITHDRAWN;
    write_registration(
        client,
        table,
        holder,
        item,
        ticket,
        withdrawn,
        registered_only,
    )
    .await
}

/// `SET _TxJ:<item>:<ticket> = expiry ADD _TxJN 1` on `holder`'s pending record (and, with
/// `registered_only`, only over an existing registration). True when it landed.
async fn write_registration(
    client: &Client,
    table: &str,
    holder: &TxId,
    item: &str,
    ticket: u64,
    expiry: u64,
    registered_only: bool,
) -> Result<bool> {
    let mut ph = Placeholders::default();
    let mut cond = pending(&mut ph);
    ph.names.insert(
        "#_TxJoin".into(),
        crate::item_lock::queue::registration_attr(item, ticket),
    );
    if registered_only {
        cond = format!("{cond} AND attribute_exists(#_TxJoin)");
    }
    let update = format!(
        "SET #_TxJoin = {} ADD {} {}",
        ph.value("Expiry", n(expiry)),
        ph.name(REGISTERED),
        ph.value("One", n(1))
    );
    let w = header_update(table, holder, update, cond, ph);
    Ok(matches!(w.send(client, None).await?, Written::Ok(_)))
}

/// What the completer of a decided transaction carries to the items it unlocks
/// (`Settings::wait_in_ticket_order`): the record's ticket (its own entry, dropped) and the
/// waiters registered in it, by item. Read consistently after the decision: no registration
/// lands once the record left pending. Empty when the record is gone.
pub(crate) async fn load_registrations(
    client: &Client,
    table: &str,
    id: &TxId,
) -> Result<(
    Option<u64>,
    std::collections::BTreeMap<String, crate::item_lock::queue::Entries>,
)> {
    let Some(item) = super::load_header_row(client, table, id).await? else {
        return Ok((None, Default::default()));
    };
    let ticket = item
        .get(TICKET)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok());
    Ok((ticket, crate::item_lock::queue::registrations(&item)))
}
