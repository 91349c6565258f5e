//! Just enough of DynamoDB's expression grammar to validate user expressions and to merge the
//! library's own clauses into a user's `UpdateExpression`.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::{Error, Item, Result};

/// Prefix of every attribute name the library reserves.
pub(crate) const RESERVED_PREFIX: &str = "_Tx";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// An attribute name, keyword, function name or number.
    Word(String),
    /// `#name`
    Name(String),
    /// `:value`
    Value(String),
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    start: usize,
}

fn tokenize(expr: &str) -> Result<Vec<Token>> {
    let bytes = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c == b'#' || c == b':' {
            i += 1;
            while i < bytes.len() && is_word(bytes[i]) {
                i += 1;
            }
            if i == start + 1 {
                return Err(Error::invalid(format!(
                    "invalid expression {expr:?}: empty placeholder at {start}"
                )));
            }
            let name = expr[start..i].to_string();
            out.push(Token {
                tok: if c == b'#' {
                    Tok::Name(name)
                } else {
                    Tok::Value(name)
                },
                start,
            });
        } else if is_word(c) {
            while i < bytes.len() && is_word(bytes[i]) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Word(expr[start..i].to_string()),
                start,
            });
        } else if b"(),=+-.[]<>!".contains(&c) {
            out.push(Token {
                tok: Tok::Punct(c as char),
                start,
            });
            i += 1;
        } else {
            return Err(Error::invalid(format!(
                "invalid expression {expr:?}: unexpected character at {start}"
            )));
        }
    }
    Ok(out)
}

/// Rejects any `_Tx...` attribute name written directly in an expression.
pub(crate) fn check_no_reserved_words(what: &str, expr: &str) -> Result<()> {
    for t in tokenize(expr)? {
        if let Tok::Word(w) = &t.tok
            && w.starts_with(RESERVED_PREFIX)
        {
            return Err(reserved(what, w));
        }
    }
    Ok(())
}

pub(crate) fn reserved(what: &str, name: &str) -> Error {
    Error::invalid(format!(
        "{what} must not contain the reserved attribute name {name} (names starting with _Tx are reserved)"
    ))
}

/// Rejects reserved names among the values of `ExpressionAttributeNames` and reserved placeholders.
pub(crate) fn check_names_and_values(
    names: Option<&HashMap<String, String>>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> Result<()> {
    for (k, v) in names.into_iter().flatten() {
        if !k.starts_with('#') {
            return Err(Error::invalid(format!(
                "expression attribute name placeholder {k} must start with #"
            )));
        }
        if k.starts_with("#_Tx") {
            return Err(Error::invalid(format!(
                "expression attribute name placeholder {k} is reserved"
            )));
        }
        if v.starts_with(RESERVED_PREFIX) {
            return Err(reserved("ExpressionAttributeNames", v));
        }
    }
    for k in values.into_iter().flatten().map(|(k, _)| k) {
        if !k.starts_with(':') {
            return Err(Error::invalid(format!(
                "expression attribute value placeholder {k} must start with :"
            )));
        }
        if k.starts_with(":_Tx") {
            return Err(Error::invalid(format!(
                "expression attribute value placeholder {k} is reserved"
            )));
        }
    }
    Ok(())
}

/// Checks that every placeholder used in `exprs` is defined (DynamoDB rejects undefined ones, and
/// unused ones, at apply time; we catch both before any write).
pub(crate) fn check_placeholders(
    exprs: &[&str],
    names: Option<&HashMap<String, String>>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> Result<()> {
    let mut used_names = std::collections::HashSet::new();
    let mut used_values = std::collections::HashSet::new();
    for e in exprs {
        for t in tokenize(e)? {
            match t.tok {
                Tok::Name(n) => {
                    if !names.is_some_and(|m| m.contains_key(&n)) {
                        return Err(Error::invalid(format!(
                            "expression uses {n}, which ExpressionAttributeNames does not define"
                        )));
                    }
                    used_names.insert(n);
                }
                Tok::Value(v) => {
                    if !values.is_some_and(|m| m.contains_key(&v)) {
                        return Err(Error::invalid(format!(
                            "expression uses {v}, which ExpressionAttributeValues does not define"
                        )));
                    }
                    used_values.insert(v);
                }
                _ => {}
            }
        }
    }
    if let Some(unused) = names
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !used_names.contains(*k))
    {
        return Err(Error::invalid(format!(
            "ExpressionAttributeNames defines {unused}, which no expression uses"
        )));
    }
    if let Some(unused) = values
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !used_values.contains(*k))
    {
        return Err(Error::invalid(format!(
            "ExpressionAttributeValues defines {unused}, which no expression uses"
        )));
    }
    Ok(())
}

