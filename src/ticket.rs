//! Where contention tickets come from: the shared counter, or the coordinator's clock.
//!
//! A ticket only has to be a number that every coordinator compares the same way; the order it
//! gives is the one recorded in the transactions' records (`_TxK`, written once), not the clocks'.
//! docs/PROTOCOL.md ("Ticket sources") argues why clock skew costs fairness only.

use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::Client;
use rand::Rng;

use crate::error::Result;
use crate::record;
use crate::settings::{Inner, TicketSource};

/// Bits below the microseconds: the random tie-breaker. Microseconds since 1970 fit the 52 bits
/// left until the year 2112.
const TIE_BITS: u32 = 12;

/// The last clock ticket this process issued (process-wide, so that two transactions of one process
/// never tie, and a clock stepped back never hands out older tickets than before).
static LAST_CLOCK_TICKET: AtomicU64 = AtomicU64::new(0);

/// A new ticket from `source`: one request for the counter, none for the clock.
pub(crate) async fn take(client: &Client, tx_table: &str, source: TicketSource) -> Result<u64> {
    match source {
        TicketSource::Counter => record::take_ticket(client, tx_table).await,
        TicketSource::Clock => Ok(clock_ticket()),
    }
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

/// The ticket for epoch microseconds `micros` and random bits `tie` (only the low 12 are used).
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
        // Only 12 random bits: more cannot reorder two microseconds.
        assert_eq!(from_clock(5, 0xf001), from_clock(5, 1));
        // Epoch microseconds of the year 2100 still fit.
        let micros_2100 = 4_102_444_800_000_000u64;
        assert_eq!(from_clock(micros_2100, 7) >> TIE_BITS, micros_2100);
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
