//! Capture-health verdicts of the binary on small captures built here byte by byte: what is lost
//! or unread makes the report incomplete, what is not (reassembled fragments, empty segments,
//! reordering) does not, and every counter stays within what was captured.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::*;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    p
}

fn dbtap(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dbtap"))
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("run dbtap: {e}"))
}

/// The JSON digest of `file`, and the stderr.
fn digest(file: &Path) -> (String, String) {
    let out = dbtap(&["digest", "--format", "json", "--quiet"], file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn text(file: &Path) -> String {
    let out = dbtap(&["digest", "--quiet"], file);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Redis PING and its PONG on a mid-stream connection, at `t` us.
fn ping_pong(c: &mut Side, s: &mut Side, t: u64) -> Vec<(u64, Vec<u8>)> {
    vec![
        (t, c.send(PSH_ACK, b"*1\r\n$4\r\nPING\r\n")),
        (t + 100, s.send(PSH_ACK, b"+PONG\r\n")),
    ]
}

#[test]
fn clean_capture_is_complete() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, mut s) = Side::pair(40000, 6379);
    let f = write(
        dir.path(),
        "clean.pcap",
        &pcap(&ping_pong(&mut c, &mut s, 1_000_000)),
    );
    let (j, _) = digest(&f);
    assert_eq!(field(&j, "complete"), "true", "{j}");
    assert_eq!(num(&j, "read_errors"), 0);
}

#[test]
fn read_errors_make_the_report_incomplete() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, mut s) = Side::pair(40000, 6379);
    let good = pcap(&ping_pong(&mut c, &mut s, 1_000_000));

    // A record header corrupt after the good records: the rest of the file is unread.
    let mut corrupt = good.clone();
    corrupt.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0]);
    corrupt.extend_from_slice(&[0xab; 64]);
    // A pcap whose first record announces a huge length.
    let mut huge = good[..24].to_vec();
    huge.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0x40]);
    // A pcapng whose section header block announces a huge length.
    let mut ng = vec![0x0a, 0x0d, 0x0d, 0x0a];
    ng.extend_from_slice(&0x7fff_fff0u32.to_le_bytes());
    ng.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    ng.extend_from_slice(&[1, 0, 0, 0]);
    ng.extend_from_slice(&[0xff; 8]);
    ng.extend_from_slice(&28u32.to_le_bytes());

    for (name, bytes, packets) in [
        ("corrupt.pcap", corrupt, 2),
        ("huge.pcap", huge, 0),
        ("huge.pcapng", ng, 0),
    ] {
        let f = write(dir.path(), name, &bytes);
        let (j, err) = digest(&f);
        assert_eq!(field(&j, "complete"), "false", "{name}: {j}");
        assert_eq!(num(&j, "read_errors"), 1, "{name}");
        assert_eq!(num(&j, "packets"), packets, "{name}");
        assert!(
            err.contains("corrupt capture at byte") && err.contains("the report covers what"),
            "{name}: {err}"
        );
        let t = text(&f);
        assert!(t.contains("# Capture health: INCOMPLETE"), "{name}: {t}");
        assert!(t.contains("!! read_errors"), "{name}: {t}");
    }
}

/// The PING request split into two IPv4 fragments (the first holds 8 bytes of the TCP header).
fn fragmented_ping(c: &mut Side, id: u16) -> (Vec<u8>, Vec<u8>) {
    let seg = tcp(c.sport, c.dport, c.seq, 1, PSH_ACK, b"*1\r\n$4\r\nPING\r\n");
    c.seq += 14;
    let first = ipv4(c.src, c.dst, id, 0, true, &seg[..8]);
    let second = ipv4(c.src, c.dst, id, 1, false, &seg[8..]);
    (first, second)
}

#[test]
fn reassembled_fragments_are_not_a_loss_unreassembled_ones_are() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, mut s) = Side::pair(40000, 6379);
    let (a, b) = fragmented_ping(&mut c, 77);
    let recs = vec![
        (1_000_000, a),
        (1_000_010, b),
        (1_000_100, s.send(PSH_ACK, b"+PONG\r\n")),
    ];
    let f = write(dir.path(), "frag.pcap", &pcap(&recs));
    let (j, _) = digest(&f);
    assert_eq!(num(&j, "ip_fragments"), 2);
    assert_eq!(num(&j, "ip_datagrams_reassembled"), 1);
    assert_eq!(num(&j, "ip_datagrams_incomplete"), 0);
    assert_eq!(field(&j, "complete"), "true", "{j}");
    assert!(j.contains("\"queries\": 1,"), "{j}");

    // The second fragment never comes: that datagram is lost.
    let (mut c, mut s) = Side::pair(40001, 6379);
    let (a, _) = fragmented_ping(&mut c, 78);
    let mut recs = vec![(1_000_000, a)];
    recs.extend(ping_pong(&mut c, &mut s, 2_000_000));
    let f = write(dir.path(), "lostfrag.pcap", &pcap(&recs));
    let (j, _) = digest(&f);
    assert_eq!(num(&j, "ip_datagrams_incomplete"), 1);
    assert_eq!(field(&j, "complete"), "false", "{j}");
}

