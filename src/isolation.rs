//! Reads outside transactions at a chosen isolation level: GetItem, BatchGetItem, Query and Scan.
//!
//! Every read fetches the stored items (with the lock attributes it needs to decide, whatever the
//! caller's projection), decides what a reader at the level may see of each ([`resolve`]), and returns
//! the result without any `_Tx*` attribute. See `docs/ISOLATION.md`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, ProjectionType};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};

use crate::TxId;
use crate::error::{Error, Item, Result};
use crate::expr::{self, Cond, Path, PathElem};
use crate::item_lock::{self, APPLIED, IMAGE, IMAGE_REF, OWNER, Observed, TRANSIENT};
use crate::keys::{ItemRef, KeySchema};
use crate::manager::TransactionManager;
use crate::record::{self, TxState};
use crate::transaction::GetOutput;

/// What a read may see of transactions in flight.
///
/// See `docs/ISOLATION.md` for what each level guarantees and costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// The item as stored, including writes of transactions that are not committed (and may never
    /// be). An item inserted only to hold a lock does not exist. No extra request.
    Uncommitted,
    /// Only committed state: an item changed by a transaction that has not committed is served from
    /// its before-image; an item a pending transaction inserted does not exist; a pending delete still
    /// shows the item. No consistent cut across items. One extra read of the owner's TX record per
    /// item (per transaction and page for queries) changed by a transaction in flight.
    #[default]
    Committed,
    /// A locked read; only inside a transaction ([`Transaction::get_item`](crate::Transaction::get_item)).
    /// Outside one, reads at this level fail with [`Error::InvalidRequest`].
    ReadLock,
}

fn read_lock_error() -> Error {
    Error::invalid(
        "ReadLock isolation needs a transaction: use Transaction::get_item, outside of which no lock can be held",
    )
}

// ------------------------------------------------------------------------------------------------
// Deciding what a reader sees of one stored item.

/// What a read sees of one stored item.
#[derive(Debug)]
pub(crate) enum Seen {
    /// The item does not exist at this level.
    Absent,
    /// This version; `true` when it is the stored item (as DynamoDB returned it, lock attributes
    /// still present), `false` for a before-image.
    Version(Item, bool),
    /// The item was in flux (its writer finished or vanished under us): read it again.
    Again,
}

/// States of transactions already looked up during one page (valid for items read before the lookup).
type StateCache = Mutex<HashMap<String, Option<TxState>>>;

/// The state of a transaction (one consistent GetItem of the header's state only).
async fn tx_state(
    mgr: &TransactionManager,
    owner: &str,
    cache: Option<&StateCache>,
) -> Result<Option<TxState>> {
    if let Some(s) = cache.and_then(|c| c.lock().expect("state cache").get(owner).copied()) {
        return Ok(s);
    }
    let out = mgr
        .inner
        .client
        .get_item()
        .table_name(&mgr.inner.tx_table)
        .set_key(Some(record::header_key(&TxId(owner.to_string()))))
        .projection_expression("#s")
        .expression_attribute_names("#s", record::STATE)
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e))?;
    let state = match out.item {
        None => None,
        Some(i) => Some(match i.get(record::STATE).and_then(|v| v.as_s().ok()) {
            Some(s) if s == "P" => TxState::Pending,
            Some(s) if s == "C" => TxState::Committed,
            Some(s) if s == "R" => TxState::RolledBack,
            _ => {
                return Err(Error::invariant(format!(
                    "TX record {owner} has no valid state"
                )));
            }
        }),
    };
    if let Some(c) = cache {
        c.lock()
            .expect("state cache")
            .insert(owner.to_string(), state);
    }
    Ok(state)
}

/// What a reader at `level` sees of an item, given the item as stored (`None`: absent).
pub(crate) async fn resolve(
    mgr: &TransactionManager,
    level: IsolationLevel,
    raw: Option<&Item>,
    cache: Option<&StateCache>,
) -> Result<Seen> {
    let obs = Observed::of(raw);
    let seen = |v: Option<Item>| v.map(|v| Seen::Version(v, true)).unwrap_or(Seen::Absent);
    let Some(owner) = obs.owner.as_deref() else {
        return Ok(seen(obs.visible()));
    };
    if level == IsolationLevel::Uncommitted || !obs.applied {
        // Not applied: the item is as committed (a pending delete still shows the item).
        return Ok(seen(obs.visible()));
    }
    match tx_state(mgr, owner, cache).await? {
        // One write per item per transaction: the stored item is the committed version, except
        // that a committed delete (marked, not yet executed) has deleted it.
        Some(TxState::Committed) if obs.applied_delete => Ok(Seen::Absent),
        Some(TxState::Committed) => Ok(seen(obs.visible())),
        Some(_) => {
            if obs.applied_delete {
                // A delete changes nothing until commit.
                return Ok(seen(obs.visible()));
            }
            if obs.transient {
                return Ok(Seen::Absent);
            }
            if let Some(img) = obs.image {
                return Ok(Seen::Version(img, false));
            }
            if let Some(id) = &obs.image_ref {
                let img =
                    item_lock::load_table_image(&mgr.inner.client, &mgr.inner.image_table, id)
                        .await?;
                return Ok(img.map(|i| Seen::Version(i, false)).unwrap_or(Seen::Again));
            }
            Err(Error::invariant("an applied item carries no before-image"))
        }
        // The owner's record is gone: the item is being (or has been) settled; read it again.
        None => Ok(Seen::Again),
    }
}

