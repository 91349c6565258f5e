//! The line behind the oldest waiter's mark (`_TxHL`, docs/PROTOCOL.md "The line behind the
//! mark"): the waiters that found an older live mark keep their places on the item, by ticket,
//! and the lock that takes the item writes the line's next waiter as the new mark in the same
//! write ([`LineStep`]), so that the next holder is marked before the item is free.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use super::head::{HEAD, HeadMark};
use crate::ddb::{Placeholders, Write, Written};
use crate::error::{Item, Result};
use crate::keys::KeySchema;

/// The line behind the mark: the waiters that found an older live mark, by ticket.
pub(crate) const LINE: &str = "_TxHL";

/// The line behind the mark as an item carries it: ticket → expiry (epoch ms, the waiter's
/// clock), and whether the item carries the map at all (a write into it needs it there). An
/// entry is its expiry (`N`), or `{e: expiry, i: id}` (`M`) when its waiter takes the item handed
/// over (`Settings::hand_over`): `ids` holds those waiters' transaction ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Line {
    pub entries: std::collections::BTreeMap<u64, u64>,
    pub exists: bool,
    pub ids: std::collections::BTreeMap<u64, String>,
}

impl Line {
    /// The line `raw` carries (empty, and not there, when it carries none).
    pub(crate) fn of(raw: &Item) -> Line {
        let Some(m) = raw.get(LINE).and_then(|v| v.as_m().ok()) else {
            return Line::default();
        };
        let mut line = Line {
            exists: true,
            ..Line::default()
        };
        for (k, v) in m {
            let Ok(ticket) = k.parse() else { continue };
            let (expiry, id) = match v {
                AttributeValue::N(n) => (n.parse().ok(), None),
                AttributeValue::M(e) => (
                    e.get(super::head::EXPIRY)
                        .and_then(|e| e.as_n().ok()?.parse().ok()),
                    e.get(super::head::ID).and_then(|i| i.as_s().ok()).cloned(),
                ),
                _ => (None, None),
            };
            let Some(expiry) = expiry else { continue };
            line.entries.insert(ticket, expiry);
            if let Some(id) = id {
                line.ids.insert(ticket, id);
            }
        }
        line
    }

    /// The line without the entries of `tickets` (as a write that takes them out leaves it).
    pub(crate) fn without(&self, tickets: &[u64]) -> Line {
        let mut line = self.clone();
        for t in tickets {
            line.entries.remove(t);
            line.ids.remove(t);
        }
        line
    }

    /// The oldest live entry other than `mine`'s, as the mark it becomes when promoted.
    pub(crate) fn next(&self, mine: Option<u64>, now: u64) -> Option<HeadMark> {
        self.entries
            .iter()
            .find(|&(&t, &e)| e >= now && Some(t) != mine)
            .map(|(&t, &e)| HeadMark {
                ticket: t,
                expiry: e,
            })
    }

    /// Live entries older than `mine`.
    pub(crate) fn ahead_of(&self, mine: u64, now: u64) -> usize {
        self.entries
            .iter()
            .filter(|&(&t, &e)| t < mine && e >= now)
            .count()
    }

    /// `mine`'s entry's expiry, if the line holds it.
    pub(crate) fn own(&self, mine: Option<u64>) -> Option<u64> {
        self.entries.get(&mine?).copied()
    }
}

/// What a lock that passes the mark does to the line behind it, decided from the line the
/// locker's last look found (its *view*; a first attempt has none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LineStep {
    /// The view's oldest live entry other than the locker's: the lock makes it the mark and
    /// takes it out of the line (with the locker's own entry), so that the next waiter is
    /// marked before the item is free. None: the lock removes the mark and the whole line
    /// (expired entries with it), so that an item whose contention is over carries neither; an
    /// entry that joined since the view is lost then, and its waiter joins again at its next
    /// look.
    pub promote: Option<HeadMark>,
    /// The locker's own entry (it joined the line), taken out with the promoted one.
    pub own: Option<u64>,
    /// The view holds entries besides the promoted and own ones: the lock takes those two out
    /// of the line and leaves the rest; otherwise it removes the line whole. Either way the
    /// lock is conditional on the line's size agreeing, so that the line never stays as an
    /// empty map (litter on the item, and a value of no type in DynamoDB Local's stream).
    pub rest: bool,
    /// The promoted entry names its waiter (`{t, e, i}`, `Settings::hand_over`): the mark is a
    /// copy of it, so that it names the waiter too.
    pub copy: bool,
    /// The view may be stale (its locker waited in process, sending nothing): a lock that
    /// promotes nobody, which removes the line whole, is held to the line as seen, so that it
    /// drops no entry that joined since ([`LineStep::held_to_view`]). A promotion is held to the
    /// view's size anyway.
    pub seen: Option<SeenLine>,
}

