//! Waiting in ticket order ([`Settings::wait_in_ticket_order`](crate::Settings::wait_in_ticket_order)):
//! the queue an item carries, the condition that makes a lock attempt respect it, the merge an
//! unlock writes, and the rewrite of a free item's queue (dropping expired entries, adding a
//! refused waiter's own). See docs/PROTOCOL.md "Waiting in ticket order".
//!
//! On an item (written only by a waiter's rewrite, while unlocked, and with its unlock):
//! - `_TxQ` (M): the entries the item carries, keyed by ticket (decimal text), each its expiry
//!   (N, epoch ms);
//! - `_TxQF` (M): the oldest of them, `{t: ticket, e: expiry}`: what the lock condition reads;
//! - `_TxQV` (N): incremented by every write of the queue, so that a rewrite lands only on the
//!   queue as read.
//!
//! In the holder's record, waiters register as `_TxJ:<item>:<ticket>` (N: expiry), one top-level
//! attribute per entry (DynamoDB cannot create a map and a path inside it in one update), where
//! `<item>` is [`item_hash`].

use std::collections::BTreeMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::{Placeholders, Write, WriteKind, Written};
use crate::error::{Item, Result};
use crate::expr::{Clause, UpdateExpr};

use super::OWNER;

pub(crate) const QUEUE: &str = "_TxQ";
pub(crate) const QUEUE_FIRST: &str = "_TxQF";
pub(crate) const QUEUE_VERSION: &str = "_TxQV";
/// The queue's attributes on an item.
pub(crate) const QUEUE_ATTRS: [&str; 3] = [QUEUE, QUEUE_FIRST, QUEUE_VERSION];
/// Prefix of a registration's attribute in the holder's record.
pub(crate) const REGISTRATION_PREFIX: &str = "_TxJ:";

/// Entries: ticket → expiry (epoch ms).
pub(crate) type Entries = BTreeMap<u64, u64>;

/// The expiry of a withdrawn registration: the unlock's merge drops the ticket's entry, whether
/// the item carried it or not (see [`merged`]).
pub(crate) const WITHDRAWN: u64 = 0;

/// The name of `table`/`key` in a record's registrations: 16 hex digits of a 64-bit FNV-1a hash
/// of the item's identity, the same for every coordinator and version.
pub(crate) fn item_hash(table: &str, key: &Item) -> String {
    let item = crate::keys::ItemRef::new(table, key);
    let mut h: u64 = 0xcbf29ce484222325;
    for part in [item.table.as_str(), item.key.as_str()] {
        for b in part.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    format!("{h:016x}")
}

/// The attribute of a registration of `ticket` for the item named `item` in a holder's record.
pub(crate) fn registration_attr(item: &str, ticket: u64) -> String {
    format!("{REGISTRATION_PREFIX}{item}:{ticket}")
}

/// The registrations a record holds, by item (see [`item_hash`]).
pub(crate) fn registrations(record: &Item) -> BTreeMap<String, Entries> {
    let mut out: BTreeMap<String, Entries> = BTreeMap::new();
    for (name, v) in record {
        let Some(rest) = name.strip_prefix(REGISTRATION_PREFIX) else {
            continue;
        };
        let Some((item, ticket)) = rest.rsplit_once(':') else {
            continue;
        };
        let (Ok(ticket), Some(expiry)) = (ticket.parse::<u64>(), number(v)) else {
            continue;
        };
        let e = out
            .entry(item.to_string())
            .or_default()
            .entry(ticket)
            .or_insert(0);
        *e = (*e).max(expiry);
    }
    out
}

/// How many registrations landed in a record (`_TxJN`; 0 when none did).
pub(crate) fn registered_count(record: &Item) -> u64 {
    record
        .get(crate::record::REGISTERED)
        .and_then(number)
        .unwrap_or(0)
}

fn number(v: &AttributeValue) -> Option<u64> {
    v.as_n().ok().and_then(|n| n.parse::<u64>().ok())
}

/// The queue attributes of a raw item (to carry them across a `Put`).
pub(crate) fn raw_attrs(raw: &Item) -> Item {
    QUEUE_ATTRS
        .iter()
        .filter_map(|a| raw.get(*a).map(|v| (a.to_string(), v.clone())))
        .collect()
}

/// The queue an item carries, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ItemQueue {
    pub entries: Entries,
    /// `_TxQF`'s ticket: what the lock condition compares with.
    pub first: Option<u64>,
    /// `_TxQV`: `None` when the item never carried a queue.
    pub version: Option<u64>,
}

