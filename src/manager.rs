//! [`TransactionManager`]: the entry point. Holds the client, the table names and the settings.

use std::sync::Arc;

use aws_sdk_dynamodb::Client;

use crate::TxId;
use crate::error::{Error, Item, Result, TableRole};
use crate::keys::SchemaCache;
use crate::record::{self, TxState};
use crate::settings::{self, ContentionPolicy, Inner, Settings};
use crate::settle;
use crate::tables;
use crate::transaction::Transaction;

/// Default name of the transactions table.
pub const DEFAULT_TRANSACTIONS_TABLE: &str = "Transactions";
/// Default name of the images table.
pub const DEFAULT_IMAGES_TABLE: &str = "TransactionImages";

/// Coordinates transactions over DynamoDB tables.
///
/// Cheap to clone (an `Arc` inside); `Send + Sync`. Create one per process and share it.
///
/// ```no_run
/// # async fn demo(client: aws_sdk_dynamodb::Client) -> dynamodb_transactions::Result<()> {
/// use dynamodb_transactions::TransactionManager;
/// let manager = TransactionManager::builder(client)
///     .transactions_table("Transactions")
///     .images_table("TransactionImages")
///     .build();
/// manager.create_tables().await?; // idempotent
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TransactionManager {
    pub(crate) inner: Arc<Inner>,
}

/// Builds a [`TransactionManager`].
#[derive(Debug)]
#[must_use]
pub struct TransactionManagerBuilder {
    client: Client,
    tx_table: String,
    image_table: String,
    settings: Settings,
}

impl TransactionManagerBuilder {
    /// Name of the transactions table (default [`DEFAULT_TRANSACTIONS_TABLE`]).
    pub fn transactions_table(mut self, name: impl Into<String>) -> Self {
        self.tx_table = name.into();
        self
    }

    /// Name of the images table (default [`DEFAULT_IMAGES_TABLE`]).
    pub fn images_table(mut self, name: impl Into<String>) -> Self {
        self.image_table = name.into();
        self
    }

    /// Replaces all settings.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Changes some settings in place.
    pub fn configure(mut self, f: impl FnOnce(&mut Settings)) -> Self {
        f(&mut self.settings);
        self
    }

    /// Builds the manager. Does no I/O; call [`TransactionManager::create_tables`] or
    /// [`TransactionManager::verify_tables`] before use.
    pub fn build(self) -> TransactionManager {
        // A request that fails for a missing table names only the table: this lets the error
        // say that it is one of the library's tables and how to create it.
        crate::error::register_table(&self.tx_table, TableRole::Transactions);
        crate::error::register_table(&self.image_table, TableRole::Images);
        TransactionManager {
            inner: Arc::new(Inner {
                client: crate::ddb::track_sends(self.client),
                tx_table: self.tx_table,
                image_table: self.image_table,
                settings: self.settings,
                schemas: SchemaCache::default(),
                unrecorded_tables: Default::default(),
                notices: Default::default(),
            }),
        }
    }
}

