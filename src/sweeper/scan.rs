//! The parallel scans of a sweep and of a listing: segments, pages, bounded concurrency per
//! segment, and the progress callback.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use futures::{StreamExt, TryStreamExt};

use super::SlicesRead;
use crate::error::{Error, Item, Result};
use crate::record;
use crate::tables::{TX_ID, TX_ROW};

/// A progress callback: called after every scanned page.
pub(super) type ProgressFn = Arc<dyn Fn(&ScanProgress) + Send + Sync>;

/// Which scan a [`ScanProgress`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScanPhase {
    /// TX records (header rows of the transactions table).
    Records,
    /// Before-images in the images table.
    Images,
    /// Items of a user table, looking for orphaned locks.
    Items,
}

impl fmt::Display for ScanPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScanPhase::Records => "records",
            ScanPhase::Images => "images",
            ScanPhase::Items => "items",
        })
    }
}

/// How far a scan has got, reported to the callback of [`SweepOptions::progress`] and
/// [`ListOptions::progress`] after each page.
///
/// [`SweepOptions::progress`]: super::SweepOptions::progress
/// [`ListOptions::progress`]: super::ListOptions::progress
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanProgress {
    /// What is being scanned.
    pub phase: ScanPhase,
    /// The table being scanned.
    pub table: String,
    /// Rows handled so far in this phase (all segments together).
    pub scanned: u64,
}

/// What to scan and how.
pub(super) struct ScanSpec<'a> {
    pub(super) table: &'a str,
    pub(super) phase: ScanPhase,
    pub(super) filter: Option<String>,
    pub(super) projection: Option<String>,
    pub(super) names: HashMap<String, String>,
    pub(super) values: HashMap<String, AttributeValue>,
    pub(super) segments: u32,
    /// Scan only these slices ([`SlicesRead::WHOLE`]: the whole table): slice `i` of `of` is
    /// the `segments` parallel segments `i * segments ..` of `of * segments`, so that the slices
    /// `0..of` read every item once.
    pub(super) slices: SlicesRead,
    pub(super) concurrency: usize,
    pub(super) progress: Option<&'a ProgressFn>,
}

/// Scans `spec.table` (or its slices) in parallel segments, running `handle` on every item (at most
/// `spec.concurrency` at once per segment). Returns the number of items handled.
pub(super) async fn parallel_scan<F, Fut>(
    client: &Client,
    spec: &ScanSpec<'_>,
    handle: F,
) -> Result<u64>
where
    F: Fn(Item) -> Fut,
    Fut: Future<Output = ()>,
{
    let seen = AtomicU64::new(0);
    let segments = spec.segments.max(1);
    let total = segments * spec.slices.of.max(1);
    let handle = &handle;
    let seen_ref = &seen;
    let segment = |s: u32| async move {
        let mut start = None;
        loop {
            // Consistent: an eventually consistent scan may miss a record or a lock written in
            // the last second, or show it as it was before (DynamoDB; Local never does), and
            // `finish_everything_now` promises to settle fresh transactions. Twice the read units
            // of an eventually consistent scan.
            let page = client
                .scan()
                .table_name(spec.table)
                .consistent_read(true)
                .segment(s as i32)
                .total_segments(total as i32)
                .set_filter_expression(spec.filter.clone())
                .set_projection_expression(spec.projection.clone())
                .set_expression_attribute_names(
                    (!spec.names.is_empty()).then(|| spec.names.clone()),
                )
                .set_expression_attribute_values(
                    (!spec.values.is_empty()).then(|| spec.values.clone()),
                )
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| Error::sdk("Scan", e).on_table(spec.table))?;
            let items = page.items.unwrap_or_default();
            let n = items.len() as u64;
            futures::stream::iter(items)
                .for_each_concurrent(spec.concurrency.max(1), handle)
                .await;
            let total = seen_ref.fetch_add(n, Ordering::SeqCst) + n;
            if let Some(p) = spec.progress {
                p(&ScanProgress {
                    phase: spec.phase,
                    table: spec.table.to_string(),
                    scanned: total,
                });
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok::<(), Error>(());
            }
        }
    };
    // Slice by slice, `segments` scans at a time.
    let all: Vec<u32> = spec
        .slices
        .indexes()
        .flat_map(|slice| slice * segments..(slice + 1) * segments)
        .collect();
    futures::stream::iter(all)
        .map(segment)
        .buffer_unordered(segments as usize)
        .try_collect::<()>()
        .await?;
    Ok(seen.into_inner())
}

/// The scan of TX record rows (only header rows with `headers_only`), projecting only what the
/// sweeper needs (never the requests).
pub(super) fn header_scan<'a>(
    table: &'a str,
    headers_only: bool,
    segments: u32,
    concurrency: usize,
    progress: Option<&'a ProgressFn>,
) -> ScanSpec<'a> {
    let attrs = [
        TX_ID,
        TX_ROW,
        record::STATE,
        record::VERSION,
        record::FINALIZED,
        record::UPDATED,
        record::CREATED,
        record::CHUNKS,
        record::EXPIRES,
        record::TOMBSTONE,
    ];
    let names: HashMap<String, String> = attrs
        .iter()
        .map(|a| (format!("#{a}"), a.to_string()))
        .collect();
    ScanSpec {
        table,
        phase: ScanPhase::Records,
        filter: headers_only.then(|| format!("#{TX_ROW} = :_TxZero")),
        projection: Some(
            attrs
                .iter()
                .map(|a| format!("#{a}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        names,
        values: if headers_only {
            HashMap::from([(":_TxZero".to_string(), AttributeValue::N("0".into()))])
        } else {
            HashMap::new()
        },
        segments,
        slices: SlicesRead::WHOLE,
        concurrency,
        progress,
    }
}
