//! The report's DBA details (issue 11): the profile's Load column and width, the fine
//! distribution, and the transactions section, text and JSON, on small hand-made inputs whose
//! right answers are worked out here.

use std::sync::Arc;

use aggregate::txn::TxnConfig;
use aggregate::{AggConfig, Aggregator, GroupKey};
use proto::{Outcome, Protocol, QueryEvent, TxnState};
use report::{CaptureHealth, Histogram, ReportOptions, json, text};

const T0: u64 = 1_704_067_200_000_000_000; // 2024-01-01T00:00:00Z
const MS: u64 = 1_000_000;

fn ev(conn: u64, text: &str, start: u64, dur: u64, txn: Option<TxnState>) -> QueryEvent {
    QueryEvent {
        protocol: Protocol::Postgres,
        conn,
        client: format!("10.0.0.{conn}:4000").parse().unwrap(),
        server: "10.0.0.100:5432".parse().unwrap(),
        start_ns: T0 + start,
        first_response_ns: Some(T0 + start + dur),
        end_ns: Some(T0 + start + dur),
        service_start_ns: Some(T0 + start),
        user: Some(Arc::from("app")),
        database: Some(Arc::from("shop")),
        command: "query",
        text: Some(Arc::from(text)),
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 10,
        bytes_out: 10,
        rows_sent: 0,
        rows_affected: 0,
        warnings: 0,
        outcome: Outcome::Ok,
        error: None,
        timed: true,
        txn,
        index: Default::default(),
        params: None,
        peer: None,
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

fn health(span_ms: u64) -> CaptureHealth {
    CaptureHealth {
        first_ts_ns: Some(T0),
        last_ts_ns: Some(T0 + span_ms * MS),
        ..CaptureHealth::default()
    }
}

fn render(agg: &Aggregator, h: &CaptureHealth, o: &ReportOptions) -> (String, json::Report) {
    let mut buf = Vec::new();
    text::render(agg, h, o, &mut buf).unwrap();
    (String::from_utf8(buf).unwrap(), json::build(agg, h, o))
}

use TxnState::{Idle, InTransaction as T};

/// Over 1 s: one connection runs BEGIN (1 ms), SELECT (2 ms), 300 ms idle, UPDATE (4 ms),
/// 200 ms idle, COMMIT (1 ms); another one 100 autocommit SELECTs of 3 ms.
fn workload(track: bool) -> Aggregator {
    let mut agg = Aggregator::new(AggConfig::default());
    if track {
        agg.track_transactions(TxnConfig::default());
    }
    let mut t = 0;
    for (text, gap, dur, st) in [
        ("BEGIN", 0, 1, T),
        ("SELECT a FROM t", 1, 2, T),
        ("UPDATE t SET a = 1", 300, 4, T),
        ("COMMIT", 200, 1, Idle),
    ] {
        t += gap * MS;
        add(&mut agg, &ev(1, text, t, dur * MS, Some(st)));
        t += dur * MS;
    }
    for i in 0..100 {
        add(
            &mut agg,
            &ev(2, "SELECT 1", i * 10 * MS, 3 * MS, Some(Idle)),
        );
    }
    agg.close_conn(1, T0 + 900 * MS);
    agg.close_conn(2, T0 + 1000 * MS);
    agg
}

#[test]
fn load_column_is_service_time_over_the_span() {
    let agg = workload(false);
    let (t, j) = render(&agg, &health(1000), &ReportOptions::default());
    // SELECT 1: 100 x 3 ms over 1 s = 0.30 active sessions; UPDATE 4 ms: 0.004 -> 0.00.
    let row = t.lines().find(|l| l.ends_with(" select 1")).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cols[3..7], ["300ms", "97.4%", "0.30", "100"], "{row}");
    assert!(t.contains("Exec time        Load Calls"), "{t}");
    let q = j
        .queries
        .iter()
        .find(|q| q.fingerprint == "select 1")
        .unwrap();
    assert_eq!(q.load, Some(0.3));
    assert_eq!(q.load, q.concurrency);
    // Without a span there is no load.
    let (t, j) = render(&agg, &CaptureHealth::default(), &ReportOptions::default());
    assert!(j.queries.iter().all(|q| q.load.is_some()));
    assert!(t.contains("Load"));
    // No transactions tracked: no section, no JSON field.
    assert!(!t.contains("# Transactions"));
    assert!(j.transactions.is_none());
    assert!(
        !serde_json::to_string(&j)
            .unwrap()
            .contains("\"transactions\"")
    );
}

#[test]
fn width_sets_the_fingerprint_column() {
    let mut agg = Aggregator::new(AggConfig::default());
    let long = format!("SELECT {} FROM t", "x, ".repeat(60));
    add(&mut agg, &ev(1, &long, 0, MS, None));
    for width in [130usize, 200] {
        let o = ReportOptions {
            width,
            ..ReportOptions::default()
        };
        let (t, _) = render(&agg, &health(10), &o);
        let row = t.lines().find(|l| l.contains("select x")).unwrap();
        assert_eq!(row.chars().count(), width, "{row}");
        assert!(row.ends_with("..."));
    }
    let o = ReportOptions {
        width: 0,
        ..ReportOptions::default()
    };
    let (t, _) = render(&agg, &health(10), &o);
    assert!(t.lines().any(|l| l.ends_with("x, x,  from t")));
}

#[test]
fn transactions_section_text_and_json() {
    let agg = workload(true);
    let (t, j) = render(&agg, &health(1000), &ReportOptions::default());
    let x = j.transactions.as_ref().expect("transactions");
    assert_eq!(
        (x.count, x.committed, x.rolled_back, x.closed),
        (1, 1, 0, 0)
    );
    assert_eq!(x.statements, 4);
    assert_eq!(x.idle_us, 501_000.0);
    let top = &x.top[0];
    assert_eq!(top.duration_us, 509_000.0);
    assert_eq!((top.statements, top.ended.as_str()), (4, "commit"));
    assert_eq!(top.first_fingerprint, "begin");
    assert_eq!(top.query_ids.len(), 4);
    assert_eq!(top.client, "10.0.0.1:4000");
    assert_eq!(
        (top.user.as_deref(), top.database.as_deref()),
        (Some("app"), Some("shop"))
    );
    assert_eq!(x.connections.len(), 1);
    assert_eq!(x.connections[0].idle_us, 501_000.0);
    assert_eq!(x.connections[0].in_transaction_us, 509_000.0);
    assert!(t.contains(
        "# Transactions: 1 (1 commit, 0 rollback, 0 other, 0 closed), 4 statements, 509ms in \
         transactions, 501ms idle in transaction (98%)"
    ));
    let row = t
        .lines()
        .skip_while(|l| *l != "# Longest transactions")
        .nth(2)
        .unwrap();
    assert!(
        row.starts_with("#    1 2024-01-01T00:00:00.000000Z    509ms   501ms     4 commit")
            && row.ends_with("app/shop             select a from t (+3 groups)"),
        "{row}"
    );
    let row = t
        .lines()
        .skip_while(|l| *l != "# Idle in transaction by connection")
        .nth(2)
        .unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cols[1..],
        [
            "1",
            "10.0.0.1:4000",
            "10.0.0.100:5432",
            "app/shop",
            "1",
            "509ms",
            "501ms",
            "98%"
        ]
    );
}

