//! `dbtap digest --threads N` gives the same output byte for byte as one thread, whatever N, on
//! every capture of the repository (gzip included) and on captures built here: many connections
//! interleaved, connections closed idle, IP fragments (where the digest runs on one thread).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// stdout and stderr of `dbtap digest ARGS --threads N FILE`.
fn digest(args: &[&str], threads: usize, file: &Path) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dbtap"))
        .arg("digest")
        .args(args)
        .args(["--threads", &threads.to_string()])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("run dbtap: {e}"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{}: {err}", file.display());
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

/// The outputs compared: text, JSON, JSON with the mergeable distributions, another
/// fingerprint, groups by dimensions.
const VARIANTS: &[&[&str]] = &[
    &["-q", "--limit", "0"],
    &["-q", "--limit", "0", "--format", "json"],
    &["-q", "--limit", "0", "--format", "json", "--mergeable"],
    &["-q", "--limit", "0", "--fingerprint", "pt", "--no-examples"],
    // Groups keyed by dimensions are named after their first event (the merge must take the
    // name from the worker that saw it first).
    &[
        "-q",
        "--limit",
        "0",
        "--group-by",
        "server,command",
        "--format",
        "json",
    ],
];

/// Every variant at 2, 3 and 4 threads equals 1 thread. Returns whether some run with more
/// than one thread fell back to one (its note).
fn same_across_threads(file: &Path) -> bool {
    let mut fell_back = false;
    for v in VARIANTS {
        let (one, _) = digest(v, 1, file);
        assert!(!one.is_empty(), "{}: no output", file.display());
        for n in 2..=4 {
            let (many, err) = digest(v, n, file);
            fell_back |= err.contains("note: --threads");
            assert!(
                one == many,
                "{} {v:?}: --threads {n} differs from --threads 1",
                file.display()
            );
        }
    }
    fell_back
}

#[test]
fn repository_captures_are_the_same_on_any_thread_count() {
    let mut files = vec![root().join("samples/mysql-sysbench.pcap.gz")];
    let data = root().join("crates/capture/tests/data");
    for e in std::fs::read_dir(&data).unwrap_or_else(|e| panic!("{e}")) {
        let p = e.unwrap_or_else(|e| panic!("{e}")).path();
        if p.extension().is_some_and(|x| x == "pcap" || x == "pcapng") {
            files.push(p);
        }
    }
    assert!(files.len() >= 4, "{files:?}");
    for f in &files {
        // These captures hold no fragments and reach no bound: the workers did the work.
        assert!(!same_across_threads(f), "{}: fell back", f.display());
    }
}

/// `conns` Redis connections, each with `rounds` PING/PONG exchanges interleaved with the
/// others', then (when `idle`) a pause longer than the idle timeout and one more exchange each,
/// so that the idle connections are closed by the expiry.
fn many_connections(conns: u16, rounds: u64, idle: bool) -> Vec<u8> {
    let mut sides: Vec<(Side, Side)> = (0..conns).map(|i| Side::pair(40000 + i, 6379)).collect();
    let mut recs = Vec::new();
    let mut t = 1_000_000u64;
    let round = |sides: &mut Vec<(Side, Side)>, t: &mut u64, recs: &mut Vec<_>| {
        for (i, (c, s)) in sides.iter_mut().enumerate() {
            // Every other connection leaves its last request unanswered now and then.
            recs.push((*t, c.send(PSH_ACK, b"*1\r\n$4\r\nPING\r\n")));
            if i % 7 != 3 {
                recs.push((*t + 50 + i as u64, s.send(PSH_ACK, b"+PONG\r\n")));
            }
            *t += 300;
        }
    };
    for _ in 0..rounds {
        round(&mut sides, &mut t, &mut recs);
        t += 400_000_000; // 0.4 s: the expiry runs every second of capture time
    }
    if idle {
        t += 700_000_000_000; // past the 10-minute idle timeout
        round(&mut sides, &mut t, &mut recs);
    }
    pcap(&recs)
}

#[test]
fn built_captures_are_the_same_on_any_thread_count() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let busy = dir.path().join("busy.pcap");
    std::fs::write(&busy, many_connections(64, 6, false)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!same_across_threads(&busy), "many connections fell back");
    // Connections of several workers closed idle at the same expiry: the order one thread
    // closes them in is not rebuilt, so that run falls back; the output is the same either way.
    let idle = dir.path().join("idle.pcap");
    std::fs::write(&idle, many_connections(16, 3, true)).unwrap_or_else(|e| panic!("{e}"));
    same_across_threads(&idle);
    // One idle connection alone: closed by one worker, no fallback needed.
    let one = dir.path().join("one-idle.pcap");
    std::fs::write(&one, many_connections(1, 3, true)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!same_across_threads(&one), "one idle connection fell back");
}

