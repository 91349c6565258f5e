//! Client-side evaluation of conditions (`FilterExpression`, `KeyConditionExpression`), for item
//! versions DynamoDB did not evaluate itself: before-images served at `Committed`, and base items
//! re-read for a global secondary index.

use aws_sdk_dynamodb::types::AttributeValue;

use super::ast::{Cmp, Cond, Operand, PathElem};
use super::value::{num_eq, order, value_eq};
use crate::error::Item;

/// The value at `path` in `item`, if there is one.
pub(super) fn get<'i>(item: &'i Item, path: &[PathElem]) -> Option<&'i AttributeValue> {
    let (PathElem::Attr(top), rest) = path.split_first()? else {
        return None;
    };
    let mut v = item.get(top)?;
    for e in rest {
        v = match (e, v) {
            (PathElem::Attr(a), AttributeValue::M(m)) => m.get(a)?,
            (PathElem::Index(i), AttributeValue::L(l)) => l.get(*i)?,
            _ => return None,
        };
    }
    Some(v)
}

fn type_code(v: &AttributeValue) -> &'static str {
    use AttributeValue as V;
    match v {
        V::S(_) => "S",
        V::N(_) => "N",
        V::B(_) => "B",
        V::Ss(_) => "SS",
        V::Ns(_) => "NS",
        V::Bs(_) => "BS",
        V::M(_) => "M",
        V::L(_) => "L",
        V::Bool(_) => "BOOL",
        V::Null(_) => "NULL",
        _ => "?",
    }
}

fn size(v: &AttributeValue) -> Option<usize> {
    use AttributeValue as V;
    Some(match v {
        V::S(s) => s.chars().count(),
        V::B(b) => b.as_ref().len(),
        V::Ss(x) => x.len(),
        V::Ns(x) => x.len(),
        V::Bs(x) => x.len(),
        V::L(x) => x.len(),
        V::M(x) => x.len(),
        _ => return None,
    })
}

fn operand(item: &Item, o: &Operand) -> Option<AttributeValue> {
    match o {
        Operand::Value(v) => Some(v.clone()),
        Operand::Path(p) => get(item, p).cloned(),
        Operand::Size(p) => size(get(item, p)?).map(|n| AttributeValue::N(n.to_string())),
    }
}

impl Cond {
    /// Whether the condition holds for `item`.
    pub(crate) fn eval(&self, item: &Item) -> bool {
        use AttributeValue as V;
        match self {
            Cond::And(a, b) => a.eval(item) && b.eval(item),
            Cond::Or(a, b) => a.eval(item) || b.eval(item),
            Cond::Not(a) => !a.eval(item),
            Cond::Exists(p) => get(item, p).is_some(),
            Cond::NotExists(p) => get(item, p).is_none(),
            Cond::Cmp(a, op, b) => {
                // As DynamoDB: `<>` holds when an operand is missing; every other comparison fails.
                let (Some(x), Some(y)) = (operand(item, a), operand(item, b)) else {
                    return *op == Cmp::Ne;
                };
                match op {
                    Cmp::Eq => value_eq(&x, &y),
                    Cmp::Ne => !value_eq(&x, &y),
                    _ => order(&x, &y).is_some_and(|o| match op {
                        Cmp::Lt => o.is_lt(),
                        Cmp::Le => o.is_le(),
                        Cmp::Gt => o.is_gt(),
                        _ => o.is_ge(),
                    }),
                }
            }
            Cond::Between(a, lo, hi) => {
                let (Some(x), Some(l), Some(h)) =
                    (operand(item, a), operand(item, lo), operand(item, hi))
                else {
                    return false;
                };
                order(&x, &l).is_some_and(|o| o.is_ge()) && order(&x, &h).is_some_and(|o| o.is_le())
            }
            Cond::In(a, list) => {
                let Some(x) = operand(item, a) else {
                    return false;
                };
                list.iter()
                    .filter_map(|o| operand(item, o))
                    .any(|y| value_eq(&x, &y))
            }
            Cond::Type(p, t) => match (get(item, p), operand(item, t)) {
                (Some(v), Some(V::S(t))) => type_code(v) == t,
                _ => false,
            },
            Cond::BeginsWith(p, o) => match (get(item, p), operand(item, o)) {
                (Some(V::S(s)), Some(V::S(pre))) => s.starts_with(pre.as_str()),
                (Some(V::B(b)), Some(V::B(pre))) => b.as_ref().starts_with(pre.as_ref()),
                _ => false,
            },
            Cond::Contains(p, o) => match (get(item, p), operand(item, o)) {
                (Some(V::S(s)), Some(V::S(sub))) => s.contains(sub.as_str()),
                (Some(V::Ss(set)), Some(V::S(e))) => set.contains(&e),
                (Some(V::Ns(set)), Some(V::N(e))) => set.iter().any(|x| num_eq(x, &e)),
                (Some(V::Bs(set)), Some(V::B(e))) => set.iter().any(|x| x.as_ref() == e.as_ref()),
                (Some(V::L(l)), Some(e)) => l.iter().any(|x| value_eq(x, &e)),
                _ => false,
            },
        }
    }
}

/// Whether the condition `expr` holds for `item` as evaluated here (`None`: it does not parse).
/// For the project's differential tests against DynamoDB Local (`testing`).
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub fn condition_holds(
    item: &Item,
    expr: &str,
    names: Option<&std::collections::HashMap<String, String>>,
    values: Option<&std::collections::HashMap<String, AttributeValue>>,
) -> Option<bool> {
    let c = super::parser::parse_condition(expr, names, values).ok()?;
    Some(c.eval(item))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::parser::parse_condition as parse;
    use super::*;

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.into())
    }
    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    #[test]
    fn evaluates_conditions() {
        let values = HashMap::from([
            (":a".to_string(), n("5")),
            (":b".to_string(), s("ab")),
            (":t".to_string(), s("N")),
            (":lo".to_string(), n("1")),
            (":hi".to_string(), n("9")),
        ]);
        let names = HashMap::from([("#c".to_string(), "count".to_string())]);
        let item: Item = HashMap::from([
            ("count".to_string(), n("5.0")),
            ("name".to_string(), s("abc")),
            (
                "m".to_string(),
                AttributeValue::M(HashMap::from([(
                    "l".to_string(),
                    AttributeValue::L(vec![n("1"), s("ab")]),
                )])),
            ),
        ]);
        let t = |e: &str| parse(e, Some(&names), Some(&values)).unwrap().eval(&item);
        assert!(t("#c = :a"));
        assert!(t("#c BETWEEN :lo AND :hi AND begins_with(name, :b)"));
        assert!(!t("NOT (#c >= :a)"));
        assert!(t("attribute_type(#c, :t) and contains(m.l, :b)"));
        assert!(t("m.l[1] = :b OR missing = :a"));
        assert!(t("size(name) < :a AND #c IN (:lo, :a)"));
        assert!(!t("missing < :a"));
        assert!(t("missing <> :a"));
        assert!(t("attribute_not_exists(m.x) AND attribute_exists(m.l[0])"));
        assert!(parse("a = ", Some(&names), Some(&values)).is_err());
        assert!(parse("a = :zz", Some(&names), Some(&values)).is_err());
        assert!(parse("(a = :a", Some(&names), Some(&values)).is_err());
        let mut attrs = Vec::new();
        parse("#c = :a AND size(m.l) > :lo", Some(&names), Some(&values))
            .unwrap()
            .attributes(&mut attrs);
        assert_eq!(attrs, vec!["count", "m"]);
    }
}
