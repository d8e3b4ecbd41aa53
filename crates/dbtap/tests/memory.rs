//! Memory bounded by configuration, not by input: thousands of capture files on one command
//! line within a small file-descriptor limit, and more never-closed connections than the cap on
//! tracked connections. Captures are built here byte by byte.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::*;

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";

fn run(args: &[&str], files: &[PathBuf]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dbtap"))
        .args(args)
        .args(files)
        .output()
        .unwrap_or_else(|e| panic!("run dbtap: {e}"))
}

/// UDP datagrams of this many bytes of zeros pad each file, so that a reader buffering every
/// file at once would hold them all.
const PAD: usize = 65_535 - 28;
/// Padding datagrams per file: each file is about 197 KB.
const PADS: u64 = 3;

/// Writes one rotated file: a Redis PING and its PONG on its own mid-stream connection, then
/// [`PADS`] UDP datagrams of zeros. The zeros are holes of a sparse file: cheap to write, but
/// read as bytes.
fn write_rotated(dir: &Path, i: u16) -> PathBuf {
    let (mut c, mut s) = Side::pair(20_000 + i, 6379);
    let t = 1_000_000 + u64::from(i) * 1_000;
    let p = dir.join(format!("r{i:04}.pcap"));
    let f = File::create(&p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
    let put = |bytes: &[u8], at: u64| {
        f.write_all_at(bytes, at)
            .unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        at + bytes.len() as u64
    };
    let mut at = put(
        &pcap(&[(t, c.send(PSH_ACK, PING)), (t + 100, s.send(PSH_ACK, PONG))]),
        0,
    );
    for k in 0..PADS {
        let mut head = record_header(t + 200 + k, 28 + PAD);
        head.extend_from_slice(&ipv4_header(CLIENT, SERVER, IP_UDP, (1, 0, false), 8 + PAD));
        head.extend_from_slice(&9u16.to_be_bytes());
        head.extend_from_slice(&9u16.to_be_bytes());
        head.extend_from_slice(&((8 + PAD) as u16).to_be_bytes());
        head.extend_from_slice(&[0, 0]);
        // The zeros after the header: left as a hole.
        at = put(&head, at) + PAD as u64;
    }
    f.set_len(at)
        .unwrap_or_else(|e| panic!("size {}: {e}", p.display()));
    p
}

/// Peak RSS (KiB) of a run whose stderr ends with `/usr/bin/time -f %M`'s line.
fn peak_rss_kib(stderr: &str) -> Option<u64> {
    stderr.lines().last().and_then(|l| l.trim().parse().ok())
}

#[test]
fn thousands_of_files_within_a_small_fd_limit_and_flat_memory() {
    const FILES: u16 = 3_000;
    // In memory when there is a tmpfs: creating 3,000 files on a disk can take seconds.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir())
    } else {
        tempfile::tempdir()
    }
    .unwrap_or_else(|e| panic!("{e}"));
    let files: Vec<PathBuf> = (0..FILES).map(|i| write_rotated(dir.path(), i)).collect();
    let time = Path::new("/usr/bin/time");
    let timed = time.exists();
    if !timed {
        eprintln!("/usr/bin/time is missing: peak RSS not checked, only the fd limit");
    }
    // The limit is set by the shell, which then becomes dbtap (optionally through time).
    let script = if timed {
        "ulimit -n 256 && exec /usr/bin/time -f %M \"$0\" \"$@\""
    } else {
        "ulimit -n 256 && exec \"$0\" \"$@\""
    };
    let out = Command::new("sh")
        .args(["-c", script, env!("CARGO_BIN_EXE_dbtap")])
        .args(["digest", "--format", "json", "--quiet"])
        .args(&files)
        .output()
        .unwrap_or_else(|e| panic!("run sh: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let j = String::from_utf8_lossy(&out.stdout);
    assert_eq!(num(&j, "queries"), u64::from(FILES), "{err}");
    assert_eq!(num(&j, "connections"), u64::from(FILES));
    assert_eq!(num(&j, "packets"), u64::from(FILES) * (2 + PADS));
    assert_eq!(num(&j, "read_errors"), 0);
    // Every file is named in the report, in order.
    let first = j.find("r0000.pcap").unwrap_or(usize::MAX);
    let last = j.find("r2999.pcap").unwrap_or(0);
    assert!(first < last, "files not listed in order");
    if timed {
        let kib = peak_rss_kib(&err).unwrap_or_else(|| panic!("no peak RSS in {err:?}"));
        // Holding every file's first read at once would take 3,000 x 197 KB = 590 MB.
        assert!(
            kib < 100 << 10,
            "peak RSS {kib} KiB for {FILES} files of 197 KB"
        );
    }
}

#[test]
fn a_missing_file_fails_before_any_is_read() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let good = write_rotated(dir.path(), 0);
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a capture\n").unwrap_or_else(|e| panic!("{e}"));
    let missing = dir.path().join("missing.pcap");
    for bad in [&missing, &text] {
        let out = run(&["events", "--quiet"], &[good.clone(), bad.clone()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(out.stdout.is_empty(), "events printed before the error");
        assert!(
            err.lines().count() == 1 && err.contains(&*bad.to_string_lossy()),
            "{err}"
        );
    }
}

/// `conns` mid-stream Redis connections, one after another: each a PING answered, then a PING
/// never answered, and never closed.
fn never_closed(conns: u16) -> Vec<u8> {
    let mut recs = Vec::new();
    for i in 0..conns {
        let (mut c, mut s) = Side::pair(10_000 + i, 6379);
        let t = 1_000_000 + u64::from(i) * 1_000;
        recs.push((t, c.send(PSH_ACK, PING)));
        recs.push((t + 100, s.send(PSH_ACK, PONG)));
        recs.push((t + 200, c.send(PSH_ACK, PING)));
    }
    pcap(&recs)
}

#[test]
fn connections_beyond_the_cap_are_evicted_counted_and_their_requests_kept() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let f = dir.path().join("conns.pcap");
    std::fs::write(&f, never_closed(1_000)).unwrap_or_else(|e| panic!("{e}"));
    let fs = [f];
    let cap = ["--max-connections", "100", "--quiet"];
    let out = run(&[&["digest", "--format", "json"][..], &cap].concat(), &fs);
    let j = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(num(&j, "connections"), 1_000, "{j}");
    assert_eq!(num(&j, "connections_evicted"), 900, "{j}");
    // Every request is counted: the answered ones, and the unanswered ones of the evicted
    // connections (closed like idle ones) and of those still open at the end.
    assert_eq!(num(&j, "queries"), 2_000, "{j}");
    assert_eq!(num(&j, "no_response"), 1_000);
    assert_eq!(num(&j, "unanswered"), 1_000);
    // The answered ones kept their latency.
    assert!(
        j.contains("\"latency_us\": {\n      \"count\": 1000,"),
        "{j}"
    );
    assert_eq!(num(&j, "not_tracked_segments"), 0);
    assert!(j.contains("\"complete\": false"), "{j}");

    let out = run(&[&["digest"][..], &cap].concat(), &fs);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.lines()
            .any(|l| l.contains("!! connections_evicted") && l.contains(" 900 ")),
        "{t}"
    );
    // And how to keep more.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("900 connection(s) were closed early to track at most 100 at once")
            && err.contains("--max-connections"),
        "{err}"
    );

    // The default cap is far above 1,000: nothing evicted.
    let out = run(&["digest", "--format", "json", "--quiet"], &fs);
    let j = String::from_utf8_lossy(&out.stdout);
    assert_eq!(num(&j, "connections_evicted"), 0, "{j}");
    assert_eq!(num(&j, "queries"), 2_000);

    // Events: one line per request either way.
    let out = run(&[&["events"][..], &cap].concat(), &fs);
    assert!(out.status.success());
    assert_eq!(out.stdout.iter().filter(|&&b| b == b'\n').count(), 2_000);
}

