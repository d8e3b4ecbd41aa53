//! The JSON report (`--format json`): one document, schema version [`SCHEMA_VERSION`], documented
//! field by field in docs/json-format.md. The structs here are that schema; they deserialize too,
//! so tests and tools in Rust can read reports back.

use std::hash::Hash;
use std::io::{self, Write};
use std::sync::Arc;

use aggregate::{Aggregator, DECADE_LABELS, DIM_SHOW, Latency, Stats, TopCounter};
use serde::{Deserialize, Serialize};

use crate::fmt::{rfc3339, us};
use crate::{CaptureHealth, ReportOptions, concurrency, ranked, rate, span_ns};

/// Bumped on any change that can break a reader (a field removed, renamed or re-typed). Adding
/// fields does not bump it.
pub const SCHEMA_VERSION: u32 = 1;

/// The whole document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub version: u32,
    pub capture: Capture,
    pub totals: Totals,
    /// The ranking of `queries[]`: "total" (service time), "count", "p99" (service time),
    /// "errors" or "response" (response time).
    pub order_by: String,
    /// Most groups in `queries[]`; null when unlimited.
    pub limit: Option<usize>,
    /// Groups in the aggregate (the overflow group "other" included when present).
    pub groups_total: u64,
    /// Groups left out of `queries[]` by `limit`.
    pub groups_omitted: u64,
    /// Events in the groups left out.
    pub queries_omitted: u64,
    pub queries: Vec<Query>,
    /// `--group-by` and `--where`, when not the default (fingerprint, no filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<crate::dims::ScopeJson>,
    /// Transactions and idle-in-transaction time (PostgreSQL, MySQL/MariaDB); absent when
    /// none was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions: Option<crate::txn::TransactionsJson>,
    /// Every error code over all groups with the groups it came from; absent without errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors_by_code: Vec<crate::errors::CodeJson>,
}

/// [`CaptureHealth`] plus the verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Capture {
    #[serde(flatten)]
    pub health: CaptureHealth,
    /// False when any loss counter is non-zero: the numbers undercount.
    pub complete: bool,
    pub first_ts: Option<String>,
    pub last_ts: Option<String>,
}

/// Statistics over all events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub queries: u64,
    /// Distinct groups tracked (the overflow group not counted).
    pub unique: u64,
    /// Events in the overflow group (beyond the group bound).
    pub overflow_queries: u64,
    #[serde(flatten)]
    pub stats: StatsJson,
    /// Seconds the rates are computed over (capture first to last packet, else first to last
    /// event).
    pub time_span_s: Option<f64>,
    pub qps: Option<f64>,
    /// Sum of service times / time span: average requests the servers worked on (at most the
    /// number of connections).
    pub concurrency: Option<f64>,
    /// Sum of response times / time span: average requests in flight, queued ones included.
    #[serde(default)]
    pub response_concurrency: Option<f64>,
    /// Each dimension's values with their share of the load, for dimensions (server, db, user,
    /// client, protocol) with more than one value; absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<Vec<crate::dims::DimensionShares>>,
}

/// One group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Query {
    /// 1-based position in the ranking.
    pub rank: u64,
    pub id: String,
    pub protocol: String,
    pub command: String,
    pub fingerprint: String,
    /// True for the overflow group "other".
    pub overflow: bool,
    pub count: u64,
    /// This group's share of the total response time, percent.
    pub response_time_pct: f64,
    /// This group's share of the total service time, percent (its share of the load).
    #[serde(default)]
    pub service_time_pct: f64,
    pub qps: Option<f64>,
    /// Sum of this group's service times / time span.
    pub concurrency: Option<f64>,
    /// Sum of this group's response times / time span.
    #[serde(default)]
    pub response_concurrency: Option<f64>,
    #[serde(flatten)]
    pub stats: StatsJson,
    /// The values of the `--group-by` dimensions other than the fingerprint (keys server, db,
    /// user, client, protocol, command); absent when grouping by fingerprint alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<std::collections::BTreeMap<String, String>>,
    /// Load: average active sessions, this group's service time / the time span (the same
    /// value as `concurrency`, under the name of the text profile's column).
    #[serde(default)]
    pub load: Option<f64>,
    /// `--histogram fine`: service times in log-linear rows a few percent wide between the
    /// group's min and max (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_fine: Option<Vec<crate::fine::FineRowJson>>,
}

