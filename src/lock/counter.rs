//! An atomic ticket counter.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::ReturnValue;

use super::util::{COUNT, COUNTER_SK, get_u64, key, n};
use crate::{Error, Result};

/// An atomic counter that hands out strictly increasing tickets, one counter per name.
///
/// The counter of `name` is the item `{pk: name, sk: "#ctr"}` of a lock table (see
/// [`create_lock_table`](super::create_lock_table)) with a number attribute `n`: the last ticket
/// issued. It is the same item that numbers the default (empty) namespace of the
/// [`QueueLock`](super::queue::QueueLock) of that name, so tickets from both never repeat. Never
/// delete a counter item that a queue uses: tickets would start again at 1 and jump the queue.
///
/// ```no_run
/// # async fn demo(client: aws_sdk_dynamodb::Client) -> dynamodb_transactions::Result<()> {
/// use dynamodb_transactions::lock::TicketCounter;
/// let counter = TicketCounter::new(client, "locks");
/// let a = counter.next("orders").await?;
/// let b = counter.next("orders").await?;
/// assert!(b > a);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TicketCounter {
    client: Client,
    table: String,
}

impl TicketCounter {
    /// A counter over `table`, which must have the lock-table layout.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        TicketCounter {
            client,
            table: table.into(),
        }
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Takes the next ticket of `name`: 1 for the first call ever, then 2, 3, ... Every ticket is
    /// handed out at most once (one `UpdateItem ADD`).
    ///
    /// If the response is lost the ticket may have been consumed anyway; the next call returns a
    /// higher one. Tickets therefore increase strictly but may have gaps.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future midway may consume a ticket that nobody learns about (a gap); nothing
    /// else happens.
    pub async fn next(&self, name: &str) -> Result<u64> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(name, COUNTER_SK)))
            .update_expression("ADD #n :one")
            .expression_attribute_names("#n", COUNT)
            .expression_attribute_values(":one", n(1))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| Error::sdk("UpdateItem", e))?;
        let t = out
            .attributes()
            .and_then(|a| get_u64(a, COUNT))
            .ok_or_else(|| Error::invariant(format!("ticket counter {name} returned no number")))?;
        tracing::debug!(counter = name, ticket = t, "ticket issued");
        Ok(t)
    }

    /// The last ticket issued for `name` (0 if none), read consistently.
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future has no effect.
    pub async fn current(&self, name: &str) -> Result<u64> {
        read_counter(&self.client, &self.table, name, COUNTER_SK).await
    }
}

/// Reads a counter item consistently; 0 when it does not exist.
pub(crate) async fn read_counter(client: &Client, table: &str, pk: &str, sk: &str) -> Result<u64> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(key(pk, sk)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e))?;
    Ok(out.item().and_then(|i| get_u64(i, COUNT)).unwrap_or(0))
}
