//! Judging the holders found on a lease record: alive (and until when) or dead.

use std::time::Duration;

use tokio::time::Instant;

use super::LeaseLock;
use crate::Item;
use crate::lock::Expiry;
use crate::lock::util::*;

/// What a failed attempt found on the record.
#[derive(Default)]
pub(super) struct Verdict {
    /// The exclusive holder, if it is dead: (owner, hb).
    pub(super) dead_writer: Option<(String, u64)>,
    /// Dead shared holders: (id, hb).
    pub(super) dead_readers: Vec<(String, u64)>,
    /// A live writer holds it.
    pub(super) live_writer: bool,
    /// Live readers hold it.
    pub(super) live_readers: bool,
    /// Earliest time a live holder could be judged dead.
    pub(super) next_death: Option<Instant>,
}

impl LeaseLock {
    /// Judges the holders recorded in `item`.
    pub(super) fn judge(&self, name: &str, item: &Item) -> Verdict {
        let mut v = Verdict::default();
        let now = Instant::now();
        let mut seen = Vec::new();
        if let Some(owner) = get_s(item, OWNER) {
            let hb = get_u64(item, HB).unwrap_or(0);
            seen.push(owner.to_string());
            match self.judge_one(name, owner, hb, item, now) {
                None => v.dead_writer = Some((owner.to_string(), hb)),
                Some(death) => {
                    v.live_writer = true;
                    v.next_death = death;
                }
            }
        }
        if let Some(readers) = item.get(READERS).and_then(|r| r.as_m().ok()) {
            for (rid, entry) in readers {
                let Ok(entry) = entry.as_m() else { continue };
                let hb = get_u64(entry, HB).unwrap_or(0);
                seen.push(rid.clone());
                match self.judge_one(name, rid, hb, entry, now) {
                    None => v.dead_readers.push((rid.clone(), hb)),
                    Some(death) => {
                        v.live_readers = true;
                        v.next_death = match (v.next_death, death) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                }
            }
        }
        self.inner
            .observations
            .lock()
            .expect("poisoned")
            .retain(|(n, h), _| n != name || seen.contains(h));
        v
    }

    /// `None`: dead. `Some(t)`: alive, could be judged dead at `t` (`Some(None)`: never).
    pub(super) fn judge_one(
        &self,
        name: &str,
        holder: &str,
        hb: u64,
        rec: &Item,
        now: Instant,
    ) -> Option<Option<Instant>> {
        let inner = &self.inner;
        if get_bool(rec, CLOSED) {
            return Some(None);
        }
        let lease =
            Duration::from_millis(get_u64(rec, LEASE_MS).unwrap_or(millis(inner.lease) as u64));
        match inner.expiry {
            Expiry::Observed => {
                let mut obs = inner.observations.lock().expect("poisoned");
                let e = obs
                    .entry((name.to_string(), holder.to_string()))
                    .or_insert((hb, now));
                if e.0 != hb {
                    *e = (hb, now);
                }
                let death = e.1 + lease + inner.skew_margin;
                if now >= death {
                    None
                } else {
                    Some(Some(death))
                }
            }
            Expiry::WallClock => {
                let exp = get_i64(rec, EXP_MS).unwrap_or(i64::MAX);
                let left = exp
                    .saturating_add(millis(inner.skew_margin))
                    .saturating_sub(inner.clock.now_millis());
                if left < 0 {
                    None
                } else {
                    Some(Some(now + Duration::from_millis(left as u64)))
                }
            }
        }
    }
}
