//! GetItem at an isolation level.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::IsolationLevel;
use super::context::{Ctx, UserExprs};
use super::resolve::{Seen, resolve};
use crate::error::{Error, Item, Result};
use crate::manager::TransactionManager;
use crate::transaction::GetOutput;

/// Builds an isolated read of one item. Send with [`send`](IsolatedGetItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct IsolatedGetItemBuilder<'a> {
    mgr: &'a TransactionManager,
    table: String,
    key: Item,
    level: IsolationLevel,
    projection: Option<String>,
    names: Option<HashMap<String, String>>,
    consistent: bool,
}

impl IsolatedGetItemBuilder<'_> {
    /// The table.
    pub fn table_name(mut self, t: impl Into<String>) -> Self {
        self.table = t.into();
        self
    }

    /// Adds one key attribute.
    pub fn key(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.key.insert(k.into(), v);
        self
    }

    /// Replaces the key.
    pub fn set_key(mut self, key: Option<Item>) -> Self {
        self.key = key.unwrap_or_default();
        self
    }

    /// The isolation level (default [`IsolationLevel::Committed`]).
    pub fn isolation(mut self, level: IsolationLevel) -> Self {
        self.level = level;
        self
    }

    /// Which attributes to return. The library adds the lock attributes it needs to the request and
    /// removes them from the result.
    pub fn projection_expression(mut self, p: impl Into<String>) -> Self {
        self.projection = Some(p.into());
        self
    }

    /// Replaces the projection.
    pub fn set_projection_expression(mut self, p: Option<String>) -> Self {
        self.projection = p;
        self
    }

    /// Adds one `ExpressionAttributeNames` entry (for the projection).
    pub fn expression_attribute_names(
        mut self,
        k: impl Into<String>,
        v: impl Into<String>,
    ) -> Self {
        self.names
            .get_or_insert_with(HashMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// Replaces `ExpressionAttributeNames`.
    pub fn set_expression_attribute_names(
        mut self,
        names: Option<HashMap<String, String>>,
    ) -> Self {
        self.names = names;
        self
    }

    /// Strongly consistent read of the item. **Default `false`: eventually consistent, as in
    /// DynamoDB**, and at every isolation level. At [`IsolationLevel::Committed`] that never shows an
    /// uncommitted or rolled-back value (what the first read returns is decided with strongly
    /// consistent reads of the owner's TX record and image), but it may show an older *committed*
    /// version of the item, exactly as an eventually consistent `GetItem` may. Set `true` to read the
    /// latest committed version (twice the read cost of the first read). Follow-up reads the library
    /// makes (TX records, images, re-reads) are always strongly consistent.
    pub fn consistent_read(mut self, c: bool) -> Self {
        self.consistent = c;
        self
    }

    /// Reads the item: one GetItem, plus at `Committed` one read of the owner's TX record if a
    /// transaction has applied a change to it (and one of the images table for large items).
    ///
    /// # Errors
    /// [`Error::InvalidRequest`] for `ReadLock`, a bad key or a bad projection;
    /// [`Error::ReadContention`] when a committed version could not be pinned down after
    /// [`Settings::committed_read_attempts`](crate::Settings::committed_read_attempts) reads.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn send(self) -> Result<GetOutput> {
        let user = UserExprs {
            projection: self.projection,
            names: self.names,
            ..UserExprs::default()
        };
        let (ctx, sent) = Ctx::new(self.mgr, self.level, &self.table, None, &user).await?;
        crate::request::check_item_names("Key", &self.key)?;
        ctx.schema.validate_key(&self.table, &self.key)?;
        let raw = self
            .mgr
            .inner
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key.clone()))
            .set_projection_expression(sent.projection)
            .set_expression_attribute_names(sent.names)
            .consistent_read(self.consistent)
            .send()
            .await
            .map_err(|e| Error::sdk("GetItem", e).on_item(&self.table, &self.key))?
            .item;
        let item = match resolve(self.mgr, self.level, &self.table, raw.as_ref(), None).await? {
            Seen::Absent => None,
            Seen::Version(v, stored) => ctx.finish(v, false, stored),
            Seen::Again => ctx.reread(&self.key, 1).await?,
        };
        Ok(GetOutput { item })
    }
}

impl TransactionManager {
    /// Starts a read of one item outside any transaction, at an isolation level.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// use dynamodb_transactions::IsolationLevel;
    /// let out = m
    ///     .get_item()
    ///     .table_name("Accounts")
    ///     .key("Id", AttributeValue::S("alice".into()))
    ///     .isolation(IsolationLevel::Committed)
    ///     .send()
    ///     .await?;
    /// println!("{:?}", out.item());
    /// # Ok(()) }
    /// ```
    pub fn get_item(&self) -> IsolatedGetItemBuilder<'_> {
        IsolatedGetItemBuilder {
            mgr: self,
            table: String::new(),
            key: Item::new(),
            level: IsolationLevel::default(),
            projection: None,
            names: None,
            consistent: false,
        }
    }
}
