//! The lock phase: every item locked (concurrently), contention with other transactions resolved
//! through [`contention`](crate::contention) in each item's wait ([`lock_wait`]). A write applied
//! early is [`early_apply`]'s.
//!
//! [`early_apply`]: super::early_apply
//! [`lock_wait`]: super::lock_wait

use futures::StreamExt;
use tracing::instrument;

use crate::error::{Error, Item, Result};
use crate::expr;
use crate::item_lock::{Existence, LockInfo};
use crate::keys::ItemRef;
use crate::request::Op;

use super::reorder::Placement;
use super::{State, Transaction};

impl Transaction {
    /// Records and locks one item now.
    pub(super) async fn drive_lock(&self, st: &mut State, r: &ItemRef) -> Result<LockInfo> {
        self.flush(st).await?;
        self.hold_lock(st, r).await
    }

    /// The lock this handle holds on `r`'s item, taking it if it holds none yet.
    pub(super) async fn hold_lock(&self, st: &mut State, r: &ItemRef) -> Result<LockInfo> {
        if let Some(l) = st.items[r].lock.clone() {
            return Ok(l);
        }
        let e = st.items[r].clone();
        let first = self.expected_existence(st, r).await?;
        // Boxed: the lock loop's future is large, and callers nest it deep (a debug build's
        // test thread overflowed its stack).
        let order = self.order_of(st, r);
        let lock = match Box::pin(self.lock_one(&e.table, &e.key, first, false, order)).await {
            Err(Error::ItemLocked { .. }) if order == Placement::Reorderable => {
                return self.lock_in_key_order(st, r, first).await;
            }
            l => l?,
        };
        st.items.get_mut(r).expect("entry exists").lock = Some(lock.clone());
        Ok(lock)
    }

    /// Locks every item not yet locked by this coordinator, concurrently.
    #[instrument(level = "debug", name = "lock", skip_all, fields(tx = %self.id, items = st.items.len()))]
    pub(super) async fn lock_all(&self, st: &mut State) -> Result<()> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::LOCK);
        let mut todo: Vec<(ItemRef, String, Item, Existence)> = Vec::new();
        for (k, e) in st.items.iter().filter(|(_, e)| e.lock.is_none()) {
            let first = self.expected_existence(st, k).await?;
            todo.push((k.clone(), e.table.clone(), e.key.clone(), first));
        }
        if todo.is_empty() {
            return Ok(());
        }
        let results: Vec<(ItemRef, Result<LockInfo>)> = futures::stream::iter(todo)
            .map(|(k, table, key, first)| async move {
                let r = self
                    .lock_one(&table, &key, first, false, Placement::InOrder)
                    .await;
                (k, r)
            })
            .buffer_unordered(self.inner.settings.concurrency.max(1))
            .collect()
            .await;
        let mut first_err = None;
        for (k, r) in results {
            match r {
                Ok(l) => st.items.get_mut(&k).expect("entry exists").lock = Some(l),
                Err(e) => {
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// What the first lock write of `r`'s item assumes: that it exists, unless the transaction's
    /// write of it is a put without a condition (most often a create) or can only succeed on an
    /// absent item (a put or an update whose condition requires `attribute_not_exists` of the hash
    /// key: an insert that must not overwrite). A wrong guess costs one more write (in a batch,
    /// one more `TransactWriteItems`), never a wrong lock: both forms are conditional on what they
    /// assume.
    pub(super) async fn expected_existence(&self, st: &State, r: &ItemRef) -> Result<Existence> {
        let e = &st.items[r];
        let Some(req) = e.write.map(|w| &st.requests[w]) else {
            return Ok(Existence::Present);
        };
        let c = match (req.op, req.condition.as_deref()) {
            // A put without a condition is most often a create (an item the transaction has read
            // is held already and needs no lock): an overwrite costs the one more write.
            (Op::Put, None) => return Ok(Existence::Absent),
            (Op::Put | Op::Update, Some(c)) => c,
            _ => return Ok(Existence::Present),
        };
        let schema = self.schema(&e.table).await?;
        let insert_only = expr::parse_condition(c, req.names.as_ref(), req.values.as_ref())
            .is_ok_and(|cond| cond.requires_absent(&schema.hash.0));
        Ok(if insert_only {
            Existence::Absent
        } else {
            Existence::Present
        })
    }
}
