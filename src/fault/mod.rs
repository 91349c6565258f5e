//! SDK interceptors for counting requests and injecting faults, an HTTP client that delays
//! requests, and one that rewrites numbers in answers the way DynamoDB (not DynamoDB Local) writes
//! them.
//!
//! These are test and benchmark tools: attach them to the `aws_sdk_dynamodb::Config` of the client you
//! give the [`TransactionManager`](crate::TransactionManager) ([`RequestCounter`], [`FaultInjector`]
//! and [`Throttler`] with `.interceptor(..)`, [`Delayer`] with `.http_client(..)`). They never fake
//! DynamoDB: a failure injected *before send* means the request never reached the server; one
//! injected *after send* means the server applied it and the caller never heard back (a lost
//! response); a delay only changes when a request reaches the server or its answer reaches the
//! caller. All of them are synchronous to configure and read; only the [`Delayer`] waits, and it does
//! so asynchronously inside the request. [`CanonicalNumbers`] (an HTTP client too) changes no
//! outcome either: it makes DynamoDB Local's answers carry numbers as DynamoDB does, and
//! [`zero_ended_lock_stamps`] makes a rare production case (a lock stamp ending in 0) happen every time.
//!
//! ```no_run
//! use dynamodb_transactions::fault::{FaultInjector, FaultMode, RequestCounter};
//! # fn demo(endpoint: &str) {
//! let counter = RequestCounter::new();
//! let faults = FaultInjector::new();
//! let conf = aws_sdk_dynamodb::Config::builder()
//!     .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
//!     .endpoint_url(endpoint)
//!     .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
//!     .interceptor(counter.clone())
//!     .interceptor(faults.clone())
//!     .build();
//! // The 3rd request from now fails after reaching the server, and every later one fails too:
//! faults.crash_at(3, FaultMode::AfterSend);
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeDeserializationInterceptorContextRef,
    BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, Metadata};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

mod canonical_numbers;
mod late_delivery;
mod profile;
mod service_faults;

pub use canonical_numbers::{CanonicalNumbers, zero_ended_lock_stamps};
pub use late_delivery::LateDelivery;
pub use profile::{DynamoDbProfile, ProfileSettings, ProfileStats};
pub use service_faults::{ServiceAnswer, ServiceFaults};

/// Marks, inside one operation's config bag, the request chosen to fail after it is sent (concurrent
/// requests make counting in the response phase unreliable).
#[derive(Debug, Clone)]
struct StrikeAfterSend;

impl Storable for StrikeAfterSend {
    type Storer = StoreReplace<Self>;
}

type HookResult = Result<(), aws_sdk_dynamodb::error::BoxError>;

fn operation(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>()
        .map(|m| m.name().to_string())
        .unwrap_or_default()
}

/// Counts requests (each attempt, retries included) per DynamoDB operation.
///
/// It reads the operation's name from the request's config bag, so it counts the requests of any
/// AWS SDK client it is attached to: on a DynamoDB Streams client's config,
/// `counter.get("GetRecords")` is the number of `GetRecords` requests sent.
///
/// It also keeps when each request went out and when its attempt ended, so that
/// [`round_trips`](Self::round_trips) can tell how many of them ran one after another.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
    spans: Arc<Mutex<Vec<(std::time::Instant, std::time::Instant)>>>,
}

/// When a request counted by a [`RequestCounter`] went out (kept in its config bag until its
/// attempt ends).
#[derive(Debug, Clone)]
struct SentAt(std::time::Instant);

impl Storable for SentAt {
    type Storer = StoreReplace<Self>;
}

