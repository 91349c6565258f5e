//! DynamoDB's JSON wire protocol as the profile reads it: which items a request touches, and the
//! answers DynamoDB gives where DynamoDB Local would have answered otherwise.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_types::body::SdkBody;
use serde_json::{Map, Value, json};

use crate::error::Item;

/// One item, named by its table and its key with every number in canonical form (`{N: "1.50"}`
/// and `{N: "1.5"}` are one item, as they are to DynamoDB).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct ItemId(String);

impl ItemId {
    pub(super) fn new(table: &str, key: &Map<String, Value>) -> ItemId {
        let mut parts: Vec<(&str, String)> = key
            .iter()
            .map(|(name, v)| (name.as_str(), canonical_value(v)))
            .collect();
        parts.sort();
        let mut id = String::from(table);
        for (name, v) in parts {
            id.push('\u{1}');
            id.push_str(name);
            id.push('\u{2}');
            id.push_str(&v);
        }
        ItemId(id)
    }
}

fn canonical_value(v: &Value) -> String {
    match v.get("N").and_then(Value::as_str) {
        Some(n) => format!(
            "N{}",
            crate::keys::canonical_number(n).unwrap_or_else(|| n.into())
        ),
        None => v.to_string(),
    }
}

/// The key attributes of `item` (`None` when one is missing, e.g. projected away).
pub(super) fn key_of(item: &Map<String, Value>, names: &[String]) -> Option<Map<String, Value>> {
    names
        .iter()
        .map(|n| item.get(n).map(|v| (n.clone(), v.clone())))
        .collect()
}

/// The size DynamoDB bills an item by: each attribute's name and value (UTF-8 bytes of a string,
/// about half the digits of a number, 3 bytes plus one per element of a list or map).
pub(super) fn item_size(item: &Map<String, Value>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

/// The size of one attribute value in DynamoDB JSON (`{"S": "a"}`).
fn value_size(v: &Value) -> usize {
    let Some((kind, inner)) = v.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    let str_len = |v: &Value| v.as_str().map_or(0, str::len);
    let num = |v: &Value| {
        v.as_str()
            .map_or(0, |n| n.trim_start_matches('-').len().div_ceil(2) + 1)
    };
    // Binary arrives base64-encoded: 4 characters for 3 bytes.
    let bin = |v: &Value| str_len(v) * 3 / 4;
    let each = |f: &dyn Fn(&Value) -> usize| inner.as_array().map_or(0, |a| a.iter().map(f).sum());
    match kind.as_str() {
        "S" => str_len(inner),
        "N" => num(inner),
        "B" => bin(inner),
        "BOOL" | "NULL" => 1,
        "SS" => each(&str_len),
        "NS" => each(&num),
        "BS" => each(&bin),
        "L" => 3 + each(&|v| 1 + value_size(v)),
        "M" => {
            3 + inner.as_object().map_or(0, |m| {
                m.iter().map(|(k, v)| 1 + k.len() + value_size(v)).sum()
            })
        }
        _ => 0,
    }
}

/// The bytes one write request (or action) carries to its item: the whole item of a put, or the
/// key and the values an update sets (the item's stored size is added by whoever knows it).
pub(super) fn request_size(request: &Map<String, Value>) -> usize {
    if let Some(item) = request.get("Item").and_then(Value::as_object) {
        return item_size(item);
    }
    let key = request
        .get("Key")
        .and_then(Value::as_object)
        .map_or(0, item_size);
    let values: usize = request
        .get("ExpressionAttributeValues")
        .and_then(Value::as_object)
        .map_or(0, |m| m.values().map(value_size).sum());
    key + values
}

/// What kind of request this is, by the operation named in `x-amz-target`.
pub(super) fn operation(target: &str) -> &str {
    target.rsplit('.').next().unwrap_or_default()
}

/// One action of a `TransactWriteItems`: its table, its key (absent for a `Put`, whose key is in
/// its item) or item, and whether it writes (a `ConditionCheck` does not).
pub(super) struct Action {
    /// `Put`, `Update`, `Delete` or `ConditionCheck`.
    pub kind: String,
    pub table: String,
    pub key: Option<Map<String, Value>>,
    pub item: Option<Map<String, Value>>,
    pub writes: bool,
    /// The bytes it writes: its item for a `Put`, else its key and the values it sets.
    pub size: usize,
}

/// The actions of a `TransactWriteItems` body, in order.
pub(super) fn transact_actions(body: &Value) -> Vec<Action> {
    let Some(list) = body.get("TransactItems").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|a| {
            let (kind, inner) = a.as_object()?.iter().next()?;
            Some(Action {
                kind: kind.clone(),
                table: inner.get("TableName")?.as_str()?.to_string(),
                key: inner.get("Key").and_then(Value::as_object).cloned(),
                item: inner.get("Item").and_then(Value::as_object).cloned(),
                writes: kind != "ConditionCheck",
                size: inner.as_object().map_or(0, request_size),
            })
        })
        .collect()
}