#[test]
fn fragments_run_on_one_thread_with_the_same_output() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (mut c, mut s) = Side::pair(40000, 6379);
    let req = tcp(c.sport, c.dport, c.seq, 1, PSH_ACK, b"*1\r\n$4\r\nPING\r\n");
    c.seq += 14;
    let recs = vec![
        (1_000_000, ipv4(c.src, c.dst, 9, 0, true, &req[..24])),
        (1_000_010, ipv4(c.src, c.dst, 9, 3, false, &req[24..])),
        (1_000_100, s.send(PSH_ACK, b"+PONG\r\n")),
    ];
    let f = dir.path().join("frag.pcap");
    std::fs::write(&f, pcap(&recs)).unwrap_or_else(|e| panic!("{e}"));
    assert!(same_across_threads(&f), "fragments did not fall back");
    let (json, _) = digest(&["-q", "--format", "json"], 2, &f);
    assert_eq!(num(&json, "ip_datagrams_reassembled"), 1, "{json}");
    assert_eq!(num(&json, "queries"), 1, "{json}");
}

/// Redis commands of distinct groups.
const COMMANDS: &[&str] = &[
    "GET", "INCR", "DEL", "EXISTS", "TTL", "TYPE", "LLEN", "SCARD", "HLEN", "STRLEN", "PTTL",
    "DECR", "LPOP", "RPOP", "SPOP", "ZCARD", "PERSIST", "DUMP",
];

/// `conns` connections sending commands of many groups, each group on several connections
/// (so on several workers); in the last round some requests stay unanswered, so that some groups
/// are first seen when the capture ends or (with `idle`) when idle connections are closed.
fn many_groups(conns: u16, rounds: usize, idle: bool) -> Vec<u8> {
    let mut sides: Vec<(Side, Side)> = (0..conns).map(|i| Side::pair(41000 + i, 6379)).collect();
    let mut recs = Vec::new();
    let mut t = 1_000_000u64;
    let req = |cmd: &str| format!("*2\r\n${}\r\n{cmd}\r\n$1\r\nk\r\n", cmd.len());
    for r in 0..rounds {
        for (i, (c, s)) in sides.iter_mut().enumerate() {
            let cmd = COMMANDS[(i * 5 + r * 3) % COMMANDS.len()];
            recs.push((t, c.send(PSH_ACK, req(cmd).as_bytes())));
            if !(r + 1 == rounds && i % 3 == 1) {
                recs.push((t + 40 + i as u64, s.send(PSH_ACK, b":1\r\n")));
            }
            t += 500;
        }
        t += 300_000_000;
    }
    if idle {
        // Past the idle timeout, half of the connections send one more request.
        t += 700_000_000_000;
        for (i, (c, _)) in sides.iter_mut().enumerate().filter(|(i, _)| i % 2 == 0) {
            let cmd = COMMANDS[(i * 7 + 1) % COMMANDS.len()];
            recs.push((t, c.send(PSH_ACK, req(cmd).as_bytes())));
            t += 1000;
        }
    }
    pcap(&recs)
}

#[test]
fn groups_first_seen_on_many_workers_keep_one_threads_order() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // Every group counted on several workers, some events made at the end (unanswered): the
    // merged statistics equal one thread's, no fallback. (The reports rank groups with a total
    // order, so the order groups were first seen in does not show in them.)
    let busy = dir.path().join("groups.pcap");
    std::fs::write(&busy, many_groups(24, 4, false)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!same_across_threads(&busy), "many groups fell back");
    let (text, _) = digest(&["-q", "--limit", "0"], 1, &busy);
    let shown = COMMANDS.iter().filter(|c| text.contains(*c)).count();
    assert!(shown >= 12, "{shown} groups: {text}");
    // And at idle expiry: a tie of two workers at one expiry falls back; the output is the
    // same either way.
    let idle = dir.path().join("groups-idle.pcap");
    std::fs::write(&idle, many_groups(24, 4, true)).unwrap_or_else(|e| panic!("{e}"));
    same_across_threads(&idle);
}