impl RequestCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests per operation name (`"UpdateItem"`, `"TransactWriteItems"`, ...).
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts.lock().expect("counter poisoned").clone()
    }

    /// All requests counted.
    pub fn total(&self) -> u64 {
        self.counts.lock().expect("counter poisoned").values().sum()
    }

    /// Requests of one operation.
    pub fn get(&self, operation: &str) -> u64 {
        self.counts
            .lock()
            .expect("counter poisoned")
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Back to zero.
    pub fn reset(&self) {
        self.counts.lock().expect("counter poisoned").clear();
        self.spans.lock().expect("counter poisoned").clear();
    }

    /// The critical path of the requests counted since the last reset: the longest chain of
    /// requests each sent after the one before it had its answer. Requests sent together (one
    /// before the other's answer) count once, so this is the number of sequential round trips
    /// a caller waited for. Requests still in flight are not counted.
    ///
    /// ```
    /// use dynamodb_transactions::fault::RequestCounter;
    /// let counter = RequestCounter::new();
    /// assert_eq!(counter.round_trips(), 0);
    /// ```
    pub fn round_trips(&self) -> u64 {
        let mut spans = self.spans.lock().expect("counter poisoned").clone();
        spans.sort();
        // path[i]: the longest chain ending with request i (every request that ended before i
        // was sent started before it, so it sorts before it).
        let mut path: Vec<u64> = Vec::with_capacity(spans.len());
        for (i, (sent, _)) in spans.iter().enumerate() {
            let before = (0..i)
                .filter(|&j| spans[j].1 <= *sent)
                .map(|j| path[j])
                .max()
                .unwrap_or(0);
            path.push(before + 1);
        }
        path.into_iter().max().unwrap_or(0)
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        *self
            .counts
            .lock()
            .expect("counter poisoned")
            .entry(operation(cfg))
            .or_default() += 1;
        cfg.interceptor_state()
            .store_put(SentAt(std::time::Instant::now()));
        Ok(())
    }

    fn read_after_attempt(
        &self,
        _ctx: &aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef<
            '_,
        >,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        if let Some(SentAt(sent)) = cfg.load::<SentAt>().cloned() {
            self.spans
                .lock()
                .expect("counter poisoned")
                .push((sent, std::time::Instant::now()));
            // A retry that never goes out must not count this attempt again.
            cfg.interceptor_state().unset::<SentAt>();
        }
        Ok(())
    }
}

/// Where an injected failure strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultMode {
    /// The request fails before it is sent: DynamoDB never sees it.
    BeforeSend,
    /// The request reaches DynamoDB and is applied, but the response is lost: the caller gets an
    /// error (an ambiguous failure).
    AfterSend,
}

#[derive(Debug, Default)]
struct FaultState {
    seen: u64,
    /// Request number (1-based, counted from arming) at which the fault strikes.
    strike_at: Option<u64>,
    mode: Option<FaultMode>,
    /// Only requests of this operation are counted and failed.
    only: Option<String>,
    /// Only requests of this operation are counted toward the strike; once struck, a sticky fault
    /// fails every request.
    counted_only: Option<String>,
    /// After striking, fail every later request (a dead coordinator) instead of just one.
    sticky: bool,
    struck: bool,
    injected: u64,
}

/// Fails chosen requests, to simulate a coordinator that crashes or a response that is lost.
///
/// Cheap to clone; clones share state.
#[derive(Debug, Clone, Default)]
pub struct FaultInjector {
    state: Arc<Mutex<FaultState>>,
}

impl FaultInjector {
    /// An injector that injects nothing until armed.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `n`-th request from now (1-based) fails in `mode`, and so does every request after it,
    /// as if the process had died at that point.
    pub fn crash_at(&self, n: u64, mode: FaultMode) {
        self.arm(n, mode, None, None, true);
    }

    /// Only the `n`-th request from now fails; later ones go through.
    pub fn fail_once_at(&self, n: u64, mode: FaultMode) {
        self.arm(n, mode, None, None, false);
    }

    /// Only the `n`-th request of `operation` (e.g. `"UpdateItem"`) from now fails.
    pub fn fail_operation_at(&self, operation: &str, n: u64, mode: FaultMode) {
        self.arm(n, mode, Some(operation.to_string()), None, false);
    }

