//! Whether a failed request may have landed (`ambiguous`), against real sockets: a refused
//! connection or a request never signed is not ambiguous; a request sent and then cut off, or
//! never answered, is.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Region};
use dynamodb_transactions::TransactionManager;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use crate::{ambiguous, assert_one_readable_line, manager_for};

/// A local port nothing listens on (bound, then closed).
async fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// Reads from `sock` until the end of an HTTP request's headers has arrived (the request was
/// sent).
async fn read_request(sock: &mut tokio::net::TcpStream) -> usize {
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = Vec::new();
    loop {
        let n = sock.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return got.len();
        }
        got.extend_from_slice(&buf[..n]);
        if got.windows(4).any(|w| w == b"\r\n\r\n") {
            return got.len();
        }
    }
}
/// A refused connection never left the machine: not ambiguous, and `Display` is one line.
#[tokio::test]
async fn a_refused_connection_is_not_ambiguous_and_reads_as_one_line() {
    for endpoint in [
        "http://127.0.0.1:1".to_string(),
        format!("http://127.0.0.1:{}", closed_port().await),
    ] {
        let err = manager_for(&endpoint).verify_tables().await.unwrap_err();
        assert!(!ambiguous(&err), "{endpoint}: {err:?}");
        // Transient for the SDK (the endpoint may come back): retryable, but not ambiguous.
        assert!(err.is_retryable(), "{endpoint}: {err}");
        assert_one_readable_line(&err);
        let line = err.to_string();
        assert!(
            line.starts_with("DynamoDB DescribeTable failed on table Tx: dispatch failure: ")
                && line.contains("the request was never sent")
                && line.to_lowercase().contains("connection refused"),
            "{line}"
        );
    }
}

/// No credentials: the request was built but never signed, so never handed to the HTTP client.
/// Not ambiguous. (The endpoint is a live local server, to show nothing reached it.)
#[tokio::test]
async fn a_request_without_credentials_is_not_ambiguous() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&endpoint)
        .region(Region::new("us-east-1"))
        .build();
    let m = TransactionManager::builder(Client::from_conf(conf)).build();
    let err = m.verify_tables().await.unwrap_err();
    assert!(!ambiguous(&err), "{err:?}");
    assert_one_readable_line(&err);
    let accepted = tokio::time::timeout(Duration::from_millis(100), l.accept()).await;
    assert!(accepted.is_err(), "nothing connected");
}

/// A server that reads the request and closes the connection without answering: the request was
/// sent and may have been applied. Ambiguous.
#[tokio::test]
async fn a_request_sent_then_cut_off_is_ambiguous() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let server = tokio::spawn(async move {
        loop {
            let (mut sock, _) = l.accept().await.unwrap();
            assert!(read_request(&mut sock).await > 0);
            drop(sock);
        }
    });
    let err = manager_for(&endpoint).verify_tables().await.unwrap_err();
    server.abort();
    assert!(ambiguous(&err), "{err:?}");
    assert_one_readable_line(&err);
}

/// A server that reads the request and never answers: the attempt times out after sending.
/// Ambiguous.
#[tokio::test]
async fn a_request_never_answered_is_ambiguous() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (mut sock, _) = l.accept().await.unwrap();
            read_request(&mut sock).await;
            held.push(sock); // never answered, never closed
        }
    });
    let err = manager_for(&endpoint).verify_tables().await.unwrap_err();
    server.abort();
    assert!(ambiguous(&err), "{err:?}");
    assert_one_readable_line(&err);
}

/// The first attempt is sent and cut off, then the server goes away: the SDK's retry is refused.
/// The last attempt's error (connection refused) proves nothing about the first: ambiguous.
#[tokio::test]
async fn a_refused_retry_of_a_sent_request_is_ambiguous() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut sock, _) = l.accept().await.unwrap();
        assert!(read_request(&mut sock).await > 0);
        drop(l); // later connections are refused
        drop(sock);
    });
    let err = manager_for(&endpoint).verify_tables().await.unwrap_err();
    server.await.unwrap();
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(ambiguous(&err), "{err:?}");
}
