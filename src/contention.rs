//! Contention between transactions: what a coordinator does when an item it needs is locked by
//! another transaction.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use tracing::debug;

use crate::TxId;
use crate::error::{Error, Item, Result};
use crate::item_lock::HolderTicket;
use crate::record::{self, Header, Judged, JudgedRollback, TxState};
use crate::settings::{ContentionPolicy, Inner, Settings};

mod orphans;

use orphans::complete_decided;
pub(crate) use orphans::{AbsentOwner, decide_absent, orphan_release_write, steal_orphan};

/// What to do after meeting a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// The holder was decided or removed: try the lock again.
    Retry,
    /// Wait (blocked), then try again: the holder is older, or younger but itself blocked by a
    /// transaction older than us. `on` is the ticket of that older transaction.
    Wait {
        /// Ticket of the older transaction this one effectively waits for.
        on: u64,
        /// `on` is the holder's own ticket. A record's ticket never changes, so until the holder
        /// is decided or dead this judgement stands: the caller may meet the same holder again
        /// without reading its record (see [`Standing`]).
        holder: bool,
    },
    /// The holder is younger but running (not blocked): give it a short grace to finish before
    /// rolling it back.
    Grace,
    /// The holder is a retry (older than every first attempt) and we are a first attempt that
    /// asked for other locks: give this attempt up rather than wait holding them. A retry then
    /// never waits for a first attempt that waits for another retry, the chain through which
    /// retries wounded each other (each wound a further attempt of a unit of work).
    Yield,
}

/// How long a waiter in ticket order (`Settings::wait_in_ticket_order`) meeting again the holder
/// it judged older and alive stands by that judgement without reading the holder's record.
/// Tickets never change, so only the holder's end can undo it: its own unlock (seen by the next
/// lock attempt), or its crash, decided or not (found at the next judgement, at most this much
/// later). Such a waiter reads its own record on a schedule of its own; the others read it with
/// the holder's, at every look.
pub(crate) const HOLDER_RECHECK: Duration = Duration::from_secs(1);

/// How long a waiter holding no other lock stands by its judgement that a younger holder is
/// running, within the holder's grace. The holder may start waiting meanwhile, for a transaction
/// older than us (we then wait too): a new judgement tells, at most this much later. A waiter
/// holding other locks judges again at every look: a holder that starts waiting for a transaction
/// not older than it may close a cycle through those locks, which it then breaks at once (on
/// DynamoDB Local, where holds last a few ms, standing by the judgement there for 100 ms halved
/// the transfers read from then to).
pub(crate) const RUNNING_RECHECK: Duration = Duration::from_millis(100);

/// A judgement of a holder that stands for a while: meeting that holder again until then, a
/// waiter only tries the lock again, without reading the holder's record.
pub(crate) struct Standing {
    holder: TxId,
    resolution: Resolution,
    until: Instant,
}

impl Standing {
    /// The judgement `resolution` of `holder`, first met at `met_at`, if it stands for a while:
    /// older and alive (`Wait` on its own ticket) for [`HOLDER_RECHECK`] when waiting in ticket
    /// order; younger and running (`Grace`) for [`RUNNING_RECHECK`], never past its grace, when the
    /// waiter holds no other lock (`look`).
    pub fn after(
        holder: &TxId,
        resolution: Resolution,
        met_at: Instant,
        look: &Look,
        settings: &Settings,
    ) -> Option<Standing> {
        let now = Instant::now();
        let until = match resolution {
            Resolution::Wait { holder: true, .. } if settings.queues() || settings.head_marks() => {
                now + HOLDER_RECHECK
            }
            Resolution::Grace if !look.holds_others && !settings.wait_for_running_holders => {
                (met_at + settings.wound_grace).min(now + RUNNING_RECHECK)
            }
            _ => return None,
        };
        Some(Standing {
            holder: holder.clone(),
            resolution,
            until,
        })
    }

