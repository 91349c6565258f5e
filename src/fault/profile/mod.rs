//! `DynamoDbProfile`: DynamoDB Local answering as DynamoDB does where the two differ.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use serde_json::{Map, Value, json};

mod admission;
mod conflicts;
mod service;
mod stale;
mod throughput;
mod versions;
mod wire;

use admission::Admission;
use conflicts::InFlight;
use throughput::Buckets;
use versions::Versions;
use wire::ItemId;

/// What a [`DynamoDbProfile`] makes DynamoDB Local do as DynamoDB does. Each behaviour can be
/// switched on alone; [`Default`] switches every one on.
///
/// ```
/// use std::time::Duration;
/// use dynamodb_transactions::fault::ProfileSettings;
/// let mut only_conflicts = ProfileSettings::none(7);
/// only_conflicts.conflicts = true;
/// only_conflicts.round_trip = Duration::from_millis(2);
/// # let _ = only_conflicts;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProfileSettings {
    /// DynamoDB's transaction-conflict rule (developer guide, "Transaction conflict handling"):
    /// a `TransactWriteItems` with an item (any action, `ConditionCheck` included) that is part
    /// of another `TransactWriteItems` in flight is cancelled with `TransactionConflict` on the
    /// conflicting actions and `None` on the others; a `PutItem`, `UpdateItem`, `DeleteItem` (or
    /// a `BatchWriteItem` with such an item: the profile's choice, the guide names no answer) on
    /// an item of one in flight is refused with `TransactionConflictException`. A refused
    /// request never reaches DynamoDB Local. A `TransactWriteItems` is in flight from its arrival
    /// until its answer reaches the caller.
    pub conflicts: bool,
    /// Eventually consistent reads: a `GetItem`, `BatchGetItem`, `Query` or `Scan` without
    /// `ConsistentRead`, and every index query, may return for each item any version current
    /// within the last [`stale_window`](Self::stale_window), picked at random. Consistent reads
    /// always return the current version.
    pub stale_reads: bool,
    /// How long a version may still be read after it stopped being current (default 1 s).
    pub stale_window: Duration,
    /// The chance that an eventually consistent read of an item that changed within the window
    /// returns an older version (default 0.5).
    pub stale_probability: f64,
    /// Per-item throughput: write and read units on one item beyond
    /// [`write_units_per_second`](Self::write_units_per_second) and
    /// [`read_units_per_second`](Self::read_units_per_second) (with up to one second of them
    /// saved up) are refused as DynamoDB refuses them: `ThrottlingException` for a single-item
    /// request (the SDK retries it), `ThrottlingError` in a `TransactWriteItems`' cancellation
    /// reasons. Nothing refused reaches DynamoDB Local.
    pub throttling: bool,
    /// Write units per second one item (one partition) takes (default 1,000, DynamoDB's
    /// per-partition limit).
    pub write_units_per_second: f64,
    /// Read units per second one item takes (default 3,000).
    pub read_units_per_second: f64,
    /// The network's round trip, half before the request reaches DynamoDB Local and half after
    /// its answer (default 5 ms: AWS describes `GetItem`'s and `PutItem`'s average latency from
    /// a client in the table's region as single-digit milliseconds).
    pub round_trip: Duration,
    /// Up to this much more, drawn at random per request and split the same way (default 2 ms).
    pub jitter: Duration,
    /// DynamoDB's own time per request in place of DynamoDB Local's: an answer that Local gives
    /// sooner is held until DynamoDB's service time for the request has passed since it reached
    /// Local (a later one is passed on as it comes). Without it a request takes the round trip
    /// plus Local's time, which follows the items written, one transaction at a time. The
    /// figures are public p50s from a client in the table's region less the default round trip
    /// (a `PutItem` 2.55 ms; a batch 2.6 ms + 0.1 ms per item; a transaction 18.6 ms + 0.34 ms
    /// per action), so with the default round trip a `PutItem` takes 7.55 ms and a
    /// `TransactWriteItems` of 25 actions 32.1 ms, as measured on DynamoDB. A transaction in
    /// flight for longer meets more conflicts, as on DynamoDB. Refused requests (a conflict,
    /// throttling) are answered after the round trip alone.
    pub service_time: bool,
    /// Seeds every random choice (jitter, stale versions), so a failing run can be replayed.
    pub seed: u64,
}

