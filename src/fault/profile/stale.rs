//! Eventually consistent reads: answers in which items may show a version that was current
//! within the stale window instead of the current one.

use std::collections::HashMap;
use std::time::Instant;

use aws_smithy_runtime_api::client::http::SharedHttpConnector;
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use serde_json::{Map, Value};

use super::wire::{self, Expressions, ItemId};
use super::{Shared, bump, read_body};
use crate::expr;

/// A table's key attribute names and, per index, the index's key attribute names.
#[derive(Debug)]
pub(super) struct Schema {
    pub keys: Vec<String>,
    pub indexes: HashMap<String, Vec<String>>,
}

impl Schema {
    /// From a `DescribeTable` answer.
    pub(super) fn of(answer: &Value) -> Option<Schema> {
        let names = |ks: &Value| -> Option<Vec<String>> {
            ks.as_array()?
                .iter()
                .map(|k| k.get("AttributeName")?.as_str().map(String::from))
                .collect()
        };
        let table = answer.get("Table")?;
        let keys = names(table.get("KeySchema")?)?;
        let mut indexes = HashMap::new();
        for kind in ["GlobalSecondaryIndexes", "LocalSecondaryIndexes"] {
            for index in table
                .get(kind)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let (Some(name), Some(ks)) = (
                    index.get("IndexName").and_then(Value::as_str),
                    index.get("KeySchema").and_then(names),
                ) {
                    indexes.insert(name.to_string(), ks);
                }
            }
        }
        Some(Schema { keys, indexes })
    }
}

/// How one read shapes the items it returns: its projection, and for queries and scans the
/// filter and key condition a stale version must still satisfy to be returned instead.
struct Shape {
    projection: Option<Vec<expr::Path>>,
    /// Conditions every version returned satisfies (filter; an index query's key condition).
    conditions: Vec<expr::Cond>,
    /// Attributes an index must hold for a version to be in it (its keys).
    index_keys: Option<Vec<String>>,
    /// An index read without a projection returns what the index projects: a stale version is
    /// cut to the attributes of the current one (or, when the item is new to the index, to its
    /// keys and the index's).
    index_like: Option<Vec<String>>,
}

impl Shape {
    /// The shape of `request` (`None`: one the profile cannot reproduce — legacy
    /// `AttributesToGet` or an expression it does not parse — whose answer is left current).
    fn of(request: &Value, conditions: &[&str]) -> Option<Shape> {
        if request.get("AttributesToGet").is_some() || request.get("ScanFilter").is_some() {
            return None;
        }
        let ex = Expressions::of(request);
        let projection = match request.get("ProjectionExpression").and_then(Value::as_str) {
            Some(p) => Some(expr::parse_projection(p, ex.names.as_ref()).ok()?),
            None => None,
        };
        let mut conds = Vec::new();
        for member in conditions {
            if let Some(c) = request.get(*member).and_then(Value::as_str) {
                conds.push(expr::parse_condition(c, ex.names.as_ref(), ex.values.as_ref()).ok()?);
            }
        }
        Some(Shape {
            projection,
            conditions: conds,
            index_keys: None,
            index_like: None,
        })
    }

