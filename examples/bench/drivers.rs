//! Who runs a transaction scenario: the library with its default settings, the library with the
//! write-only fast path off (the locking protocol), the library in the Java library's shape (one
//! request in flight, phased commit), native `TransactWriteItems` (one request, no protocol), or,
//! for transfers, the optimistic read-then-conditional-write a user writes without the library.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::get_item::builders::GetItemFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem, Update};
use dynamodb_transactions::{Settings, TransactionManager};
use rand::Rng;

use crate::transactions::{Kind, PAD, n_val, s};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// Default `Settings` (write-only transactions of < 100 items take the fast path).
    Library,
    /// `write_only_fast_path = false`: every transaction goes through the locking protocol.
    Locking,
    /// The locking protocol with its locks taken item by item (`batch_locks = false`).
    PerItem,
    /// `locked_reads = LockThenRecord`: a read sends only its lock once the record exists.
    LockedReads,
    /// `roll_forward = false`: a phased commit (N > 98) applies every write before the commit,
    /// then unlocks (one more write per item than the default, which rolls writes forward).
    ApplyFirst,
    /// The Java library's shape: `concurrency = 1`, `one_shot_max_items = 0`, no fast path, a
    /// record from the first read (`record_on_demand` off), locks item by item, reads recorded
    /// then locked.
    Sequential,
    /// One `TransactWriteItems` with the N actions (N ≤ 100, writes only).
    Native,
    /// Two such `TransactWriteItems` in a row (update rows, N ≤ 100): what any protocol that
    /// writes every item twice, in two sequential requests, costs at the least. On DynamoDB Local,
    /// which spends its time per item written, this is the floor of the locking protocol's
    /// two-request commit (the lock, then the commit).
    NativeTwice,
    /// Transfers: [`optimistic_transfer`], without the library.
    NativeOptimistic,
}

impl Driver {
    pub fn label(self) -> &'static str {
        match self {
            Driver::Library => "library",
            Driver::Locking => "locking",
            Driver::PerItem => "per-item locks",
            Driver::LockedReads => "lock then record",
            Driver::ApplyFirst => "apply before commit",
            Driver::Sequential => "sequential",
            Driver::Native => "native",
            Driver::NativeTwice => "native twice",
            Driver::NativeOptimistic => "native optimistic",
        }
    }

    /// The drivers that run `kind` at size `n`. Reads and transfers always take the locking
    /// protocol, so the locking driver would repeat the library's figures there; they compare
    /// with locked reads instead, as writes compare batched locks with per-item ones.
    pub fn for_row(kind: Kind, n: usize) -> Vec<Driver> {
        let mut d = vec![Driver::Library];
        if kind.writes_only() {
            d.push(Driver::Locking);
            d.push(Driver::PerItem);
        } else {
            d.push(Driver::LockedReads);
        }
        if kind.writes_only() && n > Settings::default().one_shot_max_items {
            d.push(Driver::ApplyFirst);
        }
        d.push(Driver::Sequential);
        if kind.writes_only() && n <= 100 {
            d.push(Driver::Native);
        }
        if kind == Kind::Update && n <= 100 {
            d.push(Driver::NativeTwice);
        }
        if kind == Kind::Transfer {
            d.push(Driver::NativeOptimistic);
        }
        d
    }

    /// Applies this driver's settings on top of the defaults (`concurrency`: the library's
    /// in-flight limit from the command line, if any).
    pub fn configure(self, st: &mut Settings, concurrency: Option<usize>) {
        match self {
            Driver::Library
            | Driver::Locking
            | Driver::PerItem
            | Driver::LockedReads
            | Driver::ApplyFirst => {
                if let Some(c) = concurrency {
                    st.concurrency = c;
                }
                if matches!(self, Driver::Locking | Driver::PerItem) {
                    st.write_only_fast_path = false;
                }
                if self == Driver::PerItem {
                    st.batch_locks = false;
                }
                if self == Driver::LockedReads {
                    st.locked_reads = dynamodb_transactions::LockedReads::LockThenRecord;
                }
                if self == Driver::ApplyFirst {
                    st.roll_forward = false;
                }
            }
            Driver::Sequential => {
                st.concurrency = 1;
                st.one_shot_max_items = 0;
                st.write_only_fast_path = false;
                st.batch_locks = false;
                st.locked_reads = dynamodb_transactions::LockedReads::RecordThenLock;
                // The record from the first read, as the Java library writes it.
                st.record_on_demand = false;
            }
            Driver::Native | Driver::NativeTwice | Driver::NativeOptimistic => {}
        }
    }

    /// A manager with this driver's settings on the benchmark's tables.
    pub fn manager(
        self,
        client: Client,
        prefix: &str,
        concurrency: Option<usize>,
    ) -> TransactionManager {
        TransactionManager::builder(client)
            .transactions_table(format!("{prefix}-tx"))
            .images_table(format!("{prefix}-img"))
            .configure(|st| self.configure(st, concurrency))
            .build()
    }
}

