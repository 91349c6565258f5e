//! Typed items: your own `serde` types in and out of DynamoDB (through `serde_dynamo`), inside and
//! outside transactions, next to the raw [`Item`] API.
//!
//! ```no_run
//! # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
//! use dynamodb_transactions::{IsolationLevel, to_item};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Account {
//!     #[serde(rename = "Id")]
//!     id: String,
//!     balance: i64,
//! }
//!
//! #[derive(Serialize)]
//! struct AccountKey<'a> {
//!     #[serde(rename = "Id")]
//!     id: &'a str,
//! }
//!
//! m.run(async |tx| {
//!     let alice = to_item(&AccountKey { id: "alice" })?;
//!     let bob = to_item(&AccountKey { id: "bob" })?;
//!     tx.update::<Account, _>("Accounts", alice, |a| a.balance -= 10).await?;
//!     tx.update::<Account, _>("Accounts", bob, |a| a.balance += 10).await?;
//!     Ok(())
//! })
//! .await?;
//!
//! let bob: Option<Account> = m
//!     .get("Accounts", to_item(&AccountKey { id: "bob" })?, IsolationLevel::Committed)
//!     .await?;
//! # Ok(()) }
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Item, Result};
use crate::isolation::{IsolationLevel, Page};
use crate::keys::ItemRef;
use crate::manager::TransactionManager;
use crate::transaction::Transaction;

/// Converts a value to an item (or a key): a struct or map whose fields become attributes.
///
/// # Errors
/// [`Error::Serde`](crate::Error::Serde) if the value does not serialize to a map.
pub fn to_item<T: Serialize + ?Sized>(value: &T) -> Result<Item> {
    Ok(serde_dynamo::to_item(value)?)
}

/// Converts an item to a value.
///
/// # Errors
/// [`Error::Serde`](crate::Error::Serde) if the item does not match the type.
pub fn from_item<T: DeserializeOwned>(item: Item) -> Result<T> {
    Ok(serde_dynamo::from_item(item)?)
}

/// Converts items to values.
///
/// # Errors
/// [`Error::Serde`](crate::Error::Serde) if an item does not match the type.
pub fn from_items<T: DeserializeOwned>(items: Vec<Item>) -> Result<Vec<T>> {
    items.into_iter().map(from_item).collect()
}

impl Page {
    /// The page's items as values of `T`.
    ///
    /// # Errors
    /// [`Error::Serde`](crate::Error::Serde) if an item does not match the type.
    pub fn items_as<T: DeserializeOwned>(&self) -> Result<Vec<T>> {
        from_items(self.items.clone())
    }
}

impl Transaction {
    /// Puts a value as an item of `table` (its key attributes among its fields), replacing the item.
    /// Like [`put_item`](Transaction::put_item) without `ReturnValues`: buffered until commit.
    ///
    /// ```no_run
    /// # async fn demo(tx: &dynamodb_transactions::Transaction) -> dynamodb_transactions::Result<()> {
    /// #[derive(serde::Serialize)]
    /// struct Account { #[serde(rename = "Id")] id: String, balance: i64 }
    /// tx.put("Accounts", &Account { id: "carol".into(), balance: 0 }).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Serde`](crate::Error::Serde) if the value does not serialize to a map; otherwise as
    /// [`PutItemBuilder::send`](crate::PutItemBuilder::send).
    ///
    /// # Cancel safety
    /// Nothing is written before commit; safe to drop.
    pub async fn put<T: Serialize + ?Sized>(&self, table: &str, value: &T) -> Result<()> {
        self.put_item()
            .table_name(table)
            .set_item(Some(to_item(value)?))
            .send()
            .await
            .map(|_| ())
    }

