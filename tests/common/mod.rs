//! Integration-test harness: one DynamoDB Local per test binary (or the endpoint in
//! `AWS_ENDPOINT_URL_DYNAMODB`), a client per test, uniquely named tables that are deleted afterwards.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{
    BehaviorVersion, Credentials, Intercept, Region, SharedHttpClient, SharedInterceptor,
};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use dynamodb_transactions::fault::{
    CanonicalNumbers, Delayer, DynamoDbProfile, FaultInjector, LateDelivery, ProfileSettings,
    RequestCounter,
};
use dynamodb_transactions::{Item, TransactionManager};

mod chaos;
mod hooks;
// Not every test binary uses them.
#[allow(unused_imports)]
pub use chaos::{ChaosWorker, sweep_left_work};
#[allow(unused_imports)]
pub use hooks::{Hook, RunBefore};

static ENDPOINT: OnceLock<String> = OnceLock::new();

/// The endpoint of the DynamoDB to test against, starting DynamoDB Local if none is configured.
pub fn endpoint() -> &'static str {
    ENDPOINT.get_or_init(|| {
        if let Ok(ep) = std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
            && !ep.is_empty()
        {
            return ep;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/dynamodb-local");
        let mut child = Command::new("bash")
            .arg(script)
            .arg("serve")
            .arg(std::process::id().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot run scripts/dynamodb-local");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let endpoint = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(ep) = line.strip_prefix("endpoint ") {
                        break ep.trim().to_string();
                    }
                }
                _ => panic!("scripts/dynamodb-local serve did not print an endpoint"),
            }
        };
        // The script stops the server when this process exits; keep the handle alive.
        std::mem::forget(child);
        endpoint
    })
}

/// A client for the test endpoint, with extra interceptors.
pub fn client_with(interceptors: Vec<SharedInterceptor>) -> Client {
    client_with_delays(interceptors, None)
}

/// The number rewriter every client of this test process answers through, when numbers are
/// canonicalised: with `DDB_CANONICAL_NUMBERS=1`, under the profile (`scripts/test`'s profile steps), or
/// after [`canonical_numbers_always`]. Then every lock stamp also ends in 0
/// (`fault::zero_ended_lock_stamps`), so that the rewriter changes every stamp DynamoDB Local
/// returns as written.
pub fn canonical_numbers() -> Option<&'static CanonicalNumbers> {
    // The profile canonicalises numbers too.
    profile();
    NUMBERS
        .get_or_init(|| {
            (std::env::var("DDB_CANONICAL_NUMBERS").as_deref() == Ok("1")).then(canonical_setup)
        })
        .as_ref()
}

/// Canonicalises numbers in this test process whatever the environment says (call before building
/// any client).
pub fn canonical_numbers_always() -> &'static CanonicalNumbers {
    NUMBERS
        .get_or_init(|| Some(canonical_setup()))
        .as_ref()
        .expect("numbers were configured not to be canonicalised before this call")
}

static NUMBERS: OnceLock<Option<CanonicalNumbers>> = OnceLock::new();

/// The DynamoDB profile every client of this test process answers through: with
/// `DDB_PROFILE=dynamodb` (the profile steps of `scripts/test`), or after
/// [`profile_always`]. Every behaviour is on (transaction conflicts, stale reads, throttling,
/// DynamoDB's service time) with
/// a round trip of `DDB_PROFILE_RTT_MS` (default 5) plus up to 2 ms of jitter, seeded from
/// `DDB_PROFILE_SEED` (default 1; printed). Numbers are canonicalised too.
pub fn profile() -> Option<&'static DynamoDbProfile> {
    PROFILE
        .get_or_init(|| {
            (std::env::var("DDB_PROFILE").as_deref() == Ok("dynamodb")).then(profile_setup)
        })
        .as_ref()
}

/// Answers as DynamoDB does in this test process whatever the environment says (call before
/// building any client).
pub fn profile_always() -> &'static DynamoDbProfile {
    PROFILE
        .get_or_init(|| Some(profile_setup()))
        .as_ref()
        .expect("the profile was configured off before this call")
}

static PROFILE: OnceLock<Option<DynamoDbProfile>> = OnceLock::new();

