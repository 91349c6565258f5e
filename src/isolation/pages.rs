//! Query and Scan at an isolation level, page by page.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};

use super::IsolationLevel;
use super::context::{Ctx, Sent, UserExprs};
use crate::error::{Error, Item, Result};
use crate::manager::TransactionManager;

/// One page of an isolated Query or Scan.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Page {
    /// The items of the page a reader at the chosen level sees, in DynamoDB's order. May be shorter
    /// than the `Limit` (or empty) even when more items follow: items that do not exist at the level
    /// are dropped after DynamoDB counted them.
    pub items: Vec<Item>,
    /// Where the next page starts; `None` when this is the last page.
    pub last_evaluated_key: Option<Item>,
}

impl Page {
    /// The items.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// Where the next page starts; `None` when this is the last page.
    pub fn last_evaluated_key(&self) -> Option<&Item> {
        self.last_evaluated_key.as_ref()
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Query {
        forward: Option<bool>,
    },
    Scan {
        segment: Option<i32>,
        total: Option<i32>,
    },
}

/// A Query or Scan as the caller described it.
#[derive(Debug, Clone)]
struct ListSpec {
    mgr: TransactionManager,
    kind: Kind,
    table: String,
    index: Option<String>,
    user: UserExprs,
    limit: Option<i32>,
    start: Option<Item>,
    consistent: Option<bool>,
    level: IsolationLevel,
}

/// A Query or Scan ready to send, page after page.
#[derive(Debug)]
struct Prepared {
    spec: ListSpec,
    ctx: Ctx,
    sent: Sent,
}

impl ListSpec {
    fn new(mgr: &TransactionManager, kind: Kind) -> ListSpec {
        ListSpec {
            mgr: mgr.clone(),
            kind,
            table: String::new(),
            index: None,
            user: UserExprs::default(),
            limit: None,
            start: None,
            consistent: None,
            level: IsolationLevel::default(),
        }
    }

    async fn prepare(self) -> Result<Prepared> {
        if matches!(self.kind, Kind::Query { .. }) && self.user.key_condition.is_none() {
            return Err(Error::invalid("a Query needs a KeyConditionExpression"));
        }
        if let Some(start) = &self.start {
            crate::request::check_item_names("ExclusiveStartKey", start)?;
        }
        let (ctx, sent) = Ctx::new(
            &self.mgr,
            self.level,
            &self.table,
            self.index.as_deref(),
            &self.user,
        )
        .await?;
        Ok(Prepared {
            spec: self,
            ctx,
            sent,
        })
    }
}

impl Prepared {
    async fn page(&self, start: Option<Item>) -> Result<Page> {
        let c = &self.ctx.mgr.inner.client;
        let s = &self.spec;
        let sent = self.sent.clone();
        let (raws, last) = match s.kind {
            Kind::Query { forward } => {
                let out = c
                    .query()
                    .table_name(&s.table)
                    .set_index_name(s.index.clone())
                    .set_key_condition_expression(sent.key_condition)
                    .set_filter_expression(sent.filter)
                    .set_projection_expression(sent.projection)
                    .set_expression_attribute_names(sent.names)
                    .set_expression_attribute_values(sent.values)
                    .set_limit(s.limit)
                    .set_exclusive_start_key(start)
                    .set_consistent_read(s.consistent)
                    .set_scan_index_forward(forward)
                    .send()
                    .await
                    .map_err(|e| Error::sdk("Query", e).on_table(&s.table))?;
                (out.items.unwrap_or_default(), out.last_evaluated_key)
            }
            Kind::Scan { segment, total } => {
                let out = c
                    .scan()
                    .table_name(&s.table)
                    .set_index_name(s.index.clone())
                    .set_filter_expression(sent.filter)
                    .set_projection_expression(sent.projection)
                    .set_expression_attribute_names(sent.names)
                    .set_expression_attribute_values(sent.values)
                    .set_limit(s.limit)
                    .set_exclusive_start_key(start)
                    .set_consistent_read(s.consistent)
                    .set_segment(segment)
                    .set_total_segments(total)
                    .send()
                    .await
                    .map_err(|e| Error::sdk("Scan", e).on_table(&s.table))?;
                (out.items.unwrap_or_default(), out.last_evaluated_key)
            }
        };
        Ok(Page {
            items: self.ctx.settle_all(raws).await?,
            last_evaluated_key: last.filter(|k| !k.is_empty()),
        })
    }
}

enum PageState {
    Start(Box<ListSpec>),
    Next(Box<Prepared>, Item),
    Done,
}

fn pages(spec: ListSpec) -> impl Stream<Item = Result<Page>> + Send + 'static {
    futures::stream::try_unfold(PageState::Start(Box::new(spec)), |st| async move {
        let (prep, start) = match st {
            PageState::Start(spec) => {
                let start = spec.start.clone();
                (Box::new(spec.prepare().await?), start)
            }
            PageState::Next(prep, start) => (prep, Some(start)),
            PageState::Done => return Ok(None),
        };
        let page = prep.page(start).await?;
        let next = match &page.last_evaluated_key {
            Some(k) => PageState::Next(prep, k.clone()),
            None => PageState::Done,
        };
        Ok(Some((page, next)))
    })
}

