//! Creating and verifying the library's two tables.
//!
//! The transactions table holds TX records (hash key `_TxId` S, range key `_TxN` N: row 0 is the
//! record's header, rows 1.. hold request lists too large for one item). The images table holds
//! before-images of items too large to carry their own image (hash key `_TxI` S).

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus,
};

use crate::error::{Error, Result};

/// Hash key of the transactions table.
pub(crate) const TX_ID: &str = "_TxId";
/// Range key of the transactions table.
pub(crate) const TX_ROW: &str = "_TxN";
/// Hash key of the images table.
pub(crate) const IMAGE_ID: &str = "_TxI";

/// The key layout a table must have.
#[derive(Debug, Clone)]
pub(crate) struct TableLayout {
    pub hash: (&'static str, ScalarAttributeType),
    pub range: Option<(&'static str, ScalarAttributeType)>,
}

pub(crate) const TX_TABLE: TableLayout = TableLayout {
    hash: (TX_ID, ScalarAttributeType::S),
    range: Some((TX_ROW, ScalarAttributeType::N)),
};

pub(crate) const IMAGE_TABLE: TableLayout = TableLayout {
    hash: (IMAGE_ID, ScalarAttributeType::S),
    range: None,
};

/// Returns the description of `table`, or `None` if it does not exist.
pub(crate) async fn describe(client: &Client, table: &str) -> Result<Option<TableDescription>> {
    match client.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table),
        Err(e) => match e.as_service_error() {
            Some(DescribeTableError::ResourceNotFoundException(_)) => Ok(None),
            _ => Err(Error::sdk("DescribeTable", e).on_table(table)),
        },
    }
}

/// Checks that `desc` has exactly the key layout `layout`.
pub(crate) fn check_layout(
    table: &str,
    desc: &TableDescription,
    layout: &TableLayout,
) -> Result<()> {
    let mismatch = |m: String| {
        Err(Error::TableMismatch {
            table: table.to_string(),
            mismatch: m,
        })
    };
    let type_of = |name: &str| {
        desc.attribute_definitions()
            .iter()
            .find(|d| d.attribute_name() == name)
            .map(|d| d.attribute_type().clone())
    };
    let keys = desc.key_schema();
    let want_len = 1 + usize::from(layout.range.is_some());
    let describe_keys = || {
        keys.iter()
            .map(|k| format!("{} {}", k.attribute_name(), k.key_type().as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let expected = || {
        let mut s = format!("{} HASH ({})", layout.hash.0, layout.hash.1.as_str());
        if let Some((r, t)) = &layout.range {
            s.push_str(&format!(", {r} RANGE ({})", t.as_str()));
        }
        s
    };
    if keys.len() != want_len {
        return mismatch(format!(
            "key schema is [{}], expected [{}]",
            describe_keys(),
            expected()
        ));
    }
    let wanted = std::iter::once((layout.hash.0, &layout.hash.1, KeyType::Hash))
        .chain(layout.range.iter().map(|(n, t)| (*n, t, KeyType::Range)));
    for (name, ty, kind) in wanted {
        let Some(k) = keys.iter().find(|k| k.key_type() == &kind) else {
            return mismatch(format!(
                "key schema is [{}], expected [{}]",
                describe_keys(),
                expected()
            ));
        };
        if k.attribute_name() != name {
            return mismatch(format!(
                "key schema is [{}], expected [{}]",
                describe_keys(),
                expected()
            ));
        }
        if type_of(name).as_ref() != Some(ty) {
            return mismatch(format!(
                "key attribute {name} has type {}, expected {}",
                type_of(name)
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_else(|| "?".into()),
                ty.as_str()
            ));
        }
    }
    Ok(())
}

/// Creates `table` with `layout` (on-demand billing) unless it exists; verifies it if it does; waits
/// until it is ACTIVE. Safe to call concurrently and repeatedly.
pub(crate) async fn create_or_verify(
    client: &Client,
    table: &str,
    layout: &TableLayout,
    wait: Duration,
) -> Result<()> {
    if let Some(desc) = describe(client, table).await? {
        check_layout(table, &desc, layout)?;
        return wait_active(client, table, layout, wait).await;
    }
    let mut req = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr_def(layout.hash.0, layout.hash.1.clone()))
        .key_schema(key_elem(layout.hash.0, KeyType::Hash));
    if let Some((r, t)) = &layout.range {
        req = req
            .attribute_definitions(attr_def(r, t.clone()))
            .key_schema(key_elem(r, KeyType::Range));
    }
    if let Err(e) = req.send().await {
        // Someone else created it at the same moment: fine, verify theirs.
        if !e
            .as_service_error()
            .is_some_and(|s| s.is_resource_in_use_exception())
        {
            return Err(Error::sdk("CreateTable", e).on_table(table));
        }
    }
    wait_active(client, table, layout, wait).await
}

/// Verifies that `table` exists with `layout`.
pub(crate) async fn verify(client: &Client, table: &str, layout: &TableLayout) -> Result<()> {
    match describe(client, table).await? {
        None => Err(Error::table_not_found(table)),
        Some(desc) => check_layout(table, &desc, layout),
    }
}

async fn wait_active(
    client: &Client,
    table: &str,
    layout: &TableLayout,
    wait: Duration,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut delay = Duration::from_millis(50);
    loop {
        if let Some(desc) = describe(client, table).await? {
            check_layout(table, &desc, layout)?;
            match desc.table_status() {
                Some(TableStatus::Active) => return Ok(()),
                Some(TableStatus::Deleting) => {
                    return Err(Error::TableMismatch {
                        table: table.to_string(),
                        mismatch: "table is being deleted".into(),
                    });
                }
                _ => {}
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::TableMismatch {
                table: table.to_string(),
                mismatch: format!("table did not become ACTIVE within {wait:?}"),
            });
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

fn attr_def(name: &str, ty: ScalarAttributeType) -> AttributeDefinition {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ty)
        .build()
        .expect("name and type are set")
}

fn key_elem(name: &str, kind: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .expect("name and type are set")
}
