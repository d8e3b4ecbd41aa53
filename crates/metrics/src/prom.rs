//! Prometheus text exposition (format 0.0.4) of the agent's counters.
//!
//! Every series is a counter since the agent started (except the few gauges named as such), so
//! `rate()` and `increase()` work on all of them. The number of per-group series is bounded by
//! [`Exporter::new`]'s `top_n` without ever letting a counter go down; see [`Exporter`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use aggregate::{Aggregator, GroupKey, Latency, Stats};
use report::CaptureHealth;

use crate::codes::CodeSet;

/// Upper bounds of the latency histogram buckets: (nanoseconds, the `le` label). The `+Inf`
/// bucket follows them. From 10 µs (a Redis GET on a local network takes tens of µs) to 10 s,
/// 1-2.5-5 per decade: 19 buckets.
pub const LATENCY_BUCKETS: [(u64, &str); 19] = [
    (10_000, "1e-05"),
    (25_000, "2.5e-05"),
    (50_000, "5e-05"),
    (100_000, "0.0001"),
    (250_000, "0.00025"),
    (500_000, "0.0005"),
    (1_000_000, "0.001"),
    (2_500_000, "0.0025"),
    (5_000_000, "0.005"),
    (10_000_000, "0.01"),
    (25_000_000, "0.025"),
    (50_000_000, "0.05"),
    (100_000_000, "0.1"),
    (250_000_000, "0.25"),
    (500_000_000, "0.5"),
    (1_000_000_000, "1"),
    (2_500_000_000, "2.5"),
    (5_000_000_000, "5"),
    (10_000_000_000, "10"),
];

/// Longest fingerprint label, in characters (longer ones end with `…`).
pub const FINGERPRINT_MAX_CHARS: usize = 120;

/// The label values of the series that sums every group not exported on its own.
pub const OTHER: &str = "other";

pub use crate::process::{AgentInfo, BuildInfo};

/// `sysconf(_SC_CLK_TCK)`: the unit of the CPU times in `/proc/<pid>/stat`.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf takes an integer name, touches no memory of ours and returns -1 on error.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

#[cfg(not(unix))]
pub(crate) fn clock_ticks_per_second() -> f64 {
    100.0
}

/// Packet counts the kernel keeps for the capture socket (lost before dbtap saw them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Packets the kernel handed to (or queued for) the capture.
    pub packets: u64,
    /// Packets the kernel dropped because the capture did not keep up.
    pub drops: u64,
}

/// What one series of the per-group families counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Counters {
    queries: u64,
    /// Errors by `code` label ([`crate::codes`]).
    errors: BTreeMap<String, u64>,
    rows_sent: u128,
    warnings: u128,
    bytes_in: u128,
    bytes_out: u128,
    /// Response times.
    latency: Hist,
    /// Service times.
    service: Hist,
}

/// One histogram series: count, sum and cumulative buckets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Hist {
    count: u64,
    sum_ns: u128,
    /// Cumulative: samples at or below each bound of [`LATENCY_BUCKETS`].
    le: [u64; LATENCY_BUCKETS.len()],
}

impl Hist {
    fn of(l: &Latency) -> Hist {
        let mut le = [0; LATENCY_BUCKETS.len()];
        for (c, (ns, _)) in le.iter_mut().zip(LATENCY_BUCKETS) {
            *c = l.count_le(ns);
        }
        Hist {
            count: l.count(),
            sum_ns: l.sum_ns(),
            le,
        }
    }

    fn add(&mut self, o: &Hist) {
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        for (a, b) in self.le.iter_mut().zip(o.le) {
            *a += b;
        }
    }
}

impl Counters {
    fn of(s: &Stats, codes: &CodeSet) -> Counters {
        Counters {
            queries: s.count,
            errors: codes.split(s),
            rows_sent: s.rows_sent.sum,
            warnings: s.warnings.sum,
            bytes_in: s.bytes_in.sum,
            bytes_out: s.bytes_out.sum,
            latency: Hist::of(&s.latency),
            service: Hist::of(&s.service),
        }
    }

    fn add(&mut self, o: &Counters) {
        self.queries += o.queries;
        for (code, n) in &o.errors {
            *self.errors.entry(code.clone()).or_default() += n;
        }
        self.rows_sent += o.rows_sent;
        self.warnings += o.warnings;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.latency.add(&o.latency);
        self.service.add(&o.service);
    }
}