macro_rules! list_builder_methods {
    ($builder:ident) => {
        /// The table.
        pub fn table_name(mut self, t: impl Into<String>) -> Self {
            self.spec.table = t.into();
            self
        }

        /// Reads a secondary index of the table instead of the table. On a global index that does
        /// not project all attributes, every result is re-read from the table (see
        /// `docs/ISOLATION.md`).
        pub fn index_name(mut self, i: impl Into<String>) -> Self {
            self.spec.index = Some(i.into());
            self
        }

        /// The `FilterExpression`. At `Committed`, versions served from a before-image are filtered
        /// by the library, since DynamoDB only sees the stored item.
        pub fn filter_expression(mut self, f: impl Into<String>) -> Self {
            self.spec.user.filter = Some(f.into());
            self
        }

        /// Which attributes to return. The library adds the attributes it needs to the request and
        /// removes them from the results.
        pub fn projection_expression(mut self, p: impl Into<String>) -> Self {
            self.spec.user.projection = Some(p.into());
            self
        }

        /// Adds one `ExpressionAttributeNames` entry.
        pub fn expression_attribute_names(
            mut self,
            k: impl Into<String>,
            v: impl Into<String>,
        ) -> Self {
            self.spec
                .user
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
            self.spec.user.names = names;
            self
        }

        /// Adds one `ExpressionAttributeValues` entry.
        pub fn expression_attribute_values(
            mut self,
            k: impl Into<String>,
            v: AttributeValue,
        ) -> Self {
            self.spec
                .user
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
            self.spec.user.values = values;
            self
        }

        /// DynamoDB's `Limit`: how many stored items each request evaluates (the page size when
        /// paging). Pages may hold fewer items.
        pub fn limit(mut self, l: i32) -> Self {
            self.spec.limit = Some(l);
            self
        }

        /// Adds one attribute of the `ExclusiveStartKey` (a previous page's `last_evaluated_key`).
        pub fn exclusive_start_key(mut self, k: impl Into<String>, v: AttributeValue) -> Self {
            self.spec
                .start
                .get_or_insert_with(HashMap::new)
                .insert(k.into(), v);
            self
        }

        /// Replaces the `ExclusiveStartKey`.
        pub fn set_exclusive_start_key(mut self, k: Option<Item>) -> Self {
            self.spec.start = k;
            self
        }

        /// Strongly consistent reads (not on global indexes). Default `false` (eventually
        /// consistent, as in DynamoDB): at `Committed` a page never shows a value of a transaction
        /// that did not commit, but may show an older committed version of an item (see
        /// "Consistency of the first read" in `docs/ISOLATION.md`). Follow-up reads the library
        /// makes are always consistent.
        pub fn consistent_read(mut self, c: bool) -> Self {
            self.spec.consistent = Some(c);
            self
        }

        /// The isolation level (default [`IsolationLevel::Committed`]).
        pub fn isolation(mut self, level: IsolationLevel) -> Self {
            self.spec.level = level;
            self
        }

        /// Reads one page (from the `ExclusiveStartKey`, if set).
        ///
        /// # Errors
        /// [`Error::InvalidRequest`] for `ReadLock` and invalid expressions (reserved `_Tx` names,
        /// undefined or unused placeholders, syntax the library cannot evaluate);
        /// [`Error::ReadContention`] when an item's committed version could not be pinned down;
        /// [`Error::DynamoDb`] when DynamoDB rejects the request.
        ///
        /// # Cancel safety
        /// Read-only; safe to drop.
        pub async fn send(self) -> Result<Page> {
            let start = self.spec.start.clone();
            self.spec.prepare().await?.page(start).await
        }

        /// Pages through all results, from the `ExclusiveStartKey` if set. The stream ends after the
        /// last page, or after the first error.
        pub fn into_pages(self) -> BoxStream<'static, Result<Page>> {
            pages(self.spec).boxed()
        }

        /// Streams all results, item by item, page after page.
        pub fn into_stream(self) -> BoxStream<'static, Result<Item>> {
            pages(self.spec)
                .map_ok(|p| futures::stream::iter(p.items.into_iter().map(Ok)))
                .try_flatten()
                .boxed()
        }

        /// Reads all pages and returns every item.
        ///
        /// # Errors
        /// As [`send`](Self::send).
        ///
        /// # Cancel safety
        /// Read-only; safe to drop.
        pub async fn send_all(self) -> Result<Vec<Item>> {
            self.into_stream().try_collect().await
        }
    };
}

