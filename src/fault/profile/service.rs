//! DynamoDB's own time per request, which the profile shows in place of DynamoDB Local's.
//!
//! DynamoDB Local spends its time per item written, one transaction at a time, and its per-request
//! latency is bimodal on a small machine; DynamoDB's latency follows round trips and grows only
//! slowly with a request's items. The figures below are public p50s measured from AWS Lambda in
//! the table's region (Alex DeBrie, "DynamoDB Transactions Performance Testing", 2020, 400 calls
//! each: `PutItem` 7.55 ms; `BatchWriteItem` of 5 and 25 items 8.14 and 10.2 ms;
//! `TransactWriteItems` of 5 and 25 items 25.3 and 32.1 ms), less the profile's default 5 ms
//! round trip, as a base plus a cost per item fitted through the two sizes.

use std::time::Duration;

use serde_json::Value;

/// A single-item request (`GetItem`, `PutItem`, `UpdateItem`, `DeleteItem`) and everything that
/// is not a batch or a transaction (`Query`, `Scan`, `DescribeTable`): `PutItem`'s figure. Reads
/// are modelled as writes, which is probably pessimistic for them.
const SINGLE_US: f64 = 2_550.0;
/// `BatchWriteItem`, `BatchGetItem`: 2.6 ms + 0.10 ms per item.
const BATCH_BASE_US: f64 = 2_625.0;
const BATCH_PER_ITEM_US: f64 = 103.0;
/// `TransactWriteItems`, `TransactGetItems`: 18.6 ms + 0.34 ms per action. Transactional reads
/// are modelled as writes (no public figure for them).
const TRANSACT_BASE_US: f64 = 18_600.0;
const TRANSACT_PER_ACTION_US: f64 = 340.0;

/// How long DynamoDB takes to serve `op` with request body `body`, network excluded.
pub(super) fn service_time(op: &str, body: &Value) -> Duration {
    let us = match op {
        "TransactWriteItems" | "TransactGetItems" => {
            TRANSACT_BASE_US + TRANSACT_PER_ACTION_US * actions(body) as f64
        }
        "BatchWriteItem" | "BatchGetItem" => {
            BATCH_BASE_US + BATCH_PER_ITEM_US * batch_items(op, body) as f64
        }
        _ => SINGLE_US,
    };
    Duration::from_micros(us as u64)
}

fn actions(body: &Value) -> usize {
    body.get("TransactItems")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// Items of a `BatchWriteItem` (requests of every table) or keys of a `BatchGetItem`.
fn batch_items(op: &str, body: &Value) -> usize {
    let Some(tables) = body.get("RequestItems").and_then(Value::as_object) else {
        return 0;
    };
    tables
        .values()
        .map(|t| {
            let list = if op == "BatchGetItem" {
                t.get("Keys")
            } else {
                Some(t)
            };
            list.and_then(Value::as_array).map_or(0, Vec::len)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }

    #[test]
    fn with_the_default_round_trip_the_public_figures_come_back() {
        let rtt = 5.0;
        let twi = |n: usize| {
            let items: Vec<Value> = (0..n).map(|_| json!({"Put": {}})).collect();
            ms(service_time(
                "TransactWriteItems",
                &json!({ "TransactItems": items }),
            )) + rtt
        };
        assert!((twi(5) - 25.3).abs() < 0.1, "{}", twi(5));
        assert!((twi(25) - 32.1).abs() < 0.1, "{}", twi(25));
        let bwi = |n: usize| {
            let items: Vec<Value> = (0..n).map(|_| json!({"PutRequest": {}})).collect();
            ms(service_time(
                "BatchWriteItem",
                &json!({"RequestItems": {"a": items.clone()}}),
            )) + rtt
        };
        assert!((bwi(5) - 8.14).abs() < 0.1, "{}", bwi(5));
        assert!((bwi(25) - 10.2).abs() < 0.1, "{}", bwi(25));
        assert!((ms(service_time("PutItem", &json!({}))) + rtt - 7.55).abs() < 0.01);
    }

    #[test]
    fn batch_reads_count_keys_across_tables() {
        let body = json!({"RequestItems": {
            "a": {"Keys": [{}, {}, {}]},
            "b": {"Keys": [{}]}
        }});
        let four = service_time("BatchGetItem", &body);
        assert_eq!(four, Duration::from_micros(2_625 + 4 * 103));
        let writes = json!({"RequestItems": {"a": [{}, {}], "b": [{}]}});
        assert_eq!(
            service_time("BatchWriteItem", &writes),
            Duration::from_micros(2_625 + 3 * 103)
        );
    }
}
