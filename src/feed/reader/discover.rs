//! Shard discovery: the followed tables' streams, their shards listed in lineage order (a child
//! read after its parent), and an iterator for each shard from where its position says.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::StreamViewType;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;

use crate::error::{Error, Result};

use super::Reader;
use super::poll::{backoff, is_throttling};
use super::shard::{Shard, State};

impl Reader {
    /// Lists the streams' shards (new ones join, in lineage order).
    pub(super) async fn refresh(&mut self) -> Result<()> {
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
    pub(super) async fn open(&mut self, i: usize) -> Result<()> {
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
                    // Throttled or failed through the SDK's retries: back off, as GetRecords does.
                    c if is_throttling(c) || e.is_retryable() => {
                        s.failures += 1;
                        s.retry_at = Some(Instant::now() + backoff(s.failures));
                        Ok(())
                    }
                    _ => Err(e.on_table(&s.table)),
                }
            }
        }
    }
}
