//! Key schemas of user tables, key validation and canonical item identities.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, RwLock};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeyType, ScalarAttributeType};

use crate::error::{Error, Item, Result};
use crate::tables;

/// The primary key layout of a user table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySchema {
    pub hash: (String, ScalarAttributeType),
    pub range: Option<(String, ScalarAttributeType)>,
    /// The table had a stream with both images (what the change feed reads) when described.
    pub streamed: bool,
}

impl KeySchema {
    /// Names of the key attributes.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.hash.0.as_str()).chain(self.range.iter().map(|r| r.0.as_str()))
    }

    pub fn is_key_attribute(&self, name: &str) -> bool {
        self.names().any(|n| n == name)
    }

    /// Checks that `key` has exactly the key attributes, with the right types.
    pub fn validate_key(&self, table: &str, key: &Item) -> Result<()> {
        if key.is_empty() {
            return Err(Error::invalid(format!(
                "the key for table {table} is empty"
            )));
        }
        for (name, ty) in std::iter::once(&self.hash).chain(self.range.iter()) {
            match key.get(name) {
                None => {
                    return Err(Error::invalid(format!(
                        "the key for table {table} is missing key attribute {name}"
                    )));
                }
                Some(v) => check_type(table, name, ty, v)?,
            }
        }
        if let Some(extra) = key.keys().find(|k| !self.is_key_attribute(k)) {
            return Err(Error::invalid(format!(
                "the key for table {table} has attribute {extra}, which is not a key attribute"
            )));
        }
        Ok(())
    }

    /// Extracts the key of a full item (a put), checking the key attributes are present and typed.
    pub fn key_of(&self, table: &str, item: &Item) -> Result<Item> {
        let mut key = Item::new();
        for (name, ty) in std::iter::once(&self.hash).chain(self.range.iter()) {
            match item.get(name) {
                None => {
                    return Err(Error::invalid(format!(
                        "the item for table {table} must contain the key attribute {name}"
                    )));
                }
                Some(v) => {
                    check_type(table, name, ty, v)?;
                    key.insert(name.clone(), v.clone());
                }
            }
        }
        Ok(key)
    }

    /// A key of this schema that no real item is expected to have: used to evaluate a condition
    /// expression against an absent item.
    pub fn phantom_key(&self) -> Item {
        let id = uuid::Uuid::new_v4();
        let value = |ty: &ScalarAttributeType| match ty {
            ScalarAttributeType::N => {
                let n = format!(
                    "-{}.{}",
                    id.as_u128() % 1_000_000_007,
                    id.as_u128() % 999_983
                );
                AttributeValue::N(canonical_number(&n).unwrap_or(n))
            }
            ScalarAttributeType::B => AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(
                [b"\0_TxPhantom_".as_slice(), id.as_bytes()].concat(),
            )),
            _ => AttributeValue::S(format!("\u{0}_TxPhantom_{id}")),
        };
        let mut key = Item::new();
        key.insert(self.hash.0.clone(), value(&self.hash.1));
        if let Some((n, t)) = &self.range {
            key.insert(n.clone(), value(t));
        }
        key
    }
}

fn check_type(table: &str, name: &str, ty: &ScalarAttributeType, v: &AttributeValue) -> Result<()> {
    let ok = match ty {
        ScalarAttributeType::S => matches!(v, AttributeValue::S(s) if !s.is_empty()),
        ScalarAttributeType::N => {
            matches!(v, AttributeValue::N(n) if normalize_number(n).is_some())
        }
        ScalarAttributeType::B => matches!(v, AttributeValue::B(b) if !b.as_ref().is_empty()),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "key attribute {name} of table {table} must be a non-empty value of type {}",
            ty.as_str()
        )))
    }
}

/// A cache of user tables' key schemas (one DescribeTable per table per manager).
#[derive(Debug, Default)]
pub(crate) struct SchemaCache {
    map: RwLock<HashMap<String, Arc<KeySchema>>>,
}

impl SchemaCache {
    /// The schema if it was fetched before.
    pub fn cached(&self, table: &str) -> Option<Arc<KeySchema>> {
        self.map
            .read()
            .expect("schema cache poisoned")
            .get(table)
            .cloned()
    }