/// The line as a stale view saw it, which a lock that removes it whole is held to: refused when
/// the line changed since, its answer (`ALL_OLD`) is the view to lock from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SeenLine {
    /// Entries seen (0: no line).
    pub size: usize,
    /// The locker's own entry, which may be there unseen (a join whose answer was lost).
    pub unseen_own: Option<u64>,
}

impl LineStep {
    /// The step of a lock by `mine` (its ticket, if any) from the view `line` at `now`;
    /// `joined`: the locker joined the line, so its entry may be there whatever the view shows
    /// (a join whose answer was lost).
    pub(crate) fn from_view(line: &Line, mine: Option<u64>, joined: bool, now: u64) -> LineStep {
        let promote = line.next(mine, now);
        let own = mine.filter(|&m| line.exists && (joined || line.entries.contains_key(&m)));
        let rest = line
            .entries
            .keys()
            .any(|&t| Some(t) != promote.map(|p| p.ticket) && Some(t) != own);
        LineStep {
            promote,
            own,
            rest: promote.is_some() && rest,
            copy: promote.is_some_and(|p| line.ids.contains_key(&p.ticket)),
            seen: None,
        }
    }

    /// The same step, held to the view `line` it was decided from (by `mine`, which `joined`
    /// the line or may have): for a lock whose view may be stale. Waiting in process, a waiter
    /// sends nothing while others join the line; a lock that removed the line whole on that view
    /// would drop them (they would join again only at their next look).
    pub(crate) fn held_to_view(self, line: &Line, mine: Option<u64>, joined: bool) -> LineStep {
        let unseen_own = mine.filter(|m| joined && !line.entries.contains_key(m));
        LineStep {
            seen: Some(SeenLine {
                size: line.entries.len(),
                unseen_own,
            }),
            ..self
        }
    }

    /// Whether the lock taking this step is conditional on the line (it can fail for the line
    /// alone, on a free item): a promotion is, and a step held to its view.
    pub(crate) fn conditional(self) -> bool {
        self.promote.is_some() || self.seen.is_some()
    }

    /// The update's parts and the condition a lock taking this step adds: a `SET` assignment
    /// (the promoted mark), the `REMOVE` paths (the promoted and own entries, the line whole
    /// when nothing else is in it, or the mark and the whole line), and a condition (the
    /// promoted entry still in the line, and the line holding others exactly when the view
    /// did).
    pub(crate) fn parts(
        self,
        ph: &mut Placeholders,
    ) -> (Option<String>, Vec<String>, Option<String>) {
        let h = ph.name(HEAD);
        let l = ph.name(LINE);
        let Some(p) = self.promote else {
            let cond = self.seen.map(|seen| seen.condition(ph, &l));
            return (None, vec![h, l], cond);
        };
        let k = format!("#_TxHLp{}", p.ticket);
        ph.names.insert(k.clone(), p.ticket.to_string());
        let set = if self.copy {
            format!("{h} = {l}.{k}")
        } else {
            format!("{h} = {}", ph.value("Promoted", p.value()))
        };
        let mut removes = vec![format!("{l}.{k}")];
        let cond = format!("attribute_exists({l}.{k})");
        // Entries that stay once the promoted and own ones are out: `size(line)` less one, less
        // one more if the own entry is there (a join whose answer was lost may or may not be).
        let own = self.own.filter(|&o| o != p.ticket).map(|o| {
            let k = format!("#_TxHLo{o}");
            ph.names.insert(k.clone(), o.to_string());
            removes.push(format!("{l}.{k}"));
            k
        });
        let mut n = |label: &str, v: u8| ph.value(label, AttributeValue::N(v.to_string()));
        let size = match (own, self.rest) {
            (None, false) => format!("size({l}) = {}", n("One", 1)),
            (None, true) => format!("size({l}) > {}", n("One", 1)),
            (Some(o), false) => {
                let (one, two) = (n("One", 1), n("Two", 2));
                format!("(size({l}) = {one} OR (size({l}) = {two} AND attribute_exists({l}.{o})))")
            }
            (Some(o), true) => {
                let two = n("Two", 2);
                format!(
                    "(size({l}) > {two} OR (size({l}) = {two} AND attribute_not_exists({l}.{o})))"
                )
            }
        };
        let removes = if self.rest { removes } else { vec![l] };
        (Some(set), removes, Some(format!("{cond} AND {size}")))
    }
}

