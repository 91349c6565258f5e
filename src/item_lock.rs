//! Item locks: the attributes the protocol keeps on user items, and every write that takes, applies,
//! releases or undoes a lock.
//!
//! On a locked item:
//! - `_TxId` (S): the owning transaction.
//! - `_TxD` (N): when it was locked (epoch ms; informational).
//! - `_TxT` (BOOL true): the item did not exist and was inserted only to hold the lock (transient).
//! - `_TxA` (S `"1"`): the transaction's write has been applied (set in the same write as the change).
//! - `_TxG` (M): the item's before-image, written in the same write that applies the change, so an
//!   applied item always carries what rollback needs.
//! - `_TxI` (S): instead of `_TxG`, the id of the before-image in the images table (items too large to
//!   carry their own image).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use crate::TxId;
use crate::ddb::{Placeholders, Write, WriteKind, Written};
use crate::error::{Error, Item, Result};
use crate::expr::{Clause, UpdateExpr};
use crate::keys::KeySchema;
use crate::request::{Op, Request};

pub(crate) const OWNER: &str = "_TxId";
pub(crate) const LOCK_DATE: &str = "_TxD";
pub(crate) const TRANSIENT: &str = "_TxT";
pub(crate) const APPLIED: &str = "_TxA";
pub(crate) const IMAGE: &str = "_TxG";
pub(crate) const IMAGE_REF: &str = "_TxI";

/// Lock attributes removed when an item is released.
const LOCK_ATTRS: [&str; 6] = [OWNER, LOCK_DATE, TRANSIENT, APPLIED, IMAGE, IMAGE_REF];

/// Removes every `_Tx*` attribute: what callers may see.
pub(crate) fn strip(mut item: Item) -> Item {
    item.retain(|k, _| !k.starts_with(crate::expr::RESERVED_PREFIX));
    item
}

/// What an item's raw attributes say about its lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    pub exists: bool,
    pub owner: Option<String>,
    pub transient: bool,
    pub applied: bool,
    /// The applied write is a delete (`_TxA = "D"`): the item is unchanged until the unlock deletes
    /// it.
    pub applied_delete: bool,
    /// The embedded before-image.
    pub image: Option<Item>,
    /// The images-table id of the before-image.
    pub image_ref: Option<String>,
    /// The item without lock attributes (empty for a placeholder).
    pub user: Item,
    /// `_TxD`: the lock's stamp (lock time in ms plus a random fraction), different for every lock
    /// taken on the item.
    pub stamp: Option<String>,
}

impl Observed {
    pub fn of(raw: Option<&Item>) -> Observed {
        let Some(raw) = raw else {
            return Observed::default();
        };
        Observed {
            exists: true,
            owner: raw.get(OWNER).and_then(|v| v.as_s().ok()).cloned(),
            transient: matches!(raw.get(TRANSIENT), Some(AttributeValue::Bool(true))),
            applied: raw.contains_key(APPLIED),
            applied_delete: raw
                .get(APPLIED)
                .and_then(|v| v.as_s().ok())
                .is_some_and(|s| s == "D"),
            image: raw.get(IMAGE).and_then(|v| v.as_m().ok()).cloned(),
            image_ref: raw.get(IMAGE_REF).and_then(|v| v.as_s().ok()).cloned(),
            user: strip(raw.clone()),
            stamp: raw.get(LOCK_DATE).and_then(|v| v.as_n().ok()).cloned(),
        }
    }

    pub fn locked_by(&self, id: &TxId) -> bool {
        self.owner.as_deref() == Some(id.as_str())
    }

    /// The item still carries `lock`, the lock `me` took: locked by `me` and applied already, or
    /// under the same stamp. Another stamp is a lock of `me` re-taken late by another handle after
    /// a decision released ours.
    pub fn holds(&self, me: &TxId, lock: &LockInfo) -> bool {
        // Stamps are numbers: DynamoDB answers with its canonical text, not the text written.
        let same_stamp = match (&self.stamp, &lock.stamp) {
            (_, None) => true,
            (Some(found), Some(ours)) => crate::keys::same_number(found, ours),
            (None, Some(_)) => false,
        };
        self.locked_by(me) && (self.applied || same_stamp)
    }

