//! The request recorder: an SDK interceptor that notes every request attempt (operation, actions,
//! send and answer times, success), and what is computed from those notes alone: write units, the
//! critical path of one transaction, and the time some request of it was in flight.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemInput;
use aws_sdk_dynamodb::operation::get_item::GetItemInput;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput;
use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

/// One request attempt as sent and answered.
#[derive(Debug, Clone)]
pub struct Rec {
    pub tag: u64,
    pub op: String,
    /// Actions of a TransactWriteItems, items of a BatchWriteItem, else 1.
    pub actions: u32,
    /// The request reads or writes a bookkeeping row of the library (an id starting with `~`, such
    /// as the shared ticket counter), not an item or a transaction's own record.
    pub bookkeeping: bool,
    pub start: Instant,
    pub end: Instant,
    /// Whether DynamoDB answered with success (a failed condition counts as a failure).
    pub ok: bool,
}

#[derive(Debug, Default)]
struct RecState {
    /// Attached to requests made from now on; 0 = not measured.
    tag: u64,
    recs: Vec<Rec>,
}

/// Records every request attempt of the clients it is attached to.
#[derive(Debug, Clone, Default)]
pub struct Recorder(Arc<Mutex<RecState>>);

/// Per-request state kept in the operation's config bag between hooks.
#[derive(Debug, Clone)]
struct InFlight {
    tag: u64,
    op: String,
    actions: u32,
    bookkeeping: bool,
    start: Option<Instant>,
}

impl Storable for InFlight {
    type Storer = StoreReplace<Self>;
}

type HookResult = Result<(), aws_sdk_dynamodb::error::BoxError>;

impl Recorder {
    pub fn set_tag(&self, tag: u64) {
        self.0.lock().expect("recorder").tag = tag;
    }

    /// Removes and returns the records of `tag`.
    pub fn take(&self, tag: u64) -> Vec<Rec> {
        let mut s = self.0.lock().expect("recorder");
        let (mine, rest) = std::mem::take(&mut s.recs)
            .into_iter()
            .partition(|r| r.tag == tag);
        s.recs = rest;
        mine
    }

    pub fn take_all(&self) -> Vec<Rec> {
        std::mem::take(&mut self.0.lock().expect("recorder").recs)
    }
}

/// Whether a key names a library bookkeeping row (ids starting with `~` are never transactions).
fn is_bookkeeping_key(key: Option<&std::collections::HashMap<String, AttributeValue>>) -> bool {
    key.is_some_and(|k| {
        k.values()
            .any(|v| v.as_s().is_ok_and(|s| s.starts_with('~')))
    })
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "BenchRecorder"
    }

    fn read_before_serialization(
        &self,
        ctx: &BeforeSerializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        let op = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_string())
            .unwrap_or_default();
        let input = ctx.input();
        let actions = if let Some(t) = input.downcast_ref::<TransactWriteItemsInput>() {
            t.transact_items().len() as u32
        } else if let Some(b) = input.downcast_ref::<BatchWriteItemInput>() {
            b.request_items()
                .map(|m| m.values().map(|v| v.len() as u32).sum())
                .unwrap_or(0)
        } else {
            1
        };
        let bookkeeping = if let Some(u) = input.downcast_ref::<UpdateItemInput>() {
            is_bookkeeping_key(u.key())
        } else if let Some(g) = input.downcast_ref::<GetItemInput>() {
            is_bookkeeping_key(g.key())
        } else {
            false
        };
        let tag = self.0.lock().expect("recorder").tag;
        cfg.interceptor_state().store_put(InFlight {
            tag,
            op,
            actions,
            bookkeeping,
            start: None,
        });
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        if let Some(f) = cfg.load::<InFlight>().cloned() {
            cfg.interceptor_state().store_put(InFlight {
                start: Some(Instant::now()),
                ..f
            });
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        ctx: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        let end = Instant::now();
        let ok = matches!(ctx.output_or_error(), Some(Ok(_)));
        if let Some(f) = cfg.load::<InFlight>().cloned()
            && let Some(start) = f.start
        {
            self.0.lock().expect("recorder").recs.push(Rec {
                tag: f.tag,
                op: f.op.clone(),
                actions: f.actions,
                bookkeeping: f.bookkeeping,
                start,
                end,
                ok,
            });
            cfg.interceptor_state()
                .store_put(InFlight { start: None, ..f });
        }
        Ok(())
    }
}

/// Write units of a request under the small-item model.
pub fn write_units(r: &Rec) -> u32 {
    match r.op.as_str() {
        "PutItem" | "UpdateItem" | "DeleteItem" => 1,
        "TransactWriteItems" => 2 * r.actions,
        "BatchWriteItem" => r.actions,
        _ => 0,
    }
}

/// The polls among `recs`: reads (`GetItem`, `BatchGetItem`, `Query`), and writes refused (a
/// false condition, a cancelled `TransactWriteItems`: the looks that are lock attempts, and
/// native optimistic's failed commits).
pub fn polls(recs: &[Rec]) -> (usize, usize) {
    let reads = recs
        .iter()
        .filter(|r| matches!(r.op.as_str(), "GetItem" | "BatchGetItem" | "Query"))
        .count();
    let refused = recs
        .iter()
        .filter(|r| {
            !r.ok
                && matches!(
                    r.op.as_str(),
                    "UpdateItem" | "PutItem" | "DeleteItem" | "TransactWriteItems"
                )
        })
        .count();
    (reads, refused)
}

/// The longest chain of requests in which each was sent after the previous one was answered.
pub fn critical_path(recs: &[Rec]) -> usize {
    let mut iv: Vec<(Instant, Instant)> = recs.iter().map(|r| (r.start, r.end)).collect();
    iv.sort();
    let mut best = vec![1usize; iv.len()];
    for i in 0..iv.len() {
        for j in 0..i {
            if iv[j].1 <= iv[i].0 && best[j] + 1 > best[i] {
                best[i] = best[j] + 1;
            }
        }
    }
    best.into_iter().max().unwrap_or(0)
}

/// Length of the union of the requests' intervals.
pub fn busy(recs: &[Rec]) -> Duration {
    let mut iv: Vec<(Instant, Instant)> = recs.iter().map(|r| (r.start, r.end)).collect();
    iv.sort();
    let mut total = Duration::ZERO;
    let mut cur: Option<(Instant, Instant)> = None;
    for (a, b) in iv {
        cur = match cur {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((s, e)) = cur {
        total += e - s;
    }
    total
}

/// The short name of an operation in the tables.
pub fn short_op(op: &str) -> &str {
    match op {
        "PutItem" => "Put",
        "UpdateItem" => "Upd",
        "DeleteItem" => "Del",
        "GetItem" => "Get",
        "TransactWriteItems" => "TWI",
        "TransactGetItems" => "TGI",
        "BatchWriteItem" => "BWI",
        "BatchGetItem" => "BGI",
        "Query" => "Query",
        "DescribeTable" => "Desc",
        other => other,
    }
}
