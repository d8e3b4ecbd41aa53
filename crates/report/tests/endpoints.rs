//! Unix-socket endpoints and client processes in the outputs: NDJSON events, the text report's
//! slowest example and "Load by dimension" panel, the JSON example, dimensions and
//! transactions. Packet events (no process) keep their exact form.

use std::sync::Arc;

use aggregate::txn::TxnConfig;
use aggregate::{AggConfig, Aggregator, GroupKey};
use proto::{Endpoint, Process, Protocol, QueryEvent, TxnState};
use report::{CaptureHealth, ReportOptions, events, json, text};

const T0: u64 = 1_704_067_200_000_000_000; // 2024-01-01T00:00:00Z
const MS: u64 = 1_000_000;
const SOCK: &str = "/run/mysqld/mysqld.sock";

fn peer(pid: u32, comm: &str) -> Option<Arc<Process>> {
    Some(Arc::new(Process {
        pid,
        comm: Arc::from(comm),
    }))
}

/// A request over the server's Unix socket from process `comm` (`None`: not known).
fn ev(conn: u64, text: &str, start: u64, dur: u64, comm: Option<&str>) -> QueryEvent {
    QueryEvent {
        conn,
        client: Endpoint::unix(""),
        server: Endpoint::unix(SOCK),
        peer: comm.and_then(|c| peer(4000 + conn as u32, c)),
        user: Some(Arc::from("app")),
        database: Some(Arc::from("shop")),
        text: Some(Arc::from(text)),
        ..proto::testing::event(Protocol::Mysql, "query", T0 + start, Some(T0 + start + dur))
    }
}

fn add(agg: &mut Aggregator, e: &QueryEvent) {
    let fp = e.text.as_deref().unwrap_or("").to_ascii_lowercase();
    let hash = fp
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let key = GroupKey {
        protocol: e.protocol,
        command: e.command,
        fingerprint_hash: hash,
    };
    agg.add(e, key, || (fp.clone(), format!("{hash:016X}")));
}

fn ndjson(e: &QueryEvent) -> String {
    let mut buf = Vec::new();
    events::write_ndjson(e, "select ?", "ID", &mut buf).unwrap();
    String::from_utf8(buf).unwrap()
}