/// A DynamoDB error answer (HTTP 400) of type `code`.
pub(super) fn error_answer(code: &str, message: &str) -> HttpResponse {
    answer(
        400,
        json!({
            "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"),
            "message": message,
        }),
    )
}

/// `TransactionCanceledException` with one reason per action (`None` for the actions that
/// did not fail), as DynamoDB words it.
pub(super) fn cancelled_answer(reasons: &[Option<(&str, &str)>]) -> HttpResponse {
    let codes: Vec<&str> = reasons
        .iter()
        .map(|r| r.map_or("None", |(code, _)| code))
        .collect();
    let list: Vec<Value> = reasons
        .iter()
        .map(|r| match r {
            Some((code, message)) => json!({"Code": code, "Message": message}),
            None => json!({"Code": "None"}),
        })
        .collect();
    answer(
        400,
        json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "Message": format!(
                "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                codes.join(", ")
            ),
            "CancellationReasons": list,
        }),
    )
}

/// An answer with a JSON body.
pub(super) fn answer(status: u16, body: Value) -> HttpResponse {
    let bytes = serde_json::to_vec(&body).expect("JSON serialises");
    let mut r = HttpResponse::new(
        status.try_into().expect("valid status"),
        SdkBody::from(bytes.clone()),
    );
    r.headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    r.headers_mut()
        .insert("content-length", bytes.len().to_string());
    r
}

/// An item in DynamoDB JSON as the SDK's type.
pub(super) fn to_item(m: &Map<String, Value>) -> Option<Item> {
    m.iter()
        .map(|(k, v)| Some((k.clone(), to_value(v)?)))
        .collect()
}

/// An item of the SDK's type in DynamoDB JSON.
pub(super) fn from_item(item: &Item) -> Map<String, Value> {
    item.iter()
        .map(|(k, v)| (k.clone(), from_value(v)))
        .collect()
}

fn to_value(v: &Value) -> Option<AttributeValue> {
    use aws_smithy_types::{Blob, base64};
    let (tag, inner) = v.as_object()?.iter().next()?;
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|s| s.as_str().map(String::from))
            .collect()
    };
    let blob = |v: &Value| -> Option<Blob> { Some(Blob::new(base64::decode(v.as_str()?).ok()?)) };
    Some(match tag.as_str() {
        "S" => AttributeValue::S(inner.as_str()?.into()),
        "N" => AttributeValue::N(inner.as_str()?.into()),
        "B" => AttributeValue::B(blob(inner)?),
        "BOOL" => AttributeValue::Bool(inner.as_bool()?),
        "NULL" => AttributeValue::Null(inner.as_bool()?),
        "SS" => AttributeValue::Ss(strings(inner)?),
        "NS" => AttributeValue::Ns(strings(inner)?),
        "BS" => AttributeValue::Bs(inner.as_array()?.iter().map(blob).collect::<Option<_>>()?),
        "M" => AttributeValue::M(to_item(inner.as_object()?)?),
        "L" => AttributeValue::L(
            inner
                .as_array()?
                .iter()
                .map(to_value)
                .collect::<Option<_>>()?,
        ),
        _ => return None,
    })
}