    pub async fn get(&self, client: &Client, table: &str) -> Result<Arc<KeySchema>> {
        if let Some(s) = self.map.read().expect("schema cache poisoned").get(table) {
            return Ok(s.clone());
        }
        let desc = tables::describe(client, table)
            .await?
            .ok_or_else(|| Error::table_not_found(table))?;
        let ty = |name: &str| {
            desc.attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == name)
                .map(|d| d.attribute_type().clone())
                .unwrap_or(ScalarAttributeType::S)
        };
        let mut hash = None;
        let mut range = None;
        for k in desc.key_schema() {
            let entry = (k.attribute_name().to_string(), ty(k.attribute_name()));
            match k.key_type() {
                KeyType::Hash => hash = Some(entry),
                KeyType::Range => range = Some(entry),
                _ => {}
            }
        }
        let hash =
            hash.ok_or_else(|| Error::invariant(format!("table {table} has no hash key")))?;
        let streamed = desc.stream_specification().is_some_and(|s| {
            s.stream_enabled()
                && s.stream_view_type()
                    == Some(&aws_sdk_dynamodb::types::StreamViewType::NewAndOldImages)
        });
        let schema = Arc::new(KeySchema {
            hash,
            range,
            streamed,
        });
        self.map
            .write()
            .expect("schema cache poisoned")
            .insert(table.to_string(), schema.clone());
        Ok(schema)
    }
}

/// The identity of an item: its table and a canonical rendering of its key, so that keys that
/// DynamoDB considers equal (`"1"` and `"1.0"` as numbers) compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ItemRef {
    pub table: String,
    pub key: String,
}

impl ItemRef {
    pub fn new(table: &str, key: &Item) -> ItemRef {
        let mut names: Vec<&String> = key.keys().collect();
        names.sort();
        let mut s = String::new();
        for n in names {
            let _ = write!(s, "{}={};", n.len(), n);
            canonical(&key[n], &mut s);
        }
        ItemRef {
            table: table.to_string(),
            key: s,
        }
    }
}

fn canonical(v: &AttributeValue, out: &mut String) {
    match v {
        AttributeValue::S(s) => {
            let _ = write!(out, "S{}:{}", s.len(), s);
        }
        AttributeValue::N(n) => {
            let _ = write!(out, "N{}", normalize_number(n).unwrap_or_else(|| n.clone()));
        }
        AttributeValue::B(b) => {
            out.push('B');
            for byte in b.as_ref() {
                let _ = write!(out, "{byte:02x}");
            }
        }
        other => {
            let _ = write!(out, "?{other:?}");
        }
    }
}

// Numbers. DynamoDB keeps every number in one canonical form and answers with that form, whatever
// spelling was written (`1.50` comes back as `1.5`, `007` as `7`, `1.5E2` as `150`); DynamoDB Local
// does so only for some writes. So the library never compares a number it wrote with one DynamoDB
// returned as text: it compares them as numbers, and writes the numbers it makes in canonical form.

/// A DynamoDB number taken apart: sign, significant digits (no leading or trailing zeros, empty for
/// zero) and exponent, so that the value is `digits × 10^exp`. `None` if `n` is not a number.
pub(crate) fn decompose(n: &str) -> Option<(bool, String, i64)> {
    let n = n.trim();
    let (neg, rest) = match n.as_bytes().first()? {
        b'-' => (true, &n[1..]),
        b'+' => (false, &n[1..]),
        _ => (false, n),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = format!("{int}{frac}");
    let mut exp = exp.checked_sub(frac.len() as i64)?;
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some((false, String::new(), 0));
    }
    let trimmed = digits.trim_end_matches('0');
    exp = exp.checked_add((digits.len() - trimmed.len()) as i64)?;
    Some((neg, trimmed.to_string(), exp))
}

/// Canonical form of a DynamoDB number for comparisons (`"1.50"`, `"15e-1"` and `"+1.5"` all give
/// `"15e-1"`), or `None` if `n` is not a number.
pub(crate) fn normalize_number(n: &str) -> Option<String> {
    let (neg, digits, exp) = decompose(n)?;
    if digits.is_empty() {
        return Some("0".into());
    }
    Some(format!("{}{digits}e{exp}", if neg { "-" } else { "" }))
}

/// The text DynamoDB answers with for the number `n` (leading and trailing zeros trimmed, no
/// exponent, no `+`, `-0` is `0`: `"1.50"` → `"1.5"`, `"1.0E+2"` → `"100"`), or `None` if `n` is not
/// a number. Range and precision (38 digits) are not checked: DynamoDB rejects such numbers when
/// they are written.
pub(crate) fn canonical_number(n: &str) -> Option<String> {
    let (neg, digits, exp) = decompose(n)?;
    if digits.is_empty() {
        return Some("0".into());
    }
    let sign = if neg { "-" } else { "" };
    let point = digits.len() as i64 + exp; // digits before the decimal point
    Some(if exp >= 0 {
        format!("{sign}{digits}{}", "0".repeat(exp as usize))
    } else if point > 0 {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    } else {
        format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
    })
}

