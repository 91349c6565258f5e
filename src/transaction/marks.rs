//! The oldest waiter's mark (`Settings::mark_oldest_waiter`), a waiter's side: it marks the item
//! it waits for when no older live mark is there, and looks at it often while it is the oldest.
//! See [`item_lock::head`](crate::item_lock::head) and docs/PROTOCOL.md "The oldest waiter's
//! mark".

use tracing::debug;

use crate::error::Item;
use crate::item_lock::head::{self, HeadMark};
use crate::item_lock::line::{self, Line};
use crate::keys::KeySchema;

use super::Transaction;

/// Reads a waiter that a holder may hand the item over to keeps in flight at most while it
/// watches for the handover, spread over a look's time (`Settings::hand_over`).
const HANDOVER_WATCHERS: usize = 6;
/// The least time between two reads of such a waiter. Where a look takes about 8 ms (through
/// the DynamoDB profile) this sets the pace, about four reads in flight: the counter moved 3–4%
/// more than with three a third of a look apart. Where a look takes a millisecond (DynamoDB
/// Local), one read at a time every 2 ms keeps the one-core server from spending itself on
/// reads.
const WATCH_SPACING_MIN: std::time::Duration = std::time::Duration::from_millis(2);

/// Whether a waiter whose look goes with `guard`, the `line` as its last look found it, is one
/// a holder may hand the item to next: the marked waiter, or the next in line (no live entry
/// before its own).
pub(super) fn watched_by(guard: crate::item_lock::Guard, line: &Line) -> bool {
    match guard {
        crate::item_lock::Guard::OwnMark(..) => true,
        crate::item_lock::Guard::Head(Some(mine), _) => {
            line.own(Some(mine)).is_some() && line.ahead_of(mine, crate::ddb::now_millis()) == 0
        }
        _ => false,
    }
}

/// Where a waiter (may have) put its place on the item it waits for: its mark, or its entry in
/// the line behind the mark. A write whose answer was lost counts: it may have landed.
/// `takes_handover`: its places name it, for the holder to hand it the item
/// (`Settings::hand_over`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Placed {
    pub marked: bool,
    pub joined: bool,
    pub takes_handover: bool,
}

/// How fast the line behind a mark moves, as a waiter in it sees its place fall.
#[derive(Debug, Default)]
pub(super) struct LinePace {
    last: Option<(tokio::time::Instant, usize)>,
    /// Mean time per place gained.
    hold: Option<std::time::Duration>,
}

impl LinePace {
    pub(super) fn observe(&mut self, place: usize, now: tokio::time::Instant) {
        if let Some((t, p)) = self.last
            && p > place
        {
            let sample = (now - t) / (p - place) as u32;
            self.hold = Some(match self.hold {
                Some(h) => h.mul_f64(0.7) + sample.mul_f64(0.3),
                None => sample,
            });
        }
        if self.last.is_none_or(|(_, p)| p != place) {
            self.last = Some((now, place));
        }
    }

    /// How long a waiter with `ahead` live entries before its own sleeps before its next look:
    /// none for the next in line (the lock that takes the item marks it), else half its place
    /// times the time a place takes, never more than two looks' time per place (`look`: how
    /// long its last look took; a waiter that oversleeps its promotion leaves the item free),
    /// and never more than `cap` (its entry's renewal).
    pub(super) fn sleep(
        &self,
        ahead: usize,
        look: std::time::Duration,
        cap: std::time::Duration,
    ) -> std::time::Duration {
        if ahead == 0 {
            return std::time::Duration::ZERO;
        }
        let place = self.hold.unwrap_or(look).min(look * 2);
        (place * ahead as u32)
            .mul_f64(0.5 * rand::random_range(0.9..1.1))
            .min(cap)
    }

    /// How long a waiter whose ticket is `mine` sleeps before its next look when the `line`
    /// behind a mark, as its last look found it, holds its entry (None when it does not); the
    /// place it sees is observed for the pace. One holding other locks (`holds_others`) judges
    /// the holder at every look (a read): it looks as if two places back.
    pub(super) fn in_line(
        &mut self,
        line: &Line,
        mine: Option<u64>,
        holds_others: bool,
        look: std::time::Duration,
        cap: std::time::Duration,
    ) -> Option<std::time::Duration> {
        let mine = mine.filter(|&m| line.own(Some(m)).is_some())?;
        let place = line.ahead_of(mine, crate::ddb::now_millis());
        self.observe(place, tokio::time::Instant::now());
        Some(self.sleep(place + 2 * usize::from(holds_others), look, cap))
    }
}

