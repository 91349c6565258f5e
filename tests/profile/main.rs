//! DynamoDB's behaviour where DynamoDB Local differs, through `fault::DynamoDbProfile`: first that
//! the profile answers as DynamoDB does (conflicts, stale reads, throttling), then that the library
//! meets it — a transaction of any size commits without conflicting with itself, and conflicts
//! DynamoDB answers are absorbed, never returned raw.
//!
//! Each test makes its own profile, shared by every client of the test (as every coordinator of a
//! real table shares the table), so that its counts are its own.
#[path = "../common/mod.rs"]
mod common;

mod absorbed;
mod any_size;
mod engine;
mod in_flight;
