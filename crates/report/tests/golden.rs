//! Golden-file tests of the text, JSON and NDJSON renderers. Re-bless with `BLESS=1 cargo test`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use aggregate::{AggConfig, Aggregator, GroupKey};
use proto::{DbError, Outcome, Protocol, QueryEvent};
use report::{
    CaptureHealth, FrameHealth, OrderBy, ProtocolHealth, ReportOptions, TcpHealth, events, json,
    text,
};

const T0: u64 = 1_704_067_200_000_000_000; // 2024-01-01T00:00:00Z

fn addr(ip: [u8; 4], port: u16) -> proto::Endpoint {
    SocketAddr::from((ip, port)).into()
}

/// xorshift64*: deterministic input without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Spec {
    hash: u64,
    command: &'static str,
    fingerprint: &'static str,
    id: &'static str,
    text: &'static str,
}

const SPECS: [Spec; 5] = [
    Spec {
        hash: 1,
        command: "query",
        fingerprint: "select * from sbtest? where id = ?",
        id: "D356635DF7E95120",
        text: "SELECT * FROM sbtest1 WHERE id = 191",
    },
    Spec {
        hash: 2,
        command: "query",
        fingerprint: "update sbtest? set k=k+? where id=?",
        id: "B2249CB854EE3C2A",
        text: "UPDATE sbtest2 SET k=k+1 WHERE id=249",
    },
    Spec {
        hash: 3,
        command: "execute",
        fingerprint: "select c from sbtest? where id between ? and ?",
        id: "A729E7889F57828D",
        text: "SELECT c FROM sbtest3 WHERE id BETWEEN ? AND ?",
    },
    Spec {
        hash: 4,
        command: "query",
        fingerprint: "select * from t where a = ? and b in(?+) and c like ? and d > ? order by e limit ?",
        id: "0C3A1F00D00DFEED",
        text: "SELECT * FROM t WHERE a = 'x\u{1b}[31m' AND b IN (1,2,3) AND c LIKE '%y%' AND d > 5 ORDER BY e LIMIT 10",
    },
    Spec {
        hash: 5,
        command: "ping",
        fingerprint: "ping",
        id: "PING",
        text: "",
    },
];

fn events() -> Vec<(usize, QueryEvent)> {
    let mut rng = Rng(42);
    let mut out = Vec::new();
    for i in 0..400u64 {
        let which = match rng.below(100) {
            0..=54 => 0,
            55..=79 => 1,
            80..=94 => 2,
            95..=97 => 3,
            _ => 4,
        };
        let spec = &SPECS[which];
        let start = T0 + i * 50_000_000 + rng.below(1_000_000);
        // Latency spread over decades, per group.
        let base = [80_000u64, 900_000, 15_000_000, 250_000_000, 20_000][which];
        let latency = base / 2 + rng.below(base * 3);
        let host = rng.below(3) as u8;
        let mut ev = QueryEvent {
            protocol: Protocol::Mysql,
            conn: u64::from(host) + 1,
            client: addr([10, 0, 0, 10 + host], 40_000 + u16::from(host)),
            server: addr([10, 0, 0, 1], 3306),
            start_ns: start,
            first_response_ns: Some(start + latency * 3 / 4),
            end_ns: Some(start + latency),
            // Group 3 queues behind earlier requests for two thirds of its response time.
            service_start_ns: Some(if which == 3 {
                start + latency * 2 / 3
            } else {
                start
            }),
            user: Some(Arc::from(if host == 2 { "batch" } else { "app" })),
            database: Some(Arc::from(if host == 1 { "shop_eu" } else { "shop" })),
            command: spec.command,
            text: (!spec.text.is_empty()).then(|| Arc::from(spec.text)),
            text_truncated: false,
            text_partial: false,
            statement_id: (spec.command == "execute").then_some(7),
            bytes_in: 20 + spec.text.len() as u64,
            bytes_out: if which == 0 { 300 + rng.below(200) } else { 11 },
            rows_sent: if which == 0 || which == 2 {
                1 + rng.below(10)
            } else {
                0
            },
            rows_affected: if which == 1 { 1 } else { 0 },
            // Some updates warn (a truncated value, as MySQL says).
            warnings: if which == 1 && i % 7 == 0 { 1 } else { 0 },
            outcome: Outcome::Ok,
            error: None,
            timed: true,
            txn: None,
            index: Default::default(),
            params: None,
            peer: None,
        };
        if which == 1 && rng.below(10) == 0 {
            ev.outcome = Outcome::Error;
            ev.error = Some(DbError {
                code: 1213,
                state: Some("40001".into()),
                message: "Deadlock found when trying to get lock; try restarting transaction"
                    .into(),
            });
            ev.rows_affected = 0;
        }
        if which == 3 && i % 2 == 0 {
            ev.outcome = Outcome::Error;
            ev.error = Some(DbError {
                code: 1146,
                state: Some("42S02".into()),
                message: "Table 'shop.t' doesn't exist".into(),
            });
        }
        if i == 399 {
            ev.outcome = Outcome::NoResponse;
            ev.first_response_ns = None;
            ev.end_ns = None;
            ev.service_start_ns = None;
            ev.bytes_out = 0;
            ev.rows_sent = 0;
        }
        out.push((which, ev));
    }
    out
}

