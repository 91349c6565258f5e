//! Taking an item's lock: one conditional write that locks an existing item (or inserts a
//! transient placeholder for a missing one), recognising our own earlier lock after a lost answer.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use crate::TxId;
use crate::ddb::{Placeholders, Write, WriteKind, Written};
use crate::error::{Error, Item, Result};
use crate::keys::KeySchema;

use super::head::{self, HeadMark};
use super::line::{Line, LineStep};
use super::{
    LOCK_DATE, LockInfo, OWNER, Observed, PAD, RECORDED_TICKET, ROLL, TICKET, TRANSIENT, new_stamp,
    strip,
};

/// What a lock attempt of an existing item respects besides the lock itself, with the attempt's
/// ticket (`None`: it has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Nothing more.
    Free,
    /// The item's queue (`Settings::wait_in_ticket_order`), with the attempt's recorded ticket:
    /// see [`queue::lock_condition`](super::queue::lock_condition).
    Queue(Option<u64>),
    /// The oldest waiter's mark (`Settings::mark_oldest_waiter`): see [`head`]. A lock that
    /// passes it removes it, or replaces it with the line's next waiter ([`LineStep`]).
    Head(Option<u64>, LineStep),
    /// The marked waiter's own mark, exactly as it wrote it: see [`head::own_mark_condition`].
    /// The lock that passes it removes it (or replaces it, as [`Guard::Head`]). Only the lock of
    /// an existing item: an absent one carries no mark, and the attempt fails instead of
    /// inserting a placeholder.
    OwnMark(HeadMark, LineStep),
}

impl Guard {
    /// Whether the guard reads the oldest waiter's mark (and a lock passing it removes it).
    fn marks(self) -> bool {
        matches!(self, Guard::Head(..) | Guard::OwnMark(..))
    }

    /// What the lock does to the line behind the mark.
    pub(crate) fn line_step(self) -> LineStep {
        match self {
            Guard::Head(_, s) | Guard::OwnMark(_, s) => s,
            _ => LineStep::default(),
        }
    }

    /// The same guard, its lock doing `step` to the line behind the mark (a guard that reads
    /// no mark is unchanged).
    pub(crate) fn stepping(self, step: LineStep) -> Guard {
        match self {
            Guard::Head(t, _) => Guard::Head(t, step),
            Guard::OwnMark(own, _) => Guard::OwnMark(own, step),
            g => g,
        }
    }

    /// The queue's ticket, when the guard is the queue.
    fn queue(self) -> Option<Option<u64>> {
        match self {
            Guard::Queue(t) => Some(t),
            _ => None,
        }
    }
}

/// Outcome of a lock attempt.
#[derive(Debug)]
pub(crate) enum LockOutcome {
    Locked(LockInfo),
    /// Another transaction holds it. `ahead`: with a queue guard and a ticket, the live entries
    /// older than the ticket the item carries (0 otherwise); `own_entry`: the expiry of the
    /// ticket's own entry among them, if the item carries one (which the holder's unlock keeps).
    /// `lock_ticket`: the ticket the lock carries, if any (see [`HolderTicket`]). `head`: the
    /// oldest waiter's mark the item carries (`Settings::mark_oldest_waiter`).
    Held {
        owner: TxId,
        ahead: usize,
        own_entry: Option<u64>,
        lock_ticket: Option<HolderTicket>,
        head: Option<HeadMark>,
        line: Line,
    },
    /// Unlocked, but its queue's oldest entry is older than the attempt's ticket (or the attempt
    /// had none): refused by the queue (`Settings::wait_in_ticket_order`), as the item carries it.
    Queued {
        queue: super::queue::ItemQueue,
    },
    /// Unlocked, but the oldest waiter's mark is live and older than the attempt's ticket (or
    /// the attempt had none): refused by it (`Settings::mark_oldest_waiter`).
    Marked {
        head: HeadMark,
        line: Line,
    },
}

impl LockOutcome {
    /// Refused, but held by nobody (an empty owner): the item changed between the attempt's
    /// assumption and its answer, and the caller tries again, with `line` as the item carries it.
    fn held_by_nobody(line: Line) -> LockOutcome {
        LockOutcome::Held {
            owner: TxId(String::new()),
            ahead: 0,
            own_entry: None,
            lock_ticket: None,
            head: None,
            line,
        }
    }
}

