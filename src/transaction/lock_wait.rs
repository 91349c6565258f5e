//! One item's lock wait: a lock attempt, and while another transaction holds the item, contention
//! resolved through [`contention`](crate::contention) (the holder completed, rolled back or waited
//! for), with the waiter's places on the item (its mark, its entry in the line behind it) and the
//! handover a holder may give it ([`marks`](super::marks), [`item_lock::notice`]).

use std::sync::atomic::Ordering;

use tracing::debug;

use crate::TxId;
use crate::contention::{HOLDER_RECHECK, LOCK_JUDGEMENT_PAUSE, Standing};
use crate::error::{Error, Item, Result};
use crate::item_lock::{self, Existence, LockInfo, LockOutcome};
use crate::record::{self, TxState};

use super::Transaction;
use super::marks::watched_by;
use super::reorder::Placement;

/// How often a waiter that paces its looks (`Settings::wait_in_ticket_order`) and holds other
/// locks reads its own record to learn whether it was rolled back (one holding none reads it every
/// [`HOLDER_RECHECK`]).
const OWN_RECORD_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether a lock wait (until `deadline`) outlasts `e`: a write DynamoDB refused, past its own
/// resends, because its item is part of a `TransactWriteItems` in flight (a holder's commit, most
/// often). That is contention on the item, which the transaction frees as it lands, not a failure
/// of the waiting transaction.
fn in_flight(e: &Error, deadline: tokio::time::Instant) -> bool {
    crate::ddb::is_conflict(e) && tokio::time::Instant::now() < deadline
}

impl Transaction {
    /// Locks one item, resolving contention with other transactions: decided or dead holders are
    /// completed, pending ones are rolled back or waited for as the contention policy says.
    /// `without_record`: this transaction has no record (`Settings::record_on_demand`) and holds
    /// nothing, so nobody can roll it back or wait for it: it contends with a ticket it does not
    /// record, and neither shows it waits nor reads its own record while it waits.
    ///
    /// A waiter that marked the item (`Settings::mark_oldest_waiter`) and stops waiting without
    /// the lock (rolled back, out of time) takes its mark off, so that younger transactions do
    /// not wait for it to expire.
    pub(super) async fn lock_one(
        &self,
        table: &str,
        key: &Item,
        first: Existence,
        without_record: bool,
        order: Placement,
    ) -> Result<LockInfo> {
        let mut placed = super::marks::Placed {
            takes_handover: without_record && self.inner.settings.hands_over(),
            ..Default::default()
        };
        // Boxed: the wait's future is large, and callers nest lock waits deep (a wound completes
        // another transaction from inside a wait); on a debug build's test thread the stack
        // overflowed.
        let locked =
            Box::pin(self.lock_waiting(table, key, first, without_record, order, &mut placed))
                .await;
        if locked.is_err() {
            let item = crate::keys::ItemRef::new(table, key);
            self.inner.notices.let_go(self.id.as_str(), &item);
            let untouched = self.leave(table, key, placed).await;
            if placed.takes_handover && !untouched {
                self.release_handed(table, key).await;
            }
        }
        locked
    }