    /// Reads an item under a read lock (as [`get_item`](Transaction::get_item)) as a value of `T`;
    /// `None` if it does not exist.
    ///
    /// # Errors
    /// [`Error::Serde`](crate::Error::Serde) if the item does not match the type; otherwise as
    /// [`GetItemBuilder::send`](crate::GetItemBuilder::send).
    ///
    /// # Cancel safety
    /// As [`GetItemBuilder::send`](crate::GetItemBuilder::send): the item may be left locked by the
    /// transaction until it ends.
    pub async fn get<T: DeserializeOwned>(&self, table: &str, key: Item) -> Result<Option<T>> {
        self.get_item()
            .table_name(table)
            .set_key(Some(key))
            .send()
            .await?
            .item
            .map(from_item)
            .transpose()
    }

    /// Read-modify-write of one item as a value of `T`: reads it under a read lock, lets `change`
    /// modify it and puts the result (buffered until commit). Returns the new value, or `None` (and
    /// writes nothing) if the item does not exist.
    ///
    /// # Errors
    /// As [`get`](Transaction::get) and [`put`](Transaction::put). The key attributes must not change.
    ///
    /// # Cancel safety
    /// As [`get`](Transaction::get).
    pub async fn update<T, F>(&self, table: &str, key: Item, change: F) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(&mut T),
    {
        let Some(mut value) = self.get::<T>(table, key.clone()).await? else {
            return Ok(None);
        };
        change(&mut value);
        let item = to_item(&value)?;
        // Compared as DynamoDB compares keys: `1.50` is the `1.5` the item was read back with.
        let new_key: Item = key
            .keys()
            .filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        if ItemRef::new(table, &new_key) != ItemRef::new(table, &key) {
            return Err(crate::Error::invalid(format!(
                "update of an item of table {table} must not change its key"
            )));
        }
        self.put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await?;
        Ok(Some(value))
    }
}

impl TransactionManager {
    /// Reads one item outside any transaction at `level` as a value of `T`; `None` if it does not
    /// exist at that level.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use dynamodb_transactions::{IsolationLevel, to_item};
    /// #[derive(serde::Deserialize)]
    /// struct Account { balance: i64 }
    /// let key = to_item(&std::collections::HashMap::from([("Id", "alice")]))?;
    /// let a: Option<Account> = m.get("Accounts", key, IsolationLevel::Committed).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Serde`](crate::Error::Serde) if the item does not match the type; otherwise as
    /// [`IsolatedGetItemBuilder::send`](crate::IsolatedGetItemBuilder::send).
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn get<T: DeserializeOwned>(
        &self,
        table: &str,
        key: Item,
        level: IsolationLevel,
    ) -> Result<Option<T>> {
        self.get_item()
            .table_name(table)
            .set_key(Some(key))
            .isolation(level)
            .send()
            .await?
            .item
            .map(from_item)
            .transpose()
    }

    /// Puts a value as an item of `table` in a transaction of its own (retried on contention as
    /// [`run`](TransactionManager::run) does).
    ///
    /// # Errors
    /// As [`Transaction::put`] and [`run`](TransactionManager::run).
    ///
    /// # Cancel safety
    /// As [`run`](TransactionManager::run).
    pub async fn put<T: Serialize + ?Sized>(&self, table: &str, value: &T) -> Result<()> {
        let item = to_item(value)?;
        self.run(async |tx| {
            tx.put_item()
                .table_name(table)
                .set_item(Some(item.clone()))
                .send()
                .await
                .map(|_| ())
        })
        .await
    }

    /// Read-modify-write of one item in a transaction of its own: see [`Transaction::update`].
    /// `change` may run more than once if the transaction is retried.
    ///
    /// # Errors
    /// As [`Transaction::update`] and [`run`](TransactionManager::run).
    ///
    /// # Cancel safety
    /// As [`run`](TransactionManager::run).
    pub async fn update<T, F>(&self, table: &str, key: Item, change: F) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(&mut T),
    {
        self.run(async |tx| tx.update::<T, _>(table, key.clone(), &change).await)
            .await
    }
}