#[test]
fn fine_histogram_only_when_asked() {
    let mut agg = Aggregator::new(AggConfig::default());
    for i in 0..100u64 {
        let dur = if i % 5 == 0 { 20 * MS } else { MS / 10 };
        add(
            &mut agg,
            &ev(1, "SELECT SLEEP(?)", i * 30 * MS, dur + i, None),
        );
    }
    let (t, j) = render(&agg, &health(3000), &ReportOptions::default());
    assert!(t.contains("# Exec time distribution\n"));
    assert!(j.queries[0].service_fine.is_none());
    let o = ReportOptions {
        histogram: Histogram::Fine,
        ..ReportOptions::default()
    };
    let (t, j) = render(&agg, &health(3000), &o);
    assert!(!t.contains("# Exec time distribution\n"));
    let rows = j.queries[0].service_fine.as_ref().unwrap();
    assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 100);
    let nonempty: Vec<_> = rows.iter().filter(|r| r.count > 0).collect();
    assert_eq!(nonempty.len(), 2, "{rows:?}");
    assert_eq!((nonempty[0].count, nonempty[1].count), (80, 20));
    assert!(nonempty[0].ge_us <= 100.0 && nonempty[0].lt_us > 100.1);
    assert!(nonempty[1].ge_us <= 20_000.0 && nonempty[1].lt_us > 20_000.1);
    let head = format!(
        "# Exec time distribution (fine: {} rows from min to max, [from, to) count)",
        rows.len()
    );
    let lines: Vec<&str> = t
        .lines()
        .skip_while(|l| *l != head)
        .skip(1)
        .take(rows.len())
        .collect();
    assert_eq!(lines.len(), rows.len());
    assert!(lines[0].ends_with(&"#".repeat(64)));
    assert!(lines[lines.len() - 1].ends_with(&"#".repeat(16)));
    assert!(lines[1..lines.len() - 1].iter().all(|l| !l.ends_with('#')));
}

#[test]
fn the_selected_line_follows_the_time_range_line() {
    let mut agg = Aggregator::new(AggConfig::default());
    add(&mut agg, &ev(1, "SELECT 1", 0, MS, None));
    let o = ReportOptions {
        selected: Some("requests that started before X (--until X)".into()),
        ..ReportOptions::default()
    };
    let (t, _) = render(&agg, &health(10), &o);
    let lines: Vec<&str> = t.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("# Time range: "))
        .expect("time range");
    assert_eq!(
        lines[at + 1],
        "# Selected: requests that started before X (--until X)"
    );
    assert_eq!(t.matches("# Selected: ").count(), 1);
    // No time range (nothing captured): right after the first line.
    let empty = Aggregator::new(AggConfig::default());
    let (t, _) = render(&empty, &CaptureHealth::default(), &o);
    assert!(t.starts_with("# dbtap query digest\n# Selected: "), "{t}");
    // Nothing selected: no such line.
    let (t, _) = render(&agg, &health(10), &ReportOptions::default());
    assert!(!t.contains("# Selected:"));
}