impl ProfileSettings {
    /// Every behaviour on, with the default figures.
    pub fn all(seed: u64) -> Self {
        ProfileSettings {
            conflicts: true,
            stale_reads: true,
            stale_window: Duration::from_secs(1),
            stale_probability: 0.5,
            throttling: true,
            write_units_per_second: 1000.0,
            read_units_per_second: 3000.0,
            round_trip: Duration::from_millis(5),
            jitter: Duration::from_millis(2),
            service_time: true,
            seed,
        }
    }

    /// Every behaviour off and no delay (the figures stay the defaults): switch on what a test
    /// needs.
    pub fn none(seed: u64) -> Self {
        ProfileSettings {
            conflicts: false,
            stale_reads: false,
            throttling: false,
            round_trip: Duration::ZERO,
            jitter: Duration::ZERO,
            service_time: false,
            ..Self::all(seed)
        }
    }
}

impl Default for ProfileSettings {
    fn default() -> Self {
        Self::all(0)
    }
}

/// What a [`DynamoDbProfile`] did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProfileStats {
    /// Requests seen.
    pub requests: u64,
    /// `TransactWriteItems` cancelled for a conflict with another in flight.
    pub transactions_in_conflict: u64,
    /// Single-item (or batch) writes refused with `TransactionConflictException`.
    pub writes_in_conflict: u64,
    /// Requests refused for throughput (single-item requests and `TransactWriteItems`).
    pub throttled: u64,
    /// Items an eventually consistent read returned in an older version than the current one.
    pub stale_items: u64,
    /// Versions observed after writes (what stale reads pick from).
    pub versions_observed: u64,
}

impl ProfileStats {
    /// What the profile did between `earlier` (stats taken before) and these: each count's
    /// difference.
    ///
    /// ```
    /// # use dynamodb_transactions::fault::{DynamoDbProfile, ProfileSettings};
    /// let profile = DynamoDbProfile::new(ProfileSettings::all(1));
    /// let before = profile.stats();
    /// // ... requests through the profile's client ...
    /// let during = profile.stats().since(&before);
    /// assert_eq!(during.transactions_in_conflict, 0);
    /// ```
    pub fn since(&self, earlier: &ProfileStats) -> ProfileStats {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        ProfileStats {
            requests: d(self.requests, earlier.requests),
            transactions_in_conflict: d(
                self.transactions_in_conflict,
                earlier.transactions_in_conflict,
            ),
            writes_in_conflict: d(self.writes_in_conflict, earlier.writes_in_conflict),
            throttled: d(self.throttled, earlier.throttled),
            stale_items: d(self.stale_items, earlier.stale_items),
            versions_observed: d(self.versions_observed, earlier.versions_observed),
        }
    }
}

impl std::ops::AddAssign for ProfileStats {
    /// Adds another period's counts (for totals over several profiles or scenarios).
    fn add_assign(&mut self, o: ProfileStats) {
        self.requests += o.requests;
        self.transactions_in_conflict += o.transactions_in_conflict;
        self.writes_in_conflict += o.writes_in_conflict;
        self.throttled += o.throttled;
        self.stale_items += o.stale_items;
        self.versions_observed += o.versions_observed;
    }
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    transactions_in_conflict: AtomicU64,
    writes_in_conflict: AtomicU64,
    throttled: AtomicU64,
    stale_items: AtomicU64,
    versions_observed: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What the profile keeps between requests (under one lock; nothing awaits while holding it).
#[derive(Debug)]
struct State {
    rng: rand::rngs::StdRng,
    in_flight: InFlight,
    writes: Buckets,
    reads: Buckets,
    versions: Versions,
    /// The size of each item as last written through the profile (for the units it bills).
    stored: HashMap<ItemId, usize>,
}

#[derive(Debug)]
struct Shared {
    settings: ProfileSettings,
    state: Arc<Mutex<State>>,
    /// Key attribute names per table (from `DescribeTable`), and its indexes' key names.
    schemas: Mutex<HashMap<String, Arc<stale::Schema>>>,
    counters: Counters,
}

/// DynamoDB Local, answering as DynamoDB does where they differ: transaction conflicts,
/// eventually consistent reads, per-item throughput and network latency (see
/// [`ProfileSettings`] for each). Numbers are the [`CanonicalNumbers`](super::CanonicalNumbers)
/// layer's: wrap this profile's client in it for the whole profile.
///
/// An HTTP client, like [`Delayer`](super::Delayer): plug it in with
/// `aws_sdk_dynamodb::config::Builder::http_client`. Every client made from one profile (or its
/// clones) shares one view of DynamoDB — the transactions in flight, the items' recent versions,
/// their throughput — as every coordinator of a real table shares the table: give every client
/// of a test the same profile. DynamoDB Local still stores and decides everything else; a
/// request the profile refuses never reaches it.
///
/// To serve stale reads, the profile observes each item after every write with a consistent
/// `BatchGetItem` of its own, and learns tables' keys with `DescribeTable`; neither passes
/// through the client's interceptors, so request counters do not see them.
///
/// ```no_run
/// use dynamodb_transactions::fault::{CanonicalNumbers, DynamoDbProfile, ProfileSettings};
/// # fn demo(endpoint: &str) {
/// let profile = DynamoDbProfile::new(ProfileSettings::all(42));
/// let conf = aws_sdk_dynamodb::Config::builder()
///     .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
///     .endpoint_url(endpoint)
///     .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
///     .http_client(CanonicalNumbers::new().wrap(profile.http_client()))
///     .build();
/// let client = aws_sdk_dynamodb::Client::from_conf(conf);
/// // ... run a workload with `client` ...
/// println!("{:?}", profile.stats());
/// # let _ = client;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoDbProfile {
    shared: Arc<Shared>,
}

