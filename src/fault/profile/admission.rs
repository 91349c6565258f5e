//! Admission: what DynamoDB would refuse (a conflict with a transaction in flight, throughput
//! beyond an item's rate) before the request reaches DynamoDB Local, and the items each request
//! touches.

use std::time::Instant;

use aws_smithy_runtime_api::client::http::SharedHttpConnector;
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use serde_json::{Map, Value};

use super::conflicts::Ongoing;
use super::wire::{self, ItemId};
use super::{Shared, Written, bump, read_body, throughput};

/// What admission decided for one request.
pub(super) enum Admission {
    /// Refused with this answer; Local never sees the request.
    Refused(Box<HttpResponse>),
    /// Goes to Local; a transaction's items stay in flight while this lives.
    Admitted(Option<Ongoing>),
    /// A batch of which only part goes to Local (`body`); the rest comes back unprocessed
    /// (`unprocessed`, the value of the answer's `UnprocessedItems` or `UnprocessedKeys`).
    Partial { body: Value, unprocessed: Value },
}

impl Shared {
    /// Refuses the request as DynamoDB would (a conflict, throttling), or admits it.
    pub(super) fn admit(&self, op: &str, body: &Value, touched: &Touched) -> Admission {
        let s = &self.settings;
        let mut st = self.state.lock().expect("profile state poisoned");
        let now = Instant::now();
        match op {
            "TransactWriteItems" => {
                if s.conflicts {
                    let reasons: Vec<Option<(&str, &str)>> = touched
                        .ids
                        .iter()
                        .map(|id| {
                            id.as_ref().filter(|id| st.in_flight.holds(id)).map(|_| {
                                ("TransactionConflict", "Transaction is ongoing for the item")
                            })
                        })
                        .collect();
                    if reasons.iter().any(Option::is_some) {
                        bump(&self.counters.transactions_in_conflict);
                        return Admission::Refused(Box::new(wire::cancelled_answer(&reasons)));
                    }
                }
                if s.throttling {
                    let wants = st.wants(touched, |size| throughput::write_units(size, true));
                    let short = st.writes.take(&wants, s.write_units_per_second, now);
                    if !short.is_empty() {
                        bump(&self.counters.throttled);
                        let short_ids: Vec<&ItemId> = short.iter().map(|&i| &wants[i].0).collect();
                        let reasons: Vec<Option<(&str, &str)>> = touched
                            .ids
                            .iter()
                            .map(|id| {
                                id.as_ref().filter(|id| short_ids.contains(id)).map(|_| {
                                    ("ThrottlingError", "Throughput exceeds the current capacity for one or more items")
                                })
                            })
                            .collect();
                        return Admission::Refused(Box::new(wire::cancelled_answer(&reasons)));
                    }
                }
                st.note_stored(touched);
                let ongoing = s.conflicts.then(|| {
                    let ids = touched.ids.iter().flatten().cloned().collect();
                    Ongoing::enter(&self.state, &mut st, ids)
                });
                Admission::Admitted(ongoing)
            }
            "PutItem" | "UpdateItem" | "DeleteItem" | "BatchWriteItem" => {
                let ids: Vec<&ItemId> = touched.ids.iter().flatten().collect();
                if s.conflicts && ids.iter().any(|id| st.in_flight.holds(id)) {
                    bump(&self.counters.writes_in_conflict);
                    return Admission::Refused(Box::new(wire::error_answer(
                        "TransactionConflictException",
                        "Transaction is ongoing for the item",
                    )));
                }
                if s.throttling && op == "BatchWriteItem" {
                    return self.admit_batch(&mut st, op, body, touched, now);
                }
                if s.throttling {
                    let wants = st.wants(touched, |size| throughput::write_units(size, false));
                    if !st
                        .writes
                        .take(&wants, s.write_units_per_second, now)
                        .is_empty()
                    {
                        bump(&self.counters.throttled);
                        return Admission::Refused(Box::new(throttled()));
                    }
                }
                st.note_stored(touched);
                Admission::Admitted(None)
            }
            "BatchGetItem" if s.throttling => self.admit_batch(&mut st, op, body, touched, now),
            "GetItem" if s.throttling => {
                let consistent = body.get("ConsistentRead") == Some(&Value::Bool(true));
                let wants = st.wants(touched, |size| throughput::read_units(size, consistent));
                if !st
                    .reads
                    .take(&wants, s.read_units_per_second, now)
                    .is_empty()
                {
                    bump(&self.counters.throttled);
                    return Admission::Refused(Box::new(throttled()));
                }
                Admission::Admitted(None)
            }
            _ => Admission::Admitted(None),
        }
    }