/// What the ticket a lock carries tells of its holder, with the lock's age (`_TxD`): `_TxK` on a
/// lock taken without a record, `_TxKR` on one taken by a handle that knew its record's ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HolderTicket {
    /// The holder's ticket when the lock went out (0: it had none, only without a record).
    pub ticket: u64,
    /// When the lock was taken (epoch ms; 0 if its stamp is unreadable).
    pub locked_ms: u64,
    /// The ticket is the one the holder's record holds (`_TxKR`); otherwise the lock was taken
    /// without a record (`_TxK`).
    pub recorded: bool,
    /// The lock was handed over by the item's previous holder (`_TxHO`, `Settings::hand_over`).
    pub handed: bool,
}

impl HolderTicket {
    fn of(obs: &Observed) -> Option<HolderTicket> {
        let (ticket, recorded) = match (obs.ticket, obs.recorded_ticket) {
            (Some(t), _) => (t, false),
            (None, Some(t)) => (t, true),
            (None, None) => return None,
        };
        Some(HolderTicket {
            ticket,
            locked_ms: obs.locked_ms().unwrap_or(0),
            recorded,
            handed: obs.handed,
        })
    }

    /// The lock was taken without a record (`_TxK`).
    pub fn unrecorded(self) -> Option<HolderTicket> {
        (!self.recorded).then_some(self)
    }
}

/// The ticket a lock attempt writes on the item, by which whoever meets the lock judges its
/// holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockTicket {
    /// None: the holder is judged by its record.
    None,
    /// `_TxK`: the lock is taken without a record, by a unit of work with this ticket (0: none).
    Unrecorded(u64),
    /// `_TxKR`: the ticket the holder's record holds.
    Recorded(u64),
}

impl LockTicket {
    /// The attribute the lock writes, with its ticket.
    fn attribute(self) -> Option<(&'static str, u64)> {
        match self {
            LockTicket::None => None,
            LockTicket::Unrecorded(t) => Some((TICKET, t)),
            LockTicket::Recorded(t) => Some((RECORDED_TICKET, t)),
        }
    }

    /// The ticket of a lock taken without a record (`_TxK`).
    fn unrecorded(self) -> Option<u64> {
        match self {
            LockTicket::Unrecorded(t) => Some(t),
            _ => None,
        }
    }

    /// The recorded ticket the lock carries (`_TxKR`).
    fn recorded(self) -> Option<u64> {
        match self {
            LockTicket::Recorded(t) => Some(t),
            _ => None,
        }
    }
}

/// Locks an item for `me`. An existing item is locked with one UpdateItem (conditional on it
/// existing and being unlocked) that returns its previous state; an absent item is then inserted as a
/// transient placeholder with a second UpdateItem conditional on it still being absent (Java's
/// library skipped that condition and could mark an existing item transient, then delete it).
/// `first` says which to try first: `Absent` for a write that can only succeed on an absent item.
/// `guard`: what the lock of an existing item respects besides the lock (see [`Guard`]).
/// `ticket`: the ticket the lock carries (see [`LockTicket`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn lock(
    client: &Client,
    table: &str,
    key: &Item,
    schema: &KeySchema,
    me: &TxId,
    first: Existence,
    guard: Guard,
    ticket: LockTicket,
) -> Result<LockOutcome> {
    let mut existence = first;
    for _ in 0..8 {
        let attempt = lock_write(client, table, key, schema, me, existence, guard, ticket);
        if let Some(out) = attempt.await? {
            return Ok(out);
        }
        // The item is not what the write assumed (created or deleted in between): the other form.
        // A look that needs its own mark does not insert a placeholder: the mark went with the item.
        if matches!(guard, Guard::OwnMark(..)) {
            break;
        }
        existence = existence.other();
    }
    Ok(LockOutcome::held_by_nobody(Line::default()))
}

/// What a lock write assumes of its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Existence {
    /// The item exists: the write fails on an absent one.
    Present,
    /// The item is absent: the write inserts a transient placeholder, and fails on an existing one.
    Absent,
}

impl Existence {
    /// The other assumption.
    pub(crate) fn other(self) -> Existence {
        match self {
            Existence::Present => Existence::Absent,
            Existence::Absent => Existence::Present,
        }
    }

    /// Whether a lock write that assumed `self` failed its condition only because the item is not
    /// what it assumed: absent under the lock of an existing item, or existing and unlocked under
    /// a placeholder. `found` is the item the failed condition returned (`ALL_OLD`).
    pub(crate) fn mismatched(self, found: &Observed) -> bool {
        match self {
            Existence::Present => !found.exists,
            Existence::Absent => found.exists && found.owner.is_none(),
        }
    }
}

