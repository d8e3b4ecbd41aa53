//! The exposition read back by a strict parser of the Prometheus text format 0.0.4, and the
//! monotonicity of every series over a sequence of renders.
//!
//! The `prometheus-parse` crate was the first choice of parser, but it splits label pairs on `,`
//! and `=` and ends the label set at the first `}`, so it silently mangles exactly the label
//! values we emit (fingerprints such as `select a, b from t where x = ?` or MongoDB shapes with
//! braces). The parser here follows the format's grammar instead and rejects anything else.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;

use aggregate::{AggConfig, Aggregator, GroupKey};
use metrics::prom::{
    AgentInfo, BuildInfo, Exporter, FINGERPRINT_MAX_CHARS, KernelStats, LATENCY_BUCKETS,
};
use proto::{DbError, Outcome, Protocol, QueryEvent};
use report::CaptureHealth;

// ---------------------------------------------------------------------------------------------
// A strict parser of the text format.

#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

impl Sample {
    /// Name and labels: what identifies the series.
    fn series(&self) -> String {
        let l: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        format!("{}{{{}}}", self.name, l.join(","))
    }
}

#[derive(Debug, Default)]
struct Exposition {
    types: HashMap<String, String>,
    helps: HashMap<String, String>,
    samples: Vec<Sample>,
}

impl Exposition {
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
            })
            .map(|s| s.value)
    }

    fn sum(&self, name: &str, filter: impl Fn(&Sample) -> bool) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name && filter(s))
            .map(|s| s.value)
            .sum()
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse::<f64>().map_err(|_| format!("bad value {s:?}")),
    }
}

/// `{...}` at the start of `s`: the labels and the rest after `}`.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s.strip_prefix('{').ok_or("no {")?;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !is_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("dangling backslash")?.1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (_, '\n') => return Err("raw newline in label value".into()),
                (_, c) => value.push(c),
            }
        };
        rest = &rest[end + 1..];
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("expected , or } after a label".into());
        }
    }
}

/// The family a sample belongs to, given the TYPEs declared so far.
fn family_of(name: &str, types: &HashMap<String, String>) -> Option<String> {
    if types.contains_key(name) {
        return Some(name.to_string());
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types.get(base).map(String::as_str) == Some("histogram")
        {
            return Some(base.to_string());
        }
    }
    None
}

/// Parses an exposition, enforcing: every line is a HELP, TYPE or sample line; each family has
/// exactly one HELP and one TYPE, before its samples; a family's samples are contiguous; no
/// series repeats; counters are finite and non-negative; histograms have cumulative buckets in
/// increasing `le` order ending with `+Inf` equal to `_count`, and a `_sum`.
fn parse(text: &str) -> Result<Exposition, String> {
    let mut x = Exposition::default();
    let mut closed: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut seen_series = HashSet::new();
    if !text.ends_with('\n') {
        return Err("exposition does not end with a newline".into());
    }
    for (n, line) in text.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let (kw, rest) = rest
                .split_once(' ')
                .ok_or_else(|| err("short comment".into()))?;
            let (name, arg) = rest.split_once(' ').ok_or_else(|| err("no text".into()))?;
            if !is_metric_name(name) {
                return Err(err("bad metric name".into()));
            }
            if closed.contains(name) || current.as_deref().is_some_and(|c| c != name) {
                // A new family starts: the previous one is complete.
                if let Some(c) = current.take() {
                    closed.insert(c);
                }
            }
            if closed.contains(name) {
                return Err(err("family declared again after its samples".into()));
            }
            current = Some(name.to_string());
            match kw {
                "HELP" => {
                    if arg.contains('\\')
                        && arg.replace("\\\\", "").replace("\\n", "").contains('\\')
                    {
                        return Err(err("bad escape in HELP".into()));
                    }
                    if x.helps.insert(name.into(), arg.into()).is_some() {
                        return Err(err("second HELP".into()));
                    }
                }
                "TYPE" => {
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&arg) {
                        return Err(err("bad type".into()));
                    }
                    if x.types.insert(name.into(), arg.into()).is_some() {
                        return Err(err("second TYPE".into()));
                    }
                }
                _ => return Err(err("comment that is neither HELP nor TYPE".into())),
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            return Err(err("blank line or bare comment".into()));
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| err("no value".into()))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(err("bad metric name".into()));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(err)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| err("no space before value".into()))?;
        let mut parts = rest.split(' ');
        let value = parse_value(parts.next().unwrap_or("")).map_err(err)?;
        if let Some(ts) = parts.next() {
            ts.parse::<i64>().map_err(|_| err("bad timestamp".into()))?;
        }
        if parts.next().is_some() {
            return Err(err("trailing fields".into()));
        }
        let family =
            family_of(name, &x.types).ok_or_else(|| err("sample before its TYPE".into()))?;
        if current.as_deref() != Some(family.as_str()) {
            return Err(err(format!(
                "sample of {family} outside its family's block"
            )));
        }
        if !x.helps.contains_key(&family) {
            return Err(err("family without HELP".into()));
        }
        let s = Sample {
            name: name.into(),
            labels,
            value,
        };
        if !seen_series.insert(s.series()) {
            return Err(err("series repeated".into()));
        }
        let kind = x.types[&family].as_str();
        if kind == "counter" || kind == "histogram" {
            if !(value.is_finite() && value >= 0.0) {
                return Err(err("counter value negative or not finite".into()));
            }
            if kind == "counter" && !name.ends_with("_total") {
                return Err(err("counter not named _total".into()));
            }
        }
        x.samples.push(s);
    }
    for f in x.types.keys().chain(x.helps.keys()) {
        if !x.types.contains_key(f) || !x.helps.contains_key(f) {
            return Err(format!("family {f} lacks HELP or TYPE"));
        }
    }
    check_histograms(&x)?;
    Ok(x)
}

