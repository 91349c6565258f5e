//! Whether a failed request was sent: the interceptor the manager adds to its client marks a
//! dispatch failure as never sent when it can prove it, so that `Error::sdk` calls it unambiguous.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{BoxError, NeverSent};

/// True when the connector error proves that the connection was never set up, so the request
/// was not sent: the SDK's HTTP client (hyper-util's legacy client, the one the SDK's default
/// HTTPS client is built on) reports a connect-phase error (DNS, TCP connect, TLS handshake,
/// connect timeout), or the OS refused the connection (`ECONNREFUSED` only answers a connection
/// attempt; a connection reset after sending is `ECONNRESET`). Anything else — a reset, a
/// timeout after sending, an unknown error — proves nothing.
fn connect_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(|h| h.is_connect())
        {
            return true;
        }
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cur = c.source();
    }
    false
}

/// True when the attempt `ctx` failed while connecting (see [`connect_failed`]).
fn refused_while_connecting(
    ctx: &aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef<'_>,
) -> bool {
    matches!(ctx.output_or_error(), Some(Err(e))
        if e.as_connector_error().is_some_and(|c| connect_failed(c)))
}

/// Per operation: how many attempts reached the HTTP client, and how many of them provably
/// failed while connecting.
#[derive(Debug, Clone, Copy, Default)]
struct Sends {
    transmitted: u32,
    never_sent: u32,
}

impl aws_smithy_types::config_bag::Storable for Sends {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

/// An interceptor the manager adds to its client: it marks a dispatch failure as never sent
/// ([`NeverSent`] in its chain) when every attempt of the operation that reached the HTTP client
/// failed while connecting, or when no attempt reached it (no credentials, no endpoint). An attempt that timed out, or failed in any other way after it was
/// handed to the HTTP client, may have been sent: then nothing is marked and the error stays
/// ambiguous. (The SDK retries a refused connection; an earlier attempt may have been sent and
/// lost, so the last attempt's error alone proves nothing.)
#[derive(Debug)]
pub(crate) struct SendTracker;

impl aws_smithy_runtime_api::client::interceptors::Intercept for SendTracker {
    fn name(&self) -> &'static str {
        "dynamodb_transactions::SendTracker"
    }

    fn read_before_transmit(
        &self,
        _ctx: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), BoxError> {
        let mut s = cfg.load::<Sends>().copied().unwrap_or_default();
        s.transmitted += 1;
        cfg.interceptor_state().store_put(s);
        Ok(())
    }

    fn read_after_attempt(
        &self,
        ctx: &aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef<
            '_,
        >,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(mut s) = cfg.load::<Sends>().copied() else {
            return Ok(()); // this attempt never reached the HTTP client
        };
        if refused_while_connecting(ctx) && s.never_sent < s.transmitted {
            s.never_sent += 1;
            cfg.interceptor_state().store_put(s);
        }
        Ok(())
    }

    fn modify_before_completion(
        &self,
        ctx: &mut aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextMut<'_>,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), BoxError> {
        use aws_smithy_runtime_api::client::orchestrator::OrchestratorError;
        use aws_smithy_runtime_api::client::result::ConnectorError;
        let s = cfg.load::<Sends>().copied().unwrap_or_default();
        let serialized = ctx.request().is_some();
        let Some(r) = ctx.output_or_error_mut() else {
            return Ok(());
        };
        let Err(e) = r else {
            return Ok(());
        };
        let never_sent = if s.transmitted == 0 {
            // No attempt reached the HTTP client: it failed after the request was built and before
            // it could be handed over (no credentials, no endpoint, signing). Only such "other"
            // errors: an interceptor's error (or a timeout) is left as it is.
            serialized
                && !(e.is_operation_error()
                    || e.is_interceptor_error()
                    || e.is_timeout_error()
                    || e.is_response_error()
                    || e.is_connector_error())
        } else {
            s.never_sent == s.transmitted
                && e.as_connector_error().is_some_and(|c| connect_failed(c))
        };
        if !never_sent {
            return Ok(());
        }
        // The same kind of connector error as before (callers classify by it), with the proof
        // in front of the original error.
        type Make = fn(BoxError) -> ConnectorError;
        let make: Box<dyn FnOnce(BoxError) -> ConnectorError> = match e.as_connector_error() {
            Some(c) if c.is_io() => Box::new(ConnectorError::io as Make),
            Some(c) if c.is_timeout() => Box::new(ConnectorError::timeout as Make),
            Some(c) if c.is_user() => Box::new(ConnectorError::user as Make),
            Some(c) => {
                let kind = c.as_other();
                Box::new(move |b| ConnectorError::other(b, kind))
            }
            None => Box::new(|b| ConnectorError::other(b, None)),
        };
        let original = std::mem::replace(e, OrchestratorError::other("replaced by SendTracker"));
        *e = OrchestratorError::connector(make(Box::new(NeverSent(Box::new(original)))));
        Ok(())
    }
}

