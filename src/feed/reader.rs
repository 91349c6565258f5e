//! Reading the streams: tables to streams, shards in lineage order, iterators, `GetRecords` with
//! backoff, the TX records that decide transactions, and the position of every shard.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::StreamViewType;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use futures::future::join_all;

use crate::error::{Error, Result};
use crate::record::{self, TxState};
use crate::request::Op;

use super::Change;
use super::assemble::{Assembler, Decision, RecId, StreamRec};
use super::checkpoint::{FeedPosition, ShardPosition};
use super::convert;

pub(crate) struct Config {
    pub client: aws_sdk_dynamodb::Client,
    pub streams: Option<aws_sdk_dynamodbstreams::Client>,
    pub tables: Vec<String>,
    pub transactions_table: String,
    pub oldest: bool,
    pub poll_interval: Duration,
    pub stop_when_idle: Option<Duration>,
    pub window: Duration,
    pub grace: Duration,
}

/// The default DynamoDB Streams client: the AWS configuration from the environment (credentials,
/// region), the DynamoDB client's region and retry and timeout settings when it has them, and the
/// endpoint `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`, else the DynamoDB one from the environment.
pub(crate) async fn default_streams_client(
    client: &aws_sdk_dynamodb::Client,
) -> aws_sdk_dynamodbstreams::Client {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let c = client.config();
    let mut b = aws_sdk_dynamodbstreams::config::Builder::from(&sdk);
    if let Some(r) = c.region() {
        b.set_region(Some(r.clone()));
    }
    if let Some(r) = c.retry_config() {
        b.set_retry_config(Some(r.clone()));
    }
    if let Some(t) = c.timeout_config() {
        b.set_timeout_config(Some(t.clone()));
    }
    let own = std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
        .ok()
        .filter(|e| !e.is_empty());
    if own.is_none()
        && let Some(ep) = ["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|e| !e.is_empty()))
    {
        b.set_endpoint_url(Some(ep));
    }
    aws_sdk_dynamodbstreams::Client::from_conf(b.build())
}

/// Orders sequence numbers (decimal digits) as numbers.
pub(crate) fn seq_cmp(a: &str, b: &str) -> Ordering {
    let a = a.trim_start_matches('0');
    let b = b.trim_start_matches('0');
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not read yet: waits for its parent, or for its first iterator.
    Waiting,
    Reading,
    /// Closed and read to its end.
    Finished,
}

struct Shard {
    stream: String,
    table: String,
    id: String,
    parent: Option<String>,
    state: State,
    iterator: Option<String>,
    /// Appeared after the feed's first listing: read from its start.
    born_later: bool,
    /// The position this shard was restored to, until it is read.
    restored: Option<ShardPosition>,
    last_read: Option<String>,
    /// The records read from the oldest not consumed on: (sequence number, consumed).
    log: VecDeque<(String, bool)>,
    /// Ranges consumed before a restart: skipped when read again.
    skip: Vec<(String, String)>,
    retry_at: Option<Instant>,
    failures: u32,
    /// Creation time (epoch s) of the last record read.
    last_time: Option<i64>,
    caught_up: bool,
    /// When `GetRecords` was last sent for this shard: a shard is read at most once per poll
    /// interval.
    read_at: Option<Instant>,
}

impl Shard {
    fn skipped(&self, seq: &str) -> bool {
        self.skip.iter().any(|(a, b)| {
            seq_cmp(a, seq) != Ordering::Greater && seq_cmp(seq, b) != Ordering::Greater
        })
    }

    fn mark_done(&mut self, seq: &str) {
        if let Ok(i) = self.log.binary_search_by(|(s, _)| seq_cmp(s, seq)) {
            self.log[i].1 = true;
        }
        while self.log.front().is_some_and(|(_, done)| *done) {
            self.log.pop_front();
        }
    }

    fn position(&self) -> Option<ShardPosition> {
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

pub(crate) struct Reader {
    cfg: Config,
    followed: HashSet<String>,
    shards: Vec<Shard>,
    index: HashMap<(String, String), usize>,
    assembler: Assembler,
    ready: VecDeque<(Option<Change>, Vec<RecId>)>,
    restored: FeedPosition,
    listed_once: bool,
    refresh_at: Option<Instant>,
    /// The shards were listed after the last one closed (its children would be known).
    listed_since_close: bool,
    started_at: Option<Instant>,
    last_record_at: Option<Instant>,
}

fn is_throttling(code: Option<&str>) -> bool {
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
    pub fn new(cfg: Config) -> Reader {
        let mut assembler = Assembler::new();
        assembler.grace = cfg.grace;
        Reader {
            followed: cfg.tables.iter().cloned().collect(),
            cfg,
            shards: Vec::new(),
            index: HashMap::new(),
            assembler,
            ready: VecDeque::new(),
            restored: FeedPosition::default(),
            listed_once: false,
            refresh_at: None,
            listed_since_close: true,
            started_at: None,
            last_record_at: None,
        }
    }

    fn streams(&self) -> &aws_sdk_dynamodbstreams::Client {
        self.cfg.streams.as_ref().expect("made by the first round")
    }

    pub fn restore(&mut self, position: FeedPosition) {
        self.restored = position;
    }

    pub fn buffered(&self) -> usize {
        self.assembler.buffered() + self.ready.len()
    }

    pub fn position(&self) -> FeedPosition {
        let mut p = FeedPosition::default();
        for s in &self.shards {
            if let Some(sp) = s.position() {
                p.streams
                    .entry(s.stream.clone())
                    .or_default()
                    .insert(s.id.clone(), sp);
            }
        }
        // Shards of the saved position not listed yet (the feed has not read that far).
        if !self.listed_once {
            return self.restored.clone();
        }
        p
    }

    fn mark_done(&mut self, rec: &RecId) {
        if let Some(s) = self.shards.get_mut(rec.shard) {
            s.mark_done(&rec.seq);
        }
    }

    pub async fn next(&mut self) -> Result<Option<Change>> {
        let started = *self.started_at.get_or_insert_with(Instant::now);
        loop {
            while let Some((change, recs)) = self.ready.pop_front() {
                for r in &recs {
                    self.mark_done(r);
                }
                if let Some(c) = change {
                    return Ok(Some(c));
                }
            }
            if let Some(idle) = self.cfg.stop_when_idle
                && self.last_record_at.unwrap_or(started).elapsed() >= idle
            {
                return Ok(None);
            }
            if self.listed_once
                && self.shards.iter().all(|s| s.state == State::Finished)
                && self.assembler.buffered() == 0
                && self.listed_since_close
            {
                return Ok(None);
            }
            self.round().await?;
            if self.ready.is_empty() {
                tokio::time::sleep(self.pause()).await;
            }
        }
    }

    /// How long until a shard may be read again (at most the poll interval; at least 10 ms).
    fn pause(&self) -> Duration {
        let now = Instant::now();
        self.shards
            .iter()
            .filter(|s| s.state == State::Reading)
            .filter_map(|s| {
                s.read_at
                    .map(|t| (t + self.cfg.poll_interval).saturating_duration_since(now))
            })
            .min()
            .unwrap_or(self.cfg.poll_interval)
            .clamp(Duration::from_millis(10), self.cfg.poll_interval)
    }

    /// Lists the streams' shards (new ones join, in lineage order).
    async fn refresh(&mut self) -> Result<()> {
        let mut found = Vec::new();
        for table in &self.cfg.tables {
            // A table deleted, or its stream turned off, after the feed listed its shards: those
            // are read to their end (the stream is closed), and nothing new is listed.
            let known = self.shards.iter().any(|s| &s.table == table);
            let Some(desc) = crate::tables::describe(&self.cfg.client, table).await? else {
                if known {
                    continue;
                }
                return Err(Error::table_not_found(table));
            };
            let spec = desc.stream_specification();
            let (Some(arn), true) = (
                desc.latest_stream_arn(),
                spec.is_some_and(|s| {
                    s.stream_enabled()
                        && s.stream_view_type() == Some(&StreamViewType::NewAndOldImages)
                }),
            ) else {
                if known {
                    continue;
                }
                return Err(Error::invalid(format!(
                    "table {table} has no stream with NEW_AND_OLD_IMAGES: a change feed reads it \
                     (UpdateTable with StreamSpecification StreamEnabled=true, \
                     StreamViewType=NEW_AND_OLD_IMAGES)"
                )));
            };
            let mut start: Option<String> = None;
            loop {
                let out = self
                    .streams()
                    .describe_stream()
                    .stream_arn(arn)
                    .set_exclusive_start_shard_id(start.clone())
                    .send()
                    .await
                    .map_err(|e| Error::sdk("DescribeStream", e).on_table(table))?;
                let Some(d) = out.stream_description() else {
                    break;
                };
                for sh in d.shards() {
                    if let Some(id) = sh.shard_id() {
                        found.push((
                            table.clone(),
                            arn.to_string(),
                            id.to_string(),
                            sh.parent_shard_id().map(str::to_string),
                        ));
                    }
                }
                match d.last_evaluated_shard_id() {
                    Some(last) => start = Some(last.to_string()),
                    None => break,
                }
            }
        }
        for (table, arn, id, parent) in found {
            if self.index.contains_key(&(arn.clone(), id.clone())) {
                continue;
            }
            let restored = self
                .restored
                .streams
                .get(&arn)
                .and_then(|m| m.get(&id))
                .cloned();
            let finished = restored.as_ref().is_some_and(|r| r.finished);
            let skip = restored
                .as_ref()
                .map(|r| r.done.clone())
                .unwrap_or_default();
            self.index
                .insert((arn.clone(), id.clone()), self.shards.len());
            self.shards.push(Shard {
                stream: arn,
                table,
                id,
                parent,
                state: if finished {
                    State::Finished
                } else {
                    State::Waiting
                },
                iterator: None,
                born_later: self.listed_once,
                restored,
                last_read: None,
                log: VecDeque::new(),
                skip,
                retry_at: None,
                failures: 0,
                last_time: None,
                caught_up: false,
                read_at: None,
            });
        }
        self.listed_once = true;
        self.refresh_at = Some(Instant::now() + Duration::from_secs(30));
        self.listed_since_close = true;
        Ok(())
    }

    /// An iterator for shard `i`, from where its position says.
    async fn open(&mut self, i: usize) -> Result<()> {
        let s = &self.shards[i];
        let (kind, seq) = if let Some(last) = &s.last_read {
            (ShardIteratorType::AfterSequenceNumber, Some(last.clone()))
        } else if let Some(r) = &s.restored {
            if let Some(at) = &r.resume_at {
                (ShardIteratorType::AtSequenceNumber, Some(at.clone()))
            } else if let Some(after) = &r.after {
                (ShardIteratorType::AfterSequenceNumber, Some(after.clone()))
            } else {
                (ShardIteratorType::TrimHorizon, None)
            }
        } else if self.cfg.oldest
            || s.born_later
            || s.parent
                .as_ref()
                .is_some_and(|p| self.index.contains_key(&(s.stream.clone(), p.clone())))
        {
            (ShardIteratorType::TrimHorizon, None)
        } else {
            (ShardIteratorType::Latest, None)
        };
        let out = self
            .streams()
            .get_shard_iterator()
            .stream_arn(&s.stream)
            .shard_id(&s.id)
            .shard_iterator_type(kind)
            .set_sequence_number(seq)
            .send()
            .await;
        let s = &mut self.shards[i];
        match out {
            Ok(o) => {
                s.iterator = o.shard_iterator().map(str::to_string);
                s.state = if s.iterator.is_some() {
                    State::Reading
                } else {
                    State::Finished
                };
                Ok(())
            }
            Err(e) => {
                let e = Error::sdk("GetShardIterator", e);
                match e.dynamodb_code() {
                    Some("ResourceNotFoundException") => {
                        s.state = State::Finished;
                        Ok(())
                    }
                    Some("TrimmedDataAccessException") => {
                        // The position is older than the stream keeps: read what it still has.
                        s.restored = None;
                        s.last_read = None;
                        s.skip.clear();
                        s.retry_at = Some(Instant::now());
                        Ok(())
                    }
                    c if is_throttling(c) => {
                        s.failures += 1;
                        s.retry_at = Some(Instant::now() + backoff(s.failures));
                        Ok(())
                    }
                    _ => Err(e.on_table(&s.table)),
                }
            }
        }
    }

    /// One round: list shards when due, open what can be opened, read every shard due once,
    /// read the records of transactions waiting for a decision, release what is ready. Whether
    /// any record arrived.
    async fn round(&mut self) -> Result<bool> {
        if self.cfg.streams.is_none() {
            self.cfg.streams = Some(default_streams_client(&self.cfg.client).await);
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

    /// Reads the records of transactions waiting for their decision.
    async fn decide(&mut self) -> Result<()> {
        let ids = self.assembler.to_check(Instant::now());
        for chunk in ids.chunks(16) {
            let client = &self.cfg.client;
            let table = &self.cfg.transactions_table;
            let followed = &self.followed;
            let answers = join_all(chunk.iter().map(|id| async move {
                let r = record::load(client, table, id).await?;
                Ok::<Decision, Error>(match r {
                    // Deleted after it was finalized (or never written, a tombstone): only the
                    // items can tell; a rollback left each as it was.
                    None => Decision::Committed(None),
                    Some(r) => match r.header.state {
                        // The items a locking transaction recorded, or those the fast path
                        // named when it marked its writes.
                        TxState::Committed => Decision::Committed(Some(
                            r.requests
                                .iter()
                                .chain(&r.header.written)
                                .filter(|q| q.op != Op::Get && followed.contains(&q.table))
                                .map(|q| q.item_ref())
                                .collect(),
                        )),
                        TxState::RolledBack => Decision::RolledBack,
                        _ => Decision::Pending,
                    },
                })
            }))
            .await;
            let now = Instant::now();
            for (id, answer) in chunk.iter().zip(answers) {
                let decision: Decision = answer?;
                for done in self.assembler.decide(id, decision, now) {
                    self.mark_done(&done);
                }
            }
        }
        Ok(())
    }
}

/// Backoff after `failures` throttled reads in a row: 100 ms doubling to 5 s, jittered.
fn backoff(failures: u32) -> Duration {
    let base = 100u64.saturating_mul(1 << failures.min(6)).min(5_000);
    Duration::from_millis(base / 2 + rand::random_range(0..=base / 2))
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