fn check_histograms(x: &Exposition) -> Result<(), String> {
    for (family, _) in x.types.iter().filter(|(_, t)| *t == "histogram") {
        let bucket_name = format!("{family}_bucket");
        let mut series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
        for s in x.samples.iter().filter(|s| s.name == bucket_name) {
            let mut l = s.labels.clone();
            let le = l.remove("le").ok_or("bucket without le")?;
            series
                .entry(l)
                .or_default()
                .push((parse_value(&le)?, s.value));
        }
        for (labels, buckets) in series {
            let key = format!("{family}{labels:?}");
            for w in buckets.windows(2) {
                if w[1].0 <= w[0].0 {
                    return Err(format!("{key}: le not increasing"));
                }
                if w[1].1 < w[0].1 {
                    return Err(format!("{key}: buckets not cumulative: {buckets:?}"));
                }
            }
            let last = buckets.last().ok_or("no buckets")?;
            if last.0 != f64::INFINITY {
                return Err(format!("{key}: last bucket is not +Inf"));
            }
            let find = |suffix: &str| {
                x.samples
                    .iter()
                    .find(|s| s.name == format!("{family}{suffix}") && s.labels == labels)
                    .map(|s| s.value)
            };
            let count = find("_count").ok_or(format!("{key}: no _count"))?;
            find("_sum").ok_or(format!("{key}: no _sum"))?;
            if count != last.1 {
                return Err(format!("{key}: +Inf bucket {} != _count {count}", last.1));
            }
        }
    }
    Ok(())
}

#[test]
fn parser_rejects_what_the_format_forbids() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n";
    assert!(parse(ok).is_ok());
    for bad in [
        "a_total 1\n",                                                         // no TYPE
        "# TYPE a_total counter\na_total 1\n",                                 // no HELP
        "# HELP a_total A.\n# HELP a_total A.\n# TYPE a_total counter\n",      // HELP twice
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"a\nb\"} 1\n",  // raw newline
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"a\\tb\"} 1\n", // bad escape
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\",x=\"2\"} 1\n",
        "# HELP a_total A.\n# TYPE a_total counter\na_total 1\na_total 2\n", // series twice
        "# HELP a_total A.\n# TYPE a_total counter\na_total -1\n",
        "# HELP a_total A.\n# TYPE a_total counter\na_total x\n",
        "# HELP a_total A.\n# TYPE a_total counter\na_total 1", // no final newline
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 2\n",
        // a family's samples split by another family
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1\n# HELP b B.\n# TYPE b gauge\nb 1\na_total{x=\"2\"} 1\n",
    ] {
        assert!(parse(bad).is_err(), "accepted: {bad:?}");
    }
    let x =
        parse("# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"\\\\\\n, }={\"} 1\n")
            .unwrap();
    assert_eq!(x.samples[0].labels["x"], "q\"\\\n, }={");
}

// ---------------------------------------------------------------------------------------------
// Building aggregates.

fn addr(port: u16) -> proto::Endpoint {
    SocketAddr::from(([10, 0, 0, 1], port)).into()
}