/// Counts, for one write sent by the library (each of its sends, and the SDK's own resends of
/// each), the attempts that may have reached DynamoDB and the answers its caller saw. The SDK
/// resends a request on its own after a 5xx answer or a reset connection, either of which may
/// follow a landed attempt, and the caller sees only the last answer: a failed condition that
/// may be our own earlier attempt's effect is told from one that is not by
/// [`unseen`](Self::unseen). An attempt that provably failed while connecting did not land and
/// is not counted. A throttled attempt is (DynamoDB applied nothing, but the tests'
/// `fault::Throttler` throttles answers after applying them).
///
/// Added to a request with `customize().interceptor(..)`; clones share the counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Transmissions(std::sync::Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    /// Attempts handed to the HTTP client, less those refused while connecting.
    may_have_landed: AtomicU32,
    /// Answers from DynamoDB the caller saw (a success or a service error: one per SDK call).
    answered: AtomicU32,
}

impl Transmissions {
    /// One SDK call ended with DynamoDB's answer, which its caller saw.
    pub(crate) fn saw_answer(&self) {
        self.0.answered.fetch_add(1, Ordering::SeqCst);
    }

    /// True when an attempt whose answer nobody saw may have reached DynamoDB: more attempts may
    /// have landed than answers were seen.
    pub(crate) fn unseen(&self) -> bool {
        self.0.may_have_landed.load(Ordering::SeqCst) > self.0.answered.load(Ordering::SeqCst)
    }
}

impl aws_smithy_runtime_api::client::interceptors::Intercept for Transmissions {
    fn name(&self) -> &'static str {
        "dynamodb_transactions::Transmissions"
    }

    fn read_before_transmit(
        &self,
        _ctx: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.may_have_landed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn read_after_attempt(
        &self,
        ctx: &aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef<
            '_,
        >,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), BoxError> {
        if refused_while_connecting(ctx) {
            // Counted at its transmission: it never left the machine.
            let _ = self
                .0
                .may_have_landed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
        Ok(())
    }
}

/// The client with a [`SendTracker`]: what the manager uses for every request.
pub(crate) fn track_sends(client: aws_sdk_dynamodb::Client) -> aws_sdk_dynamodb::Client {
    let conf = client
        .config()
        .to_builder()
        .interceptor(SendTracker)
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    use aws_sdk_dynamodb::types::AttributeValue;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::Transmissions;
    use crate::ddb::{Placeholders, Write, Written};

    /// A client of `endpoint` that makes up to three attempts, 1 ms apart.
    fn client(endpoint: &str) -> aws_sdk_dynamodb::Client {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("k", "s", None, None, "test"))
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(3)
                    .with_initial_backoff(std::time::Duration::from_millis(1)),
            )
            .build();
        aws_sdk_dynamodb::Client::from_conf(conf)
    }

    fn write() -> Write {
        let key = HashMap::from([("Id".to_string(), AttributeValue::S("a".into()))]);
        Write::update(
            "T",
            key,
            "SET v = :_TxV".into(),
            "attribute_exists(Id)".into(),
            Placeholders {
                values: HashMap::from([(":_TxV".into(), AttributeValue::N("1".into()))]),
                ..Placeholders::default()
            },
        )
    }

    /// A server that answers its requests with `answers` in turn (status, DynamoDB error type),
    /// one connection each; its address.
    async fn server(answers: Vec<(u16, &'static str)>) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move {
            for (status, kind) in answers {
                let (mut sock, _) = l.accept().await.unwrap();
                // The headers, then the body they announce.
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = sock.read(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let body = format!(
                    r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{kind}","message":"m"}}"#
                );
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/x-amz-json-1.0\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(answer.as_bytes()).await.unwrap();
                let _ = sock.shutdown().await;
            }
        });
        addr
    }

    /// A failed condition answered at once: every attempt was seen.
    #[tokio::test]
    async fn a_failed_condition_answered_at_once_leaves_nothing_unseen() {
        let endpoint = server(vec![(400, "ConditionalCheckFailedException")]).await;
        let t = Transmissions::default();
        let got = write()
            .send_counted(&client(&endpoint), None, Some(&t))
            .await;
        assert!(matches!(got, Ok(Written::ConditionFailed(_))), "{got:?}");
        assert!(!t.unseen());
    }

    /// A 500 the SDK retried, then a failed condition: the first attempt may have landed, and
    /// its answer was not the one seen.
    #[tokio::test]
    async fn a_failed_condition_after_a_retried_500_leaves_an_attempt_unseen() {
        let endpoint = server(vec![
            (500, "InternalServerError"),
            (400, "ConditionalCheckFailedException"),
        ])
        .await;
        let t = Transmissions::default();
        let got = write()
            .send_counted(&client(&endpoint), None, Some(&t))
            .await;
        assert!(matches!(got, Ok(Written::ConditionFailed(_))), "{got:?}");
        assert!(t.unseen());
    }

    /// Every attempt refused while connecting: none left the machine.
    #[tokio::test]
    async fn attempts_refused_while_connecting_are_not_counted() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap().port()
        };
        let t = Transmissions::default();
        let c = client(&format!("http://127.0.0.1:{port}"));
        let got = write().send_counted(&c, None, Some(&t)).await;
        assert!(got.is_err(), "{got:?}");
        assert!(!t.unseen());
        assert_eq!(t.0.may_have_landed.load(super::Ordering::SeqCst), 0);
    }
}
