//! Applying a transaction's write to an item it holds locked: the user's request merged with the
//! lock's conditions and the before-image, in one write (or a check plus a write); and the fast
//! path's write to an unlocked item.

use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::{Placeholders, Write, WriteKind};
use crate::expr::{Clause, UpdateExpr};
use crate::keys::KeySchema;
use crate::request::{Op, Request};

use super::release::release_write;
use super::{
    APPLIED, IMAGE, IMAGE_REF, LOCK_DATE, LockInfo, MADE, OWNER, PAD, ROLL, TRANSIENT,
    applied_condition, me_condition, new_stamp,
};

impl Placeholders {
    /// A placeholder for a user attribute name (user names are never `_Tx*`).
    pub fn name_for_user(&mut self, attr: &str) -> String {
        let p = format!("#_TxK{}", self.names.len());
        self.names.insert(p.clone(), attr.to_string());
        p
    }
}

/// Where the apply write keeps the before-image.
#[derive(Debug, Clone)]
pub(crate) enum ImagePlace {
    /// In the item itself (`_TxG`).
    Embedded,
    /// In the images table under this id (`_TxI` on the item).
    Table(String),
}

/// Which stage a write of the user's request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Apply before commit, keeping the lock and the before-image.
    Apply,
    /// Apply and release in one write (the one-request commit, and a write rolled forward after a
    /// phased commit).
    Final,
}

/// The writes that apply `req` to an item locked by `me` (one write, plus a condition check on a
/// phantom key when the item is transient and the request has a condition). Empty when the request
/// needs no write at this stage (a delete or read before commit without a condition).
pub(crate) fn request_writes(
    req: &Request,
    lock: &LockInfo,
    schema: &KeySchema,
    me: &TxId,
    stage: Stage,
    image: &ImagePlace,
) -> Vec<Write> {
    let mut ph = Placeholders::default();
    ph.extend_user(req.names.as_ref(), req.values.as_ref());
    let mut cond = vec![me_condition(&mut ph, me), applied_condition(&mut ph, false)];
    let mut out = Vec::new();
    // A condition on an item that does not exist yet is evaluated against a key no item has.
    match (&req.condition, lock.transient) {
        (Some(c), false) => cond.push(format!("({c})")),
        (Some(c), true) => {
            let mut cph = Placeholders::default();
            cph.extend_user(req.names.as_ref(), req.values.as_ref());
            out.push(Write {
                table: req.table.clone(),
                kind: WriteKind::Check {
                    key: schema.phantom_key(),
                },
                condition: Some(c.clone()),
                ph: cph,
            });
        }
        (None, _) => {}
    }
    let keep_lock = stage == Stage::Apply;
    // A write rolled forward after the commit lands only on the lock the commit was decided under:
    // the one carrying `_TxU` (no write that sets it lands after the decision).
    if let (false, Some(i)) = (keep_lock, lock.roll) {
        cond.push(format!(
            "{} = {}",
            ph.name(ROLL),
            ph.value("Roll", AttributeValue::N(i.to_string()))
        ));
    }
    if let (true, Some(stamp)) = (keep_lock, &lock.stamp) {
        cond.push(format!(
            "{} = {}",
            ph.name(LOCK_DATE),
            ph.value("Stamp", AttributeValue::N(stamp.clone()))
        ));
    }
    let image_attrs = |ph: &mut Placeholders, into: &mut Vec<(String, String)>| {
        if lock.transient {
            return;
        }
        match image {
            ImagePlace::Embedded => {
                let img = lock.before.clone().unwrap_or_default();
                into.push((ph.name(IMAGE), ph.value("Img", AttributeValue::M(img))));
            }
            ImagePlace::Table(id) => into.push((
                ph.name(IMAGE_REF),
                ph.value("ImgRef", AttributeValue::S(id.clone())),
            )),
        }
    };
    let write = match req.op {
        Op::Put => {
            let mut item = req.item.clone().unwrap_or_default();
            if keep_lock {
                // The queue the item carries stays with it (it is written only by the unlock).
                item.extend(lock.queue.clone());
                item.insert(OWNER.into(), AttributeValue::S(me.0.clone()));
                item.insert(
                    LOCK_DATE.into(),
                    AttributeValue::N(lock.stamp.clone().unwrap_or_else(new_stamp)),
                );
                item.insert(APPLIED.into(), AttributeValue::S("1".into()));
                if lock.transient {
                    item.insert(TRANSIENT.into(), AttributeValue::Bool(true));
                }
                match image {
                    ImagePlace::Embedded if !lock.transient => {
                        item.insert(
                            IMAGE.into(),
                            AttributeValue::M(lock.before.clone().unwrap_or_default()),
                        );
                    }
                    ImagePlace::Table(id) if !lock.transient => {
                        item.insert(IMAGE_REF.into(), AttributeValue::S(id.clone()));
                    }
                    _ => {}
                }
            }
            Some(WriteKind::Put { item })
        }
        Op::Update => {
            let mut u = match &req.update {
                Some(e) => UpdateExpr::parse(e).expect("validated before recording"),
                None => UpdateExpr::default(),
            };
            // A batched lock's padding has done its work once the write is judged.
            u.add(Clause::Remove, ph.name(PAD));
            if keep_lock {
                let one = ph.value("One", AttributeValue::S("1".into()));
                u.add(Clause::Set, format!("{} = {one}", ph.name(APPLIED)));
                let mut attrs = Vec::new();
                image_attrs(&mut ph, &mut attrs);
                for (n, v) in attrs {
                    u.add(Clause::Set, format!("{n} = {v}"));
                }
            } else {
                for a in [OWNER, LOCK_DATE, TRANSIENT] {
                    u.add(Clause::Remove, ph.name(a));
                }
                if lock.roll.is_some() {
                    u.add(Clause::Remove, ph.name(ROLL));
                }
                if lock.ticket.is_some() {
                    u.add(Clause::Remove, ph.name(super::TICKET));
                }
                if lock.recorded_ticket.is_some() {
                    u.add(Clause::Remove, ph.name(super::RECORDED_TICKET));
                }
                if lock.handed {
                    u.add(Clause::Remove, ph.name(super::HANDED));
                }
            }
            Some(WriteKind::Update {
                key: req.key.clone(),
                update: u.render(),
            })
        }
        Op::Delete if !keep_lock => Some(WriteKind::Delete {
            key: req.key.clone(),
        }),
        // A delete is applied only at the unlock; before commit it is marked (`_TxA = "D"`), so
        // that every write of a committed transaction is marked and an unmarked lock of a committed
        // transaction can only be a read lock or a lock taken late, after the decision.
        Op::Delete => Some(WriteKind::Update {
            key: req.key.clone(),
            update: format!(
                "SET {} = {}",
                ph.name(APPLIED),
                ph.value("Del", AttributeValue::S("D".into()))
            ),
        }),
        Op::Get if !keep_lock => {
            return vec![release_write(
                &req.table,
                &req.key,
                lock.transient,
                false,
                me,
            )];
        }
        _ => None,
    };
    if let Some(kind) = write {
        out.push(Write {
            table: req.table.clone(),
            kind,
            condition: Some(cond.join(" AND ")),
            ph,
        });
    }
    out
}