#[test]
fn empty_segments_do_not_make_a_report_incomplete() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, mut s) = Side::pair(40000, 6379);
    // A pure ACK before the first command of a mid-stream connection, then the exchange, then
    // the FIN of a connection long idle (its start never captured).
    let mut recs = vec![(999_000, c.send(ACK, b""))];
    recs.extend(ping_pong(&mut c, &mut s, 1_000_000));
    let (_, mut idle) = Side::pair(40009, 6379);
    recs.push((1_500_000, idle.send(FIN_ACK, b"")));
    let f = write(dir.path(), "acks.pcap", &pcap(&recs));
    let (j, _) = digest(&f);
    assert_eq!(num(&j, "empty_segments_not_tracked"), 2, "{j}");
    assert_eq!(num(&j, "not_tracked_segments"), 0);
    assert_eq!(field(&j, "complete"), "true", "{j}");
    let t = text(&f);
    assert!(
        t.contains("# Capture health: complete") && t.contains("2 empty segments"),
        "{t}"
    );
}

#[test]
fn responses_before_their_request_are_counted() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, mut s) = Side::pair(40000, 6379);
    // The clock went back between the request and its response.
    let recs = vec![
        (2_000_000, c.send(PSH_ACK, b"*1\r\n$4\r\nPING\r\n")),
        (1_000_000, s.send(PSH_ACK, b"+PONG\r\n")),
    ];
    let f = write(dir.path(), "back.pcap", &pcap(&recs));
    let (j, _) = digest(&f);
    assert_eq!(num(&j, "negative_latencies"), 1, "{j}");
    assert_eq!(field(&j, "complete"), "true", "{j}");
    let t = text(&f);
    assert!(
        t.contains("responses time-stamped before their request: 1"),
        "{t}"
    );
}

#[test]
fn unparsed_bytes_never_exceed_what_was_captured() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, _) = Side::pair(40000, 27017);
    // A MongoDB message announcing 3,000,000 bytes: its first 100 bytes, then 100 bytes far
    // into it; the hole between is never captured and the message never ends.
    let mut head = Vec::new();
    head.extend_from_slice(&3_000_000u32.to_le_bytes());
    head.extend_from_slice(&1u32.to_le_bytes());
    head.extend_from_slice(&0u32.to_le_bytes());
    head.extend_from_slice(&2013u32.to_le_bytes());
    head.resize(100, 0);
    let first = c.send(PSH_ACK, &head);
    c.seq = c.seq.wrapping_add(2_000_000);
    let far = c.send(PSH_ACK, &[0u8; 100]);
    let f = write(
        dir.path(),
        "mongo.pcap",
        &pcap(&[(1_000_000, first), (1_000_100, far)]),
    );
    let (j, _) = digest(&f);
    let unparsed = num(&j, "unparsed_bytes");
    assert!(
        unparsed <= 200,
        "unparsed_bytes {unparsed} > 200 captured\n{j}"
    );
    assert_eq!(num(&j, "gap_bytes"), 2_000_000, "{j}");
    assert_eq!(field(&j, "complete"), "false");
}

#[test]
fn reordering_beyond_the_buffer_is_not_called_duplicates() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, _) = Side::pair(40000, 6379);
    // The first segment is overtaken by more than the 4 MiB reassembly buffer holds.
    let chunk = vec![b'x'; 60_000];
    let mut recs = vec![(999_000, c.send(PSH_ACK, b"*1\r\n$4\r\nPING\r\n"))];
    let first = c.send(PSH_ACK, &chunk);
    for i in 0..80u64 {
        recs.push((1_000_000 + i, c.send(PSH_ACK, &chunk)));
    }
    recs.push((2_000_000, first));
    let f = write(dir.path(), "late.pcap", &pcap(&recs));
    let (j, _) = digest(&f);
    assert_eq!(num(&j, "out_of_order_too_late"), 1, "{j}");
    assert_eq!(num(&j, "duplicates"), 0, "{j}");
    assert_eq!(num(&j, "retransmitted_bytes"), 0, "{j}");
    assert_eq!(num(&j, "gap_bytes"), 60_000, "{j}");
    let t = text(&f);
    assert!(t.contains("reordered too late: 1 segments"), "{t}");
    assert!(
        t.contains("repaired: 0 duplicate segments (0 bytes retransmitted)"),
        "{t}"
    );
}

