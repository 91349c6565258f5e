//! The one parser of DynamoDB's expression language, over the shared lexer: conditions (with
//! their paths and operands), projections, and the clause structure of update expressions.
//! Placeholders are resolved while parsing.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::ast::{Action, Clause, Cmp, Cond, Operand, Path, PathElem, SetOperand, SetValue};
use super::lexer::{Tok, Token, tokenize};
use crate::error::{Error, Result};

/// Which expression a parser reads: it names the expression in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grammar {
    Condition,
    Projection,
    Update,
}

struct Parser<'a> {
    expr: &'a str,
    grammar: Grammar,
    toks: Vec<Token>,
    pos: usize,
    names: Option<&'a HashMap<String, String>>,
    values: Option<&'a HashMap<String, AttributeValue>>,
}

fn is_kw(t: Option<&Tok>, kw: &str) -> bool {
    matches!(t, Some(Tok::Word(w)) if w.eq_ignore_ascii_case(kw))
}

impl<'a> Parser<'a> {
    fn new(
        expr: &'a str,
        grammar: Grammar,
        names: Option<&'a HashMap<String, String>>,
        values: Option<&'a HashMap<String, AttributeValue>>,
    ) -> Result<Parser<'a>> {
        Ok(Parser {
            expr,
            grammar,
            toks: tokenize(expr)?,
            pos: 0,
            names,
            values,
        })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn peek2(&self) -> Option<&Tok> {
        self.toks.get(self.pos + 1).map(|t| &t.tok)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.peek().cloned();
        self.pos += 1;
        t
    }

    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    fn err(&self, why: &str) -> Error {
        let what = match self.grammar {
            Grammar::Condition => "condition expression",
            Grammar::Projection => "ProjectionExpression",
            Grammar::Update => "UpdateExpression action",
        };
        Error::invalid(format!("invalid {what} {:?}: {why}", self.expr))
    }

    fn expect(&mut self, p: char) -> Result<()> {
        match self.next() {
            Some(Tok::Punct(c)) if c == p => Ok(()),
            _ => Err(self.err(&format!("expected {p}"))),
        }
    }

    /// An attribute name, written out or as a `#name` placeholder.
    fn name(&mut self) -> Result<String> {
        match self.next() {
            Some(Tok::Word(w)) => Ok(w),
            Some(Tok::Name(n)) => {
                self.names
                    .and_then(|m| m.get(&n))
                    .cloned()
                    .ok_or_else(|| match self.grammar {
                        Grammar::Condition | Grammar::Update => {
                            self.err(&format!("{n} is not defined in ExpressionAttributeNames"))
                        }
                        Grammar::Projection => Error::invalid(format!(
                            "ProjectionExpression uses {n}, which ExpressionAttributeNames does not define"
                        )),
                    })
            }
            _ => Err(self.err("expected an attribute name")),
        }
    }

    /// A document path: a name, then `.name` and `[index]` elements.
    fn path(&mut self) -> Result<Path> {
        let mut p = vec![PathElem::Attr(self.name()?)];
        loop {
            match self.peek() {
                Some(Tok::Punct('.')) => {
                    self.pos += 1;
                    if self.at_end() && self.grammar == Grammar::Projection {
                        return Err(self.err("path ends with ."));
                    }
                    p.push(PathElem::Attr(self.name()?));
                }
                Some(Tok::Punct('[')) => {
                    self.pos += 1;
                    let i = match self.next() {
                        Some(Tok::Word(w)) => w
                            .parse::<usize>()
                            .map_err(|_| self.err("list index must be a number"))?,
                        _ => return Err(self.err("expected a list index")),
                    };
                    self.expect(']')?;
                    p.push(PathElem::Index(i));
                }
                _ => return Ok(p),
            }
        }
    }

