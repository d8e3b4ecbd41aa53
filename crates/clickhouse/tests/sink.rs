//! The sink against a scripted HTTP server that plays ClickHouse: an insert the server applied
//! but answered with an error is found by the ledger check and not sent again; one it did not
//! apply is sent again, once. (The real server: tests/integration/test_clickhouse.py.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clickhouse::rowbinary::Reader;
use clickhouse::{Row, Sink, SinkConfig, Url};

#[derive(Default)]
struct Fake {
    /// Rows stored, by batch id.
    stored: Vec<u64>,
    inserts: u32,
    ledger_checks: u32,
    /// Per insert attempt (in order): (apply it?, reply status).
    script: Vec<(bool, u16)>,
}

fn pct_decode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let hex = s
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if let (b'%', Some(v)) = (b[i], hex) {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn serve(fake: Arc<Mutex<Fake>>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let target = pct_decode(line.split_whitespace().nth(1).unwrap_or(""));
            let mut len = 0;
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let (status, reply) = answer(&fake, &target, &body);
            let _ = write!(
                c,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    port
}

fn answer(fake: &Mutex<Fake>, target: &str, body: &[u8]) -> (u16, String) {
    let mut f = fake.lock().unwrap();
    if target.contains("INSERT INTO dbtap_minutes") {
        let (apply, status) = f
            .script
            .get(f.inserts as usize)
            .copied()
            .unwrap_or((true, 200));
        f.inserts += 1;
        if apply {
            let mut r = Reader::new(body);
            while !r.is_empty() {
                let row = Row::decode(&mut r).unwrap();
                f.stored.push(row.batch);
            }
        }
        return (
            status,
            if status == 200 {
                String::new()
            } else {
                "Code: 999, boom".into()
            },
        );
    }
    if target.contains("system.processes") {
        return (200, "0\n".into());
    }
    if let Some(id) = target.split("batch = ").nth(1) {
        f.ledger_checks += 1;
        let id: u64 = id
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let n = f.stored.iter().filter(|&&b| b == id).count();
        return (200, format!("{n}\n"));
    }
    (400, format!("unexpected {target}"))
}

fn rows(n: u32) -> Vec<Row> {
    (0..n)
        .map(|i| Row {
            ts: 1_700_000_040,
            query_id: format!("q{i}"),
            count: 1,
            ..Row::default()
        })
        .collect()
}

fn run(script: Vec<(bool, u16)>) -> (Fake, clickhouse::StatsSnapshot) {
    let fake = Arc::new(Mutex::new(Fake {
        script,
        ..Fake::default()
    }));
    let port = serve(Arc::clone(&fake));
    let mut cfg = SinkConfig::new(Url::parse(&format!("http://127.0.0.1:{port}/")).unwrap());
    cfg.backoff_min = Duration::from_millis(10);
    cfg.backoff_max = Duration::from_millis(40);
    let (mut sink, warnings) = Sink::start(cfg).unwrap();
    assert!(warnings.is_empty());
    sink.submit(rows(5)).unwrap();
    let stats = sink.finish(Instant::now() + Duration::from_secs(10));
    let f = std::mem::take(&mut *fake.lock().unwrap());
    (f, stats)
}

#[test]
fn an_insert_applied_but_answered_with_an_error_is_not_sent_again() {
    let (f, s) = run(vec![(true, 500)]);
    assert_eq!(f.inserts, 1, "the ledger found the batch: no second insert");
    assert_eq!(f.ledger_checks, 1);
    assert_eq!(f.stored.len(), 5);
    assert_eq!((s.already_stored, s.retries, s.spooled_batches), (1, 1, 0));
}

#[test]
fn an_insert_not_applied_is_sent_again_once() {
    let (f, s) = run(vec![(false, 500), (false, 503)]);
    assert_eq!(f.inserts, 3);
    assert_eq!(f.ledger_checks, 2);
    assert_eq!(f.stored.len(), 5, "stored once");
    assert_eq!((s.rows_sent, s.batches_sent, s.retries), (5, 1, 2));
    assert_eq!((s.already_stored, s.spooled_batches), (0, 0));
}

#[test]
fn a_clean_insert_needs_no_ledger() {
    let (f, s) = run(Vec::new());
    assert_eq!((f.inserts, f.ledger_checks, f.stored.len()), (1, 0, 5));
    assert_eq!((s.rows_sent, s.retries), (5, 0));
}
