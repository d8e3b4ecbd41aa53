//! Renderers for aggregated query statistics: a pt-query-digest style text report, a stable JSON
//! document (schema in docs/json-format.md) and one NDJSON line per event.
//!
//! Every renderer is deterministic: groups are ranked by [`OrderBy`] with ties broken by id, so
//! the same input always gives the same bytes (golden files depend on it).

#![forbid(unsafe_code)]

pub mod events;
pub mod fmt;
pub mod json;
pub mod text;

use std::cmp::Ordering;

use aggregate::{Aggregator, Group};
use serde::{Deserialize, Serialize};

/// Everything a user must see to know whether numbers are complete. The binary fills it from the
/// capture, flow and protocol layers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureHealth {
    /// Capture files read (or the interface name).
    pub files: Vec<String>,
    /// Link-layer frames read.
    pub packets: u64,
    /// Bytes of those frames as captured.
    pub bytes: u64,
    /// Frames that were not TCP over IP (ignored).
    pub non_tcp: u64,
    /// Frames cut short by the capture snap length.
    pub truncated_packets: u64,
    /// IP fragments (their payload is not read).
    pub ip_fragments: u64,
    /// Frames whose headers did not parse.
    pub malformed_packets: u64,
    /// TCP segments seen on database connections.
    pub tcp_segments: u64,
    /// TCP connections tracked.
    pub connections: u64,
    /// Segments that repeated bytes already seen (retransmissions).
    pub duplicates: u64,
    /// Bytes in those duplicate segments.
    pub retransmitted_bytes: u64,
    /// Segments that arrived ahead of a hole and were reordered.
    pub out_of_order: u64,
    /// Holes in TCP streams that were never filled.
    pub gaps: u64,
    /// Bytes missing in those holes.
    pub gap_bytes: u64,
    /// Segments of connections that could not be tracked (flow table full, or dropped).
    pub not_tracked_segments: u64,
    /// Response messages that matched no request.
    pub responses_without_request: u64,
    /// Stream bytes the protocol parsers could not interpret and skipped.
    pub unparsed_bytes: u64,
    /// Connections that switched to TLS and could not be read.
    pub encrypted_connections: u64,
    /// Protocol messages that failed to parse.
    pub malformed_messages: u64,
    /// Requests dropped because too many were in flight on one connection.
    pub inflight_overflow: u64,
    /// Requests never answered before the connection or the capture ended.
    pub unanswered: u64,
    /// Times a parser lost message sync and searched for the next boundary.
    pub resyncs: u64,
    /// Not a problem: messages the server pushed outside any reply (Redis pub/sub messages,
    /// RESP3 pushes). They are not queries and are in no group.
    #[serde(default)]
    pub server_pushes: u64,
    /// Their bytes.
    #[serde(default)]
    pub server_push_bytes: u64,
    /// Timestamp of the first packet, ns since the epoch.
    pub first_ts_ns: Option<u64>,
    /// Timestamp of the last packet, ns since the epoch.
    pub last_ts_ns: Option<u64>,
    /// Live capture: packets the kernel dropped because dbtap did not read its ring in time
    /// (`None` for capture files, where drops are unknowable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_drops: Option<u64>,
    /// Live capture with `--sample N`: only one connection in N was captured and every count in
    /// the report was multiplied by N, so counts are estimates. 0 or 1: everything was captured.
    #[serde(default, skip_serializing_if = "not_sampled")]
    pub sampled_one_in: u32,
    /// Free-form warnings from any layer.
    pub warnings: Vec<String>,
}

fn not_sampled(n: &u32) -> bool {
    *n <= 1
}

