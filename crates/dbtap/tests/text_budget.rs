//! Memory bounded across connections: 30 PostgreSQL connections each sending a 40 MB query at
//! once keep at most `--max-text-total` of statement text; beyond it a request keeps a prefix
//! of its text, is still counted, and the health says how many were cut. The capture is a
//! sparse file (the queries' long literals are holes), built here byte by byte.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

mod common;
use common::*;

const CONNS: u16 = 30;
/// Each query message's body length.
const QUERY_LEN: usize = 40_000_000;
/// Bytes of `a` after `SELECT '` (written); the rest of the literal is zeros (a hole).
const VISIBLE: usize = 64 * 1024;
/// TCP payload per captured segment.
const SEG: usize = 65_000;
const SYN: u8 = 0x02;
const SYN_ACK: u8 = 0x12;

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A pcap written sparsely: zeros at the end of a record are left as a hole.
struct Sparse {
    f: File,
    at: u64,
    ts: u64,
}

impl Sparse {
    fn put(&mut self, bytes: &[u8], hole: u64) {
        self.f
            .write_all_at(bytes, self.at)
            .unwrap_or_else(|e| panic!("write: {e}"));
        self.at += bytes.len() as u64 + hole;
    }

    /// A packet of `len` bytes of which `bytes` are the first; the rest (zeros) is a hole.
    fn record_prefix(&mut self, bytes: &[u8], len: usize) {
        self.ts += 10;
        let mut r = record_header(self.ts, len);
        r.extend_from_slice(bytes);
        self.put(&r, (len - bytes.len()) as u64);
    }

    /// One packet; its trailing zeros (after `keep` bytes, at least) become a hole.
    fn record(&mut self, pkt: &[u8], keep: usize) {
        self.ts += 10;
        let last = pkt
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |i| i + 1)
            .max(keep)
            .min(pkt.len());
        let mut r = record_header(self.ts, pkt.len());
        r.extend_from_slice(&pkt[..last]);
        self.put(&r, (pkt.len() - last) as u64);
    }
}

/// The capture, written sparsely at `path`: every connection opens (SYN), logs in, then all
/// send their query a segment each in turn, then each is answered.
fn write_capture(path: &Path) {
    let f = File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    let mut w = Sparse {
        f,
        at: 0,
        ts: 1_000_000,
    };
    w.put(&pcap_header(), 0);
    let mut sides: Vec<(Side, Side)> = (0..CONNS).map(|i| Side::pair(30_000 + i, 5432)).collect();
    let mut startup = Vec::new();
    startup.extend_from_slice(&196_608u32.to_be_bytes());
    startup.extend_from_slice(b"user\0app\0\0");
    let mut startup_msg = (startup.len() as u32 + 4).to_be_bytes().to_vec();
    startup_msg.extend_from_slice(&startup);
    let mut login = msg(b'R', &0u32.to_be_bytes());
    login.extend(msg(b'Z', b"I"));
    for (c, s) in sides.iter_mut() {
        c.seq -= 1;
        s.seq -= 1;
        w.record(&c.send(SYN, &[]), usize::MAX);
        w.record(&s.send(SYN_ACK, &[]), usize::MAX);
        c.seq += 1;
        s.seq += 1;
        w.record(&c.send(PSH_ACK, &startup_msg), usize::MAX);
        w.record(&s.send(PSH_ACK, &login), usize::MAX);
    }
    // The query's bytes: a header and `SELECT 'aaa…` written, the rest of the literal a hole,
    // then `'` and the terminating NUL.
    let mut head = vec![b'Q'];
    head.extend_from_slice(&(QUERY_LEN as u32 + 4).to_be_bytes());
    head.extend_from_slice(b"SELECT '");
    head.extend(std::iter::repeat_n(b'a', VISIBLE));
    let total = 5 + QUERY_LEN;
    let mut sent = 0usize;
    while sent < total {
        let n = SEG.min(total - sent);
        let mut p = vec![0u8; n];
        if let Some(h) = head.get(sent..) {
            let k = h.len().min(n);
            p[..k].copy_from_slice(&h[..k]);
        }
        if sent + n == total {
            p[n - 2] = b'\'';
        }
        let visible = head.get(sent..).map_or(0, |h| h.len().min(n));
        for (c, _) in sides.iter_mut() {
            if sent + n == total {
                let pkt = c.send(PSH_ACK, &p);
                // The IP and TCP headers are always written.
                w.record(&pkt, pkt.len() - n);
                continue;
            }
            // The headers and the visible bytes, without building the zeros.
            let mut pkt = ipv4_header(c.src, c.dst, IP_TCP, (1, 0, false), 20 + n);
            pkt.extend(tcp(c.sport, c.dport, c.seq, 1, PSH_ACK, &[]));
            c.seq = c.seq.wrapping_add(n as u32);
            let len = pkt.len() + n;
            pkt.extend_from_slice(&p[..visible]);
            w.record_prefix(&pkt, len);
        }
        sent += n;
    }
    let mut done = msg(b'C', b"SELECT 1\0");
    done.extend(msg(b'Z', b"I"));
    for (_, s) in sides.iter_mut() {
        w.record(&s.send(PSH_ACK, &done), usize::MAX);
    }
    w.f.set_len(w.at)
        .unwrap_or_else(|e| panic!("size {}: {e}", path.display()));
}