    /// The item as committed state shows it, ignoring any lock: `None` when it does not exist
    /// (absent, or a placeholder that holds a lock on an absent item — also once a delete of it is
    /// marked: a marked delete changes nothing, so the placeholder still holds no item).
    pub fn visible(&self) -> Option<Item> {
        let holds_item = !self.transient || (self.applied && !self.applied_delete);
        (self.exists && holds_item).then(|| self.user.clone())
    }
}

/// What a coordinator knows about an item it holds locked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LockInfo {
    /// The item did not exist before the lock.
    pub transient: bool,
    /// The transaction's write has been applied.
    pub applied: bool,
    /// The item before the transaction (`None`: it did not exist).
    pub before: Option<Item>,
    /// The item now, without lock attributes (`None`: it does not exist or is a placeholder).
    pub current: Option<Item>,
    /// Where the before-image lives when it is in the images table.
    pub image_ref: Option<String>,
    /// The lock's `_TxD` stamp. Applies are conditional on it, so that a write can only land on
    /// the lock it was prepared under: another handle of the same transaction may re-lock the
    /// item after a decision released it (a late lock), and an apply must not land on that.
    pub stamp: Option<String>,
}

/// Test seam, set only through `fault::zero_ended_lock_stamps`: every new stamp's random
/// fraction ends in 0 (about one stamp in ten does in production).
pub(crate) static ZERO_ENDED_STAMPS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A stamp for a new lock: the time in ms with a random fraction, unique per lock in practice.
/// Written in DynamoDB's canonical form (no trailing zeros), the text DynamoDB answers with.
fn new_stamp() -> String {
    let mut fraction = rand::random_range(0..1_000_000u32);
    if ZERO_ENDED_STAMPS.load(std::sync::atomic::Ordering::Relaxed) {
        fraction -= fraction % 10;
    }
    let stamp = format!("{}.{:06}", crate::ddb::now_millis(), fraction);
    crate::keys::canonical_number(&stamp).unwrap_or(stamp)
}

impl LockInfo {
    /// From an item observed locked by us.
    pub fn from_observed(obs: &Observed) -> LockInfo {
        let before = if obs.transient {
            None
        } else if obs.applied {
            obs.image.clone()
        } else {
            Some(obs.user.clone())
        };
        LockInfo {
            transient: obs.transient,
            applied: obs.applied,
            before,
            current: obs.visible(),
            image_ref: obs.image_ref.clone(),
            stamp: obs.stamp.clone(),
        }
    }
}

/// Outcome of a lock attempt.
#[derive(Debug)]
pub(crate) enum LockOutcome {
    Locked(LockInfo),
    /// Another transaction holds it.
    Held {
        owner: TxId,
    },
}

fn me_condition(ph: &mut Placeholders, me: &TxId) -> String {
    format!(
        "{} = {}",
        ph.name(OWNER),
        ph.value("Me", AttributeValue::S(me.0.clone()))
    )
}

fn applied_condition(ph: &mut Placeholders, applied: bool) -> String {
    let a = ph.name(APPLIED);
    if applied {
        format!("attribute_exists({a})")
    } else {
        format!("attribute_not_exists({a})")
    }
}

/// Locks an item for `me`. An existing item is locked with one UpdateItem (conditional on it
/// existing and being unlocked) that returns its previous state; an absent item is then inserted as a
/// transient placeholder with a second UpdateItem conditional on it still being absent (Java's
/// library skipped that condition and could mark an existing item transient, then delete it).
pub(crate) async fn lock(
    client: &Client,
    table: &str,
    key: &Item,
    schema: &KeySchema,
    me: &TxId,
) -> Result<LockOutcome> {
    for _ in 0..4 {
        if let Some(out) = lock_write(client, table, key, schema, me, false).await? {
            return Ok(out);
        }
        // Absent: insert a placeholder.
        match lock_write(client, table, key, schema, me, true).await? {
            Some(out) => return Ok(out),
            None => continue, // created by someone in between: lock it as existing
        }
    }
    Ok(LockOutcome::Held {
        owner: TxId(String::new()),
    })
}

