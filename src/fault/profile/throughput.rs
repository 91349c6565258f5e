//! Per-item throughput: one token bucket per item and kind of unit, refilled at DynamoDB's
//! per-partition rate, holding at most one second of it.

use std::collections::HashMap;
use std::time::Instant;

use super::wire::ItemId;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The buckets of one kind of unit (reads or writes).
#[derive(Debug, Default)]
pub(super) struct Buckets {
    by_item: HashMap<ItemId, Bucket>,
}

impl Buckets {
    /// Takes `units` from each item's bucket if every one has them (all or nothing, as one
    /// request is served or refused whole); otherwise takes nothing and returns the positions of
    /// the items short of units.
    pub(super) fn take(&mut self, wants: &[(ItemId, f64)], rate: f64, now: Instant) -> Vec<usize> {
        let mut short = Vec::new();
        for (i, (id, units)) in wants.iter().enumerate() {
            let b = self.by_item.entry(id.clone()).or_insert(Bucket {
                tokens: rate,
                at: now,
            });
            let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
            b.tokens = (b.tokens + elapsed * rate).min(rate);
            b.at = now;
            if b.tokens < *units {
                short.push(i);
            }
        }
        if short.is_empty() {
            for (id, units) in wants {
                if let Some(b) = self.by_item.get_mut(id) {
                    b.tokens -= units;
                }
            }
        }
        short
    }
}

/// Units of a write of `bytes` (1 per KB started; 2 inside a transaction).
pub(super) fn write_units(bytes: usize, transactional: bool) -> f64 {
    let units = bytes.div_ceil(1024).max(1) as f64;
    if transactional { 2.0 * units } else { units }
}

/// Units of a read of `bytes` (1 per 4 KB started when consistent, half that when not).
pub(super) fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(4096).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refuses_past_its_rate_and_refills() {
        let id = ItemId::new(
            "t",
            serde_json::json!({"Id": {"S": "a"}}).as_object().unwrap(),
        );
        let mut b = Buckets::default();
        let t0 = Instant::now();
        assert!(b.take(&[(id.clone(), 600.0)], 1000.0, t0).is_empty());
        assert_eq!(b.take(&[(id.clone(), 600.0)], 1000.0, t0), vec![0]);
        // Half a second refills 500 units: 900 left.
        let t1 = t0 + std::time::Duration::from_millis(500);
        assert!(b.take(&[(id.clone(), 600.0)], 1000.0, t1).is_empty());
        assert_eq!(write_units(1, false), 1.0);
        assert_eq!(write_units(1025, true), 4.0);
    }
}
