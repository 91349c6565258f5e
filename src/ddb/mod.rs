//! Thin helpers over aws-sdk-dynamodb: conditional writes that report the current item when their
//! condition fails, and `TransactWriteItems` batches with per-action outcomes; and the client
//! interceptor that records whether a failed request was sent ([`send_tracker`]).

mod send_tracker;

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};

use crate::error::{Error, Item, Result};
use crate::request::{item_size, value_size};

pub(crate) use send_tracker::{Transmissions, track_sends};

/// Most actions in one `TransactWriteItems`.
pub(crate) const MAX_TRANSACT_ACTIONS: usize = 100;
/// Most bytes we put in one `TransactWriteItems` (DynamoDB allows 4 MB).
pub(crate) const MAX_TRANSACT_BYTES: usize = 3_500_000;

/// Names and values of the library's own expression placeholders (all start with `#_Tx` / `:_Tx`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Placeholders {
    pub names: HashMap<String, String>,
    pub values: HashMap<String, AttributeValue>,
}

impl Placeholders {
    /// `#_TxId` for `_TxId`, registering it.
    pub fn name(&mut self, attr: &str) -> String {
        let p = format!("#{attr}");
        self.names.insert(p.clone(), attr.to_string());
        p
    }

    /// `:_Tx<label>` for a value, registering it.
    pub fn value(&mut self, label: &str, v: AttributeValue) -> String {
        let p = format!(":_Tx{label}");
        self.values.insert(p.clone(), v);
        p
    }