    /// The `n`-th request of `operation` from now fails in `mode`, and so does every request of
    /// any operation after it: a process dying at one request of two it sends concurrently, in
    /// whichever order they go out.
    pub fn crash_at_operation(&self, operation: &str, n: u64, mode: FaultMode) {
        self.arm(n, mode, None, Some(operation.to_string()), true);
    }

    fn arm(
        &self,
        n: u64,
        mode: FaultMode,
        only: Option<String>,
        counted_only: Option<String>,
        sticky: bool,
    ) {
        let mut s = self.state.lock().expect("fault state poisoned");
        *s = FaultState {
            strike_at: Some(n.max(1)),
            mode: Some(mode),
            only,
            counted_only,
            sticky,
            ..FaultState::default()
        };
    }

    /// Stops injecting and forgets any crash.
    pub fn disarm(&self) {
        *self.state.lock().expect("fault state poisoned") = FaultState::default();
    }

    /// True once the armed fault struck.
    pub fn struck(&self) -> bool {
        self.state.lock().expect("fault state poisoned").struck
    }

    /// Requests counted since arming.
    pub fn requests_seen(&self) -> u64 {
        self.state.lock().expect("fault state poisoned").seen
    }

    /// Failures injected since arming.
    pub fn injected(&self) -> u64 {
        self.state.lock().expect("fault state poisoned").injected
    }

    fn decide(&self, cfg: &mut ConfigBag, phase: FaultMode) -> HookResult {
        let mut s = self.state.lock().expect("fault state poisoned");
        let (Some(at), Some(mode)) = (s.strike_at, s.mode) else {
            return Ok(());
        };
        let op = operation(cfg);
        if s.only.as_deref().is_some_and(|o| o != op) {
            return Ok(());
        }
        let counted = s.counted_only.as_deref().is_none_or(|o| o == op);
        let fire = match phase {
            FaultMode::BeforeSend => {
                // Count each request once, before it is sent.
                if counted {
                    s.seen += 1;
                }
                if s.struck {
                    s.sticky
                } else if !counted {
                    false
                } else if s.seen == at && mode == FaultMode::AfterSend {
                    cfg.interceptor_state().store_put(StrikeAfterSend);
                    false
                } else {
                    s.seen == at
                }
            }
            FaultMode::AfterSend => !s.struck && cfg.load::<StrikeAfterSend>().is_some(),
        };
        if fire {
            s.struck = true;
            s.injected += 1;
            return Err(format!("injected fault ({phase:?}) at request {} ({op})", s.seen).into());
        }
        Ok(())
    }
}

impl Intercept for FaultInjector {
    fn name(&self) -> &'static str {
        "FaultInjector"
    }

    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        self.decide(cfg, FaultMode::BeforeSend)
    }

    fn read_before_deserialization(
        &self,
        _ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        self.decide(cfg, FaultMode::AfterSend)
    }
}

/// Turns a random fraction of responses into throttling errors (`ThrottlingException`, HTTP 400),
/// which the SDK retries. The request *was* applied by DynamoDB: the retry meets the first
/// attempt's effect, a harsher fault than real throttling (where nothing was applied) that the
/// protocol must survive all the same.
///
/// ```no_run
/// use dynamodb_transactions::fault::Throttler;
/// let throttle = Throttler::new(0.05, 42); // 5% of responses, seeded
/// # let _ = throttle;
/// ```
#[derive(Debug, Clone)]
pub struct Throttler {
    state: Arc<Mutex<(rand::rngs::StdRng, f64, u64)>>,
}

impl Throttler {
    /// Throttles each response with `probability`, drawing from a generator seeded with `seed`.
    pub fn new(probability: f64, seed: u64) -> Self {
        use rand::SeedableRng;
        Throttler {
            state: Arc::new(Mutex::new((
                rand::rngs::StdRng::seed_from_u64(seed),
                probability,
                0,
            ))),
        }
    }

    /// Changes the probability (0 stops throttling).
    pub fn set_probability(&self, probability: f64) {
        self.state.lock().expect("throttler poisoned").1 = probability;
    }

