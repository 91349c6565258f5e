//! Output helpers of `dynamodb-tx`: durations, times, keys, and plain-text tables.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_transactions::Item;
use serde_json::{Value, json};

/// Parses `500ms`, `30s`, `5m`, `2h`, `1d`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("invalid duration {s:?}: expected a number and a unit, like 30s, 5m, 2h or 1d")
    })?;
    let ms = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(format!(
                "invalid duration unit {other:?} in {s:?}: use ms, s, m, h or d"
            ));
        }
    };
    n.checked_mul(ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration {s:?} is too large"))
}

/// `1d2h`, `5m`, `30s`, `250ms`.
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let s = ms / 1_000;
    let (d, h, m, s) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    let mut out = String::new();
    for (v, u) in [(d, "d"), (h, "h"), (m, "m"), (s, "s")] {
        if v > 0 && out.len() < 5 {
            out.push_str(&format!("{v}{u}"));
        }
    }
    out
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `2025-01-31T12:00:00Z` from epoch milliseconds.
pub fn fmt_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem / 60 % 60,
        rem % 60
    )
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

/// A plain-text table with aligned columns.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(c.chars().count());
                }
            }
        }
        let line = |cells: Vec<&str>| {
            let n = cells.len();
            let mut s = String::new();
            for (i, c) in cells.into_iter().enumerate() {
                if i + 1 == n {
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    s.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
                }
            }
            s.trim_end().to_string()
        };
        let mut out = line(self.headers.clone());
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r.iter().map(String::as_str).collect()));
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
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("m").is_err());
        assert_eq!(fmt_duration(Duration::from_secs(3_720)), "1h2m");
        assert_eq!(fmt_duration(Duration::from_millis(20)), "20ms");
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
        assert_eq!(t.render(), "A    BB\nxxx  y\n");
    }
}