#[test]
fn thirty_forty_megabyte_queries_stay_within_the_text_budget() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cap = dir.path().join("big.pcap");
    write_capture(&cap);
    // DBTAP_TEXT_BUDGET_BIN runs another build on the same capture (to compare by hand).
    let bin = std::env::var("DBTAP_TEXT_BUDGET_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_dbtap").to_string());
    let time = Path::new("/usr/bin/time");
    let timed = time.exists();
    if !timed {
        eprintln!("/usr/bin/time is missing: peak RSS not checked");
    }
    let mut cmd = if timed {
        let mut c = Command::new(time);
        c.args(["-f", "%M", &bin]);
        c
    } else {
        Command::new(&bin)
    };
    let out = cmd
        .args(["digest", "--format", "json", "--quiet"])
        .arg(&cap)
        .output()
        .unwrap_or_else(|e| panic!("run dbtap: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let kib: u64 = if timed {
        err.lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no peak RSS in {err:?}"))
    } else {
        0
    };
    eprintln!("peak RSS {kib} KiB");
    let j = String::from_utf8_lossy(&out.stdout);
    // Every query counted, answered and timed; the bytes exact.
    assert_eq!(num(&j, "queries"), u64::from(CONNS), "{j}");
    assert_eq!(num(&j, "connections"), u64::from(CONNS));
    assert_eq!(num(&j, "unanswered"), 0);
    assert_eq!(num(&j, "gaps"), 0);
    assert_eq!(num(&j, "ok"), u64::from(CONNS));
    assert_eq!(
        num(&j, "bytes_in"),
        u64::from(CONNS) * (5 + QUERY_LEN as u64),
        "{j}"
    );
    assert!(
        j.contains(&format!("\"latency_us\": {{\n      \"count\": {CONNS},")),
        "{j}"
    );
    // 64 MiB holds three 16 MiB (max_text) texts whole and part of a fourth: the fourth and
    // every later one keep a prefix.
    let full = (64usize << 20) / ((16 << 20) + 1);
    assert_eq!(
        num(&j, "text_cut_by_budget"),
        u64::from(CONNS) - full as u64,
        "{j}"
    );
    let warning = format!(
        "{} request(s)' text cut to a prefix by --max-text-total ({} bytes",
        CONNS - full as u16,
        64 << 20
    );
    assert!(err.contains(&warning), "{err}");
    if timed {
        // Without the budget, 30 connections x 16 MiB (max_text) buffered = 480 MiB and more.
        assert!(kib < 200 << 10, "peak RSS {kib} KiB");
    }
}
