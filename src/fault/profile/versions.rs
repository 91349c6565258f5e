//! The versions each item had lately, as observed by a consistent read right after each write:
//! what an eventually consistent read may still return.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::wire::ItemId;

/// One version: the item (`None`: absent) and when it was observed current.
#[derive(Debug, Clone)]
struct Version {
    at: Instant,
    item: Option<Map<String, Value>>,
}

/// Recent versions per item.
#[derive(Debug, Default)]
pub(super) struct Versions {
    by_item: HashMap<ItemId, Vec<Version>>,
}

impl Versions {
    /// Notes `item` as current from `at` on, forgetting versions that stopped being current
    /// more than `window` ago.
    pub(super) fn record(
        &mut self,
        id: ItemId,
        item: Option<Map<String, Value>>,
        at: Instant,
        window: Duration,
    ) {
        let list = self.by_item.entry(id).or_default();
        // Observations may arrive out of order; keep the list sorted by time.
        let pos = list.partition_point(|v| v.at <= at);
        list.insert(pos, Version { at, item });
        let horizon = at.checked_sub(window).unwrap_or(at);
        // The first version still current within the window is the last one that began at or
        // before the horizon; everything before it is forgotten.
        let keep_from = list.partition_point(|v| v.at <= horizon).saturating_sub(1);
        list.drain(..keep_from);
    }

    /// Every version current at some time within `window` before `now` (the newest last).
    pub(super) fn recent(
        &self,
        id: &ItemId,
        now: Instant,
        window: Duration,
    ) -> Vec<Option<Map<String, Value>>> {
        let Some(list) = self.by_item.get(id) else {
            return Vec::new();
        };
        let horizon = now.checked_sub(window).unwrap_or(now);
        let from = list.partition_point(|v| v.at <= horizon).saturating_sub(1);
        list[from..]
            .iter()
            .filter(|v| v.at <= now)
            .map(|v| v.item.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_versions_current_within_the_window_are_recent() {
        let id = ItemId::new("t", json!({"Id": {"S": "a"}}).as_object().unwrap());
        let v = |n: i64| {
            Some(
                json!({"n": {"N": n.to_string()}})
                    .as_object()
                    .unwrap()
                    .clone(),
            )
        };
        let w = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut vs = Versions::default();
        vs.record(id.clone(), v(1), t0, w);
        vs.record(id.clone(), None, t0 + Duration::from_millis(500), w);
        // At 1.2 s: v1 was current until 0.5 s, within the window; the deletion is current.
        let recent = vs.recent(&id, t0 + Duration::from_millis(1200), w);
        assert_eq!(recent, vec![v(1), None]);
        vs.record(id.clone(), v(3), t0 + Duration::from_millis(1800), w);
        // At 1.9 s: v1 stopped being current at 0.5 s (outside), the deletion lasted to 1.8 s.
        let recent = vs.recent(&id, t0 + Duration::from_millis(1900), w);
        assert_eq!(recent, vec![None, v(3)]);
        // Recording at 3 s forgets everything but the version current at the horizon (2 s).
        vs.record(id.clone(), v(4), t0 + Duration::from_secs(3), w);
        let recent = vs.recent(&id, t0 + Duration::from_secs(3), w);
        assert_eq!(recent, vec![v(3), v(4)]);
    }
}