impl Transaction {
    /// Whether this waiter's next look, with `guard`, reads the item instead of attempting its
    /// lock (`Settings::line_looks_read`): with at least one other waiter between it and the
    /// mark (its place in the `line` its last look found), it cannot be the next to take the
    /// item, so it reads, and attempts the lock only when the read shows the item free for it;
    /// its looks then cost no write units on the hot item. The next in line, whom the next lock
    /// marks, the marked waiter (its guard is its own mark), and a waiter holding other locks
    /// (`holds_others`: it judges the holder at every look) attempt the lock.
    pub(super) fn looks_by_reading(
        &self,
        line: &Line,
        guard: crate::item_lock::Guard,
        holds_others: bool,
    ) -> bool {
        let settings = &self.inner.settings;
        settings.line_looks_read
            && settings.head_marks()
            && !holds_others
            && matches!(guard, crate::item_lock::Guard::Head(..))
            && self.known_ticket().is_some_and(|mine| {
                line.own(Some(mine)).is_some() && line.ahead_of(mine, crate::ddb::now_millis()) > 0
            })
    }

    /// The look of a waiter a holder may hand the item over to (`Settings::hand_over`,
    /// [`watched_by`]) while a handed-over lock holds it: it watches for the handover by reads
    /// ([`item_lock::watch_for_handover`](crate::item_lock::watch_for_handover)), up to
    /// [`HANDOVER_WATCHERS`] in flight, spread over its last look (`last_look`) and at least
    /// [`WATCH_SPACING_MIN`] apart, and by `told`, where a holder of the same manager that
    /// hands it the item tells it ([`notice`](crate::item_lock::notice)). What an attempt would
    /// have met, or `None` when the item was found free: the attempt goes then, with `guard` and
    /// `line` as the last read found the line. `at`: the item, whether this waiter joined the line, and the wait's
    /// deadline.
    pub(super) async fn watch_for_handover(
        &self,
        at: (&str, &Item, bool, tokio::time::Instant),
        guard: &mut crate::item_lock::Guard,
        line: &mut Line,
        last_look: Option<std::time::Duration>,
        told: &mut Option<tokio::sync::oneshot::Receiver<crate::Item>>,
    ) -> crate::Result<Option<crate::item_lock::LockOutcome>> {
        let (table, key, joined, deadline) = at;
        let settings = &self.inner.settings;
        let until = (tokio::time::Instant::now() + settings.queue_ttl / 3).min(deadline);
        let spacing = (last_look.unwrap_or(settings.backoff_base) / HANDOVER_WATCHERS as u32)
            .max(WATCH_SPACING_MIN);
        let pace = (HANDOVER_WATCHERS, spacing);
        let c = &self.inner.client;
        let at = (table, key);
        let watched =
            crate::item_lock::watch_for_handover(c, at, &self.id, *guard, pace, until, told)
                .await?;
        match watched {
            Ok(met) => Ok(Some(met)),
            Err(seen) => {
                *line = seen;
                let now = crate::ddb::now_millis();
                let step = line::LineStep::from_view(line, self.known_ticket(), joined, now);
                *guard = guard.stepping(step);
                Ok(None)
            }
        }
    }

    /// Holding `table`/`key` under `lock`: when it was handed over (`Settings::hand_over`) by
    /// a holder that did not know this waiter's entry in the line, the entry goes now, or a
    /// later holder would hand it the item again.
    pub(super) async fn leave_line_once_handed(
        &self,
        table: &str,
        key: &Item,
        lock: &crate::item_lock::LockInfo,
    ) {
        let Some(mine) = self.known_ticket() else {
            return;
        };
        if lock.waiters.line.entries.contains_key(&mine) {
            let left = line::leave_line(&self.inner.client, table, key, mine).await;
            debug!(tx = %self.id, table, ?left, "left the line of an item handed to it");
        }
    }

    /// Whether the mark `found` is this transaction's (with the ticket it contends with).
    pub(super) fn is_marked_head(&self, found: Option<HeadMark>) -> bool {
        found.is_some_and(|h| Some(h.ticket) == self.known_ticket())
    }