/// The write that applies `req`, the write of a committed transaction `me`, to an item whose lock
/// still carries `_TxU` (the write was rolled forward past the commit) and releases the item, in
/// one write conditional on that lock. The request's condition was judged before the commit, on
/// the item the lock has held unchanged since; it is checked again on an existing item (where it
/// can only hold again, unless the library misjudged it: then DynamoDB refuses the write and the
/// item stays locked, rather than changed against its condition), not on a placeholder (which
/// stands for an absent item but exists).
pub(crate) fn roll_forward_write(
    req: &Request,
    obs: &super::Observed,
    schema: &KeySchema,
    me: &TxId,
) -> crate::error::Result<Write> {
    let lock = LockInfo::from_observed(obs);
    let req = Request {
        condition: req.condition.clone().filter(|_| !lock.transient),
        ..req.clone()
    };
    let mut ws = request_writes(&req, &lock, schema, me, Stage::Final, &ImagePlace::Embedded);
    match (ws.pop(), ws.is_empty()) {
        (Some(w), true) => Ok(w),
        _ => Err(crate::error::Error::invariant(format!(
            "the write of {me} to roll forward on table {} is not one write",
            req.table
        ))),
    }
}

/// A user's write applied directly, without a lock, conditional on the item not being locked
/// (and on the request's own condition): the write-only fast path.
/// With `mark`, a put or update also sets `_TxM` to that transaction's id (for the change feed).
/// With `queues` (`Settings::wait_in_ticket_order`), also on the item carrying no queue: no
/// entry (`_TxQF`), which the fast path could not respect, and for a put, which replaces every
/// attribute, no queue version either (`_TxQV`, which must never go back).
pub(crate) fn unlocked_write(req: &Request, mark: Option<&TxId>, queues: bool) -> Write {
    let mut ph = Placeholders::default();
    ph.extend_user(req.names.as_ref(), req.values.as_ref());
    let mut cond = format!("attribute_not_exists({})", ph.name(OWNER));
    if queues {
        let q = if req.op == Op::Put {
            super::queue::QUEUE_VERSION
        } else {
            super::queue::QUEUE_FIRST
        };
        cond.push_str(&format!(" AND attribute_not_exists({})", ph.name(q)));
    }
    if let Some(c) = &req.condition {
        cond.push_str(&format!(" AND ({c})"));
    }
    let kind = match req.op {
        Op::Put => WriteKind::Put {
            item: req.item.clone().unwrap_or_default(),
        },
        Op::Update => WriteKind::Update {
            key: req.key.clone(),
            update: req.update.clone().unwrap_or_default(),
        },
        _ => WriteKind::Delete {
            key: req.key.clone(),
        },
    };
    let mut w = Write {
        table: req.table.clone(),
        kind,
        condition: Some(cond),
        ph,
    };
    if let Some(id) = mark
        && (req.op != Op::Update || req.update.is_some())
    {
        mark_made(&mut w, id);
    }
    w
}

/// Marks `w`, a put or an update, with `_TxM = id`, for the change feed: the write of the
/// transaction `id` that commits it (see the `_TxM` attribute). `false`, `w` unchanged: a delete
/// (or a check) leaves no item to mark.
pub(crate) fn mark_made(w: &mut Write, id: &TxId) -> bool {
    match &mut w.kind {
        WriteKind::Put { item } => {
            item.insert(MADE.into(), AttributeValue::S(id.0.clone()));
            true
        }
        WriteKind::Update { update, .. } => {
            let Ok(mut u) = UpdateExpr::parse(update) else {
                return false;
            };
            let v = w.ph.value("Made", AttributeValue::S(id.0.clone()));
            u.add(Clause::Set, format!("{} = {v}", w.ph.name(MADE)));
            *update = u.render();
            true
        }
        WriteKind::Delete { .. } | WriteKind::Check { .. } => false,
    }
}
