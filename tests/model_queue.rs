//! An exhaustive model check of the queue lock's ticket protocol under lost answers and late
//! requests, with `stateright`.
//!
//! The queue is one item (src/lock/queue/state.rs): the last ticket issued `n` and one entry per
//! acquirer, `owner -> ticket`. Clients acquire a few times each:
//!
//! - **enqueue** is one request, applied atomically where it lands: if the item has no entry of
//!   this owner (and, for a no-wait acquire, no entry at all) it sets `n += 1` and writes the
//!   entry with ticket `n`; its answer (or, when the condition fails, the item as it was) tells
//!   the client its ticket and whether it is first;
//! - every request can land at any later step (also after its sender gave up), or never; its
//!   answer can be lost, and the client then retries with the **same owner id** (the write is
//!   once-only per owner) or gives up, sending a removal of its entry;
//! - a waiter reads the item (a strongly consistent `GetItem`, atomic here) and **holds** when
//!   its entry has the lowest ticket; it fails (lost) when its entry is gone;
//! - a holder releases by sending the removal of its entry, and stops believing it holds at once.
//!
//! Time and expiry are left out: removal of entries judged dead is the lease lock's takeover
//! argument (tests/model_lease.rs), made on a queue entry instead of a lease record.
//!
//! Invariants: **at most one holder**, and **grants in ticket order** (each grant's ticket, the
//! fencing token, is above every earlier grant's). `naive_ticket_then_entry_is_caught` splits the
//! enqueue into "take a ticket" and "write the entry" (the naive design of
//! dynamodb-lock-clients.md) and expects the checker to find two holders.

mod model_support;

