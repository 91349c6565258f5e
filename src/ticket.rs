//! Where contention tickets come from: the shared counter, or the coordinator's clock.
//!
//! A ticket only has to be a number that every coordinator compares the same way; the order it
//! gives is the one recorded in the transactions' records (`_TxK`, written once), not the clocks'.
//! docs/PROTOCOL.md ("Ticket sources") argues why clock skew costs fairness only.
//!
//! A ticket also carries its attempt's class in its top bit: a first attempt's ticket has it set,
//! a retry's (`run`'s second attempt and later, keeping the unit of work's ticket) has it clear, so
//! every retry is older than every first attempt, and among each class the order is the draw's.

use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::Client;
use rand::Rng;

use crate::error::Result;
use crate::record;
use crate::settings::{Inner, TicketSource};

/// Bits below the microseconds: the random tie-breaker. Microseconds since 1970 fit the 52 bits
/// left below the class bit until the year 2112.
const TIE_BITS: u32 = 11;

/// The class bit, set in a first attempt's ticket (see the module's docs).
const FIRST_ATTEMPT: u64 = 1 << 63;

/// The last clock ticket this process issued (process-wide, so that two transactions of one process
/// never tie, and a clock stepped back never hands out older tickets than before).
static LAST_CLOCK_TICKET: AtomicU64 = AtomicU64::new(0);

/// A new first attempt's ticket from `source`: one request for the counter, none for the clock.
pub(crate) async fn take(client: &Client, tx_table: &str, source: TicketSource) -> Result<u64> {
    let drawn = match source {
        TicketSource::Counter => record::take_ticket(client, tx_table).await?,
        TicketSource::Clock => clock_ticket(),
    };
    Ok(drawn | FIRST_ATTEMPT)
}

/// True for a first attempt's ticket (retries' tickets are older than every first attempt's).
pub(crate) fn is_first_attempt(t: u64) -> bool {
    t & FIRST_ATTEMPT != 0
}

/// True when `retry`, a retry's ticket, is its unit of work's draw after `first`'s, a first
/// attempt's: the retry outranks the first attempt by its class alone.
pub(crate) fn retry_drawn_after(retry: u64, first: u64) -> bool {
    !is_first_attempt(retry) && is_first_attempt(first) && retry > first & !FIRST_ATTEMPT
}

/// The ticket an attempt records for its unit of work's ticket `t`: `t` itself for a first
/// attempt, `t` without the class bit for a retry (older than every first attempt's).
pub(crate) fn for_attempt(t: u64, retry: bool) -> u64 {
    if retry { t & !FIRST_ATTEMPT } else { t }
}

/// The ticket held in `cell`, taken from the configured source the first time (one unit of work
/// keeps one ticket across its attempts and handles).
pub(crate) async fn take_once(inner: &Inner, cell: &tokio::sync::OnceCell<u64>) -> Result<u64> {
    cell.get_or_try_init(|| take(&inner.client, &inner.tx_table, inner.settings.ticket_source))
        .await
        .copied()
}

/// A ticket from this coordinator's clock.
fn clock_ticket() -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    let drawn = from_clock(micros, rand::rng().random());
    let prev = LAST_CLOCK_TICKET
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(drawn.max(last.saturating_add(1)))
        })
        .expect("the update always returns a value");
    drawn.max(prev.saturating_add(1))
}

/// The ticket for epoch microseconds `micros` and random bits `tie` (only the low 11 are used).
fn from_clock(micros: u64, tie: u16) -> u64 {
    (micros << TIE_BITS) | u64::from(tie & ((1 << TIE_BITS) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_tickets_order_by_time_first() {
        assert!(from_clock(1_000_001, 0) > from_clock(1_000_000, 0xfff));
        assert!(from_clock(1_000_000, 2) > from_clock(1_000_000, 1));
        // Only 11 random bits: more cannot reorder two microseconds.
        assert_eq!(from_clock(5, 0xf001), from_clock(5, 1));
        // Epoch microseconds of the year 2100 still fit, below the class bit.
        let micros_2100 = 4_102_444_800_000_000u64;
        assert_eq!(from_clock(micros_2100, 7) >> TIE_BITS, micros_2100);
        assert_eq!(from_clock(micros_2100, 0x7ff) & FIRST_ATTEMPT, 0);
    }

    #[test]
    fn every_retry_is_older_than_every_first_attempt() {
        let (early, late) = (
            from_clock(1_000, 0),
            from_clock(2_000_000_000_000_000, 0x7ff),
        );
        let first = |t: u64| t | FIRST_ATTEMPT;
        // Within a class, the draw's order.
        assert!(for_attempt(first(early), true) < for_attempt(first(late), true));
        assert!(for_attempt(first(early), false) < for_attempt(first(late), false));
        // Across classes, the retry's: the latest retry before the earliest first attempt.
        assert!(for_attempt(first(late), true) < for_attempt(first(early), false));
        // A counter's tickets (small numbers) too, and a retry keeps its class.
        assert!(for_attempt(first(1_000_000), true) < first(1));
        assert_eq!(for_attempt(for_attempt(first(5), true), true), 5);
    }

    #[test]
    fn a_retry_is_drawn_after_a_first_attempt_by_its_unit_of_works_draw() {
        let first = |t: u64| t | FIRST_ATTEMPT;
        assert!(retry_drawn_after(for_attempt(first(9), true), first(5)));
        assert!(!retry_drawn_after(for_attempt(first(3), true), first(5)));
        // The same unit of work's retry is not drawn after its first attempt.
        assert!(!retry_drawn_after(for_attempt(first(5), true), first(5)));
        // Only a retry against a first attempt.
        assert!(!retry_drawn_after(first(9), first(5)));
        assert!(!retry_drawn_after(9, 5));
    }

    #[test]
    fn clock_tickets_of_one_process_never_repeat_or_go_back() {
        let mut last = 0;
        for _ in 0..10_000 {
            let t = clock_ticket();
            assert!(t > last, "{t} after {last}");
            last = t;
        }
    }
}
