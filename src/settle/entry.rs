//! A transaction's requests indexed by item: which request decides each item, and what a
//! coordinator knows of the item's lock.

use std::collections::BTreeMap;

use crate::error::Item;
use crate::item_lock::LockInfo;
use crate::keys::ItemRef;
use crate::request::{Op, Request};

/// Every item of a transaction, by item.
pub(crate) type Items = BTreeMap<ItemRef, Entry>;

/// One item of a transaction: its requests (indexes into the request list) and what this
/// coordinator knows of its lock.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub table: String,
    pub key: Item,
    /// Index of the write request.
    pub write: Option<usize>,
    /// Index of the read (lock) request, if any.
    pub read: Option<usize>,
    /// Lock state as this coordinator knows it (`None`: not locked by us as far as we know).
    pub lock: Option<LockInfo>,
}

impl Entry {
    pub(crate) fn op(&self, requests: &[Request]) -> Op {
        self.write.map(|i| requests[i].op).unwrap_or(Op::Get)
    }

    /// The request that decides what happens to the item (its write, else its read).
    pub(crate) fn request<'a>(&self, requests: &'a [Request]) -> &'a Request {
        &requests[self.write.or(self.read).expect("an entry has a request")]
    }

    pub(crate) fn index(&self) -> usize {
        self.write.or(self.read).expect("an entry has a request")
    }
}

/// Adds request `i` of `requests` to the entry of its item.
pub(crate) fn index(items: &mut Items, requests: &[Request], i: usize) {
    let r = &requests[i];
    let k = r.item_ref();
    let e = items.entry(k).or_insert_with(|| Entry {
        table: r.table.clone(),
        key: r.key.clone(),
        write: None,
        read: None,
        lock: None,
    });
    if r.op.is_write() {
        e.write = Some(i);
    } else if e.read.is_none() {
        e.read = Some(i);
    }
}
