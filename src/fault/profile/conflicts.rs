//! DynamoDB's transaction-conflict rule: the items of every `TransactWriteItems` in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::wire::ItemId;

/// The items of the `TransactWriteItems` in flight, each with how many hold it.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    items: HashMap<ItemId, u32>,
}

impl InFlight {
    /// Whether `id` is part of a `TransactWriteItems` in flight.
    pub(super) fn holds(&self, id: &ItemId) -> bool {
        self.items.contains_key(id)
    }

    fn enter(&mut self, ids: &[ItemId]) {
        for id in ids {
            *self.items.entry(id.clone()).or_default() += 1;
        }
    }

    fn leave(&mut self, ids: &[ItemId]) {
        for id in ids {
            if let Some(n) = self.items.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    self.items.remove(id);
                }
            }
        }
    }
}

/// A `TransactWriteItems` in flight: its items stay taken until this is dropped (answered, or
/// its caller gave up on it).
pub(super) struct Ongoing {
    ids: Vec<ItemId>,
    state: Arc<Mutex<super::State>>,
}

impl Ongoing {
    /// Takes `ids` (the caller holds the state's lock and checked them free).
    pub(super) fn enter(
        state: &Arc<Mutex<super::State>>,
        held: &mut super::State,
        ids: Vec<ItemId>,
    ) -> Ongoing {
        held.in_flight.enter(&ids);
        Ongoing {
            ids,
            state: state.clone(),
        }
    }
}

impl Drop for Ongoing {
    fn drop(&mut self) {
        if let Ok(mut s) = self.state.lock() {
            s.in_flight.leave(&self.ids);
        }
    }
}