/// The write that locks an unlocked item with a fresh stamp, as `existence` assumes it. Returns it
/// with its stamp. `pad` bytes of padding (`_TxP`) make DynamoDB refuse the lock unless the item
/// has that much more room (see [`crate::request::lock_pad`]). `roll`: the record index of the write
/// the lock may roll forward (`_TxU`), only ever in a request conditional on the record being
/// pending. `guard`: as for [`lock`] (the removal of a passed mark is the caller's: see
/// [`lock`]'s own write).
#[allow(clippy::too_many_arguments)]
pub(crate) fn lock_item_write(
    table: &str,
    key: &Item,
    schema: &KeySchema,
    me: &TxId,
    existence: Existence,
    pad: usize,
    roll: Option<usize>,
    guard: Guard,
) -> (Write, String) {
    let mut ph = Placeholders::default();
    let hk = ph.name_for_user(&schema.hash.0);
    let stamp = new_stamp();
    let mut update = format!(
        "SET {o} = {me}, {d} = {now}",
        o = ph.name(OWNER),
        me = ph.value("Me", AttributeValue::S(me.0.clone())),
        d = ph.name(LOCK_DATE),
        now = ph.value("Now", AttributeValue::N(stamp.clone())),
    );
    if pad > 0 {
        update.push_str(&format!(
            ", {} = {}",
            ph.name(PAD),
            ph.value("Pad", AttributeValue::B(Blob::new(vec![0u8; pad])))
        ));
    }
    if let Some(i) = roll {
        update.push_str(&format!(
            ", {} = {}",
            ph.name(ROLL),
            ph.value("Roll", AttributeValue::N(i.to_string()))
        ));
    }
    let cond = match existence {
        Existence::Absent => {
            update.push_str(&format!(
                ", {} = {}",
                ph.name(TRANSIENT),
                ph.value("True", AttributeValue::Bool(true))
            ));
            format!("attribute_not_exists({hk})")
        }
        Existence::Present => {
            let mut cond = format!(
                "attribute_exists({hk}) AND attribute_not_exists({})",
                ph.name(OWNER)
            );
            // An absent item carries no queue nor mark: only the lock of an existing one reads
            // them.
            let extra = match guard {
                Guard::Free => None,
                Guard::Queue(mine) => Some(super::queue::lock_condition(&mut ph, mine)),
                Guard::Head(mine, _) => Some(head::lock_condition(
                    &mut ph,
                    mine,
                    crate::ddb::now_millis(),
                )),
                Guard::OwnMark(own, _) => Some(head::own_mark_condition(&mut ph, own)),
            };
            if let Some(extra) = extra {
                cond.push_str(" AND ");
                cond.push_str(&extra);
            }
            cond
        }
    };
    let w = Write::update(table, key.clone(), update, cond, ph);
    (w, stamp)
}

/// One lock attempt. `None`: the item's existence was not what the attempt assumed.
#[allow(clippy::too_many_arguments)]
async fn lock_write(
    client: &Client,
    table: &str,
    key: &Item,
    schema: &KeySchema,
    me: &TxId,
    existence: Existence,
    guard: Guard,
    ticket: LockTicket,
) -> Result<Option<LockOutcome>> {
    let absent = existence == Existence::Absent;
    let (mut w, stamp) = lock_item_write(table, key, schema, me, existence, 0, None, guard);
    if let Write {
        kind,
        ph,
        condition,
        ..
    } = &mut w
        && let WriteKind::Update { update, .. } = kind
    {
        if let Some((attr, t)) = ticket.attribute() {
            let t = ph.value("Ticket", AttributeValue::N(t.to_string()));
            update.push_str(&format!(", {} = {t}", ph.name(attr)));
        }
        // The mark passed is taken off: its waiter has the item, or an older one does. Or it
        // goes to the line's next waiter, marked before the item is free again.
        if guard.marks() && !absent {
            let (set, removes, cond) = guard.line_step().parts(ph);
            if let Some(set) = set {
                update.push_str(&format!(", {set}"));
            }
            update.push_str(&format!(" REMOVE {}", removes.join(", ")));
            if let Some(cond) = cond {
                *condition = Some(match condition.take() {
                    Some(c) => format!("{c} AND {cond}"),
                    None => cond,
                });
            }
        }
    }
    match w.send(client, Some(ReturnValue::AllOld)).await {
        Ok(Written::Ok(old)) => {
            let carried = match (&old, absent) {
                (Some(raw), false) => super::queue::raw_attrs(raw),
                _ => Item::new(),
            };
            // The waiters the item carries now, as far as this lock knows: the ones it left.
            let waiters = match (&old, absent) {
                (Some(raw), false) if guard.marks() => {
                    super::handover::Waiters::after_step(raw, guard.line_step())
                }
                _ => Default::default(),
            };
            let old = if absent { None } else { old.map(strip) };
            Ok(Some(LockOutcome::Locked(LockInfo {
                transient: absent,
                applied: false,
                current: old.clone(),
                before: old,
                image_ref: None,
                stamp: Some(stamp),
                image_unread: false,
                roll: None,
                queue: carried,
                ticket: ticket.unrecorded(),
                recorded_ticket: ticket.recorded(),
                waiters,
                handed: false,
            })))
        }
        Ok(Written::ConditionFailed(None)) => Ok(None),
        Ok(Written::ConditionFailed(Some(found))) => Ok(met(&found, me, existence, guard)),
        Err(Error::DynamoDb {
            code: Some(code),
            message,
            ..
        }) if code == "ValidationException" => Err(Error::invalid(format!(
            "cannot lock the item of table {table} (nothing was written to it): {}; DynamoDB said: {}",
            crate::request::room_note(),
            message.unwrap_or_default()
        ))),
        Err(e) => Err(e),
    }
}