impl TransactionManager {
    /// Starts building a manager around an `aws_sdk_dynamodb::Client`.
    pub fn builder(client: Client) -> TransactionManagerBuilder {
        TransactionManagerBuilder {
            client,
            tx_table: DEFAULT_TRANSACTIONS_TABLE.into(),
            image_table: DEFAULT_IMAGES_TABLE.into(),
            settings: Settings::default(),
        }
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Name of the transactions table.
    pub fn transactions_table(&self) -> &str {
        &self.inner.tx_table
    }

    /// Name of the images table.
    pub fn images_table(&self) -> &str {
        &self.inner.image_table
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Creates the transactions and images tables (on-demand billing) unless they exist, and waits
    /// until both are ACTIVE. Idempotent: existing tables are verified instead.
    ///
    /// # Errors
    /// [`Error::TableMismatch`](crate::Error::TableMismatch) names the table and what differs when an
    /// existing table has the wrong key schema.
    ///
    /// # Cancel safety
    /// Dropping the future midway may leave a table created but not yet waited for; calling again
    /// finishes the job.
    pub async fn create_tables(&self) -> Result<()> {
        let wait = self.inner.settings.table_wait;
        let c = &self.inner.client;
        let (a, b) = tokio::join!(
            tables::create_or_verify(c, &self.inner.tx_table, &tables::TX_TABLE, wait),
            tables::create_or_verify(c, &self.inner.image_table, &tables::IMAGE_TABLE, wait),
        );
        a.and(b)
    }

    /// Checks that both tables exist with the right key schema.
    ///
    /// # Errors
    /// [`Error::TableNotFound`](crate::Error::TableNotFound) or
    /// [`Error::TableMismatch`](crate::Error::TableMismatch), naming the table.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop at any point.
    pub async fn verify_tables(&self) -> Result<()> {
        let c = &self.inner.client;
        tables::verify(c, &self.inner.tx_table, &tables::TX_TABLE).await?;
        tables::verify(c, &self.inner.image_table, &tables::IMAGE_TABLE).await
    }
}

impl TransactionManager {
    /// Starts a new transaction. Nothing is written until it first needs to be (a read, a write with
    /// return values, or commit).
    pub fn begin(&self) -> Transaction {
        Transaction::new(self.inner.clone(), TxId::new_random())
    }

    /// Resumes a transaction from its record, to drive it from this coordinator: `commit` finishes
    /// it, `rollback` undoes it, reads and writes add to it.
    ///
    /// # Two handles of one transaction
    /// A resumed handle is another coordinator of the same transaction, even in the same process:
    /// the handles share no memory. Each sees the other's requests once they are recorded (reads
    /// and writes with `ReturnValues` record at once; other writes at commit), and an append that
    /// meets the other's merges its requests. If one handle commits while the other still holds
    /// unrecorded writes, the other's `commit` returns [`Error::CommittedWithout`] naming how many
    /// of its requests were left out, never `Ok` or [`Error::AlreadyCommitted`]. Drive a transaction
    /// from one handle at a time; resume to take over a handle that is gone.
    ///
    /// # Errors
    /// [`Error::TransactionNotFound`] if no record exists.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn resume(&self, id: &TxId) -> Result<Transaction> {
        Transaction::load(self.inner.clone(), id).await
    }

    /// Rolls back the transaction `id` (resuming it). Succeeds if it is or was already rolled back.
    ///
    /// # Errors
    /// [`Error::AlreadyCommitted`] if it committed; [`Error::TransactionNotFound`] if there is no record.
    ///
    /// # Cancel safety
    /// As [`Transaction::rollback`].
    pub async fn rollback_transaction(&self, id: &TxId) -> Result<()> {
        self.resume(id).await?.rollback().await
    }

    /// Drives a decided transaction to completion (releasing every lock), even if its record says it
    /// is finalized. Returns its state; a pending transaction is left alone.
    ///
    /// # Cancel safety
    /// Safe to drop midway; calling again continues.
    pub async fn complete_transaction(&self, id: &TxId) -> Result<TxState> {
        settle::complete_transaction(&self.inner, id).await
    }

    /// Deletes the record of a finalized transaction. Returns false if it is not finalized.
    ///
    /// # Cancel safety
    /// Safe to drop midway; calling again finishes the job.
    pub async fn delete_transaction(&self, id: &TxId) -> Result<bool> {
        record::delete(&self.inner.client, &self.inner.tx_table, id).await
    }

    /// The state of a transaction as its record says, `None` if its record does not exist.
    ///
    /// `None` does not tell what happened to a transaction. Its record is absent when the
    /// transaction never wrote one, and then it wrote nothing at all: one that never wrote, or
    /// one whose only commit request was refused as a whole (the write-only fast path's
    /// `TransactWriteItems`, for instance on a false condition: `commit` returned
    /// [`Error::ConditionFailed`], and nothing was applied). It is absent too once a finished
    /// transaction's record was deleted (`delete_after`, TTL), or when the id is wrong. What
    /// `commit`, `rollback` or `run` returned says what the transaction's outcome was
    /// ([`Error::transaction_outcome`]: a `ConditionFailed` is rolled back, whatever the record
    /// says); read the state to follow a transaction another coordinator may still drive, or one
    /// whose outcome was `Pending` or `Undetermined`.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn transaction_state(&self, id: &TxId) -> Result<Option<TransactionStatus>> {
        Ok(
            record::load_header(&self.inner.client, &self.inner.tx_table, id)
                .await?
                .map(|h| TransactionStatus {
                    state: h.state,
                    finalized: h.finalized,
                }),
        )
    }
}