/// The native equivalent of one write scenario: one `TransactWriteItems` with the N actions.
pub async fn run_native(
    client: &Client,
    table: &str,
    kind: Kind,
    keys: &[String],
) -> Result<(), String> {
    let items: Vec<TransactWriteItem> = keys
        .iter()
        .map(|k| match kind {
            Kind::Update => TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name(table)
                        .key("Id", s(k))
                        .update_expression("SET hits = hits + :one")
                        .expression_attribute_values(":one", n_val(1))
                        .build()
                        .expect("update"),
                )
                .build(),
            Kind::Insert => TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name(table)
                        .item("Id", s(k))
                        .item("hits", n_val(0))
                        .item("pad", s(PAD))
                        .condition_expression("attribute_not_exists(Id)")
                        .build()
                        .expect("put"),
                )
                .build(),
            Kind::Delete => TransactWriteItem::builder()
                .delete(
                    Delete::builder()
                        .table_name(table)
                        .key("Id", s(k))
                        .build()
                        .expect("delete"),
                )
                .build(),
            Kind::Read | Kind::Transfer => unreachable!("no native equivalent of reads"),
        })
        .collect();
    client
        .transact_write_items()
        .set_transact_items(Some(items))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
}

/// What one [`optimistic_transfer`] did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Optimistic {
    /// `TransactWriteItems` sent (each after reading both accounts).
    pub attempts: u32,
    pub committed: bool,
    /// Cancellations with a `ConditionalCheckFailed` reason (a balance changed since it was read).
    pub check_failed: u32,
    /// Cancellations with a `TransactionConflict` reason (another transaction on an account).
    pub conflicts: u32,
    /// Any other failure (throttling, a failed read).
    pub other: u32,
    /// When the reads of the last attempt returned.
    pub read_at: Option<std::time::Instant>,
}

/// The sleep before attempt `attempt + 1`: full jitter up to 2·2^attempt ms, at most 50 ms.
fn backoff(attempt: u32, rng: &mut impl Rng) -> Duration {
    let cap = (2u64 << attempt.min(6)).min(50);
    Duration::from_micros(rng.random_range(0..=cap * 1000))
}

/// A strongly consistent `GetItem` of the bench item `key` (its `Id`), ready to send.
fn consistent_get(client: &Client, table: &str, key: &str) -> GetItemFluentBuilder {
    client
        .get_item()
        .table_name(table)
        .key("Id", s(key))
        .consistent_read(true)
}

fn number(
    item: Option<&std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>,
    attr: &str,
) -> Option<i64> {
    item?.get(attr)?.as_n().ok()?.parse().ok()
}

