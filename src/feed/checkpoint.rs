//! Where a feed stands, and where it keeps that: [`FeedPosition`], the [`Checkpoint`] trait, a
//! DynamoDB table ([`TableCheckpoint`]) and memory ([`MemoryCheckpoint`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where a [`ChangeFeed`](super::ChangeFeed) stands in its streams: for every shard it has read,
/// the first record it must read again after a restart and the records after it that it has
/// already delivered (so a restart neither loses nor repeats a change, and never splits a
/// transaction). Opaque; store it with [`to_json`](Self::to_json) and read it back with
/// [`from_json`](Self::from_json).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedPosition {
    /// Stream ARN → shard id → position.
    pub(crate) streams: BTreeMap<String, BTreeMap<String, ShardPosition>>,
}

/// One shard's position.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ShardPosition {
    /// Every record of the shard is consumed and the shard is closed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finished: bool,
    /// Read again from this record (inclusive): the oldest record not consumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<String>,
    /// Without `resume_at`: every record up to this one (inclusive) is consumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Ranges of records (inclusive, by sequence number) after `resume_at` already consumed:
    /// skipped when read again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<(String, String)>,
}

impl FeedPosition {
    /// The position as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a position serializes")
    }

    /// A position from [`to_json`](Self::to_json)'s text.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRequest`] if the text is not a position.
    pub fn from_json(text: &str) -> Result<FeedPosition> {
        serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("not a change feed position: {e}")))
    }

    /// Whether the position holds no shard yet (a feed that has read nothing).
    pub fn is_empty(&self) -> bool {
        self.streams.values().all(BTreeMap::is_empty)
    }
}

/// Keeps a [`ChangeFeed`](super::ChangeFeed)'s position across restarts.
///
/// [`ChangeFeed::checkpoint`](super::ChangeFeed::checkpoint) saves the position after every change
/// the feed has returned; a feed built with the same checkpoint starts from the saved position.
/// Saving must replace the previous position atomically: a position is consistent across shards
/// (a transaction spans shards), a mix of two is not.
///
/// ```
/// use dynamodb_transactions::Result;
/// use dynamodb_transactions::feed::{Checkpoint, FeedPosition};
/// use futures::future::BoxFuture;
///
/// /// Keeps the position in a file.
/// struct FileCheckpoint(std::path::PathBuf);
///
/// impl Checkpoint for FileCheckpoint {
///     fn load(&self) -> BoxFuture<'_, Result<Option<FeedPosition>>> {
///         Box::pin(async move {
///             match std::fs::read_to_string(&self.0) {
///                 Ok(text) => FeedPosition::from_json(&text).map(Some),
///                 Err(_) => Ok(None),
///             }
///         })
///     }
///
///     fn save<'a>(&'a self, position: &'a FeedPosition) -> BoxFuture<'a, Result<()>> {
///         Box::pin(async move {
///             // Write aside, then rename: the old position or the new one, never half of each.
///             let tmp = self.0.with_extension("tmp");
///             std::fs::write(&tmp, position.to_json()).expect("writable");
///             std::fs::rename(&tmp, &self.0).expect("renamable");
///             Ok(())
///         })
///     }
/// }
/// ```
pub trait Checkpoint: Send + Sync {
    /// The saved position, `None` if nothing was saved yet.
    fn load(&self) -> BoxFuture<'_, Result<Option<FeedPosition>>>;

    /// Replaces the saved position with `position`.
    fn save<'a>(&'a self, position: &'a FeedPosition) -> BoxFuture<'a, Result<()>>;
}

/// A position kept in memory, shared by clones: for tests, and for a process that rebuilds a
/// feed without restarting.
#[derive(Debug, Clone, Default)]
pub struct MemoryCheckpoint(Arc<Mutex<Option<FeedPosition>>>);

impl MemoryCheckpoint {
    /// An empty checkpoint.
    pub fn new() -> MemoryCheckpoint {
        MemoryCheckpoint::default()
    }