    /// `version` as this read would return it (`None`: not returned).
    fn returned(
        &self,
        version: &Map<String, Value>,
        current: Option<&Map<String, Value>>,
    ) -> Option<Map<String, Value>> {
        if let Some(keys) = &self.index_keys
            && keys.iter().any(|k| !version.contains_key(k))
        {
            return None;
        }
        let item = wire::to_item(version)?;
        if !self.conditions.iter().all(|c| c.eval(&item)) {
            return None;
        }
        if let Some(paths) = &self.projection {
            return Some(wire::from_item(&expr::project(&item, paths)));
        }
        if let Some(keys) = &self.index_like {
            let keep = |name: &String| {
                current.is_some_and(|c| c.contains_key(name)) || keys.contains(name)
            };
            return Some(
                version
                    .iter()
                    .filter(|(k, _)| keep(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
        }
        Some(version.clone())
    }
}

impl Shared {
    /// The answer to an eventually consistent read, with items picked among their recent
    /// versions; any other answer unchanged.
    pub(super) async fn stale_answer(
        &self,
        inner: &SharedHttpConnector,
        template: Option<&HttpRequest>,
        op: &str,
        request: &Value,
        mut answer: HttpResponse,
    ) -> Result<HttpResponse, ConnectorError> {
        let consistent = |r: &Value| r.get("ConsistentRead") == Some(&Value::Bool(true));
        let eventual = match op {
            "GetItem" => !consistent(request),
            "BatchGetItem" => request
                .get("RequestItems")
                .and_then(Value::as_object)
                .is_some_and(|t| t.values().any(|r| !consistent(r))),
            "Query" | "Scan" => !consistent(request) || request.get("IndexName").is_some(),
            _ => false,
        };
        if !eventual {
            return Ok(answer);
        }
        let bytes = read_body(&mut answer).await?;
        let Ok(mut json) = serde_json::from_slice::<Value>(&bytes) else {
            *answer.body_mut() = bytes.into();
            return Ok(answer);
        };
        let changed = match op {
            "GetItem" => self.stale_get(request, &mut json),
            "BatchGetItem" => self.stale_batch_get(request, &mut json),
            _ => self.stale_pages(inner, template, request, &mut json).await,
        };
        if changed == 0 {
            *answer.body_mut() = bytes.into();
            return Ok(answer);
        }
        let new = serde_json::to_vec(&json).expect("JSON serialises");
        let headers = answer.headers_mut();
        headers.remove("x-amz-crc32");
        headers.insert("content-length", new.len().to_string());
        *answer.body_mut() = new.into();
        Ok(answer)
    }

    /// Picks the version of `id` a read returns: the current one, or (with the stale
    /// probability) a random one of the versions current within the window that this read would
    /// return differently. `Some(v)`: return `v` instead (`None` inside: absent).
    fn pick(
        &self,
        id: &ItemId,
        current: Option<&Map<String, Value>>,
        shape: &Shape,
    ) -> Option<Option<Map<String, Value>>> {
        use rand::Rng;
        let s = &self.settings;
        let mut st = self.state.lock().expect("profile state poisoned");
        let recent = st.versions.recent(id, Instant::now(), s.stale_window);
        let others: Vec<Option<Map<String, Value>>> = recent
            .iter()
            .map(|v| v.as_ref().and_then(|v| shape.returned(v, current)))
            .filter(|v| v.as_ref() != current)
            .collect();
        if others.is_empty() || !st.rng.random_bool(s.stale_probability.clamp(0.0, 1.0)) {
            return None;
        }
        let i = st.rng.random_range(0..others.len());
        bump(&self.counters.stale_items);
        Some(others[i].clone())
    }

    fn stale_get(&self, request: &Value, answer: &mut Value) -> u64 {
        let (Some(table), Some(key)) = (
            request.get("TableName").and_then(Value::as_str),
            request.get("Key").and_then(Value::as_object),
        ) else {
            return 0;
        };
        let Some(shape) = Shape::of(request, &[]) else {
            return 0;
        };
        let current = answer.get("Item").and_then(Value::as_object).cloned();
        let Some(pick) = self.pick(&ItemId::new(table, key), current.as_ref(), &shape) else {
            return 0;
        };
        let Some(obj) = answer.as_object_mut() else {
            return 0;
        };
        match pick {
            Some(v) => obj.insert("Item".into(), Value::Object(v)),
            None => obj.remove("Item"),
        };
        1
    }

    fn stale_batch_get(&self, request: &Value, answer: &mut Value) -> u64 {
        let Some(tables) = request.get("RequestItems").and_then(Value::as_object) else {
            return 0;
        };
        let mut changed = 0;
        for (table, ka) in tables {
            if ka.get("ConsistentRead") == Some(&Value::Bool(true)) {
                continue;
            }
            let keys: Vec<&Map<String, Value>> = ka
                .get("Keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
                .collect();
            let Some(names) = keys.first().map(|k| k.keys().cloned().collect::<Vec<_>>()) else {
                continue;
            };
            let Some(shape) = Shape::of(ka, &[]) else {
                continue;
            };
            let Some(list) = answer
                .pointer_mut(&format!(
                    "/Responses/{}",
                    table.replace('~', "~0").replace('/', "~1")
                ))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            // Items matched to their keys; an answer whose items lack their keys is left as is.
            let mut by_id: HashMap<ItemId, Map<String, Value>> = HashMap::new();
            for item in list.iter().filter_map(Value::as_object) {
                match wire::key_of(item, &names) {
                    Some(k) => by_id.insert(ItemId::new(table, &k), item.clone()),
                    None => return changed,
                };
            }
            let mut out = Vec::new();
            for key in keys {
                let id = ItemId::new(table, key);
                let current = by_id.get(&id);
                let version = match self.pick(&id, current, &shape) {
                    Some(v) => {
                        changed += 1;
                        v
                    }
                    None => current.cloned(),
                };
                out.extend(version.map(Value::Object));
            }
            *list = out;
        }
        changed
    }

    async fn stale_pages(
        &self,
        inner: &SharedHttpConnector,
        template: Option<&HttpRequest>,
        request: &Value,
        answer: &mut Value,
    ) -> u64 {
        let Some(table) = request.get("TableName").and_then(Value::as_str) else {
            return 0;
        };
        let Some(schema) = self.schema(inner, template, table).await else {
            return 0;
        };
        let index = request.get("IndexName").and_then(Value::as_str);
        let mut conditions = vec!["FilterExpression"];
        if index.is_some() {
            conditions.push("KeyConditionExpression");
        }
        let Some(mut shape) = Shape::of(request, &conditions) else {
            return 0;
        };
        if let Some(name) = index {
            let Some(keys) = schema.indexes.get(name) else {
                return 0;
            };
            shape.index_keys = Some(keys.clone());
            if shape.projection.is_none() {
                shape.index_like = Some(schema.keys.iter().chain(keys).cloned().collect());
            }
        }
        let Some(items) = answer.get_mut("Items").and_then(Value::as_array_mut) else {
            return 0;
        };
        let mut changed = 0;
        let mut out = Vec::new();
        for item in items.drain(..) {
            let Some(obj) = item.as_object() else {
                out.push(item);
                continue;
            };
            let Some(key) = wire::key_of(obj, &schema.keys) else {
                out.push(item);
                continue;
            };
            match self.pick(&ItemId::new(table, &key), Some(obj), &shape) {
                Some(v) => {
                    changed += 1;
                    out.extend(v.map(Value::Object));
                }
                None => out.push(item),
            }
        }
        let count = out.len();
        *items = out;
        if changed > 0
            && let Some(obj) = answer.as_object_mut()
        {
            obj.insert("Count".into(), Value::from(count));
        }
        changed
    }
}
