//! How fast a queue moves, and when a waiter should next look at it.
//!
//! A waiter far back reads the queue rarely, but must be awake before its turn: each read tells
//! how many entries have left the queue so far (tickets issued minus entries present), and the
//! time per departure, averaged over the reads of one handle, says when the waiter will be near
//! the head. It sleeps most of that time (not all: the queue may speed up) and looks again; at
//! the head it sleeps through most of a departure's time since the last departure (stamped on the
//! queue by whoever removed the entry; the holder came in with it), then polls every
//! `poll_interval.head`. Our turn comes after as many
//! departures as there are entries ahead (the holder's included), so a waiter second in line
//! sleeps through about one and a half departures rather than polling like the head.
//!
//! Two estimates of the time per departure: one from every read (fed mostly by the head's polls,
//! biased low, which keeps near waiters early: an exact one made the queue unstable), and one
//! from reads that span several departures (close to the true pace), by which a waiter more than
//! `FAR` entries back sleeps until about `FAR_MARGIN` departures before its turn. With the low
//! estimate alone, about half of those waiters woke still four or more places back and read again.
//! The far estimate is capped at `FAR_CAP` times the near one, so that a slow spell it measured
//! cannot make far waiters oversleep their turns (which would keep the queue slow).

use std::time::Duration;

use tokio::time::Instant;

use crate::lock::util::jitter;

/// Sleep this share of the expected time until the waiter's turn (the queue may speed
/// up, and a waiter that wakes late leaves the lock idle).
const APPROACH: f64 = 0.92;
/// Share of the earliest time our turn can come (the holder leaving at once) that a waiter near
/// the head sleeps at most.
const EARLIEST: f64 = 0.95;
/// Share of the time per departure, counted from the last departure, that the waiter at the head
/// sleeps before it polls fast (the holder came in with that departure).
const HEAD_WAKE: f64 = 0.9;
/// Weight of a new measurement in the running average.
const WEIGHT: f64 = 0.3;
/// A waiter with more entries than this ahead sleeps by the far estimate (below).
const FAR: usize = 3;
/// Departures before its turn a far waiter aims to wake at: its next read is then near the head.
/// (1.5 rather than 2.0 pays for the head's faster polls: the same reads per waiter.)
const FAR_MARGIN: f64 = 1.5;
/// A far waiter's time per departure is at most this multiple of the near estimate. Without the
/// cap, a far estimate measured while the queue was slow (its first departures, a stall) made far
/// waiters wake after their turn, which slowed the departures they measured next: about one
/// benchmark run in five stayed slow throughout (14 reads per waiter per second instead of 18, the
/// worst wait 2.3–2.5× ideal instead of 1.8×), measured with the queue-lock benchmark.
const FAR_CAP: f64 = 1.3;
/// Fewest departures a read must span to count in the far estimate.
const FAR_SPAN: u64 = 3;

/// Running estimate of the time between departures from one lock's queue.
#[derive(Debug, Default, Clone)]
pub(super) struct Pace {
    /// The last read that showed a departure: when, and how many had departed by then.
    last: Option<(Instant, u64)>,
    per_departure: Option<Duration>,
    /// The time per departure measured only over reads that span several departures (a far
    /// waiter's): close to the true pace, where `per_departure`, fed mostly by the head's polls,
    /// is biased low. Only far waiters sleep by it, aiming `FAR_MARGIN` departures early: a late
    /// wake there still leaves the near-head polling to catch the turn.
    per_departure_far: Option<Duration>,
    /// When the last departure happened, as its remover stamped it.
    departed_at: Option<Instant>,
}

impl Pace {
    /// Takes in one read of the queue: read `at`, `departed` entries gone so far, the last one
    /// `departed_at`.
    pub(super) fn observe(&mut self, at: Instant, departed: u64, departed_at: Option<Instant>) {
        if departed_at.is_some() {
            self.departed_at = departed_at;
        }
        match self.last {
            Some((t, d)) if departed > d && at > t => {
                let sample = (at - t).div_f64((departed - d) as f64);
                self.per_departure = Some(average(self.per_departure, sample));
                if departed - d >= FAR_SPAN {
                    self.per_departure_far = Some(average(self.per_departure_far, sample));
                }
                self.last = Some((at, departed));
            }
            Some((_, d)) if departed <= d => {}
            _ => self.last = Some((at, departed)),
        }
    }

    /// How long a waiter with `ahead` entries before it (1: only the holder) sleeps before it
    /// looks again, at `now`.
    pub(super) fn pause(
        &self,
        ahead: usize,
        head: Duration,
        max: Duration,
        now: Instant,
    ) -> Duration {
        if ahead <= 1 {
            // At the head our turn comes with the holder's departure, about one departure's time
            // after the last departure (the holder came in with it): sleep through most of that,
            // then poll every `head`.
            if let (Some(per), Some(last)) = (self.per_departure, self.departed_at) {
                let due = last + per.mul_f64(HEAD_WAKE);
                if due > now + head {
                    return (due - now).min(max);
                }
            }
            return jitter(head);
        }
        // Far back: sleep by the far estimate until `FAR_MARGIN` departures before our turn.
        if ahead > FAR
            && let Some(far) = self.per_departure_far
        {
            let far = match self.per_departure {
                Some(near) => far.min(near.mul_f64(FAR_CAP)),
                None => far,
            };
            return far
                .mul_f64(ahead as f64 - FAR_MARGIN)
                .clamp(head, max)
                .mul_f64(rand::random_range(0.92..1.0));
        }
        // Our turn comes after `ahead` departures (the holder's and those of the waiters before
        // us), `ahead` departures' time from now on average but `ahead - 1` at the earliest (the
        // holder may leave at once): sleep a share of the average, never past the earliest.
        let pause = match self.per_departure {
            Some(per) => {
                let k = ahead as f64;
                per.mul_f64((k * APPROACH).min((k - 1.0) * EARLIEST))
            }
            None => head.mul_f64(ahead as f64),
        };
        // Jitter only downwards: waking late costs the whole queue, waking early one read.
        pause
            .clamp(head, max)
            .mul_f64(rand::random_range(0.85..1.0))
    }
}

