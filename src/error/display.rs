//! The pieces of the errors' one-line `Display`: keys and targets on one line, and what a missing
//! table's message says.

use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;

use super::{Item, TableRole};

/// The `Display` of [`Error::TableNotFound`]: for the library's tables, how to create them.
pub(super) struct DisplayTableNotFound<'a>(pub(super) &'a str, pub(super) TableRole);

impl fmt::Display for DisplayTableNotFound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const CREATE: &str = "create the tables with TransactionManager::create_tables() (or `dynamodb-tx tables create`)";
        let table = self.0;
        match self.1 {
            TableRole::Transactions => write!(
                f,
                "transactions table {table} does not exist; nothing was written: {CREATE}"
            ),
            TableRole::Images => write!(f, "images table {table} does not exist: {CREATE}"),
            TableRole::Other => write!(f, "table {table} does not exist"),
        }
    }
}

/// Collapses line breaks and runs of white space into single spaces.
pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// ` on table T, key K` for the `Display` of [`Error::DynamoDb`]; empty when neither is known.
pub(super) struct DisplayTarget<'a>(pub(super) &'a Option<String>, pub(super) &'a Option<Item>);

impl fmt::Display for DisplayTarget<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = self.0 {
            write!(f, " on table {t}")?;
        }
        if let Some(k) = self.1 {
            write!(f, ", key {}", DisplayKey(k))?;
        }
        Ok(())
    }
}

/// A key (or item) on one line: `Id = "a", Sort = 5`, attributes in name order.
pub(super) struct DisplayKey<'a>(pub(super) &'a Item);

impl fmt::Display for DisplayKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        for (i, n) in names.into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match &self.0[n] {
                AttributeValue::S(v) => write!(f, "{n} = {v:?}")?,
                AttributeValue::N(v) => write!(f, "{n} = {v}")?,
                AttributeValue::B(v) => write!(f, "{n} = <{} bytes>", v.as_ref().len())?,
                other => write!(f, "{n} = {}", one_line(&format!("{other:?}")))?,
            }
        }
        Ok(())
    }
}