/// One lock attempt. `None`: the item's existence was not what the attempt assumed.
async fn lock_write(
    client: &Client,
    table: &str,
    key: &Item,
    schema: &KeySchema,
    me: &TxId,
    absent: bool,
) -> Result<Option<LockOutcome>> {
    let mut ph = Placeholders::default();
    let hk = ph.name_for_user(&schema.hash.0);
    let stamp = new_stamp();
    let mut update = format!(
        "SET {o} = {me}, {d} = {now}",
        o = ph.name(OWNER),
        me = ph.value("Me", AttributeValue::S(me.0.clone())),
        d = ph.name(LOCK_DATE),
        now = ph.value("Now", AttributeValue::N(stamp.clone())),
    );
    let cond = if absent {
        update.push_str(&format!(
            ", {} = {}",
            ph.name(TRANSIENT),
            ph.value("True", AttributeValue::Bool(true))
        ));
        format!("attribute_not_exists({hk})")
    } else {
        format!(
            "attribute_exists({hk}) AND attribute_not_exists({})",
            ph.name(OWNER)
        )
    };
    let w = Write {
        table: table.into(),
        kind: WriteKind::Update {
            key: key.clone(),
            update,
        },
        condition: Some(cond),
        ph,
    };
    match w.send(client, Some(ReturnValue::AllOld)).await {
        Ok(Written::Ok(old)) => {
            let old = if absent { None } else { old.map(strip) };
            Ok(Some(LockOutcome::Locked(LockInfo {
                transient: absent,
                applied: false,
                current: old.clone(),
                before: old,
                image_ref: None,
                stamp: Some(stamp),
            })))
        }
        Ok(Written::ConditionFailed(None)) => Ok(None),
        Ok(Written::ConditionFailed(Some(found))) => {
            let obs = Observed::of(Some(&found));
            match &obs.owner {
                Some(o) if o == me.as_str() => {
                    Ok(Some(LockOutcome::Locked(LockInfo::from_observed(&obs))))
                }
                Some(o) => Ok(Some(LockOutcome::Held {
                    owner: TxId(o.clone()),
                })),
                // Exists and unlocked, but we tried the absent path: try again as existing.
                None if absent => Ok(None),
                None => Ok(Some(LockOutcome::Held {
                    owner: TxId(String::new()),
                })),
            }
        }
        Err(Error::DynamoDb {
            code: Some(code),
            message,
            ..
        }) if code == "ValidationException" => Err(Error::invalid(format!(
            "cannot lock the item of table {table} (nothing was written to it): {}; DynamoDB said: {}",
            crate::request::room_note(),
            message.unwrap_or_default()
        ))),
        Err(e) => Err(e),
    }
}

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
    /// Apply and release in one write (the one-request commit).
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

/// Releases an item whose transaction write is not applied: deletes a placeholder, or removes the lock.
pub(crate) fn release_write(
    table: &str,
    key: &Item,
    transient: bool,
    applied: bool,
    me: &TxId,
) -> Write {
    let mut ph = Placeholders::default();
    let cond = format!(
        "{} AND {}",
        me_condition(&mut ph, me),
        applied_condition(&mut ph, applied)
    );
    let kind = if transient {
        WriteKind::Delete { key: key.clone() }
    } else {
        let names: Vec<String> = LOCK_ATTRS.iter().map(|a| ph.name(a)).collect();
        WriteKind::Update {
            key: key.clone(),
            update: format!("REMOVE {}", names.join(", ")),
        }
    };
    Write {
        table: table.into(),
        kind,
        condition: Some(cond),
        ph,
    }
}

