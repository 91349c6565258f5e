//! Checks of the caller's expressions before any request: no reserved `_Tx` names, placeholders
//! well formed, defined and used.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;

use super::lexer::{Tok, tokenize};
use crate::error::{Error, Result};

/// Prefix of every attribute name the library reserves.
pub(crate) const RESERVED_PREFIX: &str = "_Tx";

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

/// The error for a reserved attribute name `name` found in `what`.
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
    let mut used_names = HashSet::new();
    let mut used_values = HashSet::new();
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Validation now lexes as the condition parser always did: a `!` (not DynamoDB syntax) in a
    /// transaction's `ConditionExpression` is rejected upfront instead of by DynamoDB at apply time.
    #[test]
    fn validation_rejects_what_the_condition_parser_rejects() {
        let err = check_no_reserved_words("ConditionExpression", "a != :v").unwrap_err();
        assert!(err.is_invalid_request(), "{err}");
        let values = HashMap::from([(":v".to_string(), AttributeValue::N("1".into()))]);
        assert!(check_placeholders(&["NOT a = :v"], None, Some(&values)).is_ok());
        assert!(check_placeholders(&["!(a = :v)"], None, Some(&values)).is_err());
    }
}
