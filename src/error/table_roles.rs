//! Which tables are the library's own: the transactions and images tables of the managers built
//! in this process, so that a missing table's error can say how to create it.

use std::collections::HashMap;

use super::{Error, TableRole};

impl Error {
    /// [`Error::TableNotFound`] for `table`, with its role as the managers built in this process
    /// registered it.
    pub(crate) fn table_not_found(table: &str) -> Error {
        Error::TableNotFound {
            table: table.to_string(),
            role: table_role(table),
        }
    }
}

/// The transactions and images tables of every [`TransactionManager`](crate::TransactionManager)
/// built in this process, by name. A request that fails for a missing table knows only the
/// table's name; this tells whether it is one of the library's tables, so that the error can say
/// how to create it and what the failure left.
static LIBRARY_TABLES: std::sync::LazyLock<std::sync::RwLock<HashMap<String, TableRole>>> =
    std::sync::LazyLock::new(Default::default);

/// Notes that `table` is a transactions or images table (see [`LIBRARY_TABLES`]).
pub(crate) fn register_table(table: &str, role: TableRole) {
    let known = LIBRARY_TABLES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(table)
        == Some(&role);
    if !known {
        LIBRARY_TABLES
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(table.to_string(), role);
    }
}

/// The role of `table`: [`TableRole::Other`] unless a manager of this process uses it as its
/// transactions or images table.
pub(crate) fn table_role(table: &str) -> TableRole {
    LIBRARY_TABLES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(table)
        .copied()
        .unwrap_or(TableRole::Other)
}
