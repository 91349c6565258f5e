//! [`TxId`]: the id of a transaction.

/// The id of a transaction (a UUID string).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxId(pub(crate) String);

impl TxId {
    /// A fresh random id.
    pub fn new_random() -> TxId {
        TxId(uuid::Uuid::new_v4().to_string())
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for TxId {
    fn from(s: String) -> Self {
        TxId(s)
    }
}

impl From<&str> for TxId {
    fn from(s: &str) -> Self {
        TxId(s.to_string())
    }
}
