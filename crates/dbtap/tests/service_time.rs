//! Service time end to end: a pipelined connection in a capture built here byte by byte, read
//! by the binary. Each request's service starts at the later of its arrival and the previous
//! response's end on the connection, so queueing is not counted as execution and concurrency
//! stays within the number of connections.

use std::path::Path;
use std::process::Command;

mod common;
use common::*;

fn dbtap(args: &[&str], file: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dbtap"))
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("run dbtap: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Four PINGs sent in one segment at 1 ms, answered one by one 100 us apart: response times
/// 100, 200, 300 and 400 us, service times 100 us each.
fn pipelined() -> Vec<u8> {
    let (mut c, mut s) = Side::pair(40000, 6379);
    let ping = b"*1\r\n$4\r\nPING\r\n";
    let mut records = vec![(1_000_000, c.send(PSH_ACK, &ping.repeat(4)))];
    for i in 1..=4u64 {
        records.push((1_000_000 + i * 100, s.send(PSH_ACK, b"+PONG\r\n")));
    }
    pcap(&records)
}

#[test]
fn pipelined_requests_are_served_one_after_another() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let f = dir.path().join("pipelined.pcap");
    std::fs::write(&f, pipelined()).unwrap_or_else(|e| panic!("{e}"));

    let events = dbtap(&["events", "--format", "ndjson"], &f);
    let times: Vec<(&str, &str)> = events
        .lines()
        .map(|l| {
            let v = |k: &str| {
                let at = l
                    .find(&format!("\"{k}\":"))
                    .unwrap_or_else(|| panic!("{k}: {l}"));
                let rest = &l[at + k.len() + 3..];
                &rest[..rest.find(',').unwrap_or(rest.len())]
            };
            (v("latency_us"), v("service_us"))
        })
        .collect();
    assert_eq!(
        times,
        [
            ("100.0", "100.0"),
            ("200.0", "100.0"),
            ("300.0", "100.0"),
            ("400.0", "100.0")
        ],
        "{events}"
    );

    // 400 us of service in the 400 us the capture spans: one request at a time. The response
    // times add up to 1,000 us: 2.5 requests in flight, as the client saw it.
    let j = dbtap(&["digest", "--format", "json", "--quiet"], &f);
    assert_eq!(field(&j, "concurrency"), "1.0", "{j}");
    assert_eq!(field(&j, "response_concurrency"), "2.5", "{j}");
    let text = dbtap(&["digest", "--quiet"], &f);
    assert!(text.contains(", 1.00x concurrency"), "{text}");
    assert!(
        text.contains("# Exec = service time (excludes queueing behind earlier requests"),
        "{text}"
    );
    let exec = text
        .lines()
        .find(|l| l.starts_with("# Exec time "))
        .unwrap_or_default();
    let resp = text
        .lines()
        .find(|l| l.starts_with("# Resp time "))
        .unwrap_or_default();
    assert!(
        exec.contains(" 400us ") && exec.contains(" 100us "),
        "{text}"
    );
    assert!(
        resp.contains(" 1.00ms ") && resp.contains(" 250us "),
        "{text}"
    );

    // --order-by response still works, and says so.
    let j = dbtap(
        &["digest", "--format", "json", "--order-by", "response"],
        &f,
    );
    assert!(j.contains("\"order_by\": \"response\""), "{j}");
}
