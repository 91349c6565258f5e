//! What a reader at a level may see of a stored item: the owner's state decides between the stored
//! item, its before-image, nothing, or a re-read; and the settling of every item a read returned.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};

use super::IsolationLevel;
use super::context::Ctx;
use crate::TxId;
use crate::error::{Error, Item, Result};
use crate::item_lock::{self, APPLIED, OWNER, Observed, ROLL};
use crate::keys::ItemRef;
use crate::manager::TransactionManager;
use crate::record::{self, TxState};
use crate::request::Request;

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

/// What one page of reads has looked up already: the states of transactions (valid for items read
/// before the lookup), and the requests of committed ones (fixed once committed).
#[derive(Default)]
pub(crate) struct PageCache {
    states: Mutex<HashMap<String, Option<TxState>>>,
    requests: Mutex<HashMap<String, Arc<Vec<Request>>>>,
}

/// The state of a transaction (one consistent GetItem of the header's state only).
async fn tx_state(
    mgr: &TransactionManager,
    owner: &str,
    cache: Option<&PageCache>,
) -> Result<Option<TxState>> {
    if let Some(s) = cache.and_then(|c| c.states.lock().expect("state cache").get(owner).copied()) {
        return Ok(s);
    }
    let key = record::header_key(&TxId(owner.to_string()));
    let out = mgr
        .inner
        .client
        .get_item()
        .table_name(&mgr.inner.tx_table)
        .set_key(Some(key.clone()))
        .projection_expression("#s")
        .expression_attribute_names("#s", record::STATE)
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e).on_item(&mgr.inner.tx_table, &key))?;
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
        c.states
            .lock()
            .expect("state cache")
            .insert(owner.to_string(), state);
    }
    Ok(state)
}