// ------------------------------------------------------------------------------------------------
// Expressions: what to send, and what to check on the client.

/// An index being read.
#[derive(Debug, Clone)]
struct IndexInfo {
    global: bool,
    /// The index's key attributes.
    keys: Vec<String>,
    /// Attributes projected into the index; `None` for `ALL`.
    projected: Option<HashSet<String>>,
}

impl IndexInfo {
    /// A global index that does not carry the lock attributes: results are re-read from the table.
    fn indirect(&self) -> bool {
        self.global && self.projected.is_some()
    }
}

async fn describe_index(
    mgr: &TransactionManager,
    table: &str,
    schema: &KeySchema,
    index: &str,
) -> Result<IndexInfo> {
    let desc = crate::tables::describe(&mgr.inner.client, table)
        .await?
        .ok_or_else(|| Error::TableNotFound {
            table: table.into(),
        })?;
    let gsi = desc
        .global_secondary_indexes()
        .iter()
        .find(|i| i.index_name() == Some(index))
        .map(|i| (true, i.key_schema().to_vec(), i.projection().cloned()));
    let lsi = desc
        .local_secondary_indexes()
        .iter()
        .find(|i| i.index_name() == Some(index))
        .map(|i| (false, i.key_schema().to_vec(), i.projection().cloned()));
    let (global, key_schema, projection) = gsi
        .or(lsi)
        .ok_or_else(|| Error::invalid(format!("table {table} has no index named {index}")))?;
    let keys: Vec<String> = key_schema
        .iter()
        .map(|k| k.attribute_name().to_string())
        .collect();
    let projected = match projection.as_ref().and_then(|p| p.projection_type()) {
        Some(ProjectionType::All) => None,
        _ => {
            let mut set: HashSet<String> = schema.names().map(String::from).collect();
            set.extend(keys.iter().cloned());
            if let Some(p) = &projection {
                set.extend(p.non_key_attributes().iter().cloned());
            }
            Some(set)
        }
    };
    Ok(IndexInfo {
        global,
        keys,
        projected,
    })
}

/// The caller's expressions, validated.
#[derive(Debug, Clone, Default)]
struct UserExprs {
    projection: Option<String>,
    filter: Option<String>,
    key_condition: Option<String>,
    names: Option<HashMap<String, String>>,
    values: Option<HashMap<String, AttributeValue>>,
}

impl UserExprs {
    fn validate(&self) -> Result<()> {
        let mut exprs = Vec::new();
        for (what, e) in [
            ("ProjectionExpression", &self.projection),
            ("FilterExpression", &self.filter),
            ("KeyConditionExpression", &self.key_condition),
        ] {
            if let Some(e) = e {
                expr::check_no_reserved_words(what, e)?;
                exprs.push(e.as_str());
            }
        }
        expr::check_names_and_values(self.names.as_ref(), self.values.as_ref())?;
        expr::check_placeholders(&exprs, self.names.as_ref(), self.values.as_ref())
    }

    fn paths(&self) -> Result<Option<Vec<Path>>> {
        self.projection
            .as_deref()
            .map(|p| expr::parse_projection(p, self.names.as_ref()))
            .transpose()
    }

    fn parse(&self, e: &Option<String>) -> Result<Option<Cond>> {
        e.as_deref()
            .map(|e| expr::parse_condition(e, self.names.as_ref(), self.values.as_ref()))
            .transpose()
    }
}

/// What to send to DynamoDB for a read.
#[derive(Debug, Clone, Default)]
struct Sent {
    projection: Option<String>,
    filter: Option<String>,
    key_condition: Option<String>,
    names: Option<HashMap<String, String>>,
    values: Option<HashMap<String, AttributeValue>>,
}