#[test]
fn events_carry_the_socket_path_and_the_process_when_known() {
    let line = ndjson(&ev(1, "SELECT 1", 0, MS, Some("psql")));
    assert!(
        line.contains(
            r#""conn":1,"client":"unix","server":"/run/mysqld/mysqld.sock","process":{"pid":4001,"comm":"psql"},"user":"app""#
        ),
        "{line}"
    );
    // Not known: no "process" key at all, the line as packet events have it.
    let line = ndjson(&ev(1, "SELECT 1", 0, MS, None));
    assert!(!line.contains("process"), "{line}");
    assert!(
        line.contains(r#""client":"unix","server":"/run/mysqld/mysqld.sock","user":"app""#),
        "{line}"
    );
    let tcp = QueryEvent {
        client: "10.0.0.20:5000".parse().unwrap(),
        server: "[::1]:3306".parse().unwrap(),
        ..ev(1, "SELECT 1", 0, MS, None)
    };
    let line = ndjson(&tcp);
    assert!(
        line.contains(r#""client":"10.0.0.20:5000","server":"[::1]:3306","user""#),
        "{line}"
    );
    // A command name or path with quotes and control bytes stays valid JSON.
    let odd = QueryEvent {
        server: Endpoint::unix("/tmp/a\"b\n.sock"),
        peer: peer(7, "x\"y\u{1}"),
        ..ev(1, "SELECT 1", 0, MS, None)
    };
    let v: serde_json::Value = serde_json::from_str(ndjson(&odd).trim_end()).unwrap();
    assert_eq!(v["server"], "/tmp/a\"b\n.sock");
    assert_eq!(v["process"]["comm"], "x\"y\u{1}");
    assert_eq!(v["process"]["pid"], 7);
}

/// Two processes over the socket, one slow SELECT from psql; a transaction from psql.
fn workload() -> Aggregator {
    let mut agg = Aggregator::new(AggConfig::default());
    agg.track_transactions(TxnConfig::default());
    let (t, i) = (Some(TxnState::InTransaction), Some(TxnState::Idle));
    for (conn, text, start, dur, comm, txn) in [
        (1, "BEGIN", 0, 1, "psql", t),
        (1, "SELECT slow", 2, 50, "psql", t),
        (1, "COMMIT", 60, 1, "psql", i),
        (2, "SELECT slow", 5, 10, "php-fpm", i),
        (2, "SELECT slow", 20, 10, "php-fpm", i),
    ] {
        let e = QueryEvent {
            txn,
            ..ev(conn, text, start * MS, dur * MS, Some(comm))
        };
        add(&mut agg, &e);
    }
    agg
}

fn health() -> CaptureHealth {
    CaptureHealth {
        first_ts_ns: Some(T0),
        last_ts_ns: Some(T0 + 100 * MS),
        ..CaptureHealth::default()
    }
}

#[test]
fn text_report_names_the_socket_the_process_and_their_shares() {
    let agg = workload();
    let mut buf = Vec::new();
    text::render(&agg, &health(), &ReportOptions::default(), &mut buf).unwrap();
    let t = String::from_utf8(buf).unwrap();
    assert!(
        t.contains("client unix -> /run/mysqld/mysqld.sock, process psql[4001]"),
        "{t}"
    );
    // Load by dimension: the process has two values (the socket and "local" one each).
    let panel: Vec<&str> = t.lines().filter(|l| l.starts_with("#   ")).collect();
    let rows: Vec<&str> = panel
        .iter()
        .filter(|l| l.contains("process"))
        .copied()
        .collect();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(
        rows[0].ends_with("  psql") && rows[1].ends_with("  php-fpm"),
        "{t}"
    );
    assert!(!panel.iter().any(|l| l.contains(" server ")), "{t}");
    assert!(!panel.iter().any(|l| l.contains(" client ")), "{t}");
}

#[test]
fn json_report_example_dimensions_and_transactions() {
    let agg = workload();
    let j = serde_json::to_value(json::build(&agg, &health(), &ReportOptions::default())).unwrap();
    let q = j["queries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["fingerprint"] == "select slow")
        .unwrap();
    let ex = &q["example"];
    assert_eq!(ex["client"], "unix");
    assert_eq!(ex["server"], SOCK);
    assert_eq!(
        ex["process"],
        serde_json::json!({"pid": 4001, "comm": "psql"})
    );
    assert_eq!(q["clients"]["values"][0]["name"], "local");
    let dims = j["totals"]["dimensions"].as_array().unwrap();
    let names: Vec<&str> = dims
        .iter()
        .filter_map(|d| d["dimension"].as_str())
        .collect();
    assert_eq!(names, ["process"]);
    let values: Vec<&str> = dims[0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["value"].as_str())
        .collect();
    assert_eq!(values, ["psql", "php-fpm"]);
    let top = &j["transactions"]["top"][0];
    assert_eq!(
        (&top["client"], &top["server"]),
        (&"unix".into(), &SOCK.into())
    );
    assert_eq!(top["process"]["comm"], "psql");
    // It round-trips through the typed report.
    let back: json::Report = serde_json::from_value(j.clone()).unwrap();
    let ex = back.queries.iter().find_map(|q| q.stats.example.as_ref());
    assert_eq!(
        ex.and_then(|e| e.process.as_ref()).map(|p| p.pid),
        Some(4001)
    );
}

#[test]
fn no_process_no_key() {
    // Events whose process is unknown: the example and transactions have no "process" key.
    let mut agg = Aggregator::new(AggConfig::default());
    agg.track_transactions(TxnConfig::default());
    let e = QueryEvent {
        txn: Some(TxnState::InTransaction),
        ..ev(1, "BEGIN", 0, MS, None)
    };
    add(&mut agg, &e);
    let commit = QueryEvent {
        txn: Some(TxnState::Idle),
        ..ev(1, "COMMIT", 2 * MS, MS, None)
    };
    add(&mut agg, &commit);
    let j = serde_json::to_value(json::build(&agg, &health(), &ReportOptions::default())).unwrap();
    assert_eq!(j["transactions"]["top"][0]["server"], SOCK);
    assert_eq!(j["queries"][0]["example"]["server"], SOCK);
    let s = j.to_string();
    assert!(!s.contains("\"process\""), "{s}");
}