/// What a reader at `level` sees of an item of `table`, given the item as stored (`None`: absent).
pub(crate) async fn resolve(
    mgr: &TransactionManager,
    level: IsolationLevel,
    table: &str,
    raw: Option<&Item>,
    cache: Option<&PageCache>,
) -> Result<Seen> {
    let obs = Observed::of(raw);
    let seen = |v: Option<Item>| v.map(|v| Seen::Version(v, true)).unwrap_or(Seen::Absent);
    let Some(owner) = obs.owner.as_deref() else {
        return Ok(seen(obs.visible()));
    };
    if level == IsolationLevel::Uncommitted || (!obs.applied && obs.roll.is_none()) {
        // Not applied: the item is as committed (a pending delete still shows the item).
        return Ok(seen(obs.visible()));
    }
    if !obs.applied {
        // A write to roll forward: the stored item until its transaction commits, then the item
        // the write leaves, until the write that applies it unlocks the item.
        return match tx_state(mgr, owner, cache).await? {
            Some(TxState::Committed) => {
                rolled_forward(mgr, table, &obs, raw.expect("locked"), cache).await
            }
            Some(_) => Ok(seen(obs.visible())),
            None => Ok(Seen::Again),
        };
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

/// What a reader sees of an item whose write a committed transaction rolls forward: the item the
/// write leaves, computed from the whole item read again (`raw` may be a projection) and the write
/// in the transaction's record. `Again` once the item has moved on (the write applied and the item
/// unlocked, by whoever settles the transaction).
async fn rolled_forward(
    mgr: &TransactionManager,
    table: &str,
    obs: &Observed,
    raw: &Item,
    cache: Option<&PageCache>,
) -> Result<Seen> {
    let schema = mgr.inner.schema(table).await?;
    let key = item_lock::key_of(&schema, raw);
    let whole = crate::ddb::get_consistent(&mgr.inner.client, table, &key).await?;
    let now = Observed::of(whole.as_ref());
    if now.owner != obs.owner || now.applied || now.roll != obs.roll {
        return Ok(Seen::Again);
    }
    let (Some(owner), Some(w)) = (&obs.owner, obs.roll) else {
        return Ok(Seen::Again);
    };
    let Some(requests) = committed_requests(mgr, owner, cache).await? else {
        return Ok(Seen::Again); // finalized and gone: the item is settled by now
    };
    let req = requests
        .get(w)
        .filter(|r| r.table == table && r.op.is_write() && r.item_ref() == ItemRef::new(table, &key))
        .ok_or_else(|| {
            Error::invariant(format!(
                "an item of {table} locked by {owner} rolls forward request {w}, which is not its write"
            ))
        })?;
    let mut base = now.visible().unwrap_or_default();
    base.extend(key);
    Ok(match req.result_on(base) {
        Ok(Some(after)) => Seen::Version(after, false),
        Ok(None) => Seen::Absent,
        // Not known here: wait for the write itself (the committer knew it).
        Err(_) => Seen::Again,
    })
}

/// The requests of transaction `owner`'s record (`None`: the record is gone), from the page's
/// cache when it has them, else loaded and kept there (a committed record's requests are fixed).
async fn committed_requests(
    mgr: &TransactionManager,
    owner: &str,
    cache: Option<&PageCache>,
) -> Result<Option<Arc<Vec<Request>>>> {
    if let Some(r) = cache.and_then(|c| c.requests.lock().expect("cache").get(owner).cloned()) {
        return Ok(Some(r));
    }
    let id = TxId(owner.to_string());
    let Some(rec) = record::load(&mgr.inner.client, &mgr.inner.tx_table, &id).await? else {
        return Ok(None);
    };
    let r = Arc::new(rec.requests);
    if let Some(c) = cache {
        c.requests
            .lock()
            .expect("cache")
            .insert(owner.to_string(), r.clone());
    }
    Ok(Some(r))
}

impl Ctx {
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
    pub(super) async fn reread(&self, key: &Item, used: u32) -> Result<Option<Item>> {
        for _ in used..self.attempts() {
            let raw = crate::ddb::get_consistent(&self.mgr.inner.client, &self.table, key).await?;
            match resolve(&self.mgr, self.level, &self.table, raw.as_ref(), None).await? {
                Seen::Absent => return Ok(None),
                Seen::Version(v, _) => return Ok(self.finish(v, true, false)),
                Seen::Again => continue,
            }
        }
        Err(self.contention())
    }

    /// What a reader sees of one stored item DynamoDB returned (filtered, if a filter was sent).
    async fn settle(&self, raw: Item, cache: &PageCache) -> Result<Option<Item>> {
        let applied = raw.contains_key(APPLIED);
        match resolve(&self.mgr, self.level, &self.table, Some(&raw), Some(cache)).await? {
            Seen::Absent => Ok(None),
            // DynamoDB judged the filter on the stored item only.
            Seen::Version(v, stored) => Ok(self.finish(
                v,
                (applied || !stored) && self.level == IsolationLevel::Committed,
                stored,
            )),
            Seen::Again => {
                let key = item_lock::key_of(&self.schema, &raw);
                self.reread(&key, 1).await
            }
        }
    }

    /// Looks up, once each and concurrently, the states of the transactions that applied changes to
    /// these stored items, or roll writes forward on them (only `Committed` reads need them), and
    /// the requests of those that committed with writes still to roll forward.
    async fn prefetch_states<'i>(
        &self,
        raws: impl Iterator<Item = &'i Item> + Clone,
        cache: &PageCache,
    ) -> Result<()> {
        if self.level != IsolationLevel::Committed {
            return Ok(());
        }
        let owner = |r: &'i Item| r.get(OWNER).and_then(|v| v.as_s().ok()).cloned();
        let owners: HashSet<String> = raws
            .clone()
            .filter(|r| r.contains_key(APPLIED) || r.contains_key(ROLL))
            .filter_map(owner)
            .collect();
        let mgr = &self.mgr;
        futures::stream::iter(owners)
            .map(|o| async move { tx_state(mgr, &o, Some(cache)).await })
            .buffer_unordered(self.mgr.inner.settings.concurrency.max(1))
            .try_collect::<Vec<_>>()
            .await?;
        let committed = |o: &String| {
            cache.states.lock().expect("state cache").get(o).copied()
                == Some(Some(TxState::Committed))
        };
        let rolling: HashSet<String> = raws
            .filter(|r| r.contains_key(ROLL) && !r.contains_key(APPLIED))
            .filter_map(owner)
            .filter(committed)
            .collect();
        futures::stream::iter(rolling)
            .map(|o| async move { committed_requests(mgr, &o, Some(cache)).await })
            .buffer_unordered(self.mgr.inner.settings.concurrency.max(1))
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }

    /// What a reader sees of a page of stored items, in order.
    pub(super) async fn settle_all(&self, raws: Vec<Item>) -> Result<Vec<Item>> {
        if self.indirect {
            return self.settle_indirect(raws).await;
        }
        let cache = PageCache::default();
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
        let cache = PageCache::default();
        let cache = &cache;
        self.prefetch_states(found.values(), cache).await?;
        let found = &found;
        let out: Vec<Option<Item>> = futures::stream::iter(keys)
            .map(|(t, key)| async move {
                let raw = found.get(&ItemRef::new(&t, &key));
                match resolve(&self.mgr, self.level, &self.table, raw, Some(cache)).await? {
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