fn average(avg: Option<Duration>, sample: Duration) -> Duration {
    match avg {
        Some(avg) => avg.mul_f64(1.0 - WEIGHT) + sample.mul_f64(WEIGHT),
        None => sample,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_follows_departures_and_scales_with_the_position() {
        let mut p = Pace::default();
        let t0 = Instant::now();
        let head = Duration::from_millis(8);
        let max = Duration::from_secs(2);
        // No estimate yet: the old position-proportional pace.
        assert!(p.pause(3, head, max, t0) >= Duration::from_millis(19));
        p.observe(t0, 10, None);
        p.observe(
            t0 + Duration::from_millis(100),
            20,
            Some(t0 + Duration::from_millis(95)),
        );
        let now = t0 + Duration::from_millis(100);
        let per10 = p.pause(10, head, max, now);
        // 10 ms per departure, our turn after 10 departures: most of 100 ms.
        assert!(per10 >= Duration::from_millis(70) && per10 <= Duration::from_millis(86));
        // Second in line: our turn comes after one departure at the earliest.
        let second = p.pause(2, head, max, now);
        assert!(second >= Duration::from_millis(8) && second <= Duration::from_millis(10));
        // The head polls at the head interval when a departure is shorter than that...
        assert!(p.pause(1, head, max, now) <= Duration::from_millis(10));
        // ... else sleeps through most of a departure's time since the last one seen, then polls.
        let mut slow = Pace::default();
        slow.observe(t0, 0, None);
        slow.observe(
            t0 + Duration::from_millis(100),
            2,
            Some(t0 + Duration::from_millis(90)),
        );
        let at_head = slow.pause(1, head, max, now);
        let due = Duration::from_millis(50).mul_f64(HEAD_WAKE) - Duration::from_millis(10);
        assert_eq!(at_head, due);
        let later = slow.pause(1, head, max, now + due - Duration::from_millis(3));
        assert!(later <= Duration::from_millis(10), "{later:?}");
        // Far back the pause is capped.
        assert!(p.pause(100_000, head, max, now) <= Duration::from_millis(2400));
    }

    #[test]
    fn far_waiters_sleep_by_reads_that_span_several_departures() {
        let head = Duration::from_millis(5);
        let max = Duration::from_secs(2);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pace::default();
        // A far read after 10 departures in 200 ms (20 ms each), then head polls that see one
        // departure 12 ms after the last one seen (biased low, as the head's polls are).
        p.observe(t0, 0, None);
        p.observe(t0 + ms(200), 10, None);
        p.observe(t0 + ms(212), 11, None);
        p.observe(t0 + ms(224), 12, None);
        let now = t0 + ms(224);
        // Ten ahead: about eight and a half departures of the far estimate (20 ms), not of the
        // near one.
        let far = p.pause(10, head, max, now);
        assert!(far >= ms(156) && far <= ms(170), "{far:?}");
        // Near the head the near estimate still rules.
        let near = p.pause(3, head, max, now);
        assert!(near < ms(40), "{near:?}");
        // Without a read spanning several departures, a far waiter uses the near estimate.
        let mut q = Pace::default();
        q.observe(t0, 0, None);
        q.observe(t0 + ms(12), 1, None);
        let k10 = q.pause(10, head, max, t0 + ms(12));
        assert!(k10 <= ms(12).mul_f64(9.0 * EARLIEST), "{k10:?}");
    }

    #[test]
    fn a_far_estimate_far_above_the_near_one_is_capped() {
        let head = Duration::from_millis(5);
        let max = Duration::from_secs(2);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pace::default();
        // A slow start (10 departures in 600 ms, 60 ms each), then departures every 10 ms.
        p.observe(t0, 0, None);
        p.observe(t0 + ms(600), 10, None);
        let mut t = t0 + ms(600);
        for d in 11..=20 {
            t += ms(10);
            p.observe(t, d, None);
        }
        let near = p.per_departure.expect("near");
        assert!(near < ms(15), "{near:?}");
        // Ten ahead: 8.5 departures of at most 1.3 × the near estimate, not of 60 ms.
        let far = p.pause(10, head, max, t);
        assert!(
            far <= near.mul_f64(FAR_CAP * 8.5),
            "{far:?} against {near:?}"
        );
        assert!(
            far >= near.mul_f64(FAR_CAP * 8.5 * 0.92),
            "{far:?} against {near:?}"
        );
    }
}