fn event(protocol: Protocol, command: &'static str, latency_ns: u64, error: bool) -> QueryEvent {
    QueryEvent {
        protocol,
        conn: 1,
        client: addr(40000),
        server: addr(3306),
        start_ns: 1_000_000_000,
        first_response_ns: Some(1_000_000_000 + latency_ns / 2),
        end_ns: Some(1_000_000_000 + latency_ns),
        // A quarter of the response time queued behind earlier requests.
        service_start_ns: Some(1_000_000_000 + latency_ns / 4),
        user: None,
        database: None,
        command,
        text: None,
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 40,
        bytes_out: 300,
        rows_sent: 3,
        rows_affected: 0,
        warnings: if error { 0 } else { 2 },
        outcome: if error { Outcome::Error } else { Outcome::Ok },
        error: error.then(|| DbError {
            code: 1064,
            state: None,
            message: "bad".into(),
        }),
        timed: true,
        txn: None,
        index: Default::default(),
        params: None,
        peer: None,
    }
}

/// Group `i`: alternately MySQL `query` and PostgreSQL `query`, with awkward fingerprints.
fn add(agg: &mut Aggregator, i: u64, latency_ns: u64, error: bool) {
    let protocol = if i % 3 == 2 {
        Protocol::Postgres
    } else {
        Protocol::Mysql
    };
    let key = GroupKey {
        protocol,
        command: "query",
        fingerprint_hash: i,
    };
    agg.add(&event(protocol, "query", latency_ns, error), key, || {
        let fp = match i % 4 {
            0 => format!("select a, b from t{i} where x = ? and y = \"?\""),
            1 => format!("select *\nfrom t{i} -- back\\slash {{}} = , \"q\""),
            2 => format!("update t{i} set {} = ?", "c".repeat(200)),
            _ => format!("find t{i} {{\"a\": {{\"$in\": [?]}}}}"),
        };
        (fp, format!("{i:016X}"))
    });
}

fn render(ex: &mut Exporter, agg: &Aggregator, health: &CaptureHealth) -> Exposition {
    let mut out = String::new();
    let agent = AgentInfo {
        cpu_seconds: Some(1.25),
        rss_bytes: Some(1 << 20),
        virtual_bytes: Some(1 << 30),
        open_fds: Some(12),
        max_fds: Some(1024),
        start_time_unix: 1_700_000_000.5,
        threads: Some(4),
        build: BuildInfo {
            version: "0.1.0",
            revision: Some("0123456789ab"),
            rustc: Some("1.95.0"),
        },
    };
    let kernel = KernelStats {
        packets: health.frames.packets + 5,
        drops: 2,
    };
    ex.render(agg, health, kernel, &agent, 4, &mut out);
    parse(&out).unwrap_or_else(|e| panic!("{e}\n---\n{out}"))
}

// ---------------------------------------------------------------------------------------------