/// The statistics shared by [`Totals`] and [`Query`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsJson {
    pub errors: u64,
    pub ok: u64,
    pub no_response: u64,
    pub incomplete: u64,
    pub no_reply_expected: u64,
    /// Response time: first request byte to last response byte, as the client saw it.
    pub latency_us: LatencyUs,
    /// Service time: the response time without queueing behind earlier requests on the same
    /// connection (from the later of the request's arrival and the previous response's end).
    #[serde(default)]
    pub service_us: LatencyUs,
    pub ttfb_us: SummaryUs,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Rows sent by the server.
    pub rows: u64,
    pub rows_affected: u64,
    /// Warnings the server reported (MySQL/MariaDB), summed.
    #[serde(default)]
    pub warnings: u64,
    /// Events with at least one warning.
    #[serde(default)]
    pub with_warnings: u64,
    /// Requests that lost bytes of their own in a capture gap (counted and timed; their text
    /// is what was seen).
    #[serde(default)]
    pub partial_requests: u64,
    pub errors_by_code: Vec<ErrorCode>,
    /// Errors not in `errors_by_code` (no code known, or beyond the per-group code bound).
    pub errors_uncoded: u64,
    pub first_seen: Option<String>,
    pub last_seen: Option<String>,
    pub databases: Dimension,
    pub users: Dimension,
    pub clients: Dimension,
    /// Response times per log10 bucket.
    pub latency_distribution: Vec<DistBucket>,
    /// Service times per log10 bucket.
    #[serde(default)]
    pub service_distribution: Vec<DistBucket>,
    pub example: Option<Example>,
    /// Executions the server flagged `SERVER_QUERY_NO_INDEX_USED` (MySQL/MariaDB); omitted
    /// when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub no_index_used: u64,
    /// Executions flagged `SERVER_QUERY_NO_GOOD_INDEX_USED`; omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub no_good_index_used: u64,
    /// The exact, mergeable latency distributions (`--mergeable` only; see `mergeable.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mergeable: Option<crate::mergeable::Mergeable>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Response time statistics in microseconds (floats, ns precision). Null when no event had a
/// latency.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    /// Events with a latency (unanswered requests have none).
    pub count: u64,
    pub sum: f64,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

/// Count, sum, min, max, mean in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SummaryUs {
    pub count: u64,
    pub sum: f64,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorCode {
    pub code: u32,
    pub state: Option<String>,
    pub count: u64,
    /// The message of the earliest event with this code.
    pub message: String,
}

/// Counts per value of a dimension: the top 16, the rest summed in `other`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dimension {
    pub values: Vec<NamedCount>,
    pub other: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamedCount {
    /// Null when the value was unknown (e.g. no database selected, or not seen at connect).
    pub name: Option<String>,
    pub count: u64,
}

/// One log10 latency bucket: `[ge_us, lt_us)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DistBucket {
    pub label: String,
    pub ge_us: f64,
    /// Null for the last, open bucket.
    pub lt_us: Option<f64>,
    pub count: u64,
}

/// The slowest event of the group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Example {
    pub ts: String,
    pub start_ns: u64,
    pub latency_us: Option<f64>,
    /// Its service time.
    #[serde(default)]
    pub service_us: Option<f64>,
    pub client: String,
    pub server: String,
    /// The client process, where known (eBPF); omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessJson>,
    pub database: Option<String>,
    pub user: Option<String>,
    pub statement_id: Option<u32>,
    /// Null when the event carried no text.
    pub text: Option<String>,
    pub text_truncated: bool,
    /// `text` with the bound values of the prepared statement's execution in place of its
    /// placeholders (EXPLAIN-ready); omitted when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_values: Option<String>,
}

/// A client process: `{"pid": 4242, "comm": "psql"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessJson {
    pub pid: u32,
    /// The command name (at most 15 bytes, as the kernel keeps it).
    pub comm: String,
}