fn aggregate(max_groups: usize) -> Aggregator {
    let mut agg = Aggregator::new(AggConfig {
        max_groups,
        keep_examples: true,
    });
    for (which, ev) in events() {
        let s = &SPECS[which];
        let key = GroupKey {
            protocol: ev.protocol,
            command: s.command,
            fingerprint_hash: s.hash,
        };
        agg.add(&ev, key, || (s.fingerprint.to_string(), s.id.to_string()));
    }
    agg
}

fn complete_health() -> CaptureHealth {
    CaptureHealth {
        files: vec!["sysbench.pcap".into()],
        frames: FrameHealth {
            packets: 1_650,
            bytes: 412_345,
            non_tcp: 4,
            ..FrameHealth::default()
        },
        tcp: TcpHealth {
            tcp_segments: 1_640,
            connections: 3,
            duplicates: 2,
            retransmitted_bytes: 180,
            out_of_order: 1,
            ..TcpHealth::default()
        },
        first_ts_ns: Some(T0 - 5_000_000),
        last_ts_ns: Some(T0 + 20_000_000_000),
        ..CaptureHealth::default()
    }
}

fn lossy_health() -> CaptureHealth {
    let mut h = complete_health();
    h.tcp.gaps = 3;
    h.tcp.gap_bytes = 4_410;
    h.protocol = ProtocolHealth {
        unparsed_bytes: 1_200,
        responses_without_request: 2,
        unanswered: 1,
        encrypted_connections: 1,
        ..ProtocolHealth::default()
    };
    h.warnings = vec!["interface dropped 12 packets".into()];
    h
}

fn golden(name: &str, actual: &str) {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "golden", name]
        .iter()
        .collect();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "read {}: {e} (run with BLESS=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        for (i, (a, b)) in expected.lines().zip(actual.lines()).enumerate() {
            if a != b {
                panic!(
                    "{name} differs at line {}:\nexpected: {a}\nactual:   {b}\n(BLESS=1 to accept)",
                    i + 1
                );
            }
        }
        panic!(
            "{name} differs in length: {} vs {} lines (BLESS=1 to accept)",
            expected.lines().count(),
            actual.lines().count()
        );
    }
}

fn render_text(agg: &Aggregator, h: &CaptureHealth, o: &ReportOptions) -> String {
    let mut buf = Vec::new();
    text::render(agg, h, o, &mut buf).unwrap_or_else(|e| panic!("render: {e}"));
    String::from_utf8(buf).unwrap_or_else(|e| panic!("utf8: {e}"))
}

fn render_json(agg: &Aggregator, h: &CaptureHealth, o: &ReportOptions) -> String {
    let mut buf = Vec::new();
    json::render(agg, h, o, &mut buf).unwrap_or_else(|e| panic!("render: {e}"));
    String::from_utf8(buf).unwrap_or_else(|e| panic!("utf8: {e}"))
}

#[test]
fn text_complete() {
    let agg = aggregate(100);
    golden(
        "complete.txt",
        &render_text(&agg, &complete_health(), &ReportOptions::default()),
    );
}

#[test]
fn text_lossy_overflow_limited() {
    let agg = aggregate(3);
    let opts = ReportOptions {
        limit: 2,
        order_by: OrderBy::Count,
        color: false,
        width: 100,
        ..ReportOptions::default()
    };
    golden("lossy.txt", &render_text(&agg, &lossy_health(), &opts));
}

#[test]
fn json_complete() {
    let agg = aggregate(100);
    golden(
        "complete.json",
        &render_json(&agg, &complete_health(), &ReportOptions::default()),
    );
}

#[test]
fn json_lossy_overflow_limited() {
    let agg = aggregate(3);
    let opts = ReportOptions {
        limit: 2,
        order_by: OrderBy::Count,
        color: false,
        width: 100,
        ..ReportOptions::default()
    };
    golden("lossy.json", &render_json(&agg, &lossy_health(), &opts));
}

