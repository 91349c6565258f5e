//! Reads outside transactions at a chosen isolation level.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::error::{Error, Item, Result};
use crate::expr;
use crate::item_lock::{self, Observed};
use crate::manager::TransactionManager;
use crate::record::{self, TxState};
use crate::transaction::GetOutput;

/// What a read may see of transactions in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// The item as stored, including writes of transactions that are not committed (and may never
    /// be). An item inserted only to hold a lock does not exist. One request.
    Uncommitted,
    /// Only committed state: an item changed by a transaction that has not committed is served from
    /// its before-image. No consistent cut across items.
    #[default]
    Committed,
    /// A locked read; only inside a transaction ([`Transaction::get_item`](crate::Transaction::get_item)).
    ReadLock,
}

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

    /// Which attributes to return.
    pub fn projection_expression(mut self, p: impl Into<String>) -> Self {
        self.projection = Some(p.into());
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

    /// Strongly consistent read of the item (default false, as in DynamoDB). Follow-up reads the
    /// library makes (TX records, images) are always consistent.
    pub fn consistent_read(mut self, c: bool) -> Self {
        self.consistent = c;
        self
    }

    /// Reads the item.
    ///
    /// # Errors
    /// [`Error::InvalidRequest`] for `ReadLock` or a bad key; [`Error::ReadContention`] when a
    /// committed version could not be pinned down after the configured attempts.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn send(self) -> Result<GetOutput> {
        if self.level == IsolationLevel::ReadLock {
            return Err(Error::invalid(
                "ReadLock isolation needs a transaction: use Transaction::get_item outside of which it cannot hold a lock",
            ));
        }
        let schema = self
            .mgr
            .inner
            .schemas
            .get(&self.mgr.inner.client, &self.table)
            .await?;
        crate::request::check_item_names("Key", &self.key)?;
        schema.validate_key(&self.table, &self.key)?;
        let paths = match &self.projection {
            Some(p) => {
                expr::check_no_reserved_words("ProjectionExpression", p)?;
                Some(expr::parse_projection(p, self.names.as_ref())?)
            }
            None => None,
        };
        let attempts = self.mgr.inner.settings.committed_read_attempts.max(1);
        let mut consistent = self.consistent;
        for _ in 0..attempts {
            let raw = self
                .mgr
                .inner
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(self.key.clone()))
                .consistent_read(consistent)
                .send()
                .await
                .map_err(|e| Error::sdk("GetItem", e))?
                .item;
            // Retries read consistently: the item was seen in flux.
            consistent = true;
            if let Some(item) = resolve(self.mgr, self.level, raw.as_ref()).await? {
                let item = match (item, &paths) {
                    (Some(i), Some(p)) => Some(expr::project(&i, p)),
                    (i, _) => i,
                };
                return Ok(GetOutput { item });
            }
        }
        Err(Error::ReadContention {
            table: self.table,
            attempts,
        })
    }
}

/// The item a read at `level` sees, given the item as stored. `Ok(None)` means "read it again": the
/// item was in flux (its writer finished or vanished under us).
pub(crate) async fn resolve(
    mgr: &TransactionManager,
    level: IsolationLevel,
    raw: Option<&Item>,
) -> Result<Option<Option<Item>>> {
    let obs = Observed::of(raw);
    let Some(owner) = obs.owner.clone() else {
        return Ok(Some(obs.visible()));
    };
    if level == IsolationLevel::Uncommitted || !obs.applied {
        // Not applied: the item is as committed (a pending delete still shows the item).
        return Ok(Some(obs.visible()));
    }
    let c = &mgr.inner.client;
    match record::load_header(c, &mgr.inner.tx_table, &TxId(owner)).await? {
        // Committed: the item as stored, except that a committed delete has deleted it.
        Some(h) if h.state == TxState::Committed => Ok(Some(if obs.applied_delete {
            None
        } else {
            obs.visible()
        })),
        Some(_) => {
            if obs.applied_delete {
                // A pending delete changes nothing until commit.
                return Ok(Some(obs.visible()));
            }
            if obs.transient {
                return Ok(Some(None));
            }
            if let Some(img) = obs.image {
                return Ok(Some(Some(img)));
            }
            if let Some(id) = &obs.image_ref {
                return Ok(item_lock::load_table_image(c, &mgr.inner.image_table, id)
                    .await?
                    .map(Some));
            }
            Err(Error::invariant("an applied item carries no before-image"))
        }
        // The owner's record is gone: the item should have been settled; read again.
        None => Ok(None),
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