    /// Responses turned into throttling errors so far.
    pub fn injected(&self) -> u64 {
        self.state.lock().expect("throttler poisoned").2
    }
}

impl Intercept for Throttler {
    fn name(&self) -> &'static str {
        "Throttler"
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> HookResult {
        use rand::Rng;
        let fire = {
            let mut s = self.state.lock().expect("throttler poisoned");
            let p = s.1.clamp(0.0, 1.0);
            let fire = s.0.random_bool(p);
            if fire {
                s.2 += 1;
            }
            fire
        };
        if fire {
            let resp = ctx.response_mut();
            *resp.status_mut() = 400u16.try_into().expect("valid status");
            *resp.body_mut() = aws_smithy_types::body::SdkBody::from(
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"injected throttling"}"#,
            );
            resp.headers_mut().remove("x-amz-crc32");
        }
        Ok(())
    }
}

/// Where a [`Delayer`] holds a request back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DelayPhase {
    BeforeSend,
    AfterResponse,
    Both,
}

#[derive(Debug)]
struct DelayState {
    rng: rand::rngs::StdRng,
    probability: f64,
    max_delay: Duration,
    injected: u64,
    before_send: u64,
    after_response: u64,
}

/// Delays a random fraction of requests by a random time, to reorder concurrent requests and widen
/// race windows.
///
/// Unlike the interceptors above, a delayer is an HTTP client: it wraps the client that sends the
/// bytes (by default the SDK's own hyper/rustls client) and plug it in with
/// `aws_sdk_dynamodb::config::Builder::http_client`. Each request is delayed with `probability`,
/// by a duration drawn uniformly from `0..=max_delay`, at one of three points chosen at random:
///
/// - **before it is sent**: DynamoDB sees it later, after requests issued after it (reordering);
/// - **after its response arrived**: DynamoDB has applied it, but the caller learns so later, while
///   other coordinators act on the new state (a wider race window);
/// - both.
///
/// The delays are asynchronous (`tokio::time::sleep`): no thread is blocked, other requests proceed
/// meanwhile, and the client must run on a Tokio runtime with the time driver enabled (as the SDK's
/// `rt-tokio` clients do). Delays count against the SDK's attempt and operation timeouts when those
/// are configured. Decisions come from a generator seeded with `seed`, drawn in the order requests
/// are issued, so a run replays exactly when requests are issued in the same order.
///
/// Cheap to clone; clones and every client made by [`wrap`](Delayer::wrap) or
/// [`http_client`](Delayer::http_client) share the generator and the counts.
///
/// ```no_run
/// use std::time::Duration;
/// use dynamodb_transactions::fault::Delayer;
/// # fn demo(endpoint: &str) {
/// // 20% of requests, up to 50 ms each, seeded:
/// let delayer = Delayer::new(0.2, Duration::from_millis(50), 42);
/// let conf = aws_sdk_dynamodb::Config::builder()
///     .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
///     .endpoint_url(endpoint)
///     .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
///     .http_client(delayer.http_client())
///     .build();
/// let client = aws_sdk_dynamodb::Client::from_conf(conf);
/// // ... run a workload with `client` ...
/// println!("{} requests delayed", delayer.injected());
/// # let _ = client;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Delayer {
    state: Arc<Mutex<DelayState>>,
}

impl Delayer {
    /// Delays each request with `probability` (clamped to `0..=1`) by up to `max_delay`, drawing
    /// from a generator seeded with `seed`.
    pub fn new(probability: f64, max_delay: Duration, seed: u64) -> Self {
        use rand::SeedableRng;
        Delayer {
            state: Arc::new(Mutex::new(DelayState {
                rng: rand::rngs::StdRng::seed_from_u64(seed),
                probability,
                max_delay,
                injected: 0,
                before_send: 0,
                after_response: 0,
            })),
        }
    }

    /// Changes the probability (0 stops delaying).
    pub fn set_probability(&self, probability: f64) {
        self.lock().probability = probability;
    }