use stateright::{Checker, Model, Property};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    /// Waiting for the answer to attempt `attempt` of the enqueue of `owner`; `ambiguous`: an
    /// earlier attempt's answer was lost (it may have landed, or land later).
    Enqueuing {
        owner: u8,
        attempt: u8,
        ambiguous: bool,
        no_wait: bool,
    },
    Waiting {
        owner: u8,
        ticket: u8,
        no_wait: bool,
    },
    Holding {
        owner: u8,
        ticket: u8,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Msg {
    Enqueue {
        client: u8,
        owner: u8,
        attempt: u8,
        no_wait: bool,
    },
    /// Naive design, step 1: take a ticket.
    Ticket {
        client: u8,
        owner: u8,
        attempt: u8,
    },
    /// Naive design, step 2: write the entry with the ticket taken.
    Entry {
        client: u8,
        owner: u8,
        attempt: u8,
        ticket: u8,
    },
    Remove {
        owner: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    n: u8,
    /// (owner, ticket), any order.
    entries: Vec<(u8, u8)>,
    clients: Vec<(Phase, u8)>,
    net: Vec<Msg>,
    losses_left: u8,
    last_grant: u8,
    order_broken: bool,
    adopted: bool,
    orphan: bool,
    handoff: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Start {
        client: u8,
        no_wait: bool,
    },
    /// Message `i` lands; its answer reaches its sender if `answered`.
    Land {
        i: usize,
        answered: bool,
    },
    /// The client's current attempt fails ambiguously: retry (same owner) or give up.
    Ambiguous {
        client: u8,
        retry: bool,
    },
    Poll {
        client: u8,
    },
    Release {
        client: u8,
    },
}

struct QueueModel {
    clients: u8,
    acquisitions: u8,
    losses: u8,
    naive: bool,
}

fn owner_of(client: u8, acq: u8) -> u8 {
    client * 8 + acq
}

impl QueueModel {
    fn first(s: &State) -> Option<(u8, u8)> {
        s.entries.iter().copied().min_by_key(|(_, t)| *t)
    }

    /// The client learns its place (its entry is in the item as the answer shows it).
    fn placed(s: &mut State, c: usize, owner: u8, ticket: u8, no_wait: bool) {
        let acq = s.clients[c].1;
        if Self::first(s).map(|(o, _)| o) == Some(owner) {
            Self::grant(s, c, owner, ticket);
        } else if no_wait {
            s.net.push(Msg::Remove { owner });
            s.clients[c] = (Phase::Idle, acq + 1);
        } else {
            s.clients[c] = (
                Phase::Waiting {
                    owner,
                    ticket,
                    no_wait,
                },
                acq,
            );
        }
    }

    fn grant(s: &mut State, c: usize, owner: u8, ticket: u8) {
        if ticket <= s.last_grant {
            s.order_broken = true;
        }
        if s.last_grant > 0 {
            s.handoff = true;
        }
        s.last_grant = ticket;
        let acq = s.clients[c].1;
        s.clients[c] = (Phase::Holding { owner, ticket }, acq);
    }

    /// The client's phase if it still waits for the answer to `attempt` of `owner`'s enqueue.
    fn current(s: &State, c: usize, owner: u8, attempt: u8) -> Option<(bool, bool)> {
        match s.clients[c].0 {
            Phase::Enqueuing {
                owner: o,
                attempt: a,
                ambiguous,
                no_wait,
            } if a == attempt && o == owner => Some((ambiguous, no_wait)),
            _ => None,
        }
    }

    fn land(&self, s: &mut State, i: usize, answered: bool) {
        let msg = s.net.remove(i);
        match msg {
            Msg::Remove { owner } => s.entries.retain(|(o, _)| *o != owner),
            Msg::Enqueue {
                client,
                owner,
                attempt,
                no_wait,
            } => {
                let mine = s.entries.iter().any(|(o, _)| *o == owner);
                let applies = !mine && (!no_wait || s.entries.is_empty());
                if applies {
                    s.n += 1;
                    s.entries.push((owner, s.n));
                    let c = client as usize;
                    if Self::current(s, c, owner, attempt).is_none() {
                        // Nobody waits for this request any more.
                        s.orphan = true;
                    }
                }
                let c = client as usize;
                if !answered {
                    return;
                }
                let Some((ambiguous, _)) = Self::current(s, c, owner, attempt) else {
                    return;
                };
                match s.entries.iter().find(|(o, _)| *o == owner).copied() {
                    Some((_, ticket)) => {
                        if !applies {
                            s.adopted = true;
                        }
                        Self::placed(s, c, owner, ticket, no_wait);
                    }
                    None => {
                        // A no-wait acquire refused: nothing of this attempt was written.
                        if ambiguous {
                            s.net.push(Msg::Remove { owner });
                        }
                        let acq = s.clients[c].1;
                        s.clients[c] = (Phase::Idle, acq + 1);
                    }
                }
            }
            Msg::Ticket {
                client,
                owner,
                attempt,
            } => {
                s.n += 1;
                if answered && Self::current(s, client as usize, owner, attempt).is_some() {
                    s.net.push(Msg::Entry {
                        client,
                        owner,
                        attempt,
                        ticket: s.n,
                    });
                }
            }
            Msg::Entry {
                client,
                owner,
                attempt,
                ticket,
            } => {
                if !s.entries.iter().any(|(o, _)| *o == owner) {
                    s.entries.push((owner, ticket));
                }
                if answered && Self::current(s, client as usize, owner, attempt).is_some() {
                    Self::placed(s, client as usize, owner, ticket, false);
                }
            }
        }
    }
}

impl Model for QueueModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            n: 0,
            entries: Vec::new(),
            clients: vec![(Phase::Idle, 0); self.clients as usize],
            net: Vec::new(),
            losses_left: self.losses,
            last_grant: 0,
            order_broken: false,
            adopted: false,
            orphan: false,
            handoff: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for (c, (phase, acq)) in s.clients.iter().enumerate() {
            let client = c as u8;
            match phase {
                Phase::Idle if *acq < self.acquisitions => {
                    out.push(Action::Start {
                        client,
                        no_wait: false,
                    });
                    if !self.naive {
                        out.push(Action::Start {
                            client,
                            no_wait: true,
                        });
                    }
                }
                Phase::Enqueuing { .. } if s.losses_left > 0 => {
                    out.push(Action::Ambiguous {
                        client,
                        retry: true,
                    });
                    out.push(Action::Ambiguous {
                        client,
                        retry: false,
                    });
                }
                Phase::Waiting { .. } => out.push(Action::Poll { client }),
                Phase::Holding { .. } => out.push(Action::Release { client }),
                _ => {}
            }
        }
        for i in 0..s.net.len() {
            out.push(Action::Land { i, answered: true });
            if s.losses_left > 0 {
                out.push(Action::Land { i, answered: false });
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Start { client, no_wait } => {
                let c = client as usize;
                let owner = owner_of(client, s.clients[c].1);
                s.net.push(if self.naive {
                    Msg::Ticket {
                        client,
                        owner,
                        attempt: 0,
                    }
                } else {
                    Msg::Enqueue {
                        client,
                        owner,
                        attempt: 0,
                        no_wait,
                    }
                });
                s.clients[c].0 = Phase::Enqueuing {
                    owner,
                    attempt: 0,
                    ambiguous: false,
                    no_wait,
                };
            }
            Action::Land { i, answered } => {
                if !answered {
                    s.losses_left -= 1;
                }
                self.land(&mut s, i, answered);
            }
            Action::Ambiguous { client, retry } => {
                let c = client as usize;
                let Phase::Enqueuing {
                    owner,
                    attempt,
                    no_wait,
                    ..
                } = s.clients[c].0
                else {
                    return None;
                };
                s.losses_left -= 1;
                if retry {
                    let attempt = attempt + 1;
                    s.net.push(if self.naive {
                        Msg::Ticket {
                            client,
                            owner,
                            attempt,
                        }
                    } else {
                        Msg::Enqueue {
                            client,
                            owner,
                            attempt,
                            no_wait,
                        }
                    });
                    s.clients[c].0 = Phase::Enqueuing {
                        owner,
                        attempt,
                        ambiguous: true,
                        no_wait,
                    };
                } else {
                    s.net.push(Msg::Remove { owner });
                    s.clients[c] = (Phase::Idle, s.clients[c].1 + 1);
                }
            }
            Action::Poll { client } => {
                let c = client as usize;
                let Phase::Waiting {
                    owner,
                    ticket,
                    no_wait,
                } = s.clients[c].0
                else {
                    return None;
                };
                let acq = s.clients[c].1;
                if !s.entries.iter().any(|(o, _)| *o == owner) {
                    s.clients[c] = (Phase::Idle, acq + 1);
                } else if Self::first(&s).map(|(o, _)| o) == Some(owner) {
                    Self::grant(&mut s, c, owner, ticket);
                } else if no_wait {
                    s.net.push(Msg::Remove { owner });
                    s.clients[c] = (Phase::Idle, acq + 1);
                } else {
                    return None;
                }
            }
            Action::Release { client } => {
                let c = client as usize;
                let Phase::Holding { owner, .. } = s.clients[c].0 else {
                    return None;
                };
                s.net.push(Msg::Remove { owner });
                s.clients[c] = (Phase::Idle, s.clients[c].1 + 1);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_, s: &State| {
                s.clients
                    .iter()
                    .filter(|(p, _)| matches!(p, Phase::Holding { .. }))
                    .count()
                    <= 1
            }),
            Property::always("grants in ticket order", |_, s: &State| !s.order_broken),
            Property::sometimes("an entry adopted after a lost answer", |_, s: &State| {
                s.adopted
            }),
            Property::sometimes(
                "a request landed after its sender moved on",
                |_, s: &State| s.orphan,
            ),
            Property::sometimes("a handoff", |_, s: &State| s.handoff),
        ]
    }
}

#[test]
fn queue_one_request_enqueue() {
    model_support::assert_model_holds(
        "queue (2 clients x 2 acquisitions, 2 losses)",
        QueueModel {
            clients: 2,
            acquisitions: 2,
            losses: 2,
            naive: false,
        },
        false,
    );
}

#[test]
#[ignore = "larger run (13.3M unique states, ~5 min in debug): cargo test --release --test model_queue -- --ignored"]
fn queue_three_clients() {
    model_support::assert_model_holds(
        "queue (3 clients x 2 acquisitions, 2 losses)",
        QueueModel {
            clients: 3,
            acquisitions: 2,
            losses: 2,
            naive: false,
        },
        false,
    );
}

#[test]
fn naive_ticket_then_entry_is_caught() {
    let checker = model_support::check(
        QueueModel {
            clients: 2,
            acquisitions: 1,
            losses: 0,
            naive: true,
        },
        true,
    );
    assert!(
        checker.discovery("at most one holder").is_some(),
        "the naive design's race (ticket taken, entry not yet written) must be found"
    );
}
