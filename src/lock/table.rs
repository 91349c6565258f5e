//! Creating the lock table.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{ScalarAttributeType, TimeToLiveSpecification, TimeToLiveStatus};

use super::util::{PK, SK, TTL};
use crate::tables::{TableLayout, create_or_verify};
use crate::{Error, Result};

pub(crate) const LOCK_TABLE: TableLayout = TableLayout {
    hash: (PK, ScalarAttributeType::S),
    range: Some((SK, ScalarAttributeType::S)),
};

/// Creates a lock table unless it exists, and enables DynamoDB TTL on its `ttl` attribute.
///
/// Layout: hash key `pk` (S), range key `sk` (S), on-demand billing. One table can hold any number
/// of queue locks, lease locks and ticket counters. If the table exists its key layout is verified
/// ([`Error::TableMismatch`] otherwise). Safe to call concurrently and repeatedly; waits until the
/// table is ACTIVE.
///
/// ```no_run
/// # async fn demo(client: aws_sdk_dynamodb::Client) -> dynamodb_transactions::Result<()> {
/// dynamodb_transactions::lock::create_lock_table(&client, "locks").await?;
/// # Ok(()) }
/// ```
///
/// # Cancel safety
///
/// Dropping the future midway may leave the table created without TTL enabled; calling again
/// completes the job.
pub async fn create_lock_table(client: &Client, table: &str) -> Result<()> {
    create_or_verify(client, table, &LOCK_TABLE, Duration::from_secs(120)).await?;
    let ttl = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| Error::sdk("DescribeTimeToLive", e))?;
    let status = ttl
        .time_to_live_description()
        .and_then(|d| d.time_to_live_status());
    if matches!(
        status,
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
    ) {
        return Ok(());
    }
    let spec = TimeToLiveSpecification::builder()
        .attribute_name(TTL)
        .enabled(true)
        .build()
        .map_err(|e| Error::invalid(format!("TTL specification: {e}")))?;
    match client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(spec)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => {
            let err = Error::sdk("UpdateTimeToLive", e);
            if err.dynamodb_code() == Some("ValidationException") {
                // "TimeToLive is already enabled": also a concurrent caller.
                let again = client
                    .describe_time_to_live()
                    .table_name(table)
                    .send()
                    .await
                    .map_err(|e| Error::sdk("DescribeTimeToLive", e))?;
                if again
                    .time_to_live_description()
                    .and_then(|d| d.time_to_live_status())
                    .is_some()
                {
                    return Ok(());
                }
            }
            Err(err)
        }
    }
}