    /// A batch past some items' throughput: DynamoDB serves the items that have units and returns
    /// the others unprocessed, or refuses the whole batch when none has.
    fn admit_batch(
        &self,
        st: &mut super::State,
        op: &str,
        body: &Value,
        touched: &Touched,
        now: Instant,
    ) -> Admission {
        let s = &self.settings;
        let writes = op == "BatchWriteItem";
        let list = "RequestItems";
        // A `BatchGetItem` lists its keys under `Keys` in each table's entry.
        let entries = (!writes).then_some("Keys");
        let billed = st.billed(touched);
        // Whether each key of a `BatchGetItem` is read consistently (its table's setting), in
        // the order `touched` lists them.
        let consistent: Vec<bool> = body
            .get(list)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .flat_map(|(_, ka)| {
                let c = ka.get("ConsistentRead") == Some(&Value::Bool(true));
                let n = ka.get("Keys").and_then(Value::as_array).map_or(0, Vec::len);
                std::iter::repeat_n(c, n)
            })
            .collect();
        // Per item, in the order `touched` lists them (tables, then their requests or keys).
        let mut served = Vec::with_capacity(billed.len());
        for (pos, (id, size)) in touched.ids.iter().zip(billed).enumerate() {
            let Some(id) = id else {
                served.push(true);
                continue;
            };
            let ok = if writes {
                let units = throughput::write_units(size, false);
                st.writes
                    .take(&[(id.clone(), units)], s.write_units_per_second, now)
                    .is_empty()
            } else {
                let c = consistent.get(pos).copied().unwrap_or(false);
                let units = throughput::read_units(size, c);
                st.reads
                    .take(&[(id.clone(), units)], s.read_units_per_second, now)
                    .is_empty()
            };
            served.push(ok);
        }
        if served.iter().all(|&ok| ok) {
            if writes {
                st.note_stored(touched);
            }
            return Admission::Admitted(None);
        }
        bump(&self.counters.throttled);
        if !served.iter().any(|&ok| ok) {
            return Admission::Refused(Box::new(wire::error_answer(
                "ProvisionedThroughputExceededException",
                "The level of configured provisioned throughput for one or more global secondary indexes of the table was exceeded. Consider increasing your provisioning level for the under-provisioned global secondary indexes with the UpdateTable API",
            )));
        }
        let Some(tables) = body.get(list).and_then(Value::as_object) else {
            return Admission::Admitted(None);
        };
        let mut sent = Map::new();
        let mut unprocessed = Map::new();
        let mut i = 0;
        for (table, requests) in tables {
            let items: &[Value] = match entries {
                None => requests.as_array().map_or(&[], Vec::as_slice),
                Some(k) => requests
                    .get(k)
                    .and_then(Value::as_array)
                    .map_or(&[], Vec::as_slice),
            };
            let (mut yes, mut no) = (Vec::new(), Vec::new());
            for it in items {
                if served.get(i).copied().unwrap_or(true) {
                    yes.push(it.clone());
                } else {
                    no.push(it.clone());
                }
                i += 1;
            }
            let wrap = |list: Vec<Value>| match entries {
                None => Value::Array(list),
                Some(k) => {
                    let mut ka = requests.as_object().cloned().unwrap_or_default();
                    ka.insert(k.to_string(), Value::Array(list));
                    Value::Object(ka)
                }
            };
            if !yes.is_empty() {
                sent.insert(table.clone(), wrap(yes));
            }
            if !no.is_empty() {
                unprocessed.insert(table.clone(), wrap(no));
            }
        }
        let mut body = body.clone();
        body[list] = Value::Object(sent);
        if writes {
            // Only what goes to Local is stored.
            let kept = Touched {
                ids: touched
                    .ids
                    .iter()
                    .zip(&served)
                    .map(|(id, &ok)| id.clone().filter(|_| ok))
                    .collect(),
                sizes: touched.sizes.clone(),
                effects: touched.effects.clone(),
                written: Vec::new(),
            };
            st.note_stored(&kept);
        }
        Admission::Partial {
            body,
            unprocessed: Value::Object(unprocessed),
        }
    }