/// What a transaction's record says, as [`TransactionManager::transaction_state`] reads it.
///
/// Compares equal to a `(TxState, bool)` pair of the same state and `finalized`, e.g.
/// `status == (TxState::Committed, true)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TransactionStatus {
    /// Pending, committed or rolled back.
    pub state: TxState,
    /// True once the transaction is finished: decided, every item settled (locks released or
    /// before-images restored) and its images deleted. Only then may the record be deleted.
    pub finalized: bool,
}

impl TransactionStatus {
    /// Pending, committed or rolled back.
    pub fn state(&self) -> TxState {
        self.state
    }

    /// True once the transaction is finished (decided and every item settled).
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }
}

impl PartialEq<(TxState, bool)> for TransactionStatus {
    fn eq(&self, other: &(TxState, bool)) -> bool {
        (self.state, self.finalized) == *other
    }
}

impl TransactionManager {
    /// Runs a unit of work in a transaction: begins, runs `work`, commits; rolls back when `work`
    /// fails; runs it again (after a jittered backoff, up to [`Settings::run_attempts`]) when the
    /// failure is retryable (lost contention, rolled back by a competitor, throttling).
    ///
    /// `work` may run several times, so it should only act through the transaction.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// m.run(async |tx| {
    ///     let from = tx.get_item().table_name("Accounts").key("Id", AttributeValue::S("a".into())).send().await?;
    ///     // ... decide using `from`, then write:
    ///     tx.update_item()
    ///         .table_name("Accounts")
    ///         .key("Id", AttributeValue::S("a".into()))
    ///         .update_expression("SET balance = balance - :x")
    ///         .expression_attribute_values(":x", AttributeValue::N("5".into()))
    ///         .send()
    ///         .await?;
    ///     Ok(())
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A retry keeps the unit of work's contention ticket, in a class that outranks every first
    /// attempt (with [`ContentionPolicy::Ordered`], a retry is older than any transaction's first
    /// attempt, and among retries the tickets' order holds), and first takes locked reads of the
    /// items the failed attempt read, in key order ([`Settings::run_relocks_reads`]), before it
    /// runs `work` again; an attempt rolled back while it relocked (by an older transaction it
    /// waited beside) ends there, without running `work` on it. An attempt whose read, released
    /// to take an item below it in key order, changed before it was taken back
    /// ([`Settings::reorder_held_reads`]) holds every lock it asked for and has written nothing:
    /// `work` then runs again in the same transaction (the read returned `RolledBack` to it),
    /// reading under the locks it holds; that run counts as an attempt.
    ///
    /// # Errors
    /// The last error when it is not retryable or attempts ran out. After a failed commit `run`
    /// rolls the attempt back (a commit that landed after all makes `run` return `Ok`) before it
    /// tries again, so an attempt that is retried never takes effect: retryable are
    /// [`Error::RolledBack`], [`Error::ItemLocked`], [`Error::ReadContention`] and DynamoDB errors
    /// that say "try again" (throttling, including `TransactWriteItems` cancelled for
    /// `ThrottlingError`, `ProvisionedThroughputExceeded` or `TransactionConflict`; 5xx answers and
    /// timeouts). A commit request that landed is never retried: its outcome is read from the
    /// record. [`Error::Undetermined`] when the commit's outcome could not be learned: the work may
    /// or may not have taken effect, exactly once at most; `run` returns it at once.
    ///
    /// [`Error::transaction_outcome`] of the error `run` returns: `Undetermined` as just said;
    /// otherwise the last attempt did not commit (a commit that landed makes `run` return `Ok`)
    /// and `run` rolled it back — `RolledBack` or `Pending` by the error's kind (`Pending`: the
    /// rollback may have failed too; then contenders or the sweeper roll it back). An error of
    /// `work` itself is returned as it is, after the attempt was rolled back.
    ///
    /// # Cancel safety
    /// Dropping the future midway leaves the current attempt's transaction pending (never half
    /// applied); it is rolled back by whoever meets its locks, or by the sweeper.
    #[tracing::instrument(level = "info", skip_all, fields(attempts = tracing::field::Empty, outcome = tracing::field::Empty, error.kind = tracing::field::Empty))]
    pub async fn run<T, F>(&self, mut work: F) -> Result<T>
    where
        F: AsyncFnMut(&Transaction) -> Result<T>,
    {
        // One ticket for every attempt: a retried unit of work only gets older (a retry records it
        // in the retries' class, older than every first attempt).
        let ticket: Arc<tokio::sync::OnceCell<u64>> = Arc::default();
        // Its places in items' queues, kept across attempts with the ticket, taken back at the end.
        let places = crate::transaction::Places::default();
        let r = self.run_attempts(&mut work, ticket, &places).await;
        places.leave(&self.inner).await;
        r
    }