#[test]
fn every_family_present_with_expected_values() {
    let mut agg = Aggregator::new(AggConfig::default());
    add(&mut agg, 0, 150_000, false); // 150 us
    add(&mut agg, 0, 3_000_000_000, true); // 3 s
    add(&mut agg, 2, 50_000, false);
    let mut health = CaptureHealth::default();
    health.frames.packets = 100;
    health.frames.bytes = 9000;
    health.tcp.connections = 3;
    health.tcp.gaps = 1;
    health.tcp.gap_bytes = 20;
    health.tcp.duplicates = 4;
    health.protocol.unparsed_bytes = 5;
    health.protocol.malformed_messages = 6;
    health.protocol.responses_without_request = 7;
    health.protocol.encrypted_connections = 8;
    health.protocol.server_pushes = 9;
    health.protocol.negative_latencies = 10;
    health.frames.read_errors = 11;
    health.protocol.text_cut_by_budget = 12;
    let mut ex = Exporter::new(10);
    let x = render(&mut ex, &agg, &health);

    let families = [
        ("dbtap_queries_total", "counter"),
        ("dbtap_query_errors_total", "counter"),
        ("dbtap_query_duration_seconds", "histogram"),
        ("dbtap_query_service_seconds", "histogram"),
        ("dbtap_query_rows_sent_total", "counter"),
        ("dbtap_query_warnings_total", "counter"),
        ("dbtap_query_bytes_total", "counter"),
        ("dbtap_capture_packets_total", "counter"),
        ("dbtap_capture_bytes_total", "counter"),
        ("dbtap_capture_kernel_packets_total", "counter"),
        ("dbtap_capture_kernel_drops_total", "counter"),
        ("dbtap_tcp_connections_total", "counter"),
        ("dbtap_tcp_connections_evicted_total", "counter"),
        ("dbtap_tcp_gaps_total", "counter"),
        ("dbtap_tcp_gap_bytes_total", "counter"),
        ("dbtap_tcp_duplicates_total", "counter"),
        ("dbtap_unparsed_bytes_total", "counter"),
        ("dbtap_malformed_messages_total", "counter"),
        ("dbtap_responses_without_request_total", "counter"),
        ("dbtap_encrypted_connections_total", "counter"),
        ("dbtap_server_pushes_total", "counter"),
        ("dbtap_text_cut_by_budget_total", "counter"),
        ("dbtap_capture_non_tcp_total", "counter"),
        ("dbtap_capture_truncated_packets_total", "counter"),
        ("dbtap_capture_ip_fragments_total", "counter"),
        ("dbtap_capture_ip_datagrams_reassembled_total", "counter"),
        ("dbtap_capture_ip_datagrams_incomplete_total", "counter"),
        ("dbtap_capture_malformed_packets_total", "counter"),
        ("dbtap_capture_read_errors_total", "counter"),
        ("dbtap_tcp_segments_total", "counter"),
        ("dbtap_tcp_retransmitted_bytes_total", "counter"),
        ("dbtap_tcp_out_of_order_total", "counter"),
        ("dbtap_tcp_out_of_order_too_late_total", "counter"),
        ("dbtap_tcp_not_tracked_segments_total", "counter"),
        ("dbtap_tcp_empty_segments_not_tracked_total", "counter"),
        ("dbtap_tcp_segments_after_stop_total", "counter"),
        ("dbtap_unrecognized_connections_total", "counter"),
        ("dbtap_unrecognized_midstream_total", "counter"),
        ("dbtap_inflight_overflow_total", "counter"),
        ("dbtap_unanswered_total", "counter"),
        ("dbtap_resyncs_total", "counter"),
        ("dbtap_negative_latencies_total", "counter"),
        ("dbtap_sampling_one_in", "gauge"),
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("process_threads", "gauge"),
        ("dbtap_build_info", "gauge"),
    ];
    for (f, t) in families {
        assert_eq!(x.types.get(f).map(String::as_str), Some(t), "{f}");
    }
    assert_eq!(x.types.len(), families.len());
    assert!(x.helps["dbtap_sampling_one_in"].contains("NOT scaled"));

    let g0 = [
        ("protocol", "mysql"),
        ("command", "query"),
        ("query_id", "0000000000000000"),
        (
            "fingerprint",
            "select a, b from t0 where x = ? and y = \"?\"",
        ),
    ];
    assert_eq!(x.get("dbtap_queries_total", &g0), Some(2.0));
    assert_eq!(x.get("dbtap_query_rows_sent_total", &g0), Some(6.0));
    assert_eq!(x.get("dbtap_query_warnings_total", &g0), Some(2.0));
    let with = |extra: (&'static str, &'static str)| {
        let mut v = g0.to_vec();
        v.push(extra);
        v
    };
    // The one error (MySQL 1064) under its code; none without a code.
    let errors = |code| x.get("dbtap_query_errors_total", &with(("code", code)));
    assert_eq!(errors("1064"), Some(1.0));
    assert_eq!(errors("none"), Some(0.0));
    assert_eq!(x.get("dbtap_query_errors_total", &g0), None);
    assert_eq!(
        x.get("dbtap_query_bytes_total", &with(("direction", "in"))),
        Some(80.0)
    );
    assert_eq!(
        x.get("dbtap_query_bytes_total", &with(("direction", "out"))),
        Some(600.0)
    );
    let bucket = |le| x.get("dbtap_query_duration_seconds_bucket", &with(("le", le)));
    assert_eq!(bucket("0.0001"), Some(0.0));
    assert_eq!(bucket("0.00025"), Some(1.0));
    assert_eq!(bucket("2.5"), Some(1.0));
    assert_eq!(bucket("5"), Some(2.0));
    assert_eq!(bucket("+Inf"), Some(2.0));
    assert_eq!(
        x.get("dbtap_query_duration_seconds_sum", &g0),
        Some(3.00015)
    );
    assert_eq!(x.get("dbtap_query_duration_seconds_count", &g0), Some(2.0));
    // Every bound of LATENCY_BUCKETS is there.
    for (_, le) in LATENCY_BUCKETS {
        assert!(bucket(le).is_some(), "{le}");
    }
    // Service time: three quarters of each response time (112.5 us and 2.25 s).
    let service = |le| x.get("dbtap_query_service_seconds_bucket", &with(("le", le)));
    assert_eq!(service("0.0001"), Some(0.0));
    assert_eq!(service("0.00025"), Some(1.0));
    assert_eq!(service("1"), Some(1.0));
    assert_eq!(service("2.5"), Some(2.0));
    assert_eq!(service("+Inf"), Some(2.0));
    assert_eq!(
        x.get("dbtap_query_service_seconds_sum", &g0),
        Some(2.2501125)
    );
    assert_eq!(x.get("dbtap_query_service_seconds_count", &g0), Some(2.0));
    for (_, le) in LATENCY_BUCKETS {
        assert!(service(le).is_some(), "{le}");
    }

    // The "other" series: one per protocol seen, zero here since everything fits.
    let other = |p| {
        [
            ("protocol", p),
            ("command", "other"),
            ("query_id", "other"),
            ("fingerprint", "other"),
        ]
    };
    assert_eq!(x.get("dbtap_queries_total", &other("mysql")), Some(0.0));
    assert_eq!(x.get("dbtap_queries_total", &other("postgres")), Some(0.0));
    assert_eq!(x.get("dbtap_queries_total", &other("redis")), None);

    for (name, v) in [
        ("dbtap_capture_packets_total", 100.0),
        ("dbtap_capture_bytes_total", 9000.0),
        ("dbtap_capture_kernel_packets_total", 105.0),
        ("dbtap_capture_kernel_drops_total", 2.0),
        ("dbtap_tcp_connections_total", 3.0),
        ("dbtap_tcp_gaps_total", 1.0),
        ("dbtap_tcp_gap_bytes_total", 20.0),
        ("dbtap_tcp_duplicates_total", 4.0),
        ("dbtap_unparsed_bytes_total", 5.0),
        ("dbtap_malformed_messages_total", 6.0),
        ("dbtap_responses_without_request_total", 7.0),
        ("dbtap_encrypted_connections_total", 8.0),
        ("dbtap_server_pushes_total", 9.0),
        ("dbtap_negative_latencies_total", 10.0),
        ("dbtap_capture_read_errors_total", 11.0),
        ("dbtap_text_cut_by_budget_total", 12.0),
        ("dbtap_sampling_one_in", 4.0),
        ("process_cpu_seconds_total", 1.25),
        ("process_resident_memory_bytes", 1048576.0),
        ("process_virtual_memory_bytes", 1073741824.0),
        ("process_open_fds", 12.0),
        ("process_max_fds", 1024.0),
        ("process_start_time_seconds", 1_700_000_000.5),
        ("process_threads", 4.0),
    ] {
        assert_eq!(x.get(name, &[]), Some(v), "{name}");
    }
    assert_eq!(
        x.get(
            "dbtap_build_info",
            &[
                ("version", "0.1.0"),
                ("revision", "0123456789ab"),
                ("rustc", "1.95.0")
            ]
        ),
        Some(1.0)
    );

    // Sub-100 us latencies are resolved: group 2's one 50 us query is in le="5e-05", not in
    // le="2.5e-05".
    let g2 = |le| {
        let series = x.samples.iter().find(|s| {
            s.name == "dbtap_query_duration_seconds_bucket"
                && s.labels["query_id"] == "0000000000000002"
                && s.labels["le"] == le
        });
        series.map(|s| s.value)
    };
    assert_eq!(g2("1e-05"), Some(0.0));
    assert_eq!(g2("2.5e-05"), Some(0.0));
    assert_eq!(g2("5e-05"), Some(1.0));
    assert_eq!(LATENCY_BUCKETS[0], (10_000, "1e-05"));
}