fn from_value(v: &AttributeValue) -> Value {
    use aws_smithy_types::base64;
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": base64::encode(b.as_ref()) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(b) => json!({ "NULL": b }),
        AttributeValue::Ss(l) => json!({ "SS": l }),
        AttributeValue::Ns(l) => json!({ "NS": l }),
        AttributeValue::Bs(l) => {
            json!({ "BS": l.iter().map(|b| base64::encode(b.as_ref())).collect::<Vec<_>>() })
        }
        AttributeValue::M(m) => json!({ "M": from_item(m) }),
        AttributeValue::L(l) => json!({ "L": l.iter().map(from_value).collect::<Vec<_>>() }),
        _ => Value::Null,
    }
}

/// The expression attribute names and values of a request (or of one `KeysAndAttributes`).
pub(super) struct Expressions {
    pub names: Option<HashMap<String, String>>,
    pub values: Option<HashMap<String, AttributeValue>>,
}

impl Expressions {
    pub(super) fn of(request: &Value) -> Expressions {
        let names = request
            .get("ExpressionAttributeNames")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            });
        let values = request
            .get("ExpressionAttributeValues")
            .and_then(Value::as_object)
            .and_then(to_item);
        Expressions { names, values }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_dynamodb_not_the_json_text() {
        let item = json!({
            "Id": {"S": "abc"},
            "n": {"N": "12345"},
            "l": {"L": [{"S": "xy"}, {"BOOL": true}]},
            "m": {"M": {"k": {"S": "v"}}},
            "b": {"B": "AAAA"},
        });
        let item = item.as_object().unwrap();
        // Id 2+3, n 1+4, l 1+(3+1+2+1+1), m 1+(3+1+1+1), b 1+3.
        assert_eq!(item_size(item), 5 + 5 + 9 + 7 + 4);
        assert!(item_size(item) * 3 < Value::Object(item.clone()).to_string().len());
        let update = json!({
            "Key": {"Id": {"S": "abc"}},
            "UpdateExpression": "SET #a = :a",
            "ExpressionAttributeNames": {"#a": "a"},
            "ExpressionAttributeValues": {":a": {"S": "0123456789"}},
        });
        assert_eq!(request_size(update.as_object().unwrap()), 5 + 10);
        let put = json!({"Item": item, "ConditionExpression": "attribute_not_exists(Id)"});
        assert_eq!(request_size(put.as_object().unwrap()), item_size(item));
    }

    #[test]
    fn numbers_in_keys_are_one_item_by_value() {
        let a = json!({"Id": {"N": "1.50"}});
        let b = json!({"Id": {"N": "1.5"}});
        let c = json!({"Id": {"S": "1.5"}});
        let id = |v: &Value| ItemId::new("t", v.as_object().unwrap());
        assert_eq!(id(&a), id(&b));
        assert_ne!(id(&a), id(&c));
        assert_ne!(id(&a), ItemId::new("u", b.as_object().unwrap()));
    }

    #[test]
    fn items_round_trip_between_json_and_the_sdk() {
        let v = json!({
            "s": {"S": "x"}, "n": {"N": "1.50"}, "b": {"B": "AAE="}, "t": {"BOOL": true},
            "z": {"NULL": true}, "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2"]},
            "bs": {"BS": ["AAE="]}, "m": {"M": {"k": {"L": [{"S": "y"}, {"N": "2"}]}}}
        });
        let m = v.as_object().unwrap();
        let item = to_item(m).expect("every type converts");
        assert_eq!(item["n"], AttributeValue::N("1.50".into()));
        assert_eq!(&from_item(&item), m);
    }

    #[test]
    fn transact_actions_name_their_items() {
        let body = json!({"TransactItems": [
            {"Put": {"TableName": "a", "Item": {"Id": {"S": "1"}}}},
            {"ConditionCheck": {"TableName": "b", "Key": {"Id": {"S": "2"}}}},
        ]});
        let actions = transact_actions(&body);
        assert_eq!(actions.len(), 2);
        assert!(actions[0].writes && actions[0].key.is_none() && actions[0].item.is_some());
        assert!(!actions[1].writes && actions[1].table == "b");
    }
}
