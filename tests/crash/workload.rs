//! The workloads the sweeps run: the six items, the writes and reads of each workload, and the
//! views a reader must see of them (committed, rolled back, or committed for the requests the
//! record lists).

use aws_sdk_dynamodb::types::ReturnValue;
use dynamodb_transactions::{Error, Item, LockedReads, Transaction, TxId};

use crate::common::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workload {
    /// Every write buffered until commit (no return values), plus two read locks.
    Buffered,
    /// Writes that lock or apply at once (ALL_OLD / ALL_NEW), then commit.
    Interactive,
    /// Interactive writes, then rollback.
    RolledBack,
    /// Buffered writes of existing items only, with `Settings::batch_locks`: the record and every
    /// lock go in one TransactWriteItems, sent twice: the put of b assumes a create (a placeholder
    /// lock), which b's existence cancels.
    BatchedWrites,
    /// The same writes and a read lock of an existing item, with `Settings::batch_locks`: the read
    /// records and locks its item at once, and the commit takes the other locks in one batch
    /// after the record (sent twice, as in `BatchedWrites`).
    Batched,
    /// The buffered workload with `Settings::batch_locks`: the batch meets the existing item b
    /// under a placeholder lock (and the absent item c under one, as the put assumes), is
    /// cancelled, and is sent again with b locked as existing.
    BatchedInserts,
    /// Reads of a, b and d under lock first, then the writes of existing items on them: every item
    /// is held when the commit starts, so the one-request commit records the writes itself (their
    /// requests folded into its decisive write). Reads as by default (`LockedReads::RecordWithLock`):
    /// the first read's lock goes out with the record's creation, each other read's with the
    /// record's append.
    ReadsThenWrites,
    /// `ReadsThenWrites` with `LockedReads::RecordThenLock`: each read is recorded, then locked.
    RecordedReadsThenWrites,
    /// `ReadsThenWrites` with `Settings::record_on_demand` (the default; the other workloads set
    /// it off): the manager lists the table for the sweeper, the first read's lock goes out
    /// alone, the second read's with the record's creation (naming both reads), the third's with
    /// the record's append. A crash before the creation leaves a lock no record names, which the
    /// reader after the recovery meets and releases under a tombstone.
    OnDemandReadsThenWrites,
    /// The buffered workload with `Settings::roll_forward`, committed in phases (the insert of c
    /// conditional on its absence, the put of b on `attribute_exists(v)`): the batch marks the
    /// writes' locks, and every write is applied by the write that unlocks its item after the flip
    /// (by whoever completes the transaction), b's with its condition, judged on b read under the
    /// lock before the flip and checked again by DynamoDB.
    RolledForward,
    /// `RolledForward` with `Settings::judge_conditions` off: the put of b is applied before the
    /// flip (its condition DynamoDB's to judge), beside the writes rolled forward.
    RolledForwardUnjudged,
    /// `ReadsThenWrites` with `LockedReads::LockThenRecord`: the first read's lock goes out
    /// together with the record's creation, the other reads send only their locks, and the commit
    /// records the writes (and the unrecorded reads need nothing).
    LockedReadsThenWrites,
    /// `Buffered` with a 20 KB attribute in the put of b: the requests are too many bytes for the
    /// record's header, so the record is created with its requests in a chunk row, in one
    /// `TransactWriteItems`.
    BufferedChunked,
    /// `BatchedWrites` with the same put: the header, every lock and the chunk row in one request.
    BatchedChunked,
    /// The buffered writes of a, b, c and d with [`EXTRA_ITEMS`] more updates and no read, with
    /// `Settings::batch_locks` (the default): the record is created with a hundred items, so with
    /// gate rows, and its lock and apply batches run concurrently, each checking its own gate.
    Gated,
    /// `Interactive` with `Settings::wait_in_ticket_order` (locked item by item): a, b, d and e
    /// carry a queue (an entry younger than every transaction, live, and an
    /// expired one); once the work is done, a waiter registers for a and another for b in the
    /// record (not through the faulty client); whoever unlocks an item carries its live entries
    /// and those registrations (see [`queues_carried`]).
    Queued,
    /// `ReadsThenWrites` with `Settings::wait_in_ticket_order`, its items carrying queues as in
    /// `Queued`, and `Settings::batch_locks`: only a is read (locked, recording the transaction,
    /// so that waiters register for a and b after the work); the commit's batch of the locks of b
    /// and d, conditional on their items carrying no queue, is refused, and each is locked on its
    /// own.
    QueuedReadsThenWrites,
}

