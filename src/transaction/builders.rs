//! The public request builders: [`PutItemBuilder`], [`UpdateItemBuilder`],
//! [`DeleteItemBuilder`] and [`GetItemBuilder`], shaped like the SDK's.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

#[cfg(doc)]
use crate::error::Error;
use crate::error::{Item, Result};
use crate::request::{Op, Request};

use super::{GetOutput, Transaction, WriteOutput};

macro_rules! common_builder_methods {
    () => {
        /// The table.
        pub fn table_name(mut self, table: impl Into<String>) -> Self {
            self.req.table = table.into();
            self
        }

        /// Adds one `ExpressionAttributeNames` entry.
        pub fn expression_attribute_names(
            mut self,
            k: impl Into<String>,
            v: impl Into<String>,
        ) -> Self {
            self.req
                .names
                .get_or_insert_with(HashMap::new)
                .insert(k.into(), v.into());
            self
        }

        /// Replaces `ExpressionAttributeNames`.
        pub fn set_expression_attribute_names(
            mut self,
            names: Option<HashMap<String, String>>,
        ) -> Self {
            self.req.names = names;
            self
        }
    };
}

macro_rules! write_builder_methods {
    () => {
        common_builder_methods!();

        /// Adds one `ExpressionAttributeValues` entry.
        pub fn expression_attribute_values(
            mut self,
            k: impl Into<String>,
            v: AttributeValue,
        ) -> Self {
            self.req
                .values
                .get_or_insert_with(HashMap::new)
                .insert(k.into(), v);
            self
        }

        /// Replaces `ExpressionAttributeValues`.
        pub fn set_expression_attribute_values(
            mut self,
            values: Option<HashMap<String, AttributeValue>>,
        ) -> Self {
            self.req.values = values;
            self
        }

        /// A condition checked against the item under this transaction's lock. If it is false at commit,
        /// the whole transaction rolls back with [`Error::ConditionFailed`].
        pub fn condition_expression(mut self, c: impl Into<String>) -> Self {
            self.req.condition = Some(c.into());
            self
        }

        /// What to return. `None` (default) buffers the write until commit; `AllOld` locks the item
        /// now; for updates, `AllNew`, `UpdatedOld` and `UpdatedNew` apply it now.
        pub fn return_values(mut self, rv: ReturnValue) -> Self {
            self.return_values = Some(rv);
            self
        }
    };
}

/// Builds a transactional put. Send with [`send`](PutItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct PutItemBuilder<'a> {
    tx: &'a Transaction,
    req: Request,
    return_values: Option<ReturnValue>,
}

impl PutItemBuilder<'_> {
    write_builder_methods!();

    pub(super) fn new(tx: &Transaction) -> PutItemBuilder<'_> {
        PutItemBuilder {
            tx,
            req: blank(Op::Put),
            return_values: None,
        }
    }

    /// Adds one attribute of the item.
    pub fn item(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.req
            .item
            .get_or_insert_with(HashMap::new)
            .insert(k.into(), v);
        self
    }

    /// Replaces the item.
    pub fn set_item(mut self, item: Option<Item>) -> Self {
        self.req.item = item;
        self
    }

    /// Validates the put and adds it to the transaction.
    ///
    /// # Errors
    /// [`Error::InvalidRequest`] before anything is written when the request is invalid;
    /// [`Error::DuplicateRequest`] if the transaction already writes this item. Sending the same
    /// request again on the same handle after this call failed (say, a lost response while
    /// recording it) is not a duplicate: it drives that request again, and it is applied once.
    ///
    /// # Cancel safety
    /// Without `ReturnValues` nothing is written, so dropping is harmless. With `AllOld` the item may be
    /// left locked by the transaction; it is released when the transaction ends.
    pub async fn send(self) -> Result<WriteOutput> {
        let id = self.tx.id().clone();
        self.tx
            .write(self.req, self.return_values)
            .await
            .map_err(|e| e.in_transaction(&id))
    }
}

/// Builds a transactional update. Send with [`send`](UpdateItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct UpdateItemBuilder<'a> {
    tx: &'a Transaction,
    req: Request,
    return_values: Option<ReturnValue>,
}