    /// Waiting at `table`/`key`, whose last look found the mark `found`: writes this
    /// transaction's mark (its ticket `mine`) when no older live one is there, or renews its own.
    /// The mark the item carries for this transaction, as far as this waiter knows, if any: it
    /// is the oldest waiter that marked the item, and the next lock of the item is its own (or an
    /// older newcomer's); its next look is conditional on that very mark. Best effort: a mark that
    /// fails (an older one landed first, the item went, a refused request) is left to the next
    /// look. `maybe_marked` is set when the item may carry this waiter's mark even though none
    /// is returned: the write failed ambiguously (it may have landed), so a waiter that stops
    /// waiting without another look still takes it off. `takes_handover`: the mark names this
    /// transaction, whom the holder may hand the item over to (`Settings::hand_over`).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn mark_as_waiter(
        &self,
        table: &str,
        key: &Item,
        schema: &KeySchema,
        found: Option<HeadMark>,
        mine: u64,
        maybe_marked: &mut bool,
        takes_handover: bool,
    ) -> Option<HeadMark> {
        let now = crate::ddb::now_millis();
        let ttl = self.inner.settings.queue_ttl.as_millis() as u64;
        if !HeadMark::should_mark(found, mine, now, ttl) {
            return found.filter(|h| h.ticket == mine);
        }
        let c = &self.inner.client;
        let written = HeadMark {
            ticket: mine,
            expiry: now + ttl,
        };
        match head::mark(
            c,
            table,
            key,
            schema,
            &self.id,
            written,
            now,
            takes_handover,
        )
        .await
        {
            Ok(landed) => {
                debug!(tx = %self.id, table, mine, landed, "marked the item as its oldest waiter");
                landed.then_some(written)
            }
            Err(e) => {
                debug!(tx = %self.id, table, error = %e, "marking the item failed");
                if matches!(
                    e,
                    crate::Error::DynamoDb {
                        ambiguous: true,
                        ..
                    }
                ) {
                    *maybe_marked = true;
                }
                None
            }
        }
    }

    /// Waiting for a holder at `table`/`key` (`at`, with its key schema), whose last look found
    /// the mark `found` and the `line` behind it: marks the item as its oldest waiter
    /// ([`Transaction::mark_as_waiter`]), or, behind an older live mark, takes a place in the
    /// line ([`Transaction::join_line`]; `joined` is set when the line may hold its entry).
    /// The mark the item carries for this waiter, if any.
    pub(super) async fn mark_or_join(
        &self,
        at: (&str, &Item, &KeySchema),
        found: Option<HeadMark>,
        mine: u64,
        line: &mut Line,
        placed: &mut Placed,
        joined: &mut bool,
    ) -> Option<HeadMark> {
        let (table, key, schema) = at;
        let handover = placed.takes_handover;
        let own = self
            .mark_as_waiter(
                table,
                key,
                schema,
                found,
                mine,
                &mut placed.marked,
                handover,
            )
            .await;
        if own.is_none() && found.is_some_and(|h| h.refuses(Some(mine), crate::ddb::now_millis())) {
            *joined |= self.join_line(table, key, schema, line, mine, placed).await;
        }
        own
    }

    /// Waiting at `table`/`key` behind an older live mark: puts this waiter (ticket `mine`) in
    /// the line behind it, as the last look found it (`line`), unless it is there with more
    /// than two thirds of its life left. Best effort: a write that fails is left to the next
    /// look. `placed.joined` is set when the line may hold its entry, as `maybe_marked` is by
    /// [`Transaction::mark_as_waiter`]: the waiter then takes its entry out when it stops
    /// waiting. True when the line holds (or may hold) its entry.
    pub(super) async fn join_line(
        &self,
        table: &str,
        key: &Item,
        schema: &KeySchema,
        line: &mut Line,
        mine: u64,
        placed: &mut Placed,
    ) -> bool {
        let now = crate::ddb::now_millis();
        let ttl = self.inner.settings.queue_ttl.as_millis() as u64;
        if line
            .own(Some(mine))
            .is_some_and(|e| e.saturating_sub(now) >= ttl * 2 / 3)
        {
            return true;
        }
        let c = &self.inner.client;
        placed.joined = true;
        let joined = line::join_line(
            c,
            table,
            key,
            schema,
            &self.id,
            mine,
            now + ttl,
            line.exists,
            placed.takes_handover,
        )
        .await;
        debug!(tx = %self.id, table, mine, ?joined, "joined the line behind the mark");
        // Joined (or maybe: a lost answer): the lock that takes the item takes the entry out.
        if !matches!(joined, Ok(false)) {
            line.entries.insert(mine, now + ttl);
            line.exists = true;
            return true;
        }
        false
    }

    /// Takes this transaction's mark off `table`/`key`, if the item still carries it: a waiter
    /// that stops waiting without the lock. Best effort: a mark left behind expires.
    pub(super) async fn unmark(&self, table: &str, key: &Item) {
        let _ = self
            .leave(
                table,
                key,
                Placed {
                    marked: true,
                    joined: false,
                    takes_handover: false,
                },
            )
            .await;
    }

    /// Takes this transaction's places at `table`/`key` off the item, as far as it put them
    /// there (`placed`): its mark, if the item still carries it (one that joined the line may
    /// have been promoted to it), and its entry in the line behind it. A waiter that stops
    /// waiting without the lock. Best effort: a mark or an entry left behind expires.
    ///
    /// True when no holder can have handed it the item (`Settings::hand_over`), before or after:
    /// every place it had went by its own removal. A handover takes the place it goes by (the
    /// mark, or the entry, with any mark) off the item, so a removal of ours that landed shows
    /// that place was not used before it, and gone, it cannot be after; a mark removal that
    /// found no mark of ours and the item not ours, beside an entry removal that landed (a
    /// promotion would have taken the entry first), shows the same.
    pub(super) async fn leave(&self, table: &str, key: &Item, placed: Placed) -> bool {
        let Some(mine) = self.known_ticket() else {
            return true;
        };
        let c = &self.inner.client;
        let unmark = async {
            if placed.marked || placed.joined {
                Some(head::unmark(c, table, key, mine).await)
            } else {
                None
            }
        };
        let leave_line = async {
            if placed.joined {
                Some(line::leave_line(c, table, key, mine).await)
            } else {
                None
            }
        };
        let (taken, left) = tokio::join!(unmark, leave_line);
        debug!(tx = %self.id, table, ?left, "took its places off the item");
        let mark_gone = match &taken {
            None | Some(Ok(Ok(()))) => true,
            Some(Ok(Err(found))) => {
                let obs = crate::item_lock::Observed::of(found.as_ref());
                let ours = obs.waiters.mark.is_some_and(|h| h.ticket == mine);
                !obs.locked_by(&self.id) && !ours
            }
            Some(Err(_)) => false,
        };
        mark_gone && matches!(left, None | Some(Ok(true)))
    }

    /// After this waiter named itself at `table`/`key` (`Settings::hand_over`) and left without
    /// the lock, when its leave cannot tell that no holder handed it the item ([`Self::leave`]):
    /// a consistent read tells. A lock handed to it is released (unapplied, conditional on being
    /// its own); a mark or an entry of its found there (a promotion that landed as it left) is
    /// taken off, and the item read again, so that no holder hands it the item later. Best
    /// effort: a lock left behind is one without record, which whoever meets it releases after
    /// `wound_grace`.
    pub(super) async fn release_handed(&self, table: &str, key: &Item) {
        let (c, Some(mine)) = (&self.inner.client, self.known_ticket()) else {
            return;
        };
        for _ in 0..3 {
            let found = match crate::ddb::get_consistent(c, table, key).await {
                Ok(found) => found,
                Err(e) => {
                    debug!(tx = %self.id, table, error = %e, "could not look for a handed lock");
                    return;
                }
            };
            let obs = crate::item_lock::Observed::of(found.as_ref());
            if obs.locked_by(&self.id) && !obs.applied {
                let release =
                    crate::item_lock::release_write(table, key, obs.transient, false, &self.id);
                let released = release.send(c, None).await;
                debug!(tx = %self.id, table, ?released, "released a lock handed to it after it left");
                return;
            }
            let marked = obs.waiters.mark.is_some_and(|h| h.ticket == mine);
            let in_line = obs.waiters.line.entries.contains_key(&mine);
            if !marked && !in_line {
                return;
            }
            let taken = self
                .leave(
                    table,
                    key,
                    Placed {
                        marked,
                        joined: in_line,
                        takes_handover: true,
                    },
                )
                .await;
            if taken {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LinePace;
    use std::time::Duration;

    #[test]
    fn a_waiter_in_the_line_sleeps_by_its_place_and_the_pace_it_measured() {
        let ms = Duration::from_millis;
        let cap = ms(1_000);
        let mut p = LinePace::default();
        assert_eq!(p.sleep(0, ms(10), cap), Duration::ZERO, "the next in line");
        // No pace measured: a place takes a look's time.
        let d = p.sleep(4, ms(10), cap);
        assert!(d >= ms(18) && d <= ms(22), "{d:?}");
        let t0 = tokio::time::Instant::now();
        p.observe(10, t0);
        p.observe(10, t0 + ms(50));
        p.observe(6, t0 + ms(80));
        // Four places in 80 ms: 20 ms a place, capped at two looks' time.
        assert_eq!(p.hold, Some(ms(20)));
        let d = p.sleep(4, ms(5), cap);
        assert!(d >= ms(18) && d <= ms(22), "{d:?}");
        let d = p.sleep(4, ms(30), cap);
        assert!(d >= ms(36) && d <= ms(44), "{d:?}");
        assert_eq!(p.sleep(1_000, ms(30), cap), cap);
    }
}
