//! What errors say: the transaction's outcome from the error alone, a one-line `Display`, and
//! whether a failed request may have landed (`ambiguous`), tested against real sockets: a refused
//! connection is not ambiguous; a request sent and then cut off, or never answered, is.
mod common;

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use common::*;
use dynamodb_transactions::{Error, TableRole, TransactionManager, TxOutcome, TxState};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// A client for `endpoint` with the SDK's standard retries (3 attempts, short backoff) and a short
/// attempt timeout.
fn client_for(endpoint: &str) -> Client {
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("local", "local", None, None, "static"))
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(10)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_millis(700))
                .build(),
        )
        .build();
    Client::from_conf(conf)
}

fn manager_for(endpoint: &str) -> TransactionManager {
    TransactionManager::builder(client_for(endpoint))
        .transactions_table("Tx")
        .images_table("TxImages")
        .build()
}

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

fn ambiguous(e: &Error) -> bool {
    match e {
        Error::DynamoDb { ambiguous, .. } => *ambiguous,
        other => panic!("expected a DynamoDB error, got {other:?}"),
    }
}

fn assert_one_readable_line(e: &Error) {
    let line = e.to_string();
    assert!(!line.contains('\n'), "{line}");
    assert!(!line.contains('{'), "a debug dump: {line}");
    assert!(!line.contains("DispatchFailure("), "a debug dump: {line}");
    assert!(
        std::error::Error::source(e).is_some(),
        "the SDK error stays in the source chain"
    );
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

/// `Display` of each shape of DynamoDB error: a service error (code and message), a
/// cancellation reason, and an error with neither.
#[test]
fn dynamodb_errors_display_as_one_line() {
    let shapes = [
        (
            Error::DynamoDb {
                operation: "PutItem",
                table: None,
                key: None,
                code: Some("ValidationException".into()),
                message: Some("One or more parameter values were invalid:\n  bad".into()),
                ambiguous: false,
                source: "x".into(),
            },
            "DynamoDB PutItem failed (ValidationException): One or more parameter values were invalid: bad",
        ),
        (
            Error::DynamoDb {
                operation: "TransactWriteItems",
                table: None,
                key: None,
                code: Some("ThrottlingError".into()),
                message: None,
                ambiguous: false,
                source: "x".into(),
            },
            "DynamoDB TransactWriteItems failed (ThrottlingError): no message",
        ),
        (
            Error::DynamoDb {
                operation: "GetItem",
                table: None,
                key: None,
                code: None,
                message: Some("dispatch failure: io error: connection refused".into()),
                ambiguous: false,
                source: "x".into(),
            },
            "DynamoDB GetItem failed: dispatch failure: io error: connection refused",
        ),
        (
            Error::DynamoDb {
                operation: "UpdateItem",
                table: Some("Accounts".into()),
                key: Some(item(&[("Id", s("a")), ("Sort", n(5))])),
                code: Some("ValidationException".into()),
                message: Some("bad".into()),
                ambiguous: false,
                source: "x".into(),
            },
            r#"DynamoDB UpdateItem failed (ValidationException) on table Accounts, key Id = "a", Sort = 5: bad"#,
        ),
    ];
    for (e, want) in shapes {
        assert_eq!(e.to_string(), want);
    }
    let locked = Error::ItemLocked {
        table: "Accounts".into(),
        key: item(&[("Id", s("a")), ("Sort", n(5))]),
        owner: "t1".into(),
    };
    assert_eq!(
        locked.to_string(),
        r#"item of table Accounts (key Id = "a", Sort = 5) is locked by transaction t1"#
    );
}

/// A failed request on one item names its table and key, as DynamoDB answered it for real.
#[tokio::test]
async fn a_failed_request_names_its_table_and_key() {
    // A manager whose transactions table has another key schema (the test's user table, hash key
    // `Id`): reading a record is a GetItem that DynamoDB refuses with a ValidationException.
    let env = TestEnv::new("err-target").await;
    let manager = TransactionManager::builder(client())
        .transactions_table(&env.table)
        .build();
    let e = manager.transaction_state(&"t1".into()).await.unwrap_err();
    assert!(
        matches!(&e, Error::DynamoDb { table: Some(t), key: Some(_), .. } if *t == env.table),
        "{e:?}"
    );
    assert_eq!(
        e.to_string().split(": ").next().unwrap(),
        format!(
            r#"DynamoDB GetItem failed (ValidationException) on table {}, key _TxId = "t1", _TxN = 0"#,
            env.table
        ),
    );
    assert_one_readable_line(&e);
}

/// A manager whose tables were never created: every way of using it says which table is missing
/// and names `create_tables()`, and a commit that met it reports that nothing was written, which
/// is true. Once the tables exist, the same manager works.
#[tokio::test]
async fn a_missing_transactions_table_names_create_tables() {
    let env = TestEnv::new("no-tables").await;
    let tx_table = unique_name("no-tables-tx");
    let img_table = unique_name("no-tables-img");
    env.guard.add(&tx_table);
    env.guard.add(&img_table);
    let check = |e: &Error| {
        assert!(
            matches!(e, Error::TableNotFound { table, role: TableRole::Transactions } if *table == tx_table),
            "{e:?}"
        );
        let line = e.to_string();
        assert_eq!(
            line,
            format!(
                "transactions table {tx_table} does not exist; nothing was written: create the \
                 tables with TransactionManager::create_tables() (or `dynamodb-tx tables create`)"
            )
        );
        assert_eq!(e.transaction_outcome(), Some(TxOutcome::RolledBack), "{e}");
        assert!(!e.is_retryable(), "{e}");
    };
    for fast_path in [true, false] {
        let m = TransactionManager::builder(client())
            .transactions_table(&tx_table)
            .images_table(&img_table)
            .configure(|s| s.write_only_fast_path = fast_path)
            .build();
        // A write-only commit (the fast path, or the locking protocol).
        let tx = m.begin();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s("a"))
            .send()
            .await
            .unwrap(); // buffered: the user table exists
        check(&tx.commit().await.unwrap_err());
        // `run`, whose rollback of the failed attempt meets the missing table too.
        let e = m
            .run(async |tx| {
                tx.put_item()
                    .table_name(&env.table)
                    .item("Id", s("a"))
                    .send()
                    .await?;
                Ok(())
            })
            .await
            .unwrap_err();
        check(&e);
        // A locked read records the transaction first.
        let tx = m.begin();
        let e = tx
            .get_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .send()
            .await
            .unwrap_err();
        check(&e);
        check(&m.transaction_state(&"t1".into()).await.unwrap_err());
    }
    assert!(env.raw_get(&env.table, &key("a")).await.is_none());

    let m = TransactionManager::builder(client())
        .transactions_table(&tx_table)
        .images_table(&img_table)
        .build();
    let e = m.verify_tables().await.unwrap_err();
    check(&e);
    m.create_tables().await.unwrap();
    let tx = m.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(env.raw_get(&env.table, &key("a")).await.is_some());
}