fn profile_setup() -> DynamoDbProfile {
    let seed = std::env::var("DDB_PROFILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut settings = ProfileSettings::all(seed);
    // `DDB_PROFILE_ONLY=conflicts,stale,throttling`: those behaviours alone (to find which one a
    // failure needs).
    if let Ok(only) = std::env::var("DDB_PROFILE_ONLY") {
        let on = |b: &str| only.split(',').any(|x| x.trim() == b);
        settings.conflicts = on("conflicts");
        settings.stale_reads = on("stale");
        settings.throttling = on("throttling");
    }
    // `DDB_PROFILE_SERVICE_TIME=0`: requests take Local's time instead of DynamoDB's.
    if std::env::var("DDB_PROFILE_SERVICE_TIME").as_deref() == Ok("0") {
        settings.service_time = false;
    }
    if let Some(ms) = std::env::var("DDB_PROFILE_RTT_MS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        settings.round_trip = std::time::Duration::from_millis(ms);
    }
    eprintln!("DynamoDB profile: {settings:?} (replay with DDB_PROFILE_SEED={seed})");
    canonical_numbers_always();
    DynamoDbProfile::new(settings)
}

fn canonical_setup() -> CanonicalNumbers {
    dynamodb_transactions::fault::zero_ended_lock_stamps(true);
    CanonicalNumbers::new()
}

/// A client for the test endpoint, with extra interceptors, sending its requests through `delayer`
/// (random delays before sending and after the response) when given, and answering through
/// [`canonical_numbers`] when numbers are canonicalised.
pub fn client_with_delays(
    interceptors: Vec<SharedInterceptor>,
    delayer: Option<&Delayer>,
) -> Client {
    client_with_http(interceptors, delayer, canonical_numbers())
}

/// A client without the number rewriter, whatever the configuration: DynamoDB Local's own answers.
pub fn local_client() -> Client {
    client_with_http(vec![], None, None)
}

/// A client with extra interceptors, requests through `delayer` and answers through `numbers` when
/// given.
pub fn client_with_http(
    interceptors: Vec<SharedInterceptor>,
    delayer: Option<&Delayer>,
    numbers: Option<&CanonicalNumbers>,
) -> Client {
    // The profile comes with the numbers: a client of DynamoDB Local's own answers has neither.
    let profile = numbers.and(profile());
    client_layers(interceptors, delayer, profile, numbers)
}

/// A client answering through `profile` (a test's own) with numbers canonicalised, and extra
/// interceptors.
pub fn client_through(profile: &DynamoDbProfile, interceptors: Vec<SharedInterceptor>) -> Client {
    client_layers(
        interceptors,
        None,
        Some(profile),
        Some(canonical_numbers_always()),
    )
}

/// A client with extra interceptors, whose requests go through `delayer`, then `profile`, and
/// whose answers come through `numbers`, each when given.
pub fn client_layers(
    interceptors: Vec<SharedInterceptor>,
    delayer: Option<&Delayer>,
    profile: Option<&DynamoDbProfile>,
    numbers: Option<&CanonicalNumbers>,
) -> Client {
    // Layers from DynamoDB out: its behaviour where Local differs (the profile's own reads go
    // straight to Local), the network's injected delays, numbers as DynamoDB writes them.
    let mut http = profile.map(DynamoDbProfile::http_client);
    if let Some(d) = delayer {
        http = Some(match http {
            Some(h) => d.wrap(h),
            None => d.http_client(),
        });
    }
    if let Some(n) = numbers {
        http = Some(match http {
            Some(h) => n.wrap(h),
            None => n.http_client(),
        });
    }
    client_over(interceptors, http)
}

/// A client answering through `profile` (a test's own) with numbers canonicalised, whose requests
/// the profile admits before `late` delays them: a `TransactWriteItems` that `late` keeps at its
/// gate is in flight for the profile's conflict rule until the test opens the gate.
pub fn client_through_late(
    profile: &DynamoDbProfile,
    late: &LateDelivery,
    interceptors: Vec<SharedInterceptor>,
) -> Client {
    let http = canonical_numbers_always().wrap(profile.wrap(late.http_client()));
    client_over(interceptors, Some(http))
}

/// A client with extra interceptors whose requests `late` delivers, under the profile and the
/// number rewriter when this test process answers through them.
pub fn client_with_late(interceptors: Vec<SharedInterceptor>, late: &LateDelivery) -> Client {
    match profile() {
        Some(p) => client_through_late(p, late, interceptors),
        None => {
            let http = match canonical_numbers() {
                Some(n) => n.wrap(late.http_client()),
                None => late.http_client(),
            };
            client_over(interceptors, Some(http))
        }
    }
}

/// A client of the test endpoint with extra interceptors, over `http` when given.
fn client_over(interceptors: Vec<SharedInterceptor>, http: Option<SharedHttpClient>) -> Client {
    let mut b = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .region(Region::new(
            std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()),
        ))
        .retry_config(RetryConfig::standard().with_max_attempts(3));
    b = match (
        std::env::var("AWS_ACCESS_KEY_ID"),
        std::env::var("AWS_SECRET_ACCESS_KEY"),
    ) {
        (Ok(k), Ok(s)) => b.credentials_provider(Credentials::new(
            k,
            s,
            std::env::var("AWS_SESSION_TOKEN").ok(),
            None,
            "env",
        )),
        _ => b.credentials_provider(Credentials::new("local", "local", None, None, "static")),
    };
    for i in interceptors {
        b = b.interceptor(i);
    }
    if let Some(h) = http {
        b = b.http_client(h);
    }
    Client::from_conf(b.build())
}

