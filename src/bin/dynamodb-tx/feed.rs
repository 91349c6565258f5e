//! `dynamodb-tx feed`: the committed changes of user tables, one JSON object a line.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use clap::Args;
use dynamodb_transactions::Item;
use dynamodb_transactions::feed::{Change, ChangeFeed, ItemChange, TableCheckpoint};
use serde_json::{Map, Value, json};

use crate::Ctx;
use crate::error::{CliResult, explain};
use crate::output::parse_duration;

#[derive(Args, Debug)]
pub struct FeedArgs {
    /// A user table to follow (repeat for more); its stream must be on, with NEW_AND_OLD_IMAGES.
    #[arg(long = "table", required = true, value_name = "TABLE")]
    tables: Vec<String>,
    /// Without a saved position, begin at the oldest record the streams keep (default: changes
    /// from now on).
    #[arg(long)]
    from_start: bool,
    /// Exit once no stream record arrived for this long and every shard was read to its end
    /// (default: follow for ever).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    until_idle: Option<Duration>,
    /// Keep the position in this table (created if missing), saved after every line printed, and
    /// start from it.
    #[arg(long, value_name = "TABLE")]
    checkpoint_table: Option<String>,
    /// The feed's name in the checkpoint table.
    #[arg(
        long,
        default_value = "dynamodb-tx-feed",
        requires = "checkpoint_table"
    )]
    checkpoint_name: String,
    /// Wait this long before reading a shard again after it returned nothing.
    #[arg(long, value_parser = parse_duration, default_value = "500ms", value_name = "DURATION")]
    poll_interval: Duration,
}

pub async fn run(ctx: &Ctx, args: &FeedArgs) -> CliResult<u8> {
    let mut b = ChangeFeed::builder(ctx.client.clone())
        .transactions_table(&ctx.cli.transactions_table)
        .streams_client(aws_sdk_dynamodbstreams::Client::new(&ctx.sdk))
        .poll_interval(args.poll_interval);
    for t in &args.tables {
        b = b.table(t);
    }
    if args.from_start {
        b = b.from_start();
    }
    if let Some(idle) = args.until_idle {
        b = b.stop_when_idle(idle);
    }
    if let Some(table) = &args.checkpoint_table {
        let c = TableCheckpoint::new(ctx.client.clone(), table, &args.checkpoint_name);
        c.create_table().await.map_err(|e| explain(ctx, &e))?;
        b = b.checkpoint(c);
    }
    let mut feed = b.build().map_err(|e| explain(ctx, &e))?;
    while let Some(change) = feed.next().await.map_err(|e| explain(ctx, &e))? {
        outln!("{}", change_json(&change));
        if args.checkpoint_table.is_some() {
            feed.checkpoint().await.map_err(|e| explain(ctx, &e))?;
        }
    }
    Ok(0)
}

/// `{"transaction": id | null, "changes": [{"table", "key", "before", "after"}]}`.
pub fn change_json(change: &Change) -> Value {
    let changes: Vec<Value> = change.items().iter().map(item_change_json).collect();
    json!({
        "transaction": change.transaction_id().map(|id| id.as_str().to_string()),
        "changes": changes,
    })
}

fn item_change_json(c: &ItemChange) -> Value {
    json!({
        "table": c.table,
        "key": item_json(&c.key),
        "before": c.before.as_ref().map(item_json),
        "after": c.after.as_ref().map(item_json),
    })
}

/// An item in DynamoDB JSON, as the AWS CLI prints it; attributes in name order.
fn item_json(item: &Item) -> Value {
    let mut names: Vec<&String> = item.keys().collect();
    names.sort();
    let mut m = Map::new();
    for n in names {
        m.insert(n.clone(), value_json(&item[n]));
    }
    Value::Object(m)
}

fn value_json(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": base64(b.as_ref()) }),
        AttributeValue::Ss(s) => json!({ "SS": s }),
        AttributeValue::Ns(s) => json!({ "NS": s }),
        AttributeValue::Bs(s) => {
            json!({ "BS": s.iter().map(|b| base64(b.as_ref())).collect::<Vec<_>>() })
        }
        AttributeValue::M(m) => json!({ "M": item_json(m) }),
        AttributeValue::L(l) => json!({ "L": l.iter().map(value_json).collect::<Vec<_>>() }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        other => json!({ "?": format!("{other:?}") }),
    }
}

/// Standard base64 with padding (how the AWS CLI prints binary values).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_as_the_aws_cli_prints_it() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
    }

    #[test]
    fn values_in_dynamodb_json() {
        let mut m = Item::new();
        m.insert("n".into(), AttributeValue::N("1".into()));
        let v = value_json(&AttributeValue::L(vec![
            AttributeValue::S("a".into()),
            AttributeValue::M(m),
            AttributeValue::Ss(vec!["x".into()]),
            AttributeValue::Bool(true),
        ]));
        assert_eq!(
            v,
            json!({"L": [{"S": "a"}, {"M": {"n": {"N": "1"}}}, {"SS": ["x"]}, {"BOOL": true}]})
        );
    }
}