impl ProcessJson {
    pub fn of(p: &Option<Arc<proto::Process>>) -> Option<ProcessJson> {
        p.as_deref().map(|p| ProcessJson {
            pid: p.pid,
            comm: p.comm.to_string(),
        })
    }
}

fn sat(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

fn opt_us(v: Option<u64>) -> Option<f64> {
    v.map(|n| us(n as f64))
}

fn dimension<K: Hash + Eq + Clone + Ord>(
    c: &TopCounter<K>,
    name: impl Fn(&K) -> Option<String>,
) -> Dimension {
    let (top, other) = c.top(DIM_SHOW);
    Dimension {
        values: top
            .into_iter()
            .map(|(k, n)| NamedCount {
                name: name(k),
                count: n,
            })
            .collect(),
        other,
    }
}

fn arc_name(k: &Option<Arc<str>>) -> Option<String> {
    k.as_deref().map(str::to_string)
}

/// Count, sum, min, max, mean and percentiles of a histogram, in microseconds.
fn latency_us(l: &Latency) -> LatencyUs {
    let [p50, p95, p99] = l.quantiles_ns([0.5, 0.95, 0.99]);
    LatencyUs {
        count: l.count(),
        sum: us(l.sum_ns() as f64),
        min: opt_us(l.min_ns()),
        max: opt_us(l.max_ns()),
        mean: l.mean_ns().map(us),
        p50: opt_us(p50),
        p95: opt_us(p95),
        p99: opt_us(p99),
    }
}

/// A histogram's log10 buckets.
fn distribution(l: &Latency) -> Vec<DistBucket> {
    let mut bound = 0.0;
    DECADE_LABELS
        .iter()
        .zip(l.decades())
        .enumerate()
        .map(|(i, (label, &count))| {
            let lt = (i + 1 < DECADE_LABELS.len()).then(|| 10f64.powi(i as i32 + 1));
            let b = DistBucket {
                label: (*label).to_string(),
                ge_us: bound,
                lt_us: lt,
                count,
            };
            bound = lt.unwrap_or(bound);
            b
        })
        .collect()
}

/// Builds the shared statistics block.
pub fn stats_json(s: &Stats) -> StatsJson {
    let errors_by_code: Vec<ErrorCode> = s
        .errors_by_code
        .sorted()
        .into_iter()
        .map(|e| ErrorCode {
            code: e.code,
            state: e.state.as_deref().map(str::to_string),
            count: e.count,
            message: e.message.to_string(),
        })
        .collect();
    let coded: u64 = errors_by_code.iter().map(|e| e.count).sum();
    StatsJson {
        errors: s.errors,
        ok: s.ok,
        no_response: s.no_response,
        incomplete: s.incomplete,
        no_reply_expected: s.no_reply_expected,
        latency_us: latency_us(&s.latency),
        service_us: latency_us(&s.service),
        ttfb_us: SummaryUs {
            count: s.ttfb.count,
            sum: us(s.ttfb.sum as f64),
            min: opt_us(s.ttfb.min()),
            max: opt_us(s.ttfb.max()),
            mean: s.ttfb.mean().map(us),
        },
        bytes_in: sat(s.bytes_in.sum),
        bytes_out: sat(s.bytes_out.sum),
        rows: sat(s.rows_sent.sum),
        rows_affected: sat(s.rows_affected.sum),
        warnings: sat(s.warnings.sum),
        with_warnings: s.with_warnings,
        partial_requests: s.partial,
        errors_uncoded: s.errors.saturating_sub(coded),
        errors_by_code,
        first_seen: s.first_seen_ns.map(rfc3339),
        last_seen: s.last_seen_ns.map(rfc3339),
        databases: dimension(&s.databases, arc_name),
        users: dimension(&s.users, arc_name),
        clients: dimension(&s.clients, |ip| Some(ip.to_string())),
        latency_distribution: distribution(&s.latency),
        service_distribution: distribution(&s.service),
        example: s.example.as_ref().map(|e| Example {
            ts: rfc3339(e.start_ns),
            start_ns: e.start_ns,
            latency_us: opt_us(e.latency_ns),
            service_us: opt_us(e.service_ns),
            client: e.client.to_string(),
            server: e.server.to_string(),
            process: ProcessJson::of(&e.peer),
            database: arc_name(&e.database),
            user: arc_name(&e.user),
            statement_id: e.statement_id,
            text: e.text.as_deref().map(str::to_string),
            text_truncated: e.text_truncated,
            with_values: crate::dba::with_values(e),
        }),
        no_index_used: s.no_index_used,
        no_good_index_used: s.no_good_index_used,
        mergeable: None,
    }
}

fn round3(v: f64) -> f64 {
    (v * 1e3).round() / 1e3
}

/// `part` as a percentage of `whole`, 0 when `whole` is 0.
fn pct(part: u128, whole: u128) -> f64 {
    if whole > 0 {
        round3(part as f64 * 100.0 / whole as f64)
    } else {
        0.0
    }
}

/// Builds the document (what [`render`] writes).
pub fn build(agg: &Aggregator, health: &CaptureHealth, opts: &ReportOptions) -> Report {
    let t = agg.totals();
    let span = span_ns(agg, health);
    let total_ns = t.stats.latency.sum_ns();
    let total_service_ns = t.stats.service.sum_ns();
    let ranked = ranked(agg, opts.order_by);
    let groups_total = ranked.len() as u64;
    let shown = ranked.len().min(opts.limit);
    let queries_omitted = ranked.iter().skip(shown).map(|g| g.stats.count).sum();
    let queries = ranked
        .iter()
        .take(shown)
        .enumerate()
        .map(|(i, g)| Query {
            rank: i as u64 + 1,
            id: g.id.clone(),
            protocol: g.key.protocol.name().to_string(),
            command: g.key.command.to_string(),
            fingerprint: g.fingerprint.clone(),
            overflow: g.overflow,
            count: g.stats.count,
            response_time_pct: pct(g.stats.latency.sum_ns(), total_ns),
            service_time_pct: pct(g.stats.service.sum_ns(), total_service_ns),
            qps: rate(g.stats.count, span).map(round3),
            concurrency: concurrency(g.stats.service.sum_ns(), span).map(round3),
            response_concurrency: concurrency(g.stats.latency.sum_ns(), span).map(round3),
            stats: stats_json(&g.stats),
            dimensions: crate::dims::group_json(g),
            load: concurrency(g.stats.service.sum_ns(), span).map(round3),
            service_fine: (opts.histogram == crate::Histogram::Fine)
                .then(|| crate::fine::json(&g.stats.service)),
        })
        .collect();
    Report {
        version: SCHEMA_VERSION,
        capture: Capture {
            health: health.clone(),
            complete: health.is_complete(),
            first_ts: health.first_ts_ns.map(rfc3339),
            last_ts: health.last_ts_ns.map(rfc3339),
        },
        totals: Totals {
            queries: t.stats.count,
            unique: t.unique_groups,
            overflow_queries: t.overflow_events,
            stats: stats_json(&t.stats),
            time_span_s: span.map(|s| s as f64 / 1e9),
            qps: rate(t.stats.count, span).map(round3),
            concurrency: concurrency(total_service_ns, span).map(round3),
            response_concurrency: concurrency(total_ns, span).map(round3),
            dimensions: crate::dims::shares_json(agg),
        },
        order_by: opts.order_by.name().to_string(),
        limit: (opts.limit != usize::MAX).then_some(opts.limit),
        groups_total,
        groups_omitted: groups_total - shown as u64,
        queries_omitted,
        queries,
        scope: crate::dims::scope_json(agg),
        transactions: crate::txn::json(agg),
        errors_by_code: crate::errors::by_code(&ranked),
    }
}

/// Writes the JSON report (pretty-printed, ending with a newline).
pub fn render(
    agg: &Aggregator,
    health: &CaptureHealth,
    opts: &ReportOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    let report = build(agg, health, opts);
    serde_json::to_writer_pretty(&mut *out, &report)?;
    out.write_all(b"\n")
}
