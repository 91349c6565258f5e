//! What dropping an unfinished handle does (see [`Transaction`]'s "Drop" section).

use std::sync::atomic::Ordering;

use tracing::warn;

use crate::error::Error;

use super::Transaction;

impl Drop for Transaction {
    fn drop(&mut self) {
        // Its waiters of this manager stop waiting for it in process.
        self.inner.notices.ended(self.id.as_str());
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
            // A lock taken without a record (`Settings::record_on_demand`): no record names it,
            // so no rollback finds it; release it here (conditional on our unapplied lock).
            let st = self.state.get_mut();
            let mut unrecorded = if st.meta.is_none() && !st.record_in_doubt {
                std::mem::take(&mut st.items)
            } else {
                Default::default()
            };
            crate::metrics::dropped_handle();
            handle.spawn(async move {
                if !unrecorded.is_empty()
                    && let Err(e) =
                        crate::settle::release_without_record(&inner, &id, &mut unrecorded).await
                {
                    warn!(tx = %id, error = %e, "releasing the lock of a dropped transaction failed");
                }
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