/// Error codes: at most ERROR_CODES_TOP named, the first ones seen by count; later codes go to
/// code="other" for good, errors without a code to code="none"; the codes of a group add up to
/// its errors and no series goes down.
#[test]
fn error_codes_are_bounded_and_monotonic() {
    use metrics::codes::ERROR_CODES_TOP;
    let mut agg = Aggregator::new(AggConfig::default());
    let mut ex = Exporter::new(10);
    let health = CaptureHealth::default();
    let err = |agg: &mut Aggregator, code: u32, state: Option<&str>| {
        let mut ev = event(Protocol::Mysql, "query", 1_000, true);
        ev.error = Some(DbError {
            code,
            state: state.map(Into::into),
            message: "m".into(),
        });
        if code == 0 && state.is_none() {
            ev.error = None; // an error without any code
        }
        let key = GroupKey {
            protocol: Protocol::Mysql,
            command: "query",
            fingerprint_hash: 7,
        };
        agg.add(&ev, key, || ("select ?".into(), "7".into()));
    };
    // 5 codes first (1000 has the most errors), then 30 more once the first render named 5.
    for c in 0..5u32 {
        for _ in 0..=c {
            err(&mut agg, 1000 + c, None);
        }
    }
    err(&mut agg, 0, Some("42P01"));
    err(&mut agg, 0, None);
    let x = render(&mut ex, &agg, &health);
    let codes = |x: &Exposition| -> BTreeMap<String, f64> {
        x.samples
            .iter()
            .filter(|s| s.name == "dbtap_query_errors_total" && s.labels["query_id"] == "7")
            .map(|s| (s.labels["code"].clone(), s.value))
            .collect()
    };
    let first = codes(&x);
    assert_eq!(first["1004"], 5.0);
    assert_eq!(first["42P01"], 1.0);
    assert_eq!(first["none"], 1.0);
    assert!(!first.contains_key("other"));
    for c in 0..30u32 {
        err(&mut agg, 2000 + c, None);
        err(&mut agg, 2000 + c, None);
    }
    let x = render(&mut ex, &agg, &health);
    let second = codes(&x);
    // 6 named first, then 14 of the new ones (2000..2013: equal counts, by text), the rest other.
    assert_eq!(second.len(), ERROR_CODES_TOP + 2, "{second:?}");
    assert!(second.contains_key("2013") && !second.contains_key("2014"));
    let total: f64 = second.values().sum();
    assert_eq!(total, agg.totals().stats.errors as f64);
    // Per-group code bound (ERROR_CAP pairs) and our label bound both land in "other".
    assert!(second["other"] > 0.0);
    for (code, v) in &first {
        assert!(second[code] >= *v, "{code}");
    }
    // A new code now goes to "other", even with many errors.
    let before = second["other"];
    for _ in 0..50 {
        err(&mut agg, 3000, None);
    }
    let third = codes(&render(&mut ex, &agg, &health));
    assert_eq!(third["other"], before + 50.0);
    assert!(!third.contains_key("3000"));
}