/// The four clause kinds of an update expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clause {
    Set,
    Remove,
    Add,
    Delete,
}

impl Clause {
    fn keyword(self) -> &'static str {
        match self {
            Clause::Set => "SET",
            Clause::Remove => "REMOVE",
            Clause::Add => "ADD",
            Clause::Delete => "DELETE",
        }
    }

    fn parse(w: &str) -> Option<Clause> {
        match w.to_ascii_uppercase().as_str() {
            "SET" => Some(Clause::Set),
            "REMOVE" => Some(Clause::Remove),
            "ADD" => Some(Clause::Add),
            "DELETE" => Some(Clause::Delete),
            _ => None,
        }
    }
}

/// An update expression split into its clauses, each with its actions' text.
#[derive(Debug, Clone, Default)]
pub(crate) struct UpdateExpr {
    clauses: Vec<(Clause, Vec<String>)>,
}

impl UpdateExpr {
    /// Parses `expr`, checking each clause appears at most once and has actions.
    pub fn parse(expr: &str) -> Result<UpdateExpr> {
        let toks = tokenize(expr)?;
        let bad = |why: &str| Error::invalid(format!("invalid UpdateExpression {expr:?}: {why}"));
        let mut clauses: Vec<(Clause, Vec<String>)> = Vec::new();
        let mut depth = 0i32;
        let mut current: Option<(Clause, usize)> = None; // clause and start of its current action
        let mut bracket = 0i32;
        for (i, t) in toks.iter().enumerate() {
            match &t.tok {
                Tok::Punct('(') => depth += 1,
                Tok::Punct(')') => depth -= 1,
                Tok::Punct('[') => bracket += 1,
                Tok::Punct(']') => bracket -= 1,
                _ => {}
            }
            if depth < 0 || bracket < 0 {
                return Err(bad("unbalanced parentheses"));
            }
            let keyword = match &t.tok {
                Tok::Word(w) if depth == 0 && bracket == 0 => Clause::parse(w),
                _ => None,
            };
            if let Some(kind) = keyword {
                if let Some((k, s)) = current.take() {
                    push_action(&mut clauses, k, expr[s..t.start].trim(), &bad)?;
                }
                if clauses.iter().any(|(k, _)| *k == kind) {
                    return Err(bad(&format!(
                        "the {} clause appears more than once",
                        kind.keyword()
                    )));
                }
                clauses.push((kind, Vec::new()));
                let next = toks.get(i + 1).map(|t| t.start).unwrap_or(expr.len());
                current = Some((kind, next));
                continue;
            }
            if current.is_none() {
                return Err(bad("expected SET, REMOVE, ADD or DELETE"));
            }
            if t.tok == Tok::Punct(',') && depth == 0 && bracket == 0 {
                let (k, s) = current.expect("checked");
                push_action(&mut clauses, k, expr[s..t.start].trim(), &bad)?;
                let next = toks.get(i + 1).map(|t| t.start).unwrap_or(expr.len());
                current = Some((k, next));
            }
        }
        if depth != 0 || bracket != 0 {
            return Err(bad("unbalanced parentheses"));
        }
        match current {
            Some((k, s)) => push_action(&mut clauses, k, expr[s..].trim(), &bad)?,
            None => return Err(bad("it is empty")),
        }
        Ok(UpdateExpr { clauses })
    }

