//! The one-line `Display` of errors: each shape of DynamoDB error, a failed request naming its
//! table and key, and each error about a transaction naming it and its outcome.

use dynamodb_transactions::{Error, TransactionManager};

use crate::assert_one_readable_line;
use crate::common::*;

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
