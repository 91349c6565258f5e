//! Applying a parsed `ProjectionExpression` to an item, as DynamoDB does.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use aws_sdk_dynamodb::types::AttributeValue;

use super::ast::{Path, PathElem};
use crate::error::Item;

/// The parts of `item` that `paths` select (paths to nothing are left out).
pub(crate) fn project(item: &Item, paths: &[Path]) -> Item {
    let mut out = Item::new();
    for path in paths {
        let PathElem::Attr(top) = &path[0] else {
            continue;
        };
        let Some(v) = item.get(top) else { continue };
        if let Some(sub) = extract(v, &path[1..]) {
            merge_into(out.entry(top.clone()), sub);
        }
    }
    out
}

fn extract(v: &AttributeValue, rest: &[PathElem]) -> Option<AttributeValue> {
    let Some((first, tail)) = rest.split_first() else {
        return Some(v.clone());
    };
    match (first, v) {
        (PathElem::Attr(a), AttributeValue::M(m)) => {
            let inner = extract(m.get(a)?, tail)?;
            Some(AttributeValue::M(HashMap::from([(a.clone(), inner)])))
        }
        (PathElem::Index(i), AttributeValue::L(l)) => {
            let inner = extract(l.get(*i)?, tail)?;
            Some(AttributeValue::L(vec![inner]))
        }
        _ => None,
    }
}

fn merge_into(slot: Entry<'_, String, AttributeValue>, v: AttributeValue) {
    match slot {
        Entry::Vacant(e) => {
            e.insert(v);
        }
        Entry::Occupied(mut e) => match (e.get_mut(), v) {
            (AttributeValue::M(a), AttributeValue::M(b)) => {
                for (k, v) in b {
                    merge_into(a.entry(k), v);
                }
            }
            (AttributeValue::L(a), AttributeValue::L(b)) => a.extend(b),
            (slot, v) => *slot = v,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::parser::parse_projection;
    use super::*;

    #[test]
    fn projections() {
        let item: Item = HashMap::from([
            ("a".to_string(), AttributeValue::S("x".into())),
            (
                "m".to_string(),
                AttributeValue::M(HashMap::from([
                    ("p".to_string(), AttributeValue::N("1".into())),
                    ("q".to_string(), AttributeValue::N("2".into())),
                ])),
            ),
            (
                "l".to_string(),
                AttributeValue::L(vec![
                    AttributeValue::N("0".into()),
                    AttributeValue::N("1".into()),
                ]),
            ),
        ]);
        let names = HashMap::from([("#m".to_string(), "m".to_string())]);
        let p = parse_projection("a, #m.p, l[1], missing", Some(&names)).unwrap();
        let out = project(&item, &p);
        assert_eq!(out.len(), 3);
        assert_eq!(
            out["m"],
            AttributeValue::M(HashMap::from([(
                "p".to_string(),
                AttributeValue::N("1".into())
            )]))
        );
        assert_eq!(
            out["l"],
            AttributeValue::L(vec![AttributeValue::N("1".into())])
        );
    }
}
