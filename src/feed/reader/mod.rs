//! Reading the streams: tables to streams, shards in lineage order, iterators, `GetRecords` with
//! backoff, the TX records that decide transactions, and the position of every shard.
//!
//! `Reader`, its loop and the default Streams client live here; `shard` holds one shard's reading
//! state and position, `discover` lists the shards and opens their iterators, `poll` reads
//! records, and `decisions` reads the TX records of the transactions the assembler holds.

mod decisions;
mod discover;
mod poll;
mod shard;

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::error::Result;

use super::Change;
use super::assemble::{Assembler, RecId};
use super::checkpoint::FeedPosition;
use shard::{Shard, State};

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
                && self.read_to_the_end()
                && !self.assembler.releases_in_time()
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

    /// Whether every shard listed was read to its end: its last read succeeded and returned no
    /// record, and it is not waiting to be opened again or retried (a shard closed and read to
    /// its end counts too). Idle is only idle then: a shard whose reads fail (throttled, an
    /// expired iterator) or that is not open yet may hold records nobody has read.
    fn read_to_the_end(&self) -> bool {
        self.listed_once
            && self.shards.iter().all(|s| match s.state {
                State::Finished => true,
                State::Waiting => false,
                State::Reading => s.caught_up && s.iterator.is_some() && s.retry_at.is_none(),
            })
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
}