    /// The judgement, if it is of `holder` and still stands.
    pub fn of(&self, holder: &TxId) -> Option<Resolution> {
        (self.holder == *holder && Instant::now() < self.until).then_some(self.resolution)
    }
}

/// The transaction meeting the lock: its id and (lazily) its ticket.
pub(crate) struct Contender<'a> {
    pub id: &'a TxId,
    /// The ticket this unit of work proposes for its record, shared by every attempt of one unit
    /// of work (a record that already has a ticket keeps its own).
    pub ticket: &'a Arc<OnceCell<u64>>,
    /// This handle is a retry: it proposes `ticket` in the retries' class
    /// ([`crate::ticket::for_attempt`]).
    pub retry: bool,
    /// The ticket in this transaction's record, once this handle knows it: the only ticket it
    /// contends with.
    pub recorded: &'a OnceCell<u64>,
    /// The transaction has no record and holds nothing (`Settings::record_on_demand`): it
    /// contends with its proposed ticket, unrecorded. Nobody meets it, so nobody judges it by
    /// another; its record, once created, records that same ticket.
    pub without_record: bool,
}

impl Contender<'_> {
    /// This transaction's ticket: the one in its record, recording one at first contention.
    ///
    /// Others judge a transaction by the ticket in its record, so a handle must contend with
    /// exactly that ticket (a handle using another one could wait for a transaction that waits for
    /// it). A record's ticket is written once (`if_not_exists`) and never changes; if another
    /// handle of this transaction recorded one first, that one is adopted.
    pub async fn ticket(&self, inner: &Inner) -> Result<u64> {
        if let Some(&t) = self.recorded.get() {
            return Ok(t);
        }
        let proposed = crate::ticket::for_attempt(
            crate::ticket::take_once(inner, self.ticket).await?,
            self.retry,
        );
        if self.without_record {
            return Ok(proposed);
        }
        let t = *self
            .recorded
            .get_or_try_init(|| async {
                match record::set_ticket(
                    &inner.client,
                    &inner.tx_table,
                    self.id,
                    Some(proposed),
                    None,
                )
                .await?
                {
                    Some(Some(t)) => Ok(t),
                    // Not returned (DynamoDB returns the attributes an update names): read it.
                    Some(None) => record::load_header(&inner.client, &inner.tx_table, self.id)
                        .await?
                        .and_then(|h| h.ticket)
                        .ok_or_else(|| {
                            Error::invariant(format!(
                                "the record of {} has no ticket after writing one",
                                self.id
                            ))
                        }),
                    None => Err(Error::RolledBack {
                        tx_id: self.id.clone(),
                    }),
                }
            })
            .await?;
        Ok(t)
    }
}

/// What the caller's look knows besides the lock it met.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look {
    /// The owner has had less than `wound_grace` since the caller first met it.
    pub grace_left: bool,
    /// Read our own record with the owner's (it exists: it holds our ticket).
    pub check_own: bool,
    /// This owner was resolved at the caller's last meeting already, and its lock is still there.
    pub met_again: bool,
    /// The caller asked for other locks before this one (it may hold items others wait for).
    pub holds_others: bool,
    /// The ticket the lock met carries: what it says of its holder (see [`HolderTicket`]).
    pub lock_ticket: Option<HolderTicket>,
}

/// How many times [`resolve`] judges a holder again when its record changed under a wound.
const JUDGEMENTS: u32 = 3;