/// A group exported as its own series.
#[derive(Debug)]
struct Exported {
    key: GroupKey,
    /// `protocol="…",command="…",query_id="…",fingerprint="…"`, escaped.
    labels: String,
}

/// Renders the exposition, keeping the per-group series bounded and every counter monotonic.
///
/// Groups are exported individually up to `top_n`, and the exported set only grows: at each
/// render, free places go to the not-yet-exported groups with the largest total service time (ties:
/// more events, then id). Every other group, and the aggregator's own overflow group, is summed
/// into one series per protocol with `command`, `query_id` and `fingerprint` all `"other"`. (The
/// overflow group holds events of every protocol past the aggregator's group bound; it is filed
/// under the protocol of its first event.)
///
/// Free places are filled before anything is summed into "other", so a group is counted in
/// "other" only once every place is taken, and then it stays there for good: a group never moves
/// between series. With the aggregator's counters only growing (and
/// [`Latency::count_le`](aggregate::Latency::count_le) never decreasing as samples come), no
/// series ever goes down, nothing is counted twice, and the series of a family add up to the
/// aggregator's totals.
///
/// The aggregator passed to successive [`render`](Exporter::render) calls must be the same
/// since-start aggregate (its counters only grow) for the series to be counters.
#[derive(Debug)]
pub struct Exporter {
    top_n: usize,
    exported: Vec<Exported>,
    index: HashMap<GroupKey, usize>,
    label_sets: HashSet<String>,
    codes: CodeSet,
}

impl Exporter {
    /// An exporter that exports at most `top_n` groups as their own series.
    pub fn new(top_n: usize) -> Exporter {
        Exporter {
            top_n,
            exported: Vec::new(),
            index: HashMap::new(),
            label_sets: HashSet::new(),
            codes: CodeSet::new(crate::codes::ERROR_CODES_TOP),
        }
    }

    /// Groups exported as their own series so far.
    pub fn exported(&self) -> usize {
        self.exported.len()
    }

    /// Appends the whole exposition to `out`. `total` is the since-start aggregate,
    /// `sample_one_in` the connection sampling rate (1: every connection).
    pub fn render(
        &mut self,
        total: &Aggregator,
        health: &CaptureHealth,
        kernel: KernelStats,
        agent: &AgentInfo,
        sample_one_in: u32,
        out: &mut String,
    ) {
        self.promote(total);
        self.codes.promote(total);

        // Per-group series, then one "other" series per protocol seen.
        let mut rows: Vec<(String, Counters)> = Vec::with_capacity(self.exported.len() + 4);
        let mut other: BTreeMap<&'static str, Counters> = BTreeMap::new();
        for g in total.groups() {
            let o = other.entry(g.key.protocol.name()).or_default();
            if !self.index.contains_key(&g.key) {
                o.add(&Counters::of(&g.stats, &self.codes));
            }
        }
        for e in &self.exported {
            let now = total.group(&e.key).map_or_else(
                || Counters::of(&Stats::default(), &self.codes),
                |g| Counters::of(&g.stats, &self.codes),
            );
            rows.push((e.labels.clone(), now));
        }
        let by_server = crate::dims::by_server(total);
        for (protocol, c) in other {
            let mut labels = group_labels(protocol, OTHER, OTHER, OTHER);
            if by_server {
                labels.push_str(",server=\"other\"");
            }
            rows.push((labels, c));
        }

        write_group_families(&rows, out);
        write_health(health, kernel, out);
        family(
            out,
            "dbtap_sampling_one_in",
            "gauge",
            "Connection sampling: 1 when every connection is captured; N when one connection in N \
             is. The counters here are NOT scaled by it: they count what the sampled connections \
             did, so rate() stays an honest measured rate (multiply by this gauge to estimate the \
             whole; the JSON digest does).",
        );
        sample(out, "dbtap_sampling_one_in", "", sample_one_in);
        agent.render(out);
    }