/// True when `a` and `b` are the same number, however spelled (both must be numbers).
pub(crate) fn same_number(a: &str, b: &str) -> bool {
    match (decompose(a), decompose(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_normalize() {
        assert_eq!(normalize_number("1"), normalize_number("1.0"));
        assert_eq!(normalize_number("1.50"), normalize_number("15e-1"));
        assert_eq!(normalize_number("+1.5"), normalize_number("1.5"));
        assert_eq!(normalize_number("0.000"), Some("0".into()));
        assert_eq!(normalize_number("-0"), Some("0".into()));
        assert_ne!(normalize_number("1"), normalize_number("-1"));
        assert_ne!(normalize_number("10"), normalize_number("1"));
        assert_eq!(normalize_number("abc"), None);
        assert_eq!(normalize_number("."), None);
        assert_eq!(normalize_number("1e"), None);
    }

    #[test]
    fn canonical_numbers_are_what_dynamodb_answers() {
        let c = |n: &str| canonical_number(n);
        assert_eq!(c("1.50").as_deref(), Some("1.5"));
        assert_eq!(c("0.0").as_deref(), Some("0"));
        assert_eq!(c("-0").as_deref(), Some("0"));
        assert_eq!(c("-0.000").as_deref(), Some("0"));
        assert_eq!(c("1e2").as_deref(), Some("100"));
        assert_eq!(c("100").as_deref(), Some("100"));
        assert_eq!(c("0001").as_deref(), Some("1"));
        assert_eq!(c("1.0E+2").as_deref(), Some("100"));
        assert_eq!(c("1.5E2").as_deref(), Some("150"));
        assert_eq!(c("+7").as_deref(), Some("7"));
        assert_eq!(c("-1.0e-5").as_deref(), Some("-0.00001"));
        assert_eq!(c(".5").as_deref(), Some("0.5"));
        assert_eq!(c("5.").as_deref(), Some("5"));
        assert_eq!(c("0.000123").as_deref(), Some("0.000123"));
        assert_eq!(
            c("1700000000000.120000").as_deref(),
            Some("1700000000000.12")
        );
        assert_eq!(c("1700000000000.000000").as_deref(), Some("1700000000000"));
        assert_eq!(c("1E-3").as_deref(), Some("0.001"));
        // 38 significant digits survive, only the zeros around them go.
        assert_eq!(
            c("001234567890123456789012345678901234567.80").as_deref(),
            Some("1234567890123456789012345678901234567.8")
        );
        assert_eq!(
            c("12345678901234567890123456789012345678").as_deref(),
            Some("12345678901234567890123456789012345678")
        );
        assert_eq!(
            c("9.9999999999999999999999999999999999999E+125").as_deref(),
            Some(format!("99999999999999999999999999999999999999{}", "0".repeat(88)).as_str())
        );
        for bad in ["", "-", ".", "1e", "abc", "1.2.3", "1e+", "--1", "0x10"] {
            assert_eq!(c(bad), None, "{bad:?}");
        }
        // Canonical text is a fixed point, and equal numbers have one text.
        for n in [
            "1.50",
            "0.0",
            "-0",
            "1e2",
            "100",
            "0001",
            "1.0E+2",
            "-12.340e-7",
        ] {
            let once = c(n).unwrap();
            assert_eq!(c(&once).as_deref(), Some(once.as_str()));
            assert!(same_number(n, &once));
        }
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(same_number("1.50", "1.5"));
        assert!(same_number("007", "7"));
        assert!(same_number("-0", "0.000"));
        assert!(same_number("1.0E+2", "100"));
        assert!(same_number("1700000000000.120000", "1700000000000.12"));
        assert!(!same_number("1.5", "1.05"));
        assert!(!same_number("10", "1"));
        assert!(!same_number("-1", "1"));
        assert!(!same_number("x", "x"));
    }

    #[test]
    fn item_refs_ignore_number_spelling_and_key_order() {
        let mut a = Item::new();
        a.insert("h".into(), AttributeValue::S("x".into()));
        a.insert("r".into(), AttributeValue::N("1".into()));
        let mut b = Item::new();
        b.insert("r".into(), AttributeValue::N("1.00".into()));
        b.insert("h".into(), AttributeValue::S("x".into()));
        assert_eq!(ItemRef::new("t", &a), ItemRef::new("t", &b));
        assert_ne!(ItemRef::new("t", &a), ItemRef::new("u", &b));
        b.insert("r".into(), AttributeValue::N("2".into()));
        assert_ne!(ItemRef::new("t", &a), ItemRef::new("t", &b));
    }
}