impl Workload {
    /// Waits in ticket order (`Settings::wait_in_ticket_order`): see [`Workload::Queued`].
    pub(crate) fn queued(self) -> bool {
        matches!(self, Workload::Queued | Workload::QueuedReadsThenWrites)
    }

    /// Committed with `Settings::roll_forward`.
    pub(crate) fn rolls_forward(self) -> bool {
        matches!(
            self,
            Workload::RolledForward | Workload::RolledForwardUnjudged
        )
    }

    pub(crate) fn batch_locks(self) -> bool {
        matches!(
            self,
            Workload::BatchedWrites
                | Workload::Batched
                | Workload::BatchedInserts
                | Workload::RolledForward
                | Workload::RolledForwardUnjudged
                | Workload::ReadsThenWrites
                | Workload::RecordedReadsThenWrites
                | Workload::OnDemandReadsThenWrites
                | Workload::LockedReadsThenWrites
                | Workload::BatchedChunked
                | Workload::Gated
                | Workload::QueuedReadsThenWrites
        )
    }

    /// The put of b carries [`PAD_BYTES`] more: the record needs a chunk row.
    pub(crate) fn chunked(self) -> bool {
        matches!(self, Workload::BufferedChunked | Workload::BatchedChunked)
    }

    pub(crate) fn reads_first(self) -> bool {
        matches!(
            self,
            Workload::ReadsThenWrites
                | Workload::RecordedReadsThenWrites
                | Workload::OnDemandReadsThenWrites
                | Workload::LockedReadsThenWrites
                | Workload::QueuedReadsThenWrites
        )
    }

    /// Takes its first read's lock without a record (`Settings::record_on_demand`).
    pub(crate) fn on_demand(self) -> bool {
        self == Workload::OnDemandReadsThenWrites
    }

    /// How the workload's reads record their requests and lock their items.
    pub(crate) fn locked_reads(self) -> LockedReads {
        match self {
            Workload::RecordedReadsThenWrites => LockedReads::RecordThenLock,
            Workload::LockedReadsThenWrites => LockedReads::LockThenRecord,
            _ => LockedReads::RecordWithLock,
        }
    }

    /// Updates [`EXTRA_ITEMS`] more items (see [`extra_view`]).
    pub(crate) fn extra(self) -> bool {
        self == Workload::Gated
    }

    /// No insert and no read of an absent item (items c and f stay absent).
    pub(crate) fn existing_only(self) -> bool {
        matches!(
            self,
            Workload::BatchedWrites | Workload::Batched | Workload::BatchedChunked
        ) || self.reads_first()
    }
}

/// Item ids of one run: a updated, b overwritten by a put, c inserted, d deleted, e read-locked,
/// f read-locked while absent.
pub(crate) struct Ids {
    pub(crate) p: String,
}

impl Ids {
    pub(crate) fn id(&self, x: &str) -> String {
        format!("{}-{x}", self.p)
    }
}

pub(crate) async fn setup(env: &TestEnv, ids: &Ids) {
    env.raw_put(
        &env.table,
        item(&[("Id", s(&ids.id("a"))), ("bal", n(100))]),
    )
    .await;
    env.raw_put(
        &env.table,
        item(&[("Id", s(&ids.id("b"))), ("v", s("old"))]),
    )
    .await;
    env.raw_put(
        &env.table,
        item(&[("Id", s(&ids.id("d"))), ("v", s("doomed"))]),
    )
    .await;
    env.raw_put(
        &env.table,
        item(&[("Id", s(&ids.id("e"))), ("v", s("read"))]),
    )
    .await;
}

