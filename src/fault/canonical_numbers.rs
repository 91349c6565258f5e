//! `CanonicalNumbers`: DynamoDB Local's answers with numbers as DynamoDB writes them.

use super::*;

/// Makes every lock stamp (`_TxD`, the lock time in ms with a random six-digit fraction) this process
/// writes from now on end in the digit 0 while `on`, as about one stamp in ten does by chance.
/// DynamoDB answers with such a number without its trailing zero (see [`CanonicalNumbers`]), so
/// this makes a rare production case happen on every lock. Process-wide: it affects every manager
/// in the process, which is harmless (the stamps stay valid and distinct in practice).
pub fn zero_ended_lock_stamps(on: bool) {
    crate::item_lock::ZERO_ENDED_STAMPS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Rewrites every number in DynamoDB's answers into the canonical form real DynamoDB answers with,
/// so that tests against DynamoDB Local see what production sees.
///
/// DynamoDB stores a number in one canonical form (leading and trailing zeros trimmed, no exponent:
/// `1.50` → `1.5`, `007` → `7`, `-0` → `0`, `1.0E+2` → `100`) and returns that form on every path.
/// DynamoDB Local does this for items written by `PutItem`, but returns the text it was given for
/// numbers written by `UpdateItem` — in `GetItem`, in `ReturnValues`, and in the items returned
/// with a failed condition. Code that compares a number it wrote with the one DynamoDB returned as
/// text passes every test against Local and fails in production. This HTTP client canonicalises
/// every `N` and every element of every `NS` of the AttributeValues in a response body
/// (`Item`, `Items`, `Attributes`, `LastEvaluatedKey`, `Responses`, `UnprocessedKeys`,
/// `UnprocessedItems`, `ItemCollectionMetrics`, `CancellationReasons`, the `Item` of a
/// `ConditionalCheckFailedException`, and numbers nested in `M` and `L`), walking the JSON by the
/// shape of DynamoDB's answers, so an attribute *named* `N` or `M` is never mistaken for a type tag.
/// Everything else passes through unchanged.
///
/// Like [`Delayer`], it wraps the HTTP client that sends the bytes; plug it in with
/// `aws_sdk_dynamodb::config::Builder::http_client`, alone ([`http_client`](Self::http_client))
/// or around another wrapper ([`wrap`](Self::wrap), e.g. around a [`Delayer`]'s client). Cheap to
/// clone; clones share the count.
///
/// ```no_run
/// use dynamodb_transactions::fault::CanonicalNumbers;
/// # fn demo(endpoint: &str) {
/// let numbers = CanonicalNumbers::new();
/// let conf = aws_sdk_dynamodb::Config::builder()
///     .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
///     .endpoint_url(endpoint)
///     .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
///     .http_client(numbers.http_client())
///     .build();
/// let client = aws_sdk_dynamodb::Client::from_conf(conf);
/// // ... run a workload with `client` ...
/// println!("{} numbers rewritten", numbers.rewritten());
/// # let _ = client;
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct CanonicalNumbers {
    rewritten: Arc<std::sync::atomic::AtomicU64>,
}

impl CanonicalNumbers {
    /// A rewriter that has rewritten nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Numbers whose text was changed so far.
    pub fn rewritten(&self) -> u64 {
        self.rewritten.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// An HTTP client that sends requests through `inner` and canonicalises the numbers in their
    /// answers. Synchronous.
    pub fn wrap(&self, inner: impl HttpClient + 'static) -> SharedHttpClient {
        SharedHttpClient::new(RewritingClient {
            inner: SharedHttpClient::new(inner),
            numbers: self.clone(),
        })
    }

    /// The SDK's default HTTPS client (as [`Delayer::http_client`]), with numbers canonicalised.
    /// Synchronous.
    pub fn http_client(&self) -> SharedHttpClient {
        self.wrap(default_https_client())
    }

    /// The body with its numbers canonicalised, or `None` when nothing changed (or it is not JSON).
    fn rewrite_body(&self, body: &[u8]) -> Option<Vec<u8>> {
        let mut json: serde_json::Value = serde_json::from_slice(body).ok()?;
        let changed = canonical::structure(&mut json);
        if changed == 0 {
            return None;
        }
        self.rewritten
            .fetch_add(changed, std::sync::atomic::Ordering::Relaxed);
        serde_json::to_vec(&json).ok()
    }
}

/// The [`HttpClient`] made by [`CanonicalNumbers::wrap`].
#[derive(Debug)]
struct RewritingClient {
    inner: SharedHttpClient,
    numbers: CanonicalNumbers,
}

impl HttpClient for RewritingClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(RewritingConnector {
            inner: self.inner.http_connector(settings, components),
            numbers: self.numbers.clone(),
        })
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct RewritingConnector {
    inner: SharedHttpConnector,
    numbers: CanonicalNumbers,
}

impl HttpConnector for RewritingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let inner = self.inner.clone();
        let numbers = self.numbers.clone();
        HttpConnectorFuture::new(async move {
            use aws_smithy_runtime_api::client::result::ConnectorError;
            use aws_smithy_types::body::SdkBody;
            let mut response = inner.call(request).await?;
            let body = response.take_body();
            let bytes = aws_smithy_types::byte_stream::ByteStream::new(body)
                .collect()
                .await
                .map_err(|e| ConnectorError::io(e.into()))?
                .into_bytes();
            match numbers.rewrite_body(&bytes) {
                Some(new) => {
                    let headers = response.headers_mut();
                    // The checksum and length were of the original body.
                    headers.remove("x-amz-crc32");
                    headers.insert("content-length", new.len().to_string());
                    *response.body_mut() = SdkBody::from(new);
                }
                None => *response.body_mut() = SdkBody::from(bytes),
            }
            Ok(response)
        })
    }
}