    /// Fills free places with the not-yet-exported groups of largest total service time.
    fn promote(&mut self, total: &Aggregator) {
        if self.exported.len() >= self.top_n {
            return;
        }
        let mut candidates: Vec<&aggregate::Group> = total
            .groups()
            .filter(|g| !g.overflow && !self.index.contains_key(&g.key))
            .collect();
        if candidates.is_empty() {
            return;
        }
        candidates.sort_by(|a, b| {
            b.stats
                .service
                .sum_ns()
                .cmp(&a.stats.service.sum_ns())
                .then_with(|| b.stats.count.cmp(&a.stats.count))
                .then_with(|| a.id.cmp(&b.id))
                .then_with(|| a.key.cmp(&b.key))
        });
        for g in candidates {
            if self.exported.len() >= self.top_n {
                break;
            }
            let protocol = g.key.protocol.name();
            let mut labels = group_labels(
                protocol,
                g.key.command,
                &g.id,
                &fingerprint_label(&g.fingerprint),
            );
            crate::dims::push_dim_labels(g, &mut labels);
            // Two groups whose labels coincide (the same id, and fingerprints alike in their first
            // 120 characters) cannot both be series: the later one stays in "other" for good.
            if !self.label_sets.insert(labels.clone()) {
                continue;
            }
            self.index.insert(g.key, self.exported.len());
            self.exported.push(Exported { key: g.key, labels });
        }
    }
}

/// The fingerprint as a label: control characters and runs of white space become one space, and
/// past [`FINGERPRINT_MAX_CHARS`] characters it is cut and ends with `…`.
pub fn fingerprint_label(fp: &str) -> String {
    let mut s = String::with_capacity(fp.len().min(FINGERPRINT_MAX_CHARS * 4));
    let mut chars = 0;
    let mut space = false;
    for c in fp.trim().chars() {
        if c.is_whitespace() || c.is_control() {
            space = true;
            continue;
        }
        if space {
            s.push(' ');
            chars += 1;
            space = false;
        }
        s.push(c);
        chars += 1;
        if chars > FINGERPRINT_MAX_CHARS {
            break;
        }
    }
    if chars > FINGERPRINT_MAX_CHARS {
        let cut = s
            .char_indices()
            .nth(FINGERPRINT_MAX_CHARS - 1)
            .map_or(s.len(), |(i, _)| i);
        s.truncate(cut);
        s.truncate(s.trim_end().len());
        s.push('…');
    }
    s
}

/// Escapes a label value for the text format: backslash, double quote and line feed.
pub fn escape_label_value(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn group_labels(protocol: &str, command: &str, id: &str, fingerprint: &str) -> String {
    let mut s = String::with_capacity(64 + fingerprint.len());
    for (i, (k, v)) in [
        ("protocol", protocol),
        ("command", command),
        ("query_id", id),
        ("fingerprint", fingerprint),
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            s.push(',');
        }
        s.push_str(k);
        s.push_str("=\"");
        escape_label_value(v, &mut s);
        s.push('"');
    }
    s
}