impl DynamoDbProfile {
    /// A profile with `settings`. Synchronous.
    pub fn new(settings: ProfileSettings) -> Self {
        use rand::SeedableRng;
        DynamoDbProfile {
            shared: Arc::new(Shared {
                state: Arc::new(Mutex::new(State {
                    rng: rand::rngs::StdRng::seed_from_u64(settings.seed),
                    in_flight: InFlight::default(),
                    writes: Buckets::default(),
                    reads: Buckets::default(),
                    versions: Versions::default(),
                    stored: HashMap::new(),
                })),
                settings,
                schemas: Mutex::new(HashMap::new()),
                counters: Counters::default(),
            }),
        }
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &ProfileSettings {
        &self.shared.settings
    }

    /// What it did so far.
    pub fn stats(&self) -> ProfileStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProfileStats {
            requests: get(&c.requests),
            transactions_in_conflict: get(&c.transactions_in_conflict),
            writes_in_conflict: get(&c.writes_in_conflict),
            throttled: get(&c.throttled),
            stale_items: get(&c.stale_items),
            versions_observed: get(&c.versions_observed),
        }
    }

    /// An HTTP client that sends requests through `inner` as DynamoDB would answer them.
    /// Synchronous.
    pub fn wrap(&self, inner: impl HttpClient + 'static) -> SharedHttpClient {
        SharedHttpClient::new(ProfileClient {
            inner: SharedHttpClient::new(inner),
            shared: self.shared.clone(),
        })
    }

    /// The SDK's default HTTPS client (as [`Delayer::http_client`](super::Delayer::http_client))
    /// behind the profile. Synchronous.
    pub fn http_client(&self) -> SharedHttpClient {
        self.wrap(super::default_https_client())
    }
}

#[derive(Debug)]
struct ProfileClient {
    inner: SharedHttpClient,
    shared: Arc<Shared>,
}

impl HttpClient for ProfileClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(ProfileConnector {
            inner: self.inner.http_connector(settings, components),
            shared: self.shared.clone(),
        })
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct ProfileConnector {
    inner: SharedHttpConnector,
    shared: Arc<Shared>,
}

impl HttpConnector for ProfileConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        HttpConnectorFuture::new(async move { shared.serve(inner, request).await })
    }
}

/// A write's items, for the versions observed after it: table and key of each.
type Written = Vec<(String, Map<String, Value>)>;

impl Shared {
    fn delays(&self) -> (Duration, Duration) {
        use rand::Rng;
        let s = &self.settings;
        let extra = if s.jitter.is_zero() {
            Duration::ZERO
        } else {
            let mut st = self.state.lock().expect("profile state poisoned");
            st.rng.random_range(Duration::ZERO..=s.jitter)
        };
        let total = s.round_trip + extra;
        (total / 2, total - total / 2)
    }

