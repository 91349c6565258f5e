//! The manager's entry points: one sweep, and sweeps at an interval until shut down.

use std::future::Future;
use std::time::Duration;

use tracing::{Instrument, info_span, warn};

use super::options::SweepOptions;
use super::report::SweepReport;
use crate::error::Result;
use crate::manager::TransactionManager;

impl TransactionManager {
    /// Sweeps once: rolls back idle pending transactions, completes decided ones, deletes old
    /// finalized records, deletes orphaned images and (for [`SweepOptions::tables_to_scan`])
    /// releases orphaned locks. See the [module documentation](crate::sweeper).
    ///
    /// Failures on single records are collected in [`SweepReport::errors`] and the sweep goes on.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// let report = m.sweep(&SweepOptions::new()).await?;
    /// println!("rolled back {}, completed {}", report.rolled_back.len(), report.completed.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// When a scan fails (a table is missing, permissions, throttling beyond the SDK's retries).
    ///
    /// # Cancel safety
    /// Safe to drop at any point: every step is a conditional, repeatable write, and whatever a
    /// dropped sweep left half done (a rollback decided but not finished, say) the next sweep
    /// finishes. One thing is not done again: the slices of the listed tables a dropped sweep
    /// claimed ([`SweepOptions::unrecorded_scan_period`]) are read again only when they next come
    /// due, a period later.
    pub async fn sweep(&self, options: &SweepOptions) -> Result<SweepReport> {
        let span = info_span!("sweep", tx_table = %self.inner.tx_table, dry_run = options.dry_run);
        self.sweep_inner(options)
            .instrument(span)
            .await
            .inspect(SweepReport::count_in_metrics)
    }

    /// Sweeps every `interval` (measured from the start of one sweep to the start of the next)
    /// until `shutdown` resolves, calling `on_pass` with each sweep's outcome. A failed sweep is
    /// logged and retried at the next interval. Returns the totals of the completed sweeps.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) {
    /// use std::time::Duration;
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # drop(stop);
    /// let totals = m
    ///     .sweep_every(Duration::from_secs(60), &SweepOptions::new(), async { let _ = stopped.await; }, |_| {})
    ///     .await;
    /// # let _ = totals;
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Safe to drop at any point, like [`TransactionManager::sweep`]; `shutdown` resolving
    /// interrupts a sweep in progress the same way.
    pub async fn sweep_every<S, F>(
        &self,
        interval: Duration,
        options: &SweepOptions,
        shutdown: S,
        mut on_pass: F,
    ) -> SweepReport
    where
        S: Future<Output = ()>,
        F: FnMut(&Result<SweepReport>),
    {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut total = SweepReport {
            dry_run: options.dry_run,
            ..SweepReport::default()
        };
        loop {
            let started = tokio::time::Instant::now();
            let outcome = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                r = self.sweep(options) => r,
            };
            if let Err(e) = &outcome {
                warn!(error = %e, "sweep failed; trying again at the next interval");
            }
            on_pass(&outcome);
            if let Ok(r) = outcome {
                total.merge(r);
            }
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = tokio::time::sleep_until(started + interval) => {}
            }
        }
        total
    }
}
