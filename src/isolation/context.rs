//! The context of one read: the caller's expressions validated and parsed, the request sent to
//! DynamoDB (with the lock attributes the level needs), and the final shape of each version a
//! reader may see.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;

use super::index::{IndexInfo, describe_index};
use super::{IsolationLevel, read_lock_error};
use crate::error::{Error, Item, Result};
use crate::expr::{self, Cond, Path, PathElem};
use crate::item_lock::{self, APPLIED, IMAGE, IMAGE_REF, OWNER, ROLL, TRANSIENT};
use crate::keys::KeySchema;
use crate::manager::TransactionManager;

/// The caller's expressions, validated.
#[derive(Debug, Clone, Default)]
pub(super) struct UserExprs {
    pub(super) projection: Option<String>,
    pub(super) filter: Option<String>,
    pub(super) key_condition: Option<String>,
    pub(super) names: Option<HashMap<String, String>>,
    pub(super) values: Option<HashMap<String, AttributeValue>>,
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
pub(super) struct Sent {
    pub(super) projection: Option<String>,
    pub(super) filter: Option<String>,
    pub(super) key_condition: Option<String>,
    pub(super) names: Option<HashMap<String, String>>,
    pub(super) values: Option<HashMap<String, AttributeValue>>,
}

/// The lock attributes a read at `level` needs.
fn lock_attrs(level: IsolationLevel) -> &'static [&'static str] {
    match level {
        IsolationLevel::Uncommitted => &[OWNER, TRANSIENT, APPLIED],
        _ => &[OWNER, TRANSIENT, APPLIED, IMAGE, IMAGE_REF, ROLL],
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
pub(super) struct Ctx {
    pub(super) mgr: TransactionManager,
    pub(super) level: IsolationLevel,
    pub(super) table: String,
    pub(super) schema: Arc<KeySchema>,
    pub(super) index: Option<IndexInfo>,
    /// The caller's projection, applied last.
    pub(super) paths: Option<Vec<Path>>,
    /// The caller's filter, for versions DynamoDB did not filter.
    pub(super) filter: Option<Cond>,
    /// The key condition, for versions that did not come from the index.
    pub(super) key_condition: Option<Cond>,
    /// Whether results must be re-read from the table (a global index without the lock attributes).
    pub(super) indirect: bool,
    /// Top-level attributes of the caller's projection that DynamoDB projected exactly as asked (the
    /// others were fetched whole because the library needed them).
    pub(super) exact: HashSet<String>,
}

impl Ctx {
    pub(super) async fn new(
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
                    // Items a transaction changed (or will, rolling a write forward) are judged
                    // here, on the version this level sees.
                    names.insert(format!("#{APPLIED}"), APPLIED.to_string());
                    names.insert(format!("#{ROLL}"), ROLL.to_string());
                    Some(format!(
                        "({f}) OR attribute_exists(#{APPLIED}) OR attribute_exists(#{ROLL})"
                    ))
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
    pub(super) fn finish(&self, v: Item, recheck: bool, projected: bool) -> Option<Item> {
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
}
