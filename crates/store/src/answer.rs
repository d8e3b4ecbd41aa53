//! The answers of the readers: serde structs whose JSON is exactly the web API's (see
//! `docs/api.md`). Times are unix seconds, durations microseconds as floats (`*_us`).

use serde::Serialize;

/// All events of the range (after the filter).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    pub count: u64,
    pub errors: u64,
    pub service_sum_us: f64,
    /// Average active sessions: service time over the range's seconds.
    pub load: f64,
}

/// One group of `top`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TopRow {
    pub protocol: String,
    pub command: String,
    pub id: String,
    pub fingerprint: String,
    pub count: u64,
    pub errors: u64,
    pub service_sum_us: f64,
    pub load: f64,
    /// Share of the total service time, 0..1.
    pub share: f64,
    pub p50_us: Option<f64>,
    pub p95_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Rows sent plus rows affected.
    pub rows: u64,
    /// Load per step (`step_s`), one value per point from `from`.
    pub spark: Vec<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TopAnswer {
    pub from: i64,
    pub to: i64,
    pub step_s: i64,
    pub totals: Totals,
    pub groups: Vec<TopRow>,
    /// Groups left out by the limit.
    pub omitted: u64,
}

/// One value of a dimension.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Share {
    /// `-` for an unknown value, `other` for the values past the 20 shown.
    pub value: String,
    pub count: u64,
    pub service_sum_us: f64,
    /// Share of the total service time, 0..1.
    pub share: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DimsAnswer {
    pub from: i64,
    pub to: i64,
    /// `server`, `database`, `user`, `client`, `protocol`: shares by service time.
    pub dims: std::collections::BTreeMap<String, Vec<Share>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupInfo {
    pub protocol: String,
    pub command: String,
    pub id: String,
    pub fingerprint: String,
    pub first_seen: Option<i64>,
    pub last_seen: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupSummary {
    pub count: u64,
    pub errors: u64,
    pub service_sum_us: f64,
    pub p50_us: Option<f64>,
    pub p95_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub rows: u64,
}

/// One point of a group's series: the merge of every row in `[ts, ts + step_s)`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupPoint {
    pub ts: i64,
    pub count: u64,
    pub errors: u64,
    pub p50_us: Option<f64>,
    pub p95_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub rows: u64,
    pub service_sum_us: f64,
}

/// Service-time counts per interval `[bounds_us[i], bounds_us[i+1])` per series point (the last
/// interval also holds everything above its upper bound).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Heatmap {
    pub bounds_us: Vec<f64>,
    pub cells: Vec<Vec<u64>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DistBucket {
    pub lo_us: f64,
    pub hi_us: f64,
    pub count: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ErrorRow {
    pub code: u32,
    pub count: u64,
    /// The message of an error example with this code in the range ("" when none is kept).
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ExampleRow {
    /// `slowest` or `error`.
    pub kind: String,
    /// Start of the hour the example was kept for.
    pub ts: i64,
    pub latency_us: Option<f64>,
    pub text: String,
    pub database: String,
    pub user: String,
    pub client: String,
    pub code: Option<u32>,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupAnswer {
    pub from: i64,
    pub to: i64,
    pub step_s: i64,
    pub group: GroupInfo,
    pub summary: GroupSummary,
    pub series: Vec<GroupPoint>,
    pub heatmap: Heatmap,
    pub distribution: Vec<DistBucket>,
    pub errors: Vec<ErrorRow>,
    pub examples: Vec<ExampleRow>,
    pub dims: std::collections::BTreeMap<String, Vec<Share>>,
}