/// The write that settles an item of a decided transaction, given what the item looks like now.
/// `None` when there is nothing to do (not locked by `me`). `op` is the transaction's request kind for
/// the item (its write if it has one, else `Get`). `table_image` is the before-image loaded from the
/// images table, when the item points there.
pub(crate) fn settle_write(
    committed: bool,
    op: Op,
    table: &str,
    key: &Item,
    obs: &Observed,
    me: &TxId,
    table_image: Option<&Item>,
) -> Result<Option<Write>> {
    if !obs.locked_by(me) {
        return Ok(None);
    }
    let mut ph = Placeholders::default();
    let cond = format!(
        "{} AND {}",
        me_condition(&mut ph, me),
        applied_condition(&mut ph, obs.applied)
    );
    let is_delete = op == Op::Delete || obs.applied_delete;
    let kind = if committed {
        if !obs.applied {
            // A read lock, or a lock taken after the decision by a late coordinator: every write of
            // a committed transaction was applied (or marked) before the decision.
            return Ok(Some(release_write(table, key, obs.transient, false, me)));
        } else if is_delete {
            WriteKind::Delete { key: key.clone() }
        } else {
            let names: Vec<String> = LOCK_ATTRS.iter().map(|a| ph.name(a)).collect();
            WriteKind::Update {
                key: key.clone(),
                update: format!("REMOVE {}", names.join(", ")),
            }
        }
    } else if !obs.applied {
        return Ok(Some(release_write(table, key, obs.transient, false, me)));
    } else if is_delete {
        // A marked delete changed nothing: release.
        return Ok(Some(release_write(table, key, obs.transient, true, me)));
    } else if obs.transient {
        WriteKind::Delete { key: key.clone() }
    } else {
        let image = match (&obs.image, &obs.image_ref) {
            (Some(img), _) => img.clone(),
            (None, Some(id)) => table_image.cloned().ok_or_else(|| {
                Error::invariant(format!(
                    "the before-image {id} of an item of {table} locked by {me} is missing"
                ))
            })?,
            (None, None) => {
                return Err(Error::invariant(format!(
                    "an item of {table} applied by {me} carries no before-image"
                )));
            }
        };
        // Restoring the image removes the lock in the same write.
        WriteKind::Put { item: image }
    };
    Ok(Some(Write {
        table: table.into(),
        kind,
        condition: Some(cond),
        ph,
    }))
}

/// The images-table id of the before-image of the item `table`/`key` under the lock `stamp` of
/// transaction `me`: `<tx id>#<32 hex digits>`, the same for every coordinator and every attempt,
/// so that a repeated save (after a lost answer, or by a resumed coordinator) writes the same row
/// rather than a second one, and whoever finishes the transaction can name the row to delete it
/// even when no item points to it. One lock has one before-image, so the row's content is fixed.
pub(crate) fn image_id(me: &TxId, table: &str, key: &Item, stamp: &str) -> String {
    let item = crate::keys::ItemRef::new(table, key);
    let stamp = crate::keys::normalize_number(stamp).unwrap_or_else(|| stamp.to_string());
    // FNV-1a, 128 bits: stable across processes and versions (std's hasher is not).
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for part in [me.as_str(), &item.table, &item.key, &stamp] {
        for b in part.bytes().chain([0xff]) {
            h ^= u128::from(b);
            h = h.wrapping_mul(0x0000000001000000000000000000013b);
        }
    }
    format!("{}#{h:032x}", me.as_str())
}

/// The images-table id a coordinator may have saved the before-image under for a lock of `me` that
/// is not applied yet (it saves the image just before applying): `None` when that write keeps its
/// image in the item, or needs none.
pub(crate) fn unapplied_image_id(
    me: &TxId,
    req: &Request,
    transient: bool,
    before: Option<&Item>,
    stamp: Option<&str>,
) -> Option<String> {
    if transient || !matches!(req.op, Op::Put | Op::Update) {
        return None;
    }
    let before = before?;
    if crate::request::image_fits_in_item(before, req) {
        return None;
    }
    Some(image_id(me, &req.table, &req.key, stamp?))
}

/// Deletes an images-table row (inside the `TransactWriteItems` that settles its item, so that no
/// crash can separate the two).
pub(crate) fn image_delete_write(image_table: &str, id: &str) -> Write {
    Write {
        table: image_table.into(),
        kind: WriteKind::Delete {
            key: HashMap::from([(
                crate::tables::IMAGE_ID.to_string(),
                AttributeValue::S(id.to_string()),
            )]),
        },
        condition: None,
        ph: Placeholders::default(),
    }
}

