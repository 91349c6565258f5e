//! Shared setup for the examples: a client for the configured endpoint and table helpers.
#![allow(dead_code)]

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Intercept, Region};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use dynamodb_transactions::fault::{CanonicalNumbers, DynamoDbProfile};

/// Exits with a clear message unless an endpoint or AWS credentials are configured.
pub fn require_endpoint(name: &str) {
    if std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_err()
        && std::env::var("AWS_ACCESS_KEY_ID").is_err()
    {
        eprintln!(
            "{name}: no DynamoDB to talk to. Set AWS_ENDPOINT_URL_DYNAMODB (e.g. \
             `export AWS_ENDPOINT_URL_DYNAMODB=$(scripts/dynamodb-local start)`), or AWS \
             credentials for real DynamoDB."
        );
        std::process::exit(2);
    }
}

/// A client for `AWS_ENDPOINT_URL_DYNAMODB` (static local credentials unless AWS ones are set),
/// with extra interceptors.
pub async fn client(interceptors: Vec<aws_sdk_dynamodb::config::SharedInterceptor>) -> Client {
    client_through(interceptors, None).await
}

/// [`client`], answering through `profile` when given (with numbers written as DynamoDB writes
/// them): every client of one workload must share one profile, as they would share one table.
pub async fn client_through(
    interceptors: Vec<aws_sdk_dynamodb::config::SharedInterceptor>,
    profile: Option<&DynamoDbProfile>,
) -> Client {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
        loader =
            loader.credentials_provider(Credentials::new("local", "local", None, None, "static"));
    }
    if std::env::var("AWS_REGION").is_err() {
        loader = loader.region(Region::new("us-east-1"));
    }
    let sdk = loader.load().await;
    let mut b = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .retry_config(RetryConfig::standard().with_max_attempts(3));
    for i in interceptors {
        b = b.interceptor(i);
    }
    if let Some(p) = profile {
        b = b.http_client(CanonicalNumbers::new().wrap(p.http_client()));
    }
    Client::from_conf(b.build())
}

/// Wraps an interceptor for [`client`].
pub fn shared<I: Intercept + 'static>(i: I) -> aws_sdk_dynamodb::config::SharedInterceptor {
    aws_sdk_dynamodb::config::SharedInterceptor::new(i)
}

/// Creates a table with a string hash key `Id` (on-demand), if it does not exist.
pub async fn create_table(client: &Client, name: &str) {
    create_table_keyed(client, name, "Id").await;
}

/// Creates a table with the string hash key `key` (on-demand), if it does not exist.
pub async fn create_table_keyed(client: &Client, name: &str, key: &str) {
    let created = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("complete"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .expect("complete"),
        )
        .send()
        .await;
    if let Err(e) = created
        && !e
            .as_service_error()
            .is_some_and(|s| s.is_resource_in_use_exception())
    {
        panic!(
            "cannot create {name}: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(e)
        );
    }
}

/// Every item of a table (consistent scan).
pub async fn scan(client: &Client, table: &str) -> Vec<dynamodb_transactions::Item> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        out.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            return out;
        }
    }
}

/// Deletes tables, ignoring errors.
pub async fn drop_tables(client: &Client, tables: &[String]) {
    for t in tables {
        let _ = client.delete_table().table_name(t).send().await;
    }
}

/// The p-th percentile (0..=100) of sorted values.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Turns on the table's stream with both images (what the change feed reads) and waits until
/// the table is active with its stream.
pub async fn enable_stream(client: &Client, table: &str) {
    client
        .update_table()
        .table_name(table)
        .stream_specification(
            aws_sdk_dynamodb::types::StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(aws_sdk_dynamodb::types::StreamViewType::NewAndOldImages)
                .build()
                .expect("stream specification"),
        )
        .send()
        .await
        .expect("UpdateTable (stream)");
    loop {
        let d = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .expect("DescribeTable");
        let t = d.table().expect("table");
        if t.table_status() == Some(&aws_sdk_dynamodb::types::TableStatus::Active)
            && t.latest_stream_arn().is_some()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