/// A transfer as a user writes it without the library: read both accounts (`GetItem`, both at
/// once, with `ConsistentRead`: the eventually consistent default would read stale balances and
/// fail more), then one `TransactWriteItems` with both updates, each conditioned on the balance
/// read (`attr = :read`); on any failure, a short jittered sleep and the whole again, at most
/// `max_attempts` times.
pub async fn optimistic_transfer(
    client: &Client,
    table: &str,
    attr: &str,
    (from, to, amount): (&str, &str, i64),
    max_attempts: u32,
    rng: &mut impl Rng,
) -> Optimistic {
    let mut out = Optimistic::default();
    for attempt in 1..=max_attempts.max(1) {
        if attempt > 1 {
            tokio::time::sleep(backoff(attempt - 1, rng)).await;
        }
        let read = |k: &str| consistent_get(client, table, k).send();
        let (a, b) = tokio::join!(read(from), read(to));
        let (Some(a), Some(b)) = (
            a.ok().and_then(|o| number(o.item(), attr)),
            b.ok().and_then(|o| number(o.item(), attr)),
        ) else {
            out.other += 1;
            continue;
        };
        out.attempts = attempt;
        out.read_at = Some(std::time::Instant::now());
        let update = |k: &str, read: i64, new: i64| {
            TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name(table)
                        .key("Id", s(k))
                        .update_expression("SET #v = :new")
                        .condition_expression("#v = :read")
                        .expression_attribute_names("#v", attr)
                        .expression_attribute_values(":new", n_val(new))
                        .expression_attribute_values(":read", n_val(read))
                        .build()
                        .expect("update"),
                )
                .build()
        };
        let sent = client
            .transact_write_items()
            .transact_items(update(from, a, a - amount))
            .transact_items(update(to, b, b + amount))
            .send()
            .await;
        let err = match sent {
            Ok(_) => {
                out.committed = true;
                return out;
            }
            Err(e) => e,
        };
        match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                let codes: Vec<&str> = c
                    .cancellation_reasons()
                    .iter()
                    .filter_map(|r| r.code())
                    .collect();
                if codes.contains(&"TransactionConflict") {
                    out.conflicts += 1;
                } else if codes.contains(&"ConditionalCheckFailed") {
                    out.check_failed += 1;
                } else {
                    out.other += 1;
                }
            }
            _ => out.other += 1,
        }
    }
    out
}

/// An increment as a user writes it without the library: read the item (`GetItem` with
/// `ConsistentRead`), then one `UpdateItem` that writes the value read + 1, conditioned on the
/// value read (`attr = :read`, or absent when it was); on any failure, a short jittered sleep and
/// the whole again, at most `max_attempts` times.
pub async fn optimistic_increment(
    client: &Client,
    table: &str,
    (key, attr): (&str, &str),
    max_attempts: u32,
    rng: &mut impl Rng,
) -> Optimistic {
    let mut out = Optimistic::default();
    for attempt in 1..=max_attempts.max(1) {
        if attempt > 1 {
            tokio::time::sleep(backoff(attempt - 1, rng)).await;
        }
        let read = consistent_get(client, table, key).send().await;
        let Ok(read) = read else {
            out.other += 1;
            continue;
        };
        let n = number(read.item(), attr);
        out.attempts = attempt;
        out.read_at = Some(std::time::Instant::now());
        let update = client
            .update_item()
            .table_name(table)
            .key("Id", s(key))
            .update_expression("SET #v = :new")
            .expression_attribute_names("#v", attr)
            .expression_attribute_values(":new", n_val(n.unwrap_or(0) + 1));
        let update = match n {
            Some(n) => update
                .condition_expression("#v = :read")
                .expression_attribute_values(":read", n_val(n)),
            None => update.condition_expression("attribute_not_exists(#v)"),
        };
        match update.send().await {
            Ok(_) => {
                out.committed = true;
                return out;
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                out.check_failed += 1
            }
            Err(_) => out.other += 1,
        }
    }
    out
}

/// How the handover sketch's queued workers read ([`handover_increment`]).
#[derive(Debug, Clone, Copy)]
pub struct HandoverPace {
    /// Reads on the way at once, a `width`th of a read apart, for each of the first `racers`.
    pub width: u32,
    pub racers: usize,
    /// A worker further back reads one at a time, sleeping this long per place before each.
    pub per_place: Duration,
}

