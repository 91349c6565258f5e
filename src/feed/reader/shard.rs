//! One shard as the reader follows it: where it stands in its lineage, what it has read, which
//! records were consumed, and the position a checkpoint saves for it.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::time::Instant;

use crate::feed::checkpoint::ShardPosition;

/// Orders sequence numbers (decimal digits) as numbers.
pub(crate) fn seq_cmp(a: &str, b: &str) -> Ordering {
    let a = a.trim_start_matches('0');
    let b = b.trim_start_matches('0');
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Not read yet: waits for its parent, or for its first iterator.
    Waiting,
    Reading,
    /// Closed and read to its end.
    Finished,
}

pub(super) struct Shard {
    pub(super) stream: String,
    pub(super) table: String,
    pub(super) id: String,
    pub(super) parent: Option<String>,
    pub(super) state: State,
    pub(super) iterator: Option<String>,
    /// Appeared after the feed's first listing: read from its start.
    pub(super) born_later: bool,
    /// The position this shard was restored to, until it is read.
    pub(super) restored: Option<ShardPosition>,
    pub(super) last_read: Option<String>,
    /// The records read from the oldest not consumed on: (sequence number, consumed).
    pub(super) log: VecDeque<(String, bool)>,
    /// Ranges consumed before a restart: skipped when read again.
    pub(super) skip: Vec<(String, String)>,
    pub(super) retry_at: Option<Instant>,
    pub(super) failures: u32,
    /// Creation time (epoch s) of the last record read.
    pub(super) last_time: Option<i64>,
    pub(super) caught_up: bool,
    /// When `GetRecords` was last sent for this shard: a shard is read at most once per poll
    /// interval.
    pub(super) read_at: Option<Instant>,
}

impl Shard {
    pub(super) fn skipped(&self, seq: &str) -> bool {
        self.skip.iter().any(|(a, b)| {
            seq_cmp(a, seq) != Ordering::Greater && seq_cmp(seq, b) != Ordering::Greater
        })
    }

    pub(super) fn mark_done(&mut self, seq: &str) {
        if let Ok(i) = self.log.binary_search_by(|(s, _)| seq_cmp(s, seq)) {
            self.log[i].1 = true;
        }
        while self.log.front().is_some_and(|(_, done)| *done) {
            self.log.pop_front();
        }
    }

    pub(super) fn position(&self) -> Option<ShardPosition> {
        if self.state == State::Finished && self.log.is_empty() {
            return Some(ShardPosition {
                finished: true,
                ..ShardPosition::default()
            });
        }
        if self.last_read.is_none() {
            return self.restored.clone();
        }
        let ahead: Vec<(String, String)> = self
            .skip
            .iter()
            .filter(|(_, b)| {
                self.last_read
                    .as_deref()
                    .is_some_and(|l| seq_cmp(b, l) == Ordering::Greater)
            })
            .cloned()
            .collect();
        let Some((front, _)) = self.log.front() else {
            return Some(ShardPosition {
                after: self.last_read.clone(),
                done: ahead,
                ..ShardPosition::default()
            });
        };
        let mut done = Vec::new();
        let mut run: Option<(String, String)> = None;
        for (seq, consumed) in &self.log {
            if *consumed {
                match &mut run {
                    Some((_, end)) => *end = seq.clone(),
                    None => run = Some((seq.clone(), seq.clone())),
                }
            } else if let Some(r) = run.take() {
                done.push(r);
            }
        }
        done.extend(run);
        done.extend(ahead);
        Some(ShardPosition {
            resume_at: Some(front.clone()),
            done,
            ..ShardPosition::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        assert_eq!(seq_cmp("9", "10"), Ordering::Less);
        assert_eq!(seq_cmp("000123", "123"), Ordering::Equal);
        assert_eq!(seq_cmp("200", "199"), Ordering::Greater);
    }

    fn shard() -> Shard {
        Shard {
            stream: "s".into(),
            table: "T".into(),
            id: "sh".into(),
            parent: None,
            state: State::Reading,
            iterator: None,
            born_later: false,
            restored: None,
            last_read: None,
            log: VecDeque::new(),
            skip: Vec::new(),
            retry_at: None,
            failures: 0,
            last_time: None,
            caught_up: false,
            read_at: None,
        }
    }

    #[test]
    fn a_position_resumes_at_the_oldest_record_not_consumed_and_skips_the_consumed_after_it() {
        let mut s = shard();
        for seq in ["10", "11", "12", "13", "14"] {
            s.log.push_back((seq.into(), false));
            s.last_read = Some(seq.into());
        }
        s.mark_done("10");
        s.mark_done("12");
        s.mark_done("13");
        let p = s.position().expect("a position");
        assert_eq!(p.resume_at.as_deref(), Some("11"));
        assert_eq!(p.done, vec![("12".to_string(), "13".to_string())]);
        s.mark_done("11");
        s.mark_done("14");
        let p = s.position().expect("a position");
        assert_eq!(p.resume_at, None);
        assert_eq!(p.after.as_deref(), Some("14"));
    }
}