/// A missing images table names `create_tables()` too.
#[tokio::test]
async fn a_missing_images_table_names_create_tables() {
    let env = TestEnv::new("no-images").await;
    let img_table = unique_name("no-images-img");
    let m = TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(&img_table)
        .build();
    let e = m.verify_tables().await.unwrap_err();
    assert!(
        matches!(&e, Error::TableNotFound { table, role: TableRole::Images } if *table == img_table),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "images table {img_table} does not exist: create the tables with \
             TransactionManager::create_tables() (or `dynamodb-tx tables create`)"
        )
    );
}

/// A request on a table that does not exist is refused by its `send()`; the transaction is left
/// as it was, stays usable, and commits its other writes.
#[tokio::test]
async fn a_missing_user_table_refuses_only_its_request() {
    let env = TestEnv::new("no-user-table").await;
    let missing = unique_name("no-user-table-x");
    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .send()
        .await
        .unwrap();
    let e = tx
        .put_item()
        .table_name(&missing)
        .item("Id", s("b"))
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::TableNotFound { table, role: TableRole::Other } if *table == missing),
        "{e:?}"
    );
    assert_eq!(e.to_string(), format!("table {missing} does not exist"));
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("c"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(env.raw_get(&env.table, &key("a")).await.is_some());
    assert!(env.raw_get(&env.table, &key("c")).await.is_some());
}