impl SeenLine {
    /// The condition that the line `l` (its placeholder) is as seen: absent or of the size seen,
    /// or one larger by the locker's own entry where that may be there unseen. Entries are
    /// counted, not named: a line where one entry left and another joined passes (that one joins
    /// again at its next look, as after any lock on a view one look old).
    fn condition(self, ph: &mut Placeholders, l: &str) -> String {
        let as_seen = match self.size {
            0 => format!("attribute_not_exists({l})"),
            n => format!(
                "size({l}) = {}",
                ph.value("Seen", AttributeValue::N(n.to_string()))
            ),
        };
        match self.unseen_own {
            None => as_seen,
            Some(o) => {
                let k = format!("#_TxHLo{o}");
                ph.names.insert(k.clone(), o.to_string());
                let more = ph.value("SeenOwn", AttributeValue::N((self.size + 1).to_string()));
                format!("({as_seen} OR (size({l}) = {more} AND attribute_exists({l}.{k})))")
            }
        }
    }
}

/// Puts `me`'s entry (ticket `mine`, expiring at `expiry`) in the line behind the mark of
/// `table`/`key`: into the line if the item carries one (`exists`), else as a new line. Conditional
/// on the item existing and `me` not holding it. `takes_handover`: the entry names `me`, whom
/// a holder may hand the item over to (`Settings::hand_over`). True when it landed.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn join_line(
    client: &Client,
    table: &str,
    key: &Item,
    schema: &KeySchema,
    me: &crate::TxId,
    mine: u64,
    expiry: u64,
    exists: bool,
    takes_handover: bool,
) -> Result<bool> {
    let mut ph = Placeholders::default();
    let hk = ph.name_for_user(&schema.hash.0);
    let owner = ph.name(super::OWNER);
    let e = entry_value(mine, expiry, takes_handover.then_some(me));
    let me = ph.value("Me", AttributeValue::S(me.0.clone()));
    let l = ph.name(LINE);
    let (update, there) = if exists {
        ph.names.insert("#_TxHLm".into(), mine.to_string());
        (
            format!("SET {l}.#_TxHLm = {}", ph.value("Entry", e)),
            format!("attribute_exists({l})"),
        )
    } else {
        let m = AttributeValue::M([(mine.to_string(), e)].into());
        (
            format!("SET {l} = {}", ph.value("Line", m)),
            format!("attribute_not_exists({l})"),
        )
    };
    let cond = format!(
        "attribute_exists({hk}) AND (attribute_not_exists({owner}) OR {owner} <> {me}) AND {there}"
    );
    let w = Write::update(table, key.clone(), update, cond, ph);
    Ok(matches!(w.send(client, None).await?, Written::Ok(_)))
}

/// An entry of `ticket` in the line as an item carries it: its expiry, or, when it names its
/// waiter (`id`), whom a holder may hand the item over to, the mark it becomes when promoted
/// (`{t, e, i}`), which the promotion copies.
pub(crate) fn entry_value(ticket: u64, expiry: u64, id: Option<&crate::TxId>) -> AttributeValue {
    match id {
        None => AttributeValue::N(expiry.to_string()),
        Some(id) => HeadMark { ticket, expiry }.value_naming(Some(id)),
    }
}

/// Takes ticket `mine`'s entry out of the line of `table`/`key`, if the line holds it. True when
/// it was there. The last entry takes the line with it (conditional on the line being just that
/// entry), so that no empty map stays on the item; an empty line found on the way goes too.
pub(crate) async fn leave_line(
    client: &Client,
    table: &str,
    key: &Item,
    mine: u64,
) -> Result<bool> {
    let entry = mine.to_string();
    // Each failed attempt answers with the line as it was: only a line that changed between
    // two attempts sends a third. A line that keeps changing is left to its next lock or sweep.
    for _ in 0..4 {
        let mut ph = Placeholders::default();
        let l = ph.name(LINE);
        ph.names.insert("#_TxHLm".into(), entry.clone());
        let one = ph.value("One", AttributeValue::N("1".into()));
        let w = Write::update(
            table,
            key.clone(),
            format!("REMOVE {l}.#_TxHLm"),
            format!("attribute_exists({l}.#_TxHLm) AND size({l}) > {one}"),
            ph,
        );
        let found = match w.send(client, None).await? {
            Written::Ok(_) => return Ok(true),
            Written::ConditionFailed(found) => found,
        };
        // The line as it is: gone, holding others but not `mine`, or just `mine` (or nothing).
        let Some(seen) = found.as_ref().and_then(|f| f.get(LINE)) else {
            return Ok(false);
        };
        let Ok(m) = seen.as_m() else {
            return Ok(false);
        };
        let was_there = m.contains_key(&entry);
        if m.len() > usize::from(was_there) {
            return Ok(false);
        }
        if take_off_line(client, table, key, seen, &[], true).await? {
            return Ok(was_there);
        }
    }
    Ok(false)
}