    /// Adds a user's placeholders (they never collide: users may not use `#_Tx`/`:_Tx`).
    pub fn extend_user(
        &mut self,
        names: Option<&HashMap<String, String>>,
        values: Option<&HashMap<String, AttributeValue>>,
    ) {
        if let Some(n) = names {
            self.names
                .extend(n.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if let Some(v) = values {
            self.values
                .extend(v.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }

    /// Keeps only the placeholders that `exprs` use (DynamoDB rejects unused ones).
    fn used_by(&self, exprs: &[&str]) -> UsedPlaceholders {
        let uses = |p: &str| exprs.iter().any(|e| contains_placeholder(e, p));
        let names: HashMap<_, _> = self
            .names
            .iter()
            .filter(|(k, _)| uses(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let values: HashMap<_, _> = self
            .values
            .iter()
            .filter(|(k, _)| uses(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (
            (!names.is_empty()).then_some(names),
            (!values.is_empty()).then_some(values),
        )
    }
}

type UsedPlaceholders = (
    Option<HashMap<String, String>>,
    Option<HashMap<String, AttributeValue>>,
);

fn contains_placeholder(expr: &str, p: &str) -> bool {
    let mut from = 0;
    while let Some(i) = expr[from..].find(p) {
        let end = from + i + p.len();
        let next = expr.as_bytes().get(end).copied();
        if !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
            return true;
        }
        from = end;
    }
    false
}

/// One conditional write.
#[derive(Debug, Clone)]
pub(crate) enum WriteKind {
    Put {
        item: Item,
    },
    Update {
        key: Item,
        update: String,
    },
    Delete {
        key: Item,
    },
    /// Only a condition (inside `TransactWriteItems`).
    Check {
        key: Item,
    },
}

/// A write with its table, condition and placeholders.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub table: String,
    pub kind: WriteKind,
    pub condition: Option<String>,
    pub ph: Placeholders,
}

/// Outcome of a single conditional write.
#[derive(Debug)]
pub(crate) enum Written {
    /// Done; the attributes asked for with `ReturnValues`.
    Ok(Option<Item>),
    /// The condition was false; the item as it is (`None`: it does not exist).
    ConditionFailed(Option<Item>),
}

/// Why one action of a cancelled `TransactWriteItems` failed.
#[derive(Debug, Clone)]
pub(crate) struct Reason {
    pub code: String,
    pub message: Option<String>,
    pub item: Option<Item>,
}

impl Reason {
    pub fn is_ok(&self) -> bool {
        self.code == "None"
    }
    pub fn is_condition_failed(&self) -> bool {
        self.code == "ConditionalCheckFailed"
    }
    /// Throttled, in conflict, or otherwise worth trying again (see `error::is_transient_code`).
    pub fn is_transient(&self) -> bool {
        crate::error::is_transient_code(&self.code)
    }
}

/// Outcome of a `TransactWriteItems`.
#[derive(Debug)]
pub(crate) enum Transacted {
    Ok,
    /// Cancelled; one reason per action, in order.
    Cancelled(Vec<Reason>),
}

impl Write {
    /// An `UpdateItem` of `key` in `table` (`update`, an update expression), conditional on
    /// `condition`, with the placeholders both use.
    pub fn update(
        table: &str,
        key: Item,
        update: String,
        condition: String,
        ph: Placeholders,
    ) -> Write {
        Write {
            table: table.into(),
            kind: WriteKind::Update { key, update },
            condition: Some(condition),
            ph,
        }
    }

    /// Adds `cond` to the write's condition (`(<condition>) AND <cond>`).
    pub fn and_condition(&mut self, cond: String) {
        self.condition = Some(match self.condition.take() {
            Some(c) => format!("({c}) AND {cond}"),
            None => cond,
        });
    }

    /// The key of the item the write targets (`None` for a put).
    pub fn kind_key(&self) -> Option<&Item> {
        match &self.kind {
            WriteKind::Put { .. } => None,
            WriteKind::Update { key, .. }
            | WriteKind::Delete { key }
            | WriteKind::Check { key } => Some(key),
        }
    }

    pub fn size(&self) -> usize {
        let body = match &self.kind {
            WriteKind::Put { item } => item_size(item),
            WriteKind::Update { key, update } => item_size(key) + update.len(),
            WriteKind::Delete { key } | WriteKind::Check { key } => item_size(key),
        };
        body + self.condition.as_ref().map_or(0, |c| c.len())
            + self.ph.values.values().map(value_size).sum::<usize>()
    }

    fn exprs(&self) -> Vec<&str> {
        let mut e: Vec<&str> = self.condition.iter().map(String::as_str).collect();
        if let WriteKind::Update { update, .. } = &self.kind {
            e.push(update);
        }
        e
    }

    pub fn to_transact(&self) -> Result<TransactWriteItem> {
        let (names, values) = self.ph.used_by(&self.exprs());
        let on_fail = ReturnValuesOnConditionCheckFailure::AllOld;
        let built = match &self.kind {
            WriteKind::Put { item } => TransactWriteItem::builder().put(
                Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(item.clone()))
                    .set_condition_expression(self.condition.clone())
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .return_values_on_condition_check_failure(on_fail)
                    .build()
                    .map_err(build_err)?,
            ),
            WriteKind::Update { key, update } => TransactWriteItem::builder().update(
                Update::builder()
                    .table_name(&self.table)
                    .set_key(Some(key.clone()))
                    .update_expression(update)
                    .set_condition_expression(self.condition.clone())
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .return_values_on_condition_check_failure(on_fail)
                    .build()
                    .map_err(build_err)?,
            ),
            WriteKind::Delete { key } => TransactWriteItem::builder().delete(
                Delete::builder()
                    .table_name(&self.table)
                    .set_key(Some(key.clone()))
                    .set_condition_expression(self.condition.clone())
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .return_values_on_condition_check_failure(on_fail)
                    .build()
                    .map_err(build_err)?,
            ),
            WriteKind::Check { key } => TransactWriteItem::builder().condition_check(
                ConditionCheck::builder()
                    .table_name(&self.table)
                    .set_key(Some(key.clone()))
                    .condition_expression(self.condition.clone().unwrap_or_default())
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .return_values_on_condition_check_failure(on_fail)
                    .build()
                    .map_err(build_err)?,
            ),
        };
        Ok(built.build())
    }

    /// Sends the write on its own. `ConditionalCheckFailed` is an outcome, not an error. A write
    /// DynamoDB refuses because its item is part of a `TransactWriteItems` in flight
    /// (`TransactionConflictException`: nothing was written) is sent again after a short pause,
    /// a bounded number of times (see [`CONFLICT_RETRIES`]).
    pub async fn send(
        &self,
        client: &Client,
        return_values: Option<ReturnValue>,
    ) -> Result<Written> {
        self.send_counted(client, return_values, None).await
    }

    /// [`send`](Self::send), counting in `sends` every attempt that may have reached DynamoDB
    /// (the SDK's own resends included) and every answer seen: a failed condition then tells
    /// whether an attempt whose answer nobody saw may have landed before it
    /// ([`Transmissions::unseen`]). A single-item write only.
    pub async fn send_counted(
        &self,
        client: &Client,
        return_values: Option<ReturnValue>,
        sends: Option<&Transmissions>,
    ) -> Result<Written> {
        let mut attempt = 0;
        loop {
            // Boxed: every protocol step awaits this; its future would otherwise be inlined into
            // theirs, which a debug build's test threads overflow.
            match Box::pin(self.send_once(client, return_values.clone(), sends)).await {
                Err(e) if is_conflict(&e) && attempt < CONFLICT_RETRIES => {
                    conflict_pause(attempt).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// The operation that sends the write on its own.
    fn operation(&self) -> &'static str {
        match self.kind {
            WriteKind::Put { .. } => "PutItem",
            WriteKind::Update { .. } => "UpdateItem",
            WriteKind::Delete { .. } => "DeleteItem",
            WriteKind::Check { .. } => "TransactWriteItems",
        }
    }

    /// A failed request's error, naming the write's table and, where the write names it, its
    /// item's key (a put's key is inside its item, whose key attributes only the table knows).
    fn locate(&self, e: Error) -> Error {
        match self.kind_key() {
            Some(key) => e.on_item(&self.table, key),
            None => e.on_table(&self.table),
        }
    }

    async fn send_once(
        &self,
        client: &Client,
        return_values: Option<ReturnValue>,
        sends: Option<&Transmissions>,
    ) -> Result<Written> {
        let (names, values) = self.ph.used_by(&self.exprs());
        let on_fail = ReturnValuesOnConditionCheckFailure::AllOld;
        // The three single-item operations differ only in their builder (with its item or key)
        // and the error type that carries a failed condition's item; the rest is one path.
        macro_rules! send_one {
            ($builder:expr, $failed:path) => {{
                let b = $builder
                    .set_condition_expression(self.condition.clone())
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .set_return_values(return_values)
                    .return_values_on_condition_check_failure(on_fail);
                let r = match sends {
                    Some(t) => b.customize().interceptor(t.clone()).send().await,
                    None => b.send().await,
                };
                // DynamoDB's answer (a success or a service error) is the last attempt's.
                if let Some(t) = sends.filter(|_| {
                    r.as_ref()
                        .err()
                        .is_none_or(|e| e.as_service_error().is_some())
                }) {
                    t.saw_answer();
                }
                match r {
                    Ok(o) => Ok(Written::Ok(o.attributes)),
                    Err(e) => match e.as_service_error() {
                        Some($failed(c)) => Ok(Written::ConditionFailed(c.item.clone())),
                        _ => Err(self.locate(Error::sdk(self.operation(), e))),
                    },
                }
            }};
        }
        use aws_sdk_dynamodb::operation::{
            delete_item::DeleteItemError, put_item::PutItemError, update_item::UpdateItemError,
        };
        match &self.kind {
            WriteKind::Put { item } => send_one!(
                client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item.clone())),
                PutItemError::ConditionalCheckFailedException
            ),
            WriteKind::Update { key, update } => send_one!(
                client
                    .update_item()
                    .table_name(&self.table)
                    .set_key(Some(key.clone()))
                    .update_expression(update),
                UpdateItemError::ConditionalCheckFailedException
            ),
            WriteKind::Delete { key } => send_one!(
                client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(key.clone())),
                DeleteItemError::ConditionalCheckFailedException
            ),
            WriteKind::Check { .. } => match transact(client, std::slice::from_ref(self)).await? {
                Transacted::Ok => Ok(Written::Ok(None)),
                Transacted::Cancelled(reasons) => {
                    let r = reasons.into_iter().next();
                    match r {
                        Some(r) if r.is_condition_failed() => Ok(Written::ConditionFailed(r.item)),
                        Some(r) => Err(Error::DynamoDb {
                            operation: "TransactWriteItems",
                            table: Some(self.table.clone()),
                            key: None,
                            code: Some(r.code.clone()),
                            message: r.message.clone(),
                            ambiguous: false,
                            source: format!("condition check cancelled: {}", r.code).into(),
                        }),
                        None => Err(Error::invariant("cancelled transaction without reasons")),
                    }
                }
            },
        }
    }
}

fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> Error {
    Error::invariant(format!("request build failed: {e}"))
}

/// Runs writes as one `TransactWriteItems` (all or nothing). Cancellation is an outcome, but one
/// only for conflicts with other transactions in flight or throttling (nothing was written) is
/// sent again after a short pause, with a new token, a bounded number of times (see
/// [`CONFLICT_RETRIES`]); the last such cancellation is returned.
pub(crate) async fn transact(client: &Client, writes: &[Write]) -> Result<Transacted> {
    let mut attempt = 0;
    loop {
        let out = Box::pin(transact_with_token(client, writes, None)).await?;
        match &out {
            Transacted::Cancelled(reasons)
                if attempt < CONFLICT_RETRIES
                    && reasons.iter().all(|r| r.is_ok() || r.is_transient())
                    && reasons.iter().any(Reason::is_transient) =>
            {
                conflict_pause(attempt).await;
                attempt += 1;
            }
            _ => return Ok(out),
        }
    }
}

/// How many times a write refused for a conflict with a `TransactWriteItems` in flight (or a
/// transaction cancelled only for conflicts or throttling) is sent again before the refusal is
/// returned. DynamoDB holds an item for a transaction only while that transaction runs (a few
/// round trips), so the pauses (5, 10, 20, 40 ms, jittered) outlast most.
pub(crate) const CONFLICT_RETRIES: u32 = 4;

async fn conflict_pause(attempt: u32) {
    use rand::Rng;
    let base = 5u64 << attempt.min(6);
    let ms = rand::rng().random_range(base / 2..=base);
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// True for DynamoDB's refusal of a single-item write whose item is part of a
/// `TransactWriteItems` in flight (nothing was written).
pub(crate) fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::DynamoDb { code: Some(c), ambiguous: false, .. } if c == "TransactionConflictException")
}

/// [`transact`] with an explicit idempotency token: repeating it with the same token and writes
/// within 10 minutes does not apply them twice.
pub(crate) async fn transact_with_token(
    client: &Client,
    writes: &[Write],
    token: Option<String>,
) -> Result<Transacted> {
    let items = writes
        .iter()
        .map(Write::to_transact)
        .collect::<Result<Vec<_>>>()?;
    match client
        .transact_write_items()
        .set_transact_items(Some(items))
        .set_client_request_token(token)
        .send()
        .await
    {
        Ok(_) => Ok(Transacted::Ok),
        Err(e) => match e.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                let reasons = c
                    .cancellation_reasons()
                    .iter()
                    .map(|r| Reason {
                        code: r.code().unwrap_or("None").to_string(),
                        message: r.message().map(String::from),
                        item: r.item().cloned(),
                    })
                    .collect::<Vec<_>>();
                if reasons.len() != writes.len() {
                    return Err(Error::sdk("TransactWriteItems", e));
                }
                Ok(Transacted::Cancelled(reasons))
            }
            _ => Err(Error::sdk("TransactWriteItems", e)),
        },
    }
}

/// The whole item of `table` at `key`, read consistently (one `GetItem`); `None` when absent.
pub(crate) async fn get_consistent(
    client: &Client,
    table: &str,
    key: &Item,
) -> Result<Option<Item>> {
    Ok(client
        .get_item()
        .table_name(table)
        .set_key(Some(key.clone()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e).on_item(table, key))?
        .item)
}

/// Consistent reads of many items (BatchGetItem, 100 keys per request, unprocessed keys retried).
/// Returns the items found, in no particular order.
pub(crate) async fn batch_get(
    client: &Client,
    keys: &[(String, Item)],
) -> Result<Vec<(String, Item)>> {
    use aws_sdk_dynamodb::types::KeysAndAttributes;
    let mut out = Vec::new();
    for chunk in keys.chunks(100) {
        let mut by_table: HashMap<String, Vec<Item>> = HashMap::new();
        for (t, k) in chunk {
            let list = by_table.entry(t.clone()).or_default();
            if !list.contains(k) {
                list.push(k.clone());
            }
        }
        let mut request: HashMap<String, KeysAndAttributes> = by_table
            .into_iter()
            .map(|(t, ks)| {
                (
                    t,
                    KeysAndAttributes::builder()
                        .set_keys(Some(ks))
                        .consistent_read(true)
                        .build()
                        .expect("keys set"),
                )
            })
            .collect();
        let mut delay = std::time::Duration::from_millis(5);
        while !request.is_empty() {
            let resp = client
                .batch_get_item()
                .set_request_items(Some(request))
                .send()
                .await
                .map_err(|e| Error::sdk("BatchGetItem", e))?;
            for (t, items) in resp.responses.unwrap_or_default() {
                out.extend(items.into_iter().map(|i| (t.clone(), i)));
            }
            request = resp.unprocessed_keys.unwrap_or_default();
            if !request.is_empty() {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_millis(500));
            }
        }
    }
    Ok(out)
}

/// Unconditional deletes of many keys (BatchWriteItem, 25 per request, unprocessed retried).
pub(crate) async fn batch_delete(client: &Client, table: &str, keys: Vec<Item>) -> Result<()> {
    use aws_sdk_dynamodb::types::{DeleteRequest, WriteRequest};
    for chunk in keys.chunks(25) {
        let reqs: Vec<WriteRequest> = chunk
            .iter()
            .map(|k| {
                WriteRequest::builder()
                    .delete_request(
                        DeleteRequest::builder()
                            .set_key(Some(k.clone()))
                            .build()
                            .expect("key set"),
                    )
                    .build()
            })
            .collect();
        let mut pending = HashMap::from([(table.to_string(), reqs)]);
        let mut delay = std::time::Duration::from_millis(5);
        while !pending.is_empty() {
            let resp = client
                .batch_write_item()
                .set_request_items(Some(pending))
                .send()
                .await
                .map_err(|e| Error::sdk("BatchWriteItem", e).on_table(table))?;
            pending = resp.unprocessed_items.unwrap_or_default();
            pending.retain(|_, v| !v.is_empty());
            if !pending.is_empty() {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_millis(500));
            }
        }
    }
    Ok(())
}

/// Wall-clock time in epoch milliseconds (persisted; never used to measure durations).
pub(crate) fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_matching_is_whole_word() {
        assert!(contains_placeholder("SET #_TxA = :_TxOne", "#_TxA"));
        assert!(!contains_placeholder("SET #_TxAB = :x", "#_TxA"));
        assert!(contains_placeholder("a = :v, b = :v2", ":v"));
        assert!(!contains_placeholder("b = :v2", ":v"));
    }
}