/// A look that reads instead of attempting the lock, for a waiter far back in the line behind an
/// oldest waiter's mark (`guard`, [`Guard::Head`]): one strongly consistent `GetItem`, which
/// writes nothing (no write units on a hot item, no write in the way of the holder's). What an
/// attempt would have met, when it would have been refused: held, or refused by an older live
/// mark. `None` when the attempt may take the item (free, or absent) and should be sent: the
/// caller sends it at once. Any other guard: `None`.
pub(crate) async fn look_by_reading(
    client: &Client,
    table: &str,
    key: &Item,
    me: &TxId,
    guard: Guard,
) -> Result<Option<LockOutcome>> {
    let Guard::Head(mine, _) = guard else {
        return Ok(None);
    };
    let Some(found) = crate::ddb::get_consistent(client, table, key).await? else {
        return Ok(None);
    };
    let free = !found.contains_key(super::OWNER);
    let refused = HeadMark::of(&found).is_some_and(|h| h.refuses(mine, crate::ddb::now_millis()));
    if free && !refused {
        return Ok(None);
    }
    Ok(met(&found, me, Existence::Present, guard))
}

/// The look of a waiter that a holder may hand the item (`Settings::hand_over`): the marked
/// waiter (`guard` its own mark, [`Guard::OwnMark`]) or the next in line behind it
/// ([`Guard::Head`]). Strongly consistent reads, up to `width` in flight, one sent every
/// `spacing`, until one shows the item locked by `me` (handed over: `Ok(Locked)`), free
/// (`Err(line)`, the line behind the mark as that read found it: the caller attempts the lock
/// at once, as its look would have), or no longer carrying its mark (what an attempt would have
/// met). Reads write nothing, and the ones in flight together find the handover a fraction of a
/// round trip after it lands, where one look at a time finds it half a round trip after on
/// average. The next in line watches while the item is held by another (marked meanwhile, it
/// is the one handed the item next), and only while a lock that was itself handed over holds it
/// (`_TxHO`: a chain of handovers; a holder that took the item by its own look may have a
/// record, and one with a record never hands it over). Past `until`, the last read answered
/// tells what an attempt would have met (held by another, under its mark), so that the caller
/// renews its mark. `told`: where a holder of the same manager passes the item as its handover
/// left it ([`notice`](super::notice)), which counts as a read that found it. Cancel safety:
/// dropping it drops reads, which change nothing.
pub(crate) async fn watch_for_handover(
    client: &Client,
    key: (&str, &Item),
    me: &TxId,
    guard: Guard,
    (width, spacing): (usize, std::time::Duration),
    until: tokio::time::Instant,
    told: &mut Option<tokio::sync::oneshot::Receiver<Item>>,
) -> Result<std::result::Result<LockOutcome, Line>> {
    use futures::StreamExt;
    let (table, key) = key;
    let free = |found: Option<&Item>| Ok(Err(found.map(Line::of).unwrap_or_default()));
    // The marked waiter watches while the item carries its mark; the next in line, while it is
    // held by another (it may be marked, and handed the item, at any moment).
    let own = match guard {
        Guard::OwnMark(own, _) => Some(own),
        Guard::Head(Some(_), _) => None,
        _ => return free(None),
    };
    let mut reads = futures::stream::FuturesUnordered::new();
    let mut next = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        if reads.len() < width.max(1) && now >= next && (now < until || reads.is_empty()) {
            reads.push(crate::ddb::get_consistent(client, table, key));
            next = now + spacing;
        }
        let send_more = reads.len() < width.max(1) && now < until;
        let found = tokio::select! {
            Some(found) = reads.next() => found?,
            notice = async { told.as_mut().expect("guarded").await }, if told.is_some() => {
                *told = None;
                match notice {
                    Ok(item) => Some(item),
                    // Nobody will tell: the reads go on.
                    Err(_) => continue,
                }
            }
            _ = tokio::time::sleep_until(next), if send_more => continue,
        };
        let Some(found) = found else {
            return free(None);
        };
        let obs = Observed::of(Some(&found));
        if obs.owner.is_none() {
            return free(Some(&found));
        }
        let still_marked = own.is_none_or(|own| HeadMark::of(&found) == Some(own));
        let over = tokio::time::Instant::now() >= until && reads.is_empty();
        // Held by a lock that was not handed over: its holder took the item by its own look,
        // and so may have a record, which never hands it over.
        let not_handed = obs.ticket.is_none() || !obs.handed;
        if obs.locked_by(me) || !still_marked || not_handed || over {
            return match met(&found, me, Existence::Present, guard) {
                Some(out) => Ok(Ok(out)),
                None => free(Some(&found)),
            };
        }
    }
}