    /// The items a request touches: every action's item for a transaction (in order), the
    /// item of a single-item request, the items of a `BatchWriteItem`; and, for writes, the
    /// table and key of each item written.
    pub(super) async fn touched(
        &self,
        inner: &SharedHttpConnector,
        template: Option<&HttpRequest>,
        op: &str,
        body: &Value,
    ) -> Touched {
        let mut t = Touched::default();
        let table_of = |v: &Value| v.get("TableName").and_then(Value::as_str).map(String::from);
        match op {
            "TransactWriteItems" => {
                for a in wire::transact_actions(body) {
                    let key = match (&a.key, &a.item) {
                        (Some(k), _) => Some(k.clone()),
                        (None, Some(item)) => self.key_in(inner, template, &a.table, item).await,
                        _ => None,
                    };
                    t.ids.push(key.as_ref().map(|k| ItemId::new(&a.table, k)));
                    t.sizes.push(a.size);
                    t.effects.push(match a.kind.as_str() {
                        "Put" => Effect::Replaces,
                        "Update" => Effect::Grows,
                        "Delete" => Effect::Removes,
                        _ => Effect::Reads,
                    });
                    if a.writes
                        && let Some(k) = key
                    {
                        t.written.push((a.table.clone(), k));
                    }
                }
            }
            "PutItem" | "UpdateItem" | "DeleteItem" | "GetItem" => {
                let Some(table) = table_of(body) else {
                    return t;
                };
                let key = match body.get("Key").and_then(Value::as_object) {
                    Some(k) => Some(k.clone()),
                    None => match body.get("Item").and_then(Value::as_object) {
                        Some(item) => self.key_in(inner, template, &table, item).await,
                        None => None,
                    },
                };
                t.ids.push(key.as_ref().map(|k| ItemId::new(&table, k)));
                t.sizes.push(body.as_object().map_or(0, wire::request_size));
                t.effects.push(match op {
                    "PutItem" => Effect::Replaces,
                    "UpdateItem" => Effect::Grows,
                    "DeleteItem" => Effect::Removes,
                    _ => Effect::Reads,
                });
                if op != "GetItem"
                    && let Some(k) = key
                {
                    t.written.push((table, k));
                }
            }
            "BatchGetItem" => {
                let Some(tables) = body.get("RequestItems").and_then(Value::as_object) else {
                    return t;
                };
                for (table, ka) in tables {
                    for k in ka
                        .get("Keys")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let key = k.as_object();
                        t.ids.push(key.map(|k| ItemId::new(table, k)));
                        t.sizes.push(key.map_or(0, wire::item_size));
                        t.effects.push(Effect::Reads);
                    }
                }
            }
            "BatchWriteItem" => {
                let Some(tables) = body.get("RequestItems").and_then(Value::as_object) else {
                    return t;
                };
                for (table, requests) in tables {
                    for r in requests.as_array().into_iter().flatten() {
                        let (key, size, effect) = if let Some(k) =
                            r.pointer("/DeleteRequest/Key").and_then(Value::as_object)
                        {
                            (Some(k.clone()), wire::item_size(k), Effect::Removes)
                        } else if let Some(item) =
                            r.pointer("/PutRequest/Item").and_then(Value::as_object)
                        {
                            let key = self.key_in(inner, template, table, item).await;
                            (key, wire::item_size(item), Effect::Replaces)
                        } else {
                            (None, 0, Effect::Reads)
                        };
                        t.ids.push(key.as_ref().map(|k| ItemId::new(table, k)));
                        t.sizes.push(size);
                        t.effects.push(effect);
                        if let Some(k) = key {
                            t.written.push((table.clone(), k));
                        }
                    }
                }
            }
            _ => {}
        }
        t
    }

    /// The key of `item` in `table` (`None`: the table's keys are unknown).
    async fn key_in(
        &self,
        inner: &SharedHttpConnector,
        template: Option<&HttpRequest>,
        table: &str,
        item: &Map<String, Value>,
    ) -> Option<Map<String, Value>> {
        let schema = self.schema(inner, template, table).await?;
        wire::key_of(item, &schema.keys)
    }
}

/// The items of one request (see [`Shared::touched`]).
#[derive(Debug, Default)]
pub(super) struct Touched {
    /// One per action or item, in order (`None`: unknown key).
    ids: Vec<Option<ItemId>>,
    /// The bytes each action or item's request carries (see [`wire::request_size`]).
    sizes: Vec<usize>,
    /// What each does to its item's stored size.
    effects: Vec<Effect>,
    pub(super) written: Written,
}

