//! Record polling: one round of `GetRecords` over the shards due (throttled ones backed off, none
//! too far ahead of the slowest), and each record handed to the assembler.

use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::error::{Error, Result};

use super::Reader;
use super::shard::State;
use crate::feed::assemble::{RecId, StreamRec};
use crate::feed::convert;

pub(super) fn is_throttling(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "LimitExceededException"
                | "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded"
        )
    )
}

impl Reader {
    /// One round: list shards when due, open what can be opened, read every shard due once,
    /// read the records of transactions waiting for a decision, release what is ready. Whether
    /// any record arrived.
    pub(super) async fn round(&mut self) -> Result<bool> {
        if self.cfg.streams.is_none() {
            self.cfg.streams = Some(super::default_streams_client(&self.cfg.client).await);
        }
        let now = Instant::now();
        if self.refresh_at.is_none_or(|t| now >= t) {
            self.refresh().await?;
        }
        // Open shards whose parent is read to its end (or gone from the stream).
        for i in 0..self.shards.len() {
            let s = &self.shards[i];
            let parent_done = s.parent.as_ref().is_none_or(|p| {
                self.index
                    .get(&(s.stream.clone(), p.clone()))
                    .is_none_or(|&j| self.shards[j].state == State::Finished)
            });
            let due = s.retry_at.is_none_or(|t| now >= t);
            let needs =
                s.state == State::Waiting || (s.state == State::Reading && s.iterator.is_none());
            if needs && parent_done && due {
                self.open(i).await?;
            }
        }
        // Shards to read: not too far ahead of the slowest one still catching up.
        let slowest = self
            .shards
            .iter()
            .filter(|s| s.state == State::Reading && !s.caught_up)
            .filter_map(|s| s.last_time)
            .min();
        let window = self.cfg.window.as_secs() as i64;
        let due: Vec<usize> = (0..self.shards.len())
            .filter(|&i| {
                let s = &self.shards[i];
                s.state == State::Reading
                    && s.iterator.is_some()
                    && s.retry_at.is_none_or(|t| now >= t)
                    && s.read_at
                        .is_none_or(|t| now.duration_since(t) >= self.cfg.poll_interval)
                    && (s.caught_up
                        || s.last_time.is_none()
                        || slowest.is_none_or(|m| s.last_time.is_some_and(|t| t <= m + window)))
            })
            .collect();
        for &i in &due {
            self.shards[i].read_at = Some(now);
        }
        let streams = self.streams();
        let answers = join_all(due.iter().map(|&i| {
            let it = self.shards[i].iterator.clone().unwrap_or_default();
            async move {
                streams
                    .get_records()
                    .shard_iterator(it)
                    .limit(1000)
                    .send()
                    .await
            }
        }))
        .await;
        let mut got = false;
        let mut ended = false;
        let now = Instant::now();
        for (&i, answer) in due.iter().zip(answers) {
            match answer {
                Ok(out) => {
                    self.shards[i].failures = 0;
                    self.shards[i].retry_at = None;
                    self.shards[i].caught_up = out.records().is_empty();
                    for r in out.records() {
                        got = true;
                        self.take(i, r, now);
                    }
                    let s = &mut self.shards[i];
                    s.iterator = out.next_shard_iterator().map(str::to_string);
                    if s.iterator.is_none() {
                        s.state = State::Finished;
                        ended = true;
                    }
                }
                Err(e) => {
                    let e = Error::sdk("GetRecords", e);
                    let s = &mut self.shards[i];
                    match e.dynamodb_code() {
                        // Iterators last 15 minutes: get another from the position.
                        Some("ExpiredIteratorException") => s.iterator = None,
                        Some("TrimmedDataAccessException") => {
                            s.iterator = None;
                            s.restored = None;
                            s.last_read = None;
                        }
                        Some("ResourceNotFoundException") => {
                            s.state = State::Finished;
                            ended = true;
                        }
                        c if is_throttling(c) || e.is_retryable() => {
                            s.failures += 1;
                            s.retry_at = Some(now + backoff(s.failures));
                        }
                        _ => return Err(e.on_table(&s.table)),
                    }
                }
            }
        }
        if got {
            self.last_record_at = Some(now);
        }
        if ended {
            // A closed shard's children may be listed by now.
            self.refresh_at = Some(now);
            self.listed_since_close = false;
        }
        self.decide().await?;
        self.assembler.horizon = self
            .shards
            .iter()
            .filter(|s| s.state == State::Reading && !s.caught_up)
            .map(|s| s.last_time.unwrap_or(i64::MIN))
            .min();
        let released = self.assembler.release(Instant::now());
        self.ready.extend(released);
        Ok(got)
    }

    /// One stream record of shard `i`.
    fn take(&mut self, i: usize, r: &aws_sdk_dynamodbstreams::types::Record, now: Instant) {
        let Some(d) = r.dynamodb() else { return };
        let Some(seq) = d.sequence_number() else {
            return;
        };
        let s = &mut self.shards[i];
        s.last_read = Some(seq.to_string());
        s.restored = None;
        if let Some(t) = d.approximate_creation_date_time() {
            s.last_time = Some(t.secs());
        }
        if s.skipped(seq) {
            // Consumed before a restart: kept in the log as consumed, so that the next position
            // still skips it.
            s.log.push_back((seq.to_string(), true));
            s.mark_done(seq);
            return;
        }
        s.log.push_back((seq.to_string(), false));
        let rec = StreamRec {
            id: RecId {
                shard: i,
                seq: seq.to_string(),
            },
            table: s.table.clone(),
            key: d.keys().map(convert::item).unwrap_or_default(),
            old: d.old_image().map(convert::item),
            new: d.new_image().map(convert::item),
            time: d.approximate_creation_date_time().map(|t| t.secs()),
        };
        for done in self.assembler.push(rec, now) {
            self.mark_done(&done);
        }
    }
}

/// Backoff after `failures` throttled reads in a row: 100 ms doubling to 5 s, jittered.
pub(super) fn backoff(failures: u32) -> Duration {
    let base = 100u64.saturating_mul(1 << failures.min(6)).min(5_000);
    Duration::from_millis(base / 2 + rand::random_range(0..=base / 2))
}
