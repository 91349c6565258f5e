//! The background sweeper: [`TransactionManager::spawn_sweeper`] and its [`Sweeper`] handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::options::SweepOptions;
use super::report::SweepReport;
use crate::manager::TransactionManager;

/// A running background sweeper, from [`TransactionManager::spawn_sweeper`].
///
/// Dropping the handle stops the sweeper too (at its next await point).
#[derive(Debug)]
pub struct Sweeper {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<SweepReport>,
    passes: Arc<AtomicU64>,
    last: Arc<Mutex<Option<SweepReport>>>,
}

impl Sweeper {
    /// Sweeps completed so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::SeqCst)
    }

    /// The report of the last completed sweep, if any.
    pub fn last_report(&self) -> Option<SweepReport> {
        self.last.lock().expect("sweeper report poisoned").clone()
    }

    /// Stops sweeping (interrupting a sweep in progress) and returns the totals of the completed
    /// sweeps.
    ///
    /// # Cancel safety
    /// Dropping this future still stops the sweeper; only the totals are lost.
    pub async fn stop(mut self) -> SweepReport {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => SweepReport::default(),
        }
    }
}

impl TransactionManager {
    /// Spawns [`TransactionManager::sweep_every`] on the Tokio runtime; stop it with
    /// [`Sweeper::stop`] (or by dropping the handle).
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn spawn_sweeper(&self, interval: Duration, options: SweepOptions) -> Sweeper {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let passes = Arc::new(AtomicU64::new(0));
        let last = Arc::new(Mutex::new(None));
        let mgr = self.clone();
        let (p, l) = (passes.clone(), last.clone());
        let task = tokio::spawn(async move {
            mgr.sweep_every(
                interval,
                &options,
                async {
                    let _ = stopped.await;
                },
                move |r| {
                    p.fetch_add(1, Ordering::SeqCst);
                    if let Ok(r) = r {
                        *l.lock().expect("sweeper report poisoned") = Some(r.clone());
                    }
                },
            )
            .await
        });
        Sweeper {
            stop: Some(stop),
            task,
            passes,
            last,
        }
    }
}