#[test]
fn fingerprints_are_escaped_shortened_single_line() {
    let mut agg = Aggregator::new(AggConfig::default());
    for i in 0..4 {
        add(&mut agg, i, 1000, false);
    }
    let x = render(&mut Exporter::new(10), &agg, &CaptureHealth::default());
    let fps: HashSet<&str> = x
        .samples
        .iter()
        .filter(|s| s.name == "dbtap_queries_total")
        .map(|s| s.labels["fingerprint"].as_str())
        .collect();
    assert!(
        fps.contains("select * from t1 -- back\\slash {} = , \"q\""),
        "{fps:?}"
    );
    assert!(fps.contains("find t3 {\"a\": {\"$in\": [?]}}"), "{fps:?}");
    let long = fps.iter().find(|f| f.starts_with("update t2")).unwrap();
    assert_eq!(long.chars().count(), FINGERPRINT_MAX_CHARS);
    assert!(long.ends_with('…'));
    assert!(fps.iter().all(|f| !f.contains('\n')));
}

/// Renders after every step of a growing aggregate, where groups keep appearing (more than
/// `top_n`, and more than the aggregator's own bound), latencies sit just below bucket bounds
/// and groups cross the switch from exact samples to the histogram. Every series seen once must
/// stay, and never decrease; the exported set must stay within `top_n` and only grow; and each
/// family's series must add up to the aggregator's totals.
#[test]
fn every_series_is_monotonic_across_renders() {
    const TOP_N: usize = 4;
    let mut agg = Aggregator::new(AggConfig {
        max_groups: 9,
        keep_examples: false,
    });
    let mut ex = Exporter::new(TOP_N);
    let mut health = CaptureHealth::default();
    let mut prev: BTreeMap<String, f64> = BTreeMap::new();
    let mut exported_before: HashSet<String> = HashSet::new();
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut promoted_late = false;
    let mut overflowed = false;
    for step in 0..40u64 {
        // New groups arrive over time (2 per step for the first 7 steps: 14 > max_groups 9).
        let live_groups = (2 * (step + 1)).min(14);
        let events = if step == 0 { 3 } else { 10 + next() % 40 };
        for _ in 0..events {
            // Later groups get slower, so they outrank early ones on total latency.
            let g = next() % live_groups;
            let bound = LATENCY_BUCKETS[(next() % LATENCY_BUCKETS.len() as u64) as usize].0;
            let latency = match next() % 3 {
                0 => bound - next() % 300, // just below a bound: counted exactly, then bucketed
                1 => bound + next() % 300,
                _ => next() % 20_000_000_000,
            } * (1 + g / 4);
            add(&mut agg, g, latency, next() % 7 == 0);
        }
        health.frames.packets += events * 2;
        health.frames.bytes += events * 500;
        health.tcp.gaps += step % 2;

        let x = render(&mut ex, &agg, &health);
        let mut now: BTreeMap<String, f64> = BTreeMap::new();
        for s in &x.samples {
            if x.types.get(&s.name).map(String::as_str) == Some("gauge") {
                continue;
            }
            now.insert(s.series(), s.value);
        }
        for (series, v) in &prev {
            let n = now
                .get(series)
                .unwrap_or_else(|| panic!("step {step}: {series} vanished"));
            assert!(n >= v, "step {step}: {series} went down: {v} -> {n}");
        }

        // Exported groups: at most TOP_N, and the set only grows.
        let exported: HashSet<String> = x
            .samples
            .iter()
            .filter(|s| s.name == "dbtap_queries_total" && s.labels["query_id"] != "other")
            .map(|s| s.labels["query_id"].clone())
            .collect();
        assert!(exported.len() <= TOP_N);
        assert!(exported.is_superset(&exported_before), "step {step}");
        if step > 0 && exported.len() > exported_before.len() {
            promoted_late = true;
        }
        exported_before = exported;

        // Each family adds up to the totals (the overflow group is inside "other").
        let t = &agg.totals().stats;
        let all = |_: &Sample| true;
        assert_eq!(x.sum("dbtap_queries_total", all), t.count as f64);
        assert_eq!(x.sum("dbtap_query_errors_total", all), t.errors as f64);
        assert_eq!(
            x.sum("dbtap_query_rows_sent_total", all),
            t.rows_sent.sum as f64
        );
        assert_eq!(
            x.sum("dbtap_query_duration_seconds_count", all),
            t.latency.count() as f64
        );
        let inf = x.sum("dbtap_query_duration_seconds_bucket", |s| {
            s.labels["le"] == "+Inf"
        });
        assert_eq!(inf, t.latency.count() as f64);
        let sum_s = x.sum("dbtap_query_duration_seconds_sum", all);
        assert!((sum_s - t.latency.sum_ns() as f64 / 1e9).abs() < 1e-6 * sum_s.max(1.0));
        let inf = x.sum("dbtap_query_service_seconds_bucket", |s| {
            s.labels["le"] == "+Inf"
        });
        assert_eq!(inf, t.service.count() as f64);
        let sum_s = x.sum("dbtap_query_service_seconds_sum", all);
        assert!((sum_s - t.service.sum_ns() as f64 / 1e9).abs() < 1e-6 * sum_s.max(1.0));
        assert_eq!(
            x.sum("dbtap_query_bytes_total", |s| s.labels["direction"]
                == "out"),
            t.bytes_out.sum as f64
        );
        overflowed |= agg.overflow().is_some();
        prev = now;
    }
    assert!(
        overflowed,
        "the sequence must reach the aggregator's own bound"
    );
    assert!(
        promoted_late,
        "some group must enter the exported set after the first render"
    );
    assert_eq!(exported_before.len(), TOP_N);
    // Groups crossed the switch to the histogram.
    assert!(agg.groups().any(|g| !g.stats.latency.is_exact()));
    // The "other" series hold groups beyond top_n for both protocols.
    let x = render(&mut ex, &agg, &health);
    for p in ["mysql", "postgres"] {
        let o = x
            .get(
                "dbtap_queries_total",
                &[
                    ("protocol", p),
                    ("command", "other"),
                    ("query_id", "other"),
                    ("fingerprint", "other"),
                ],
            )
            .unwrap();
        assert!(o > 0.0, "{p}");
    }
}

