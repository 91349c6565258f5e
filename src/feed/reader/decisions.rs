//! Decisions: the TX records of the transactions the assembler holds, read in batches, and what
//! each says (committed with its items, rolled back, or not decided yet).

use std::time::Instant;

use futures::future::join_all;

use crate::error::{Error, Result};
use crate::record::{self, TxState};
use crate::request::Op;

use super::Reader;
use crate::feed::assemble::Decision;

impl Reader {
    /// Reads the records of transactions waiting for their decision.
    pub(super) async fn decide(&mut self) -> Result<()> {
        let ids = self.assembler.to_check(Instant::now());
        for chunk in ids.chunks(16) {
            let client = &self.cfg.client;
            let table = &self.cfg.transactions_table;
            let followed = &self.followed;
            let answers = join_all(chunk.iter().map(|id| async move {
                let r = record::load(client, table, id).await?;
                Ok::<Decision, Error>(match r {
                    // Deleted after it was finalized (or never written, a tombstone): only the
                    // items can tell; a rollback left each as it was.
                    None => Decision::Committed(None),
                    Some(r) => match r.header.state {
                        // The items a locking transaction recorded, or those the fast path
                        // named when it marked its writes.
                        TxState::Committed => Decision::Committed(Some(
                            r.requests
                                .iter()
                                .chain(&r.header.written)
                                .filter(|q| q.op != Op::Get && followed.contains(&q.table))
                                .map(|q| q.item_ref())
                                .collect(),
                        )),
                        TxState::RolledBack => Decision::RolledBack,
                        _ => Decision::Pending,
                    },
                })
            }))
            .await;
            let now = Instant::now();
            for (id, answer) in chunk.iter().zip(answers) {
                let decision: Decision = answer?;
                for done in self.assembler.decide(id, decision, now) {
                    self.mark_done(&done);
                }
            }
        }
        Ok(())
    }
}