/// The walk over DynamoDB's JSON answers that finds the AttributeValues in them.
mod canonical {
    use serde_json::Value;

    /// An output or error structure: rewrites the AttributeValues under the members that hold
    /// items or keys, and the structures nested in the members that hold those. Returns how many
    /// numbers changed.
    pub(super) fn structure(v: &mut Value) -> u64 {
        let Some(obj) = v.as_object_mut() else {
            return 0;
        };
        let mut changed = 0;
        for (member, v) in obj.iter_mut() {
            changed += match member.as_str() {
                "Item" | "Attributes" | "Key" | "LastEvaluatedKey" | "ItemCollectionKey" => item(v),
                "Items" | "Keys" => each(v, item),
                "PutRequest" | "DeleteRequest" | "Error" => structure(v),
                "CancellationReasons" => each(v, structure),
                // BatchGetItem: table name → items; TransactGetItems and the PartiQL batches: a
                // list of structures with an `Item`.
                "Responses" => match v {
                    Value::Object(tables) => tables.values_mut().map(|t| each(t, item)).sum(),
                    other => each(other, structure),
                },
                // Table name → KeysAndAttributes.
                "UnprocessedKeys" => tables(v, structure),
                // Table name → write requests.
                "UnprocessedItems" => tables(v, |t| each(t, structure)),
                // One metrics structure (single-item writes), or table name → metrics structures.
                "ItemCollectionMetrics" => {
                    if v.get("ItemCollectionKey").is_some_and(Value::is_object) {
                        structure(v)
                    } else {
                        tables(v, |t| each(t, structure))
                    }
                }
                _ => 0,
            };
        }
        changed
    }

    fn tables(v: &mut Value, f: impl Fn(&mut Value) -> u64) -> u64 {
        v.as_object_mut()
            .map_or(0, |tables| tables.values_mut().map(f).sum())
    }

    fn each(v: &mut Value, f: impl Fn(&mut Value) -> u64) -> u64 {
        v.as_array_mut()
            .map_or(0, |list| list.iter_mut().map(f).sum())
    }

    /// An item or key: attribute name → AttributeValue.
    fn item(v: &mut Value) -> u64 {
        v.as_object_mut()
            .map_or(0, |attrs| attrs.values_mut().map(value).sum())
    }

    /// One AttributeValue: an object with one member named by its type.
    fn value(v: &mut Value) -> u64 {
        let Some(obj) = v.as_object_mut() else {
            return 0;
        };
        if obj.len() != 1 {
            return 0;
        }
        let Some((tag, inner)) = obj.iter_mut().next() else {
            return 0;
        };
        match tag.as_str() {
            "N" => number(inner),
            "NS" => each(inner, number),
            "M" => item(inner),
            "L" => each(inner, value),
            _ => 0,
        }
    }

