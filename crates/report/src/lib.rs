//! Renderers for aggregated query statistics: a pt-query-digest style text report, a stable JSON
//! document (schema in docs/json-format.md) and one NDJSON line per event.
//!
//! Every renderer is deterministic: groups are ranked by [`OrderBy`] with ties broken by id, so
//! the same input always gives the same bytes (golden files depend on it).

#![forbid(unsafe_code)]

pub mod dba;
pub mod dims;
pub mod errors;
pub mod events;
pub mod fine;
pub mod fmt;
pub mod health;
pub mod json;
pub mod mergeable;
pub mod text;
pub mod txn;

use std::cmp::Ordering;

use aggregate::{Aggregator, Group};
use serde::{Deserialize, Serialize};

pub use health::{
    COUNTERS, CaptureHealth, Counter, FrameHealth, Kind, LiveHealth, ProtocolHealth, Section,
    StreamHealth, TcpHealth, Unit,
};

/// How groups are ranked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderBy {
    /// Total service time (sum of service times: the load each group put on the server, without
    /// queueing behind earlier requests on the same connection), like pt-query-digest's default.
    #[default]
    Total,
    /// Number of calls.
    Count,
    /// 99th percentile service time.
    P99,
    /// Number of errors.
    Errors,
    /// Total response time as the client saw it (queueing included).
    Response,
}

impl OrderBy {
    pub fn name(self) -> &'static str {
        match self {
            OrderBy::Total => "total",
            OrderBy::Count => "count",
            OrderBy::P99 => "p99",
            OrderBy::Errors => "errors",
            OrderBy::Response => "response",
        }
    }
}

impl std::str::FromStr for OrderBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "total" | "time" | "sum" => Ok(OrderBy::Total),
            "count" | "calls" => Ok(OrderBy::Count),
            "p99" => Ok(OrderBy::P99),
            "errors" => Ok(OrderBy::Errors),
            "response" | "resp" => Ok(OrderBy::Response),
            _ => Err(format!(
                "unknown order {s:?}: expected total, count, p99, errors or response"
            )),
        }
    }
}

/// What to show and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOptions {
    /// Groups listed in the profile and detailed (JSON: in `queries[]`); `usize::MAX` for all.
    pub limit: usize,
    pub order_by: OrderBy,
    /// ANSI colours in the text report.
    pub color: bool,
    /// Target line width of the text report's profile table (the fingerprint column is cut to
    /// fit); 0 means never cut.
    pub width: usize,
    /// The latency distribution of each group (text and JSON).
    pub histogram: Histogram,
    /// What part of the input was selected (`--since`/`--until`), for the text header's
    /// `# Selected:` line (after the time range); `None`: everything.
    pub selected: Option<String>,
}

/// Which latency distribution the report prints per group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Histogram {
    /// One row per power of ten (text; JSON `latency_distribution`/`service_distribution`).
    #[default]
    Decade,
    /// Also log-linear rows a few percent wide between the group's min and max
    /// ([`aggregate::fine`]): text rows with bars instead of the decades, JSON `service_fine`.
    Fine,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            limit: 20,
            order_by: OrderBy::Total,
            color: false,
            width: 140,
            histogram: Histogram::Decade,
            selected: None,
        }
    }
}

/// All groups (overflow group included) ranked by `order`, ties by id then key.
pub fn ranked(agg: &Aggregator, order: OrderBy) -> Vec<&Group> {
    let mut v: Vec<&Group> = agg.groups().collect();
    v.sort_by(|a, b| compare(a, b, order));
    v
}

fn compare(a: &Group, b: &Group, order: OrderBy) -> Ordering {
    let (sa, sb) = (&a.stats, &b.stats);
    let primary = match order {
        OrderBy::Total => sb.service.sum_ns().cmp(&sa.service.sum_ns()),
        OrderBy::Count => sb.count.cmp(&sa.count),
        OrderBy::P99 => sb
            .service
            .quantile_ns(0.99)
            .cmp(&sa.service.quantile_ns(0.99)),
        OrderBy::Errors => sb.errors.cmp(&sa.errors),
        OrderBy::Response => sb.latency.sum_ns().cmp(&sa.latency.sum_ns()),
    };
    primary
        .then_with(|| sb.count.cmp(&sa.count))
        .then_with(|| a.id.cmp(&b.id))
        .then_with(|| a.key.cmp(&b.key))
}

/// Nanoseconds the report's rates are computed over: the capture's first to last packet when
/// known, else the first to the last event.
pub fn span_ns(agg: &Aggregator, health: &CaptureHealth) -> Option<u64> {
    health.span_ns().or_else(|| {
        let s = &agg.totals().stats;
        match (s.first_seen_ns, s.last_seen_ns) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        }
    })
}

/// Events per second over `span_ns` (None when the span is 0 or unknown).
pub fn rate(n: u64, span_ns: Option<u64>) -> Option<f64> {
    span_ns
        .filter(|&s| s > 0)
        .map(|s| n as f64 / (s as f64 / 1e9))
}

/// A sum of times divided by the span: with service times (the reports' concurrency), the
/// average number of requests the server worked on, at most the number of connections; with
/// response times, the average number of requests in flight, queued ones included.
pub fn concurrency(sum_ns: u128, span_ns: Option<u64>) -> Option<f64> {
    span_ns.filter(|&s| s > 0).map(|s| sum_ns as f64 / s as f64)
}