#[test]
fn colliding_labels_stay_in_other() {
    // Two groups with the same id and the same long fingerprint prefix.
    let mut agg = Aggregator::new(AggConfig::default());
    let long = "select ".to_string() + &"x, ".repeat(100);
    for (hash, lat) in [(1u64, 5_000), (2, 9_000)] {
        let key = GroupKey {
            protocol: Protocol::Mysql,
            command: "query",
            fingerprint_hash: hash,
        };
        let fp = format!("{long}{hash}");
        agg.add(&event(Protocol::Mysql, "query", lat, false), key, || {
            (fp, "SAMEID".to_string())
        });
    }
    let x = render(&mut Exporter::new(5), &agg, &CaptureHealth::default());
    let ids: Vec<&str> = x
        .samples
        .iter()
        .filter(|s| s.name == "dbtap_queries_total")
        .map(|s| s.labels["query_id"].as_str())
        .collect();
    assert_eq!(ids, ["SAMEID", "other"]);
    assert_eq!(x.sum("dbtap_queries_total", |_| true), 2.0);
}

#[test]
fn every_ledger_counter_with_a_metric_is_exported_with_its_value() {
    let agg = Aggregator::new(AggConfig::default());
    let mut health = CaptureHealth::default();
    for (i, c) in report::COUNTERS.iter().enumerate() {
        c.add(&mut health, 1000 + i as u64);
    }
    let x = render(&mut Exporter::new(10), &agg, &health);
    let mut exported = 0;
    for (i, c) in report::COUNTERS.iter().enumerate() {
        let Some((name, help)) = c.metric else {
            continue;
        };
        exported += 1;
        assert_eq!(
            x.types.get(name).map(String::as_str),
            Some("counter"),
            "{name}"
        );
        assert_eq!(x.helps.get(name).map(String::as_str), Some(help), "{name}");
        assert_eq!(x.get(name, &[]), Some(1000.0 + i as f64), "{name}");
    }
    assert!(exported >= 25, "{exported}");
}