/// Builds an isolated Query. Send with [`send`](IsolatedQueryBuilder::send) (one page), or page
/// through everything with [`into_stream`](IsolatedQueryBuilder::into_stream),
/// [`into_pages`](IsolatedQueryBuilder::into_pages) or [`send_all`](IsolatedQueryBuilder::send_all).
#[derive(Debug, Clone)]
#[must_use]
pub struct IsolatedQueryBuilder {
    spec: ListSpec,
}

impl IsolatedQueryBuilder {
    list_builder_methods!(IsolatedQueryBuilder);

    /// The `KeyConditionExpression` (required).
    pub fn key_condition_expression(mut self, k: impl Into<String>) -> Self {
        self.spec.user.key_condition = Some(k.into());
        self
    }

    /// Ascending (default, `true`) or descending order of the range key.
    pub fn scan_index_forward(mut self, f: bool) -> Self {
        self.spec.kind = Kind::Query { forward: Some(f) };
        self
    }
}

/// Builds an isolated Scan. Send with [`send`](IsolatedScanBuilder::send) (one page), or page through
/// everything with [`into_stream`](IsolatedScanBuilder::into_stream),
/// [`into_pages`](IsolatedScanBuilder::into_pages) or [`send_all`](IsolatedScanBuilder::send_all).
#[derive(Debug, Clone)]
#[must_use]
pub struct IsolatedScanBuilder {
    spec: ListSpec,
}

impl IsolatedScanBuilder {
    list_builder_methods!(IsolatedScanBuilder);

    /// For a parallel scan: the segment this scan reads (with
    /// [`total_segments`](Self::total_segments)).
    pub fn segment(mut self, s: i32) -> Self {
        if let Kind::Scan { segment, .. } = &mut self.spec.kind {
            *segment = Some(s);
        }
        self
    }

    /// For a parallel scan: the number of segments.
    pub fn total_segments(mut self, t: i32) -> Self {
        if let Kind::Scan { total, .. } = &mut self.spec.kind {
            *total = Some(t);
        }
        self
    }
}

impl TransactionManager {
    /// Starts a Query outside any transaction. No phantom protection: items may appear in or vanish
    /// from a range while it is read.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// use dynamodb_transactions::IsolationLevel;
    /// use futures::TryStreamExt;
    /// let mut items = m
    ///     .query()
    ///     .table_name("Orders")
    ///     .key_condition_expression("customer = :c AND placed > :since")
    ///     .filter_expression("total >= :min")
    ///     .expression_attribute_values(":c", AttributeValue::S("alice".into()))
    ///     .expression_attribute_values(":since", AttributeValue::N("1700000000".into()))
    ///     .expression_attribute_values(":min", AttributeValue::N("100".into()))
    ///     .isolation(IsolationLevel::Committed)
    ///     .into_stream();
    /// while let Some(order) = items.try_next().await? {
    ///     println!("{order:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn query(&self) -> IsolatedQueryBuilder {
        IsolatedQueryBuilder {
            spec: ListSpec::new(self, Kind::Query { forward: None }),
        }
    }

    /// Starts a Scan outside any transaction. No phantom protection.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use dynamodb_transactions::IsolationLevel;
    /// let page = m
    ///     .scan()
    ///     .table_name("Accounts")
    ///     .projection_expression("Id, balance")
    ///     .limit(100)
    ///     .isolation(IsolationLevel::Uncommitted)
    ///     .send()
    ///     .await?;
    /// println!("{} items, more: {}", page.items().len(), page.last_evaluated_key().is_some());
    /// # Ok(()) }
    /// ```
    pub fn scan(&self) -> IsolatedScanBuilder {
        IsolatedScanBuilder {
            spec: ListSpec::new(
                self,
                Kind::Scan {
                    segment: None,
                    total: None,
                },
            ),
        }
    }
}
