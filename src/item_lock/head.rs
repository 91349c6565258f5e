//! The oldest waiter's mark on an item ([`Settings::mark_oldest_waiter`](crate::Settings::mark_oldest_waiter)):
//! a waiter writes its ticket on the item it waits for, locked or not, when no older live mark is
//! there, and every lock attempt of a younger (or ticketless) transaction is refused while the mark
//! lives. The item then goes to the oldest waiter that marked it, not to whoever looks first after
//! the release. See docs/PROTOCOL.md "The oldest waiter's mark".
//!
//! On an item, not a lock attribute (an unlock leaves it; only a lock and a mark write it):
//! - `_TxH` (M): `{t: ticket, e: expiry}` (N, N; epoch ms), and `i` (S), the waiter's
//!   transaction id, when a holder may hand the item over to it (`Settings::hand_over`, see
//!   [`handover`](super::handover)).
//!
//! The mark decides nothing about who holds the item: a lock is still one conditional write, and
//! whoever holds it is judged as before. It only refuses lock attempts, so it can make a
//! transaction wait for an older one, never the other way round; a waiter that crashes or gives up
//! stops renewing its mark, which stops counting at its expiry.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::ddb::{Placeholders, Write, Written};
use crate::error::{Item, Result};
use crate::keys::KeySchema;

pub(crate) const HEAD: &str = "_TxH";
/// The mark's (and a line entry's) expiry.
pub(crate) const EXPIRY: &str = "e";
/// The mark's (and a line entry's) waiter id, when a holder may hand the item over to it.
pub(crate) const ID: &str = "i";
/// A mark as an item carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadMark {
    /// The marking waiter's ticket.
    pub ticket: u64,
    /// When the mark stops counting (epoch ms, the marking waiter's clock).
    pub expiry: u64,
}

impl HeadMark {
    /// The mark `raw` carries, if any (and readable).
    pub(crate) fn of(raw: &Item) -> Option<HeadMark> {
        let m = raw.get(HEAD)?.as_m().ok()?;
        let num = |k: &str| m.get(k)?.as_n().ok()?.parse().ok();
        Some(HeadMark {
            ticket: num("t")?,
            expiry: num("e")?,
        })
    }

    /// The mark as an item carries it (`{t, e}`).
    pub(crate) fn value(&self) -> AttributeValue {
        self.value_naming(None)
    }

    /// The mark as an item carries it, naming its waiter `id` when given (`{t, e, i}`).
    pub(crate) fn value_naming(&self, id: Option<&crate::TxId>) -> AttributeValue {
        let mut m: std::collections::HashMap<_, _> = [
            ("t".to_string(), AttributeValue::N(self.ticket.to_string())),
            (
                EXPIRY.to_string(),
                AttributeValue::N(self.expiry.to_string()),
            ),
        ]
        .into();
        if let Some(id) = id {
            m.insert(ID.to_string(), AttributeValue::S(id.0.clone()));
        }
        AttributeValue::M(m)
    }

    /// The waiter id the mark `raw` carries (`i`), if any.
    pub(crate) fn id_of(raw: &Item) -> Option<String> {
        let m = raw.get(HEAD)?.as_m().ok()?;
        m.get(ID)?.as_s().ok().cloned()
    }

    /// Whether the mark still counts at `now`.
    pub(crate) fn live(&self, now: u64) -> bool {
        self.expiry >= now
    }

    /// Whether it refuses a lock attempt with ticket `mine` (`None`: none) at `now`.
    pub(crate) fn refuses(&self, mine: Option<u64>, now: u64) -> bool {
        self.live(now) && mine.is_none_or(|t| self.ticket < t)
    }

    /// Whether a waiter with ticket `mine` should write its mark at `now`, over `found`: none
    /// there, or expired, or younger than `mine`, or its own with less than two thirds of `ttl`
    /// left (a renewal).
    pub(crate) fn should_mark(found: Option<HeadMark>, mine: u64, now: u64, ttl: u64) -> bool {
        match found {
            None => true,
            Some(h) if !h.live(now) || h.ticket > mine => true,
            Some(h) => h.ticket == mine && h.expiry.saturating_sub(now) < ttl * 2 / 3,
        }
    }
}