impl UpdateItemBuilder<'_> {
    write_builder_methods!();

    pub(super) fn new(tx: &Transaction) -> UpdateItemBuilder<'_> {
        UpdateItemBuilder {
            tx,
            req: blank(Op::Update),
            return_values: None,
        }
    }

    /// Adds one key attribute.
    pub fn key(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.req.key.insert(k.into(), v);
        self
    }

    /// Replaces the key.
    pub fn set_key(mut self, key: Option<Item>) -> Self {
        self.req.key = key.unwrap_or_default();
        self
    }

    /// The `UpdateExpression`. Without one, the update only makes sure the item exists.
    pub fn update_expression(mut self, e: impl Into<String>) -> Self {
        self.req.update = Some(e.into());
        self
    }

    /// Validates the update and adds it to the transaction.
    ///
    /// # Errors
    /// As [`PutItemBuilder::send`]; with `AllNew`/`Updated*` also the errors of applying it now
    /// ([`Error::ConditionFailed`], [`Error::RequestRejected`], both rolling the transaction back).
    ///
    /// # Cancel safety
    /// Without `ReturnValues` nothing is written. Otherwise the item may be left locked (and applied)
    /// by the transaction; rollback or commit settles it.
    pub async fn send(self) -> Result<WriteOutput> {
        let id = self.tx.id().clone();
        self.tx
            .write(self.req, self.return_values)
            .await
            .map_err(|e| e.in_transaction(&id))
    }
}

/// Builds a transactional delete. Send with [`send`](DeleteItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct DeleteItemBuilder<'a> {
    tx: &'a Transaction,
    req: Request,
    return_values: Option<ReturnValue>,
}

impl DeleteItemBuilder<'_> {
    write_builder_methods!();

    pub(super) fn new(tx: &Transaction) -> DeleteItemBuilder<'_> {
        DeleteItemBuilder {
            tx,
            req: blank(Op::Delete),
            return_values: None,
        }
    }

    /// Adds one key attribute.
    pub fn key(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.req.key.insert(k.into(), v);
        self
    }

    /// Replaces the key.
    pub fn set_key(mut self, key: Option<Item>) -> Self {
        self.req.key = key.unwrap_or_default();
        self
    }

    /// Validates the delete and adds it to the transaction. The item disappears at commit.
    ///
    /// # Errors
    /// As [`PutItemBuilder::send`].
    ///
    /// # Cancel safety
    /// As [`PutItemBuilder::send`].
    pub async fn send(self) -> Result<WriteOutput> {
        let id = self.tx.id().clone();
        self.tx
            .write(self.req, self.return_values)
            .await
            .map_err(|e| e.in_transaction(&id))
    }
}

/// Builds a locked read. Send with [`send`](GetItemBuilder::send).
#[derive(Debug)]
#[must_use]
pub struct GetItemBuilder<'a> {
    tx: &'a Transaction,
    req: Request,
    projection: Option<String>,
}

impl GetItemBuilder<'_> {
    common_builder_methods!();

    pub(super) fn new(tx: &Transaction) -> GetItemBuilder<'_> {
        GetItemBuilder {
            tx,
            req: blank(Op::Get),
            projection: None,
        }
    }

    /// Adds one key attribute.
    pub fn key(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
        self.req.key.insert(k.into(), v);
        self
    }

    /// Replaces the key.
    pub fn set_key(mut self, key: Option<Item>) -> Self {
        self.req.key = key.unwrap_or_default();
        self
    }

    /// Which attributes to return (applied to the result; the whole item stays locked).
    pub fn projection_expression(mut self, p: impl Into<String>) -> Self {
        self.projection = Some(p.into());
        self
    }

    /// Locks the item (inserting a placeholder if it does not exist, so nobody can create it) and
    /// returns it as this transaction sees it: after this transaction's own writes, `None` if it does
    /// not exist.
    ///
    /// # Cancel safety
    /// Dropping midway may leave the item locked by the transaction; it is released when the
    /// transaction ends.
    pub async fn send(self) -> Result<GetOutput> {
        let id = self.tx.id().clone();
        self.tx
            .read(self.req, self.projection)
            .await
            .map_err(|e| e.in_transaction(&id))
    }
}

/// A locked read's request without its table and key.
pub(super) fn blank_get() -> Request {
    blank(Op::Get)
}

fn blank(op: Op) -> Request {
    Request {
        op,
        table: String::new(),
        key: Item::new(),
        item: None,
        update: None,
        condition: None,
        names: None,
        values: None,
    }
}
