//! Handing an item over (`Settings::hand_over`, docs/PROTOCOL.md "Handing the item over"): a
//! transaction that commits with one write on the one item it locked without a record
//! (`Settings::record_on_demand`) writes, in that same write, the lock of the item's oldest live
//! waiter, when that waiter named itself in its mark or its entry in the line behind it. The item
//! is then never free between the two holders, and the waiter learns at its next look (which
//! finds the item locked by itself) that it holds it.
//!
//! The lock written is the one the waiter would have taken itself without a record: `_TxId` (its
//! id), a fresh `_TxD` stamp, and `_TxK` (its ticket), with `_TxHO`, which tells the item's next
//! waiters that they are in a chain of handovers (they watch for the next one). The write is
//! conditional on the waiter's place still being there and live (its mark, with its ticket, or
//! its entry, behind no older live mark), so it only ever hands the item to a waiter that has
//! not left. A waiter that leaves without the lock releases a lock handed to it (it looks once
//! more when its own removals cannot tell); one that crashes leaves a lock without record, which
//! whoever meets it releases after `Settings::wound_grace`, as any.

use aws_sdk_dynamodb::types::AttributeValue;

use super::head::{self, HeadMark};
use super::line::{LINE, Line, LineStep};
use super::{LOCK_DATE, OWNER, TICKET};
use crate::ddb::{Write, WriteKind};
use crate::error::Item;
use crate::expr::{Clause, UpdateExpr};

/// The waiters an item carries, as a holder knows them: the oldest waiter's mark (with its
/// waiter's id, when known) and the line behind it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Waiters {
    pub mark: Option<HeadMark>,
    pub mark_id: Option<String>,
    pub line: Line,
}

/// Whom a holder hands the item over to, how the write finds the waiter's place, and who is
/// marked next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The waiter's ticket (its mark's, or its entry's key).
    pub ticket: u64,
    /// The waiter's transaction id.
    pub id: String,
    /// The waiter is the marked one; otherwise the line's oldest live entry, with no live mark.
    pub marked: bool,
    /// The line holds the waiter's entry, as the holder knows it: the write takes it out.
    pub in_line: bool,
    /// The line's next live waiter after this one, which the write makes the mark (taking its
    /// entry out of the line), so that the next holder is marked before the item is handed
    /// over again; and whether its entry names it (the mark is then a copy of the entry).
    pub promote: Option<(HeadMark, bool)>,
    /// The line holds entries besides the ones the write takes out, as the holder knows it:
    /// the write takes out only those (conditional on the line keeping others); otherwise it
    /// removes the line whole.
    pub others: bool,
}

impl Waiters {
    /// The waiters `raw` carries.
    pub(crate) fn of(raw: &Item) -> Waiters {
        let line = Line::of(raw);
        let mark = HeadMark::of(raw);
        let mark_id =
            HeadMark::id_of(raw).or_else(|| mark.and_then(|m| line.ids.get(&m.ticket).cloned()));
        Waiters {
            mark,
            mark_id,
            line,
        }
    }

    /// The waiters the item carries after a lock that passed its mark with `step`, the item
    /// having been `raw`: the promoted waiter marked (with the id its entry carried) and the
    /// line without the entries the lock took out.
    pub(crate) fn after_step(raw: &Item, step: LineStep) -> Waiters {
        let line = Line::of(raw);
        let Some(promoted) = step.promote else {
            return Waiters::default();
        };
        let mark_id = line.ids.get(&promoted.ticket).cloned();
        let line = if step.rest {
            let gone: Vec<u64> = [Some(promoted.ticket), step.own]
                .into_iter()
                .flatten()
                .collect();
            line.without(&gone)
        } else {
            Line::default()
        };
        Waiters {
            mark: Some(promoted),
            mark_id,
            line,
        }
    }

    /// The waiter the item goes to at `now`: the marked waiter while its mark lives, if it
    /// named itself; with no live mark, the line's oldest live entry, if it did. None when the
    /// oldest live waiter takes no handover (or there is none): the item is released, and its
    /// waiters take it by their looks.
    pub(crate) fn target(&self, now: u64) -> Option<Target> {
        let (ticket, id, marked) = match self.mark {
            Some(m) if m.live(now) => (m.ticket, self.mark_id.clone()?, true),
            _ => {
                let next = self.line.next(None, now)?;
                (next.ticket, self.line.ids.get(&next.ticket)?.clone(), false)
            }
        };
        let promote =
            (self.line.next(Some(ticket), now)).map(|p| (p, self.line.ids.contains_key(&p.ticket)));
        let in_line = self.line.entries.contains_key(&ticket);
        let taken = |t: u64| t == ticket || promote.is_some_and(|(p, _)| p.ticket == t);
        Some(Target {
            ticket,
            id,
            marked,
            in_line,
            promote,
            others: self.line.entries.keys().any(|&t| !taken(t)),
        })
    }
}