/// Saves a before-image in the images table (never overwriting one).
pub(crate) async fn save_table_image(
    client: &Client,
    image_table: &str,
    id: &str,
    before: &Item,
) -> Result<()> {
    let mut item = before.clone();
    item.insert(
        crate::tables::IMAGE_ID.into(),
        AttributeValue::S(id.to_string()),
    );
    let mut ph = Placeholders::default();
    let cond = format!("attribute_not_exists({})", ph.name(crate::tables::IMAGE_ID));
    let w = Write {
        table: image_table.into(),
        kind: WriteKind::Put { item },
        condition: Some(cond),
        ph,
    };
    match w.send(client, None).await? {
        Written::Ok(_) | Written::ConditionFailed(_) => Ok(()),
    }
}

/// Loads a before-image from the images table.
pub(crate) async fn load_table_image(
    client: &Client,
    image_table: &str,
    id: &str,
) -> Result<Option<Item>> {
    let out = client
        .get_item()
        .table_name(image_table)
        .key(crate::tables::IMAGE_ID, AttributeValue::S(id.to_string()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e))?;
    Ok(out.item.map(|mut i| {
        i.remove(crate::tables::IMAGE_ID);
        i
    }))
}

/// A map from item key names to values, for error messages.
pub(crate) fn key_of(schema: &KeySchema, item: &Item) -> Item {
    schema
        .names()
        .filter_map(|n| item.get(n).map(|v| (n.to_string(), v.clone())))
        .collect::<HashMap<_, _>>()
}

impl LockInfo {
    /// What the item looks like to a settle step, as far as this coordinator knows.
    pub fn as_observed(&self, me: &TxId) -> Observed {
        Observed {
            exists: true,
            owner: Some(me.0.clone()),
            transient: self.transient,
            applied: self.applied,
            applied_delete: false,
            image: if self.applied && self.image_ref.is_none() {
                self.before.clone()
            } else {
                None
            },
            image_ref: self.image_ref.clone(),
            user: self.current.clone().unwrap_or_default(),
            stamp: self.stamp.clone(),
        }
    }
}

/// A user's write applied directly, without a lock, conditional on the item not being locked
/// (and on the request's own condition): the write-only fast path.
pub(crate) fn unlocked_write(req: &Request) -> Write {
    let mut ph = Placeholders::default();
    ph.extend_user(req.names.as_ref(), req.values.as_ref());
    let mut cond = format!("attribute_not_exists({})", ph.name(OWNER));
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
    Write {
        table: req.table.clone(),
        kind,
        condition: Some(cond),
        ph,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(stamp: &str, applied: bool) -> Observed {
        let mut raw = Item::new();
        raw.insert(OWNER.into(), AttributeValue::S("me".into()));
        raw.insert(LOCK_DATE.into(), AttributeValue::N(stamp.into()));
        if applied {
            raw.insert(APPLIED.into(), AttributeValue::S("1".into()));
        }
        Observed::of(Some(&raw))
    }

    fn ours(stamp: Option<&str>) -> LockInfo {
        LockInfo {
            transient: false,
            applied: false,
            before: None,
            current: None,
            image_ref: None,
            stamp: stamp.map(String::from),
        }
    }

    #[test]
    fn a_lock_is_recognised_by_its_stamp_as_a_number() {
        let me = TxId("me".into());
        // DynamoDB answers `…450` written as `…45`, and `…000000` as the integer.
        let lock = ours(Some("1700000000000.123450"));
        assert!(locked("1700000000000.12345", false).holds(&me, &lock));
        assert!(locked("1700000000000.123450", false).holds(&me, &lock));
        assert!(locked("1700000000000", false).holds(&me, &ours(Some("1700000000000.000000"))));
        // Another stamp is another lock, unless ours is applied already.
        assert!(!locked("1700000000000.12346", false).holds(&me, &lock));
        assert!(locked("1700000000000.12346", true).holds(&me, &lock));
        assert!(locked("1", false).holds(&me, &ours(None)));
        assert!(!locked("1700000000000.12345", false).holds(&TxId("other".into()), &lock));
    }

    #[test]
    fn new_stamps_are_canonical() {
        ZERO_ENDED_STAMPS.store(true, std::sync::atomic::Ordering::Relaxed);
        for _ in 0..100 {
            let s = new_stamp();
            assert_eq!(
                crate::keys::canonical_number(&s).as_deref(),
                Some(s.as_str())
            );
            assert!(!s.ends_with('0') || !s.contains('.'), "{s}");
        }
        ZERO_ENDED_STAMPS.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}
