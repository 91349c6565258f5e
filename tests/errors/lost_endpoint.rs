//! Commits whose endpoint goes away, through a forwarding proxy: one that could not send leaves
//! nothing decided; one whose request landed and whose answer was lost is not reported pending.

use std::time::Duration;

use dynamodb_transactions::{Error, TransactionManager, TxOutcome, TxState};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use crate::common::*;
use crate::{ambiguous, assert_one_readable_line, client_for};

/// A TCP proxy to DynamoDB Local on `port` (0: any), until the returned handle is aborted (which
/// also cuts every proxied connection).
async fn proxy(port: u16) -> (u16, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let upstream = endpoint()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let h = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (mut down, _) = l.accept().await.unwrap();
            let upstream = upstream.clone();
            conns.spawn(async move {
                let mut up = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
            });
        }
    });
    (port, h)
}

/// A commit whose requests cannot connect: the fast path's request and the record's creation are
/// refused, so nothing was sent and nothing was decided (`Pending`, not `Undetermined`), and
/// indeed nothing landed: no record exists once the endpoint is back.
#[tokio::test]
async fn a_commit_that_cannot_connect_leaves_nothing_decided() {
    let env = TestEnv::new("refused").await;
    let (port, p) = proxy(0).await;
    let m = TransactionManager::builder(client_for(&format!("http://127.0.0.1:{port}")))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .build();
    let tx = m.begin();
    let id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .send()
        .await
        .unwrap(); // buffered (the table's key schema is read through the proxy)
    p.abort();
    let _ = p.await;
    tokio::time::sleep(Duration::from_millis(200)).await; // the pooled connection is seen closed
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::DynamoDb { .. }), "{err:?}");
    assert!(!ambiguous(&err), "{err:?}");
    assert_eq!(err.transaction_outcome(), Some(TxOutcome::Pending), "{err}");
    assert_one_readable_line(&err);
    let (_, p) = proxy(port).await;
    assert_eq!(m.transaction_state(&id).await.unwrap(), None);
    assert!(env.raw_get(&env.table, &key("a")).await.is_none());
    p.abort();
}

/// A proxy to DynamoDB Local that forwards every request, but once a request containing
/// `trigger` has been forwarded it loses the answer: it closes every connection and stops
/// listening (later connections are refused). Returns the port.
async fn losing_proxy(trigger: &'static str) -> u16 {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::AsyncWriteExt;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let upstream = endpoint()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let stop = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (down, _) = tokio::select! {
                r = l.accept() => r.unwrap(),
                _ = stop.notified() => break,
            };
            let up = tokio::net::TcpStream::connect(upstream.clone())
                .await
                .unwrap();
            let (mut dr, mut dw) = down.into_split();
            let (mut ur, mut uw) = up.into_split();
            let cut = Arc::new(AtomicBool::new(false));
            let cut2 = cut.clone();
            conns.spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = dr.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    if buf[..n]
                        .windows(trigger.len())
                        .any(|w| w == trigger.as_bytes())
                    {
                        cut2.store(true, Ordering::SeqCst);
                    }
                    if uw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
            let stop2 = stop.clone();
            conns.spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = ur.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    if cut.load(Ordering::SeqCst) {
                        // The request landed; its answer is lost, and the endpoint goes away.
                        stop2.notify_one();
                        return;
                    }
                    if dw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
        conns.abort_all();
    });
    port
}

/// The write-only fast path's request lands, its answer is lost and the endpoint goes away: the
/// SDK's retries and the fast path's own repeats of the request are refused (never sent). A
/// repeat that was never sent says nothing about the first request, which committed: `commit`
/// must not report "nothing decided".
#[tokio::test]
async fn a_refused_repeat_of_a_landed_fast_path_commit_is_not_pending() {
    let env = TestEnv::new("fp-refused").await;
    let port = losing_proxy("TransactWriteItems").await;
    let m = TransactionManager::builder(client_for(&format!("http://127.0.0.1:{port}")))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| s.write_only_fast_path = true)
        .build();
    let tx = m.begin();
    let id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .send()
        .await
        .unwrap(); // buffered
    let err = tx.commit().await.unwrap_err();
    // The fast path's request landed.
    assert_eq!(
        env.manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::Committed)
    );
    assert!(env.raw_get(&env.table, &key("a")).await.is_some());
    assert!(
        matches!(
            err.transaction_outcome(),
            Some(TxOutcome::Undetermined | TxOutcome::Committed)
        ),
        "committed, but the error says {:?}: {err}",
        err.transaction_outcome()
    );
}
