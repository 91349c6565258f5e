//! `--profile dynamodb`: every scenario runs twice, against DynamoDB Local as it answers (*raw*)
//! and through `fault::DynamoDbProfile` with every behaviour on (transaction conflicts, stale
//! eventually consistent reads, per-item throttling, a network round trip). Each scenario gets a
//! fresh profile, shared by every client of the scenario as coordinators share one table, and
//! reports what the profile did over it ([`Counts`]).

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::SharedInterceptor;
use dynamodb_transactions::fault::{DynamoDbProfile, ProfileSettings, ProfileStats};

use crate::Args;
use crate::common;

/// The profiles `--profile` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProfileName {
    /// DynamoDB's conflicts, stale reads, per-item throttling and round trip.
    Dynamodb,
}

/// The settings of the `--profile` run, if any: every behaviour on, the round trip of
/// `--rtt-ms`, the seed of `--profile-seed`, DynamoDB's service time unless
/// `--local-service-time`.
pub fn settings(args: &Args) -> Option<ProfileSettings> {
    args.profile?;
    let mut s = ProfileSettings::all(args.profile_seed);
    s.round_trip = Duration::from_millis(args.rtt_ms);
    s.service_time = !args.local_service_time;
    Some(s)
}

/// One line describing the settings, for the report's headings.
pub fn describe(s: &ProfileSettings) -> String {
    format!(
        "round trip {} ms + up to {} ms jitter, service time {}, conflicts {}, stale reads {} (window {} ms, p {}), \
         throttling {} ({} WCU / {} RCU per item per s), seed {}",
        s.round_trip.as_millis(),
        s.jitter.as_millis(),
        if s.service_time {
            "DynamoDB's"
        } else {
            "Local's"
        },
        on(s.conflicts),
        on(s.stale_reads),
        s.stale_window.as_millis(),
        s.stale_probability,
        on(s.throttling),
        s.write_units_per_second,
        s.read_units_per_second,
        s.seed
    )
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// The settings as a JSON object.
pub fn settings_json(s: &ProfileSettings) -> String {
    format!(
        "{{\"round_trip_ms\":{},\"jitter_ms\":{},\"service_time\":{},\"conflicts\":{},\"stale_reads\":{},\"stale_window_ms\":{},\"stale_probability\":{},\"throttling\":{},\"write_units_per_second\":{},\"read_units_per_second\":{},\"seed\":{}}}",
        s.round_trip.as_secs_f64() * 1e3,
        s.jitter.as_secs_f64() * 1e3,
        s.service_time,
        s.conflicts,
        s.stale_reads,
        s.stale_window.as_secs_f64() * 1e3,
        s.stale_probability,
        s.throttling,
        s.write_units_per_second,
        s.read_units_per_second,
        s.seed
    )
}

/// Where a scenario's requests go: DynamoDB Local as it answers, or through one profile that
/// every client of the scenario shares.
#[derive(Debug, Clone, Default)]
pub struct Target {
    profile: Option<DynamoDbProfile>,
}

impl Target {
    /// DynamoDB Local as it answers.
    pub fn raw() -> Self {
        Self::default()
    }

    /// A fresh profile: nothing in flight, no versions seen, full throughput buckets.
    pub fn profiled(settings: &ProfileSettings) -> Self {
        Target {
            profile: Some(DynamoDbProfile::new(settings.clone())),
        }
    }

    pub fn is_profiled(&self) -> bool {
        self.profile.is_some()
    }

    /// A client of this target with extra interceptors.
    pub async fn client(&self, interceptors: Vec<SharedInterceptor>) -> Client {
        common::client_through(interceptors, self.profile.as_ref()).await
    }

    /// What the profile did so far (zero when raw).
    pub fn counts(&self) -> Counts {
        self.profile
            .as_ref()
            .map(DynamoDbProfile::stats)
            .unwrap_or_default()
    }

    /// What the profile did since `before`; `None` when raw.
    pub fn counts_since(&self, before: Counts) -> Option<Counts> {
        self.is_profiled().then(|| self.counts().since(&before))
    }
}

/// What a profile did over a scenario (subtracted with `since`, summed with `+=`).
pub type Counts = ProfileStats;

/// A profile's counts as a JSON object.
pub fn counts_json(c: &Counts) -> String {
    let fields = [
        ("requests", c.requests),
        ("transactions_in_conflict", c.transactions_in_conflict),
        ("writes_in_conflict", c.writes_in_conflict),
        ("throttled", c.throttled),
        ("stale_items", c.stale_items),
        ("versions_observed", c.versions_observed),
    ];
    let parts: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", parts.join(","))
}

/// `requests seen / TWI in conflict / writes in conflict / throttled / stale items`.
pub fn counts_brief(c: &Counts) -> String {
    format!(
        "{} / {} / {} / {} / {}",
        c.requests, c.transactions_in_conflict, c.writes_in_conflict, c.throttled, c.stale_items
    )
}

/// The header of [`counts_brief`].
pub const BRIEF_HEADER: &str =
    "profile: requests / TWI cancelled for conflict / writes in conflict / throttled / stale items";
