//! Chaos.