#[test]
fn input_messages_are_one_line_with_exit_2() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(env!("CARGO_BIN_EXE_dbtap"))
        .args(["digest", "-", "-"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "dbtap: error: standard input (-) is named 2 times; it can be read only once\n"
    );

    let mut ng = vec![0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 1, 2, 3, 4];
    ng.extend_from_slice(&[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    ng.extend_from_slice(&28u32.to_le_bytes());
    let f = write(dir.path(), "bom.pcapng", &ng);
    let out = dbtap(&["digest"], &f);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("byte-order magic is 01 02 03 04") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn packets_after_a_cancel_request_are_not_a_loss() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, mut s) = Side::pair(40000, 5432);
    let syn = c.send(0x02, b"");
    c.seq += 1;
    let syn_ack = s.send(0x12, b"");
    s.seq += 1;
    let mut cancel = Vec::new();
    cancel.extend_from_slice(&16u32.to_be_bytes());
    cancel.extend_from_slice(&80_877_102u32.to_be_bytes());
    cancel.extend_from_slice(&4242u32.to_be_bytes());
    cancel.extend_from_slice(&7u32.to_be_bytes());
    let recs = vec![
        (1_000_000, syn),
        (1_000_010, syn_ack),
        (1_000_020, c.send(ACK, b"")),
        (1_000_030, c.send(PSH_ACK, &cancel)),
        (1_000_040, s.send(ACK, b"")),
        (1_000_050, s.send(FIN_ACK, b"")),
        (1_000_060, c.send(FIN_ACK, b"")),
        (1_000_070, s.send(ACK, b"")),
    ];
    let f = write(dir.path(), "cancel.pcap", &pcap(&recs));
    let (j, _) = digest(&f);
    assert_eq!(num(&j, "not_tracked_segments"), 0, "{j}");
    assert!(num(&j, "segments_after_stop") > 0, "{j}");
    assert_eq!(field(&j, "complete"), "true", "{j}");
}

/// `digest --port 8080` JSON of `file`.
fn digest_port(file: &Path, port: &str) -> String {
    let out = dbtap(
        &["digest", "--format", "json", "--quiet", "--port", port],
        file,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn unrecognized_opened_connections_are_not_a_loss_unrecognized_midstream_ones_are() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    const SYN: u8 = 0x02;
    const SYN_ACK: u8 = 0x12;
    // An HTTP connection whose start was captured, on a port given for sniffing: its first
    // bytes say it is no database protocol. Not database traffic, nothing lost.
    let (mut c, mut s) = Side::pair(40000, 8080);
    let mut recs = vec![
        (1_000_000, c.send(SYN, b"")),
        (1_000_010, s.send(SYN_ACK, b"")),
    ];
    c.seq = c.seq.wrapping_add(1);
    s.seq = s.seq.wrapping_add(1);
    recs.push((
        1_000_020,
        c.send(PSH_ACK, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    ));
    recs.push((1_000_030, s.send(PSH_ACK, b"HTTP/1.1 200 OK\r\n\r\n")));
    let f = write(dir.path(), "http.pcap", &pcap(&recs));
    let j = digest_port(&f, "8080");
    assert_eq!(num(&j, "unrecognized_connections"), 1, "{j}");
    assert_eq!(num(&j, "unrecognized_midstream"), 0, "{j}");
    assert_eq!(field(&j, "complete"), "true", "{j}");

    // A connection picked up mid-stream on that port that never shows a request dbtap
    // recognizes: it may be database traffic dbtap could not read, so the report is incomplete.
    let (mut c, mut s) = Side::pair(40001, 8080);
    let mut recs = Vec::new();
    for i in 0..70u64 {
        recs.push((
            2_000_000 + i * 100,
            c.send(PSH_ACK, b"\x01\x02garbage, not a request"),
        ));
        recs.push((2_000_050 + i * 100, s.send(PSH_ACK, b"\x03\x04nor a reply")));
    }
    let f = write(dir.path(), "midstream.pcap", &pcap(&recs));
    let j = digest_port(&f, "8080");
    assert_eq!(num(&j, "unrecognized_midstream"), 1, "{j}");
    assert_eq!(num(&j, "unrecognized_connections"), 0, "{j}");
    assert_eq!(field(&j, "complete"), "false", "{j}");
    assert!(j.contains("picked up mid-stream"), "{j}");
    // The warning names the port and says what to do.
    assert!(
        j.contains("1 connection on port 8080 spoke no protocol dbtap recognises")
            && j.contains("capture from the connections' start"),
        "{j}"
    );
}

#[test]
fn untracked_traffic_names_the_port_to_add() {
    // A mid-stream Redis conversation on a port that is no default and was not given: dbtap
    // cannot tell which end is the server, so nothing is read; the warning says which port to add.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, mut s) = Side::pair(40000, 6380);
    let f = write(
        dir.path(),
        "p6380.pcap",
        &pcap(&ping_pong(&mut c, &mut s, 1_000_000)),
    );
    let (j, _) = digest(&f);
    assert_eq!(num(&j, "not_tracked_segments"), 2, "{j}");
    assert_eq!(field(&j, "complete"), "false", "{j}");
    assert!(
        j.contains("2 segments with payload on port 6380")
            && j.contains("add --port 6380 if it is a database port"),
        "{j}"
    );
    // With the port given, the conversation is read and nothing is lost.
    let j = digest_port(&f, "6380");
    assert_eq!(num(&j, "not_tracked_segments"), 0, "{j}");
    assert_eq!(num(&j, "queries"), 1, "{j}");
    assert!(!j.contains("add --port"), "{j}");
}