/// The lock attributes a read at `level` needs.
fn lock_attrs(level: IsolationLevel) -> &'static [&'static str] {
    match level {
        IsolationLevel::Uncommitted => &[OWNER, TRANSIENT, APPLIED],
        _ => &[OWNER, TRANSIENT, APPLIED, IMAGE, IMAGE_REF],
    }
}

/// Renders a projection of `paths` plus the whole attributes `whole`, with the library's own name
/// placeholders (`#_TxP<n>`), dropping paths that a whole attribute already covers (DynamoDB rejects
/// overlapping paths).
fn render_projection(
    paths: &[Path],
    whole: &[String],
    names: &mut HashMap<String, String>,
) -> String {
    let mut by_name: HashMap<String, String> = HashMap::new();
    let mut ph = |n: &str, names: &mut HashMap<String, String>| -> String {
        if let Some(p) = by_name.get(n) {
            return p.clone();
        }
        let p = format!("#_TxP{}", by_name.len());
        by_name.insert(n.to_string(), p.clone());
        names.insert(p.clone(), n.to_string());
        p
    };
    let mut parts: Vec<String> = Vec::new();
    let mut seen_whole: HashSet<&str> = HashSet::new();
    for w in whole {
        if seen_whole.insert(w.as_str()) {
            parts.push(ph(w, names));
        }
    }
    for p in paths {
        if let Some(PathElem::Attr(top)) = p.first()
            && seen_whole.contains(top.as_str())
        {
            continue;
        }
        let mut s = String::new();
        for (i, e) in p.iter().enumerate() {
            match e {
                PathElem::Attr(a) => {
                    if i > 0 {
                        s.push('.');
                    }
                    s.push_str(&ph(a, names));
                }
                PathElem::Index(n) => s.push_str(&format!("[{n}]")),
            }
        }
        if !parts.contains(&s) {
            parts.push(s);
        }
    }
    parts.join(", ")
}

/// Everything needed to turn stored items into what a reader sees.
#[derive(Debug, Clone)]
struct Ctx {
    mgr: TransactionManager,
    level: IsolationLevel,
    table: String,
    schema: Arc<KeySchema>,
    index: Option<IndexInfo>,
    /// The caller's projection, applied last.
    paths: Option<Vec<Path>>,
    /// The caller's filter, for versions DynamoDB did not filter.
    filter: Option<Cond>,
    /// The key condition, for versions that did not come from the index.
    key_condition: Option<Cond>,
    /// Whether results must be re-read from the table (a global index without the lock attributes).
    indirect: bool,
    /// Top-level attributes of the caller's projection that DynamoDB projected exactly as asked (the
    /// others were fetched whole because the library needed them).
    exact: HashSet<String>,
}

impl Ctx {
    async fn new(
        mgr: &TransactionManager,
        level: IsolationLevel,
        table: &str,
        index: Option<&str>,
        user: &UserExprs,
    ) -> Result<(Ctx, Sent)> {
        if level == IsolationLevel::ReadLock {
            return Err(read_lock_error());
        }
        if table.is_empty() {
            return Err(Error::invalid("TableName must be set"));
        }
        user.validate()?;
        let schema = mgr.inner.schemas.get(&mgr.inner.client, table).await?;
        let index = match index {
            Some(i) => Some(describe_index(mgr, table, &schema, i).await?),
            None => None,
        };
        let ctx = Ctx {
            mgr: mgr.clone(),
            level,
            table: table.to_string(),
            schema,
            indirect: index.as_ref().is_some_and(IndexInfo::indirect),
            index,
            paths: user.paths()?,
            filter: user.parse(&user.filter)?,
            key_condition: user.parse(&user.key_condition)?,
            exact: HashSet::new(),
        };
        let (sent, exact) = ctx.sent(user)?;
        Ok((Ctx { exact, ..ctx }, sent))
    }