pub(super) fn throttled() -> HttpResponse {
    wire::error_answer(
        "ThrottlingException",
        "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table or index so please try again shortly.",
    )
}

/// What a request does to the size of an item as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effect {
    /// Writes the whole item (a put).
    Replaces,
    /// Sets some attributes (an update): at least as large as before, as far as the profile knows.
    Grows,
    /// Deletes it.
    Removes,
    /// Reads it or checks a condition on it.
    Reads,
}

impl super::State {
    /// The bytes DynamoDB bills for each item of `touched`: the larger of what the request
    /// carries and the item as last stored (DynamoDB bills a write by the larger of the item
    /// before and after, and a read by the item read).
    fn billed(&self, touched: &Touched) -> Vec<usize> {
        touched
            .ids
            .iter()
            .zip(&touched.sizes)
            .map(|(id, &size)| {
                let stored = id.as_ref().and_then(|id| self.stored.get(id)).copied();
                size.max(stored.unwrap_or(0))
            })
            .collect()
    }

    /// Each item of `touched` whose key is known, with the units `units` bills for its size.
    fn wants(&self, touched: &Touched, units: impl Fn(usize) -> f64) -> Vec<(ItemId, f64)> {
        touched
            .ids
            .iter()
            .zip(self.billed(touched))
            .filter_map(|(id, size)| Some((id.clone()?, units(size))))
            .collect()
    }

    /// Notes the size of each item an admitted write leaves.
    fn note_stored(&mut self, touched: &Touched) {
        for ((id, &size), effect) in touched.ids.iter().zip(&touched.sizes).zip(&touched.effects) {
            let Some(id) = id else { continue };
            match effect {
                Effect::Replaces => {
                    self.stored.insert(id.clone(), size);
                }
                Effect::Grows => {
                    let s = self.stored.entry(id.clone()).or_insert(0);
                    *s = (*s).max(size);
                }
                Effect::Removes => {
                    self.stored.remove(id);
                }
                Effect::Reads => {}
            }
        }
    }
}

impl Shared {
    /// Bills a `Query` or `Scan` page's read units to each item it returned, once DynamoDB Local
    /// has answered (only then are its items known). If some item is short of units, the page is
    /// throttled as DynamoDB throttles a read past a partition's throughput: the answer becomes
    /// `ThrottlingException` (a read changes nothing, so dropping Local's answer is safe). Index
    /// pages are not billed (an index's partitions are not the table's). `answer` keeps its body.
    pub(super) async fn bill_page(
        &self,
        inner: &SharedHttpConnector,
        template: Option<&HttpRequest>,
        request: &Value,
        answer: &mut HttpResponse,
    ) -> Result<Option<HttpResponse>, ConnectorError> {
        let table = request.get("TableName").and_then(Value::as_str);
        let (Some(table), None) = (table, request.get("IndexName")) else {
            return Ok(None);
        };
        let Some(schema) = self.schema(inner, template, table).await else {
            return Ok(None);
        };
        let bytes = read_body(answer).await?;
        let items: Vec<Map<String, Value>> = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|json| json.get("Items").and_then(Value::as_array).cloned())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| i.as_object().cloned())
            .collect();
        *answer.body_mut() = bytes.into();
        // DynamoDB bills a page by the sum of its items' sizes (rounded up to 4 KB once): each
        // item carries its share, by its size as stored where the profile knows it (a
        // projection does not make a read cheaper).
        let per_byte = if request.get("ConsistentRead") == Some(&Value::Bool(true)) {
            1.0 / 4096.0
        } else {
            0.5 / 4096.0
        };
        let mut st = self.state.lock().expect("profile state poisoned");
        let wants: Vec<(ItemId, f64)> = items
            .iter()
            .filter_map(|item| {
                let id = ItemId::new(table, &wire::key_of(item, &schema.keys)?);
                let size = wire::item_size(item).max(st.stored.get(&id).copied().unwrap_or(0));
                Some((id, size as f64 * per_byte))
            })
            .collect();
        let short = st
            .reads
            .take(&wants, self.settings.read_units_per_second, Instant::now());
        if short.is_empty() {
            return Ok(None);
        }
        bump(&self.counters.throttled);
        Ok(Some(throttled()))
    }
}
