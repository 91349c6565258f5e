//! A transactional change feed: the committed changes of user tables, read from their DynamoDB
//! Streams, whole transactions at a time.
//!
//! A table's stream shows every write of the [protocol](crate::guides::protocol) as it happens:
//! the lock of each item (`_TxId` appears), the apply of a phased commit (user attributes change
//! while `_TxId` stays), the write that settles the item (`_TxId` goes away), and for a rolled-back
//! transaction the restore of the item's before-image. A [`ChangeFeed`] turns that into what a
//! consumer wants:
//!
//! - [`Change::Transaction`] for every committed transaction, **once and whole**: every item it
//!   changed in the tables the feed follows, with the item's user attributes before the
//!   transaction (the old image of its lock) and after it (the new image of the write that settled
//!   it), `_Tx` attributes removed;
//! - [`Change::Single`] for every write made outside the library (no lock on either image), and
//!   for the writes of the library's write-only fast path when it did not mark them (see below);
//! - nothing for locks, applies and releases, nothing for a rolled-back transaction, never a value
//!   that was not committed.
//!
//! Per item, changes come in stream order, which is the order they were committed in; two
//! transactions sharing an item come in their commit order. A transaction is released once its
//! TX record says it committed and every item its record names in the followed tables has been
//! settled; a rolled-back one is dropped when its record says so. The repository's `docs/FEED.md`
//! says what is delivered, the bounds, the cost and the differences of DynamoDB Local.
//!
//! **Fast-path transactions.** A write-only transaction of fewer than 100 items commits by default
//! with one native `TransactWriteItems` and no lock ([`Settings::write_only_fast_path`]). By
//! default ([`FastPathStamps::WhenStreamed`]) it marks its writes when a table it writes has a
//! stream with both images: each put and update carries its id (`_TxM`) and its record names the
//! items, and the feed delivers it whole like any other (a transaction with a delete then takes
//! the locking path). Unmarked (a stream turned on after the coordinator first used the table, or
//! [`FastPathStamps::Never`]), its writes arrive as [`Change::Single`]s, each committed; set
//! [`FastPathStamps::Always`] on coordinators that may run while a stream is turned on.
//!
//! [`Settings::write_only_fast_path`]: crate::Settings::write_only_fast_path
//! [`FastPathStamps::WhenStreamed`]: crate::FastPathStamps::WhenStreamed
//! [`FastPathStamps::Never`]: crate::FastPathStamps::Never
//! [`FastPathStamps::Always`]: crate::FastPathStamps::Always
//!
//! # Example
//!
//! ```no_run
//! use dynamodb_transactions::feed::{Change, ChangeFeed, TableCheckpoint};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = aws_sdk_dynamodb::Client::new(&aws_config::load_from_env().await);
//! let checkpoint = TableCheckpoint::new(client.clone(), "FeedCheckpoints", "search-index");
//! checkpoint.create_table().await?;
//! let mut feed = ChangeFeed::builder(client)
//!     .table("Accounts")
//!     .from_start()
//!     .checkpoint(checkpoint)
//!     .build()?;
//! while let Some(change) = feed.next().await? {
//!     match &change {
//!         Change::Transaction { id, items } => println!("{id}: {} items", items.len()),
//!         Change::Single(item) => println!("{}: {:?}", item.table, item.after),
//!         _ => {}
//!     }
//!     // Apply the change idempotently, then save where the feed stands.
//!     feed.checkpoint().await?;
//! }
//! # Ok(()) }
//! ```

mod assemble;
mod checkpoint;
mod convert;
mod reader;

use std::fmt;
use std::time::Duration;

pub use checkpoint::{Checkpoint, FeedPosition, MemoryCheckpoint, TableCheckpoint};

use crate::error::{Error, Item, Result};
use crate::manager::DEFAULT_TRANSACTIONS_TABLE;
use crate::tx_id::TxId;

/// One item's change: its key, and its user attributes before and after (`None`: absent).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ItemChange {
    /// The table.
    pub table: String,
    /// The item's key attributes.
    pub key: Item,
    /// The item before the change, `None` if it did not exist. For a transaction: the item as it
    /// was when the transaction locked it. `None` also in one rare case: the feed did not see the
    /// lock (it began reading after it) and the before-image was kept in the images table.
    pub before: Option<Item>,
    /// The item after the change, `None` if it was deleted.
    pub after: Option<Item>,
}

/// What a [`ChangeFeed`] yields.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Change {
    /// A committed transaction: every item it changed in the tables the feed follows, in the
    /// order the stream showed them. Items the transaction only read, and writes that left the
    /// user attributes as they were, are left out; a transaction without any other is not
    /// yielded.
    Transaction {
        /// The transaction's id (the TX record's).
        id: TxId,
        /// Its changed items.
        items: Vec<ItemChange>,
    },
    /// A write of one item made outside the library's locks.
    Single(ItemChange),
}