/// The one-line `Display` of each error about a transaction names it and says its outcome.
#[test]
fn transaction_errors_say_the_outcome_and_the_id() {
    let id = dynamodb_transactions::TxId::from("t1");
    let cases = [
        (
            Error::ConditionFailed {
                tx_id: id.clone(),
                request_index: 0,
                table: "Accounts".into(),
                key: item(&[("Id", s("alice"))]),
                item: None,
            },
            r#"transaction t1 was rolled back: the condition of request 0 on table Accounts failed (key Id = "alice")"#,
        ),
        (
            Error::RequestRejected {
                tx_id: id.clone(),
                request_index: 2,
                table: "Accounts".into(),
                message: "An operand in the update expression\n  has an incorrect data type".into(),
            },
            "transaction t1 was rolled back: request 2 on table Accounts was rejected by DynamoDB: An operand in the update expression has an incorrect data type",
        ),
        (
            Error::DuplicateRequest {
                tx_id: id.clone(),
                table: "Accounts".into(),
                key: item(&[("Id", s("alice"))]),
            },
            r#"transaction t1 already writes this item of table Accounts (key Id = "alice"); this request was refused and the transaction is still pending"#,
        ),
        (
            Error::RolledBack { tx_id: id.clone() },
            "transaction t1 was rolled back",
        ),
        (
            Error::AlreadyCommitted { tx_id: id.clone() },
            "transaction t1 is already committed",
        ),
        (
            Error::UnknownOutcome { tx_id: id.clone() },
            "the outcome of transaction t1 is unknown: its record was deleted",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
}

/// Each outcome, driven for real, read from the error alone, and checked against the record.
#[tokio::test]
async fn the_error_alone_tells_the_outcome() {
    let env = TestEnv::with_settings("outcome", |s| {
        s.write_only_fast_path = false;
        s.rollback_on_drop = false;
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let state = |id: dynamodb_transactions::TxId| {
        let m = env.manager.clone();
        async move {
            m.transaction_state(&id)
                .await
                .unwrap()
                .map(|s| (s.state, s.finalized))
        }
    };

    // Rolled back: a condition was false.
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .condition_expression("attribute_not_exists(Id)")
        .send()
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(err.is_condition_failed(), "{err:?}");
    assert_eq!(err.transaction_outcome(), Some(TxOutcome::RolledBack));
    assert!(
        err.to_string()
            .starts_with(&format!("transaction {id} was rolled back: ")),
        "{err}"
    );
    assert_eq!(state(id).await, Some((TxState::RolledBack, true)));

    // Rolled back in the write-only fast path's single request, refused as a whole: nothing was
    // written, not even a record, so there is no state to read; the error alone says it.
    let fast = TransactionManager::builder(env.client.clone())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| s.write_only_fast_path = true)
        .build();
    let tx = fast.begin();
    let id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .condition_expression("attribute_not_exists(Id)")
        .send()
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(err.is_condition_failed(), "{err:?}");
    assert_eq!(err.transaction_outcome(), Some(TxOutcome::RolledBack));
    assert!(err.to_string().contains(id.as_str()), "{err}");
    assert_eq!(state(id).await, None);

    // Rolled back: another coordinator rolled it back before the commit.
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap(); // recorded and locked
    env.manager.rollback_transaction(&id).await.unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(err.is_rolled_back(), "{err:?}");
    assert_eq!(err.transaction_outcome(), Some(TxOutcome::RolledBack));
    assert_eq!(state(id).await.map(|s| s.0), Some(TxState::RolledBack));

    // Committed: another coordinator committed it; this handle's rollback cannot undo it.
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
        .send()
        .await
        .unwrap(); // applied under a lock
    env.manager
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    let err = tx.rollback().await.unwrap_err();
    assert_eq!(
        err.transaction_outcome(),
        Some(TxOutcome::Committed),
        "{err:?}"
    );
    assert_eq!(state(id).await, Some((TxState::Committed, true)));
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(2));

    // Pending:
    // tests/transaction/in_doubt.rs::a_commit_throttled_throughout_returns_a_retryable_error and
    // a_commit_that_cannot_connect_leaves_nothing_decided above. Undetermined:
    // tests/fast_path.rs::a_coordinator_that_dies_after_sending_reports_an_undetermined_outcome.

    // A missing transactions table: nothing was written. Another table may be missing after
    // the transaction wrote (a table deleted meanwhile): nothing decided.
    let missing = |role| Error::TableNotFound {
        table: "T".into(),
        role,
    };
    assert_eq!(
        missing(TableRole::Transactions).transaction_outcome(),
        Some(TxOutcome::RolledBack)
    );
    assert_eq!(
        missing(TableRole::Images).transaction_outcome(),
        Some(TxOutcome::Pending)
    );
    assert_eq!(
        missing(TableRole::Other).transaction_outcome(),
        Some(TxOutcome::Pending)
    );

    // Not about a transaction.
    assert_eq!(
        Error::TransactionNotFound { tx_id: "t".into() }.transaction_outcome(),
        None
    );
}