/// `conns` Redis connections each storing `rounds` values of 1,000 bytes: about 1.1 KB per
/// request, so that a few thousand requests span several of the reader's 1 MiB chunks.
fn big_values(conns: u16, rounds: u64) -> Vec<(u64, Vec<u8>)> {
    let mut sides: Vec<(Side, Side)> = (0..conns).map(|i| Side::pair(42000 + i, 6379)).collect();
    let mut recs = Vec::new();
    let mut t = 1_000_000u64;
    for r in 0..rounds {
        for (i, (c, s)) in sides.iter_mut().enumerate() {
            let key = format!("k{}", (r as usize * 7 + i) % 13);
            let val = vec![b'a' + (i % 26) as u8; 1000];
            let mut req = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1000\r\n", key.len());
            req.push_str(std::str::from_utf8(&val).unwrap_or_default());
            req.push_str("\r\n");
            recs.push((t, c.send(PSH_ACK, req.as_bytes())));
            recs.push((t + 30 + i as u64, s.send(PSH_ACK, b"+OK\r\n")));
            t += 200;
        }
        t += 100_000_000;
    }
    recs
}

/// The same records as a pcapng file: one section, one raw-IP interface (microseconds).
fn pcapng(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let block = |out: &mut Vec<u8>, btype: u32, body: &[u8]| {
        let len = (12 + body.len().next_multiple_of(4)) as u32;
        out.extend_from_slice(&btype.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
        out.resize(out.len() + body.len().next_multiple_of(4) - body.len(), 0);
        out.extend_from_slice(&len.to_le_bytes());
    };
    let mut out = Vec::new();
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    block(&mut out, 0x0a0d_0d0a, &shb);
    let mut idb = (LINKTYPE_RAW as u16).to_le_bytes().to_vec();
    idb.extend_from_slice(&[0, 0]);
    idb.extend_from_slice(&65535u32.to_le_bytes());
    block(&mut out, 1, &idb);
    for (ts, p) in records {
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(*ts as u32).to_le_bytes());
        epb.extend_from_slice(&(p.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(p.len() as u32).to_le_bytes());
        epb.extend_from_slice(p);
        block(&mut out, 6, &epb);
    }
    out
}

/// A capture of several of the reader's chunks, as pcap, pcapng and gzip: frames cut across
/// the chunks' boundaries are read whole (the reader hands its read buffers to the workers).
#[test]
fn captures_of_many_chunks_are_the_same_on_any_thread_count() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let recs = big_values(64, 48);
    let plain = dir.path().join("big.pcap");
    std::fs::write(&plain, pcap(&recs)).unwrap_or_else(|e| panic!("{e}"));
    let ng = dir.path().join("big.pcapng");
    std::fs::write(&ng, pcapng(&recs)).unwrap_or_else(|e| panic!("{e}"));
    let st = Command::new("gzip")
        .args(["-k", "-1"])
        .arg(&plain)
        .status()
        .unwrap_or_else(|e| panic!("gzip: {e}"));
    assert!(st.success());
    let gz = dir.path().join("big.pcap.gz");
    let size = std::fs::metadata(&plain).map_or(0, |m| m.len());
    assert!(size > 3 << 20, "{size} bytes: fewer than three chunks");
    let (expect, _) = digest(&["-q", "--format", "json"], 1, &plain);
    assert_eq!(num(&expect, "queries"), 64 * 48, "{expect}");
    for f in [&plain, &ng, &gz] {
        for v in [&["-q", "--limit", "0"][..], &["-q", "--format", "json"]] {
            let (one, _) = digest(v, 1, f);
            for n in [2, 3] {
                let (many, err) = digest(v, n, f);
                assert!(
                    !err.contains("note: --threads"),
                    "{}: fell back: {err}",
                    f.display()
                );
                assert!(one == many, "{} {v:?}: --threads {n} differs", f.display());
            }
        }
        let (json, _) = digest(&["-q", "--format", "json"], 2, f);
        assert_eq!(num(&json, "queries"), 64 * 48, "{}: {json}", f.display());
    }
}