    fn number(v: &mut Value) -> u64 {
        let Value::String(text) = v else {
            return 0;
        };
        match crate::keys::canonical_number(text) {
            Some(c) if c != *text => {
                *text = c;
                1
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::CanonicalNumbers;

    fn rewrite(v: serde_json::Value) -> (serde_json::Value, u64) {
        let numbers = CanonicalNumbers::new();
        let body = serde_json::to_vec(&v).unwrap();
        match numbers.rewrite_body(&body) {
            Some(new) => (serde_json::from_slice(&new).unwrap(), numbers.rewritten()),
            None => (v, 0),
        }
    }

    #[test]
    fn numbers_in_items_are_canonicalised() {
        let (out, n) = rewrite(json!({
            "Item": {
                "a": {"N": "1.50"},
                "N": {"N": "007"},
                "M": {"M": {"N": {"N": "-0"}, "S": {"S": "1.50"}, "L": {"L": [{"N": "1e2"}, {"S": "00"}]}}},
                "NS": {"NS": ["1.0E+2", "3"]},
                "s": {"S": "1.50"},
                "ss": {"SS": ["1.50"]}
            },
            "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.0}
        }));
        assert_eq!(
            out,
            json!({
                "Item": {
                    "a": {"N": "1.5"},
                    "N": {"N": "7"},
                    "M": {"M": {"N": {"N": "0"}, "S": {"S": "1.50"}, "L": {"L": [{"N": "100"}, {"S": "00"}]}}},
                    "NS": {"NS": ["100", "3"]},
                    "s": {"S": "1.50"},
                    "ss": {"SS": ["1.50"]}
                },
                "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.0}
            })
        );
        assert_eq!(n, 5);
    }

    #[test]
    fn every_answer_shape_is_walked() {
        let item = || json!({"k": {"N": "2.0"}});
        let canon = || json!({"k": {"N": "2"}});
        let (out, _) = rewrite(json!({
            "Items": [item()],
            "LastEvaluatedKey": item(),
            "Attributes": item(),
            "Responses": {"Item": [item()], "t": [item()]},
            "UnprocessedKeys": {"t": {"Keys": [item()], "ProjectionExpression": "k"}},
            "UnprocessedItems": {"t": [{"PutRequest": {"Item": item()}}, {"DeleteRequest": {"Key": item()}}]},
            "ItemCollectionMetrics": {"t": [{"ItemCollectionKey": item(), "SizeEstimateRangeGB": [0.0, 1.0]}]}
        }));
        assert_eq!(
            out,
            json!({
                "Items": [canon()],
                "LastEvaluatedKey": canon(),
                "Attributes": canon(),
                "Responses": {"Item": [canon()], "t": [canon()]},
                "UnprocessedKeys": {"t": {"Keys": [canon()], "ProjectionExpression": "k"}},
                "UnprocessedItems": {"t": [{"PutRequest": {"Item": canon()}}, {"DeleteRequest": {"Key": canon()}}]},
                "ItemCollectionMetrics": {"t": [{"ItemCollectionKey": canon(), "SizeEstimateRangeGB": [0.0, 1.0]}]}
            })
        );
        let (out, _) = rewrite(json!({
            "Responses": [{"Item": item()}, {}],
            "ItemCollectionMetrics": {"ItemCollectionKey": item()}
        }));
        assert_eq!(
            out,
            json!({
                "Responses": [{"Item": canon()}, {}],
                "ItemCollectionMetrics": {"ItemCollectionKey": canon()}
            })
        );
        // Errors: a failed condition's item, a cancelled transaction's reasons.
        let (out, _) = rewrite(json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "CancellationReasons": [{"Code": "None"}, {"Code": "ConditionalCheckFailed", "Item": item()}]
        }));
        assert_eq!(out["CancellationReasons"][1]["Item"], canon());
        let (out, _) = rewrite(json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "Item": item()
        }));
        assert_eq!(out["Item"], canon());
    }

    #[test]
    fn other_bodies_pass_unchanged() {
        let numbers = CanonicalNumbers::new();
        assert!(numbers.rewrite_body(b"").is_none());
        assert!(numbers.rewrite_body(b"not json").is_none());
        assert!(
            numbers
                .rewrite_body(br#"{"Item":{"a":{"N":"1.5"}},"Count":10}"#)
                .is_none()
        );
        assert!(
            numbers
                .rewrite_body(br#"{"Table":{"ItemCount":10,"Key":"1.50"}}"#)
                .is_none()
        );
        assert_eq!(numbers.rewritten(), 0);
    }
}