    /// The expressions to send.
    fn sent(&self, user: &UserExprs) -> Result<(Sent, HashSet<String>)> {
        let mut names = HashMap::new();
        let mut exact = HashSet::new();
        let mut sent = Sent {
            key_condition: user.key_condition.clone(),
            ..Sent::default()
        };
        let mut whole: Vec<String> = self.schema.names().map(String::from).collect();
        if let Some(ix) = &self.index {
            whole.extend(ix.keys.iter().cloned());
        }
        if self.indirect {
            // Only the table's key is needed from the index: the items are re-read.
            sent.projection = Some(render_projection(&[], &whole, &mut names));
        } else {
            sent.filter = match (&user.filter, self.level) {
                (Some(f), IsolationLevel::Committed) => {
                    names.insert(format!("#{APPLIED}"), APPLIED.to_string());
                    Some(format!("({f}) OR attribute_exists(#{APPLIED})"))
                }
                (f, _) => f.clone(),
            };
            let index_attrs: Option<Vec<Path>> = self
                .index
                .as_ref()
                .and_then(|i| i.projected.as_ref())
                .map(|set| {
                    set.iter()
                        .map(|a| vec![PathElem::Attr(a.clone())])
                        .collect()
                });
            let paths = self.paths.clone().or(index_attrs);
            if let Some(paths) = paths {
                whole.extend(lock_attrs(self.level).iter().map(|a| a.to_string()));
                if self.level == IsolationLevel::Committed
                    && let Some(f) = &self.filter
                {
                    f.attributes(&mut whole);
                }
                if self.level == IsolationLevel::Committed
                    && let Some(k) = &self.key_condition
                {
                    k.attributes(&mut whole);
                }
                sent.projection = Some(render_projection(&paths, &whole, &mut names));
                for p in self.paths.iter().flatten() {
                    if let Some(PathElem::Attr(top)) = p.first()
                        && !whole.contains(top)
                    {
                        exact.insert(top.clone());
                    }
                }
            }
        }
        // Keep only the caller's placeholders that the sent expressions use.
        let mut used_names = HashSet::new();
        let mut used_values = HashSet::new();
        for e in [&sent.filter, &sent.key_condition].into_iter().flatten() {
            let (n, v) = expr::placeholders(e)?;
            used_names.extend(n);
            used_values.extend(v);
        }
        for (k, v) in user.names.iter().flatten() {
            if used_names.contains(k) {
                names.insert(k.clone(), v.clone());
            }
        }
        let values: HashMap<String, AttributeValue> = user
            .values
            .iter()
            .flatten()
            .filter(|(k, _)| used_values.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        sent.names = (!names.is_empty()).then_some(names);
        sent.values = (!values.is_empty()).then_some(values);
        Ok((sent, exact))
    }

    /// The final shape of a version the reader may see; `None` if it is not part of the result.
    /// `recheck`: DynamoDB did not evaluate the filter (and index membership) on this version.
    /// `projected`: DynamoDB applied the sent projection to this version (applying a projection with
    /// list indexes twice would be wrong).
    fn finish(&self, v: Item, recheck: bool, projected: bool) -> Option<Item> {
        let mut v = item_lock::strip(v);
        if recheck && let Some(ix) = &self.index {
            if !ix.keys.iter().all(|k| v.contains_key(k)) {
                return None;
            }
            if let Some(k) = &self.key_condition
                && !k.eval(&v)
            {
                return None;
            }
        }
        // What the index holds of the item: a global index's filter sees only that; without a
        // projection of their own, readers of any index get only that. (With one, a local index
        // fetches the rest from the table, and so does the library for a global one.)
        let trimmed = self
            .index
            .as_ref()
            .and_then(|i| i.projected.as_ref())
            .map(|set| {
                let mut t = v.clone();
                t.retain(|k, _| set.contains(k));
                t
            });
        if recheck && let Some(f) = &self.filter {
            let global = self.index.as_ref().is_some_and(|i| i.global);
            let seen = match &trimmed {
                Some(t) if global => t,
                _ => &v,
            };
            if !f.eval(seen) {
                return None;
            }
        }
        if self.paths.is_none()
            && let Some(t) = trimmed
        {
            v = t;
        }
        Some(match &self.paths {
            Some(p) if projected => {
                let (mut keep, rest): (Item, Item) =
                    v.into_iter().partition(|(k, _)| self.exact.contains(k));
                let others: Vec<Path> = p
                    .iter()
                    .filter(
                        |p| !matches!(p.first(), Some(PathElem::Attr(a)) if self.exact.contains(a)),
                    )
                    .cloned()
                    .collect();
                keep.extend(expr::project(&rest, &others));
                keep
            }
            Some(p) => expr::project(&v, p),
            None => v,
        })
    }

    fn attempts(&self) -> u32 {
        self.mgr.inner.settings.committed_read_attempts.max(1)
    }

    fn contention(&self) -> Error {
        Error::ReadContention {
            table: self.table.clone(),
            attempts: self.attempts(),
        }
    }

    /// Reads an item again (consistently, whole) until it can be decided; `used` attempts spent.
    async fn reread(&self, key: &Item, used: u32) -> Result<Option<Item>> {
        for _ in used..self.attempts() {
            let raw = self
                .mgr
                .inner
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(key.clone()))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| Error::sdk("GetItem", e))?
                .item;
            match resolve(&self.mgr, self.level, raw.as_ref(), None).await? {
                Seen::Absent => return Ok(None),
                Seen::Version(v, _) => return Ok(self.finish(v, true, false)),
                Seen::Again => continue,
            }
        }
        Err(self.contention())
    }

    /// What a reader sees of one stored item DynamoDB returned (filtered, if a filter was sent).
    async fn settle(&self, raw: Item, cache: &StateCache) -> Result<Option<Item>> {
        let applied = raw.contains_key(APPLIED);
        match resolve(&self.mgr, self.level, Some(&raw), Some(cache)).await? {
            Seen::Absent => Ok(None),
            Seen::Version(v, stored) => Ok(self.finish(
                v,
                applied && self.level == IsolationLevel::Committed,
                stored,
            )),
            Seen::Again => {
                let key = item_lock::key_of(&self.schema, &raw);
                self.reread(&key, 1).await
            }
        }
    }

    /// Looks up, once each and concurrently, the states of the transactions that applied changes to
    /// these stored items (only `Committed` reads need them).
    async fn prefetch_states<'i>(
        &self,
        raws: impl Iterator<Item = &'i Item>,
        cache: &StateCache,
    ) -> Result<()> {
        if self.level != IsolationLevel::Committed {
            return Ok(());
        }
        let owners: HashSet<String> = raws
            .filter(|r| r.contains_key(APPLIED))
            .filter_map(|r| r.get(OWNER).and_then(|v| v.as_s().ok()))
            .cloned()
            .collect();
        let mgr = &self.mgr;
        futures::stream::iter(owners)
            .map(|o| async move { tx_state(mgr, &o, Some(cache)).await })
            .buffer_unordered(self.mgr.inner.settings.concurrency.max(1))
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }

    /// What a reader sees of a page of stored items, in order.
    async fn settle_all(&self, raws: Vec<Item>) -> Result<Vec<Item>> {
        if self.indirect {
            return self.settle_indirect(raws).await;
        }
        let cache = StateCache::default();
        let cache = &cache;
        self.prefetch_states(raws.iter(), cache).await?;
        let out: Vec<Option<Item>> = futures::stream::iter(raws)
            .map(|raw| self.settle(raw, cache))
            .buffered(self.mgr.inner.settings.concurrency.max(1))
            .try_collect()
            .await?;
        Ok(out.into_iter().flatten().collect())
    }

    /// Index items of a global index without lock attributes: re-read each item from the table.
    async fn settle_indirect(&self, raws: Vec<Item>) -> Result<Vec<Item>> {
        let keys: Vec<(String, Item)> = raws
            .iter()
            .map(|r| (self.table.clone(), item_lock::key_of(&self.schema, r)))
            .collect();
        let found: HashMap<ItemRef, Item> = crate::ddb::batch_get(&self.mgr.inner.client, &keys)
            .await?
            .into_iter()
            .map(|(t, i)| (ItemRef::new(&t, &item_lock::key_of(&self.schema, &i)), i))
            .collect();
        let cache = StateCache::default();
        let cache = &cache;
        self.prefetch_states(found.values(), cache).await?;
        let found = &found;
        let out: Vec<Option<Item>> = futures::stream::iter(keys)
            .map(|(t, key)| async move {
                let raw = found.get(&ItemRef::new(&t, &key));
                match resolve(&self.mgr, self.level, raw, Some(cache)).await? {
                    Seen::Absent => Ok(None),
                    Seen::Version(v, _) => Ok(self.finish(v, true, false)),
                    Seen::Again => self.reread(&key, 1).await,
                }
            })
            .buffered(self.mgr.inner.settings.concurrency.max(1))
            .try_collect()
            .await?;
        Ok(out.into_iter().flatten().collect())
    }
}

// ------------------------------------------------------------------------------------------------
// GetItem

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
            .map_err(|e| Error::sdk("GetItem", e))?
            .item;
        let item = match resolve(self.mgr, self.level, raw.as_ref(), None).await? {
            Seen::Absent => None,
            Seen::Version(v, stored) => ctx.finish(v, false, stored),
            Seen::Again => ctx.reread(&self.key, 1).await?,
        };
        Ok(GetOutput { item })
    }
}

// ------------------------------------------------------------------------------------------------
// BatchGetItem

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
    /// [`Error::ReadContention`] as for [`IsolatedGetItemBuilder::send`].
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

// ------------------------------------------------------------------------------------------------
// Query and Scan

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
                    .map_err(|e| Error::sdk("Query", e))?;
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
                    .map_err(|e| Error::sdk("Scan", e))?;
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