impl Change {
    /// The transaction's id, `None` for a [`Change::Single`].
    pub fn transaction_id(&self) -> Option<&TxId> {
        match self {
            Change::Transaction { id, .. } => Some(id),
            Change::Single(_) => None,
        }
    }

    /// The items changed: a transaction's, or the one of a single write.
    pub fn items(&self) -> &[ItemChange] {
        match self {
            Change::Transaction { items, .. } => items,
            Change::Single(item) => std::slice::from_ref(item),
        }
    }
}

/// Where a feed without a saved position begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// The oldest record the streams keep (24 hours on DynamoDB).
    Oldest,
    /// Changes made after the feed first reads each shard.
    Latest,
}

/// Builds a [`ChangeFeed`]; from [`ChangeFeed::builder`].
pub struct ChangeFeedBuilder {
    client: aws_sdk_dynamodb::Client,
    streams: Option<aws_sdk_dynamodbstreams::Client>,
    tables: Vec<String>,
    transactions_table: String,
    start: Start,
    checkpoint: Option<Box<dyn Checkpoint>>,
    poll_interval: Duration,
    stop_when_idle: Option<Duration>,
    window: Duration,
    grace: Duration,
}

impl fmt::Debug for ChangeFeedBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChangeFeedBuilder")
            .field("tables", &self.tables)
            .field("transactions_table", &self.transactions_table)
            .field("start", &self.start)
            .field("poll_interval", &self.poll_interval)
            .field("stop_when_idle", &self.stop_when_idle)
            .finish_non_exhaustive()
    }
}