/// `# HELP` and `# TYPE` lines. HELP texts here are constants without backslashes or newlines.
pub(crate) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    debug_assert!(!help.contains(['\\', '\n']));
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One sample line; `labels` is the escaped inside of the braces, or empty.
pub(crate) fn sample(out: &mut String, name: &str, labels: &str, v: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {v}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

fn seconds(ns: u128) -> f64 {
    ns as f64 / 1e9
}

const GROUP_NOTE: &str = "Series with query_id=\"other\" sum the groups not exported on their \
                          own (and groups past the aggregation bound).";

fn write_group_families(rows: &[(String, Counters)], out: &mut String) {
    let counter = |out: &mut String, name: &str, help: &str, f: &dyn Fn(&Counters) -> u128| {
        family(out, name, "counter", &format!("{help} {GROUP_NOTE}"));
        for (labels, c) in rows {
            sample(out, name, labels, f(c));
        }
    };
    counter(
        out,
        "dbtap_queries_total",
        "Queries seen, by query group.",
        &|c| c.queries.into(),
    );
    let name = "dbtap_query_errors_total";
    family(
        out,
        name,
        "counter",
        &format!(
            "Queries that ended in an error, by query group and error code: the protocol's \
             number (MySQL 1064) or else its state (SQLSTATE 42P01, Redis WRONGTYPE); code=\"none\" \
             for errors without one, code=\"other\" for codes beyond the {} named. {GROUP_NOTE}",
            crate::codes::ERROR_CODES_TOP
        ),
    );
    for (labels, c) in rows {
        for (code, n) in &c.errors {
            sample(out, name, &format!("{labels},code=\"{code}\""), n);
        }
    }

    histogram(
        out,
        "dbtap_query_duration_seconds",
        "Response time (request start to last response byte, as the client saw it) of answered \
         queries, by query group.",
        rows,
        |c| &c.latency,
    );
    histogram(
        out,
        "dbtap_query_service_seconds",
        "Service time of answered queries, by query group: the response time without queueing \
         behind earlier requests on the same connection (from the later of the request's first \
         byte and the previous response's last byte, to its own last response byte). Its sum \
         over a connection never exceeds the time the connection was busy.",
        rows,
        |c| &c.service,
    );

    counter(
        out,
        "dbtap_query_rows_sent_total",
        "Rows the server sent in results, by query group.",
        &|c| c.rows_sent,
    );
    counter(
        out,
        "dbtap_query_warnings_total",
        "Warnings the server reported (MySQL/MariaDB), by query group.",
        &|c| c.warnings,
    );

    let name = "dbtap_query_bytes_total";
    family(
        out,
        name,
        "counter",
        &format!(
            "Protocol bytes of queries, by query group: direction=\"in\" from client to server \
             (requests), \"out\" from server to client (responses). {GROUP_NOTE}"
        ),
    );
    for (labels, c) in rows {
        sample(out, name, &format!("{labels},direction=\"in\""), c.bytes_in);
        sample(
            out,
            name,
            &format!("{labels},direction=\"out\""),
            c.bytes_out,
        );
    }
}

/// One histogram family over every row.
fn histogram(
    out: &mut String,
    name: &str,
    help: &str,
    rows: &[(String, Counters)],
    hist: impl Fn(&Counters) -> &Hist,
) {
    family(
        out,
        name,
        "histogram",
        &format!(
            "{help} Past 64 samples a group keeps a histogram of buckets at most 0.78% wide, and \
             a bucket then also counts the samples sharing the histogram bucket of its le (at \
             most 0.78% above le). {GROUP_NOTE}"
        ),
    );
    let (bucket, sum, count) = (
        format!("{name}_bucket"),
        format!("{name}_sum"),
        format!("{name}_count"),
    );
    let mut l = String::new();
    for (labels, c) in rows {
        let h = hist(c);
        for (n, (_, le)) in h.le.iter().zip(LATENCY_BUCKETS) {
            l.clear();
            let _ = write!(l, "{labels},le=\"{le}\"");
            sample(out, &bucket, &l, n);
        }
        l.clear();
        let _ = write!(l, "{labels},le=\"+Inf\"");
        sample(out, &bucket, &l, h.count);
        sample(out, &sum, labels, seconds(h.sum_ns));
        sample(out, &count, labels, h.count);
    }
}

/// The kernel's counters of the capture socket, then every counter of the health ledger that
/// names a metric ([`report::COUNTERS`]), unscaled.
fn write_health(h: &CaptureHealth, k: KernelStats, out: &mut String) {
    let kernel = [
        (
            "dbtap_capture_kernel_packets_total",
            "Packets the kernel counted for the capture socket.",
            k.packets,
        ),
        (
            "dbtap_capture_kernel_drops_total",
            "Packets the kernel dropped before dbtap read them (the capture did not keep up).",
            k.drops,
        ),
    ];
    let ledger = report::COUNTERS.iter().filter_map(|c| {
        let (name, help) = c.metric?;
        // A section the run does not have (socket streams of a packet-only run) is not exported.
        let v = match c.section {
            report::Section::Stream => c.get(h)?,
            _ => c.get(h).unwrap_or(0),
        };
        Some((name, help, v))
    });
    for (name, help, v) in kernel.into_iter().chain(ledger) {
        family(out, name, "counter", help);
        sample(out, name, "", v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_escaping() {
        let mut s = String::new();
        escape_label_value("a\\b\"c\nd", &mut s);
        assert_eq!(s, r#"a\\b\"c\nd"#);
    }

    #[test]
    fn fingerprint_one_line_and_short() {
        assert_eq!(
            fingerprint_label("  select *\n\tfrom  t\r\nwhere a = ? "),
            "select * from t where a = ?"
        );
        let long = "x".repeat(300);
        let l = fingerprint_label(&long);
        assert_eq!(l.chars().count(), FINGERPRINT_MAX_CHARS);
        assert!(l.ends_with('…'));
        let exact = "é".repeat(FINGERPRINT_MAX_CHARS);
        assert_eq!(fingerprint_label(&exact), exact);
        let over = "é".repeat(FINGERPRINT_MAX_CHARS + 1);
        assert_eq!(
            fingerprint_label(&over).chars().count(),
            FINGERPRINT_MAX_CHARS
        );
    }
}