impl ItemQueue {
    /// From an item's raw attributes (or just its queue attributes).
    pub fn of(raw: &Item) -> ItemQueue {
        let entries = raw
            .get(QUEUE)
            .and_then(|v| v.as_m().ok())
            .map(|m| {
                m.iter()
                    .filter_map(|(t, e)| Some((t.parse::<u64>().ok()?, number(e)?)))
                    .collect()
            })
            .unwrap_or_default();
        ItemQueue {
            entries,
            first: raw
                .get(QUEUE_FIRST)
                .and_then(|v| v.as_m().ok())
                .and_then(|m| m.get("t"))
                .and_then(number),
            version: raw.get(QUEUE_VERSION).and_then(number),
        }
    }

    /// How many live entries (at `now`) are older than `mine`.
    pub fn live_before(&self, mine: u64, now: u64) -> usize {
        self.entries
            .range(..mine)
            .filter(|(_, e)| **e > now)
            .count()
    }

    /// The oldest entry older than `mine` still live at `now`: the one to wait for (`None`: every
    /// older entry has expired, and a lock attempt of `mine` may drop them).
    pub fn oldest_live_before(&self, mine: u64, now: u64) -> Option<u64> {
        self.entries
            .range(..mine)
            .find(|(_, e)| **e > now)
            .map(|(t, _)| *t)
    }
}

/// How a registered waiter paces its looks at the item (`Settings::wait_in_ticket_order`), as the
/// queue lock's waiters do, from the holds it has measured: from the first look that showed a
/// holder to the first that showed another (or none), the places the waiter advanced (the
/// transactions ahead of it then and now) are holds that ended, so a hold is that time divided by
/// them. A waiter far back, whose looks are many holds apart, then measures holds, not the time
/// between its looks; the head, looking often, measures them short (the holder was met
/// mid-hold) and wakes early rather than late.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    mean_hold: Option<std::time::Duration>,
    /// The holder last seen, when it was first seen, and how many were ahead then (it included).
    holder: Option<(String, tokio::time::Instant, usize)>,
}

/// Weight of a new hold in the running mean.
const HOLD_WEIGHT: f64 = 0.3;
/// Polls per measured hold of the waiter at the head, once the hold's expected end has passed.
const HEAD_POLLS_PER_HOLD: u32 = 4;
/// Share of the expected time until its turn a waiter sleeps: half, so that a waiter far back
/// whose estimate of the holds ahead is too long still wakes before its turn (a waiter that
/// overslept leaves the item free: 0.9 ran the hot counter at 16 tx/s, 0.5 at 27.5).
const APPROACH: f64 = 0.5;

impl Pace {
    /// Takes in one look at the item: held by `owner`, or free (`None`), with `ahead`
    /// transactions before this one (the holder included).
    pub fn observe(&mut self, owner: Option<&str>, ahead: usize, now: tokio::time::Instant) {
        if let (Some((h, ..)), Some(o)) = (&self.holder, owner)
            && h == o
        {
            return;
        }
        if let Some((_, since, was_ahead)) = &self.holder {
            // The holder seen first ended its hold, and every place advanced beyond it (a new
            // holder that came from the entries ahead still counts among them).
            let ended = (was_ahead.saturating_sub(ahead) + usize::from(owner.is_some())).max(1);
            let sample = (now - *since) / ended as u32;
            self.mean_hold = Some(match self.mean_hold {
                Some(m) => m.mul_f64(1.0 - HOLD_WEIGHT) + sample.mul_f64(HOLD_WEIGHT),
                None => sample,
            });
        }
        self.holder = owner.map(|o| (o.to_string(), now, ahead));
    }

