//! The locks' error type.

use std::time::Duration;

/// What can go wrong when acquiring, holding or releasing a lock.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// [`Wait::NoWait`](super::Wait::NoWait) was asked and someone holds the lock or is ahead in
    /// the queue. Nothing of this attempt is left in the table.
    #[error("lock {name} is held or has waiters ahead")]
    WouldBlock {
        /// The lock.
        name: String,
    },

    /// The lock was not granted within the wait. Nothing of this attempt is left in the table.
    #[error("lock {name} was not granted within {waited:?}")]
    Timeout {
        /// The lock.
        name: String,
        /// How long the acquire waited.
        waited: Duration,
    },

    /// The lock (or the place in the queue) was lost: its lease ran out before a heartbeat
    /// succeeded, or another process judged it dead and took it over. Work done under it may have
    /// overlapped with the next holder's; fencing tokens let a resource reject the stale holder.
    #[error("lock {name} was lost")]
    Lost {
        /// The lock.
        name: String,
    },

    /// The lock is not held by this guard any more (it was already released).
    #[error("lock {name} is not held")]
    NotHeld {
        /// The lock.
        name: String,
    },

    /// The configuration or the arguments are invalid.
    #[error("invalid lock configuration: {0}")]
    InvalidConfig(String),

    /// A DynamoDB request failed (see [`crate::Error::DynamoDb`]), or the table is missing or has
    /// the wrong layout.
    #[error(transparent)]
    DynamoDb(Box<crate::Error>),
}

impl From<crate::Error> for LockError {
    fn from(e: crate::Error) -> Self {
        LockError::DynamoDb(Box::new(e))
    }
}

impl LockError {
    /// True for [`LockError::WouldBlock`].
    pub fn is_would_block(&self) -> bool {
        matches!(self, LockError::WouldBlock { .. })
    }

    /// True for [`LockError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// True for [`LockError::Lost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }
}
