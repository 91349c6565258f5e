//! `LateDelivery`: answers lost late and requests delivered late, at chosen points.

use super::*;

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
    /// The `n`-th request of `operation` (1-based, counted from arming) waits until
    /// [`LateDelivery::open`], then goes through as usual, its answer to its caller.
    Gate { operation: String, n: u64 },
    /// Every request of `operation` from arming waits until [`LateDelivery::open`], then goes
    /// through as usual, its answer to its caller.
    GateAll { operation: String },
}

#[derive(Debug, Default)]
struct LateState {
    mode: LateMode,
    seen: u64,
    struck: u64,
    first_struck_at: Option<tokio::time::Instant>,
    held: Vec<(SharedHttpConnector, HttpRequest)>,
    /// Opened by [`LateDelivery::open`] (a gate's request waits for it).
    gate: Arc<tokio::sync::Notify>,
    /// Set by [`LateDelivery::open`] after [`LateDelivery::delay_all_until_opened`].
    all_open: Arc<std::sync::atomic::AtomicBool>,
}

/// Loses answers, delivers requests late and holds them back, at chosen points: deterministic
/// network faults for races that need one request to land at a precise moment relative to others.
///
/// Like the [`Delayer`], this is an HTTP client (plug it in with
/// `aws_sdk_dynamodb::config::Builder::http_client`). The first two answer the caller with a
/// connection error of no retryable kind (the SDK does not retry it; the library sees an ambiguous
/// failure, a request that may have landed):
///
/// - [`lose_response`](LateDelivery::lose_response): a request is applied by DynamoDB, its answer
///   is lost, and the caller learns of the failure only a while later (a timeout);
/// - [`hold`](LateDelivery::hold): requests fail at once for the caller but are not lost; they
///   reach DynamoDB later, right after a chosen other request has been answered (a request stuck in
///   the network that arrives after its sender gave up and moved on);
/// - [`delay_until_opened`](LateDelivery::delay_until_opened): a request waits before it is sent
///   until the test opens the gate, while its sender's other requests go through (one of two
///   concurrent requests landing well before the other);
/// - [`delay_all_until_opened`](LateDelivery::delay_all_until_opened): the same for every
///   request of one operation (reads that never come back while writes land).
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

    /// The `n`-th request (1-based, from now) of `operation` waits before it is sent until
    /// [`open`](LateDelivery::open) is called; it then goes through as usual and its caller gets
    /// DynamoDB's answer. Other requests go through meanwhile (a request slow to reach DynamoDB
    /// while others of the same caller land).
    pub fn delay_until_opened(&self, operation: &str, n: u64) {
        *self.lock() = LateState {
            mode: LateMode::Gate {
                operation: operation.to_string(),
                n: n.max(1),
            },
            ..LateState::default()
        };
    }

    /// Every request of `operation` (e.g. `"GetItem"`) from now waits before it is sent until
    /// [`open`](LateDelivery::open) is called; they then go through as usual and their callers get
    /// DynamoDB's answers. Other requests go through meanwhile (reads that never come back while
    /// writes land).
    pub fn delay_all_until_opened(&self, operation: &str) {
        *self.lock() = LateState {
            mode: LateMode::GateAll {
                operation: operation.to_string(),
            },
            ..LateState::default()
        };
    }

    /// Lets the request waiting at the gate of [`delay_until_opened`](LateDelivery::delay_until_opened)
    /// go (or the next one to reach it); after
    /// [`delay_all_until_opened`](LateDelivery::delay_all_until_opened), every request waiting
    /// goes, and later ones are not held.
    pub fn open(&self) {
        let mut s = self.lock();
        if matches!(s.mode, LateMode::GateAll { .. }) {
            s.mode = LateMode::Off;
            s.all_open.store(true, std::sync::atomic::Ordering::SeqCst);
            s.gate.notify_waiters();
        } else {
            s.gate.notify_one();
        }
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
            LateMode::Gate { operation, n } if *operation == op => {
                let n = *n;
                s.seen += 1;
                if s.seen == n {
                    LateDelivery::strike(&mut s);
                    let gate = s.gate.clone();
                    return HttpConnectorFuture::new(async move {
                        gate.notified().await;
                        inner.call(request).await
                    });
                }
            }
            LateMode::Gate { .. } => {}
            LateMode::GateAll { operation } if *operation == op => {
                s.seen += 1;
                LateDelivery::strike(&mut s);
                let (gate, open) = (s.gate.clone(), s.all_open.clone());
                return HttpConnectorFuture::new(async move {
                    // Registered before the flag is read: an opening in between wakes it.
                    let opened = gate.notified();
                    tokio::pin!(opened);
                    opened.as_mut().enable();
                    if !open.load(std::sync::atomic::Ordering::SeqCst) {
                        opened.await;
                    }
                    inner.call(request).await
                });
            }
            LateMode::GateAll { .. } => {}
        }
        drop(s);
        inner.call(request)
    }
}