    async fn serve(
        self: Arc<Self>,
        inner: SharedHttpConnector,
        request: HttpRequest,
    ) -> Result<HttpResponse, ConnectorError> {
        bump(&self.counters.requests);
        let op = request
            .headers()
            .get("x-amz-target")
            .map(wire::operation)
            .unwrap_or_default()
            .to_string();
        let body: Option<Value> = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok());
        let (there, back) = self.delays();
        tokio::time::sleep(there).await;
        let Some(body) = body else {
            let answer = inner.call(request).await;
            tokio::time::sleep(back).await;
            return answer;
        };
        let template = request.try_clone();
        let touched = self.touched(&inner, template.as_ref(), &op, &body).await;
        let mut request = request;
        let mut unprocessed = None;
        let ongoing = match self.admit(&op, &body, &touched) {
            Admission::Admitted(ongoing) => ongoing,
            Admission::Refused(answer) => {
                tokio::time::sleep(back).await;
                return Ok(*answer);
            }
            Admission::Partial {
                body: part,
                unprocessed: rest,
            } => {
                let bytes = serde_json::to_vec(&part).expect("JSON serialises");
                request
                    .headers_mut()
                    .insert("content-length", bytes.len().to_string());
                *request.body_mut() = SdkBody::from(bytes);
                unprocessed = Some(rest);
                None
            }
        };
        // DynamoDB's time (when modelled) counts from the request reaching it.
        let served_by = tokio::time::Instant::now()
            + if self.settings.service_time {
                service::service_time(&op, &body)
            } else {
                Duration::ZERO
            };
        let reached = std::time::SystemTime::now();
        let mut answer = inner.call(request).await?;
        trace_request(&op, &body, reached, answer.status().as_u16());
        if self.settings.throttling
            && matches!(op.as_str(), "Query" | "Scan")
            && answer.status().is_success()
            && let Some(refused) = self
                .bill_page(&inner, template.as_ref(), &body, &mut answer)
                .await?
        {
            tokio::time::sleep(back).await;
            return Ok(refused);
        }
        if self.settings.stale_reads {
            if answer.status().is_success() && !touched.written.is_empty() {
                self.observe_later(inner.clone(), template.as_ref(), touched.written);
            } else if answer.status().is_success() {
                answer = self
                    .stale_answer(&inner, template.as_ref(), &op, &body, answer)
                    .await?;
            }
        }
        if let Some(rest) = unprocessed
            && answer.status().is_success()
        {
            answer = with_unprocessed(&op, answer, rest).await?;
        }
        tokio::time::sleep_until(served_by).await;
        tokio::time::sleep(back).await;
        drop(ongoing);
        Ok(answer)
    }

    /// A table's key schema, asked of DynamoDB Local once (`DescribeTable`).
    async fn schema(
        &self,
        inner: &SharedHttpConnector,
        template: Option<&HttpRequest>,
        table: &str,
    ) -> Option<Arc<stale::Schema>> {
        if let Some(s) = self.schemas.lock().expect("schemas poisoned").get(table) {
            return Some(s.clone());
        }
        let answer = side_call(
            inner,
            template?,
            "DescribeTable",
            &json!({"TableName": table}),
        )
        .await?;
        let schema = Arc::new(stale::Schema::of(&answer)?);
        self.schemas
            .lock()
            .expect("schemas poisoned")
            .insert(table.to_string(), schema.clone());
        Some(schema)
    }

    /// Observes the items a write touched, in the background: a consistent read of each, noted
    /// as its current version.
    fn observe_later(
        self: &Arc<Self>,
        inner: SharedHttpConnector,
        template: Option<&HttpRequest>,
        written: Written,
    ) {
        let Some(template) = template.and_then(HttpRequest::try_clone) else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            for chunk in written.chunks(100) {
                me.observe(&inner, &template, chunk).await;
            }
        });
    }

    async fn observe(
        &self,
        inner: &SharedHttpConnector,
        template: &HttpRequest,
        written: &[(String, Map<String, Value>)],
    ) {
        let mut by_table: HashMap<&str, Vec<&Map<String, Value>>> = HashMap::new();
        for (table, key) in written {
            let keys = by_table.entry(table).or_default();
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let request: Map<String, Value> = by_table
            .iter()
            .map(|(t, keys)| (t.to_string(), json!({"Keys": keys, "ConsistentRead": true})))
            .collect();
        let Some(answer) = side_call(
            inner,
            template,
            "BatchGetItem",
            &json!({"RequestItems": request}),
        )
        .await
        else {
            return;
        };
        let now = Instant::now();
        let unprocessed = answer
            .get("UnprocessedKeys")
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty());
        if unprocessed {
            return; // partly unknown: observe nothing rather than record an absence that is not
        }
        let mut found: HashMap<ItemId, Map<String, Value>> = HashMap::new();
        for (table, items) in answer
            .get("Responses")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let Some(names) = self
                .schemas
                .lock()
                .expect("schemas poisoned")
                .get(table)
                .map(|s| s.keys.clone())
            else {
                continue;
            };
            for item in items
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
            {
                if let Some(k) = wire::key_of(item, &names) {
                    found.insert(ItemId::new(table, &k), item.clone());
                }
            }
        }
        let mut st = self.state.lock().expect("profile state poisoned");
        for (table, keys) in by_table {
            // Without the table's key names, an item found cannot be matched to its key.
            if !self
                .schemas
                .lock()
                .expect("schemas poisoned")
                .contains_key(table)
            {
                continue;
            }
            for key in keys {
                let id = ItemId::new(table, key);
                let item = found.get(&id).cloned();
                st.versions
                    .record(id, item, now, self.settings.stale_window);
                bump(&self.counters.versions_observed);
            }
        }
    }
}