    /// Requests delayed so far (a request delayed both before sending and after its response counts
    /// once).
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    /// Requests delayed before they were sent.
    pub fn injected_before_send(&self) -> u64 {
        self.lock().before_send
    }

    /// Requests whose response was held back after DynamoDB had answered.
    pub fn injected_after_response(&self) -> u64 {
        self.lock().after_response
    }

    /// An HTTP client that sends requests through `inner` with delays injected. Synchronous; the
    /// delays happen when the client sends requests.
    pub fn wrap(&self, inner: impl HttpClient + 'static) -> SharedHttpClient {
        SharedHttpClient::new(DelayingClient {
            inner: SharedHttpClient::new(inner),
            delayer: self.clone(),
        })
    }

    /// The SDK's default HTTPS client (hyper 1 with rustls and aws-lc), with delays injected: what
    /// to give `aws_sdk_dynamodb::config::Builder::http_client`. Synchronous.
    pub fn http_client(&self) -> SharedHttpClient {
        self.wrap(default_https_client())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DelayState> {
        self.state.lock().expect("delayer poisoned")
    }

    /// Draws the delay of one request: where, and how long.
    fn draw(&self) -> Option<(DelayPhase, Duration)> {
        use rand::Rng;
        let mut s = self.lock();
        let p = s.probability.clamp(0.0, 1.0);
        if p == 0.0 || !s.rng.random_bool(p) {
            return None;
        }
        let phase = match s.rng.random_range(0..3) {
            0 => DelayPhase::BeforeSend,
            1 => DelayPhase::AfterResponse,
            _ => DelayPhase::Both,
        };
        let max = s.max_delay;
        let delay = s.rng.random_range(Duration::ZERO..=max);
        s.injected += 1;
        if phase != DelayPhase::AfterResponse {
            s.before_send += 1;
        }
        if phase != DelayPhase::BeforeSend {
            s.after_response += 1;
        }
        Some((phase, delay))
    }
}

/// The [`HttpClient`] made by [`Delayer::wrap`].
#[derive(Debug)]
struct DelayingClient {
    inner: SharedHttpClient,
    delayer: Delayer,
}

impl HttpClient for DelayingClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(DelayingConnector {
            inner: self.inner.http_connector(settings, components),
            delayer: self.delayer.clone(),
        })
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct DelayingConnector {
    inner: SharedHttpConnector,
    delayer: Delayer,
}

impl HttpConnector for DelayingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let Some((phase, delay)) = self.delayer.draw() else {
            return self.inner.call(request);
        };
        let inner = self.inner.clone();
        HttpConnectorFuture::new(async move {
            if phase != DelayPhase::AfterResponse {
                tokio::time::sleep(delay).await;
            }
            let response = inner.call(request).await;
            if phase != DelayPhase::BeforeSend {
                tokio::time::sleep(delay).await;
            }
            response
        })
    }
}

/// The SDK's default HTTPS client (hyper 1 with rustls and aws-lc), which the wrapping clients of
/// this module send through.
fn default_https_client() -> impl HttpClient + 'static {
    use aws_smithy_http_client::tls;
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .build_https()
}

/// Registers `ticket` as a waiter for the item `table`/`key` in the record of the transaction
/// `holder`, expiring `ttl` from now, exactly as a transaction waiting for that holder does under
/// [`Settings::wait_in_ticket_order`](crate::Settings::wait_in_ticket_order): conditional on the
/// holder's record being pending. True when the registration landed. For tests of the queue's
/// protocol steps one at a time.
pub async fn register_waiter(
    manager: &crate::TransactionManager,
    holder: &crate::TxId,
    table: &str,
    key: &crate::Item,
    ticket: u64,
    ttl: std::time::Duration,
) -> crate::Result<bool> {
    let inner = &manager.inner;
    crate::record::register_waiter(
        &inner.client,
        &inner.tx_table,
        holder,
        &crate::item_lock::queue::item_hash(table, key),
        ticket,
        crate::ddb::now_millis() + ttl.as_millis() as u64,
    )
    .await
}
