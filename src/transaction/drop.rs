//! What dropping an unfinished handle does (see [`Transaction`]'s "Drop" section).

use std::sync::atomic::Ordering;

use tracing::warn;

use crate::error::Error;

use super::Transaction;

impl Drop for Transaction {
    fn drop(&mut self) {
        // A handle that sent nothing decides nothing (another coordinator may be driving it).
        if self.finished.load(Ordering::SeqCst)
            || !self.wrote.load(Ordering::SeqCst)
            || !self.inner.settings.rollback_on_drop
        {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let inner = self.inner.clone();
            let id = self.id.clone();
            let places = self.places.clone();
            crate::metrics::dropped_handle();
            handle.spawn(async move {
                // As `TransactionManager::rollback_transaction`: resume, then roll back.
                let rollback =
                    async { Transaction::load(inner.clone(), &id).await?.rollback().await }.await;
                // Then take back its places in items' queues: nobody comes back for them (a
                // dropped `run` drops its unit of work).
                places.leave(&inner).await;
                match rollback {
                    // Committed meanwhile, or the record's creation never landed: nothing to undo.
                    Ok(()) | Err(Error::AlreadyCommitted { .. } | Error::TransactionNotFound { .. }) => {}
                    Err(e) => {
                        warn!(tx = %id, error = %e, "background rollback of a dropped transaction failed")
                    }
                }
            });
        }
    }
}