pub(crate) async fn work(
    tx: &Transaction,
    table: &str,
    ids: &Ids,
    w: Workload,
) -> Result<(), Error> {
    let rv = |all: ReturnValue| {
        if matches!(
            w,
            Workload::Buffered
                | Workload::BatchedWrites
                | Workload::Batched
                | Workload::BatchedInserts
                | Workload::RolledForward
                | Workload::RolledForwardUnjudged
                | Workload::ReadsThenWrites
                | Workload::RecordedReadsThenWrites
                | Workload::OnDemandReadsThenWrites
                | Workload::LockedReadsThenWrites
                | Workload::BufferedChunked
                | Workload::BatchedChunked
                | Workload::Gated
                | Workload::QueuedReadsThenWrites
        ) {
            ReturnValue::None
        } else {
            all
        }
    };
    if w.reads_first() {
        // Queued: only a, so that the commit batches the locks of b and d.
        let read: &[&str] = if w.queued() { &["a"] } else { &["a", "b", "d"] };
        for l in read {
            tx.get_item()
                .table_name(table)
                .key("Id", s(&ids.id(l)))
                .send()
                .await?;
        }
    }
    tx.update_item()
        .table_name(table)
        .key("Id", s(&ids.id("a")))
        .update_expression("SET bal = bal - :x")
        .expression_attribute_values(":x", n(10))
        .return_values(rv(ReturnValue::AllNew))
        .send()
        .await?;
    let mut put = tx
        .put_item()
        .table_name(table)
        .item("Id", s(&ids.id("b")))
        .item("v", s("new"))
        .return_values(rv(ReturnValue::AllOld));
    if w.chunked() {
        put = put.item("pad", s(&pad()));
    }
    if w.rolls_forward() {
        // Judged on b as locked and rolled forward; unjudged, applied before the commit beside
        // the writes rolled forward.
        put = put.condition_expression("attribute_exists(v)");
    }
    put.send().await?;
    if !w.existing_only() {
        // Rolled forward, an insert that must not overwrite is judged on its placeholder.
        let mut put = tx
            .put_item()
            .table_name(table)
            .item("Id", s(&ids.id("c")))
            .item("v", s("inserted"))
            .return_values(rv(ReturnValue::AllOld));
        if w.rolls_forward() {
            put = put.condition_expression("attribute_not_exists(Id)");
        }
        put.send().await?;
    }
    tx.delete_item()
        .table_name(table)
        .key("Id", s(&ids.id("d")))
        .return_values(rv(ReturnValue::AllOld))
        .send()
        .await?;
    if w.extra() {
        for i in 0..EXTRA_ITEMS {
            tx.update_item()
                .table_name(table)
                .key("Id", s(&ids.id(&format!("g{i}"))))
                .update_expression("SET hits = hits + :one")
                .expression_attribute_values(":one", n(1))
                .send()
                .await?;
        }
        // No read: the commit creates the record with every request.
        return Ok(());
    }
    if !matches!(w, Workload::BatchedWrites | Workload::BatchedChunked) && !w.reads_first() {
        tx.get_item()
            .table_name(table)
            .key("Id", s(&ids.id("e")))
            .send()
            .await?;
    }
    if !w.existing_only() {
        tx.get_item()
            .table_name(table)
            .key("Id", s(&ids.id("f")))
            .send()
            .await?;
    }
    Ok(())
}

/// The six items as a reader sees them (None = absent).
pub(crate) type View = Vec<Option<Item>>;

/// Bytes of the attribute the put of b carries in the chunked workloads: more than the 16 KB a
/// record's header is created with.
pub(crate) const PAD_BYTES: usize = 20_000;

fn pad() -> String {
    "p".repeat(PAD_BYTES)
}

pub(crate) fn committed_view(ids: &Ids, w: Workload) -> View {
    let mut b = item(&[("Id", s(&ids.id("b"))), ("v", s("new"))]);
    if w.chunked() {
        b.insert("pad".into(), s(&pad()));
    }
    vec![
        Some(item(&[("Id", s(&ids.id("a"))), ("bal", n(90))])),
        Some(b),
        (!w.existing_only()).then(|| item(&[("Id", s(&ids.id("c"))), ("v", s("inserted"))])),
        None,
        Some(item(&[("Id", s(&ids.id("e"))), ("v", s("read"))])),
        None,
    ]
}

