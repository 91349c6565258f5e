//! BatchGetItem at an isolation level.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::KeysAndAttributes;

use super::context::{Ctx, Sent, UserExprs};
use super::{IsolationLevel, read_lock_error};
use crate::error::{Error, Item, Result};
use crate::manager::TransactionManager;

/// Builds an isolated read of many items of one or more tables. Send with
/// [`send`](IsolatedBatchGetItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct IsolatedBatchGetItemBuilder<'a> {
    mgr: &'a TransactionManager,
    items: HashMap<String, KeysAndAttributes>,
    level: IsolationLevel,
}

/// Result of an isolated BatchGetItem.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct BatchGetOutput {
    /// For every table asked for, the items found (in no particular order). Items that do not exist
    /// at the chosen level are left out. Every requested table has an entry, empty if nothing was found.
    pub responses: HashMap<String, Vec<Item>>,
}

impl BatchGetOutput {
    /// The items found, per table.
    pub fn responses(&self) -> &HashMap<String, Vec<Item>> {
        &self.responses
    }
}

impl IsolatedBatchGetItemBuilder<'_> {
    /// Adds the keys (and optionally `ProjectionExpression`, `ExpressionAttributeNames` and
    /// `ConsistentRead`) to read from one table, as in the SDK's `BatchGetItem`. The legacy
    /// `AttributesToGet` is not supported.
    pub fn request_items(mut self, table: impl Into<String>, k: KeysAndAttributes) -> Self {
        self.items.insert(table.into(), k);
        self
    }

    /// Replaces all tables' requests.
    pub fn set_request_items(mut self, items: Option<HashMap<String, KeysAndAttributes>>) -> Self {
        self.items = items.unwrap_or_default();
        self
    }

    /// The isolation level (default [`IsolationLevel::Committed`]).
    pub fn isolation(mut self, level: IsolationLevel) -> Self {
        self.level = level;
        self
    }

    /// Reads the items: BatchGetItem requests of up to 100 keys (unprocessed keys are retried with
    /// backoff until none is left), plus at `Committed` one read of each distinct TX record that has
    /// applied changes to items of a request (and of the images table for large items), and a
    /// consistent GetItem per item that was in flux.
    ///
    /// # Errors
    /// [`Error::InvalidRequest`] for `ReadLock`, bad keys, projections or `AttributesToGet`;
    /// [`Error::ReadContention`] as for
    /// [`IsolatedGetItemBuilder::send`](crate::IsolatedGetItemBuilder::send).
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn send(self) -> Result<BatchGetOutput> {
        if self.level == IsolationLevel::ReadLock {
            return Err(read_lock_error());
        }
        let mut ctxs: HashMap<String, (Ctx, Sent, Option<bool>)> = HashMap::new();
        let mut keys: Vec<(String, Item)> = Vec::new();
        for (table, ka) in &self.items {
            if ka.attributes_to_get.is_some() {
                return Err(Error::invalid(
                    "AttributesToGet is not supported; use ProjectionExpression",
                ));
            }
            let user = UserExprs {
                projection: ka.projection_expression.clone(),
                names: ka.expression_attribute_names.clone(),
                ..UserExprs::default()
            };
            let (ctx, sent) = Ctx::new(self.mgr, self.level, table, None, &user).await?;
            for k in ka.keys() {
                crate::request::check_item_names("Key", k)?;
                ctx.schema.validate_key(table, k)?;
                keys.push((table.clone(), k.clone()));
            }
            ctxs.insert(table.clone(), (ctx, sent, ka.consistent_read));
        }
        let mut raws: HashMap<String, Vec<Item>> = HashMap::new();
        for chunk in keys.chunks(100) {
            let mut by_table: HashMap<&String, Vec<Item>> = HashMap::new();
            for (t, k) in chunk {
                by_table.entry(t).or_default().push(k.clone());
            }
            let mut request: HashMap<String, KeysAndAttributes> = HashMap::new();
            for (t, ks) in by_table {
                let (_, sent, consistent) = &ctxs[t];
                let ka = KeysAndAttributes::builder()
                    .set_keys(Some(ks))
                    .set_projection_expression(sent.projection.clone())
                    .set_expression_attribute_names(sent.names.clone())
                    .set_consistent_read(*consistent)
                    .build()
                    .map_err(|e| Error::invalid(format!("bad BatchGetItem request: {e}")))?;
                request.insert(t.clone(), ka);
            }
            let mut delay = std::time::Duration::from_millis(5);
            while !request.is_empty() {
                let resp = self
                    .mgr
                    .inner
                    .client
                    .batch_get_item()
                    .set_request_items(Some(request))
                    .send()
                    .await
                    .map_err(|e| Error::sdk("BatchGetItem", e))?;
                for (t, items) in resp.responses.unwrap_or_default() {
                    raws.entry(t).or_default().extend(items);
                }
                request = resp.unprocessed_keys.unwrap_or_default();
                if !request.is_empty() {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_millis(500));
                }
            }
        }
        let mut responses = HashMap::new();
        for (table, (ctx, _, _)) in &ctxs {
            let items = ctx
                .settle_all(raws.remove(table).unwrap_or_default())
                .await?;
            responses.insert(table.clone(), items);
        }
        Ok(BatchGetOutput { responses })
    }
}

impl TransactionManager {
    /// Starts a read of many items (of one or more tables) outside any transaction.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
    /// use dynamodb_transactions::IsolationLevel;
    /// let keys = KeysAndAttributes::builder()
    ///     .keys([("Id".to_string(), AttributeValue::S("alice".into()))].into())
    ///     .keys([("Id".to_string(), AttributeValue::S("bob".into()))].into())
    ///     .projection_expression("Id, balance")
    ///     .build()
    ///     .expect("keys set");
    /// let out = m
    ///     .batch_get_item()
    ///     .request_items("Accounts", keys)
    ///     .isolation(IsolationLevel::Committed)
    ///     .send()
    ///     .await?;
    /// for item in &out.responses()["Accounts"] {
    ///     println!("{item:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn batch_get_item(&self) -> IsolatedBatchGetItemBuilder<'_> {
        IsolatedBatchGetItemBuilder {
            mgr: self,
            items: HashMap::new(),
            level: IsolationLevel::default(),
        }
    }
}