/// Resolves a lock held by `owner` on an item `me` needs: decides the owner if it is pending (per the
/// policy) and completes it, so that the item is released, or says to wait for it.
///
/// A wound (rolling the owner back) decides exactly what was judged: the owner's record still
/// pending at the version read, and still as the judgement found it (dead: the same last-update
/// time; younger: no ticket or a younger one than ours), and our own record still pending (see
/// [`record::roll_back_judged`]). If anything changed, the owner is judged again on its record as
/// it now is (a bounded number of times).
///
/// With [`Look::check_own`], the first read of the owner's record also reads ours, in the same
/// request: a waiter learns that it was rolled back (`Err(RolledBack)`) at the look that met the
/// lock, without a read of its own.
#[tracing::instrument(level = "debug", name = "contention", skip_all, fields(tx = %me.id, holder = %owner, table))]
pub(crate) async fn resolve(
    inner: &Inner,
    me: &Contender<'_>,
    owner: &TxId,
    table: &str,
    key: &Item,
    look: Look,
) -> Result<Resolution> {
    let Look {
        grace_left,
        check_own,
        met_again,
        holds_others,
        lock_ticket,
    } = look;
    let unrecorded = lock_ticket.and_then(HolderTicket::unrecorded);
    // The owner's header as a failed wound found it (saves a read when judging again).
    let mut found: Option<Option<Header>> = None;
    let mut last_err = None;
    for round in 0..JUDGEMENTS {
        let header = match found.take() {
            Some(h) => h,
            None if check_own && round == 0 => {
                let [theirs, mine] =
                    record::load_two_headers(&inner.client, &inner.tx_table, [owner, me.id])
                        .await?;
                if mine.is_none_or(|h| h.state != TxState::Pending) {
                    return Err(Error::RolledBack {
                        tx_id: me.id.clone(),
                    });
                }
                theirs
            }
            None => record::load_header(&inner.client, &inner.tx_table, owner).await?,
        };
        if header.is_none()
            && let Some(r) = judge_unrecorded(inner, me, unrecorded, holds_others).await?
        {
            // No record, and a lock taken without one: judged by the ticket on the lock.
            return Ok(r);
        }
        let h = match header {
            // No record: an orphan, or a transaction whose record's creation is on its way (a
            // read's lock goes with it), or a younger one that did not need a record yet. Give
            // the latter a moment, then tombstone it.
            None if grace_left => return Ok(Resolution::Grace),
            None => {
                // Its tombstone lands only while our own record is pending, as a wound does.
                let decider = (!me.without_record).then_some(me.id);
                steal_orphan(inner, owner, table, key, false, decider).await?;
                return Ok(Resolution::Retry);
            }
            Some(h) => h,
        };
        if h.state != TxState::Pending {
            if h.finalized {
                // Every item its record names is settled (most often by the one-request commit
                // that decided it): what may be left here is a lock it does not name, released
                // as such, without loading the record to complete it again. A lock on an item
                // it names was met before its commit landed (every waiter races the holder's
                // commit so): the next lock attempt reads the item, and takes it at once; only
                // if that attempt meets the lock again (one sent late, landing after the
                // commit) is it released here.
                let named = || {
                    let here = crate::keys::ItemRef::new(table, key);
                    h.inline.iter().any(|r| r.item_ref() == here)
                };
                if met_again || !named() {
                    steal_orphan(inner, owner, table, key, true, None).await?;
                }
            } else {
                complete_decided(inner, owner, table, key).await?;
            }
            return Ok(Resolution::Retry);
        }
        let mut judged = Judged {
            version: h.version,
            idle_since: None,
            younger_than: None,
            gated: h.gated,
        };
        if let ContentionPolicy::Ordered { dead_after, .. } = inner.settings.contention {
            let idle_ms = crate::ddb::now_millis().saturating_sub(h.updated_ms);
            if idle_ms > dead_after.as_millis() as u64 {
                // Dead: rolled back whatever its ticket, but only if still untouched.
                judged.idle_since = Some(h.updated_ms);
            } else {
                let mine = me.ticket(inner).await?;
                if let Some(theirs) = h.ticket.filter(|&theirs| theirs < mine) {
                    if holds_others
                        && crate::ticket::is_first_attempt(mine)
                        && !crate::ticket::is_first_attempt(theirs)
                    {
                        debug!(tx = %me.id, other = %owner, "a first attempt yields to a retry");
                        crate::metrics::contention_yield();
                        return Ok(Resolution::Yield);
                    }
                    debug!(tx = %me.id, other = %owner, "waiting for an older transaction");
                    crate::metrics::contention_wait();
                    return Ok(Resolution::Wait {
                        on: theirs,
                        holder: true,
                    });
                }
                // Younger: it must yield, but rolling it back wastes its work. If it is blocked by
                // a transaction older than us, wait with it: waits then still only ever point
                // (through the holder) at older transactions, so no cycle can form. If it is
                // running, give it a moment to finish.
                if let Some(on) = waits_with(mine, h.ticket, h.waiting_on) {
                    crate::metrics::contention_wait();
                    return Ok(Resolution::Wait { on, holder: false });
                }
                // With `wait_for_running_holders`, for as long as it records no wait (a tie is not
                // younger: two tied transactions would wait for each other).
                let runs_longer = inner.settings.wait_for_running_holders
                    && h.ticket.is_none_or(|theirs| theirs > mine);
                if (grace_left || runs_longer) && h.waiting_on.is_none() {
                    return Ok(Resolution::Grace);
                }
                judged.younger_than = Some(mine);
            }
        }
        debug!(tx = %me.id, other = %owner, mine = ?judged.younger_than, theirs = ?h.ticket, waiting_on = ?h.waiting_on, dead = judged.idle_since.is_some(), "rolling back a contending transaction");
        let c = &inner.client;
        last_err = None;
        // The wound lands only while our own record is pending (a rolled-back transaction
        // decides nothing); one without a record holds nothing and cannot have been rolled back.
        let decider = (!me.without_record).then_some(me.id);
        match record::roll_back_judged(c, &inner.tx_table, owner, &judged, decider).await {
            Ok(JudgedRollback::Decided) => {
                crate::metrics::contention_wound();
                crate::metrics::rolled_back(crate::metrics::WOUNDED);
                complete_decided(inner, owner, table, key).await?;
                return Ok(Resolution::Retry);
            }
            // Not as judged (it moved on, recorded a ticket, or was decided): judge it again on
            // its record as found (read again if the failure did not return it: an absent header
            // is never taken for a vanished record).
            Ok(JudgedRollback::Changed(h)) => found = h.map(Some),
            // We were rolled back (by an older transaction or the sweeper) since we judged: a
            // rolled-back transaction decides nothing.
            Ok(JudgedRollback::DeciderNotPending) => {
                return Err(Error::RolledBack {
                    tx_id: me.id.clone(),
                });
            }
            Ok(JudgedRollback::Cancelled(why)) => {
                debug!(tx = %me.id, other = %owner, ?why, "wound cancelled; judging again");
            }
            // The answer was lost: the wound may have landed. The record, read again, tells (a
            // landed wound shows it rolled back, to be completed); a wound that did not land is
            // judged anew, never repeated blindly.
            Err(
                e @ Error::DynamoDb {
                    ambiguous: true, ..
                },
            ) => {
                debug!(tx = %me.id, other = %owner, error = %e, "wound answer lost; judging again");
                last_err = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    match last_err {
        Some(e) => Err(e),
        None => Ok(Resolution::Retry),
    }
}

/// A holder whose record is absent, met by a lock it took without one (`Settings::record_on_demand`,
/// `unrecorded`): judged by the ticket its lock carries, as its record's ticket would judge it,
/// while the lock is younger than `dead_after`. Such a holder writes nothing while it runs, so
/// the lock's age stands for a record's idle time; its record, once created, carries the same
/// ticket (both are its unit of work's), and from then on the record judges it.
///
/// Older: wait for it, or yield as a first attempt holding other locks yields to a retry. No
/// cycle can form through it: a holder without record holds one item and waits for nobody (it
/// creates its record before it asks for another lock). `None` for a younger holder, one without
/// a ticket, or one whose lock is `dead_after` old: the caller gives it its grace, then releases
/// it under a tombstone.
async fn judge_unrecorded(
    inner: &Inner,
    me: &Contender<'_>,
    unrecorded: Option<HolderTicket>,
    holds_others: bool,
) -> Result<Option<Resolution>> {
    let alive = |l: &HolderTicket| l.ticket != 0 && lock_alive(&inner.settings, l);
    let Some(lock) = unrecorded.filter(alive) else {
        return Ok(None);
    };
    let mine = me.ticket(inner).await?;
    let judged = by_lock_ticket(mine, lock.ticket, holds_others);
    match judged {
        Some(Resolution::Yield) => {
            debug!(tx = %me.id, theirs = lock.ticket, "a first attempt yields to a retry without record");
            crate::metrics::contention_yield();
        }
        Some(Resolution::Wait { on, .. }) => {
            debug!(tx = %me.id, theirs = on, "waiting for an older holder without record");
            crate::metrics::contention_wait();
        }
        _ => {}
    }
    Ok(judged)
}

/// [`judge_unrecorded`]'s rule, for a contender with ticket `mine` and a lock carrying `theirs`
/// (not 0): older, wait (or yield); younger, `None`. An equal ticket (clock tickets of two
/// processes may tie) is neither: the holder is left its grace for as long as its lock may judge
/// it, as a record's equal ticket fails the wound's condition (`_TxK > :mine`).
fn by_lock_ticket(mine: u64, theirs: u64, holds_others: bool) -> Option<Resolution> {
    if theirs > mine {
        return None;
    }
    if theirs == mine {
        return Some(Resolution::Grace);
    }
    if holds_others
        && crate::ticket::is_first_attempt(mine)
        && !crate::ticket::is_first_attempt(theirs)
    {
        return Some(Resolution::Yield);
    }
    Some(Resolution::Wait {
        on: theirs,
        holder: true,
    })
}

/// Whether a holder that is not older than us (ticket `theirs`) is waited with, and for which
/// ticket: it records a wait (`_TxW`) for a transaction older than us, and it is younger or has
/// no ticket. A holder with a ticket equal to ours is not: two tied transactions, each recording a
/// wait for a transaction finished since, would wait with each other for ever (found by
/// `tests/model_contention`, `WaitsWithTiedHolder`).
fn waits_with(mine: u64, theirs: Option<u64>, waiting_on: Option<u64>) -> Option<u64> {
    if theirs == Some(mine) {
        return None;
    }
    waiting_on.filter(|&on| on < mine)
}

/// The most a look that judged a holder by its lock alone pauses (as long as its lock attempt
/// took): about the time a record read would have taken, so that waiters reading nothing do not
/// try a hot item's lock faster than waiters that read (DynamoDB throttles an item's writes past
/// about 1,000 a second).
pub(crate) const LOCK_JUDGEMENT_PAUSE: Duration = Duration::from_millis(50);

/// How long, after first meeting a holder, a waiter may judge it by the ticket its lock carries
/// alone, without reading its record: a fifth of the grace. A lock without record: the holder may
/// meanwhile have created its record, and started waiting or been decided there; a waiter holding
/// nothing is in no cycle and holds nothing up, and after this it reads the record at every look,
/// so a decided holder is released within the grace. A lock carrying its recorded ticket: a hot
/// item's holders mostly leave within it (a few ms on DynamoDB Local, a round trip or two on
/// DynamoDB); a holder that stays is judged on its record after it, and a decided or dead holder,
/// or a lock that landed after its transaction ended, costs its waiters that much time at most.
fn lock_judgement_stands(settings: &Settings, met_at: Instant) -> bool {
    met_at.elapsed() < settings.wound_grace / 5
}

/// The judgement of a holder by the ticket its lock carries alone, without reading its record.
/// `None` when the lock cannot judge it (it carries no ticket, another policy, a lock
/// `dead_after` old, or the window below is over): its record must be read.
///
/// Within [`lock_judgement_stands`]:
/// - A lock taken without a record (`_TxK`), met by a waiter holding no other lock: an older
///   holder is waited for (see [`judge_unrecorded`]), any other one is within its grace.
/// - A lock carrying its holder's recorded ticket (`_TxKR`): an older holder is waited for (or yielded to,
///   by a first attempt holding other locks when it is a retry), by a waiter whose place the
///   item keeps (a queue or the oldest waiter's mark), as a read of its record would decide of a
///   live pending holder: a record's ticket never changes, so only the holder's end can undo it,
///   seen by the next lock attempt (its unlock) or by the judgement on the record that follows
///   the window (decided, dead, or a lock landed late). A younger one is within its grace, met
///   by a waiter holding no other lock (which is in no cycle: whether the holder runs or waits
///   changes nothing for it then). A tie is judged on the record.
pub(crate) async fn judge_by_lock(
    inner: &Inner,
    me: &Contender<'_>,
    look: &Look,
    met_at: Instant,
) -> Result<Option<Resolution>> {
    let settings = &inner.settings;
    let Some(lock) = look.lock_ticket.filter(|l| lock_alive(settings, l)) else {
        return Ok(None);
    };
    if !lock_judgement_stands(settings, met_at) {
        return Ok(None);
    }
    if !lock.recorded {
        if look.holds_others {
            return Ok(None);
        }
        let judged = judge_unrecorded(inner, me, Some(lock), look.holds_others).await?;
        return Ok(Some(judged.unwrap_or(Resolution::Grace)));
    }
    let older_stands = settings.queues() || settings.head_marks();
    let mine = me.ticket(inner).await?;
    Ok(match by_lock_ticket(mine, lock.ticket, look.holds_others) {
        Some(r @ Resolution::Yield) if older_stands => {
            debug!(tx = %me.id, theirs = lock.ticket, "a first attempt yields to a retry, by its lock");
            crate::metrics::contention_yield();
            Some(r)
        }
        Some(r @ Resolution::Wait { on, .. }) if older_stands => {
            debug!(tx = %me.id, theirs = on, "waiting for an older holder, by its lock");
            crate::metrics::contention_wait();
            Some(r)
        }
        None if !look.holds_others => Some(Resolution::Grace),
        _ => None,
    })
}

/// The ticket a lock carries may judge its holder: ordered contention, and the lock younger than
/// `dead_after` (a holder without record writes nothing while it runs, so the lock's age stands
/// for a record's idle time; older, it is judged dead; a holder with a record is judged on it
/// then, its last update deciding whether it is dead).
fn lock_alive(settings: &Settings, lock: &HolderTicket) -> bool {
    let ContentionPolicy::Ordered { dead_after, .. } = settings.contention else {
        return false;
    };
    crate::ddb::now_millis().saturating_sub(lock.locked_ms) <= dead_after.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_with_an_equal_ticket_is_not_waited_with() {
        // Younger, or without a ticket, and waiting for an older transaction: waited with.
        assert_eq!(waits_with(5, Some(7), Some(3)), Some(3));
        assert_eq!(waits_with(5, None, Some(3)), Some(3));
        // Waiting for one no older than us: not.
        assert_eq!(waits_with(5, Some(7), Some(5)), None);
        // Tied: not, whatever it waits for.
        assert_eq!(waits_with(5, Some(5), Some(3)), None);
    }

    #[test]
    fn a_lock_carrying_an_equal_ticket_is_left_its_grace() {
        let first = |t: u64| t | (1 << 63);
        assert_eq!(
            by_lock_ticket(first(5), first(3), false),
            Some(Resolution::Wait {
                on: first(3),
                holder: true
            })
        );
        assert_eq!(by_lock_ticket(first(5), first(7), false), None);
        assert_eq!(
            by_lock_ticket(first(5), first(5), true),
            Some(Resolution::Grace)
        );
        // A first attempt holding other locks yields to a retry.
        assert_eq!(by_lock_ticket(first(5), 9, true), Some(Resolution::Yield));
    }
}