    /// The position saved last.
    pub fn get(&self) -> Option<FeedPosition> {
        self.0.lock().expect("checkpoint poisoned").clone()
    }
}

impl Checkpoint for MemoryCheckpoint {
    fn load(&self) -> BoxFuture<'_, Result<Option<FeedPosition>>> {
        let p = self.get();
        Box::pin(async move { Ok(p) })
    }

    fn save<'a>(&'a self, position: &'a FeedPosition) -> BoxFuture<'a, Result<()>> {
        *self.0.lock().expect("checkpoint poisoned") = Some(position.clone());
        Box::pin(async { Ok(()) })
    }
}

/// The default checkpoint: one item per feed in a DynamoDB table (hash key `FeedName`, S), the
/// position as JSON text in `Position`. One `PutItem` per save, so a save is atomic; the item
/// must stay under DynamoDB's 400 KB (a few hundred bytes per shard read since the last restart
/// of the stream, plus the records buffered after the oldest one waiting).
///
/// ```no_run
/// # async fn example(client: aws_sdk_dynamodb::Client) -> dynamodb_transactions::Result<()> {
/// use dynamodb_transactions::feed::TableCheckpoint;
///
/// let checkpoint = TableCheckpoint::new(client, "FeedCheckpoints", "orders-projection");
/// checkpoint.create_table().await?; // once; idempotent
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TableCheckpoint {
    client: Client,
    table: String,
    name: String,
}

/// Hash key of a checkpoint table.
const FEED_NAME: &str = "FeedName";
/// The position, as JSON text.
const POSITION: &str = "Position";
/// Time of the save, epoch ms.
const SAVED_AT: &str = "SavedAt";

impl TableCheckpoint {
    /// The checkpoint of the feed `name` in `table`.
    pub fn new(
        client: Client,
        table: impl Into<String>,
        name: impl Into<String>,
    ) -> TableCheckpoint {
        TableCheckpoint {
            client,
            table: table.into(),
            name: name.into(),
        }
    }

    /// Creates the table (on-demand capacity) unless it exists, and waits until it is active.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: calling it again finishes the job.
    pub async fn create_table(&self) -> Result<()> {
        let out = self
            .client
            .create_table()
            .table_name(&self.table)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(FEED_NAME)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .expect("complete"),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(FEED_NAME)
                    .key_type(KeyType::Hash)
                    .build()
                    .expect("complete"),
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        if let Err(e) = out {
            let e = Error::sdk("CreateTable", e);
            if e.dynamodb_code() != Some("ResourceInUseException") {
                return Err(e.on_table(&self.table));
            }
        }
        for _ in 0..120 {
            if let Some(d) = crate::tables::describe(&self.client, &self.table).await?
                && d.table_status() == Some(&aws_sdk_dynamodb::types::TableStatus::Active)
            {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        Err(Error::invalid(format!(
            "table {} did not become active within a minute",
            self.table
        )))
    }
}

impl Checkpoint for TableCheckpoint {
    fn load(&self) -> BoxFuture<'_, Result<Option<FeedPosition>>> {
        Box::pin(async move {
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .key(FEED_NAME, AttributeValue::S(self.name.clone()))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| Error::sdk("GetItem", e).on_table(&self.table))?;
            match out.item().and_then(|i| i.get(POSITION)) {
                Some(AttributeValue::S(text)) => FeedPosition::from_json(text).map(Some),
                _ => Ok(None),
            }
        })
    }

    fn save<'a>(&'a self, position: &'a FeedPosition) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.client
                .put_item()
                .table_name(&self.table)
                .item(FEED_NAME, AttributeValue::S(self.name.clone()))
                .item(POSITION, AttributeValue::S(position.to_json()))
                .item(
                    SAVED_AT,
                    AttributeValue::N(crate::ddb::now_millis().to_string()),
                )
                .send()
                .await
                .map_err(|e| Error::sdk("PutItem", e).on_table(&self.table))?;
            Ok(())
        })
    }
}