impl CaptureHealth {
    /// Adds the counters of another part of the same capture (another capture thread): counts
    /// are summed, the time span widened, new file names and warnings appended.
    pub fn add(&mut self, o: &CaptureHealth) {
        // Destructured so that a new field cannot be forgotten here.
        let CaptureHealth {
            files,
            packets,
            bytes,
            non_tcp,
            truncated_packets,
            ip_fragments,
            malformed_packets,
            tcp_segments,
            connections,
            duplicates,
            retransmitted_bytes,
            out_of_order,
            gaps,
            gap_bytes,
            not_tracked_segments,
            responses_without_request,
            unparsed_bytes,
            encrypted_connections,
            malformed_messages,
            inflight_overflow,
            unanswered,
            resyncs,
            server_pushes,
            server_push_bytes,
            first_ts_ns,
            last_ts_ns,
            kernel_drops,
            sampled_one_in,
            warnings,
        } = o;
        for f in files {
            if !self.files.contains(f) {
                self.files.push(f.clone());
            }
        }
        for (a, b) in [
            (&mut self.packets, packets),
            (&mut self.bytes, bytes),
            (&mut self.non_tcp, non_tcp),
            (&mut self.truncated_packets, truncated_packets),
            (&mut self.ip_fragments, ip_fragments),
            (&mut self.malformed_packets, malformed_packets),
            (&mut self.tcp_segments, tcp_segments),
            (&mut self.connections, connections),
            (&mut self.duplicates, duplicates),
            (&mut self.retransmitted_bytes, retransmitted_bytes),
            (&mut self.out_of_order, out_of_order),
            (&mut self.gaps, gaps),
            (&mut self.gap_bytes, gap_bytes),
            (&mut self.not_tracked_segments, not_tracked_segments),
            (
                &mut self.responses_without_request,
                responses_without_request,
            ),
            (&mut self.unparsed_bytes, unparsed_bytes),
            (&mut self.encrypted_connections, encrypted_connections),
            (&mut self.malformed_messages, malformed_messages),
            (&mut self.inflight_overflow, inflight_overflow),
            (&mut self.unanswered, unanswered),
            (&mut self.resyncs, resyncs),
            (&mut self.server_pushes, server_pushes),
            (&mut self.server_push_bytes, server_push_bytes),
        ] {
            *a += *b;
        }
        self.first_ts_ns = match (self.first_ts_ns, *first_ts_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ts_ns = self.last_ts_ns.max(*last_ts_ns);
        if let Some(d) = kernel_drops {
            *self.kernel_drops.get_or_insert(0) += d;
        }
        self.sampled_one_in = self.sampled_one_in.max(*sampled_one_in);
        for w in warnings {
            if !self.warnings.contains(w) {
                self.warnings.push(w.clone());
            }
        }
    }

    /// True when nothing was lost or skipped: no truncated, fragmented, malformed or untracked
    /// packets, no TCP gaps, no unparsed or encrypted bytes, no unmatched responses, no dropped or
    /// unanswered requests, no resyncs. Retransmissions and reordering that reassembly repaired
    /// do not make a capture incomplete, nor do non-TCP frames or free-form warnings.
    pub fn is_complete(&self) -> bool {
        self.problems().is_empty()
    }

    /// Each counter that makes the numbers incomplete and is non-zero: (field name, value, what
    /// it means for the report).
    pub fn problems(&self) -> Vec<(&'static str, u64, &'static str)> {
        let all = [
            (
                "kernel_drops",
                self.kernel_drops.unwrap_or(0),
                "packets the kernel dropped before dbtap read them",
            ),
            (
                "gaps",
                self.gaps,
                "holes in TCP streams: requests or responses in them are missing",
            ),
            (
                "gap_bytes",
                self.gap_bytes,
                "bytes lost in TCP stream holes",
            ),
            (
                "truncated_packets",
                self.truncated_packets,
                "packets cut by the snap length",
            ),
            ("ip_fragments", self.ip_fragments, "IP fragments not read"),
            (
                "malformed_packets",
                self.malformed_packets,
                "packets whose headers did not parse",
            ),
            (
                "not_tracked_segments",
                self.not_tracked_segments,
                "segments of untracked connections",
            ),
            (
                "unparsed_bytes",
                self.unparsed_bytes,
                "stream bytes the parsers skipped",
            ),
            (
                "encrypted_connections",
                self.encrypted_connections,
                "TLS connections not readable",
            ),
            (
                "malformed_messages",
                self.malformed_messages,
                "protocol messages that did not parse",
            ),
            (
                "responses_without_request",
                self.responses_without_request,
                "responses whose request was not seen",
            ),
            (
                "unanswered",
                self.unanswered,
                "requests without a response (no latency)",
            ),
            (
                "inflight_overflow",
                self.inflight_overflow,
                "requests dropped: too many in flight",
            ),
            ("resyncs", self.resyncs, "times a parser lost message sync"),
        ];
        all.into_iter().filter(|p| p.1 > 0).collect()
    }

    /// Nanoseconds from the first to the last packet, when both are known.
    pub fn span_ns(&self) -> Option<u64> {
        match (self.first_ts_ns, self.last_ts_ns) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        }
    }
}

/// How groups are ranked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderBy {
    /// Total response time (sum of latencies), like pt-query-digest's default.
    #[default]
    Total,
    /// Number of calls.
    Count,
    /// 99th percentile latency.
    P99,
    /// Number of errors.
    Errors,
}

impl OrderBy {
    pub fn name(self) -> &'static str {
        match self {
            OrderBy::Total => "total",
            OrderBy::Count => "count",
            OrderBy::P99 => "p99",
            OrderBy::Errors => "errors",
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
            _ => Err(format!(
                "unknown order {s:?}: expected total, count, p99 or errors"
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
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            limit: 20,
            order_by: OrderBy::Total,
            color: false,
            width: 140,
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
        OrderBy::Total => sb.latency.sum_ns().cmp(&sa.latency.sum_ns()),
        OrderBy::Count => sb.count.cmp(&sa.count),
        OrderBy::P99 => sb
            .latency
            .quantile_ns(0.99)
            .cmp(&sa.latency.quantile_ns(0.99)),
        OrderBy::Errors => sb.errors.cmp(&sa.errors),
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

/// Sum of latencies divided by the span: the average number of requests in flight.
pub fn concurrency(sum_ns: u128, span_ns: Option<u64>) -> Option<f64> {
    span_ns.filter(|&s| s > 0).map(|s| sum_ns as f64 / s as f64)
}