/// The committed view when only the requests on `included` items made it into the record.
pub(crate) fn partial_view(ids: &Ids, w: Workload, included: &[&str]) -> View {
    let c = committed_view(ids, w);
    let r = rolled_back_view(ids);
    LETTERS
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if included.contains(l) {
                c[i].clone()
            } else {
                r[i].clone()
            }
        })
        .collect()
}

/// Which of the six items the transaction's record lists a write for (read raw from the
/// transactions table).
pub(crate) async fn recorded_letters(env: &TestEnv, ids: &Ids, id: &TxId) -> Vec<&'static str> {
    let rows = env.record_rows(id).await;
    let mut keys = Vec::new();
    for row in rows {
        if let Some(aws_sdk_dynamodb::types::AttributeValue::L(reqs)) = row.get("_TxR") {
            for r in reqs {
                // A read changes nothing: only a recorded write makes its item part of the view.
                if r.as_m().unwrap()["o"] == s("G") {
                    continue;
                }
                let k = r.as_m().unwrap()["k"].as_m().unwrap()["Id"]
                    .as_s()
                    .unwrap()
                    .clone();
                keys.push(k);
            }
        }
    }
    LETTERS
        .iter()
        .copied()
        .filter(|l| keys.contains(&ids.id(l)))
        .collect()
}

pub(crate) fn rolled_back_view(ids: &Ids) -> View {
    vec![
        Some(item(&[("Id", s(&ids.id("a"))), ("bal", n(100))])),
        Some(item(&[("Id", s(&ids.id("b"))), ("v", s("old"))])),
        None,
        Some(item(&[("Id", s(&ids.id("d"))), ("v", s("doomed"))])),
        Some(item(&[("Id", s(&ids.id("e"))), ("v", s("read"))])),
        None,
    ]
}

pub(crate) const LETTERS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

pub(crate) async fn raw_view(env: &TestEnv, ids: &Ids) -> View {
    let mut out = Vec::new();
    for l in LETTERS {
        out.push(env.raw_get(&env.table, &key(&ids.id(l))).await);
    }
    out
}

/// The live entry every queued item carries: younger than any ticket a test takes.
pub(crate) const QUEUE_YOUNG: u64 = u64::MAX - 16;
/// The items of the queued workload that carry a queue before it runs.
const QUEUED: [&str; 4] = ["a", "b", "d", "e"];
/// The waiters registered in the queued workload's record: for a, and for b.
const REGISTERED: [(&str, u64); 2] = [("a", QUEUE_YOUNG + 1), ("b", QUEUE_YOUNG + 2)];

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Gives the queued workload's items their queue: [`QUEUE_YOUNG`] live, the ticket before it
/// expired (the oldest, `_TxQF`).
pub(crate) async fn setup_queues(env: &TestEnv, ids: &Ids) {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    let (far, past) = (now_ms() + 3_600_000, now_ms() - 1_000);
    for l in QUEUED {
        let mut it = env.raw_get(&env.table, &key(&ids.id(l))).await.unwrap();
        it.insert(
            "_TxQ".into(),
            A::M(
                [
                    (QUEUE_YOUNG.to_string(), n(far)),
                    ((QUEUE_YOUNG - 1).to_string(), n(past)),
                ]
                .into(),
            ),
        );
        it.insert(
            "_TxQF".into(),
            A::M([("t".into(), n(QUEUE_YOUNG - 1)), ("e".into(), n(past))].into()),
        );
        it.insert("_TxQV".into(), n(1));
        env.raw_put(&env.table, it).await;
    }
}

/// The items whose waiters register in the record once the work is done: those the transaction
/// holds then (a waiter registers with the holder of its item, so a registration for an item the
/// transaction never locked is carried nowhere).
pub(crate) fn registering(w: Workload) -> &'static [&'static str] {
    if w == Workload::QueuedReadsThenWrites {
        &["a"]
    } else {
        &["a", "b"]
    }
}

/// Registers the queued workload's waiters (see [`registering`]) in `id`'s (pending) record.
pub(crate) async fn register_waiters(env: &TestEnv, ids: &Ids, id: &TxId, w: Workload) {
    for (l, t) in REGISTERED
        .into_iter()
        .filter(|(l, _)| registering(w).contains(l))
    {
        let landed = dynamodb_transactions::fault::register_waiter(
            &env.manager,
            id,
            &env.table,
            &key(&ids.id(l)),
            t,
            std::time::Duration::from_secs(3_600),
        )
        .await
        .unwrap();
        assert!(landed, "the record is pending");
    }
}

