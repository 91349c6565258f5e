//! The queue item's codec: where the counter, the entries and their tickets live in the item, and
//! the queue as read back from it.
//!
//! The whole queue of a lock (and namespace) is one item, `{pk: name, sk: "<ns>#ctr"}`:
//!
//! * `n` (N): the last ticket issued (shared with [`TicketCounter`](crate::lock::TicketCounter));
//! * `c` (N): how many entries the item holds;
//! * `w#<owner>` (M): one entry per holder or waiter: `hb`, `lease_ms`, `exp_ms`, `created_ms`;
//! * `t#<owner>` (N): that entry's ticket;
//! * `d` (N): when the last entry left (epoch ms, the remover's clock), for waiters' pacing.
//!
//! An entry and its ticket are written by the one `UpdateItem` that issues the ticket, so a ticket
//! exists only together with its entry.

use tokio::time::Instant;

use crate::Item;
use crate::lock::util::{COUNT, EXP_MS, HB, LEASE_MS, get_i64, get_u64};

/// Number of entries in the item.
pub(super) const ENTRIES: &str = "c";
/// When the last entry was removed (epoch ms).
pub(super) const DEPARTED_AT: &str = "d";
const ENTRY_PREFIX: &str = "w#";
const TICKET_PREFIX: &str = "t#";

/// Attribute holding the entry of `owner`.
pub(super) fn entry_attr(owner: &str) -> String {
    format!("{ENTRY_PREFIX}{owner}")
}

/// Attribute holding the ticket of `owner`.
pub(super) fn ticket_attr(owner: &str) -> String {
    format!("{TICKET_PREFIX}{owner}")
}

/// One holder or waiter, as read.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) owner: String,
    pub(super) ticket: u64,
    pub(super) hb: u64,
    pub(super) lease_ms: Option<u64>,
    pub(super) exp_ms: Option<i64>,
}

/// The queue as one read (or write response) showed it.
#[derive(Debug, Clone)]
pub(super) struct QueueState {
    /// The last ticket issued.
    pub(super) issued: u64,
    /// Entries, in ticket order (the first one holds the lock).
    pub(super) entries: Vec<Entry>,
    /// When it was read (after the response arrived).
    pub(super) at: Instant,
    /// When the last entry left, on this handle's monotonic clock (from the remover's wall clock:
    /// skew only shifts a waiter's pacing).
    pub(super) departed_at: Option<Instant>,
}

impl QueueState {
    /// The queue as `item` shows it, read at wall time `now_ms` (this handle's clock).
    pub(super) fn parse(item: Option<&Item>, now_ms: i64) -> QueueState {
        let at = Instant::now();
        let Some(item) = item else {
            return QueueState {
                issued: 0,
                entries: Vec::new(),
                at,
                departed_at: None,
            };
        };
        let departed_at = get_i64(item, DEPARTED_AT).map(|d| {
            let ago = u64::try_from(now_ms.saturating_sub(d)).unwrap_or(0);
            at.checked_sub(std::time::Duration::from_millis(ago))
                .unwrap_or(at)
        });
        let mut entries: Vec<Entry> = item
            .iter()
            .filter_map(|(k, v)| {
                let owner = k.strip_prefix(ENTRY_PREFIX)?;
                let m = v.as_m().ok()?;
                Some(Entry {
                    owner: owner.to_string(),
                    ticket: get_u64(item, &ticket_attr(owner)).unwrap_or(0),
                    hb: get_u64(m, HB).unwrap_or(0),
                    lease_ms: get_u64(m, LEASE_MS),
                    exp_ms: get_i64(m, EXP_MS),
                })
            })
            .collect();
        entries.sort_by_key(|e| e.ticket);
        QueueState {
            issued: get_u64(item, COUNT).unwrap_or(0),
            entries,
            at,
            departed_at,
        }
    }

    pub(super) fn find(&self, owner: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.owner == owner)
    }

    /// How many tickets have left the queue (released, abandoned or removed as dead) so far.
    pub(super) fn departed(&self) -> u64 {
        self.issued.saturating_sub(self.entries.len() as u64)
    }
}