#[test]
fn ndjson_events() {
    let mut buf = Vec::new();
    for (which, ev) in events().into_iter().filter(|(w, _)| *w >= 2).take(6) {
        let s = &SPECS[which];
        events::write_ndjson(&ev, s.fingerprint, s.id, &mut buf).unwrap_or_else(|e| panic!("{e}"));
    }
    let (which, mut last) = events().pop().unwrap_or_else(|| panic!("no events"));
    last.text = None;
    let s = &SPECS[which];
    events::write_ndjson(&last, s.fingerprint, s.id, &mut buf).unwrap_or_else(|e| panic!("{e}"));
    let s = String::from_utf8(buf).unwrap_or_else(|e| panic!("{e}"));
    for line in s.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for k in [
            "ts",
            "start_ns",
            "protocol",
            "command",
            "id",
            "fingerprint",
            "client",
            "server",
            "outcome",
            "latency_us",
            "service_us",
        ] {
            assert!(v.get(k).is_some(), "{k} missing in {line}");
        }
        // Both times or neither (unanswered); service never above response.
        match (v["latency_us"].as_f64(), v["service_us"].as_f64()) {
            (Some(l), Some(svc)) => assert!(svc <= l, "{line}"),
            (None, None) => {}
            other => panic!("{other:?} in {line}"),
        }
    }
    golden("events.ndjson", &s);
}

#[test]
fn ndjson_count_only_event_has_no_times_and_says_so() {
    let (which, mut ev) = events()
        .into_iter()
        .find(|(_, e)| e.end_ns.is_some() && e.first_response_ns.is_some())
        .unwrap_or_else(|| panic!("no answered event"));
    let s = &SPECS[which];
    let line = |ev: &QueryEvent| {
        let mut buf = Vec::new();
        events::write_ndjson(ev, s.fingerprint, s.id, &mut buf).unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_slice::<serde_json::Value>(&buf).unwrap_or_else(|e| panic!("{e}"))
    };
    let timed = line(&ev);
    assert!(timed.get("timed").is_none(), "{timed}");
    assert!(
        timed["latency_us"].is_f64() && timed["ttfb_us"].is_f64(),
        "{timed}"
    );
    ev.timed = false;
    let folded = line(&ev);
    assert_eq!(folded["timed"], serde_json::Value::Bool(false), "{folded}");
    assert!(
        folded["latency_us"].is_null() && folded["ttfb_us"].is_null(),
        "{folded}"
    );
    assert_eq!(folded["outcome"], timed["outcome"]);
    assert_eq!(folded["bytes_out"], timed["bytes_out"]);
}

#[test]
fn json_round_trips_and_has_the_promised_fields() {
    let agg = aggregate(3);
    let opts = ReportOptions {
        limit: 2,
        order_by: OrderBy::Total,
        color: false,
        width: 0,
        ..ReportOptions::default()
    };
    let s = render_json(&agg, &lossy_health(), &opts);
    let back: json::Report = serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, json::build(&agg, &lossy_health(), &opts));
    assert_eq!(back.version, 1);
    assert!(!back.capture.complete);
    assert_eq!(back.queries.len(), 2);
    assert_eq!(back.limit, Some(2));
    assert_eq!(back.groups_total, 4);
    assert_eq!(back.groups_omitted, 2);
    let shown: u64 = back.queries.iter().map(|q| q.count).sum();
    assert_eq!(shown + back.queries_omitted, back.totals.queries);

    let v: serde_json::Value = serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["totals"]["queries"], 400);
    assert!(v["totals"]["errors"].as_u64().is_some());
    let q = &v["queries"][0];
    for k in [
        "id",
        "protocol",
        "command",
        "fingerprint",
        "count",
        "errors",
        "bytes_in",
        "bytes_out",
        "rows",
        "rows_affected",
        "warnings",
        "with_warnings",
        "errors_by_code",
        "first_seen",
        "last_seen",
        "databases",
        "users",
        "clients",
        "example",
    ] {
        assert!(q.get(k).is_some(), "queries[0].{k} missing");
    }
    for k in ["sum", "min", "max", "mean", "p50", "p95", "p99"] {
        assert!(
            q["latency_us"][k].as_f64().is_some(),
            "latency_us.{k} missing"
        );
        assert!(
            q["service_us"][k].as_f64().is_some(),
            "service_us.{k} missing"
        );
    }
    for k in [
        "service_time_pct",
        "response_time_pct",
        "concurrency",
        "response_concurrency",
    ] {
        assert!(q[k].as_f64().is_some(), "queries[0].{k} missing");
    }
    // Service time never exceeds response time; concurrency is of service time.
    for q in &back.queries {
        assert!(q.stats.service_us.sum <= q.stats.latency_us.sum, "{}", q.id);
        assert!(q.concurrency <= q.response_concurrency, "{}", q.id);
    }
    assert!(back.totals.concurrency < back.totals.response_concurrency);
    assert_eq!(q["protocol"], "mysql");
    for k in ["packets", "gaps", "unanswered", "files", "warnings"] {
        assert!(v["capture"].get(k).is_some(), "capture.{k} missing");
    }
}