    /// How long to sleep before the next look with `ahead` transactions before this one (the
    /// holder's included): the head (`ahead` ≤ 1) until the current hold's expected end, then
    /// every quarter of a hold (at least `head`); the others by their position × the mean hold; never longer than `cap`.
    /// `None` until a hold was measured (the caller backs off as any lock wait).
    pub fn next_look(
        &self,
        ahead: usize,
        head: std::time::Duration,
        cap: std::time::Duration,
        now: tokio::time::Instant,
    ) -> Option<std::time::Duration> {
        let hold = self.mean_hold?;
        // The head polls a few times per hold, not faster than `head`.
        let head = head.max(hold / HEAD_POLLS_PER_HOLD);
        let held_for = self
            .holder
            .as_ref()
            .map(|(_, s, _)| now - *s)
            .unwrap_or_default();
        let current_left = hold.saturating_sub(held_for);
        let behind = hold * (ahead.saturating_sub(1) as u32);
        Some(
            (current_left + behind)
                .mul_f64(APPROACH)
                .max(head)
                .min(cap.max(head)),
        )
    }
}

/// The queue an unlock writes: the entries the item carried ∪ the holder's registrations (a
/// ticket in both keeps the later expiry), less the expired ones (at `now`), the withdrawn ones
/// (registered as [`WITHDRAWN`]) and the holder's own (`own`).
pub(crate) fn merged(item: &Entries, registered: &Entries, own: Option<u64>, now: u64) -> Entries {
    let mut out = item.clone();
    for (&t, &e) in registered {
        if e == WITHDRAWN {
            out.remove(&t);
            continue;
        }
        let x = out.entry(t).or_insert(e);
        *x = (*x).max(e);
    }
    out.retain(|&t, &mut e| e > now && Some(t) != own);
    out
}

fn entries_value(entries: &Entries) -> AttributeValue {
    AttributeValue::M(
        entries
            .iter()
            .map(|(t, e)| (t.to_string(), AttributeValue::N(e.to_string())))
            .collect(),
    )
}

fn first_value(entries: &Entries) -> Option<AttributeValue> {
    entries.first_key_value().map(|(t, e)| {
        AttributeValue::M(
            [
                ("t".to_string(), AttributeValue::N(t.to_string())),
                ("e".to_string(), AttributeValue::N(e.to_string())),
            ]
            .into(),
        )
    })
}

/// Adds to an update the writes that replace the queue `was` with `next`: `SET` both attributes
/// (or `REMOVE` them when `next` is empty) and `ADD 1` to the version.
fn update_queue(u: &mut UpdateExpr, ph: &mut Placeholders, next: &Entries) {
    let (q, f) = (ph.name(QUEUE), ph.name(QUEUE_FIRST));
    match first_value(next) {
        Some(first) => {
            let qv = ph.value("Queue", entries_value(next));
            let fv = ph.value("QueueFirst", first);
            u.add(Clause::Set, format!("{q} = {qv}"));
            u.add(Clause::Set, format!("{f} = {fv}"));
        }
        None => {
            u.add(Clause::Remove, q);
            u.add(Clause::Remove, f);
        }
    }
    let one = ph.value("QueueOne", AttributeValue::N("1".into()));
    u.add(Clause::Add, format!("{} {one}", ph.name(QUEUE_VERSION)));
}

/// Makes `w`, a write that unlocks an item whose queue was read as `was`, carry `next` (see
/// [`merged`]) in the same write: an update sets it; a `Put` (a restored before-image, or a put
/// applied in the unlock) carries it as attributes; a delete drops it with the item.
pub(crate) fn carry(w: &mut Write, was: &ItemQueue, next: &Entries) {
    let changed = *next != was.entries || was.first != next.first_key_value().map(|(t, _)| *t);
    match &mut w.kind {
        WriteKind::Update { update, .. } => {
            if !changed {
                return;
            }
            // Every unlock's update is one this library rendered: it parses.
            let Ok(mut u) = UpdateExpr::parse(update) else {
                tracing::warn!(table = %w.table, "an unlock's update did not parse; its queue is not carried");
                return;
            };
            update_queue(&mut u, &mut w.ph, next);
            *update = u.render();
        }
        WriteKind::Put { item } => {
            for a in QUEUE_ATTRS {
                item.remove(a);
            }
            if let Some(first) = first_value(next) {
                item.insert(QUEUE.into(), entries_value(next));
                item.insert(QUEUE_FIRST.into(), first);
            }
            let version = was.version.unwrap_or(0) + u64::from(changed);
            if was.version.is_some() || changed {
                item.insert(QUEUE_VERSION.into(), AttributeValue::N(version.to_string()));
            }
        }
        _ => {}
    }
}

