//! How faithful the replay was: requests framed and sent, what was skipped and why, how late
//! the sends ran against their schedule, wall time.

use std::collections::BTreeMap;

use aggregate::Latency;
use serde::Serialize;

/// One session's (or the whole replay's) counts.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub sent: u64,
    pub batches: u64,
    pub replies: u64,
    pub connections: u64,
    pub skipped: BTreeMap<String, u64>,
    /// How late each batch went out against its schedule.
    pub lag: Latency,
}

impl Tally {
    pub fn skip(&mut self, why: &str, n: u64) {
        if n > 0 {
            *self.skipped.entry(why.to_string()).or_default() += n;
        }
    }

    pub fn merge(&mut self, o: &Tally) {
        self.sent += o.sent;
        self.batches += o.batches;
        self.replies += o.replies;
        self.connections += o.connections;
        for (k, v) in &o.skipped {
            *self.skipped.entry(k.clone()).or_default() += v;
        }
        self.lag.merge(&o.lag);
    }
}

/// The fidelity section of the report (also its JSON).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Fidelity {
    /// Requests the capture holds (the capture side's count, as `dbtap digest` counts).
    pub requests_captured: u64,
    /// Requests framed for replay (sessions of supported protocols), before sampling/scaling.
    pub requests_framed: u64,
    /// Requests the replay should send: framed requests of the sampled sessions, times
    /// `--scale`.
    pub requests_planned: u64,
    pub requests_sent: u64,
    /// Batches sent (a pipeline of requests sent together is one batch).
    pub batches_sent: u64,
    pub replies_received: u64,
    /// Requests not sent, by reason.
    pub skipped_requests: BTreeMap<String, u64>,
    /// Captured client bytes that framed no request, by reason.
    pub skipped_bytes: BTreeMap<String, u64>,
    pub sessions_captured: u64,
    pub sessions_replayed: u64,
    pub target_connections: u64,
    pub lag_p50_ms: Option<f64>,
    pub lag_p99_ms: Option<f64>,
    pub lag_max_ms: Option<f64>,
    /// Capture span of the replayed requests (first to last request), seconds.
    pub capture_span_s: f64,
    pub wall_s: f64,
    /// The filters the replay ran with (`--read-only`, `--where`, `--since`/`--until`), in
    /// words; absent when none. `requests_captured` and `requests_framed` then count what
    /// they let through; what they left out is in `skipped_requests` (`read_only`, `where`,
    /// `time_range`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filters: Option<String>,
}

impl Fidelity {
    /// Fills in the counts of a finished replay.
    pub fn take(&mut self, t: &Tally) {
        self.requests_sent = t.sent;
        self.batches_sent = t.batches;
        self.replies_received = t.replies;
        self.target_connections = t.connections;
        for (k, v) in &t.skipped {
            *self.skipped_requests.entry(k.clone()).or_default() += v;
        }
        let ms = |v: Option<u64>| v.map(|ns| ns as f64 / 1e6);
        self.lag_p50_ms = ms(t.lag.quantile_ns(0.5));
        self.lag_p99_ms = ms(t.lag.quantile_ns(0.99));
        self.lag_max_ms = ms(t.lag.max_ns());
    }
}