    /// `run`'s attempts, with the unit of work's ticket and places.
    async fn run_attempts<T, F>(
        &self,
        work: &mut F,
        ticket: Arc<tokio::sync::OnceCell<u64>>,
        places: &crate::transaction::Places,
    ) -> Result<T>
    where
        F: AsyncFnMut(&Transaction) -> Result<T>,
    {
        let attempts = self.inner.settings.run_attempts.max(1);
        let mut attempt = 0;
        // What the failed attempt read, locked first by the next one (`run_relocks_reads`).
        let mut relock: Vec<(String, Item)> = Vec::new();
        loop {
            attempt += 1;
            let first_attempt = attempt == 1;
            let tx = Transaction::with_ticket(
                self.inner.clone(),
                TxId::new_random(),
                ticket.clone(),
                places.clone(),
                !first_attempt,
            )
            .in_run();
            let id = tx.id().clone();
            let mut worked = match tx.lock_reads(&relock).await {
                Ok(()) => work(&tx).await,
                Err(e) => Err(e),
            };
            // A read taken back in key order changed (`Settings::reorder_held_reads`): the work
            // runs again in this transaction, which holds every lock it asked for.
            while worked.is_err() && attempt < attempts && tx.take_restart().await {
                attempt += 1;
                tracing::debug!(tx = %id, attempt, "running the unit of work again in its transaction");
                crate::metrics::retry(crate::metrics::RUN_ATTEMPT);
                worked = work(&tx).await;
            }
            if self.inner.settings.run_relocks_reads {
                relock = tx.read_items().await;
            }
            let err = match worked {
                Ok(v) => match tx.commit().await {
                    Ok(()) => return crate::metrics::run_result(Ok(v), attempt),
                    // Undetermined, or committed without some requests: retrying the work is
                    // not safe, and rolling back cannot change a commit.
                    Err(e)
                        if e.is_undetermined() || matches!(e, Error::CommittedWithout { .. }) =>
                    {
                        return crate::metrics::run_result(Err(e), attempt);
                    }
                    Err(e) => {
                        // Leave nothing pending behind; a commit that landed after all wins.
                        match self.rollback_transaction(&id).await {
                            Err(Error::AlreadyCommitted { .. }) => {
                                return crate::metrics::run_result(Ok(v), attempt);
                            }
                            _ => e,
                        }
                    }
                },
                Err(e) => {
                    if let Err(Error::AlreadyCommitted { .. }) = tx.rollback().await {
                        return Err(Error::invariant(
                            "a transaction committed while its work failed",
                        ));
                    }
                    e
                }
            };
            if !err.is_retryable() || attempt >= attempts {
                return crate::metrics::run_result(Err(err), attempt);
            }
            // Rolled back by a competitor before meeting contention itself: take a ticket now, so
            // the next attempt is ordered (only a policy that compares tickets needs one).
            if matches!(err, Error::RolledBack { .. } | Error::ItemLocked { .. })
                && matches!(
                    self.inner.settings.contention,
                    ContentionPolicy::Ordered { .. }
                )
                && ticket.get().is_none()
            {
                let _ = crate::ticket::take_once(&self.inner, &ticket).await;
            }
            if first_attempt {
                // The retries record the ticket in another class: the places taken with the first
                // attempt's ticket no longer say where this unit of work stands.
                places.leave(&self.inner).await;
            }
            tracing::debug!(tx = %id, attempt, error = %err, "retrying unit of work");
            crate::metrics::retry(crate::metrics::RUN_ATTEMPT);
            settings::backoff(&self.inner.settings, attempt).await;
        }
    }
}