    /// [`Transaction::lock_one`]'s wait; `placed`: where this waiter (may have) put its mark or
    /// its entry in the line behind it.
    async fn lock_waiting(
        &self,
        table: &str,
        key: &Item,
        first: Existence,
        without_record: bool,
        order: Placement,
        placed: &mut super::marks::Placed,
    ) -> Result<LockInfo> {
        use crate::contention::{Contender, Resolution};
        let schema = self.schema(table).await?;
        let settings = &self.inner.settings;
        let c = &self.inner.client;
        let me = Contender {
            id: &self.id,
            ticket: &self.ticket,
            retry: self.retry,
            recorded: &self.ticket_recorded,
            without_record,
        };
        let deadline = tokio::time::Instant::now() + settings.lock_wait;
        let (ordered, heartbeat) = match settings.contention {
            crate::settings::ContentionPolicy::Ordered { dead_after, .. } => (true, dead_after / 3),
            _ => (false, settings.lock_wait),
        };
        self.lock_requests.fetch_add(1, Ordering::SeqCst);
        let mut last_touch = tokio::time::Instant::now();
        let mut met_at = tokio::time::Instant::now();
        let waiting_since = met_at;
        let mut marked_waiting_on: Option<u64> = None;
        let (mut tries, mut waits, mut handovers) = (0u32, 0u32, 0u32);
        let mut last_owner = None;
        // The holder the last `Retry` resolved: meeting it again is no progress.
        let mut last_resolved: Option<TxId> = None;
        // Waiting in ticket order: the holder this waiter last registered with, and when.
        let fifo = settings.queues();
        // Waiters whose place the item keeps (a queue, or the oldest waiter's mark) stand by an
        // older holder's judgement for a while and read their own record on a schedule.
        let ordered_looks = fifo || settings.head_marks();
        let mut registered: Option<(TxId, tokio::time::Instant)> = None;
        let mut queue_retries = 0u32;
        let mut pace = item_lock::queue::Pace::default();
        // When this waiter last read its own record (to stop once rolled back).
        let mut last_check = tokio::time::Instant::now();
        // Transactions before this one at the item, as the last attempt showed it.
        let mut ahead: usize;
        // The expiry of this waiter's own entry on the item, as the last attempt showed it.
        let mut own_entry: Option<u64> = None;
        // The last judgement of a holder, while it stands (met again, it is not read again).
        let mut standing: Option<Standing> = None;
        // This waiter's mark on the item, as it wrote or last found it, while it is the marked
        // waiter: its next look is conditional on it.
        let mut own_mark: Option<item_lock::head::HeadMark> = None;
        // The line behind the mark as the last look found it: the next lock promotes its oldest
        // waiter to the mark and takes this waiter's own entry out.
        let mut line = item_lock::line::Line::default();
        let mut line_pace = super::marks::LinePace::default();
        // Whether this waiter put its entry in the line (or may have).
        let mut joined_line = false;
        // How long the last look took.
        let mut last_look: Option<std::time::Duration> = None;
        // The last look found the item held by a lock handed over to its holder: a chain of
        // handovers, which the holder's commit may go on with.
        let mut holder_hands_over = false;
        // A waiter that names itself is told by a holder of this manager that hands it the item
        // (`item_lock::notice`), while it watches or sleeps; `told` is where, until it is.
        let mut awaiting = placed.takes_handover.then(|| {
            let item = crate::keys::ItemRef::new(table, key);
            self.inner.notices.await_handover(self.id.as_str(), item)
        });
        let mut told = awaiting.as_mut().and_then(|a| a.told.take());
        // The item as a holder told it while this waiter slept.
        let mut notice: Option<Item> = None;
        let here = crate::keys::ItemRef::new(table, key);
        // Behind another transaction of this manager, a waiter that holds no other lock waits in
        // process (`Notices::wait_while_held`) once it has waited with its place on the item
        // (`waited`), looking again at the latest this long after its last look: its places
        // there are renewed, and an older waiter judges a younger holder once its grace is over.
        let in_process_for = settings.wound_grace.min(settings.queue_ttl / 3);
        let mut last_look_at = tokio::time::Instant::now();
        let mut waited = false;
        // The line as this waiter last saw it may be stale: it waited in process, untold.
        let mut view_stale = false;
        loop {
            // The oldest waiter's mark the look found on the item.
            let mut found_head = None;
            // Whether this look read our own record (with the holder's).
            let mut own_read = false;
            // This transaction asked for other locks: it may hold items others wait for.
            let holds_others =
                order != Placement::Released && self.lock_requests.load(Ordering::SeqCst) > 1;
            // Held by another transaction of this manager: its commit tells this waiter the
            // handover, or lets the item go here; a look at DynamoDB meanwhile would find it held.
            let until = (last_look_at + in_process_for).min(deadline);
            // Its place, as it last saw it: its mark, or its entry in the line behind the mark
            // (a holder hands the item to the oldest of them, or lets it go here).
            let has_place = own_mark.is_some()
                || self
                    .known_ticket()
                    .is_some_and(|mine| line.own(Some(mine)).is_some());
            if waited
                && has_place
                && notice.is_none()
                && !holds_others
                && ordered
                && tokio::time::Instant::now() < until
                && self
                    .inner
                    .notices
                    .held_by_other(&here, self.id.as_str())
                    .is_some()
            {
                let at = (table, &here);
                notice = self
                    .wait_in_process(at, own_mark.is_some(), &line, last_look, &mut told, until)
                    .await;
                // Not told: the line may have changed while this waiter sent nothing.
                view_stale = notice.is_none();
            }
            self.wrote.store(true, Ordering::SeqCst);
            // The marked waiter's look is conditional on its very mark: one that lands late (after
            // an ambiguous failure), when the waiter has taken the item since, takes nothing.
            let own_look = own_mark.take();
            let mut step = item_lock::line::LineStep::from_view(
                &line,
                self.known_ticket(),
                joined_line,
                crate::ddb::now_millis(),
            );
            // A lock on a stale view is held to it: one that removed the line whole would drop
            // the entries that joined since. Refused, it returns the line to lock from.
            if std::mem::take(&mut view_stale) {
                step = step.held_to_view(&line, self.known_ticket(), joined_line);
            }
            let (mut guard, at) = match own_look {
                Some(own) => (item_lock::Guard::OwnMark(own, step), Existence::Present),
                None => (self.lock_guard().stepping(step), first),
            };
            // A lock without record carries the ticket its unit of work has by now (0: none yet),
            // by which whoever meets it judges us until our record exists; a lock of a record
            // whose ticket we know carries that ticket, by which whoever meets it may judge how
            // we compare with it without reading our record.
            let ticket = match (without_record, self.ticket_recorded.get()) {
                (true, _) => item_lock::LockTicket::Unrecorded(self.proposed_ticket().unwrap_or(0)),
                (false, Some(&t)) => item_lock::LockTicket::Recorded(t),
                (false, None) => item_lock::LockTicket::None,
            };
            let sent = tokio::time::Instant::now();
            last_look_at = sent;
            let watches = placed.takes_handover && holder_hands_over && watched_by(guard, &line);
            let read = if let Some(found) = notice
                .take()
                .or_else(|| item_lock::notice::told_now(&mut told))
            {
                Ok(item_lock::met_told(&found, &self.id, guard))
            } else if watches {
                let at = (table, key, joined_line, deadline);
                self.watch_for_handover(at, &mut guard, &mut line, last_look, &mut told)
                    .await
            } else if self.looks_by_reading(&line, guard, holds_others) {
                item_lock::look_by_reading(c, table, key, &self.id, guard).await
            } else {
                Ok(None)
            };
            // A watch that found the item free stepped the guard from the line it read.
            if watches {
                step = guard.line_step();
            }
            let answered = match read.transpose() {
                Some(met) => met,
                None => item_lock::lock(c, table, key, &schema, &self.id, at, guard, ticket).await,
            };
            // How long a look takes: the line's waiters pace by it.
            let look_rtt = sent.elapsed();
            if !watches {
                last_look = Some(look_rtt);
            }
            let out = match answered {
                Ok(o) => o,
                Err(
                    e @ Error::DynamoDb {
                        ambiguous: true, ..
                    },
                ) if tries + 1 < settings.lock_attempts => {
                    // The lock may have landed: the next attempt recognises our own lock.
                    debug!(tx = %self.id, error = %e, "ambiguous lock attempt; retrying");
                    crate::metrics::retry(crate::metrics::LOCK_AMBIGUOUS);
                    tries += 1;
                    continue;
                }
                Err(e) if in_flight(&e, deadline) => {
                    debug!(tx = %self.id, table, "lock attempt met a transaction in flight; waiting");
                    crate::settings::backoff(settings, 1).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !matches!(out, LockOutcome::Locked(_)) {
                self.met_contention.store(true, Ordering::SeqCst);
            }
            holder_hands_over = matches!(
                &out,
                LockOutcome::Held { lock_ticket: Some(t), owner, .. }
                    if !t.recorded && t.handed && !owner.0.is_empty()
            );
            let (owner, resolution) = match out {
                LockOutcome::Locked(l) => {
                    let promoted = step.promote.map(|p| p.ticket);
                    debug!(tx = %self.id, table, ?promoted, "took the item");
                    // Its own entry, if any, goes with the unlock.
                    self.places.locked(table, key);
                    // Its waiters of this manager wait for it in process.
                    self.inner.notices.holds(self.id.as_str(), &here);
                    if placed.takes_handover {
                        self.leave_line_once_handed(table, key, &l).await;
                    }
                    // No longer blocked: others must not think we are. Decided meanwhile (an
                    // older transaction, the sweeper or an operator rolled us back while we
                    // waited), the lock just taken is a late one: released here.
                    if marked_waiting_on.is_some()
                        && !record::clear_waiting(c, &self.inner.tx_table, &self.id).await?
                    {
                        item_lock::release_write(table, key, l.transient, false, &self.id)
                            .send(c, None)
                            .await?;
                        return Err(self.rolled_back());
                    }
                    return Ok(l);
                }
                // The mark the look needed went (a put, an expiry): look again as any waiter.
                LockOutcome::Held { owner, line: l, .. }
                    if owner.0.is_empty() && own_look.is_some() =>
                {
                    line = l;
                    continue;
                }
                // The entry the lock would have promoted went (its waiter took the item, or
                // left): look again with the line as it is. Not a failed attempt.
                LockOutcome::Held { owner, line: l, .. }
                    if owner.0.is_empty() && step.conditional() && line != l =>
                {
                    line = l;
                    continue;
                }
                LockOutcome::Held { owner, .. } if owner.0.is_empty() => {
                    tries += 1;
                    if tries >= settings.lock_attempts.max(1) {
                        break;
                    }
                    continue;
                }
                LockOutcome::Queued { queue } => {
                    // Refused by the item's queue: contention with its oldest entry, older than
                    // this transaction (or this attempt had no ticket yet: take one now).
                    let mine = me.ticket(&self.inner).await?;
                    let now = crate::ddb::now_millis();
                    ahead = queue.live_before(mine, now);
                    pace.observe(None, ahead, tokio::time::Instant::now());
                    match queue.oldest_live_before(mine, now) {
                        Some(on) => {
                            debug!(tx = %self.id, table, mine, on, ahead, "refused by an older entry");
                            // Take a place on the item (renewed while waiting there), so that
                            // whoever comes after queues behind this waiter even if it never
                            // meets a holder to register with. Best effort: a rewrite that
                            // finds the item changed (taken, released, rewritten) leaves it to
                            // the next look, which registers with a holder or joins again.
                            let ttl = settings.queue_ttl.as_millis() as u64;
                            if item_lock::queue::should_join(&queue, mine, now, ttl) {
                                let join = Some((mine, now + ttl));
                                let joined =
                                    item_lock::queue::rewrite(c, table, key, &queue, now, join)
                                        .await;
                                debug!(tx = %self.id, table, ?joined, "joined the item's queue");
                                if matches!(joined, Ok(true)) {
                                    self.places.took(table, key, mine);
                                }
                            }
                            (None, Resolution::Wait { on, holder: false })
                        }
                        None => {
                            // No live entry is older: drop the expired ones (conditional on the
                            // queue as read), then try again.
                            if queue.first.is_some_and(|f| f < mine) {
                                let dropped =
                                    item_lock::queue::rewrite(c, table, key, &queue, now, None)
                                        .await;
                                debug!(tx = %self.id, table, ?dropped, "dropped expired queue entries");
                            }
                            queue_retries += 1;
                            if tokio::time::Instant::now() >= deadline {
                                break;
                            }
                            if queue_retries > settings.lock_attempts {
                                crate::settings::backoff(settings, 1).await;
                            }
                            continue;
                        }
                    }
                }
                LockOutcome::Marked { head, line: l } => {
                    line = l;
                    // Refused by an older waiter's live mark (or we had no ticket: take one now).
                    let mine = me.ticket(&self.inner).await?;
                    if !head.refuses(Some(mine), crate::ddb::now_millis()) {
                        continue;
                    }
                    found_head = Some(head);
                    joined_line |= self
                        .join_line(table, key, &schema, &mut line, mine, placed)
                        .await;
                    ahead = 1 + line.ahead_of(mine, crate::ddb::now_millis());
                    (
                        None,
                        Resolution::Wait {
                            on: head.ticket,
                            holder: false,
                        },
                    )
                }
                LockOutcome::Held {
                    owner,
                    ahead: a,
                    own_entry: o,
                    lock_ticket,
                    head,
                    line: l,
                } => {
                    found_head = head;
                    line = l;
                    debug!(tx = %self.id, other = %owner, table, "item locked by another transaction");
                    ahead = 1 + a;
                    own_entry = o;
                    pace.observe(Some(owner.as_str()), ahead, tokio::time::Instant::now());
                    if last_owner.as_ref() != Some(&owner) {
                        met_at = tokio::time::Instant::now();
                    }
                    let grace_left = met_at.elapsed() < settings.wound_grace;
                    // Once our record holds a ticket (it exists), the holder's record is read
                    // with ours: a wound is learnt at the look, with no read of its own.
                    let look = crate::contention::Look {
                        grace_left,
                        check_own: self.ticket_recorded.get().is_some(),
                        met_again: last_resolved.as_ref() == Some(&owner),
                        holds_others,
                        lock_ticket,
                    };
                    // Behind an older waiter's live mark, the item goes to that waiter first: one
                    // that holds no other lock (so no cycle of waits can pass through it) waits
                    // for the mark's ticket without judging the holder (the marked waiter, older,
                    // judges it; gone, its mark goes or expires). One holding others judges the
                    // holder, which may be waiting for it: that cycle is broken at once.
                    let behind = match found_head.filter(|_| settings.head_marks() && !holds_others)
                    {
                        Some(h) if h.refuses(self.known_ticket(), crate::ddb::now_millis()) => {
                            let mine = me.ticket(&self.inner).await?;
                            h.refuses(Some(mine), crate::ddb::now_millis())
                                .then_some(h.ticket)
                        }
                        _ => None,
                    };
                    let by_lock = if behind.is_none() {
                        crate::contention::judge_by_lock(&self.inner, &me, &look, met_at).await?
                    } else {
                        None
                    };
                    if let Some(on) = behind {
                        debug!(tx = %self.id, table, on, "behind an older waiter's mark");
                        (Some(owner), Resolution::Wait { on, holder: false })
                    } else if let Some(r) = by_lock {
                        // A look at a lock without record, whose record it would read at every
                        // look, pauses as long as its lock attempt took instead: looks at a hot
                        // item come no faster than with the read. The oldest waiter, whose mark
                        // the item carries, looks at once; so does a look judged by a recorded
                        // ticket, as one standing by a judgement read from the record does.
                        let unrecorded = look.lock_ticket.is_some_and(|l| !l.recorded);
                        if unrecorded && !self.is_marked_head(found_head) {
                            tokio::time::sleep(sent.elapsed().min(LOCK_JUDGEMENT_PAUSE)).await;
                        }
                        (Some(owner), r)
                    } else if let Some(r) = standing.as_ref().and_then(|j| j.of(&owner)) {
                        // Met again while its last judgement stands: still so.
                        (Some(owner), r)
                    } else {
                        own_read = look.check_own;
                        let resolution = match crate::contention::resolve(
                            &self.inner,
                            &me,
                            &owner,
                            table,
                            key,
                            look,
                        )
                        .await
                        {
                            // Releasing the holder's lock met the next holder's commit in flight.
                            Err(e) if in_flight(&e, deadline) => {
                                crate::settings::backoff(settings, 1).await;
                                continue;
                            }
                            r => r?,
                        };
                        standing = Standing::after(&owner, resolution, met_at, &look, settings);
                        (Some(owner), resolution)
                    }
                }
            };
            // `run`'s first attempt may give itself up rather than wait (decided before the
            // mark, which it would take off again at once).
            let resolution = if self.gives_up(resolution, holds_others, order, waiting_since) {
                Resolution::Yield
            } else {
                resolution
            };
            // Waiting for a holder: mark the item, unless an older waiter has
            // (`Settings::mark_oldest_waiter`). Marked, we are the item's oldest waiter.
            own_mark = if owner.is_some()
                && settings.head_marks()
                && matches!(resolution, Resolution::Wait { .. } | Resolution::Grace)
            {
                let mine = me.ticket(&self.inner).await?;
                let at = (table, key, &*schema);
                self.mark_or_join(at, found_head, mine, &mut line, placed, &mut joined_line)
                    .await
            } else {
                None
            };
            let marked_head = own_mark.is_some();
            placed.marked |= marked_head;
            let resolved_before = owner.is_some() && last_resolved == owner;
            if resolution == Resolution::Retry {
                last_resolved = owner.clone();
            }
            if owner.is_some() {
                last_owner = owner.clone();
            }
            match resolution {
                Resolution::Yield => {
                    return Err(Error::ItemLocked {
                        table: table.to_string(),
                        key: key.clone(),
                        owner: owner.unwrap_or_else(|| TxId(String::new())),
                    });
                }
                Resolution::Retry => {
                    // Under tickets every holder resolved is progress (older ones finish, younger
                    // ones yield): a new holder met after one was released does not count
                    // against the attempts, only the wait's deadline bounds it. Giving up here
                    // would make `run` start the whole unit of work again. A holder resolved
                    // before and met again, or any holder under the other policy, counts.
                    if ordered && !resolved_before {
                        if tokio::time::Instant::now() >= deadline {
                            break;
                        }
                        handovers += 1;
                        if handovers > settings.lock_attempts {
                            // Beaten to the item that often: let the others' requests through.
                            crate::settings::backoff(settings, 1).await;
                        }
                        continue;
                    }
                    tries += 1;
                    if tries >= settings.lock_attempts.max(1) {
                        break;
                    }
                    // The holder was just released: take the item at once, before a younger
                    // transaction grabs it again; back off only if that keeps failing.
                    if tries > 2 {
                        crate::settings::backoff(settings, tries - 2).await;
                    }
                }
                Resolution::Grace => {
                    waited = true;
                    if settings.wait_for_running_holders {
                        // The grace may last until the deadline.
                        if tokio::time::Instant::now() >= deadline {
                            break;
                        }
                        // Waiting for a younger holder is not recorded (what others read as this
                        // transaction's wait must be older than it).
                        if marked_waiting_on.is_some() {
                            if !record::clear_waiting(c, &self.inner.tx_table, &self.id).await? {
                                return Err(self.rolled_back());
                            }
                            marked_waiting_on = None;
                        }
                    }
                    // A running holder, younger or without a ticket (rolled back after the grace
                    // if still running): a waiter in ticket order takes its place with it too,
                    // so that its unlock puts the waiter in the item's queue, and a newcomer
                    // without a ticket queues behind it instead of taking the item first.
                    if let Some(holder) = owner.as_ref()
                        && !self
                            .register_with(holder, table, key, own_entry, &mut registered)
                            .await
                    {
                        continue;
                    }
                    if !marked_head {
                        crate::settings::backoff(settings, 0).await;
                    }
                }
                Resolution::Wait { on, .. } => {
                    waited = true;
                    if tokio::time::Instant::now() >= deadline {
                        break;
                    }
                    // Show that this coordinator is alive (and blocked) while it waits. What it
                    // waits for is read only by whoever meets another lock of it, and only ever
                    // spares it a wound: a waiter that asked for no other lock does not write it
                    // at every change of holder (on a hot item, every waiter at every handover).
                    if !without_record
                        && (last_touch.elapsed() >= heartbeat
                            || (holds_others && marked_waiting_on != Some(on)))
                    {
                        let t = self.ticket_recorded.get().copied();
                        if record::set_ticket(c, &self.inner.tx_table, &self.id, t, Some(on))
                            .await?
                            .is_none()
                        {
                            return Err(self.rolled_back());
                        }
                        last_touch = tokio::time::Instant::now();
                        marked_waiting_on = Some(on);
                    }
                    // Waiting in ticket order: take a place in the pending holder's record.
                    if let Some(holder) = owner.as_ref()
                        && !self
                            .register_with(holder, table, key, own_entry, &mut registered)
                            .await
                    {
                        waits += 1;
                        continue;
                    }
                    waits += 1;
                    // Registered waiters pace their looks by their place and the holds measured
                    // (never past a renewal, nor the deadline); others back off.
                    let now = tokio::time::Instant::now();
                    let paced = fifo
                        .then(|| {
                            pace.next_look(
                                ahead,
                                settings.backoff_base,
                                settings.queue_ttl / 3,
                                now,
                            )
                        })
                        .flatten();
                    // An older transaction may have rolled us back while we waited: stop then,
                    // rather than take the item with a lock nobody needs. A look that judged a
                    // holder read our record with the holder's, in one request; otherwise we read
                    // it here, a paced waiter while it sleeps: every `OWN_RECORD_EVERY` if it
                    // holds other locks (whoever meets them may wound it), every
                    // `HOLDER_RECHECK` if not (only an operator or a death judgement rolls it
                    // back). A wound landing during the sleep is seen at the next look that
                    // judges a holder or reads our record; if that look takes the item instead,
                    // the lock is released by our own rollback (the commit finds the record
                    // rolled back) or by whoever meets it.
                    if own_read {
                        last_check = tokio::time::Instant::now();
                    }
                    // In the line behind a mark, how long until the next look: the next in line
                    // looks at once (the lock that takes the item marks it), the others by their
                    // place and the holds measured.
                    let line_sleep = line_pace.in_line(
                        &line,
                        self.known_ticket(),
                        holds_others,
                        look_rtt,
                        settings.queue_ttl / 3,
                    );
                    let every = if holds_others {
                        OWN_RECORD_EVERY
                    } else {
                        HOLDER_RECHECK
                    };
                    let check = !without_record
                        && !own_read
                        && (!ordered_looks || last_check.elapsed() >= every);
                    let sleep = async {
                        match paced {
                            Some(d) => {
                                let d = d.mul_f64(rand::random_range(0.9..1.1));
                                tokio::time::sleep(d.min(deadline.saturating_duration_since(now)))
                                    .await;
                            }
                            // The oldest waiter looks again at once: the item is its next.
                            None if marked_head => {}
                            // Behind an older waiter's mark, in its line.
                            None if found_head.is_some() && line_sleep.is_some() => {
                                tokio::time::sleep(line_sleep.unwrap_or_default()).await;
                            }
                            // Behind an older waiter's mark: the item is not ours next.
                            None if found_head.is_some() => {
                                crate::settings::backoff(settings, 3).await
                            }
                            None => crate::settings::backoff(settings, waits.min(3)).await,
                        }
                    };
                    // A holder of this manager that hands this waiter the item cuts the sleep.
                    let sleep = item_lock::notice::sleep_unless_told(sleep, &mut told);
                    let mine = if !check {
                        notice = sleep.await;
                        None
                    } else if paced.is_some() {
                        let (told, mine) = tokio::join!(
                            sleep,
                            record::load_header(c, &self.inner.tx_table, &self.id)
                        );
                        notice = told;
                        Some(mine?)
                    } else {
                        notice = sleep.await;
                        Some(record::load_header(c, &self.inner.tx_table, &self.id).await?)
                    };
                    if let Some(mine) = mine {
                        last_check = tokio::time::Instant::now();
                        if mine.as_ref().map(|h| h.state) != Some(TxState::Pending) {
                            return Err(self.rolled_back());
                        }
                    }
                }
            }
        }
        Err(Error::ItemLocked {
            table: table.to_string(),
            key: key.clone(),
            owner: last_owner.unwrap_or_else(|| TxId(String::new())),
        })
    }
}
