//! Client-side application of an `UpdateExpression` to an item: the item DynamoDB would leave, or
//! the certainty that DynamoDB would reject the update, or "unsure" for what this evaluator does
//! not model exactly. Groundwork for rolling writes forward after the commit point (PROTOCOL.md,
//! "Roll-forward"), where a write DynamoDB could still reject after the decision must never be
//! left for later: only `Applied::Item` is a promise. `tests/transaction/after_image.rs` checks
//! every rule against DynamoDB Local, case by case and on random updates.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::ast::{Action, Path, PathElem, SetOperand, SetValue};
use super::eval::get;
use super::parser::parse_update;
use super::value::{num_add, num_eq};
use crate::error::Item;

/// What applying an update expression to an item gives.
#[derive(Debug, Clone)]
pub enum Applied {
    /// DynamoDB accepts the update and leaves exactly this item (numbers in canonical form).
    Item(Item),
    /// DynamoDB rejects the update (with a `ValidationException`), for this reason.
    Rejected(&'static str),
    /// Outside what is evaluated with certainty here: only DynamoDB can tell.
    Unsure(&'static str),
}

/// Items this close to DynamoDB's 400 KB limit are left to DynamoDB (`value_size` is exact only
/// to a byte or so per number).
const SIZE_MARGIN: usize = 1024;

/// Applies `expr` (with its placeholders) to `item`, the whole current item (for an absent item:
/// its key attributes alone, which is what `UpdateItem` starts from). Updates of key attributes are
/// the caller's to refuse.
pub fn apply_update(
    item: &Item,
    expr: &str,
    names: Option<&HashMap<String, String>>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> Applied {
    let Ok(actions) = parse_update(expr, names, values) else {
        return Applied::Unsure("the expression does not parse here");
    };
    match evaluate(item, &actions) {
        Ok(after) => {
            let size = crate::request::item_size(&after);
            if size + SIZE_MARGIN > crate::request::MAX_ITEM_BYTES {
                Applied::Unsure("the item would be close to DynamoDB's size limit")
            } else {
                Applied::Item(after)
            }
        }
        Err(e) => e,
    }
}

fn evaluate(item: &Item, actions: &[Action]) -> Result<Item, Applied> {
    check_paths(actions)?;
    // Every operand reads the item as it was before the update: compute every new value first.
    let mut writes: Vec<(&Path, Option<AttributeValue>)> = Vec::new();
    for a in actions {
        let v = match a {
            Action::Set(_, v) => Some(set_value(item, v)?),
            Action::Remove(_) => None,
            Action::Add(p, v) => add(get(item, p), v)?,
            Action::Delete(p, v) => delete(get(item, p), v)?,
        };
        if matches!(a, Action::Add(..) | Action::Delete(..)) && a.path().len() > 1 {
            return Err(Applied::Unsure("ADD or DELETE of a nested attribute"));
        }
        writes.push((a.path(), v));
    }
    let mut after = item.clone();
    for (i, (path, v)) in writes.into_iter().enumerate() {
        match (v, &actions[i]) {
            (Some(v), _) => put(&mut after, path, v)?,
            // ADD and DELETE that leave nothing (DELETE of every element, or of an absent set).
            (None, Action::Delete(..)) => {
                if let Some(PathElem::Attr(a)) = path.first() {
                    after.remove(a);
                }
            }
            (None, _) => remove(&mut after, path)?,
        }
    }
    canonical_numbers(&mut after);
    Ok(after)
}

/// DynamoDB refuses two actions on overlapping paths (`a` and `a.b`, or `a` twice) and on paths
/// that treat one attribute as both a map and a list. Lists written by more than one action, or
/// past their end, shift positions in ways left to DynamoDB.
fn check_paths(actions: &[Action]) -> Result<(), Applied> {
    for (i, a) in actions.iter().enumerate() {
        for b in &actions[i + 1..] {
            let (p, q) = (a.path(), b.path());
            let common = p.iter().zip(q).take_while(|(x, y)| x == y).count();
            if common == p.len().min(q.len()) {
                return Err(Applied::Rejected("two document paths overlap"));
            }
            let kinds = (&p[common], &q[common]);
            if matches!(kinds, (PathElem::Attr(_), PathElem::Index(_)))
                || matches!(kinds, (PathElem::Index(_), PathElem::Attr(_)))
            {
                return Err(Applied::Rejected("two document paths conflict"));
            }
            if matches!(kinds, (PathElem::Index(_), PathElem::Index(_))) {
                return Err(Applied::Unsure("two actions on one list"));
            }
        }
    }
    Ok(())
}

fn operand(item: &Item, o: &SetOperand) -> Result<AttributeValue, Applied> {
    match o {
        SetOperand::Value(v) => Ok(v.clone()),
        SetOperand::Path(p) => get(item, p).cloned().ok_or(Applied::Rejected(
            "an operand refers to an attribute the item lacks",
        )),
        SetOperand::IfNotExists(p, o) => match get(item, p) {
            Some(v) => Ok(v.clone()),
            None => operand(item, o),
        },
        SetOperand::ListAppend(a, b) => match (operand(item, a)?, operand(item, b)?) {
            (AttributeValue::L(mut x), AttributeValue::L(y)) => {
                x.extend(y);
                Ok(AttributeValue::L(x))
            }
            _ => Err(Applied::Rejected("list_append of something not a list")),
        },
    }
}

fn set_value(item: &Item, v: &SetValue) -> Result<AttributeValue, Applied> {
    let (a, b, subtract) = match v {
        SetValue::One(o) => return operand(item, o),
        SetValue::Plus(a, b) => (a, b, false),
        SetValue::Minus(a, b) => (a, b, true),
    };
    match (operand(item, a)?, operand(item, b)?) {
        (AttributeValue::N(x), AttributeValue::N(y)) => num_add(&x, &y, subtract)
            .map(AttributeValue::N)
            .ok_or(Applied::Unsure(
                "arithmetic beyond 38 digits or the number range",
            )),
        _ => Err(Applied::Rejected("arithmetic on something not a number")),
    }
}

/// `ADD path value`: a number added, or a set's elements added; the value alone if absent.
fn add(
    cur: Option<&AttributeValue>,
    v: &AttributeValue,
) -> Result<Option<AttributeValue>, Applied> {
    use AttributeValue as V;
    Ok(Some(match (cur, v) {
        (_, V::N(_) | V::Ss(_) | V::Ns(_) | V::Bs(_)) if is_empty_set(v) => {
            return Err(Applied::Unsure("an empty set"));
        }
        (None, V::N(_) | V::Ss(_) | V::Ns(_) | V::Bs(_)) => v.clone(),
        (Some(V::N(x)), V::N(y)) => V::N(
            num_add(x, y, false).ok_or(Applied::Unsure("arithmetic beyond 38 digits or range"))?,
        ),
        (Some(V::Ss(x)), V::Ss(y)) => V::Ss(union(x, y, |a, b| a == b)),
        (Some(V::Ns(x)), V::Ns(y)) => V::Ns(union(x, y, |a, b| num_eq(a, b))),
        (Some(V::Bs(x)), V::Bs(y)) => V::Bs(union(x, y, |a, b| a.as_ref() == b.as_ref())),
        _ => return Err(Applied::Rejected("ADD of mismatched or unsupported types")),
    }))
}

/// `DELETE path set`: the set's elements removed; `None` when nothing is left (the attribute goes).
fn delete(
    cur: Option<&AttributeValue>,
    v: &AttributeValue,
) -> Result<Option<AttributeValue>, Applied> {
    use AttributeValue as V;
    if !matches!(v, V::Ss(_) | V::Ns(_) | V::Bs(_)) {
        return Err(Applied::Rejected("DELETE of something not a set"));
    }
    if is_empty_set(v) {
        return Err(Applied::Unsure("an empty set"));
    }
    let left = match (cur, v) {
        (None, _) => return Ok(None),
        (Some(V::Ss(x)), V::Ss(y)) => minus(x, y, |a, b| a == b).map(V::Ss),
        (Some(V::Ns(x)), V::Ns(y)) => minus(x, y, |a, b| num_eq(a, b)).map(V::Ns),
        (Some(V::Bs(x)), V::Bs(y)) => minus(x, y, |a, b| a.as_ref() == b.as_ref()).map(V::Bs),
        _ => {
            return Err(Applied::Rejected(
                "DELETE from something not a set of that type",
            ));
        }
    };
    Ok(left)
}

fn is_empty_set(v: &AttributeValue) -> bool {
    match v {
        AttributeValue::Ss(x) => x.is_empty(),
        AttributeValue::Ns(x) => x.is_empty(),
        AttributeValue::Bs(x) => x.is_empty(),
        _ => false,
    }
}

fn union<T: Clone>(x: &[T], y: &[T], eq: impl Fn(&T, &T) -> bool) -> Vec<T> {
    let mut out = x.to_vec();
    for e in y {
        if !out.iter().any(|o| eq(o, e)) {
            out.push(e.clone());
        }
    }
    out
}

fn minus<T: Clone>(x: &[T], y: &[T], eq: impl Fn(&T, &T) -> bool) -> Option<Vec<T>> {
    let out: Vec<T> = x
        .iter()
        .filter(|e| !y.iter().any(|d| eq(e, d)))
        .cloned()
        .collect();
    (!out.is_empty()).then_some(out)
}

fn invalid_path() -> Applied {
    Applied::Rejected("the document path is invalid for update")
}

/// The container `path`'s last element lives in (for a path of two elements or more).
fn parent<'i>(item: &'i mut Item, path: &[PathElem]) -> Result<&'i mut AttributeValue, Applied> {
    let (Some(PathElem::Attr(top)), Some(inner)) = (path.first(), path.get(1..path.len() - 1))
    else {
        return Err(invalid_path());
    };
    let mut v = item.get_mut(top).ok_or_else(invalid_path)?;
    for e in inner {
        v = match (e, v) {
            (PathElem::Attr(a), AttributeValue::M(m)) => m.get_mut(a),
            (PathElem::Index(i), AttributeValue::L(l)) => l.get_mut(*i),
            _ => None,
        }
        .ok_or_else(invalid_path)?;
    }
    Ok(v)
}

/// Writes `v` at `path`: a nested path needs its parent to exist with the right type; a list
/// index past the end appends.
fn put(item: &mut Item, path: &Path, v: AttributeValue) -> Result<(), Applied> {
    if let [PathElem::Attr(a)] = path.as_slice() {
        item.insert(a.clone(), v);
        return Ok(());
    }
    match (parent(item, path)?, path.last().expect("non-empty path")) {
        (AttributeValue::M(m), PathElem::Attr(a)) => {
            m.insert(a.clone(), v);
        }
        (AttributeValue::L(l), PathElem::Index(i)) => match l.get_mut(*i) {
            Some(slot) => *slot = v,
            None => l.push(v),
        },
        _ => return Err(invalid_path()),
    }
    Ok(())
}

/// Removes what is at `path`, if anything; a nested path needs its parent, with the right type.
fn remove(item: &mut Item, path: &Path) -> Result<(), Applied> {
    if let [PathElem::Attr(a)] = path.as_slice() {
        item.remove(a);
        return Ok(());
    }
    match (parent(item, path)?, path.last().expect("non-empty path")) {
        (AttributeValue::M(m), PathElem::Attr(a)) => {
            m.remove(a);
        }
        (AttributeValue::L(l), PathElem::Index(i)) => {
            if *i < l.len() {
                l.remove(*i);
            }
        }
        _ => return Err(invalid_path()),
    }
    Ok(())
}

/// DynamoDB stores every number in canonical form.
fn canonical_numbers(item: &mut Item) {
    fn walk(v: &mut AttributeValue) {
        match v {
            AttributeValue::N(n) => {
                if let Some(c) = crate::keys::canonical_number(n) {
                    *n = c;
                }
            }
            AttributeValue::Ns(ns) => {
                for n in ns {
                    if let Some(c) = crate::keys::canonical_number(n) {
                        *n = c;
                    }
                }
            }
            AttributeValue::L(l) => l.iter_mut().for_each(walk),
            AttributeValue::M(m) => m.values_mut().for_each(walk),
            _ => {}
        }
    }
    item.values_mut().for_each(walk);
}

#[cfg(test)]
mod tests;