#[test]
fn memory_follows_the_connection_cap_not_the_connection_count() {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        eprintln!("/usr/bin/time is missing: peak RSS not checked");
        return;
    }
    // 30,000 connections that never close: about 100 MB if all were tracked.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let f = dir.path().join("conns.pcap");
    let mut recs = Vec::new();
    for i in 0..30_000u32 {
        let (mut c, mut s) = Side::pair(10_000 + (i % 50_000) as u16, 6379);
        c.src = [10, 1 + (i >> 16) as u8, (i >> 8) as u8, i as u8];
        s.dst = c.src;
        let t = 1_000_000 + u64::from(i) * 10;
        recs.push((t, c.send(PSH_ACK, PING)));
        recs.push((t + 5, s.send(PSH_ACK, PONG)));
        recs.push((t + 8, c.send(PSH_ACK, PING)));
    }
    std::fs::write(&f, pcap(&recs)).unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(time)
        .args(["-f", "%M", env!("CARGO_BIN_EXE_dbtap")])
        .args([
            "digest",
            "--format",
            "json",
            "--quiet",
            "--max-connections",
            "1000",
        ])
        .arg(&f)
        .output()
        .unwrap_or_else(|e| panic!("run time: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let j = String::from_utf8_lossy(&out.stdout);
    assert_eq!(num(&j, "connections"), 30_000, "{j}");
    assert_eq!(num(&j, "queries"), 60_000);
    assert_eq!(num(&j, "unanswered"), 30_000);
    let kib = peak_rss_kib(&err).unwrap_or_else(|| panic!("no peak RSS in {err:?}"));
    // 1,000 connections of about 3 KB over a baseline of about 10 MB.
    assert!(
        kib < 48 << 10,
        "peak RSS {kib} KiB with 1,000 connections tracked"
    );
    assert_eq!(num(&j, "connections_evicted"), 29_000);
}