/// Makes `w`, the write that unlocks `table`/`key`, carry the queue an unlock writes (see
/// [`merged`]): the item's entries as it carries them (`raw`, its queue attributes) with the
/// registrations for it among `registered` (a record's, by item), less the expired ones and
/// `own` (the holder's ticket). Every unlock that carries a queue goes through here.
pub(crate) fn carry_merged(
    w: &mut Write,
    raw: &Item,
    registered: &BTreeMap<String, Entries>,
    (table, key): (&str, &Item),
    own: Option<u64>,
) {
    let was = ItemQueue::of(raw);
    let none = Entries::new();
    let reg = registered.get(&item_hash(table, key)).unwrap_or(&none);
    let next = merged(&was.entries, reg, own, crate::ddb::now_millis());
    carry(w, &was, &next);
}

/// Makes a lock write that will not read the item (a batched lock) conditional on the item
/// carrying no queue at all, not even an empty one's version (`_TxQV`): its holder then knows the
/// queue it must carry is empty without reading it. An item that carries one is locked on its own.
pub(crate) fn require_none(w: &mut Write) {
    let none = format!("attribute_not_exists({})", w.ph.name(QUEUE_VERSION));
    w.and_condition(none);
}

/// The lock condition's queue part: `attribute_not_exists(_TxQF) OR _TxQF.t >= :mine`, only the
/// first half without a ticket.
pub(crate) fn lock_condition(ph: &mut Placeholders, mine: Option<u64>) -> String {
    let f = ph.name(QUEUE_FIRST);
    match mine {
        Some(t) => {
            ph.names.insert("#_TxQt".into(), "t".into());
            let v = ph.value("Mine", AttributeValue::N(t.to_string()));
            format!("(attribute_not_exists({f}) OR {f}.#_TxQt >= {v})")
        }
        None => format!("attribute_not_exists({f})"),
    }
}

/// Rewrites the queue of an unlocked item as read (`was`): without its expired entries (at
/// `now`), and with `join`'s entry (ticket, expiry) when given: a waiter refused by an older entry
/// takes its own place on the item, so that whoever comes after it queues behind it even if it
/// never meets a holder to register with. Conditional on the item still unlocked (a locked item's
/// queue must not change: its holder writes it back as its lock read it) and its queue as read
/// (`_TxQV`). True when the rewrite landed; false when the item changed since (someone else
/// rewrote its queue, took or released it).
pub(crate) async fn rewrite(
    client: &Client,
    table: &str,
    key: &Item,
    was: &ItemQueue,
    now: u64,
    join: Option<(u64, u64)>,
) -> Result<bool> {
    // The merge an unlock writes, with the joining entry in place of the registrations.
    let next = merged(&was.entries, &join.into_iter().collect(), None, now);
    rewrite_to(client, table, key, was, &next).await
}

/// What [`leave`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Left {
    /// The entry was taken off the free item.
    Off,
    /// Nothing to take off here: the item does not carry the entry, or it changed between the
    /// read and the write (taken, released, rewritten).
    Nothing,
    /// The item is locked by `owner`: its unlock writes the queue. `carried`: the item carries the
    /// entry (from before the lock); otherwise it can only be a registration in `owner`'s record.
    Locked { owner: TxId, carried: bool },
}

/// Takes `ticket`'s entry off `table`/`key` when the item is unlocked and carries it (with its
/// expired entries): a waiter that gives up for good leaves its place rather than hold up the
/// transactions behind it until the entry expires. Read first, then rewritten conditional on the
/// queue as read (see [`rewrite`]). A locked item is left alone and its owner returned: its unlock
/// writes the queue, which the caller's withdrawal from the owner's record then leaves the entry
/// out of (see [`WITHDRAWN`]).
pub(crate) async fn leave(client: &Client, table: &str, key: &Item, ticket: u64) -> Result<Left> {
    let raw = crate::ddb::batch_get(client, &[(table.to_string(), key.clone())]).await?;
    let Some((_, raw)) = raw.first() else {
        return Ok(Left::Nothing);
    };
    let was = ItemQueue::of(raw);
    let carried = was.entries.contains_key(&ticket);
    if let Some(owner) = raw.get(OWNER).and_then(|v| v.as_s().ok()) {
        return Ok(Left::Locked {
            owner: TxId(owner.clone()),
            carried,
        });
    }
    if !carried {
        return Ok(Left::Nothing);
    }
    let next = merged(
        &was.entries,
        &Entries::new(),
        Some(ticket),
        crate::ddb::now_millis(),
    );
    Ok(if rewrite_to(client, table, key, &was, &next).await? {
        Left::Off
    } else {
        Left::Nothing
    })
}