/// The names of the mark's parts in an expression: the mark and its ticket and expiry.
pub(crate) fn names(ph: &mut Placeholders) -> (String, String, String) {
    let h = ph.name(HEAD);
    ph.names.insert("#_TxHt".into(), "t".into());
    ph.names.insert("#_TxHe".into(), EXPIRY.into());
    (h.clone(), format!("{h}.#_TxHt"), format!("{h}.#_TxHe"))
}

/// What a lock attempt with ticket `mine` (`None`: none) adds to its condition at `now`: no live
/// mark older than it.
pub(crate) fn lock_condition(ph: &mut Placeholders, mine: Option<u64>, now: u64) -> String {
    let (h, t, e) = names(ph);
    let now = ph.value("HeadNow", AttributeValue::N(now.to_string()));
    match mine {
        Some(m) => {
            let m = ph.value("HeadMine", AttributeValue::N(m.to_string()));
            format!("(attribute_not_exists({h}) OR {t} >= {m} OR {e} < {now})")
        }
        None => format!("(attribute_not_exists({h}) OR {e} < {now})"),
    }
}

/// What a look of the marked waiter adds to its lock's condition: the item still carries `own`,
/// the very mark this waiter wrote (its ticket and expiry). A lock that passes it removes it, so
/// of the looks one mark allows, at most one takes the item: a look that lands late (one that
/// failed for the waiter, ambiguously, and reached DynamoDB after the waiter's next look took the
/// item, or after it stopped waiting) finds the mark gone and takes nothing.
pub(crate) fn own_mark_condition(ph: &mut Placeholders, own: HeadMark) -> String {
    let (_, t, e) = names(ph);
    let ticket = ph.value("HeadMine", AttributeValue::N(own.ticket.to_string()));
    let expiry = ph.value("HeadExpiry", AttributeValue::N(own.expiry.to_string()));
    format!("({t} = {ticket} AND {e} = {expiry})")
}

/// Writes `mark` for the waiter `me` on `table`/`key`: conditional on the item existing, on no
/// live mark older than the mark's ticket at `now` (its own is renewed), and on `me` not holding
/// it (a mark landing after its waiter took the item, say a resend, would outlive the waiter's
/// hold). `takes_handover`: the mark names `me`, whom the holder may hand the item over to
/// (`Settings::hand_over`). True when it landed.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn mark(
    client: &Client,
    table: &str,
    key: &Item,
    schema: &KeySchema,
    me: &crate::TxId,
    mark: HeadMark,
    now: u64,
    takes_handover: bool,
) -> Result<bool> {
    let value = mark.value_naming(takes_handover.then_some(me));
    let mut ph = Placeholders::default();
    let hk = ph.name_for_user(&schema.hash.0);
    let owner = ph.name(super::OWNER);
    let me = ph.value("Me", AttributeValue::S(me.0.clone()));
    let cond = format!(
        "attribute_exists({hk}) AND (attribute_not_exists({owner}) OR {owner} <> {me}) AND {}",
        lock_condition(&mut ph, Some(mark.ticket), now)
    );
    let h = ph.name(HEAD);
    let update = format!("SET {h} = {}", ph.value("Head", value));
    let w = Write::update(table, key.clone(), update, cond, ph);
    Ok(matches!(w.send(client, None).await?, Written::Ok(_)))
}

/// The release of `me`'s unapplied lock on the existing item `table`/`key` that leaves `mark`
/// on it, as one write: a transaction that lets a read go to take an item below it in key order
/// (`Settings::reorder_held_reads`) and keeps its turn at the read's item
/// (`Settings::reorder_keeps_turn`), so that a younger transaction does not take and change it
/// meanwhile. Conditional, beyond the release's own condition, on no live mark older than `mark`
/// at `now`: where there is one, the caller releases without a mark.
pub(crate) fn release_marking(
    table: &str,
    key: &Item,
    me: &crate::TxId,
    mark: HeadMark,
    now: u64,
) -> Write {
    let mut w = super::release_write(table, key, false, false, me);
    let cond = lock_condition(&mut w.ph, Some(mark.ticket), now);
    let value = mark.value();
    let set = format!(" SET {} = {}", w.ph.name(HEAD), w.ph.value("Head", value));
    if let crate::ddb::WriteKind::Update { update, .. } = &mut w.kind {
        update.push_str(&set);
    }
    w.condition = Some(match w.condition.take() {
        Some(c) => format!("{c} AND {cond}"),
        None => cond,
    });
    w
}

