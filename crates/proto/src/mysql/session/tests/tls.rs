//! Connections read on inside TLS: `start_tls` after the SSL request, and sessions opened
//! with `after_tls` (greeting and SSL request never delivered).

use super::*;
use crate::{Progress, Session};

/// The SSL request: the first 32 bytes of a handshake response, CLIENT_SSL set, no user.
fn ssl_request(c: u64) -> Vec<u8> {
    let mut ssl = response(c, "", None)[..32].to_vec();
    ssl[..4].copy_from_slice(&(c as u32 & !(caps::CLIENT_CONNECT_WITH_DB as u32)).to_le_bytes());
    ssl
}

/// Feeds `t` in pieces of at most `chunk` bytes; returns the last progress.
fn feed(
    s: &mut MysqlSession,
    t: &[(Direction, Vec<u8>, u64)],
    chunk: usize,
    sink: &mut VecSink,
) -> Progress {
    let mut p = Progress::Continue;
    for (d, bytes, ts) in t {
        for piece in bytes.chunks(chunk) {
            p = s.feed(*d, piece, *ts, sink);
        }
    }
    p
}

fn meta_after_tls(saw_open: bool) -> ConnMeta {
    ConnMeta {
        after_tls: true,
        ..meta(saw_open)
    }
}

const CHUNKS: [usize; 3] = [usize::MAX, 1, 7];

#[test]
fn ssl_request_then_start_tls_reads_the_login_and_the_commands() {
    let c = BASE_CAPS | caps::CLIENT_SSL | caps::CLIENT_DEPRECATE_EOF;
    let mut b = B::new();
    b.srv(vec![greeting(c)]);
    b.cli(vec![ssl_request(c)]);
    // Inside TLS: the real handshake response (sequence id 2), OK, then commands.
    b.cli(vec![response(c, "app", Some("shop"))]);
    b.srv(vec![ok(0, 2)]);
    b.cmd(query("SELECT id FROM t"));
    b.srv(resultset(&["id"], &[&["1"], &["2"]], true, 2));
    b.cmd(query("UPDATE t SET a = 1"));
    b.srv(vec![ok(3, 2)]);
    assert_eq!(b.t[2].1[3], 2, "the handshake response has sequence id 2");
    for chunk in CHUNKS {
        let mut s = session(true);
        let mut sink = VecSink::default();
        assert_eq!(feed(&mut s, &b.t[..2], chunk, &mut sink), Progress::Stop);
        assert_eq!(sink.health.encrypted_connections, 1);
        assert!(s.start_tls());
        assert_eq!(
            feed(&mut s, &b.t[2..], chunk, &mut sink),
            Progress::Continue
        );
        s.close(b.ts + 1, &mut sink);
        assert_eq!(
            sink.health,
            Default::default(),
            "chunk {chunk}: read after all, not encrypted"
        );
        assert_eq!(cmds(&sink.events), ["query", "query"]);
        let e = &sink.events[0];
        assert_eq!(text(e), "SELECT id FROM t");
        assert_eq!(e.user.as_deref(), Some("app"));
        assert_eq!(e.database.as_deref(), Some("shop"));
        assert_eq!(e.rows_sent, 2);
        assert_eq!(e.outcome, Outcome::Ok);
        assert_eq!(sink.events[1].rows_affected, 3);
        assert_eq!(sink.events[1].user.as_deref(), Some("app"));
    }
}

#[test]
fn start_tls_is_refused_in_the_middle_of_a_conversation() {
    let c = BASE_CAPS;
    let mut b = B::new();
    b.handshake(c, "app", None);
    b.cmd(query("SELECT 1"));
    let mut s = session(true);
    let mut sink = VecSink::default();
    feed(&mut s, &b.t, usize::MAX, &mut sink);
    assert!(!s.start_tls());
    // A packet capture never calls start_tls: the count stays.
    let mut b = B::new();
    b.srv(vec![greeting(c | caps::CLIENT_SSL)]);
    b.cli(vec![ssl_request(c | caps::CLIENT_SSL)]);
    let mut s = session(true);
    let mut sink = VecSink::default();
    feed(&mut s, &b.t, usize::MAX, &mut sink);
    s.close(b.ts, &mut sink);
    assert_eq!(sink.health.encrypted_connections, 1);
}

/// The transcript after TLS: handshake response (sequence id 2), OK, a result set, an OK.
fn after_tls_transcript(c: u64) -> B {
    let deprecate = c & caps::CLIENT_DEPRECATE_EOF != 0;
    let mut b = B::new();
    b.seq = 2;
    b.cli(vec![response(c, "report", Some("sales"))]);
    b.srv(vec![ok(0, 2)]);
    b.cmd(query("SELECT a, b FROM t"));
    b.srv(resultset(&["a", "b"], &[&["1", "x"]], deprecate, 2));
    b.cmd(query("DELETE FROM t"));
    b.srv(vec![ok(1, 2)]);
    b
}

fn check_after_tls(r: &VecSink, deprecate: bool) {
    assert_eq!(r.health, Default::default(), "deprecate {deprecate}");
    assert_eq!(cmds(&r.events), ["query", "query"]);
    for e in &r.events {
        assert_eq!(e.user.as_deref(), Some("report"));
        assert_eq!(e.database.as_deref(), Some("sales"));
        assert_eq!(e.outcome, Outcome::Ok);
    }
    assert_eq!(text(&r.events[0]), "SELECT a, b FROM t");
    assert_eq!(r.events[0].rows_sent, 1);
    assert_eq!(r.events[1].rows_affected, 1);
}

#[test]
fn after_tls_open_starts_at_the_handshake_response() {
    for deprecate in [true, false] {
        let c = BASE_CAPS
            | caps::CLIENT_SSL
            | if deprecate {
                caps::CLIENT_DEPRECATE_EOF
            } else {
                0
            };
        let b = after_tls_transcript(c);
        for saw_open in [true, false] {
            let make = || {
                super::super::super::new_session(meta_after_tls(saw_open), SessionConfig::default())
            };
            let r = assert_chunking_invariant(make, &b.steps());
            check_after_tls(&r, deprecate);
        }
        // A session that was fed nothing and is told the stream is TLS from now on reads
        // it the same way.
        let make = || {
            let mut s = session(true);
            assert!(s.start_tls());
            s
        };
        check_after_tls(&assert_chunking_invariant(make, &b.steps()), deprecate);
    }
}

#[test]
fn after_tls_with_compression_and_a_refused_login() {
    let c = BASE_CAPS | caps::CLIENT_SSL | caps::CLIENT_COMPRESS;
    let mut b = B::new();
    b.seq = 2;
    b.cli(vec![response(c, "app", None)]);
    b.srv(vec![ok(0, 2)]);
    b.comp = Some(Codec::Zlib);
    b.cmd(query("SELECT 1"));
    b.srv(vec![ok(0, 2)]);
    let make = || super::super::super::new_session(meta_after_tls(true), SessionConfig::default());
    let r = assert_chunking_invariant(make, &b.steps());
    assert_eq!(r.health, Default::default());
    assert_eq!(cmds(&r.events), ["query"]);
    let mut b = B::new();
    b.seq = 2;
    b.cli(vec![response(BASE_CAPS, "bad", None)]);
    b.srv(vec![err(1045, "28000", "Access denied for user 'bad'")]);
    let r = assert_chunking_invariant(make, &b.steps());
    assert_eq!(cmds(&r.events), ["connect"]);
    assert_eq!(r.events[0].user.as_deref(), Some("bad"));
    assert_eq!(r.events[0].outcome, Outcome::Error);
}