/// Grouped by server (as `dbtap live --listen` does): the same command on two servers is two
/// series, each labelled with its `server`; the summed "other" series says `server="other"`.
#[test]
fn group_series_carry_server_label() {
    let dims = aggregate::DimSet::parse_list("server,fingerprint").expect("dims");
    let mut agg = Aggregator::new(AggConfig::default());
    let mut add_on = |port: u16, fp: u64, n: usize| {
        for _ in 0..n {
            let mut ev = event(Protocol::Redis, "config", 1_000, false);
            ev.server = addr(port);
            let key = GroupKey {
                protocol: Protocol::Redis,
                command: "config",
                fingerprint_hash: dims.group_hash(&ev, fp),
            };
            agg.add_with_dims(&ev, key, || {
                let v = dims.values(&ev);
                (
                    format!("CONFIG {fp}"),
                    format!("{fp}-{port}"),
                    Some(Box::new(v)),
                )
            });
        }
    };
    add_on(6379, 1, 3);
    add_on(6380, 1, 4);
    add_on(6380, 2, 1);
    let mut ex = Exporter::new(2);
    let x = render(&mut ex, &agg, &CaptureHealth::default());
    let got: BTreeMap<(String, String), f64> = x
        .samples
        .iter()
        .filter(|s| s.name == "dbtap_queries_total")
        .map(|s| {
            (
                (s.labels["fingerprint"].clone(), s.labels["server"].clone()),
                s.value,
            )
        })
        .collect();
    let want: BTreeMap<(String, String), f64> = [
        (("CONFIG 1".to_string(), "10.0.0.1:6379".to_string()), 3.0),
        (("CONFIG 1".to_string(), "10.0.0.1:6380".to_string()), 4.0),
        (("other".to_string(), "other".to_string()), 1.0),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
}

/// A Unix-socket server's `server` label is its path (escaped, read back exactly); a `process`
/// label appears only on series grouped by process, one series per command name.
#[test]
fn unix_server_path_and_process_labels() {
    let sock = "/run/redis/re\"dis\\.sock";
    let add_all = |dims: aggregate::DimSet| {
        let mut agg = Aggregator::new(AggConfig::default());
        for (pid, comm) in [
            (1, Some("php-fpm")),
            (2, Some("php-fpm")),
            (3, Some("celery")),
            (4, None),
        ] {
            let mut ev = event(Protocol::Redis, "get", 1_000, false);
            ev.server = proto::Endpoint::unix(sock);
            ev.client = proto::Endpoint::unix("");
            ev.peer = comm.map(|c| {
                std::sync::Arc::new(proto::Process {
                    pid,
                    comm: c.into(),
                })
            });
            let key = GroupKey {
                protocol: Protocol::Redis,
                command: "get",
                fingerprint_hash: dims.group_hash(&ev, 1),
            };
            agg.add_with_dims(&ev, key, || {
                let v = dims.values(&ev);
                ("GET ?".to_string(), v.label(), Some(Box::new(v)))
            });
        }
        agg
    };
    let series = |agg: &Aggregator| -> BTreeMap<BTreeMap<String, String>, f64> {
        let mut ex = Exporter::new(10);
        let x = render(&mut ex, agg, &CaptureHealth::default());
        x.samples
            .iter()
            .filter(|s| s.name == "dbtap_queries_total" && s.labels["server"] != "other")
            .map(|s| {
                let mut l = s.labels.clone();
                l.retain(|k, _| matches!(k.as_str(), "server" | "process" | "client"));
                (l, s.value)
            })
            .collect()
    };
    let labels = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let by_process = series(&add_all(
        aggregate::DimSet::parse_list("server,process,fingerprint").expect("dims"),
    ));
    let want: BTreeMap<BTreeMap<String, String>, f64> = [
        (labels(&[("server", sock), ("process", "php-fpm")]), 2.0),
        (labels(&[("server", sock), ("process", "celery")]), 1.0),
        (labels(&[("server", sock), ("process", "(unknown)")]), 1.0),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_process, want);
    // Grouped by server (live's default) and client host: no process label, one series.
    let by_server = series(&add_all(
        aggregate::DimSet::parse_list("server,client,fingerprint").expect("dims"),
    ));
    let want: BTreeMap<BTreeMap<String, String>, f64> =
        [(labels(&[("server", sock), ("client", "local")]), 4.0)]
            .into_iter()
            .collect();
    assert_eq!(by_server, want);
}