/// Removes the mark of ticket `mine` from `table`/`key`, if the item carries it (conditional on
/// that). `Err(found)` when it was not there: the item as the failed condition returned it
/// (`None`: absent).
pub(crate) async fn unmark(
    client: &Client,
    table: &str,
    key: &Item,
    mine: u64,
) -> Result<std::result::Result<(), Option<Item>>> {
    let mut ph = Placeholders::default();
    // Only the mark and its ticket: DynamoDB refuses a name the expressions do not use.
    let h = ph.name(HEAD);
    ph.names.insert("#_TxHt".into(), "t".into());
    let cond = format!(
        "{h}.#_TxHt = {}",
        ph.value("HeadMine", AttributeValue::N(mine.to_string()))
    );
    let w = Write::update(table, key.clone(), format!("REMOVE {h}"), cond, ph);
    Ok(match w.send(client, None).await? {
        Written::Ok(_) => Ok(()),
        Written::ConditionFailed(found) => Err(found),
    })
}

/// Removes `mark` from `table`/`key` if the item still carries that very mark (its ticket and
/// expiry): a sweep taking off a mark no waiter renews, which leaves a renewed one alone. True
/// when it was there.
pub(crate) async fn take_off(
    client: &Client,
    table: &str,
    key: &Item,
    mark: HeadMark,
) -> Result<bool> {
    let mut ph = Placeholders::default();
    let cond = own_mark_condition(&mut ph, mark);
    let update = format!("REMOVE {}", ph.name(HEAD));
    let w = Write::update(table, key.clone(), update, cond, ph);
    Ok(matches!(w.send(client, None).await?, Written::Ok(_)))
}

/// Whether a sweep at `now` takes `mark` off its item: it no longer counts (expired), or it was
/// written, as `ttl` (the sweeper's own `Settings::queue_ttl`) dates it, at least `older_than` ms
/// ago. A waiter renews its mark while it waits, so a live waiter's mark is never older than a
/// fraction of the ttl; taking one off anyway costs its waiter its turn, never a lock.
pub(crate) fn stale(mark: HeadMark, now: u64, ttl: u64, older_than: u64) -> bool {
    let written = mark.expiry.saturating_sub(ttl);
    !mark.live(now) || now.saturating_sub(written) >= older_than
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark_of(ticket: u64, expiry: u64) -> Option<HeadMark> {
        Some(HeadMark { ticket, expiry })
    }

    #[test]
    fn a_live_mark_refuses_younger_and_ticketless_attempts_only() {
        let h = HeadMark {
            ticket: 5,
            expiry: 100,
        };
        assert!(h.refuses(Some(6), 100));
        assert!(h.refuses(None, 50));
        assert!(!h.refuses(Some(5), 50), "its own waiter passes");
        assert!(!h.refuses(Some(4), 50), "an older one passes");
        assert!(!h.refuses(Some(6), 101), "expired");
        assert!(!h.refuses(None, 101), "expired");
    }

    #[test]
    fn a_waiter_marks_over_nothing_an_expired_or_younger_mark_and_renews_its_own() {
        let ttl = 900;
        assert!(HeadMark::should_mark(None, 7, 0, ttl));
        assert!(HeadMark::should_mark(mark_of(9, 1_000), 7, 0, ttl));
        assert!(HeadMark::should_mark(mark_of(3, 99), 7, 100, ttl));
        assert!(!HeadMark::should_mark(mark_of(3, 1_000), 7, 100, ttl));
        // Its own: renewed below two thirds of the ttl (600 ms) left.
        assert!(!HeadMark::should_mark(mark_of(7, 1_000), 7, 300, ttl));
        assert!(HeadMark::should_mark(mark_of(7, 1_000), 7, 500, ttl));
    }

    #[test]
    fn a_sweep_takes_off_expired_marks_and_marks_written_long_enough_ago() {
        let (ttl, mark) = (
            3_000,
            HeadMark {
                ticket: 1,
                expiry: 10_000,
            },
        );
        // Written at 7,000 (by the ttl), live until 10,000.
        assert!(!stale(mark, 8_000, ttl, 300_000), "live and recent");
        assert!(stale(mark, 10_001, ttl, 300_000), "expired");
        assert!(stale(mark, 8_000, ttl, 1_000), "written 1 s ago");
        assert!(!stale(mark, 7_999, ttl, 1_000));
        assert!(stale(mark, 0, ttl, 0), "everything at once");
    }
}