/// A sketch of an increment under a handover lock, without the library, to measure what handing
/// a hot item over in the releasing write could move: the worker takes the item's holder
/// attribute `h` when it is free, else appends its id `me` to the item's queue `q`; a queued
/// worker learns that the holder handed it the item by consistent reads (paced by `pace`); the
/// holder writes the value read + 1 and hands `h` to the first in `q` in the same write (or
/// removes `h` when `q` is empty). No crash handling: a measure, not a lock.
pub async fn handover_increment(
    client: &Client,
    table: &str,
    (key, attr): (&str, &str),
    me: &str,
    pace: HandoverPace,
) -> Optimistic {
    let HandoverPace {
        width,
        racers,
        per_place,
    } = pace;
    use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
    use futures::StreamExt;
    let mut out = Optimistic {
        attempts: 1,
        ..Optimistic::default()
    };
    let item = loop {
        let took = client
            .update_item()
            .table_name(table)
            .key("Id", s(key))
            .update_expression("SET h = :me")
            .condition_expression("attribute_not_exists(h)")
            .expression_attribute_values(":me", s(me))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        if let Ok(o) = took {
            break o.attributes().cloned().unwrap_or_default();
        }
        let queued = client
            .update_item()
            .table_name(table)
            .key("Id", s(key))
            .update_expression("SET q = list_append(if_not_exists(q, :none), :me)")
            .condition_expression("attribute_exists(h)")
            .expression_attribute_values(":me", AttributeValue::L(vec![s(me)]))
            .expression_attribute_values(":none", AttributeValue::L(vec![]))
            .send()
            .await;
        if queued.is_err() {
            out.other += 1;
            continue;
        }
        // Queued: read until the item is ours.
        let read = || async {
            let sent = std::time::Instant::now();
            let r = consistent_get(client, table, key).send().await;
            (sent.elapsed(), r)
        };
        let mut rtt = Duration::from_millis(10);
        let mut on_the_way = futures::stream::FuturesUnordered::new();
        let mut last = std::time::Instant::now();
        let mut place = usize::MAX;
        on_the_way.push(read());
        let item = loop {
            let spacing = rtt / width.max(1);
            let next = tokio::time::Instant::from_std(last + spacing);
            tokio::select! {
                biased;
                Some((took, r)) = on_the_way.next() => {
                    rtt = rtt.mul_f64(0.8) + took.mul_f64(0.2);
                    let Ok(r) = r else { continue };
                    let item = r.item().cloned().unwrap_or_default();
                    if item.get("h").and_then(|v| v.as_s().ok()).map(String::as_str) == Some(me) {
                        break item;
                    }
                    // Further back in the queue: one read at a time, paced by the place.
                    place = item
                        .get("q")
                        .and_then(|v| v.as_l().ok())
                        .and_then(|q| q.iter().position(|e| e.as_s().ok().map(String::as_str) == Some(me)))
                        .unwrap_or(0);
                    if place >= racers && on_the_way.is_empty() {
                        tokio::time::sleep(per_place * place as u32).await;
                    }
                    if on_the_way.is_empty() {
                        on_the_way.push(read());
                        last = std::time::Instant::now();
                    }
                }
                _ = tokio::time::sleep_until(next), if place < racers && on_the_way.len() < width as usize => {
                    on_the_way.push(read());
                    last = std::time::Instant::now();
                }
            }
        };
        break item;
    };
    out.read_at = Some(std::time::Instant::now());
    let n = item
        .get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<i64>().ok())
        .unwrap_or(0);
    // The value read + 1, and the item to the first in the queue; or freed when nobody queues.
    let release = |update: &str, condition: &str| {
        client
            .update_item()
            .table_name(table)
            .key("Id", s(key))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#v", attr)
            .expression_attribute_values(":new", n_val(n + 1))
            .expression_attribute_values(":me", s(me))
    };
    let handed = release(
        "SET #v = :new, h = q[0] REMOVE q[0]",
        "h = :me AND size(q) > :zero",
    )
    .expression_attribute_values(":zero", AttributeValue::N("0".into()))
    .send()
    .await;
    out.committed = handed.is_ok()
        || release("SET #v = :new REMOVE h", "h = :me")
            .send()
            .await
            .is_ok();
    out
}