/// A plain client.
pub fn client() -> Client {
    client_with(vec![])
}

pub fn shared<I: Intercept + 'static>(i: I) -> SharedInterceptor {
    SharedInterceptor::new(i)
}

/// Unique name for a table of this test.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Tables created by a test, deleted when the guard drops (even if the test panicked).
#[derive(Default)]
pub struct TableGuard {
    names: Mutex<Vec<String>>,
}

impl TableGuard {
    pub fn add(&self, name: &str) {
        self.names.lock().unwrap().push(name.to_string());
    }
}

impl Drop for TableGuard {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap());
        if names.is_empty() || std::env::var("KEEP_TEST_TABLES").is_ok() {
            return;
        }
        let client = client();
        // Drop cannot await, and may run inside a runtime: use a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                for n in names {
                    let _ = client.delete_table().table_name(n).send().await;
                }
            });
        })
        .join();
    }
}

/// A test's environment: a manager over fresh tables, a hash-key table and a hash+range table,
/// a request counter and a fault injector on the manager's client.
pub struct TestEnv {
    pub client: Client,
    pub manager: TransactionManager,
    pub counter: RequestCounter,
    pub faults: FaultInjector,
    /// Hash key `Id` (S).
    pub table: String,
    /// Hash key `Id` (S), range key `RangeAttr` (N).
    pub range_table: String,
    pub guard: TableGuard,
}

impl TestEnv {
    pub async fn new(prefix: &str) -> TestEnv {
        Self::with_settings(prefix, |_| {}).await
    }

    pub async fn with_settings(
        prefix: &str,
        f: impl FnOnce(&mut dynamodb_transactions::Settings),
    ) -> TestEnv {
        Self::with_client(prefix, client_with, f).await
    }

    /// A test's environment whose clients answer through `profile` (the test's own).
    pub async fn through_profile(
        prefix: &str,
        profile: &DynamoDbProfile,
        f: impl FnOnce(&mut dynamodb_transactions::Settings),
    ) -> TestEnv {
        Self::with_client(prefix, |i| client_through(profile, i), f).await
    }

    /// As [`through_profile`](Self::through_profile), with `late` between the profile and Local
    /// (see [`client_through_late`]).
    pub async fn through_profile_late(
        prefix: &str,
        profile: &DynamoDbProfile,
        late: &LateDelivery,
        f: impl FnOnce(&mut dynamodb_transactions::Settings),
    ) -> TestEnv {
        Self::with_client(prefix, |i| client_through_late(profile, late, i), f).await
    }

    async fn with_client(
        prefix: &str,
        make_client: impl FnOnce(Vec<SharedInterceptor>) -> Client,
        f: impl FnOnce(&mut dynamodb_transactions::Settings),
    ) -> TestEnv {
        // `TEST_LOG=dynamodb_transactions=debug`: what the library did, on stderr.
        if let Ok(filter) = std::env::var("TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let counter = RequestCounter::new();
        let faults = FaultInjector::new();
        let client = make_client(vec![shared(counter.clone()), shared(faults.clone())]);
        let guard = TableGuard::default();
        let tx_table = unique_name(&format!("{prefix}-tx"));
        let img_table = unique_name(&format!("{prefix}-img"));
        let table = unique_name(&format!("{prefix}-items"));
        let range_table = unique_name(&format!("{prefix}-range"));
        for t in [&tx_table, &img_table, &table, &range_table] {
            guard.add(t);
        }
        let manager = TransactionManager::builder(client.clone())
            .transactions_table(&tx_table)
            .images_table(&img_table)
            .configure(|s| {
                s.rollback_on_drop = false;
                // Most tests exercise the locking protocol; tests of the write-only fast path turn
                // it back on.
                s.write_only_fast_path = false;
                // And transactions that have a record from their first locked read; tests of a
                // record only when needed (and the chaos workers, some of them) turn it back on.
                s.record_on_demand = false;
                f(s)
            })
            .build();
        manager.create_tables().await.expect("create_tables");
        create_table(&client, &table, ("Id", ScalarAttributeType::S), None).await;
        create_table(
            &client,
            &range_table,
            ("Id", ScalarAttributeType::S),
            Some(("RangeAttr", ScalarAttributeType::N)),
        )
        .await;
        counter.reset();
        TestEnv {
            client,
            manager,
            counter,
            faults,
            table,
            range_table,
            guard,
        }
    }

    /// Another manager over the same tables with its own client, counter and faults: a second
    /// coordinator.
    pub fn second_coordinator(&self) -> (TransactionManager, FaultInjector) {
        let faults = FaultInjector::new();
        let client = client_with(vec![shared(faults.clone())]);
        let m = TransactionManager::builder(client)
            .transactions_table(self.manager.transactions_table())
            .images_table(self.manager.images_table())
            .configure(|s| {
                s.rollback_on_drop = false;
                s.write_only_fast_path = self.manager.settings().write_only_fast_path;
                let mine = self.manager.settings();
                s.record_on_demand = mine.record_on_demand;
                if mine.wait_in_ticket_order {
                    // A transaction meeting a queue takes a ticket: the second coordinator judges
                    // an older one dead as the first would.
                    s.wait_in_ticket_order = true;
                    s.contention = mine.contention;
                }
            })
            .build();
        (m, faults)
    }

    /// The state of a transaction's record and whether it is finalized (`None`: no record).
    pub async fn tx_state(
        &self,
        id: &dynamodb_transactions::TxId,
    ) -> Option<(dynamodb_transactions::TxState, bool)> {
        self.manager
            .transaction_state(id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized))
    }

