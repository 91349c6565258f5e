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
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
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
        self.arm(n, mode, None, true);
    }

    /// Only the `n`-th request from now fails; later ones go through.
    pub fn fail_once_at(&self, n: u64, mode: FaultMode) {
        self.arm(n, mode, None, false);
    }

    /// Only the `n`-th request of `operation` (e.g. `"UpdateItem"`) from now fails.
    pub fn fail_operation_at(&self, operation: &str, n: u64, mode: FaultMode) {
        self.arm(n, mode, Some(operation.to_string()), false);
    }

    fn arm(&self, n: u64, mode: FaultMode, only: Option<String>, sticky: bool) {
        let mut s = self.state.lock().expect("fault state poisoned");
        *s = FaultState {
            strike_at: Some(n.max(1)),
            mode: Some(mode),
            only,
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
        let fire = match phase {
            FaultMode::BeforeSend => {
                // Count each request once, before it is sent.
                s.seen += 1;
                if s.struck {
                    s.sticky
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

/// What a [`LateDelivery`] is armed to do.
#[derive(Debug, Default)]
enum LateMode {
    #[default]
    Off,
    /// The `n`-th request of `operation` (1-based, counted from arming) is applied, but its answer
    /// is replaced by a connection error `after` it arrived.
    LoseResponse {
        operation: String,
        n: u64,
        after: Duration,
    },
    /// Requests `from..from + count` of `operation` (1-based, counted from arming) fail at once for
    /// the caller but are kept, and delivered right after the next answer to a `trigger` request.
    Hold {
        operation: String,
        from: u64,
        count: u64,
        trigger: String,
    },
}

#[derive(Debug, Default)]
struct LateState {
    mode: LateMode,
    seen: u64,
    struck: u64,
    first_struck_at: Option<tokio::time::Instant>,
    held: Vec<(SharedHttpConnector, HttpRequest)>,
}

/// Loses answers, and delivers requests late, at chosen points: deterministic network faults for
/// races that need one request to land at a precise moment relative to others.
///
/// Like the [`Delayer`], this is an HTTP client (plug it in with
/// `aws_sdk_dynamodb::config::Builder::http_client`). Both faults answer the caller with a
/// connection error of no retryable kind (the SDK does not retry it; the library sees an ambiguous
/// failure, a request that may have landed):
///
/// - [`lose_response`](LateDelivery::lose_response): a request is applied by DynamoDB, its answer
///   is lost, and the caller learns of the failure only a while later (a timeout);
/// - [`hold`](LateDelivery::hold): requests fail at once for the caller but are not lost; they
///   reach DynamoDB later, right after a chosen other request has been answered (a request stuck in
///   the network that arrives after its sender gave up and moved on).
///
/// Cheap to clone; clones share state.
#[derive(Debug, Clone, Default)]
pub struct LateDelivery {
    state: Arc<Mutex<LateState>>,
}

impl LateDelivery {
    /// A fault that does nothing until armed.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `n`-th request (1-based, from now) of `operation` (e.g. `"UpdateItem"`) is applied by
    /// DynamoDB, but its caller gets a connection error instead of the answer, `after` the answer
    /// arrived. Other requests go through.
    pub fn lose_response(&self, operation: &str, n: u64, after: Duration) {
        *self.lock() = LateState {
            mode: LateMode::LoseResponse {
                operation: operation.to_string(),
                n: n.max(1),
                after,
            },
            ..LateState::default()
        };
    }

    /// The `from`-th to the `(from + count - 1)`-th requests (1-based, from now) of `operation`
    /// each fail at once for their caller with a connection error, but are kept; right after the
    /// next answer to a `trigger` request arrives (and before that answer reaches its caller) the
    /// kept requests are delivered to DynamoDB in order, their answers discarded, and the fault
    /// disarms. A `trigger` answer while nothing is kept changes nothing.
    pub fn hold(&self, operation: &str, from: u64, count: u64, trigger: &str) {
        *self.lock() = LateState {
            mode: LateMode::Hold {
                operation: operation.to_string(),
                from: from.max(1),
                count,
                trigger: trigger.to_string(),
            },
            ..LateState::default()
        };
    }

    /// Stops injecting; kept requests are dropped undelivered.
    pub fn disarm(&self) {
        *self.lock() = LateState::default();
    }

    /// Requests whose answer was lost or that were kept, since arming.
    pub fn struck(&self) -> u64 {
        self.lock().struck
    }

    /// When the first request struck since arming reached this HTTP client (its sender's send
    /// instant is no later).
    pub fn first_struck_at(&self) -> Option<tokio::time::Instant> {
        self.lock().first_struck_at
    }

    /// An HTTP client that sends requests through `inner` with these faults injected.
    pub fn wrap(&self, inner: impl HttpClient + 'static) -> SharedHttpClient {
        SharedHttpClient::new(LateClient {
            inner: SharedHttpClient::new(inner),
            late: self.clone(),
        })
    }

    /// The SDK's default HTTPS client with these faults injected (see [`Delayer::http_client`]).
    pub fn http_client(&self) -> SharedHttpClient {
        self.wrap(default_https_client())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LateState> {
        self.state.lock().expect("late delivery poisoned")
    }

    fn strike(s: &mut LateState) {
        s.struck += 1;
        s.first_struck_at
            .get_or_insert_with(tokio::time::Instant::now);
    }
}

fn late_error(what: &str) -> aws_smithy_runtime_api::client::result::ConnectorError {
    aws_smithy_runtime_api::client::result::ConnectorError::other(
        format!("injected network fault: {what}").into(),
        None,
    )
}

/// The [`HttpClient`] made by [`LateDelivery::wrap`].
#[derive(Debug)]
struct LateClient {
    inner: SharedHttpClient,
    late: LateDelivery,
}

impl HttpClient for LateClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(LateConnector {
            inner: self.inner.http_connector(settings, components),
            late: self.late.clone(),
        })
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct LateConnector {
    inner: SharedHttpConnector,
    late: LateDelivery,
}

impl HttpConnector for LateConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        // "DynamoDB_20120810.UpdateItem" -> "UpdateItem"
        let op = request
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or_default()
            .to_string();
        let inner = self.inner.clone();
        let mut s = self.late.lock();
        match &s.mode {
            LateMode::Off => {}
            LateMode::LoseResponse {
                operation,
                n,
                after,
            } if *operation == op => {
                let (n, after) = (*n, *after);
                s.seen += 1;
                if s.seen == n {
                    LateDelivery::strike(&mut s);
                    return HttpConnectorFuture::new(async move {
                        let _applied = inner.call(request).await;
                        tokio::time::sleep(after).await;
                        Err(late_error("response lost"))
                    });
                }
            }
            LateMode::LoseResponse { .. } => {}
            LateMode::Hold {
                operation,
                from,
                count,
                ..
            } if *operation == op => {
                let (from, count) = (*from, *count);
                s.seen += 1;
                if (from..from + count).contains(&s.seen)
                    && let Some(copy) = request.try_clone()
                {
                    LateDelivery::strike(&mut s);
                    s.held.push((inner, copy));
                    return HttpConnectorFuture::ready(Err(late_error("request held back")));
                }
            }
            LateMode::Hold { trigger, .. } if *trigger == op && !s.held.is_empty() => {
                let held = std::mem::take(&mut s.held);
                s.mode = LateMode::Off;
                return HttpConnectorFuture::new(async move {
                    let answer = inner.call(request).await;
                    for (connector, req) in held {
                        let _ = connector.call(req).await;
                    }
                    answer
                });
            }
            LateMode::Hold { .. } => {}
        }
        drop(s);
        inner.call(request)
    }
}

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

/// What a [`ServiceFaults`] interceptor answers in place of DynamoDB's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceAnswer {
    /// HTTP 500 with an `InternalServerError` body: DynamoDB failed internally. The SDK classifies it
    /// as transient and retries it (up to its configured attempts).
    InternalServerError,
    /// HTTP 500 with an empty body (a failure in front of DynamoDB). The SDK retries it too.
    EmptyServerError,
    /// HTTP 400 `TransactionCanceledException` (for `TransactWriteItems`): the action at index
    /// `action` (clamped to the last one) fails with cancellation reason `code` (for example
    /// `ThrottlingError`, `ProvisionedThroughputExceeded` or `TransactionConflict`), every other
    /// action with `None`. The SDK does not retry it.
    Cancelled {
        /// The cancellation reason's code.
        code: String,
        /// Index of the action that carries it.
        action: usize,
    },
}

#[derive(Debug, Default)]
struct ServiceFaultState {
    operation: Option<String>,
    /// Requests of `operation` seen since arming (every attempt, SDK retries included).
    seen: u64,
    /// First request (1-based) answered by the fault, and how many in a row.
    from: u64,
    count: u64,
    answer: Option<ServiceAnswer>,
    /// True: the request is applied by DynamoDB before its answer is replaced; false: it never
    /// reaches DynamoDB.
    applied: bool,
    injected: u64,
}

/// Marks, inside one attempt's config bag, the answer to give (`None`: leave the attempt alone).
#[derive(Debug, Clone)]
struct Answering(Option<(ServiceAnswer, bool)>);

impl Storable for Answering {
    type Storer = StoreReplace<Self>;
}

/// Number of actions of a `TransactWriteItems`, kept for building cancellation reasons.
#[derive(Debug, Clone)]
struct ActionCount(usize);

impl Storable for ActionCount {
    type Storer = StoreReplace<Self>;
}

/// Answers chosen requests with a DynamoDB error of its own choosing: a 5xx after the request was
/// applied (DynamoDB did the work, the caller hears "internal error"), or a
/// `TransactionCanceledException` with a chosen cancellation reason, either after the request was
/// applied or instead of sending it (nothing lands).
///
/// Requests are counted per operation, every attempt included: the SDK retries 5xx answers itself,
/// so `count` decides how many of those retries are answered by the fault too (a retry that is not
/// meets the effect of the applied attempt: a failed condition, or the idempotency token's earlier
/// success). A request that must not land is replaced on the wire by a harmless `ListTables`.
///
/// Cheap to clone; clones share state.
///
/// ```no_run
/// use dynamodb_transactions::fault::{ServiceAnswer, ServiceFaults};
/// let faults = ServiceFaults::new();
/// // The next TransactWriteItems and the SDK's two retries of it are applied, and answered 500:
/// faults.answer_after_send("TransactWriteItems", 1, 3, ServiceAnswer::InternalServerError);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ServiceFaults {
    state: Arc<Mutex<ServiceFaultState>>,
}

impl ServiceFaults {
    /// Answers nothing until armed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests `n..n + count` (1-based, from now) of `operation` reach DynamoDB and are applied, and
    /// their answer is replaced with `answer`.
    pub fn answer_after_send(&self, operation: &str, n: u64, count: u64, answer: ServiceAnswer) {
        self.arm(operation, n, count, answer, true);
    }

    /// Requests `n..n + count` (1-based, from now) of `operation` never reach DynamoDB (a
    /// `ListTables` goes in their place) and are answered with `answer`.
    pub fn answer_instead(&self, operation: &str, n: u64, count: u64, answer: ServiceAnswer) {
        self.arm(operation, n, count, answer, false);
    }

    fn arm(&self, operation: &str, n: u64, count: u64, answer: ServiceAnswer, applied: bool) {
        *self.lock() = ServiceFaultState {
            operation: Some(operation.to_string()),
            from: n.max(1),
            count,
            answer: Some(answer),
            applied,
            ..ServiceFaultState::default()
        };
    }

    /// Stops answering.
    pub fn disarm(&self) {
        *self.lock() = ServiceFaultState::default();
    }

    /// Answers given since arming.
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    /// Requests of the armed operation seen since arming (every attempt).
    pub fn requests_seen(&self) -> u64 {
        self.lock().seen
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ServiceFaultState> {
        self.state.lock().expect("service faults poisoned")
    }
}

impl Intercept for ServiceFaults {
    fn name(&self) -> &'static str {
        "ServiceFaults"
    }

    fn read_before_serialization(
        &self,
        ctx: &aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput;
        if let Some(input) = ctx.input().downcast_ref::<TransactWriteItemsInput>() {
            cfg.interceptor_state()
                .store_put(ActionCount(input.transact_items().len()));
        }
        Ok(())
    }

    fn modify_before_signing(
        &self,
        ctx: &mut aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        let strike = {
            let mut s = self.lock();
            match (&s.operation, &s.answer) {
                (Some(op), Some(answer)) if *op == operation(cfg) => {
                    let answer = answer.clone();
                    s.seen += 1;
                    let hit = s.seen >= s.from && s.seen < s.from + s.count;
                    if hit {
                        s.injected += 1;
                    }
                    hit.then_some((answer, s.applied))
                }
                _ => None,
            }
        };
        if let Some((_, false)) = &strike {
            // Send something harmless instead, so that nothing of the request lands.
            let body = r#"{"Limit":1}"#;
            let req = ctx.request_mut();
            req.headers_mut()
                .insert("x-amz-target", "DynamoDB_20120810.ListTables");
            req.headers_mut()
                .insert("content-length", body.len().to_string());
            *req.body_mut() = aws_smithy_types::body::SdkBody::from(body);
        }
        cfg.interceptor_state().store_put(Answering(strike));
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        let Some(Answering(Some((answer, _)))) = cfg.load::<Answering>().cloned() else {
            return Ok(());
        };
        let (status, body) = match answer {
            ServiceAnswer::InternalServerError => (
                500u16,
                r#"{"__type":"com.amazon.coral.service#InternalServerError","message":"injected internal server error"}"#
                    .to_string(),
            ),
            ServiceAnswer::EmptyServerError => (500u16, String::new()),
            ServiceAnswer::Cancelled { code, action } => {
                let n = cfg.load::<ActionCount>().map_or(1, |c| c.0.max(1));
                let at = action.min(n - 1);
                let reasons: Vec<String> = (0..n)
                    .map(|i| {
                        if i == at {
                            format!(r#"{{"Code":"{code}","Message":"injected {code}"}}"#)
                        } else {
                            r#"{"Code":"None"}"#.to_string()
                        }
                    })
                    .collect();
                let codes: Vec<&str> = (0..n)
                    .map(|i| if i == at { code.as_str() } else { "None" })
                    .collect();
                (
                    400u16,
                    format!(
                        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [{}]","CancellationReasons":[{}]}}"#,
                        codes.join(", "),
                        reasons.join(",")
                    ),
                )
            }
        };
        let resp = ctx.response_mut();
        *resp.status_mut() = status.try_into().expect("valid status");
        resp.headers_mut().remove("x-amz-crc32");
        resp.headers_mut().remove("x-amzn-query-error");
        resp.headers_mut()
            .insert("content-length", body.len().to_string());
        *resp.body_mut() = aws_smithy_types::body::SdkBody::from(body);
        Ok(())
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