    /// The top-level attribute each action writes, with placeholders resolved through `names`.
    pub fn targets(&self, names: Option<&HashMap<String, String>>) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (_, actions) in &self.clauses {
            for a in actions {
                let toks = tokenize(a)?;
                let first = match toks.first().map(|t| &t.tok) {
                    Some(Tok::Word(w)) => w.clone(),
                    Some(Tok::Name(n)) => names
                        .and_then(|m| m.get(n))
                        .cloned()
                        .ok_or_else(|| Error::invalid(format!("UpdateExpression uses {n}, which ExpressionAttributeNames does not define")))?,
                    _ => return Err(Error::invalid(format!("invalid update action {a:?}"))),
                };
                out.push(first);
            }
        }
        Ok(out)
    }

    /// Adds an action to a clause (creating the clause if needed).
    pub fn add(&mut self, clause: Clause, action: impl Into<String>) {
        match self.clauses.iter_mut().find(|(k, _)| *k == clause) {
            Some((_, actions)) => actions.push(action.into()),
            None => self.clauses.push((clause, vec![action.into()])),
        }
    }

    /// Renders the expression.
    pub fn render(&self) -> String {
        self.clauses
            .iter()
            .filter(|(_, a)| !a.is_empty())
            .map(|(k, a)| format!("{} {}", k.keyword(), a.join(", ")))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn push_action(
    clauses: &mut [(Clause, Vec<String>)],
    kind: Clause,
    text: &str,
    bad: &dyn Fn(&str) -> Error,
) -> Result<()> {
    if text.is_empty() {
        return Err(bad(&format!(
            "the {} clause has an empty action",
            kind.keyword()
        )));
    }
    let entry = clauses
        .iter_mut()
        .find(|(k, _)| *k == kind)
        .expect("clause pushed before its actions");
    entry.1.push(text.to_string());
    Ok(())
}

/// One element of a document path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathElem {
    Attr(String),
    Index(usize),
}

/// Parses a `ProjectionExpression` into its paths (placeholders resolved).
pub(crate) fn parse_projection(
    expr: &str,
    names: Option<&HashMap<String, String>>,
) -> Result<Vec<Vec<PathElem>>> {
    let toks = tokenize(expr)?;
    let bad = |why: &str| Error::invalid(format!("invalid ProjectionExpression {expr:?}: {why}"));
    let mut paths = Vec::new();
    let mut cur: Vec<PathElem> = Vec::new();
    let mut i = 0;
    let name_of = |t: &Tok| -> Result<String> {
        match t {
            Tok::Word(w) => Ok(w.clone()),
            Tok::Name(n) => names.and_then(|m| m.get(n)).cloned().ok_or_else(|| {
                Error::invalid(format!(
                    "ProjectionExpression uses {n}, which ExpressionAttributeNames does not define"
                ))
            }),
            _ => Err(bad("expected an attribute name")),
        }
    };
    while i < toks.len() {
        let t = &toks[i].tok;
        if cur.is_empty() {
            cur.push(PathElem::Attr(name_of(t)?));
            i += 1;
            continue;
        }
        match t {
            Tok::Punct(',') => {
                paths.push(std::mem::take(&mut cur));
                i += 1;
            }
            Tok::Punct('.') => {
                let next = toks.get(i + 1).ok_or_else(|| bad("path ends with ."))?;
                cur.push(PathElem::Attr(name_of(&next.tok)?));
                i += 2;
            }
            Tok::Punct('[') => {
                let idx = match toks.get(i + 1).map(|t| &t.tok) {
                    Some(Tok::Word(w)) => w
                        .parse::<usize>()
                        .map_err(|_| bad("list index must be a number"))?,
                    _ => return Err(bad("expected a list index")),
                };
                if toks.get(i + 2).map(|t| &t.tok) != Some(&Tok::Punct(']')) {
                    return Err(bad("expected ]"));
                }
                cur.push(PathElem::Index(idx));
                i += 3;
            }
            _ => return Err(bad("unexpected token")),
        }
    }
    if cur.is_empty() {
        return Err(bad("empty path"));
    }
    paths.push(cur);
    Ok(paths)
}