/// What a look with `guard` meets in `found`, the item as a holder's commit that handed it to
/// `me` left it, told in process ([`notice`](super::notice)): the lock handed to `me`.
pub(crate) fn met_told(found: &Item, me: &TxId, guard: Guard) -> Option<LockOutcome> {
    met(found, me, Existence::Present, guard)
}

/// What a lock attempt that assumed `existence`, with `guard`, met when it did not lock: the item
/// `found` as its failed condition returned it (`ALL_OLD`), or as a read showed it. `None`: the
/// item's existence was not what the attempt assumed. Our own lock found there (an attempt whose
/// answer was lost, which landed) is ours: `Locked`.
fn met(found: &Item, me: &TxId, existence: Existence, guard: Guard) -> Option<LockOutcome> {
    let queue = guard.queue();
    let obs = Observed::of(Some(found));
    // Exists and unlocked, but we tried the absent path: try again as existing.
    if existence.mismatched(&obs) {
        return None;
    }
    match &obs.owner {
        Some(o) if o == me.as_str() => Some(LockOutcome::Locked(LockInfo::from_observed(&obs))),
        Some(o) => {
            let (ahead, own_entry) = match queue {
                Some(Some(mine)) => {
                    let q = super::queue::ItemQueue::of(&obs.queue);
                    let ahead = q.live_before(mine, crate::ddb::now_millis());
                    (ahead, q.entries.get(&mine).copied())
                }
                _ => (0, None),
            };
            Some(LockOutcome::Held {
                owner: TxId(o.clone()),
                ahead,
                own_entry,
                lock_ticket: HolderTicket::of(&obs),
                head: HeadMark::of(found),
                line: Line::of(found),
            })
        }
        None if guard.marks() && obs.exists => {
            Some(match HeadMark::of(found) {
                Some(head) => LockOutcome::Marked {
                    head,
                    line: Line::of(found),
                },
                // Refused by a mark that expired or went since, or by the line the
                // lock would have changed: try again.
                None => LockOutcome::held_by_nobody(Line::of(found)),
            })
        }
        None if queue.is_some() && obs.exists && !obs.queue.is_empty() => {
            let q = super::queue::ItemQueue::of(&obs.queue);
            if q.first.is_some() {
                return Some(LockOutcome::Queued { queue: q });
            }
            Some(LockOutcome::held_by_nobody(Line::default()))
        }
        None => Some(LockOutcome::held_by_nobody(Line::of(found))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock_with(attrs: &[(&str, &str)]) -> Observed {
        let mut raw = Item::new();
        raw.insert(OWNER.into(), AttributeValue::S("them".into()));
        raw.insert(
            LOCK_DATE.into(),
            AttributeValue::N("1700000000123.45".into()),
        );
        for (a, v) in attrs {
            raw.insert(a.to_string(), AttributeValue::N(v.to_string()));
        }
        Observed::of(Some(&raw))
    }

    #[test]
    fn a_lock_tells_which_ticket_it_carries() {
        assert_eq!(HolderTicket::of(&lock_with(&[])), None);
        let unrecorded = HolderTicket::of(&lock_with(&[(TICKET, "7")])).unwrap();
        assert_eq!(
            unrecorded,
            HolderTicket {
                ticket: 7,
                locked_ms: 1700000000123,
                recorded: false,
                handed: false
            }
        );
        assert_eq!(unrecorded.unrecorded(), Some(unrecorded));
        let recorded = HolderTicket::of(&lock_with(&[(RECORDED_TICKET, "9")])).unwrap();
        assert_eq!((recorded.ticket, recorded.recorded), (9, true));
        assert_eq!(recorded.unrecorded(), None);
    }
}