/// Takes the stale entries (`stale`) out of the line `seen` of `table`/`key`, conditional on
/// the line being exactly as read: the whole line when every entry is stale (or none is left).
/// True when it landed.
pub(crate) async fn take_off_line(
    client: &Client,
    table: &str,
    key: &Item,
    seen: &AttributeValue,
    stale: &[u64],
    whole: bool,
) -> Result<bool> {
    let mut ph = Placeholders::default();
    let l = ph.name(LINE);
    let cond = format!("{l} = {}", ph.value("Seen", seen.clone()));
    let update = if whole {
        format!("REMOVE {l}")
    } else {
        let paths: Vec<String> = stale
            .iter()
            .map(|t| {
                let k = format!("#_TxHLs{t}");
                ph.names.insert(k.clone(), t.to_string());
                format!("{l}.{k}")
            })
            .collect();
        format!("REMOVE {}", paths.join(", "))
    };
    let w = Write::update(table, key.clone(), update, cond, ph);
    Ok(matches!(w.send(client, None).await?, Written::Ok(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_of(entries: &[(u64, u64)]) -> Line {
        Line {
            entries: entries.iter().copied().collect(),
            exists: true,
            ids: Default::default(),
        }
    }

    #[test]
    fn a_line_reads_from_the_item_and_names_its_next_waiter() {
        let mut raw = Item::new();
        assert_eq!(Line::of(&raw), Line::default());
        raw.insert(
            LINE.into(),
            AttributeValue::M(
                [
                    ("7".to_string(), AttributeValue::N("100".into())),
                    ("3".to_string(), AttributeValue::N("50".into())),
                    ("x".to_string(), AttributeValue::N("1".into())),
                ]
                .into(),
            ),
        );
        let line = Line::of(&raw);
        assert_eq!(
            line,
            line_of(&[(3, 50), (7, 100)]),
            "unreadable entries left out"
        );
        // The oldest live entry other than the caller's.
        let next = |mine, now| line.next(mine, now).map(|h| h.ticket);
        assert_eq!(next(None, 0), Some(3));
        assert_eq!(next(Some(3), 0), Some(7));
        assert_eq!(next(None, 60), Some(7), "3 expired");
        assert_eq!(next(None, 101), None);
        assert_eq!(line.ahead_of(7, 0), 1);
        assert_eq!(line.ahead_of(7, 60), 0);
        assert_eq!(line.own(Some(7)), Some(100));
        assert_eq!(line.own(Some(8)), None);
    }

    #[test]
    fn a_lock_promotes_the_next_waiter_and_takes_out_its_own_entry() {
        let step = |line: &Line, mine, joined| LineStep::from_view(line, mine, joined, 10);
        // No view (a first attempt): the mark and the whole line go.
        assert_eq!(step(&Line::default(), Some(5), false), LineStep::default());
        // The next waiter promoted, the locker's entry taken out.
        let s = step(&line_of(&[(5, 100), (9, 100), (12, 100)]), Some(5), true);
        assert_eq!(s.promote.map(|h| (h.ticket, h.expiry)), Some((9, 100)));
        assert_eq!(s.own, Some(5));
        assert!(s.rest, "12 stays in the line");
        assert!(s.conditional());
        // Nobody else: the line goes whole with the promotion.
        assert!(!step(&line_of(&[(5, 100), (9, 100)]), Some(5), true).rest);
        assert!(!step(&line_of(&[(9, 100)]), Some(5), true).rest);
        // An expired entry stays (a later lock or a sweep takes it out).
        assert!(step(&line_of(&[(3, 5), (9, 100)]), Some(5), false).rest);
        // Only expired others: nobody to promote, the line goes.
        let s = step(&line_of(&[(9, 5), (14, 5)]), Some(5), false);
        assert_eq!((s.promote, s.own), (None, None));
        assert!(!s.conditional());
        // A joined locker's entry is taken out where the line is, whatever the view shows.
        let s = step(&line_of(&[(9, 100), (12, 100)]), Some(5), true);
        assert_eq!(s.own, Some(5));
        assert_eq!(step(&Line::default(), Some(5), true).own, None);
    }

    #[test]
    fn a_steps_expression_sets_the_promoted_mark_and_removes_the_rest() {
        let parts = |s: LineStep| {
            let mut ph = Placeholders::default();
            s.parts(&mut ph)
        };
        let mark = |t| HeadMark {
            ticket: t,
            expiry: 100,
        };
        assert_eq!(
            parts(LineStep::default()),
            (None, vec!["#_TxH".into(), "#_TxHL".into()], None)
        );
        let (set, removes, cond) = parts(LineStep {
            promote: Some(mark(9)),
            own: Some(5),
            rest: true,
            copy: false,
            seen: None,
        });
        assert_eq!(set.as_deref(), Some("#_TxH = :_TxPromoted"));
        assert_eq!(
            removes,
            vec!["#_TxHL.#_TxHLp9".to_string(), "#_TxHL.#_TxHLo5".into()]
        );
        assert_eq!(
            cond.as_deref(),
            Some(
                "attribute_exists(#_TxHL.#_TxHLp9) AND (size(#_TxHL) > :_TxTwo OR \
                 (size(#_TxHL) = :_TxTwo AND attribute_not_exists(#_TxHL.#_TxHLo5)))"
            )
        );
        // Nobody else in the line: it goes whole, if it holds no more than the two.
        let (_, removes, cond) = parts(LineStep {
            promote: Some(mark(9)),
            own: Some(5),
            rest: false,
            copy: false,
            seen: None,
        });
        assert_eq!(removes, vec!["#_TxHL".to_string()]);
        assert_eq!(
            cond.as_deref(),
            Some(
                "attribute_exists(#_TxHL.#_TxHLp9) AND (size(#_TxHL) = :_TxOne OR \
                 (size(#_TxHL) = :_TxTwo AND attribute_exists(#_TxHL.#_TxHLo5)))"
            )
        );
        let (_, removes, cond) = parts(LineStep {
            promote: Some(mark(9)),
            own: None,
            rest: true,
            copy: false,
            seen: None,
        });
        assert_eq!(removes, vec!["#_TxHL.#_TxHLp9".to_string()]);
        assert_eq!(
            cond.as_deref(),
            Some("attribute_exists(#_TxHL.#_TxHLp9) AND size(#_TxHL) > :_TxOne")
        );
        let (_, removes, cond) = parts(LineStep {
            promote: Some(mark(9)),
            own: None,
            rest: false,
            copy: false,
            seen: None,
        });
        assert_eq!(removes, vec!["#_TxHL".to_string()]);
        assert_eq!(
            cond.as_deref(),
            Some("attribute_exists(#_TxHL.#_TxHLp9) AND size(#_TxHL) = :_TxOne")
        );
        let step = |line: &Line, mine, joined| LineStep::from_view(line, mine, joined, 10);
        // Held to a stale view: no line, or its size, or one more by the locker's own entry
        // where that may be there unseen; the line still goes whole.
        let held = |line: &Line, joined| {
            let s = step(line, Some(5), joined).held_to_view(line, Some(5), joined);
            assert!(s.conditional());
            parts(s)
        };
        assert_eq!(
            held(&Line::default(), false),
            (
                None,
                vec!["#_TxH".into(), "#_TxHL".into()],
                Some("attribute_not_exists(#_TxHL)".into())
            )
        );
        assert_eq!(
            held(&line_of(&[(5, 100), (9, 5)]), true).2.as_deref(),
            Some("size(#_TxHL) = :_TxSeen")
        );
        assert_eq!(
            held(&line_of(&[(9, 5)]), true).2.as_deref(),
            Some(
                "(size(#_TxHL) = :_TxSeen OR (size(#_TxHL) = :_TxSeenOwn AND \
                 attribute_exists(#_TxHL.#_TxHLo5)))"
            )
        );
        // A promotion is held to the view's size already: its condition is unchanged.
        let view = line_of(&[(9, 100)]);
        let promoting = step(&view, Some(5), false);
        assert_eq!(
            parts(promoting.held_to_view(&view, Some(5), false)),
            parts(promoting)
        );
        // An entry that names its waiter is copied whole into the mark.
        let (set, _, _) = parts(LineStep {
            promote: Some(mark(9)),
            own: None,
            rest: false,
            copy: true,
            seen: None,
        });
        assert_eq!(set.as_deref(), Some("#_TxH = #_TxHL.#_TxHLp9"));
    }
}