/// Writes `next` as the queue of the unlocked item whose queue was read as `was`, conditional on
/// it still unlocked and its queue as read.
async fn rewrite_to(
    client: &Client,
    table: &str,
    key: &Item,
    was: &ItemQueue,
    next: &Entries,
) -> Result<bool> {
    let Some(version) = was.version else {
        return Ok(false);
    };
    let mut ph = Placeholders::default();
    let cond = format!(
        "attribute_exists({qv}) AND attribute_not_exists({o}) AND {qv} = {v}",
        qv = ph.name(QUEUE_VERSION),
        o = ph.name(OWNER),
        v = ph.value("QueueVer", AttributeValue::N(version.to_string())),
    );
    let mut u = UpdateExpr::default();
    update_queue(&mut u, &mut ph, next);
    let w = Write::update(table, key.clone(), u.render(), cond, ph);
    Ok(matches!(w.send(client, None).await?, Written::Ok(_)))
}

/// Whether a waiter with `ticket`, refused by an older entry of `queue` at `now`, should write
/// its own entry on the item: it carries none, or one that expires within two thirds of `ttl`
/// (the waiter looks at least every third of it, so a live waiter's entry never lapses).
pub(crate) fn should_join(queue: &ItemQueue, ticket: u64, now: u64, ttl: u64) -> bool {
    needs_renewal(queue.entries.get(&ticket).copied(), now, ttl)
}

