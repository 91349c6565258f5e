//! Restarts.