/// Checks the queues the queued workload's items carry at the end (`registered`: the items whose
/// waiters registered), and returns the view without them: every item that exists carries, as
/// live entries, exactly [`QUEUE_YOUNG`] if it carried it, plus its registered waiter; its
/// `_TxQF` is its oldest entry.
pub(crate) fn queues_carried(label: &str, ids: &Ids, view: View, registered: &[&str]) -> View {
    let now = now_ms();
    let mut out = Vec::new();
    for (l, it) in LETTERS.iter().zip(view) {
        let Some(mut it) = it else {
            out.push(None);
            continue;
        };
        let entries: Vec<(u64, u64)> = it
            .get("_TxQ")
            .map(|q| {
                q.as_m()
                    .unwrap()
                    .iter()
                    .map(|(t, e)| (t.parse().unwrap(), e.as_n().unwrap().parse().unwrap()))
                    .collect()
            })
            .unwrap_or_default();
        let mut live: Vec<u64> = entries
            .iter()
            .filter(|(_, e)| *e > now)
            .map(|(t, _)| *t)
            .collect();
        live.sort();
        let mut expect: Vec<u64> = Vec::new();
        if QUEUED.contains(l) {
            expect.push(QUEUE_YOUNG);
        }
        if registered.contains(l) {
            expect.extend(REGISTERED.iter().filter(|(r, _)| r == l).map(|(_, t)| *t));
        }
        expect.sort();
        assert_eq!(
            live,
            expect,
            "{label}: the live queue of {l} ({})",
            ids.id(l)
        );
        if let Some(oldest) = entries.iter().map(|(t, _)| *t).min() {
            let first = it["_TxQF"].as_m().unwrap()["t"].clone();
            assert_eq!(first, n(oldest), "{label}: _TxQF of {l}");
        }
        for a in ["_TxQ", "_TxQF", "_TxQV"] {
            it.remove(a);
        }
        out.push(Some(it));
    }
    out
}

/// The items the gated workload updates beside a, b, c and d: a hundred items in all.
pub(crate) const EXTRA_ITEMS: usize = 96;

fn extra_key(ids: &Ids, i: usize) -> String {
    ids.id(&format!("g{i}"))
}

/// Writes the extra items with `hits = 0`.
pub(crate) async fn setup_extra(env: &TestEnv, ids: &Ids) {
    let items = (0..EXTRA_ITEMS)
        .map(|i| item(&[("Id", s(&extra_key(ids, i))), ("hits", n(0))]))
        .collect();
    env.raw_put_all(&env.table, items).await;
}

/// The extra items as stored (read consistently, one `BatchGetItem`): how many the transaction
/// updated, and any still carrying a protocol attribute.
pub(crate) async fn extra_view(env: &TestEnv, ids: &Ids) -> (usize, Vec<Item>) {
    use aws_sdk_dynamodb::types::KeysAndAttributes;
    let mut keys: Vec<Item> = (0..EXTRA_ITEMS).map(|i| key(&extra_key(ids, i))).collect();
    let mut items = Vec::new();
    while !keys.is_empty() {
        let ka = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .build()
            .unwrap();
        let out = env
            .client
            .batch_get_item()
            .request_items(&env.table, ka)
            .send()
            .await
            .expect("BatchGetItem");
        items.extend(
            out.responses
                .and_then(|mut r| r.remove(&env.table))
                .unwrap_or_default(),
        );
        keys = out
            .unprocessed_keys
            .and_then(|mut u| u.remove(&env.table))
            .map(|ka| ka.keys)
            .unwrap_or_default();
    }
    assert_eq!(items.len(), EXTRA_ITEMS, "an extra item went missing");
    let updated = items
        .iter()
        .filter(|it| it.get("hits") == Some(&n(1)))
        .count();
    let locked = items.into_iter().filter(has_tx_attrs).collect();
    (updated, locked)
}