/// Whether a waiter's entry on an item, expiring at `entry` (`None`: it carries none), needs
/// writing again at `now`: it is absent or expires within two thirds of `ttl`. A waiter whose
/// entry a locked item carries with more life left needs no registration with the holder, whose
/// unlock keeps it.
pub(crate) fn needs_renewal(entry: Option<u64>, now: u64, ttl: u64) -> bool {
    entry.is_none_or(|e| e < now + ttl * 2 / 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(v: &[(u64, u64)]) -> Entries {
        v.iter().copied().collect()
    }

    #[test]
    fn the_merge_keeps_later_expiries_and_drops_expired_and_own() {
        let item = entries(&[(3, 100), (5, 200), (9, 50)]);
        let reg = entries(&[(3, 300), (7, 150), (4, 60)]);
        assert_eq!(
            merged(&item, &reg, Some(5), 80),
            entries(&[(3, 300), (7, 150)])
        );
        // Repeated, the same.
        assert_eq!(
            merged(&item, &reg, Some(5), 80),
            merged(&item, &reg, Some(5), 80)
        );
        assert!(merged(&Entries::new(), &Entries::new(), None, 0).is_empty());
    }

    #[test]
    fn a_withdrawn_registration_drops_the_entry_the_item_carries_or_not() {
        let item = entries(&[(3, 300), (5, 200)]);
        let reg = entries(&[(3, WITHDRAWN), (7, 150), (8, WITHDRAWN)]);
        assert_eq!(
            merged(&item, &reg, None, 80),
            entries(&[(5, 200), (7, 150)])
        );
    }

    #[test]
    fn registrations_are_read_by_item() {
        let mut rec = Item::new();
        rec.insert(registration_attr("abc", 7), AttributeValue::N("10".into()));
        rec.insert(registration_attr("abc", 3), AttributeValue::N("20".into()));
        rec.insert(registration_attr("def", 1), AttributeValue::N("30".into()));
        rec.insert("_TxQ".into(), AttributeValue::N("8".into()));
        let r = registrations(&rec);
        assert_eq!(r["abc"], entries(&[(3, 20), (7, 10)]));
        assert_eq!(r["def"], entries(&[(1, 30)]));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn an_item_queue_reads_back_what_an_unlock_put_writes() {
        let mut w = Write {
            table: "t".into(),
            kind: WriteKind::Put { item: Item::new() },
            condition: None,
            ph: Placeholders::default(),
        };
        let was = ItemQueue {
            entries: entries(&[(2, 10)]),
            first: Some(2),
            version: Some(4),
        };
        carry(&mut w, &was, &entries(&[(6, 90), (8, 70)]));
        let WriteKind::Put { item } = &w.kind else {
            unreachable!()
        };
        let q = ItemQueue::of(item);
        assert_eq!(q.entries, entries(&[(6, 90), (8, 70)]));
        assert_eq!(q.first, Some(6));
        assert_eq!(q.version, Some(5));
        assert_eq!(q.oldest_live_before(9, 75), Some(6));
        assert_eq!(q.oldest_live_before(9, 80), Some(6));
        assert_eq!(q.oldest_live_before(9, 95), None);
    }

    #[test]
    fn a_waiter_sleeps_by_its_position_and_the_holds_it_measured() {
        use std::time::Duration;
        let t0 = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let (head, cap) = (ms(10), ms(1_000));
        let mut p = Pace::default();
        p.observe(Some("a"), 1, t0);
        assert_eq!(p.next_look(1, head, cap, t0), None, "no hold measured yet");
        p.observe(Some("a"), 1, t0 + ms(50));
        p.observe(Some("b"), 1, t0 + ms(100));
        // One hold of 100 ms; b was seen just now.
        assert_eq!(p.next_look(1, head, cap, t0 + ms(100)), Some(ms(50)));
        assert_eq!(p.next_look(3, head, cap, t0 + ms(100)), Some(ms(150)));
        // Past the expected end of the hold, the head polls four times per hold.
        assert_eq!(p.next_look(1, head, cap, t0 + ms(300)), Some(ms(25)));
        assert_eq!(p.next_look(30, head, cap, t0 + ms(100)), Some(cap));
        // A free item ends b's hold (200 ms): the mean moves to 130 ms; two entries ahead of a
        // free item wait for two holds.
        p.observe(None, 2, t0 + ms(300));
        assert_eq!(p.next_look(2, head, cap, t0 + ms(300)), Some(ms(130)));
    }

    #[test]
    fn a_waiter_far_back_measures_holds_by_the_places_it_advanced() {
        use std::time::Duration;
        let t0 = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let (head, cap) = (ms(10), ms(1_000));
        let mut p = Pace::default();
        // Ten ahead; 200 ms later a new holder, and six ahead: five holds of 40 ms passed (the
        // one seen first, and four of the entries ahead), not one of 200 ms.
        p.observe(Some("a"), 10, t0);
        p.observe(Some("f"), 6, t0 + ms(200));
        assert_eq!(p.next_look(1, head, cap, t0 + ms(200)), Some(ms(20)));
        // Past the expected end, the head looks every quarter hold, at least `head`.
        assert_eq!(p.next_look(1, head, cap, t0 + ms(400)), Some(head));
    }

    #[test]
    fn a_refused_waiter_joins_once_and_renews_before_its_entry_lapses() {
        let q = ItemQueue {
            entries: entries(&[(2, 1_000), (7, 2_500)]),
            first: Some(2),
            version: Some(3),
        };
        // Not on the item: joins.
        assert!(should_join(&q, 9, 0, 3_000));
        // On it, expiring at 2,500: renewed once less than 2,000 (two thirds of 3,000) is left.
        assert!(!should_join(&q, 7, 400, 3_000));
        assert!(should_join(&q, 7, 600, 3_000));
    }

    #[test]
    fn an_unchanged_queue_leaves_an_update_as_it_was() {
        let mut w = Write {
            table: "t".into(),
            kind: WriteKind::Update {
                key: Item::new(),
                update: "REMOVE #_TxId".into(),
            },
            condition: None,
            ph: Placeholders::default(),
        };
        carry(&mut w, &ItemQueue::default(), &Entries::new());
        let WriteKind::Update { update, .. } = &w.kind else {
            unreachable!()
        };
        assert_eq!(update, "REMOVE #_TxId");
        carry(&mut w, &ItemQueue::default(), &entries(&[(1, 2)]));
        let WriteKind::Update { update, .. } = &w.kind else {
            unreachable!()
        };
        assert!(update.contains("SET #_TxQ = :_TxQueue"), "{update}");
        assert!(update.contains("ADD #_TxQV :_TxQueueOne"), "{update}");
        assert!(update.contains("REMOVE #_TxId"), "{update}");
    }
}
