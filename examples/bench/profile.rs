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
/// `--rtt-ms`, the seed of `--profile-seed`.
pub fn settings(args: &Args) -> Option<ProfileSettings> {
    args.profile?;
    let mut s = ProfileSettings::all(args.profile_seed);
    s.round_trip = Duration::from_millis(args.rtt_ms);
    Some(s)
}

/// One line describing the settings, for the report's headings.
pub fn describe(s: &ProfileSettings) -> String {
    format!(
        "round trip {} ms + up to {} ms jitter, conflicts {}, stale reads {} (window {} ms, p {}), \
         throttling {} ({} WCU / {} RCU per item per s), seed {}",
        s.round_trip.as_millis(),
        s.jitter.as_millis(),
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
        "{{\"round_trip_ms\":{},\"jitter_ms\":{},\"conflicts\":{},\"stale_reads\":{},\"stale_window_ms\":{},\"stale_probability\":{},\"throttling\":{},\"write_units_per_second\":{},\"read_units_per_second\":{},\"seed\":{}}}",
        s.round_trip.as_secs_f64() * 1e3,
        s.jitter.as_secs_f64() * 1e3,
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
            .map(|p| Counts::of(p.stats()))
            .unwrap_or_default()
    }

    /// What the profile did since `before`; `None` when raw.
    pub fn counts_since(&self, before: Counts) -> Option<Counts> {
        self.is_profiled().then(|| self.counts().since(before))
    }
}

/// What a profile did over a scenario: `ProfileStats`' counts, which can be subtracted and summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    pub transactions_in_conflict: u64,
    pub writes_in_conflict: u64,
    pub throttled: u64,
    pub stale_items: u64,
    pub versions_observed: u64,
}

impl Counts {
    fn of(s: ProfileStats) -> Self {
        Counts {
            requests: s.requests,
            transactions_in_conflict: s.transactions_in_conflict,
            writes_in_conflict: s.writes_in_conflict,
            throttled: s.throttled,
            stale_items: s.stale_items,
            versions_observed: s.versions_observed,
        }
    }

    fn fields(&self) -> [(&'static str, u64); 6] {
        [
            ("requests", self.requests),
            ("transactions_in_conflict", self.transactions_in_conflict),
            ("writes_in_conflict", self.writes_in_conflict),
            ("throttled", self.throttled),
            ("stale_items", self.stale_items),
            ("versions_observed", self.versions_observed),
        ]
    }

    pub fn since(self, before: Counts) -> Counts {
        Counts {
            requests: self.requests.saturating_sub(before.requests),
            transactions_in_conflict: self
                .transactions_in_conflict
                .saturating_sub(before.transactions_in_conflict),
            writes_in_conflict: self
                .writes_in_conflict
                .saturating_sub(before.writes_in_conflict),
            throttled: self.throttled.saturating_sub(before.throttled),
            stale_items: self.stale_items.saturating_sub(before.stale_items),
            versions_observed: self
                .versions_observed
                .saturating_sub(before.versions_observed),
        }
    }

    pub fn add(&mut self, o: Counts) {
        self.requests += o.requests;
        self.transactions_in_conflict += o.transactions_in_conflict;
        self.writes_in_conflict += o.writes_in_conflict;
        self.throttled += o.throttled;
        self.stale_items += o.stale_items;
        self.versions_observed += o.versions_observed;
    }

    pub fn json(&self) -> String {
        let parts: Vec<String> = self
            .fields()
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", parts.join(","))
    }

    /// `requests seen / TWI in conflict / writes in conflict / throttled / stale items`.
    pub fn brief(&self) -> String {
        format!(
            "{} / {} / {} / {} / {}",
            self.requests,
            self.transactions_in_conflict,
            self.writes_in_conflict,
            self.throttled,
            self.stale_items
        )
    }
}

/// The header of [`Counts::brief`].
pub const BRIEF_HEADER: &str =
    "profile: requests / TWI cancelled for conflict / writes in conflict / throttled / stale items";
