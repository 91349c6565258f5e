//! `ServiceFaults`: 5xx answers and transaction cancellation reasons, after landing or instead
//! of sending.

use super::*;

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
