//! A handover told in process (`Settings::hand_over`): a holder whose commit hands the item to a
//! waiter of the same [`TransactionManager`](crate::TransactionManager) asks that commit for the
//! item as it left it (`ReturnValues=ALL_NEW`) and passes it to the waiter, which then holds its
//! lock without waiting for its next look to come back.
//!
//! A waiter that names itself waits for a notice for as long as it waits for the item: while it
//! watches by reads, and while it sleeps between looks (a notice cuts the sleep short); one that
//! comes during a look is taken at the next. A notice is an observation of the item like a
//! consistent read's: the item as the commit wrote it, which names the waiter as its owner. The
//! looks go on beside it: a holder in another process, or one whose answer is lost, tells
//! nobody, and the looks find the handover.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::oneshot;

use crate::error::Item;
use crate::keys::ItemRef;

/// A watching waiter: its transaction id and the item it watches.
type Watcher = (String, ItemRef);

/// Where a watching waiter is told: the place's generation, and its sender.
type Place = (u64, oneshot::Sender<Item>);

/// The waiters of one manager watching for a handover, by transaction id and item; and the items
/// a live transaction of the manager holds, which its waiters wait for in process.
#[derive(Debug)]
pub(crate) struct Notices {
    waiting: Mutex<HashMap<Watcher, Place>>,
    next: AtomicU64,
    /// Item → the transaction of this manager holding its lock, from the lock's answer (or the
    /// handover told) until that transaction lets it go or ends. A hint, never a decision: an
    /// entry may outlive the lock (a contender released it), and a waiter acting on it only
    /// waits longer, within its bound ([`Notices::wait_while_held`]).
    held: Mutex<HashMap<ItemRef, String>>,
    /// Bumped whenever an entry of `held` goes.
    let_go: tokio::sync::watch::Sender<u64>,
}

impl Default for Notices {
    fn default() -> Self {
        Notices {
            waiting: Default::default(),
            next: Default::default(),
            held: Default::default(),
            let_go: tokio::sync::watch::Sender::new(0),
        }
    }
}

/// A waiter's place among the [`Notices`]: while it lives, a holder of the same manager whose
/// commit hands the item to this waiter passes it the item. Dropped, it takes the place out.
#[derive(Debug)]
pub(crate) struct Awaiting<'a> {
    notices: &'a Notices,
    key: Watcher,
    generation: u64,
    /// The item as the handover left it, once a holder told.
    pub told: Option<oneshot::Receiver<Item>>,
}