    /// Every row of a transaction's record (header and chunk rows), raw.
    pub async fn record_rows(&self, id: &dynamodb_transactions::TxId) -> Vec<Item> {
        self.client
            .query()
            .table_name(self.manager.transactions_table())
            .key_condition_expression("#i = :i")
            .expression_attribute_names("#i", "_TxId")
            .expression_attribute_values(":i", s(id.as_str()))
            .consistent_read(true)
            .send()
            .await
            .expect("Query")
            .items
            .unwrap_or_default()
    }

    /// Raw consistent read of an item, lock attributes included.
    pub async fn raw_get(&self, table: &str, key: &Item) -> Option<Item> {
        self.client
            .get_item()
            .table_name(table)
            .set_key(Some(key.clone()))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem")
            .item
    }

    /// Every item of a table (raw).
    pub async fn scan_all(&self, table: &str) -> Vec<Item> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .expect("Scan");
            out.extend(page.items().iter().cloned());
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        out
    }

    /// Raw puts of many items, bypassing the library: 25 to a `BatchWriteItem`, eight batches
    /// at a time, unprocessed items sent again.
    pub async fn raw_put_all(&self, table: &str, items: Vec<Item>) {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        use futures::{StreamExt, TryStreamExt};
        let puts: Vec<WriteRequest> = items
            .into_iter()
            .map(|it| {
                WriteRequest::builder()
                    .put_request(PutRequest::builder().set_item(Some(it)).build().unwrap())
                    .build()
            })
            .collect();
        futures::stream::iter(puts.chunks(25).map(<[WriteRequest]>::to_vec))
            .map(|mut batch| async move {
                while !batch.is_empty() {
                    let out = self
                        .client
                        .batch_write_item()
                        .request_items(table, batch)
                        .send()
                        .await?;
                    batch = out
                        .unprocessed_items
                        .and_then(|mut u| u.remove(table))
                        .unwrap_or_default();
                }
                Ok::<_, aws_sdk_dynamodb::Error>(())
            })
            .buffer_unordered(8)
            .try_collect::<()>()
            .await
            .expect("BatchWriteItem");
    }

    /// Raw put, bypassing the library.
    pub async fn raw_put(&self, table: &str, item: Item) {
        self.client
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await
            .expect("PutItem");
    }
}

pub async fn create_table(
    client: &Client,
    name: &str,
    hash: (&str, ScalarAttributeType),
    range: Option<(&str, ScalarAttributeType)>,
) {
    let mut req = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(hash.0)
                .attribute_type(hash.1)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(hash.0)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        );
    if let Some((r, t)) = range {
        req = req
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(r)
                    .attribute_type(t)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(r)
                    .key_type(KeyType::Range)
                    .build()
                    .unwrap(),
            );
    }
    req.send().await.expect("CreateTable");
}

pub fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

pub fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// An item from pairs.
pub fn item(pairs: &[(&str, AttributeValue)]) -> Item {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect::<HashMap<_, _>>()
}

/// `{Id: id}`
pub fn key(id: &str) -> Item {
    item(&[("Id", s(id))])
}

/// True if any attribute name starts with `_Tx`.
pub fn has_tx_attrs(item: &Item) -> bool {
    item.keys().any(|k| k.starts_with("_Tx"))
}

/// The seed and scale of a randomized test: `<seed_var>=random` explores, `<seed_var>=<n>` replays,
/// unset gives `default` (a schedule that passed, so CI is repeatable); `<scale_var>=<k>` multiplies
/// the work (default 1).
pub fn seed_and_scale(seed_var: &str, default: u64, scale_var: &str) -> (u64, usize) {
    let seed = match std::env::var(seed_var).as_deref() {
        Ok("random") => rand::random(),
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("{seed_var} is a number or `random`")),
        Err(_) => default,
    };
    let scale = std::env::var(scale_var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    (seed, scale)
}