    fn or(&mut self) -> Result<Cond> {
        let mut left = self.and()?;
        while is_kw(self.peek(), "OR") {
            self.pos += 1;
            let right = self.and()?;
            left = Cond::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Cond> {
        let mut left = self.not()?;
        while is_kw(self.peek(), "AND") {
            self.pos += 1;
            let right = self.not()?;
            left = Cond::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Cond> {
        if is_kw(self.peek(), "NOT") {
            self.pos += 1;
            return Ok(Cond::Not(Box::new(self.not()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Cond> {
        if self.peek() == Some(&Tok::Punct('(')) {
            self.pos += 1;
            let c = self.or()?;
            self.expect(')')?;
            return Ok(c);
        }
        if let (Some(Tok::Word(f)), Some(Tok::Punct('('))) = (self.peek(), self.peek2()) {
            // Function names are case-sensitive, as in DynamoDB.
            let f = f.clone();
            let func = matches!(
                f.as_str(),
                "attribute_exists"
                    | "attribute_not_exists"
                    | "attribute_type"
                    | "begins_with"
                    | "contains"
            );
            if func {
                self.pos += 2;
                let path = self.path()?;
                let c = match f.as_str() {
                    "attribute_exists" => Cond::Exists(path),
                    "attribute_not_exists" => Cond::NotExists(path),
                    _ => {
                        self.expect(',')?;
                        let op = self.operand()?;
                        match f.as_str() {
                            "attribute_type" => Cond::Type(path, op),
                            "begins_with" => Cond::BeginsWith(path, op),
                            _ => Cond::Contains(path, op),
                        }
                    }
                };
                self.expect(')')?;
                return Ok(c);
            }
        }
        let left = self.operand()?;
        match self.next() {
            Some(Tok::Comparator(op)) => {
                let cmp = match op {
                    "=" => Cmp::Eq,
                    "<>" => Cmp::Ne,
                    "<" => Cmp::Lt,
                    "<=" => Cmp::Le,
                    ">" => Cmp::Gt,
                    _ => Cmp::Ge,
                };
                let right = self.operand()?;
                Ok(Cond::Cmp(left, cmp, right))
            }
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case("BETWEEN") => {
                let lo = self.operand()?;
                if !is_kw(self.peek(), "AND") {
                    return Err(self.err("expected AND in BETWEEN"));
                }
                self.pos += 1;
                let hi = self.operand()?;
                Ok(Cond::Between(left, lo, hi))
            }
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case("IN") => {
                self.expect('(')?;
                let mut list = vec![self.operand()?];
                while self.peek() == Some(&Tok::Punct(',')) {
                    self.pos += 1;
                    list.push(self.operand()?);
                }
                self.expect(')')?;
                Ok(Cond::In(left, list))
            }
            _ => Err(self.err("expected a comparison, BETWEEN or IN")),
        }
    }

    /// A value placeholder's value.
    fn value(&mut self) -> Result<AttributeValue> {
        match self.next() {
            Some(Tok::Value(v)) => self.values.and_then(|m| m.get(&v)).cloned().ok_or_else(|| {
                self.err(&format!("{v} is not defined in ExpressionAttributeValues"))
            }),
            _ => Err(self.err("expected a :value")),
        }
    }

    /// A `SET` operand: a path, a value, `if_not_exists(path, operand)` or
    /// `list_append(operand, operand)` (function names are case-sensitive).
    fn set_operand(&mut self) -> Result<SetOperand> {
        match (self.peek().cloned(), self.peek2()) {
            (Some(Tok::Value(_)), _) => Ok(SetOperand::Value(self.value()?)),
            (Some(Tok::Word(f)), Some(Tok::Punct('('))) if f == "if_not_exists" => {
                self.pos += 2;
                let p = self.path()?;
                self.expect(',')?;
                let o = self.set_operand()?;
                self.expect(')')?;
                Ok(SetOperand::IfNotExists(p, Box::new(o)))
            }
            (Some(Tok::Word(f)), Some(Tok::Punct('('))) if f == "list_append" => {
                self.pos += 2;
                let a = self.set_operand()?;
                self.expect(',')?;
                let b = self.set_operand()?;
                self.expect(')')?;
                Ok(SetOperand::ListAppend(Box::new(a), Box::new(b)))
            }
            (Some(Tok::Word(_) | Tok::Name(_)), Some(Tok::Punct('('))) => {
                Err(self.err("unknown function"))
            }
            _ => Ok(SetOperand::Path(self.path()?)),
        }
    }

    /// One action of `clause`, the whole of the parser's input.
    fn action(&mut self, clause: Clause) -> Result<Action> {
        let path = self.path()?;
        let a = match clause {
            Clause::Set => {
                if self.next() != Some(Tok::Comparator("=")) {
                    return Err(self.err("expected ="));
                }
                let left = self.set_operand()?;
                let v = match self.peek() {
                    Some(Tok::Punct('+')) => {
                        self.pos += 1;
                        SetValue::Plus(left, self.set_operand()?)
                    }
                    Some(Tok::Punct('-')) => {
                        self.pos += 1;
                        SetValue::Minus(left, self.set_operand()?)
                    }
                    _ => SetValue::One(left),
                };
                Action::Set(path, v)
            }
            Clause::Remove => Action::Remove(path),
            Clause::Add => Action::Add(path, self.value()?),
            Clause::Delete => Action::Delete(path, self.value()?),
        };
        if !self.at_end() {
            return Err(self.err("unexpected trailing input"));
        }
        Ok(a)
    }

    fn operand(&mut self) -> Result<Operand> {
        match self.peek().cloned() {
            Some(Tok::Value(v)) => {
                self.pos += 1;
                let val = self
                    .values
                    .and_then(|m| m.get(&v))
                    .cloned()
                    .ok_or_else(|| {
                        self.err(&format!("{v} is not defined in ExpressionAttributeValues"))
                    })?;
                Ok(Operand::Value(val))
            }
            Some(Tok::Word(w)) if w == "size" && self.peek2() == Some(&Tok::Punct('(')) => {
                self.pos += 2;
                let p = self.path()?;
                self.expect(')')?;
                Ok(Operand::Size(p))
            }
            _ => Ok(Operand::Path(self.path()?)),
        }
    }
}

/// Parses a condition expression, resolving placeholders.
pub(crate) fn parse_condition(
    expr: &str,
    names: Option<&HashMap<String, String>>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> Result<Cond> {
    let mut p = Parser::new(expr, Grammar::Condition, names, values)?;
    // Arithmetic belongs to `SET` actions only.
    if let Some(t) = p
        .toks
        .iter()
        .find(|t| matches!(t.tok, Tok::Punct('+' | '-')))
    {
        return Err(p.err(&format!("unexpected character at {}", t.start)));
    }
    let c = p.or()?;
    if !p.at_end() {
        return Err(p.err("unexpected trailing input"));
    }
    Ok(c)
}

/// Parses a `ProjectionExpression` into its paths (placeholders resolved).
pub(crate) fn parse_projection(
    expr: &str,
    names: Option<&HashMap<String, String>>,
) -> Result<Vec<Path>> {
    let mut p = Parser::new(expr, Grammar::Projection, names, None)?;
    let mut paths = Vec::new();
    loop {
        if p.at_end() {
            return Err(p.err("empty path"));
        }
        paths.push(p.path()?);
        match p.next() {
            None => return Ok(paths),
            Some(Tok::Punct(',')) => {}
            Some(_) => return Err(p.err("unexpected token")),
        }
    }
}

/// Parses an update expression into its actions (placeholders resolved), clause by clause.
pub(crate) fn parse_update(
    expr: &str,
    names: Option<&HashMap<String, String>>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> Result<Vec<Action>> {
    let mut out = Vec::new();
    for (clause, actions) in update_clauses(expr)? {
        for a in actions {
            out.push(Parser::new(&a, Grammar::Update, names, values)?.action(clause)?);
        }
    }
    Ok(out)
}

/// Splits an update expression into its clauses, each with its actions' text, checking that each
/// clause appears at most once and that no action is empty.
pub(crate) fn update_clauses(expr: &str) -> Result<Vec<(Clause, Vec<String>)>> {
    let toks = tokenize(expr)?;
    let bad = |why: &str| Error::invalid(format!("invalid UpdateExpression {expr:?}: {why}"));
    let mut clauses: Vec<(Clause, Vec<String>)> = Vec::new();
    let push_action = |clauses: &mut Vec<(Clause, Vec<String>)>, kind: Clause, text: &str| {
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
    };
    let mut depth = 0i32;
    let mut bracket = 0i32;
    let mut current: Option<(Clause, usize)> = None; // clause and start of its current action
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
            Tok::Word(w) if depth == 0 && bracket == 0 => Clause::from_keyword(w),
            _ => None,
        };
        let next = toks.get(i + 1).map(|t| t.start).unwrap_or(expr.len());
        if let Some(kind) = keyword {
            if let Some((k, s)) = current.take() {
                push_action(&mut clauses, k, expr[s..t.start].trim())?;
            }
            if clauses.iter().any(|(k, _)| *k == kind) {
                return Err(bad(&format!(
                    "the {} clause appears more than once",
                    kind.keyword()
                )));
            }
            clauses.push((kind, Vec::new()));
            current = Some((kind, next));
            continue;
        }
        let Some((k, s)) = current else {
            return Err(bad("expected SET, REMOVE, ADD or DELETE"));
        };
        if t.tok == Tok::Punct(',') && depth == 0 && bracket == 0 {
            push_action(&mut clauses, k, expr[s..t.start].trim())?;
            current = Some((k, next));
        }
    }
    if depth != 0 || bracket != 0 {
        return Err(bad("unbalanced parentheses"));
    }
    match current {
        Some((k, s)) => push_action(&mut clauses, k, expr[s..].trim())?,
        None => return Err(bad("it is empty")),
    }
    Ok(clauses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: Result<impl std::fmt::Debug>) -> String {
        let e = r.unwrap_err();
        assert!(e.is_invalid_request(), "{e}");
        e.to_string()
    }

    /// Projections and conditions used to parse paths with two parsers; they now share one, which
    /// reads the same paths the same way.
    #[test]
    fn projections_and_conditions_read_the_same_paths() {
        let names = HashMap::from([("#m".to_string(), "map".to_string())]);
        let values = HashMap::from([(":v".to_string(), AttributeValue::N("1".into()))]);
        let projected = parse_projection("#m.a[3].b", Some(&names)).unwrap();
        let Cond::Exists(p) =
            parse_condition("attribute_exists(#m.a[3].b)", Some(&names), Some(&values)).unwrap()
        else {
            panic!("not an attribute_exists");
        };
        assert_eq!(projected, vec![p.clone()]);
        assert_eq!(
            p,
            vec![
                PathElem::Attr("map".into()),
                PathElem::Attr("a".into()),
                PathElem::Index(3),
                PathElem::Attr("b".into()),
            ]
        );
    }

    /// Each grammar keeps its own messages.
    #[test]
    fn errors_name_the_expression() {
        assert!(message(parse_projection("a.", None)).contains("path ends with ."));
        assert!(message(parse_projection("a,", None)).contains("empty path"));
        assert!(message(parse_projection("a b", None)).contains("unexpected token"));
        assert!(message(parse_projection("a[x]", None)).contains("list index must be a number"));
        assert!(
            message(parse_projection("#n", None))
                .contains("ProjectionExpression uses #n, which ExpressionAttributeNames")
        );
        let c = |e| parse_condition(e, None, None);
        assert!(message(c("x = a.")).contains("invalid condition expression"));
        assert!(message(c("x = a.")).contains("expected an attribute name"));
        assert!(message(c("a = #n")).contains("#n is not defined in ExpressionAttributeNames"));
        assert!(message(c("a = :v")).contains(":v is not defined in ExpressionAttributeValues"));
        assert!(message(c("a = b c")).contains("unexpected trailing input"));
        assert!(message(c("a BETWEEN b c")).contains("expected AND in BETWEEN"));
    }

    /// The update grammar lexed `<=` as two tokens, the condition grammar as one; the shared lexer
    /// reads one comparator, and `a < = b` (two) is still no comparison.
    #[test]
    fn comparators() {
        let values = HashMap::from([(":v".to_string(), AttributeValue::N("1".into()))]);
        for (e, cmp) in [
            ("a<=:v", Cmp::Le),
            ("a >= :v", Cmp::Ge),
            ("a<>:v", Cmp::Ne),
            ("a<:v", Cmp::Lt),
        ] {
            let Cond::Cmp(_, got, _) = parse_condition(e, None, Some(&values)).unwrap() else {
                panic!("{e}: not a comparison");
            };
            assert_eq!(got, cmp, "{e}");
        }
        assert!(parse_condition("a < = :v", None, Some(&values)).is_err());
        assert!(parse_condition("a == :v", None, Some(&values)).is_err());
    }

    /// Arithmetic is valid in `SET` actions only: a condition with `+` or `-` is rejected with the
    /// message the condition lexer gave (the update grammar accepts both).
    #[test]
    fn arithmetic_is_not_a_condition() {
        let values = HashMap::from([(":v".to_string(), AttributeValue::N("1".into()))]);
        let m = message(parse_condition("a = b + :v", None, Some(&values)));
        assert!(m.contains("invalid condition expression"), "{m}");
        assert!(m.contains("unexpected character at 6"), "{m}");
        assert!(update_clauses("SET a = b + :v").is_ok());
    }

    /// `!` used to pass the update grammar's lexer and fail the condition grammar's: it fails both.
    #[test]
    fn bang_fails_every_grammar() {
        assert!(parse_condition("a != b", None, None).is_err());
        assert!(parse_projection("a, !b", None).is_err());
        assert!(update_clauses("SET a = !b").is_err());
    }
}