/// Applies a projection to an item, as DynamoDB would.
pub(crate) fn project(item: &Item, paths: &[Vec<PathElem>]) -> Item {
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

fn merge_into(
    slot: std::collections::hash_map::Entry<'_, String, AttributeValue>,
    v: AttributeValue,
) {
    use std::collections::hash_map::Entry;
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

/// An upper bound of how many bytes applying `update` can add to an item: every value it uses and
/// every attribute it names counted whole (`value_size`, `attr_size` give their sizes; an attribute
/// the item lacks counts its name), a number's worth per arithmetic operator, and a few bytes per
/// token for list and map overhead. Never less than the growth DynamoDB computes.
pub(crate) fn growth_bound(
    update: &str,
    names: Option<&HashMap<String, String>>,
    value_size: impl Fn(&str) -> usize,
    attr_size: impl Fn(&str) -> usize,
) -> usize {
    /// A number's largest size (38 significant digits).
    const NUMBER_MAX: usize = 21;
    /// Per-token allowance for the overhead of map entries and list elements.
    const PER_TOKEN: usize = 4;
    let Ok(tokens) = tokenize(update) else {
        return usize::MAX / 4; // unparsable (rejected elsewhere): assume the worst
    };
    tokens
        .iter()
        .map(|t| {
            PER_TOKEN
                + match &t.tok {
                    Tok::Value(v) => value_size(v),
                    Tok::Name(n) => {
                        let a = names.and_then(|m| m.get(n)).map_or(n.as_str(), |s| s);
                        a.len() + attr_size(a)
                    }
                    Tok::Word(w) => w.len() + attr_size(w),
                    Tok::Punct('+' | '-') => NUMBER_MAX,
                    Tok::Punct(_) => 0,
                }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_merges_update_clauses() {
        let mut u =
            UpdateExpr::parse("set a = :a, b = list_append(b, :l) REMOVE c ADD #n :one").unwrap();
        u.add(Clause::Remove, "#_TxId");
        u.add(Clause::Set, "#_TxA = :_Tx1");
        assert_eq!(
            u.render(),
            "SET a = :a, b = list_append(b, :l), #_TxA = :_Tx1 REMOVE c, #_TxId ADD #n :one"
        );
        let names = HashMap::from([
            ("#n".to_string(), "counter".to_string()),
            ("#_TxId".to_string(), "_TxId".to_string()),
            ("#_TxA".to_string(), "_TxA".to_string()),
        ]);
        assert_eq!(
            u.targets(Some(&names)).unwrap(),
            vec!["a", "b", "_TxA", "c", "_TxId", "counter"]
        );
    }

    #[test]
    fn update_targets_resolve_placeholders() {
        let u =
            UpdateExpr::parse("SET #a.b[2] = :v, c = if_not_exists(c, :z) DELETE s :x").unwrap();
        let names = HashMap::from([("#a".to_string(), "alpha".to_string())]);
        assert_eq!(u.targets(Some(&names)).unwrap(), vec!["alpha", "c", "s"]);
    }

    #[test]
    fn rejects_bad_update_expressions() {
        assert!(UpdateExpr::parse("").is_err());
        assert!(UpdateExpr::parse("a = :a").is_err());
        assert!(UpdateExpr::parse("SET a = :a SET b = :b").is_err());
        assert!(UpdateExpr::parse("SET a = (:a").is_err());
        assert!(UpdateExpr::parse("SET").is_err());
        assert!(UpdateExpr::parse("SET a = :a,").is_err());
        assert!(UpdateExpr::parse("SET a = :a; drop").is_err());
    }

    #[test]
    fn reserved_words_are_found() {
        assert!(check_no_reserved_words("UpdateExpression", "SET _TxId = :x").is_err());
        assert!(
            check_no_reserved_words("ConditionExpression", "attribute_exists(a._TxA)").is_err()
        );
        assert!(check_no_reserved_words("ConditionExpression", "attribute_exists(my_Tx)").is_ok());
        let names = HashMap::from([("#a".to_string(), "_TxT".to_string())]);
        assert!(check_names_and_values(Some(&names), None).is_err());
        let names = HashMap::from([("#_Tx1".to_string(), "x".to_string())]);
        assert!(check_names_and_values(Some(&names), None).is_err());
    }

    #[test]
    fn placeholders_must_be_defined_and_used() {
        let names = HashMap::from([("#a".to_string(), "a".to_string())]);
        let values = HashMap::from([(":v".to_string(), AttributeValue::N("1".into()))]);
        assert!(check_placeholders(&["SET #a = :v"], Some(&names), Some(&values)).is_ok());
        assert!(check_placeholders(&["SET #a = :w"], Some(&names), Some(&values)).is_err());
        assert!(check_placeholders(&["SET b = :v"], Some(&names), Some(&values)).is_err());
    }

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

    #[test]
    fn growth_bound_counts_copied_attributes() {
        let sizes = |a: &str| if a == "a" { 1000 } else { 0 };
        let copy = growth_bound("SET b = a, c = a", None, |_| 0, sizes);
        assert!(copy >= 2000, "{copy}");
        let names = HashMap::from([("#x".to_string(), "a".to_string())]);
        assert!(growth_bound("SET b = #x", Some(&names), |_| 0, sizes) >= 1000);
        assert!(growth_bound("SET b = :v", None, |_| 500, sizes) >= 500);
    }
}
