//! Connections read on inside TLS: `start_tls` after SSLRequest and 'S' (or a direct TLS
//! ClientHello), and sessions opened with `after_tls`.

use super::*;
use crate::Progress;

/// Feeds `t` in pieces of at most `chunk` bytes; returns the last progress.
fn feed(
    s: &mut PgSession,
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

/// Inside TLS: startup with password auth, a simple query, an extended-protocol execution.
fn inside(b: &mut B) {
    b.startup()
        .cli(&[query("SELECT * FROM t")])
        .srv(&[
            row_desc(&["a"]),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
            ready(b'I'),
        ])
        .cli(&[
            parse("", "UPDATE t SET a = $1"),
            bind("", ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            msg(b'1', b""),
            msg(b'2', b""),
            complete("UPDATE 4"),
            ready(b'I'),
        ]);
}

fn check(sink: &VecSink) {
    assert_eq!(sink.health, Health::default());
    let commands: Vec<&str> = sink.events.iter().map(|e| e.command).collect();
    assert_eq!(commands, ["query", "prepare", "execute"]);
    assert_eq!(
        texts(&sink.events),
        [
            "SELECT * FROM t",
            "UPDATE t SET a = $1",
            "UPDATE t SET a = $1"
        ]
    );
    for e in &sink.events {
        assert_eq!(e.user.as_deref(), Some("app"));
        assert_eq!(e.database.as_deref(), Some("shop"));
        assert_eq!(e.outcome, Outcome::Ok);
    }
    assert_eq!(sink.events[0].rows_sent, 1);
    assert_eq!(sink.events[2].rows_affected, 4);
}

#[test]
fn ssl_request_s_then_start_tls_reads_the_startup_and_the_queries() {
    let mut b = B::new();
    b.seg(C, untyped(code::SSL_REQUEST, b""))
        .seg(S, b"S".to_vec());
    inside(&mut b);
    for chunk in [usize::MAX, 1, 5] {
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
        check(&sink);
    }
}

#[test]
fn direct_tls_then_start_tls() {
    let mut b = B::new();
    b.seg(C, vec![0x16, 0x03, 0x01, 0x00, 0x10, 1, 0, 0, 0]);
    inside(&mut b);
    let mut s = session(true);
    let mut sink = VecSink::default();
    assert_eq!(
        feed(&mut s, &b.t[..1], usize::MAX, &mut sink),
        Progress::Stop
    );
    assert!(s.start_tls());
    feed(&mut s, &b.t[1..], usize::MAX, &mut sink);
    s.close(b.ts + 1, &mut sink);
    check(&sink);
}

#[test]
fn gssapi_and_a_running_conversation_refuse_start_tls() {
    let mut s = session(true);
    let mut sink = VecSink::default();
    s.feed(C, &untyped(code::GSSENC_REQUEST, b""), 1, &mut sink);
    assert_eq!(s.feed(S, b"G", 2, &mut sink), Progress::Stop);
    assert!(!s.start_tls());
    s.close(3, &mut sink);
    assert_eq!(sink.health.encrypted_connections, 1);
    let mut b = B::new();
    b.startup();
    let mut s = session(true);
    let mut sink = VecSink::default();
    feed(&mut s, &b.t, usize::MAX, &mut sink);
    assert!(!s.start_tls());
}

#[test]
fn after_tls_open_starts_at_the_startup_message() {
    let mut b = B::new();
    inside(&mut b);
    for saw_open in [true, false] {
        let make = || {
            let m = ConnMeta {
                after_tls: true,
                ..meta(saw_open)
            };
            super::super::super::new_session(m, SessionConfig::default())
        };
        check(&assert_chunking_invariant(make, &b.steps()));
    }
    // Told before any byte that the stream is TLS: the same.
    let make = || {
        let mut s = session(true);
        assert!(s.start_tls());
        s
    };
    check(&assert_chunking_invariant(make, &b.steps()));
}
