//! Update expressions as clauses of actions: what a user's update writes, the merge of the
//! library's own actions into it, and a bound of how much it can grow an item.

use std::collections::HashMap;

use super::ast::Clause;
use super::lexer::{Tok, tokenize};
use super::parser::update_clauses;
use crate::error::{Error, Result};

/// An update expression split into its clauses, each with its actions' text.
#[derive(Debug, Clone, Default)]
pub(crate) struct UpdateExpr {
    clauses: Vec<(Clause, Vec<String>)>,
}

impl UpdateExpr {
    /// Parses `expr`, checking each clause appears at most once and has actions.
    pub(crate) fn parse(expr: &str) -> Result<UpdateExpr> {
        Ok(UpdateExpr {
            clauses: update_clauses(expr)?,
        })
    }

    /// The top-level attribute each action writes, with placeholders resolved through `names`.
    pub(crate) fn targets(&self, names: Option<&HashMap<String, String>>) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (_, actions) in &self.clauses {
            for a in actions {
                let toks = tokenize(a)?;
                let first = match toks.first().map(|t| &t.tok) {
                    Some(Tok::Word(w)) => w.clone(),
                    Some(Tok::Name(n)) => names.and_then(|m| m.get(n)).cloned().ok_or_else(|| {
                        Error::invalid(format!(
                            "UpdateExpression uses {n}, which ExpressionAttributeNames does not define"
                        ))
                    })?,
                    _ => return Err(Error::invalid(format!("invalid update action {a:?}"))),
                };
                out.push(first);
            }
        }
        Ok(out)
    }

    /// Whether a `SET` action copies an attribute's value into the item (`SET b = a`,
    /// `list_append(a, :l)`, `if_not_exists(a, :v)`), so that how much the update can grow the item
    /// depends on the item. Arithmetic (`a + :d`) yields one number and does not count.
    pub(crate) fn copies_attributes(&self) -> bool {
        self.clauses
            .iter()
            .filter(|(k, _)| *k == Clause::Set)
            .flat_map(|(_, actions)| actions)
            .any(|a| {
                let Ok(toks) = tokenize(a) else {
                    return true;
                };
                let Some(eq) = toks.iter().position(|t| t.tok == Tok::Comparator("=")) else {
                    return true;
                };
                let rhs = &toks[eq + 1..];
                let call = rhs.iter().any(|t| t.tok == Tok::Punct('('));
                let arithmetic = rhs.iter().any(|t| matches!(t.tok, Tok::Punct('+' | '-')));
                if arithmetic && !call {
                    return false;
                }
                rhs.iter().enumerate().any(|(i, t)| match &t.tok {
                    Tok::Name(_) => true,
                    // A word before `(` is a function's name.
                    Tok::Word(_) => rhs.get(i + 1).is_none_or(|n| n.tok != Tok::Punct('(')),
                    _ => false,
                })
            })
    }

    /// Adds an action to a clause (creating the clause if needed).
    pub(crate) fn add(&mut self, clause: Clause, action: impl Into<String>) {
        match self.clauses.iter_mut().find(|(k, _)| *k == clause) {
            Some((_, actions)) => actions.push(action.into()),
            None => self.clauses.push((clause, vec![action.into()])),
        }
    }

    /// Takes the action `action` (its exact text) out of `clause`; true when it was there.
    pub(crate) fn drop_action(&mut self, clause: Clause, action: &str) -> bool {
        let Some((_, actions)) = self.clauses.iter_mut().find(|(k, _)| *k == clause) else {
            return false;
        };
        let before = actions.len();
        actions.retain(|a| a.trim() != action);
        actions.len() < before
    }

    /// Renders the expression.
    pub(crate) fn render(&self) -> String {
        self.clauses
            .iter()
            .filter(|(_, a)| !a.is_empty())
            .map(|(k, a)| format!("{} {}", k.keyword(), a.join(", ")))
            .collect::<Vec<_>>()
            .join(" ")
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
                    Tok::Punct(_) | Tok::Comparator(_) => 0,
                }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_which_updates_copy_attributes() {
        let copies = |e: &str| UpdateExpr::parse(e).unwrap().copies_attributes();
        assert!(!copies(
            "SET a = :a, b = :b REMOVE c ADD n :one DELETE s :s"
        ));
        assert!(!copies("SET balance = balance + :d, #n = #n - :one"));
        assert!(copies("SET b = a"));
        assert!(copies("SET b = #a"));
        assert!(copies("SET l = list_append(l, :x)"));
        assert!(copies("SET v = if_not_exists(v, :zero)"));
        assert!(copies("SET m.x = m.y"));
        assert!(copies("SET c = list_append(a, :l), d = :d"));
    }

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

    /// `!` is not DynamoDB syntax: the update grammar used to let it through to DynamoDB; the shared
    /// lexer rejects it, as the condition grammar always did.
    #[test]
    fn rejects_bang_in_update_expressions() {
        assert!(UpdateExpr::parse("SET a = :a, b = !c").is_err());
        assert!(UpdateExpr::parse("SET a = a - :one, b = b + :one").is_ok());
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
