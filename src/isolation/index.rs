//! What a secondary index holds, from the table's description.

use std::collections::HashSet;

use aws_sdk_dynamodb::types::ProjectionType;

use crate::error::{Error, Result};
use crate::keys::KeySchema;
use crate::manager::TransactionManager;

/// An index being read.
#[derive(Debug, Clone)]
pub(super) struct IndexInfo {
    pub(super) global: bool,
    /// The index's key attributes.
    pub(super) keys: Vec<String>,
    /// Attributes projected into the index; `None` for `ALL`.
    pub(super) projected: Option<HashSet<String>>,
}

impl IndexInfo {
    /// A global index that does not carry the lock attributes: results are re-read from the table.
    pub(super) fn indirect(&self) -> bool {
        self.global && self.projected.is_some()
    }
}

pub(super) async fn describe_index(
    mgr: &TransactionManager,
    table: &str,
    schema: &KeySchema,
    index: &str,
) -> Result<IndexInfo> {
    let desc = crate::tables::describe(&mgr.inner.client, table)
        .await?
        .ok_or_else(|| Error::table_not_found(table))?;
    let gsi = desc
        .global_secondary_indexes()
        .iter()
        .find(|i| i.index_name() == Some(index))
        .map(|i| (true, i.key_schema().to_vec(), i.projection().cloned()));
    let lsi = desc
        .local_secondary_indexes()
        .iter()
        .find(|i| i.index_name() == Some(index))
        .map(|i| (false, i.key_schema().to_vec(), i.projection().cloned()));
    let (global, key_schema, projection) = gsi
        .or(lsi)
        .ok_or_else(|| Error::invalid(format!("table {table} has no index named {index}")))?;
    let keys: Vec<String> = key_schema
        .iter()
        .map(|k| k.attribute_name().to_string())
        .collect();
    let projected = match projection.as_ref().and_then(|p| p.projection_type()) {
        Some(ProjectionType::All) => None,
        _ => {
            let mut set: HashSet<String> = schema.names().map(String::from).collect();
            set.extend(keys.iter().cloned());
            if let Some(p) = &projection {
                set.extend(p.non_key_attributes().iter().cloned());
            }
            Some(set)
        }
    };
    Ok(IndexInfo {
        global,
        keys,
        projected,
    })
}
