//! The tree the parser builds: document paths, operands, conditions and update clauses.

use aws_sdk_dynamodb::types::AttributeValue;

/// One element of a document path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathElem {
    Attr(String),
    Index(usize),
}

/// A document path (`a.b[2].c`), placeholders resolved; never empty, and it starts with an
/// attribute.
pub(crate) type Path = Vec<PathElem>;

/// What a comparison or function compares: an attribute, a value, or `size(path)`.
#[derive(Debug, Clone)]
pub(crate) enum Operand {
    Path(Path),
    Value(AttributeValue),
    Size(Path),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A parsed condition (`ConditionExpression`, `FilterExpression`, `KeyConditionExpression`).
#[derive(Debug, Clone)]
pub(crate) enum Cond {
    Cmp(Operand, Cmp, Operand),
    Between(Operand, Operand, Operand),
    In(Operand, Vec<Operand>),
    Exists(Path),
    NotExists(Path),
    Type(Path, Operand),
    BeginsWith(Path, Operand),
    Contains(Path, Operand),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
}

impl Cond {
    /// Whether the condition can hold only where the top-level attribute `attr` is absent: it is
    /// `attribute_not_exists(attr)`, alone or in a conjunction. (For the hash key: only on an
    /// absent item.)
    pub(crate) fn requires_absent(&self, attr: &str) -> bool {
        match self {
            Cond::NotExists(p) => p.len() == 1 && p[0] == PathElem::Attr(attr.to_string()),
            Cond::And(a, b) => a.requires_absent(attr) || b.requires_absent(attr),
            _ => false,
        }
    }

    /// Adds to `out` the top-level attribute names the condition reads (each once).
    pub(crate) fn attributes(&self, out: &mut Vec<String>) {
        let mut path = |p: &Path| {
            if let Some(PathElem::Attr(a)) = p.first()
                && !out.contains(a)
            {
                out.push(a.clone());
            }
        };
        let mut ops: Vec<&Operand> = Vec::new();
        match self {
            Cond::And(a, b) | Cond::Or(a, b) => {
                a.attributes(out);
                b.attributes(out);
                return;
            }
            Cond::Not(a) => {
                a.attributes(out);
                return;
            }
            Cond::Exists(p) | Cond::NotExists(p) => path(p),
            Cond::Type(p, o) | Cond::BeginsWith(p, o) | Cond::Contains(p, o) => {
                path(p);
                ops.push(o);
            }
            Cond::Cmp(a, _, b) => ops.extend([a, b]),
            Cond::Between(a, b, c) => ops.extend([a, b, c]),
            Cond::In(a, l) => {
                ops.push(a);
                ops.extend(l);
            }
        }
        for o in ops {
            if let Operand::Path(p) | Operand::Size(p) = o {
                path(p);
            }
        }
    }
}

/// What a `SET` action's operand reads: an attribute, a value, or a function of them.
#[derive(Debug, Clone)]
pub(crate) enum SetOperand {
    Path(Path),
    Value(AttributeValue),
    /// `if_not_exists(path, operand)`
    IfNotExists(Path, Box<SetOperand>),
    /// `list_append(operand, operand)`
    ListAppend(Box<SetOperand>, Box<SetOperand>),
}

/// The right-hand side of a `SET` action.
#[derive(Debug, Clone)]
pub(crate) enum SetValue {
    One(SetOperand),
    Plus(SetOperand, SetOperand),
    Minus(SetOperand, SetOperand),
}

/// One action of a parsed update expression (placeholders resolved).
#[derive(Debug, Clone)]
pub(crate) enum Action {
    Set(Path, SetValue),
    Remove(Path),
    Add(Path, AttributeValue),
    Delete(Path, AttributeValue),
}

impl Action {
    /// The document path the action writes.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Action::Set(p, _) | Action::Remove(p) | Action::Add(p, _) | Action::Delete(p, _) => p,
        }
    }
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
    pub(crate) fn keyword(self) -> &'static str {
        match self {
            Clause::Set => "SET",
            Clause::Remove => "REMOVE",
            Clause::Add => "ADD",
            Clause::Delete => "DELETE",
        }
    }

    /// The clause a keyword starts (case-insensitive, as DynamoDB).
    pub(crate) fn from_keyword(w: &str) -> Option<Clause> {
        match w.to_ascii_uppercase().as_str() {
            "SET" => Some(Clause::Set),
            "REMOVE" => Some(Clause::Remove),
            "ADD" => Some(Clause::Add),
            "DELETE" => Some(Clause::Delete),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::expr::parse_condition;

    #[test]
    fn a_condition_requires_the_absence_of_an_attribute_only_through_a_conjunction() {
        let names = HashMap::from([("#k".to_string(), "Id".to_string())]);
        let holds = |c: &str| {
            parse_condition(c, Some(&names), None)
                .unwrap()
                .requires_absent("Id")
        };
        assert!(holds("attribute_not_exists(Id)"));
        assert!(holds("attribute_not_exists(#k)"));
        assert!(holds(
            "attribute_not_exists(x) AND attribute_not_exists(#k)"
        ));
        assert!(!holds(
            "attribute_not_exists(x) OR attribute_not_exists(Id)"
        ));
        assert!(!holds("NOT attribute_not_exists(Id)"));
        assert!(!holds("attribute_not_exists(Id.a)"));
        assert!(!holds("attribute_exists(Id)"));
        assert!(!holds("attribute_not_exists(Other)"));
    }
}
