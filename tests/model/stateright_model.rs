//! The `stateright` [`Model`]: initial states, enabled actions, transitions, and the properties
//! checked in every reachable state.

use super::*;

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.cfg.txs.len();
        let items = self.cfg.items.len();
        vec![State {
            items: self.cfg.items.iter().map(|&d| Item::unlocked(d)).collect(),
            records: vec![None; n],
            tombstones: vec![false; n],
            images: vec![vec![None; items]; n],
            coordinators: (0..n as Tx)
                .map(|t| self.fresh_coordinator(t))
                .chain(self.cfg.second_handles.iter().map(|&t| Coordinator {
                    phase: Phase::Idle,
                    ..self.fresh_coordinator(t)
                }))
                .collect(),
            tokens: vec![false; n],
            batch_tokens: vec![None; n],
            crashes_left: self.cfg.crashes,
            lost_left: self.cfg.lost_responses,
            logical: self.cfg.items.clone(),
            commits: vec![0; n],
            resumed_commit: false,
            batch_fell_back: false,
            batch_placeholder: false,
            creation_refused: false,
            committed_without_record: false,
            commit_without_record_refused: false,
            folded_commit: false,
            rolled_forward: false,
            stale_read: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let n = self.cfg.txs.len() as Tx;
        for k in 0..s.coordinators.len() as Slot {
            let tx = self.tx_of(k);
            let c = &s.coordinators[k as usize];
            match c.phase {
                Phase::Done => continue,
                Phase::Dead | Phase::Idle => {
                    for intent in [Intent::Commit, Intent::Rollback] {
                        out.push(Action::Resume { c: k, intent });
                    }
                    continue;
                }
                Phase::Running => {}
            }
            if s.crashes_left > 0 {
                out.push(Action::Crash { c: k });
            }
            let lost_options: &[bool] = if s.lost_left > 0 {
                &[false, true]
            } else {
                &[false]
            };
            for &lost in lost_options {
                match self.next_step(s, k) {
                    Next::Fast => out.push(Action::FastCommit { c: k, lost }),
                    Next::BatchLock => {
                        out.push(Action::BatchLock {
                            c: k,
                            lost,
                            fresh: false,
                        });
                        if s.batch_tokens[tx as usize].is_some() {
                            out.push(Action::BatchLock {
                                c: k,
                                lost,
                                fresh: true,
                            });
                            if !lost {
                                out.push(Action::BatchFallBack { c: k });
                            }
                        }
                    }
                    Next::PreRead if !lost => out.push(Action::PreRead { c: k }),
                    Next::PreRead => {}
                    Next::ReadImage(es) if !lost => out.extend(
                        es.into_iter()
                            .map(|entry| Action::ReadImage { c: k, entry }),
                    ),
                    Next::ReadImage(_) => {}
                    Next::Record => out.push(Action::Record { c: k, lost }),
                    Next::RecordAndLock(entry) => {
                        out.push(Action::Record { c: k, lost });
                        out.push(Action::Lock { c: k, entry, lost });
                    }
                    Next::AppendWithLock(entry) => {
                        out.push(Action::Record { c: k, lost });
                        if !matches!(c.items[entry as usize], Knows::Locked { .. }) {
                            out.push(Action::Lock { c: k, entry, lost });
                        }
                        if lost {
                            out.push(Action::AppendFails { c: k });
                        }
                    }
                    Next::Lock(es) => {
                        out.extend(
                            es.into_iter()
                                .map(|entry| Action::Lock { c: k, entry, lost }),
                        )
                    }
                    Next::SaveImage(es) if !lost => out.extend(
                        es.into_iter()
                            .map(|entry| Action::SaveImage { c: k, entry }),
                    ),
                    Next::SaveImage(_) => {}
                    Next::ReadHeader if !lost => out.push(Action::ReadHeader { c: k }),
                    Next::ReadHeader => {}
                    Next::Apply(es) => {
                        for entry in es {
                            let needs_image =
                                self.needs_table_image(tx, entry, &c.items[entry as usize])
                                    && !c.image_saved[entry as usize];
                            if needs_image {
                                if !lost {
                                    out.push(Action::SaveImage { c: k, entry });
                                }
                            } else {
                                out.push(Action::Apply { c: k, entry, lost });
                            }
                        }
                    }
                    Next::CommitOneRequest => out.push(Action::CommitOneRequest { c: k, lost }),
                    Next::CommitWithoutRecord => {
                        out.push(Action::CommitWithoutRecord { c: k, lost })
                    }
                    Next::Flip => out.push(Action::Flip { c: k, lost }),
                    Next::RollBack => out.push(Action::RollBack { c: k, lost }),
                }
            }
        }
        for tx in 0..n {
            let t = tx as usize;
            match s.records[t] {
                Some(r) if r.state == TxState::Pending => {
                    out.push(Action::WorldRollBack { tx });
                    if self.cfg.bug == Some(Bug::ReleaseUnrecordedLock) {
                        for item in 0..s.items.len() as u8 {
                            let it = &s.items[item as usize];
                            if it.owner == Some(tx)
                                && it.applied == Applied::No
                                && !self.covered(tx, item as usize, r.requests)
                            {
                                out.push(Action::ReleaseStray { tx, item });
                            }
                        }
                    }
                }
                Some(r) => {
                    for item in 0..s.items.len() as u8 {
                        if s.items[item as usize].owner == Some(tx) {
                            out.push(Action::Settle { tx, item });
                        }
                    }
                    if !r.finalized {
                        out.push(Action::Finalize { tx });
                    } else if self.cfg.delete_records {
                        out.push(Action::DeleteRecord { tx });
                    }
                }
                None => {
                    let may_release =
                        s.tombstones[t] || self.cfg.bug == Some(Bug::OrphanReleaseWithoutTombstone);
                    let mut orphan = false;
                    for item in 0..s.items.len() as u8 {
                        let it = &s.items[item as usize];
                        if it.owner == Some(tx) && it.applied == Applied::No {
                            orphan = true;
                            if may_release {
                                out.push(Action::ReleaseOrphan { tx, item });
                            }
                        }
                    }
                    if orphan && !s.tombstones[t] {
                        out.push(Action::Tombstone { tx });
                    }
                }
            }
            for item in 0..s.items.len() as u8 {
                if s.images[t][item as usize].is_some() {
                    out.push(Action::DeleteImage { tx, item });
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let changed = match action {
            Action::FastCommit { c, lost } => self.fast_commit(&mut s, c, lost),
            Action::BatchLock { c, lost, fresh } => self.batch_lock(&mut s, c, lost, fresh),
            Action::PreRead { c } => self.pre_read(&mut s, c),
            Action::BatchFallBack { c } => {
                // The batch's answer was lost: its record may exist (`record_in_doubt`).
                s.coordinators[c as usize].batch_done = true;
                s.coordinators[c as usize].in_doubt = true;
                true
            }
            Action::ReadImage { c, entry } => self.read_image(&mut s, c, entry),
            Action::Record { c, lost } => self.record(&mut s, c, lost),
            Action::AppendFails { c } => self.append_fails(&mut s, c),
            Action::Lock { c, entry, lost } => self.lock(&mut s, c, entry, lost),
            Action::ReadHeader { c } => self.read_header(&mut s, c),
            Action::SaveImage { c, entry } => self.save_image(&mut s, c, entry),
            Action::Apply { c, entry, lost } => self.apply(&mut s, c, entry, lost),
            Action::CommitOneRequest { c, lost } => self.commit_one_request(&mut s, c, lost),
            Action::CommitWithoutRecord { c, lost } => self.commit_without_record(&mut s, c, lost),
            Action::Flip { c, lost } => self.decide(&mut s, c, TxState::Committed, lost),
            Action::RollBack { c, lost } => self.decide(&mut s, c, TxState::RolledBack, lost),
            Action::Crash { c } => {
                s.crashes_left -= 1;
                s.coordinators[c as usize].phase = Phase::Dead;
                true
            }
            Action::Resume { c, intent } => self.resume(&mut s, c, intent),
            Action::WorldRollBack { tx } => {
                let r = s.records[tx as usize]?;
                s.records[tx as usize] = Some(Record {
                    state: TxState::RolledBack,
                    ..r
                });
                self.mark_decided(&mut s, tx);
                true
            }
            Action::Settle { tx, item } => self.settle(&mut s, tx, item as usize),
            Action::DeleteImage { tx, item } => self.delete_image(&mut s, tx, item as usize),
            Action::Finalize { tx } => self.finalize(&mut s, tx),
            Action::DeleteRecord { tx } => {
                s.records[tx as usize] = None;
                true
            }
            Action::Tombstone { tx } => {
                s.tombstones[tx as usize] = true;
                true
            }
            Action::ReleaseOrphan { item, .. } | Action::ReleaseStray { item, .. } => {
                Self::release(&mut s.items[item as usize]);
                true
            }
        };
        let lost = matches!(
            action,
            Action::FastCommit { lost: true, .. }
                | Action::BatchLock { lost: true, .. }
                | Action::Record { lost: true, .. }
                | Action::AppendFails { .. }
                | Action::Lock { lost: true, .. }
                | Action::Apply { lost: true, .. }
                | Action::CommitOneRequest { lost: true, .. }
                | Action::CommitWithoutRecord { lost: true, .. }
                | Action::Flip { lost: true, .. }
                | Action::RollBack { lost: true, .. }
        );
        if lost {
            s.lost_left -= 1;
        }
        (changed && s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "committed reads see exactly the committed writes",
                |m: &ProtocolModel, s: &State| {
                    (0..s.items.len()).all(|i| m.committed_view(s, i) == Ok(s.logical[i].map(Some)))
                },
            ),
            Property::always("no lost image", |_: &ProtocolModel, s: &State| {
                s.items.iter().enumerate().all(|(i, it)| match it.owner {
                    Some(t) if it.applied == Applied::Yes && !it.transient => {
                        let decided_commit =
                            s.records[t as usize].is_some_and(|r| r.state == TxState::Committed);
                        decided_commit
                            || it.image.is_some()
                            || (it.image_ref && s.images[t as usize][i].is_some())
                    }
                    _ => true,
                })
            }),
            Property::always(
                "locks are covered by records",
                |m: &ProtocolModel, s: &State| {
                    s.items.iter().enumerate().all(|(i, it)| match it.owner {
                        None => !it.transient && it.applied == Applied::No && !it.roll,
                        // `LockThenRecord`, `RecordWithLock`: an interactive read's lock may come
                        // before its request is recorded (never an applied one).
                        Some(t) => match s.records[t as usize] {
                            Some(r) => {
                                m.covered(t, i, r.requests)
                                    || (m.cfg.reads != ReadShape::RecordThenLock
                                        && it.applied == Applied::No
                                        && m.reads_now(t, i))
                            }
                            None => it.applied == Applied::No,
                        },
                    })
                },
            ),
            Property::always("finalized means settled", |_: &ProtocolModel, s: &State| {
                s.records.iter().enumerate().all(|(t, r)| {
                    !r.is_some_and(|r| r.finalized)
                        || (0..s.items.len()).all(|i| !Self::unsettled_lock(s, t as Tx, i))
                })
            }),
            Property::always(
                "committed state is immutable",
                |_: &ProtocolModel, s: &State| {
                    s.commits.iter().enumerate().all(|(t, &n)| {
                        n <= 1
                            && (n == 0
                                || s.records[t].is_none_or(|r| r.state == TxState::Committed))
                    })
                },
            ),
            Property::always(
                "locked reads hold until commit",
                |_: &ProtocolModel, s: &State| !s.stale_read,
            ),
            Property::always(
                "quiescent states are clean",
                |m: &ProtocolModel, s: &State| {
                    !m.next_states(s).is_empty() || m.quiescent_and_clean(s)
                },
            ),
            Property::sometimes(
                "every transaction commits",
                |_: &ProtocolModel, s: &State| s.commits.iter().all(|&n| n == 1),
            ),
            Property::sometimes(
                "a late lock of a decided transaction",
                |m: &ProtocolModel, s: &State| {
                    m.on_demand()
                        || s.items.iter().any(|it| {
                            it.owner.is_some_and(|t| {
                                it.applied == Applied::No
                                    && s.records[t as usize]
                                        .is_some_and(|r| r.state != TxState::Pending)
                            })
                        })
                },
            ),
            Property::sometimes(
                "a read's lock its pending record does not name",
                |m: &ProtocolModel, s: &State| {
                    m.cfg.reads == ReadShape::RecordThenLock
                        || m.on_demand()
                        || s.items.iter().enumerate().any(|(i, it)| {
                            it.owner.is_some_and(|t| {
                                s.records[t as usize].is_some_and(|r| {
                                    r.state == TxState::Pending && !m.covered(t, i, r.requests)
                                })
                            })
                        })
                },
            ),
            Property::sometimes(
                "a read goes on after its append failed, and its transaction commits",
                |m: &ProtocolModel, s: &State| {
                    !m.appends_may_fail()
                        || s.coordinators.iter().enumerate().any(|(k, c)| {
                            c.append_failed.is_some() && s.commits[m.tx_of(k as Slot) as usize] == 1
                        })
                },
            ),
            Property::sometimes(
                "a one-request commit records the writes on items it holds",
                |m: &ProtocolModel, s: &State| !m.writes_after_reads() || s.folded_commit,
            ),
            Property::sometimes(
                "a record's creation fails on a tombstone",
                |m: &ProtocolModel, s: &State| {
                    m.cfg.reads == ReadShape::RecordThenLock
                        || m.no_read_creates()
                        || s.creation_refused
                },
            ),
            Property::sometimes(
                "an applied item of a rolled-back transaction",
                |m: &ProtocolModel, s: &State| {
                    m.cfg.txs.iter().all(single_item_on_demand)
                        || s.items.iter().any(|it| {
                            it.owner.is_some_and(|t| {
                                it.applied == Applied::Yes
                                    && s.records[t as usize]
                                        .is_some_and(|r| r.state == TxState::RolledBack)
                            })
                        })
                },
            ),
            Property::sometimes(
                "a resumed coordinator commits",
                |m: &ProtocolModel, s: &State| {
                    // A transaction without record has nothing to resume.
                    m.cfg.crashes == 0
                        || m.cfg.txs.iter().all(single_item_on_demand)
                        || s.resumed_commit
                },
            ),
            Property::sometimes(
                "a batched lock is cancelled and the transaction goes on item by item",
                |m: &ProtocolModel, s: &State| !m.batches() || s.batch_fell_back,
            ),
            Property::sometimes(
                "a batched lock inserts a placeholder for an absent item",
                |m: &ProtocolModel, s: &State| !m.batch_may_insert() || s.batch_placeholder,
            ),
            Property::sometimes(
                "a batched transaction commits",
                |m: &ProtocolModel, s: &State| {
                    !m.batches()
                        || m.cfg
                            .txs
                            .iter()
                            .zip(&s.commits)
                            .any(|(p, &n)| p.batch_lock && n == 1)
                },
            ),
            Property::sometimes(
                "a write rolled forward is applied by the settle after the commit",
                |m: &ProtocolModel, s: &State| {
                    !m.cfg.txs.iter().any(|p| p.roll_forward) || s.rolled_forward
                },
            ),
            Property::sometimes(
                "a transaction commits without a record",
                |m: &ProtocolModel, s: &State| {
                    !m.commits_without_records() || s.committed_without_record
                },
            ),
            Property::sometimes(
                "a commit without record finds its lock released",
                |m: &ProtocolModel, s: &State| {
                    !m.commits_without_records() || s.commit_without_record_refused
                },
            ),
            Property::sometimes("a lost response", |m: &ProtocolModel, s: &State| {
                m.cfg.lost_responses == 0
                    || (s.lost_left < m.cfg.lost_responses && s.commits.contains(&1))
            }),
        ]
    }
}