/// `w`, the write that applies a transaction's update to an item it holds and unlocks it, made
/// to hand the item over to `target` at `now` instead of unlocking it: it writes the target's
/// lock (`_TxId`, a fresh `_TxD`, `_TxK`), removes the mark and the target's entry, and is also
/// conditional on the target's place being there and live. None when `w` cannot carry it (a put
/// or a delete, which cannot keep attributes of the item as it is).
pub(crate) fn hand_over(w: &Write, target: &Target, now: u64) -> Option<Write> {
    let mut w = w.clone();
    let WriteKind::Update { update, .. } = &mut w.kind else {
        return None;
    };
    let mut u = UpdateExpr::parse(update).ok()?;
    let ph = &mut w.ph;
    let (owner, date, ticket) = (ph.name(OWNER), ph.name(LOCK_DATE), ph.name(TICKET));
    let handed = ph.name(super::HANDED);
    for a in [&owner, &date, &ticket, &handed] {
        u.drop_action(Clause::Remove, a);
    }
    let to = ph.value("HandTo", AttributeValue::S(target.id.clone()));
    let stamp = ph.value("HandStamp", AttributeValue::N(super::new_stamp()));
    let t = ph.value("HandTicket", AttributeValue::N(target.ticket.to_string()));
    u.add(Clause::Set, format!("{owner} = {to}"));
    u.add(Clause::Set, format!("{date} = {stamp}"));
    u.add(Clause::Set, format!("{ticket} = {t}"));
    let yes = ph.value("HandHanded", AttributeValue::Bool(true));
    u.add(Clause::Set, format!("{handed} = {yes}"));
    let (h, mark_ticket, mark_expiry) = head::names(ph);
    let live = ph.value("HandNow", AttributeValue::N(now.to_string()));
    let l = ph.name(LINE);
    let entry = format!("{l}.#_TxHLh");
    ph.names.insert("#_TxHLh".into(), target.ticket.to_string());
    let mut cond = vec![if target.marked {
        format!("{mark_ticket} = {t} AND {mark_expiry} >= {live}")
    } else {
        format!(
            "attribute_exists({entry}) AND {entry}.#_TxHe >= {live} AND {}",
            head::lock_condition(ph, Some(target.ticket), now)
        )
    }];
    // Entries the write takes out of the line: the waiter's, and the one promoted to the mark.
    let mut taken = Vec::new();
    if target.in_line {
        taken.push(entry.clone());
    }
    match target.promote {
        Some((p, copy)) => {
            let promoted = format!("{l}.#_TxHLp");
            ph.names.insert("#_TxHLp".into(), p.ticket.to_string());
            let mark = if copy {
                promoted.clone()
            } else {
                ph.value("HandPromoted", p.value())
            };
            u.add(Clause::Set, format!("{h} = {mark}"));
            cond.push(format!("attribute_exists({promoted})"));
            taken.push(promoted);
        }
        None => u.add(Clause::Remove, h),
    }
    if target.others {
        let n = ph.value("HandTaken", AttributeValue::N(taken.len().to_string()));
        if !taken.is_empty() {
            cond.push(format!("size({l}) > {n}"));
        }
        for e in taken {
            u.add(Clause::Remove, e);
        }
    } else if !taken.is_empty() {
        u.add(Clause::Remove, l);
    }
    *update = u.render();
    w.and_condition(cond.join(" AND "));
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(entries: &[(u64, u64, Option<&str>)]) -> Line {
        Line {
            entries: entries.iter().map(|&(t, e, _)| (t, e)).collect(),
            exists: true,
            ids: entries
                .iter()
                .filter_map(|&(t, _, i)| Some((t, i?.to_string())))
                .collect(),
        }
    }

    fn mark(ticket: u64, expiry: u64) -> Option<HeadMark> {
        Some(HeadMark { ticket, expiry })
    }

    #[test]
    fn the_item_goes_to_the_marked_waiter_or_with_no_live_mark_to_the_next_in_line() {
        let w = Waiters {
            mark: mark(3, 100),
            mark_id: Some("a".into()),
            line: line(&[(5, 100, Some("b")), (7, 100, Some("c"))]),
        };
        let t = w.target(50).unwrap();
        assert_eq!((t.ticket, t.id.as_str(), t.marked), (3, "a", true));
        assert!(!t.in_line && t.others);
        assert_eq!(t.promote.map(|(p, _)| p.ticket), Some(5));
        // The mark expired: the next live entry, which named itself.
        let t = w.target(101);
        assert_eq!(t, None, "every entry expired too");
        let w = Waiters {
            mark: mark(3, 10),
            ..w
        };
        let t = w.target(50).unwrap();
        assert_eq!((t.ticket, t.id.as_str(), t.marked), (5, "b", false));
        assert!(t.in_line && !t.others, "7 is promoted");
    }

    #[test]
    fn a_waiter_that_named_no_id_gets_no_handover_and_nobody_skips_it() {
        let w = Waiters {
            mark: mark(3, 100),
            mark_id: None,
            line: line(&[(5, 100, Some("b"))]),
        };
        assert_eq!(w.target(50), None, "the marked waiter takes none");
        let w = Waiters {
            mark: None,
            mark_id: None,
            line: line(&[(4, 100, None), (5, 100, Some("b"))]),
        };
        assert_eq!(w.target(50), None, "the next in line takes none");
        assert_eq!(Waiters::default().target(0), None);
    }

    #[test]
    fn after_a_lock_the_promoted_waiter_is_the_mark_with_the_id_its_entry_carried() {
        let mut raw = Item::new();
        raw.insert(
            LINE.into(),
            AttributeValue::M(
                [
                    (
                        "5".to_string(),
                        super::super::line::entry_value(5, 100, Some(&"b".into())),
                    ),
                    ("7".to_string(), AttributeValue::N("100".into())),
                    ("9".to_string(), AttributeValue::N("100".into())),
                ]
                .into(),
            ),
        );
        let step = LineStep::from_view(&Line::of(&raw), Some(9), true, 50);
        let after = Waiters::after_step(&raw, step);
        assert_eq!(after.mark.map(|m| m.ticket), Some(5));
        assert_eq!(after.mark_id.as_deref(), Some("b"));
        assert_eq!(
            after.line.entries.keys().copied().collect::<Vec<_>>(),
            vec![7]
        );
        assert_eq!(
            Waiters::after_step(&raw, LineStep::default()),
            Waiters::default()
        );
    }

    #[test]
    fn the_handover_writes_the_waiters_lock_instead_of_removing_ours() {
        let mut ph = crate::ddb::Placeholders::default();
        let update = format!(
            "SET n = :v REMOVE {}, {}, {}, {}",
            ph.name("_TxP"),
            ph.name(OWNER),
            ph.name(LOCK_DATE),
            ph.name(TICKET)
        );
        ph.values.insert(":v".into(), AttributeValue::N("1".into()));
        let w = Write::update("t", Item::new(), update, "#_TxId = :_TxMe".into(), ph);
        let render = |target: &Target| {
            let h = hand_over(&w, target, 50).unwrap();
            let WriteKind::Update { update, .. } = &h.kind else {
                panic!()
            };
            (
                update.clone(),
                h.condition.clone().unwrap(),
                h.ph.names.clone(),
            )
        };
        // The next in line, with nobody to promote after it and others in the line.
        let target = Target {
            ticket: 5,
            id: "b".into(),
            marked: false,
            in_line: true,
            promote: None,
            others: true,
        };
        let (update, cond, names) = render(&target);
        assert_eq!(
            update,
            "SET n = :v, #_TxId = :_TxHandTo, #_TxD = :_TxHandStamp, #_TxK = :_TxHandTicket, \
             #_TxHO = :_TxHandHanded REMOVE #_TxP, #_TxH, #_TxHL.#_TxHLh"
        );
        assert!(
            cond.starts_with("(#_TxId = :_TxMe) AND attribute_exists(#_TxHL.#_TxHLh)"),
            "{cond}"
        );
        assert!(cond.ends_with("size(#_TxHL) > :_TxHandTaken"), "{cond}");
        assert_eq!(names["#_TxHLh"], "5");
        // The marked waiter, the line's next promoted (a copy of its entry), nobody else: the
        // line goes whole.
        let target = Target {
            marked: true,
            in_line: false,
            promote: Some((
                HeadMark {
                    ticket: 7,
                    expiry: 100,
                },
                true,
            )),
            others: false,
            ..target
        };
        let (update, cond, names) = render(&target);
        assert!(
            update.ends_with("#_TxH = #_TxHL.#_TxHLp REMOVE #_TxP, #_TxHL"),
            "{update}"
        );
        assert!(
            cond.ends_with(
                "#_TxH.#_TxHt = :_TxHandTicket AND #_TxH.#_TxHe >= :_TxHandNow \
                 AND attribute_exists(#_TxHL.#_TxHLp)"
            ),
            "{cond}"
        );
        assert_eq!(names["#_TxHLp"], "7");
        // With others behind: only the promoted entry goes.
        let (update, cond, _) = render(&Target {
            others: true,
            ..target.clone()
        });
        assert!(update.ends_with("REMOVE #_TxP, #_TxHL.#_TxHLp"), "{update}");
        assert!(cond.ends_with("size(#_TxHL) > :_TxHandTaken"), "{cond}");
        // A put cannot carry it.
        let put = Write {
            kind: WriteKind::Put { item: Item::new() },
            ..w.clone()
        };
        assert!(hand_over(&put, &target, 50).is_none());
    }

    #[test]
    fn the_next_after_the_target_is_promoted() {
        let w = Waiters {
            mark: mark(3, 100),
            mark_id: Some("a".into()),
            line: line(&[(5, 100, Some("b")), (6, 10, None), (7, 100, None)]),
        };
        let t = w.target(50).unwrap();
        assert_eq!(t.promote.map(|(p, copy)| (p.ticket, copy)), Some((5, true)));
        assert!(t.others, "7 stays, and the expired 6");
        let w = Waiters { mark: None, ..w };
        let t = w.target(50).unwrap();
        assert_eq!((t.ticket, t.in_line), (5, true));
        assert_eq!(
            t.promote.map(|(p, copy)| (p.ticket, copy)),
            Some((7, false))
        );
        assert!(t.others, "the expired 6");
    }
}
