//! Who runs a transaction scenario: the library with its default settings, the library with the
//! write-only fast path off (the locking protocol), the library in the Java library's shape (one
//! request in flight, phased commit), or native `TransactWriteItems` (one request, no protocol).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem, Update};
use dynamodb_transactions::{Settings, TransactionManager};

use crate::transactions::{Kind, PAD, n_val, s};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// Default `Settings` (write-only transactions of < 100 items take the fast path).
    Library,
    /// `write_only_fast_path = false`: every transaction goes through the locking protocol.
    Locking,
    /// The locking protocol with its locks taken item by item (`batch_locks = false`).
    PerItem,
    /// `lock_reads_before_recording = true`: a read sends only its lock once the record exists.
    LockedReads,
    /// `roll_forward = false`: a phased commit (N > 98) applies every write before the commit,
    /// then unlocks (one more write per item than the default, which rolls writes forward).
    ApplyFirst,
    /// The Java library's shape: `concurrency = 1`, `one_shot_max_items = 0`, no fast path, locks
    /// item by item.
    Sequential,
    /// One `TransactWriteItems` with the N actions (N ≤ 100, writes only).
    Native,
    /// Two such `TransactWriteItems` in a row (update rows, N ≤ 100): what any protocol that
    /// writes every item twice, in two sequential requests, costs at the least. On DynamoDB Local,
    /// which spends its time per item written, this is the floor of the locking protocol's
    /// two-request commit (the lock, then the commit).
    NativeTwice,
}

impl Driver {
    pub fn label(self) -> &'static str {
        match self {
            Driver::Library => "library",
            Driver::Locking => "locking",
            Driver::PerItem => "per-item locks",
            Driver::LockedReads => "locked reads",
            Driver::ApplyFirst => "apply before commit",
            Driver::Sequential => "sequential",
            Driver::Native => "native",
            Driver::NativeTwice => "native twice",
        }
    }

    /// The drivers that run `kind` at size `n`. Reads and transfers always take the locking
    /// protocol, so the locking driver would repeat the library's figures there; they compare
    /// with locked reads instead, as writes compare batched locks with per-item ones.
    pub fn for_row(kind: Kind, n: usize) -> Vec<Driver> {
        let mut d = vec![Driver::Library];
        if kind.writes_only() {
            d.push(Driver::Locking);
            d.push(Driver::PerItem);
        } else {
            d.push(Driver::LockedReads);
        }
        if kind.writes_only() && n > Settings::default().one_shot_max_items {
            d.push(Driver::ApplyFirst);
        }
        d.push(Driver::Sequential);
        if kind.writes_only() && n <= 100 {
            d.push(Driver::Native);
        }
        if kind == Kind::Update && n <= 100 {
            d.push(Driver::NativeTwice);
        }
        d
    }

    /// Applies this driver's settings on top of the defaults (`concurrency`: the library's
    /// in-flight limit from the command line, if any).
    pub fn configure(self, st: &mut Settings, concurrency: Option<usize>) {
        match self {
            Driver::Library
            | Driver::Locking
            | Driver::PerItem
            | Driver::LockedReads
            | Driver::ApplyFirst => {
                if let Some(c) = concurrency {
                    st.concurrency = c;
                }
                if matches!(self, Driver::Locking | Driver::PerItem) {
                    st.write_only_fast_path = false;
                }
                if self == Driver::PerItem {
                    st.batch_locks = false;
                }
                if self == Driver::LockedReads {
                    st.lock_reads_before_recording = true;
                }
                if self == Driver::ApplyFirst {
                    st.roll_forward = false;
                }
            }
            Driver::Sequential => {
                st.concurrency = 1;
                st.one_shot_max_items = 0;
                st.write_only_fast_path = false;
                st.batch_locks = false;
            }
            Driver::Native | Driver::NativeTwice => {}
        }
    }

    /// A manager with this driver's settings on the benchmark's tables.
    pub fn manager(
        self,
        client: Client,
        prefix: &str,
        concurrency: Option<usize>,
    ) -> TransactionManager {
        TransactionManager::builder(client)
            .transactions_table(format!("{prefix}-tx"))
            .images_table(format!("{prefix}-img"))
            .configure(|st| self.configure(st, concurrency))
            .build()
    }
}

/// The native equivalent of one write scenario: one `TransactWriteItems` with the N actions.
pub async fn run_native(client: &Client, table: &str, kind: Kind, keys: &[String]) {
    let items: Vec<TransactWriteItem> = keys
        .iter()
        .map(|k| match kind {
            Kind::Update => TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name(table)
                        .key("Id", s(k))
                        .update_expression("SET hits = hits + :one")
                        .expression_attribute_values(":one", n_val(1))
                        .build()
                        .expect("update"),
                )
                .build(),
            Kind::Insert => TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name(table)
                        .item("Id", s(k))
                        .item("hits", n_val(0))
                        .item("pad", s(PAD))
                        .condition_expression("attribute_not_exists(Id)")
                        .build()
                        .expect("put"),
                )
                .build(),
            Kind::Delete => TransactWriteItem::builder()
                .delete(
                    Delete::builder()
                        .table_name(table)
                        .key("Id", s(k))
                        .build()
                        .expect("delete"),
                )
                .build(),
            Kind::Read | Kind::Transfer => unreachable!("no native equivalent of reads"),
        })
        .collect();
    client
        .transact_write_items()
        .set_transact_items(Some(items))
        .send()
        .await
        .expect("native transaction");
}
