//! A write applied early, under its lock, when its return values need it or a read follows it in
//! the same transaction (with its before-image kept in the item or the images table).

use aws_sdk_dynamodb::types::ReturnValue;

use crate::ddb::{self, Written};
use crate::error::{Error, Item, Result};
use crate::expr;
use crate::item_lock::{self, ImagePlace, LockInfo, Observed, Stage};
use crate::keys::ItemRef;
use crate::record::{self, TxState};
use crate::request::{self, Op, Request};

use super::{State, Transaction};

impl Transaction {
    /// Applies one item's write now (for return values or a read after write), keeping the lock.
    pub(super) async fn apply_now(
        &self,
        st: &mut State,
        r: &ItemRef,
        rv: Option<ReturnValue>,
    ) -> Result<Option<Item>> {
        let lock = self.drive_lock(st, r).await?;
        let e = st.items[r].clone();
        let c = &self.inner.client;
        if lock.applied {
            // Applied already (by us or by another coordinator of this transaction).
            let raw = ddb::batch_get(c, &[(e.table.clone(), e.key.clone())]).await?;
            let obs = Observed::of(raw.first().map(|(_, i)| i));
            let current = obs.visible();
            st.held_mut(r).current = current.clone();
            let req = e.request(&st.requests).clone();
            return self.values_of_applied(&req, rv.as_ref(), &obs, &lock).await;
        }
        // Only apply while the transaction is pending (a decided one must not change items).
        let header = record::load_header(c, &self.inner.tx_table, &self.id).await?;
        match header.as_ref().map(|h| h.state) {
            Some(TxState::Pending) => {}
            _ => {
                self.absorb_conflict(st, header).await?;
                return Err(self.rolled_back());
            }
        }
        let req = e.request(&st.requests).clone();
        let schema = self.schema(&req.table).await?;
        let place = self.image_place(&lock, &req).await?;
        let writes =
            item_lock::request_writes(&req, &lock, &schema, &self.id, Stage::Apply, &place);
        for w in writes {
            let is_check = matches!(w.kind, ddb::WriteKind::Check { .. });
            match w.send(c, if is_check { None } else { rv.clone() }).await {
                Ok(Written::Ok(attrs)) => {
                    if is_check {
                        continue;
                    }
                    let current = match rv {
                        Some(ReturnValue::AllNew) => attrs.clone().map(item_lock::strip),
                        _ => None,
                    };
                    let l = st.held_mut(r);
                    l.applied = true;
                    l.current = current;
                    if let ImagePlace::Table(id) = &place {
                        l.image_ref = Some(id.clone());
                    }
                    return Ok(attrs.map(item_lock::strip));
                }
                Ok(Written::ConditionFailed(found)) => {
                    let obs = Observed::of(found.as_ref());
                    if !is_check && obs.locked_by(&self.id) && obs.applied {
                        // Our own earlier attempt landed (its response was lost or throttled).
                        let l = st.held_mut(r);
                        l.applied = true;
                        l.current = obs.visible();
                        return self.values_of_applied(&req, rv.as_ref(), &obs, &lock).await;
                    }
                    // Our lock is gone — or it is another lock of this transaction, taken by
                    // another handle after someone decided and released the item.
                    if !is_check && !obs.holds(&self.id, &lock) {
                        // We lost the lock: someone decided the transaction.
                        let header = record::load_header(c, &self.inner.tx_table, &self.id).await?;
                        self.absorb_conflict(st, header).await?;
                        return Err(self.rolled_back());
                    }
                    let index = e.index();
                    let item = if is_check { None } else { obs.visible() };
                    st.rollback_cause = Some(crate::metrics::CONDITION_FAILED);
                    self.rollback_locked(st).await?;
                    return Err(Error::ConditionFailed {
                        tx_id: self.id.clone(),
                        request_index: index,
                        table: req.table.clone(),
                        key: req.key.clone(),
                        item,
                    });
                }
                Err(Error::DynamoDb {
                    code: Some(code),
                    message,
                    ..
                }) if code == "ValidationException" => {
                    let index = e.index();
                    st.rollback_cause = Some(crate::metrics::REQUEST_REJECTED);
                    self.rollback_locked(st).await?;
                    return Err(Error::RequestRejected {
                        tx_id: self.id.clone(),
                        request_index: index,
                        table: req.table.clone(),
                        message: request::explain_rejection(message.unwrap_or_default()),
                    });
                }
                Err(err) => return Err(err),
            }
        }
        Err(Error::invariant("apply produced no write"))
    }

    /// What `ReturnValues` shows of a write found already applied (a retry after a lost or
    /// throttled response, or another handle's apply): DynamoDB's answer, computed from the item now
    /// and its before-image.
    pub(super) async fn values_of_applied(
        &self,
        req: &Request,
        rv: Option<&ReturnValue>,
        obs: &Observed,
        lock: &LockInfo,
    ) -> Result<Option<Item>> {
        let now = obs.visible();
        let before = || async {
            if obs.transient {
                Ok(None)
            } else if let Some(img) = &obs.image {
                Ok(Some(img.clone()))
            } else if let Some(id) = &obs.image_ref {
                item_lock::load_table_image(&self.inner.client, &self.inner.image_table, id).await
            } else {
                Ok(lock.before.clone())
            }
        };
        let updated = |item: Option<Item>| -> Result<Option<Item>> {
            let Some(update) = &req.update else {
                return Ok(None);
            };
            // DynamoDB returns each updated top-level attribute whole (all of `m` for `m.a`).
            let targets = expr::UpdateExpr::parse(update)?.targets(req.names.as_ref())?;
            Ok(item
                .map(|i| {
                    i.into_iter()
                        .filter(|(k, _)| targets.contains(k))
                        .collect::<Item>()
                })
                .filter(|i| !i.is_empty()))
        };
        match rv {
            Some(ReturnValue::UpdatedNew) => updated(now),
            Some(ReturnValue::UpdatedOld) => updated(before().await?),
            Some(ReturnValue::AllOld) => before().await,
            _ => Ok(now),
        }
    }

    /// Chooses where the before-image goes, saving it in the images table when it is large.
    pub(super) async fn image_place(&self, lock: &LockInfo, req: &Request) -> Result<ImagePlace> {
        if lock.transient || !matches!(req.op, Op::Put | Op::Update) {
            return Ok(ImagePlace::Embedded);
        }
        if let Some(id) = &lock.image_ref {
            return Ok(ImagePlace::Table(id.clone()));
        }
        let before = lock.before.clone().unwrap_or_default();
        if request::image_fits_in_item(&before, req) {
            return Ok(ImagePlace::Embedded);
        }
        // The same id for every attempt and every coordinator of this lock: a repeated save
        // finds its row, and whoever finishes the transaction can delete it.
        let id = match &lock.stamp {
            Some(stamp) => item_lock::image_id(&self.id, &req.table, &req.key, stamp),
            None => format!("{}#{}", self.id, uuid::Uuid::new_v4().simple()),
        };
        item_lock::save_table_image(&self.inner.client, &self.inner.image_table, &id, &before)
            .await?;
        Ok(ImagePlace::Table(id))
    }
}
