//! Output helpers of `dynamodb-tx`: durations, times, keys, and plain-text tables.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_transactions::Item;
use serde_json::{Value, json};

/// Parses a duration the way `humantime` does (`500ms`, `30s`, `5m`, `2h`, `1d`, `1h30m`,
/// `2 days`), or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| format!("invalid duration {s:?}: too large"));
    }
    humantime::parse_duration(s).map_err(|e| {
        format!(
            "invalid duration {s:?}: {e}; write a number and a unit, like 30s, 5m, 2h, 1d or 1h30m"
        )
    })
}

/// `1h 2m`, `5m`, `30s`, `250ms`: rounded to whole seconds from one second on, to whole minutes from
/// one hour on and to whole hours from one day on, for people reading ages.
pub fn fmt_duration(d: Duration) -> String {
    let unit = match d.as_secs() {
        0 => Duration::from_millis(1),
        1..3_600 => Duration::from_secs(1),
        3_600..86_400 => Duration::from_secs(60),
        _ => Duration::from_secs(3_600),
    };
    let rounded = unit * (d.as_nanos() / unit.as_nanos()) as u32;
    humantime::format_duration(rounded).to_string()
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `2025-01-31T12:00:00Z` from epoch milliseconds.
pub fn fmt_utc(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// `5m ago` (or `in 5m` for future times).
pub fn fmt_ago(ms: u64) -> String {
    let now = now_ms();
    if ms == 0 {
        return "-".into();
    }
    if ms > now {
        return format!("in {}", fmt_duration(Duration::from_millis(ms - now)));
    }
    format!("{} ago", fmt_duration(Duration::from_millis(now - ms)))
}

/// A key as `Id="a", Sort=3`, attributes in name order.
pub fn fmt_key(key: &Item) -> String {
    let sorted: BTreeMap<_, _> = key.iter().collect();
    sorted
        .into_iter()
        .map(|(k, v)| format!("{k}={}", fmt_value(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_value(v: &AttributeValue) -> String {
    match v {
        AttributeValue::S(s) => format!("{s:?}"),
        AttributeValue::N(n) => n.clone(),
        AttributeValue::B(b) => format!("<{} bytes>", b.as_ref().len()),
        AttributeValue::Bool(b) => b.to_string(),
        AttributeValue::Null(_) => "null".into(),
        other => format!("{other:?}"),
    }
}

/// A key in DynamoDB JSON (`{"Id": {"S": "a"}}`).
pub fn key_json(key: &Item) -> Value {
    let sorted: BTreeMap<_, _> = key.iter().collect();
    let mut m = serde_json::Map::new();
    for (k, v) in sorted {
        m.insert(k.clone(), value_json(v));
    }
    Value::Object(m)
}

fn value_json(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": hex(b.as_ref()) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        other => json!({ "?": format!("{other:?}") }),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A borderless table with aligned columns (two spaces between them), drawn by `comfy-table`.
pub struct Table(comfy_table::Table);

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::NOTHING)
            .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
            .set_header(headers.to_vec());
        for c in t.column_iter_mut() {
            c.set_padding((0, 2));
        }
        Table(t)
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.0.add_row(cells);
    }

    /// The table, each line ending with a newline and no trailing spaces.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in self.0.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("2 days"), Ok(Duration::from_secs(172_800)));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(fmt_duration(Duration::from_secs(3_720)), "1h 2m");
        assert_eq!(fmt_duration(Duration::from_millis(3_721_500)), "1h 2m");
        assert_eq!(fmt_duration(Duration::from_millis(61_500)), "1m 1s");
        assert_eq!(fmt_duration(Duration::from_millis(20)), "20ms");
        assert_eq!(fmt_duration(Duration::from_secs(90_061)), "1day 1h");
    }

    #[test]
    fn utc() {
        assert_eq!(fmt_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(fmt_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(fmt_utc(1_735_689_599_000), "2024-12-31T23:59:59Z");
    }

    #[test]
    fn tables_align() {
        let mut t = Table::new(&["A", "BB"]);
        t.row(vec!["xxx".into(), "y".into()]);
        t.row(vec!["z".into(), "".into()]);
        assert_eq!(t.render(), "A    BB\nxxx  y\nz\n");
    }
}