/// Captures of many chunks (pcap, pcapng, and one cut short in a record) read by 2 and 3
/// workers give one thread's output, and the cut one the same warning at the same offset.
#[test]
fn captures_of_many_chunks_are_the_same_as_one_threads() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // About 7 MB: more chunks than the queue holds, so buffers are reused during the read.
    let recs = big_values(64, 100);
    let plain = dir.path().join("big.pcap");
    let bytes = pcap(&recs);
    std::fs::write(&plain, &bytes).unwrap_or_else(|e| panic!("{e}"));
    let ng = dir.path().join("big.pcapng");
    std::fs::write(&ng, pcapng(&recs)).unwrap_or_else(|e| panic!("{e}"));
    let cut = dir.path().join("cut.pcap");
    let half = bytes.get(..bytes.len() / 2 + 7).unwrap_or_default();
    std::fs::write(&cut, half).unwrap_or_else(|e| panic!("{e}"));
    assert!(bytes.len() > 7 << 20, "{} bytes", bytes.len());
    for f in [&plain, &ng, &cut] {
        for v in [&["-q", "--limit", "0"][..], &["-q", "--format", "json"]] {
            let (one, one_err) = digest(v, 1, f);
            for n in [2, 3] {
                let (m, m_err) = digest(v, n, f);
                assert!(!m_err.contains("note: --threads"), "fell back: {m_err}");
                assert!(one == m, "{} {v:?}: --threads {n} differs", f.display());
                let warning = |e: &str| {
                    e.lines()
                        .find(|l| l.contains("cut short"))
                        .map(|l| l.split("; the report").next().unwrap_or(l).to_string())
                };
                assert_eq!(warning(&one_err), warning(&m_err), "{}", f.display());
                assert_eq!(warning(&m_err).is_some(), *f == cut, "{m_err}");
            }
        }
    }
}

/// Redis connections of unequal weight whose 4-tuples are used again: closed by FIN or RST and
/// opened anew with a SYN 20 s later (after the flow table forgot them), and again at once
/// (while it still remembers them, or while the last life is still open: its SYN closes it),
/// between new connections on fresh ports.
fn reused_tuples() -> Vec<u8> {
    const SYN: u8 = 0x02;
    const SYN_ACK: u8 = 0x12;
    const RST_ACK: u8 = 0x14;
    let mut recs = Vec::new();
    let mut t = 1_000_000u64;
    let ping = b"*1\r\n$4\r\nPING\r\n";
    // One life of the connection on `port`: `n` exchanges (opened with a SYN when `syn`), then
    // closed by FIN both ways, RST, or not at all (`end` 0, 1, 2).
    let mut lives = 0u32;
    let mut life = |port: u16, n: usize, syn: bool, end: u8, t: &mut u64| {
        let (mut c, mut s) = Side::pair(port, 6379);
        // A fresh initial sequence number each life, as a new connection has.
        lives += 1;
        (c.seq, s.seq) = (c.seq + lives * 100_000, s.seq + lives * 100_000);
        if syn {
            recs.push((*t, c.send(SYN, b"")));
            recs.push((*t + 10, s.send(SYN_ACK, b"")));
            (c.seq, s.seq) = (c.seq + 1, s.seq + 1);
        }
        for i in 0..n {
            recs.push((*t + 100 + 40 * i as u64, c.send(PSH_ACK, ping)));
            recs.push((*t + 120 + 40 * i as u64, s.send(PSH_ACK, b"+PONG\r\n")));
        }
        *t += 100 + 40 * n as u64;
        if end == 2 {
            // A last request left unanswered: the next life's SYN ends this one.
            recs.push((*t, c.send(PSH_ACK, ping)));
        } else if end == 1 {
            recs.push((*t, c.send(RST_ACK, b"")));
        } else if end == 0 {
            recs.push((*t, c.send(FIN_ACK, b"")));
            recs.push((*t + 10, s.send(FIN_ACK, b"")));
        }
        *t += 1_000;
    };
    for (port, n) in [
        (40000, 300),
        (40001, 5),
        (40002, 40),
        (40003, 2),
        (40004, 90),
    ] {
        life(port, n, port % 2 == 0, u8::from(port == 40003), &mut t);
    }
    t += 20_000_000_000;
    for (port, n, end) in [
        (40003, 200, 0),
        (40005, 7, 2),
        (40000, 3, 0),
        (40001, 60, 1),
    ] {
        life(port, n, true, end, &mut t);
    }
    for (port, n) in [
        (40001, 9),
        (40005, 4),
        (40003, 4),
        (40007, 120),
        (40000, 30),
    ] {
        life(port, n, true, 0, &mut t);
    }
    pcap(&recs)
}

#[test]
fn reused_tuples_and_unequal_connections_are_the_same_on_any_thread_count() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let f = dir.path().join("reused.pcap");
    std::fs::write(&f, reused_tuples()).unwrap_or_else(|e| panic!("{e}"));
    let (one, _) = digest(&["-q", "--format", "json"], 1, &f);
    // Every life was read as a connection of its own: 14 of them, 875 PINGs.
    assert_eq!(num(&one, "connections"), 14, "{one}");
    assert_eq!(num(&one, "queries"), 875, "{one}");
    assert!(!same_across_threads(&f), "reused tuples fell back");
}