/// Sends a request of the profile's own to DynamoDB Local (with the headers of `template`, whose
/// signature Local does not check), and returns its JSON answer if it succeeded.
async fn side_call(
    inner: &SharedHttpConnector,
    template: &HttpRequest,
    op: &str,
    body: &Value,
) -> Option<Value> {
    let mut request = template.try_clone()?;
    let bytes = serde_json::to_vec(body).ok()?;
    request
        .headers_mut()
        .insert("x-amz-target", format!("DynamoDB_20120810.{op}"));
    request
        .headers_mut()
        .insert("content-length", bytes.len().to_string());
    *request.body_mut() = SdkBody::from(bytes);
    let mut answer = inner.call(request).await.ok()?;
    if !answer.status().is_success() {
        return None;
    }
    let bytes = read_body(&mut answer).await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A batch's answer with the items the profile held back added as unprocessed.
async fn with_unprocessed(
    op: &str,
    mut answer: HttpResponse,
    rest: Value,
) -> Result<HttpResponse, ConnectorError> {
    let field = if op == "BatchGetItem" {
        "UnprocessedKeys"
    } else {
        "UnprocessedItems"
    };
    let bytes = read_body(&mut answer).await?;
    let mut body: Value =
        serde_json::from_slice(&bytes).map_err(|e| ConnectorError::io(e.into()))?;
    let merged = body
        .as_object_mut()
        .map(|o| o.entry(field).or_insert_with(|| json!({})));
    if let (Some(Value::Object(into)), Value::Object(rest)) = (merged, rest) {
        for (table, v) in rest {
            match (into.get_mut(&table), v) {
                (Some(Value::Array(a)), Value::Array(b)) => a.extend(b),
                (Some(Value::Object(a)), Value::Object(b)) => {
                    if let (Some(Value::Array(ka)), Some(Value::Array(kb))) =
                        (a.get_mut("Keys"), b.get("Keys"))
                    {
                        ka.extend(kb.iter().cloned());
                    }
                }
                (_, v) => {
                    into.insert(table, v);
                }
            }
        }
    }
    Ok(wire::answer(answer.status().as_u16(), body))
}

/// The whole body of an answer (leaving it empty).
async fn read_body(answer: &mut HttpResponse) -> Result<Vec<u8>, ConnectorError> {
    let body = answer.take_body();
    Ok(aws_smithy_types::byte_stream::ByteStream::new(body)
        .collect()
        .await
        .map_err(|e| ConnectorError::io(e.into()))?
        .to_vec())
}

/// One event per request that reached DynamoDB Local, at trace level
/// (`RUST_LOG=dynamodb_transactions::fault::profile=trace`), for timelines of who wrote an item
/// when, as DynamoDB Local saw it: when the request reached Local and when Local answered (µs
/// since the Unix epoch, before the profile's service time and return trip), the answer's status,
/// and the request's table, update, condition and values (the last cut at 400 characters).
fn trace_request(op: &str, body: &Value, reached: std::time::SystemTime, status: u16) {
    if !tracing::enabled!(tracing::Level::TRACE) {
        return;
    }
    let us = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    };
    let text = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("");
    let values = body
        .get("ExpressionAttributeValues")
        .map(Value::to_string)
        .unwrap_or_default();
    tracing::trace!(
        op,
        reached_us = us(reached) as u64,
        answered_us = us(std::time::SystemTime::now()) as u64,
        status,
        table = text("TableName"),
        update = text("UpdateExpression"),
        condition = text("ConditionExpression"),
        values = values.chars().take(400).collect::<String>(),
        "request at DynamoDB Local"
    );
}
