//! What the contention model counts as a deadlock: a set of pending transactions that keep waiting
//! for each other once every blocked handle has polled again.

use super::*;

impl ContentionModel {
    /// The transactions that are deadlocked: every live handle of each is blocked by another
    /// member and keeps waiting for it, once every blocked handle has polled again (and recorded its
    /// wait) until the recorded waits settle.
    pub(super) fn deadlocked(&self, s: &State) -> Vec<Tx> {
        let n = s.records.len();
        // The wait each blocked handle would record if it polled now, given `waits`.
        let poll = |waits: &[Option<Ticket>]| -> Vec<Option<(Tx, Option<Ticket>)>> {
            s.handles
                .iter()
                .enumerate()
                .map(|(k, h)| {
                    if !Self::active(h) || !Self::pending(s, h.tx) {
                        return None;
                    }
                    if matches!(h.phase, Phase::Wounding { .. }) {
                        return None;
                    }
                    let o = self.blocker(s, k)?;
                    let item = self.plan(h.tx)[h.pc as usize];
                    match self.judge_holder(s, h.mine?, o, item, waits[o as usize])? {
                        Judgement::Wait(on) => Some((o, Some(on))),
                        Judgement::WaitForRunning => Some((o, None)),
                        Judgement::Wound => None,
                    }
                })
                .collect()
        };
        let mut waits: Vec<Option<Ticket>> = s.records.iter().map(|r| r.waiting_on).collect();
        let mut polled = poll(&waits);
        for _ in 0..=2 * s.handles.len() {
            let mut next = waits.clone();
            for (h, p) in s.handles.iter().zip(&polled) {
                if let Some((_, on)) = p {
                    next[h.tx as usize] = *on;
                }
            }
            if next == waits {
                break;
            }
            waits = next;
            polled = poll(&waits);
        }
        // Greatest set of transactions whose every live handle waits for a member.
        let mut members: Vec<bool> = (0..n as Tx)
            .map(|t| {
                Self::pending(s, t)
                    && Self::has_live_handle(s, t)
                    && s.handles
                        .iter()
                        .zip(&polled)
                        .filter(|(h, _)| h.tx == t && Self::active(h))
                        .all(|(_, p)| p.is_some())
            })
            .collect();
        loop {
            let mut changed = false;
            for t in 0..n {
                if !members[t] {
                    continue;
                }
                let ok = s
                    .handles
                    .iter()
                    .zip(&polled)
                    .filter(|(h, _)| h.tx as usize == t && Self::active(h))
                    .all(|(_, p)| p.is_some_and(|(o, _)| members[o as usize]));
                if !ok {
                    members[t] = false;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        (0..n as Tx).filter(|&t| members[t as usize]).collect()
    }
}