impl Notices {
    /// Waits for a handover of `item` to transaction `tx` (until the result is dropped). A
    /// place the same waiter had for the item before is replaced.
    pub(crate) fn await_handover(&self, tx: &str, item: ItemRef) -> Awaiting<'_> {
        let (send, told) = oneshot::channel();
        let generation = self.next.fetch_add(1, Ordering::Relaxed);
        let key = (tx.to_string(), item);
        self.lock().insert(key.clone(), (generation, send));
        Awaiting {
            notices: self,
            key,
            generation,
            told: Some(told),
        }
    }

    /// Whether transaction `tx` of this manager is watching for a handover of `item`: a commit
    /// that hands it the item then asks for the item as it leaves it, to [`Self::tell`] it.
    pub(crate) fn awaited(&self, tx: &str, item: &ItemRef) -> bool {
        self.lock().contains_key(&(tx.to_string(), item.clone()))
    }

    /// Passes `found`, the item as a commit that handed it to transaction `tx` left it, to that
    /// transaction's watch, if it is still watching.
    pub(crate) fn tell(&self, tx: &str, item: &ItemRef, found: Item) {
        if let Some((_, send)) = self.lock().remove(&(tx.to_string(), item.clone())) {
            // The item passes to that transaction in process: its other waiters here go on
            // waiting for it, not for the holder that handed it over.
            self.holds(tx, item);
            // A watch that ended meanwhile dropped its receiver: its reads told it, or its
            // next look will.
            let _ = send.send(found);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Watcher, Place>> {
        // A panic while the map was held cannot leave it inconsistent: every use is one call.
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<ItemRef, String>> {
        // As `lock`: every use is one call.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Transaction `tx` of this manager took `item`'s lock.
    pub(crate) fn holds(&self, tx: &str, item: &ItemRef) {
        self.held().insert(item.clone(), tx.to_string());
    }

    /// Transaction `tx` let `item` go (its lock released, or never taken after all).
    pub(crate) fn let_go(&self, tx: &str, item: &ItemRef) {
        let gone = {
            let mut held = self.held();
            held.get(item).is_some_and(|h| h == tx) && held.remove(item).is_some()
        };
        if gone {
            self.bump();
        }
    }

    /// Transaction `tx` ended (its handle dropped): every item it held here is let go.
    pub(crate) fn ended(&self, tx: &str) {
        let gone = {
            let mut held = self.held();
            let before = held.len();
            held.retain(|_, h| h != tx);
            held.len() != before
        };
        if gone {
            self.bump();
        }
    }

    /// Wakes the waiters in process: an entry of `held` went.
    fn bump(&self) {
        self.let_go.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The transaction of this manager holding `item`, other than `me`, if any.
    pub(crate) fn held_by_other(&self, item: &ItemRef, me: &str) -> Option<String> {
        self.held().get(item).filter(|h| *h != me).cloned()
    }

    /// Waits, without a request, while another transaction of this manager holds `item` (its
    /// commit hands the item over in process or lets it go here, so a look at DynamoDB would
    /// only find it held): until the item is let go, a holder tells `told`, or `until`. The item
    /// as told, if it was (`told` is used up then).
    ///
    /// Cancel safety: dropping it loses nothing that was not told yet.
    pub(crate) async fn wait_while_held(
        &self,
        item: &ItemRef,
        me: &str,
        told: &mut Option<oneshot::Receiver<Item>>,
        until: tokio::time::Instant,
    ) -> Option<Item> {
        // Subscribed before the check: a let-go after it is seen.
        let mut changes = self.let_go.subscribe();
        while self.held_by_other(item, me).is_some() {
            // Woken by a let-go (false) or at `until` (true); a notice ends the wait, and a
            // notice that will never come (its sender went) leaves the let-go to wait for.
            let mut bound = false;
            let woken = async {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => bound = true,
                    r = changes.changed() => bound = r.is_err(),
                }
            };
            if let Some(item) = sleep_unless_told(woken, told).await {
                return Some(item);
            }
            if bound {
                return None;
            }
        }
        None
    }
}

/// Waits out `sleep`, unless a holder tells the handover first (`told`, which is used up then):
/// the item as it told it. Cancel safety: dropping it loses nothing that was not told yet.
pub(crate) async fn sleep_unless_told(
    sleep: impl std::future::Future<Output = ()>,
    told: &mut Option<oneshot::Receiver<Item>>,
) -> Option<Item> {
    let Some(notice) = told.as_mut() else {
        sleep.await;
        return None;
    };
    tokio::select! {
        () = sleep => None,
        item = notice => {
            // Told, or nobody will tell (its sender went): either way, no more.
            *told = None;
            item.ok()
        }
    }
}

/// The item a holder told, if it did (`told` is used up then). Never waits.
pub(crate) fn told_now(told: &mut Option<oneshot::Receiver<Item>>) -> Option<Item> {
    match told.as_mut()?.try_recv() {
        Ok(item) => {
            *told = None;
            Some(item)
        }
        Err(oneshot::error::TryRecvError::Empty) => None,
        Err(oneshot::error::TryRecvError::Closed) => {
            *told = None;
            None
        }
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        let mut waiting = self.notices.lock();
        if waiting
            .get(&self.key)
            .is_some_and(|(g, _)| *g == self.generation)
        {
            waiting.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;

    fn item(n: &str) -> Item {
        Item::from([("n".to_string(), AttributeValue::N(n.into()))])
    }

    fn key(k: &str) -> ItemRef {
        ItemRef::new(
            "t",
            &Item::from([("Id".to_string(), AttributeValue::S(k.into()))]),
        )
    }

    #[test]
    fn a_notice_reaches_the_waiter_of_that_transaction_and_item_only() {
        let notices = Notices::default();
        let mut a = notices.await_handover("tx-a", key("k"));
        assert!(notices.awaited("tx-a", &key("k")));
        assert!(!notices.awaited("tx-a", &key("other")));
        assert!(!notices.awaited("tx-b", &key("k")));
        notices.tell("tx-b", &key("k"), item("9"));
        notices.tell("tx-a", &key("other"), item("8"));
        let mut told = a.told.take().expect("receiver");
        assert!(told.try_recv().is_err(), "nothing told yet");
        notices.tell("tx-a", &key("k"), item("7"));
        assert_eq!(told.try_recv().expect("told"), item("7"));
        assert!(!notices.awaited("tx-a", &key("k")), "a place is told once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_notice_cuts_a_sleep_short_and_is_used_up() {
        let notices = Notices::default();
        let mut a = notices.await_handover("tx-a", key("k"));
        let mut told = a.told.take();
        assert_eq!(told_now(&mut told), None, "nothing told yet");
        let long = tokio::time::sleep(std::time::Duration::from_secs(3600));
        let (item_told, ()) = tokio::join!(sleep_unless_told(long, &mut told), async {
            notices.tell("tx-a", &key("k"), item("5"));
        });
        assert_eq!(item_told, Some(item("5")));
        assert!(told.is_none(), "a notice is used up");
        // With nothing to be told, the sleep runs its course.
        let short = tokio::time::sleep(std::time::Duration::from_millis(5));
        assert_eq!(sleep_unless_told(short, &mut told).await, None);
    }

    #[test]
    fn a_notice_that_came_while_nobody_listened_is_there_at_the_next_look() {
        let notices = Notices::default();
        let mut a = notices.await_handover("tx-a", key("k"));
        let mut told = a.told.take();
        notices.tell("tx-a", &key("k"), item("6"));
        assert_eq!(told_now(&mut told), Some(item("6")));
        assert_eq!(told_now(&mut told), None);
    }

    #[test]
    fn a_dropped_watch_takes_its_place_out_but_not_a_newer_one() {
        let notices = Notices::default();
        let old = notices.await_handover("tx-a", key("k"));
        let mut new = notices.await_handover("tx-a", key("k"));
        drop(old);
        assert!(notices.awaited("tx-a", &key("k")), "the newer place stays");
        notices.tell("tx-a", &key("k"), item("1"));
        assert_eq!(
            new.told.take().expect("rx").try_recv().expect("told"),
            item("1")
        );
        let gone = notices.await_handover("tx-a", key("k"));
        drop(gone);
        assert!(!notices.awaited("tx-a", &key("k")));
        // Telling nobody is no error.
        notices.tell("tx-a", &key("k"), item("2"));
    }

    #[test]
    fn an_item_held_here_is_let_go_only_by_its_holder_or_its_end() {
        let notices = Notices::default();
        notices.holds("tx-a", &key("k"));
        notices.holds("tx-a", &key("j"));
        assert_eq!(
            notices.held_by_other(&key("k"), "tx-b").as_deref(),
            Some("tx-a")
        );
        assert_eq!(notices.held_by_other(&key("k"), "tx-a"), None, "its own");
        notices.let_go("tx-b", &key("k"));
        assert!(
            notices.held_by_other(&key("k"), "tx-b").is_some(),
            "not tx-b's to let go"
        );
        notices.let_go("tx-a", &key("k"));
        assert_eq!(notices.held_by_other(&key("k"), "tx-b"), None);
        notices.ended("tx-a");
        assert_eq!(notices.held_by_other(&key("j"), "tx-b"), None);
    }

    #[test]
    fn a_told_handover_passes_the_item_to_its_waiter_here() {
        let notices = Notices::default();
        notices.holds("tx-a", &key("k"));
        let _b = notices.await_handover("tx-b", key("k"));
        notices.tell("tx-b", &key("k"), item("1"));
        notices.ended("tx-a");
        assert_eq!(
            notices.held_by_other(&key("k"), "tx-c").as_deref(),
            Some("tx-b")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_in_process_ends_at_a_let_go_a_notice_or_its_bound() {
        let notices = Notices::default();
        let k = key("k");
        let far = tokio::time::Instant::now() + std::time::Duration::from_secs(3600);
        // Let go.
        notices.holds("tx-a", &key("k"));
        let mut none = None;
        let (waited, ()) =
            tokio::join!(notices.wait_while_held(&k, "tx-b", &mut none, far), async {
                tokio::task::yield_now().await;
                notices.ended("tx-a");
            });
        assert_eq!(waited, None);
        assert!(tokio::time::Instant::now() < far);
        // Told.
        notices.holds("tx-a", &key("k"));
        let mut b = notices.await_handover("tx-b", key("k"));
        let mut told = b.told.take();
        let (waited, ()) =
            tokio::join!(notices.wait_while_held(&k, "tx-b", &mut told, far), async {
                tokio::task::yield_now().await;
                notices.tell("tx-b", &key("k"), item("4"));
            });
        assert_eq!(waited, Some(item("4")));
        assert!(told.is_none());
        // Its bound, while another still holds the item.
        notices.holds("tx-c", &key("k"));
        let soon = tokio::time::Instant::now() + std::time::Duration::from_millis(500);
        assert_eq!(
            notices
                .wait_while_held(&key("k"), "tx-b", &mut none, soon)
                .await,
            None
        );
        assert_eq!(tokio::time::Instant::now(), soon);
    }
}