#[test]
fn ranking_orders() {
    let agg = aggregate(100);
    for order in [
        OrderBy::Total,
        OrderBy::Count,
        OrderBy::P99,
        OrderBy::Errors,
        OrderBy::Response,
    ] {
        let r = report::ranked(&agg, order);
        assert_eq!(r.len(), 5);
        for w in r.windows(2) {
            let (a, b) = (&w[0].stats, &w[1].stats);
            let ok = match order {
                OrderBy::Total => a.service.sum_ns() >= b.service.sum_ns(),
                OrderBy::Count => a.count >= b.count,
                OrderBy::P99 => a.service.quantile_ns(0.99) >= b.service.quantile_ns(0.99),
                OrderBy::Errors => a.errors >= b.errors,
                OrderBy::Response => a.latency.sum_ns() >= b.latency.sum_ns(),
            };
            assert!(ok, "{order:?} out of order");
        }
    }
}

#[test]
fn color_and_empty_inputs_render() {
    let agg = Aggregator::new(AggConfig::default());
    let opts = ReportOptions {
        color: true,
        ..ReportOptions::default()
    };
    let t = render_text(&agg, &CaptureHealth::default(), &opts);
    assert!(t.contains("0 queries"));
    let j = render_json(&agg, &CaptureHealth::default(), &opts);
    let back: json::Report = serde_json::from_str(&j).unwrap_or_else(|e| panic!("{e}"));
    assert!(back.queries.is_empty());
    assert!(back.capture.complete);
    let agg = aggregate(100);
    let t = render_text(&agg, &lossy_health(), &opts);
    assert!(t.contains("\x1b[1;31mINCOMPLETE"));
    assert!(!render_text(&agg, &lossy_health(), &ReportOptions::default()).contains('\x1b'));
}

#[test]
fn truncated_packets_come_with_advice() {
    let agg = aggregate(100);
    let mut h = lossy_health();
    let opts = ReportOptions::default();
    let t = render_text(&agg, &h, &opts);
    assert!(!t.contains("advice:"), "{t}");
    h.frames.truncated_packets = 12;
    let t = render_text(&agg, &h, &opts);
    let lines: Vec<&str> = t.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("#   !! truncated_packets"))
        .unwrap_or_else(|| panic!("{t}"));
    assert_eq!(
        lines.get(at + 1).copied(),
        Some("#      advice: re-capture with -s 0 (tcpdump's snap length cut packets)")
    );
}

#[test]
fn partial_requests_are_said_per_group_and_overall_only_when_there_are_some() {
    // Mark two events of the first group as having lost bytes of their request.
    let mut agg = Aggregator::new(AggConfig {
        max_groups: 100,
        keep_examples: true,
    });
    let mut marked = 0;
    let mut marked_group = None;
    for (which, mut ev) in events() {
        let s = &SPECS[which];
        if marked < 2 && marked_group.is_none_or(|g| g == which) {
            ev.text_partial = true;
            marked += 1;
            marked_group = Some(which);
        }
        let key = GroupKey {
            protocol: ev.protocol,
            command: s.command,
            fingerprint_hash: s.hash,
        };
        agg.add(&ev, key, || (s.fingerprint.to_string(), s.id.to_string()));
    }
    let o = ReportOptions::default();
    let j: serde_json::Value = serde_json::from_str(&render_json(&agg, &complete_health(), &o))
        .unwrap_or_else(|e| panic!("{e}"));
    let groups = j["queries"].as_array().unwrap_or_else(|| panic!("{j}"));
    let with: Vec<_> = groups
        .iter()
        .filter(|g| g["partial_requests"].as_u64() != Some(0))
        .collect();
    assert_eq!(with.len(), 1, "{j}");
    assert_eq!(with[0]["partial_requests"], 2);
    assert_eq!(with[0]["id"], SPECS[marked_group.unwrap_or(0)].id);
    let t = render_text(&agg, &complete_health(), &o);
    assert_eq!(
        t.matches("; 2 partial (requests that lost bytes in capture gaps")
            .count(),
        2,
        "once in the header, once in the group:\n{t}"
    );
    // Without partial requests the line is as it always was.
    let clean = render_text(&aggregate(100), &complete_health(), &o);
    assert!(!clean.contains("partial"), "{clean}");
}