impl ChangeFeedBuilder {
    /// Follows `table` (repeat for more). Its stream must be enabled with `NEW_AND_OLD_IMAGES`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.tables.push(table.into());
        self
    }

    /// The transactions table whose records decide transactions (default
    /// [`DEFAULT_TRANSACTIONS_TABLE`]).
    pub fn transactions_table(mut self, table: impl Into<String>) -> Self {
        self.transactions_table = table.into();
        self
    }

    /// Without a saved position, begin at the oldest record the streams keep (default: only
    /// changes made after the feed first reads each shard).
    pub fn from_start(mut self) -> Self {
        self.start = Start::Oldest;
        self
    }

    /// Where the position is kept: the feed starts from the position it holds, and
    /// [`ChangeFeed::checkpoint`] saves there.
    pub fn checkpoint(mut self, checkpoint: impl Checkpoint + 'static) -> Self {
        self.checkpoint = Some(Box::new(checkpoint));
        self
    }

    /// The DynamoDB Streams client. By default one is made when the feed first reads, from the
    /// AWS configuration of the environment (`aws_config::load_defaults`: credentials, region),
    /// with the DynamoDB client's region, retry and timeout settings when it has them, and the
    /// endpoint `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`, else `AWS_ENDPOINT_URL_DYNAMODB` or
    /// `AWS_ENDPOINT_URL`, else DynamoDB Streams' own in the region. The SDK does not tell a
    /// client's endpoint or credentials set in code: when the DynamoDB client was given them
    /// (DynamoDB Local, say), give a Streams client made the same way, e.g.
    /// `aws_sdk_dynamodbstreams::Client::new(&sdk_config)` from the same `SdkConfig`.
    pub fn streams_client(mut self, client: aws_sdk_dynamodbstreams::Client) -> Self {
        self.streams = Some(client);
        self
    }

    /// How long to wait before reading a shard again after it returned nothing (default 500 ms).
    /// DynamoDB allows up to 5 `GetRecords` per second per shard, shared by every reader.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// [`ChangeFeed::next`] returns `Ok(None)` once no record arrived for this long, nothing is
    /// ready, and every shard was read to its end: its last `GetRecords` succeeded and returned
    /// nothing (a shard whose reads fail meanwhile, throttled or with an expired iterator, or that
    /// is not open yet, keeps the feed going). A committed transaction that goes once its
    /// [`settle_grace`](Self::settle_grace) is over, or whose record is not read yet, is waited
    /// for; one waiting for another coordinator (undecided, or an item still locked) is not: it
    /// stays unconsumed, and a feed resumed from its checkpoint delivers it. Default: it waits for
    /// ever, until the streams end.
    pub fn stop_when_idle(mut self, idle: Duration) -> Self {
        self.stop_when_idle = Some(idle);
        self
    }

    /// How far ahead (by the records' creation times) a shard may be read of the slowest shard
    /// still catching up (default 60 s): bounds what is buffered while a transaction's items
    /// arrive from shards read at different speeds.
    pub fn read_ahead(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How long a committed transaction waits for an item its record names whose lock the feed
    /// never saw (default 10 s): the item's records may be in a shard not read that far yet, or
    /// before the feed's start. Also, for a transaction whose record is gone (deleted after it was
    /// finalized), how long after its last record it is released.
    pub fn settle_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The feed. Nothing is read until the first [`next`](ChangeFeed::next).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRequest`] without a table, or when a followed table is the transactions
    /// table.
    pub fn build(self) -> Result<ChangeFeed> {
        if self.tables.is_empty() {
            return Err(Error::invalid("a change feed needs at least one table"));
        }
        if self.tables.contains(&self.transactions_table) {
            return Err(Error::invalid(format!(
                "table {} is the transactions table, not a user table",
                self.transactions_table
            )));
        }
        Ok(ChangeFeed {
            reader: reader::Reader::new(reader::Config {
                client: self.client,
                streams: self.streams,
                tables: self.tables,
                transactions_table: self.transactions_table,
                oldest: self.start == Start::Oldest,
                poll_interval: self.poll_interval,
                stop_when_idle: self.stop_when_idle,
                window: self.window,
                grace: self.grace,
            }),
            checkpoint: self.checkpoint,
            loaded: false,
        })
    }
}

/// The committed changes of user tables, from their DynamoDB Streams (see the [module](self)).
pub struct ChangeFeed {
    reader: reader::Reader,
    checkpoint: Option<Box<dyn Checkpoint>>,
    loaded: bool,
}

impl fmt::Debug for ChangeFeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChangeFeed").finish_non_exhaustive()
    }
}

impl ChangeFeed {
    /// A builder of a feed reading through `client` (DynamoDB: table descriptions and TX records).
    ///
    /// ```no_run
    /// # async fn example(client: aws_sdk_dynamodb::Client) -> dynamodb_transactions::Result<()> {
    /// use dynamodb_transactions::feed::ChangeFeed;
    ///
    /// let mut feed = ChangeFeed::builder(client)
    ///     .table("Orders")
    ///     .table("Stock")
    ///     .from_start()
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(client: aws_sdk_dynamodb::Client) -> ChangeFeedBuilder {
        ChangeFeedBuilder {
            client,
            streams: None,
            tables: Vec::new(),
            transactions_table: DEFAULT_TRANSACTIONS_TABLE.to_string(),
            start: Start::Latest,
            checkpoint: None,
            poll_interval: Duration::from_millis(500),
            stop_when_idle: None,
            window: Duration::from_secs(60),
            grace: Duration::from_secs(10),
        }
    }

    /// The next change: waits until one is ready. `Ok(None)` once every stream has ended (its
    /// table deleted or its stream disabled, and every record read), or after
    /// [`stop_when_idle`](ChangeFeedBuilder::stop_when_idle) without a record.
    ///
    /// # Errors
    ///
    /// A followed table without a stream, or with a stream without both images:
    /// [`Error::InvalidRequest`]; a failed DynamoDB or DynamoDB Streams request (after the SDK's
    /// retries and the feed's backoff on throttling and server errors): [`Error::DynamoDb`]. The
    /// feed stays usable: call `next` again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a change is taken from the feed only when `next` returns it, and the feed's
    /// state changes only after each request has answered, so a `next` dropped at any await
    /// (in a `tokio::select!`, say) loses no change; the next call goes on.
    pub async fn next(&mut self) -> Result<Option<Change>> {
        if !self.loaded {
            if let Some(c) = &self.checkpoint
                && let Some(p) = c.load().await?
            {
                self.reader.restore(p);
            }
            self.loaded = true;
        }
        self.reader.next().await
    }

    /// Where the feed stands: after every change [`next`](Self::next) has returned.
    pub fn position(&self) -> FeedPosition {
        self.reader.position()
    }

    /// Saves [`position`](Self::position) in the checkpoint (nothing without one). After a
    /// restart with the same checkpoint, the feed goes on with the change after the last one
    /// returned before the save: none lost, none split; those returned after the save are
    /// returned again, each whole and, for a transaction, with the same id.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe as far as the checkpoint's `save` is ([`TableCheckpoint`]: one `PutItem`,
    /// which landed or not).
    pub async fn checkpoint(&mut self) -> Result<()> {
        if let Some(c) = &self.checkpoint {
            let p = self.reader.position();
            c.save(&p).await?;
        }
        Ok(())
    }

    /// Records buffered: changes not ready yet (transactions waiting for their decision or for
    /// items still to come, and what waits behind them), and locks not settled yet.
    pub fn buffered(&self) -> usize {
        self.reader.buffered()
    }
}
