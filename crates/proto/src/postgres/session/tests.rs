//! Byte-literal tests of the session: every message type and flow, fed in every chunking.

use std::net::SocketAddr;
use std::sync::Arc;

use super::super::wire::{code, put_message, put_startup};
use super::{PgSession, TxStatus};
use crate::testing::{
    Chunking, Step, Transcript, assert_chunking_invariant, assert_chunkings, run_steps, steps,
    with_gap,
};
use crate::{ConnMeta, Direction, Health, Outcome, QueryEvent, Session, SessionConfig, VecSink};

const C: Direction = Direction::ToServer;
const S: Direction = Direction::ToClient;

fn meta(saw_open: bool) -> ConnMeta {
    ConnMeta {
        id: 9,
        client: "10.0.0.1:50000".parse::<SocketAddr>().unwrap().into(),
        server: "10.0.0.2:5432".parse::<SocketAddr>().unwrap().into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

fn session(saw_open: bool) -> PgSession {
    super::super::new_session(meta(saw_open), SessionConfig::default())
}

// ---- message builders --------------------------------------------------------------------

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_message(&mut out, tag, body);
    out
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

fn startup(user: &str, db: Option<&str>) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(cstr("user"));
    body.extend(cstr(user));
    if let Some(db) = db {
        body.extend(cstr("database"));
        body.extend(cstr(db));
    }
    body.extend(cstr("application_name"));
    body.extend(cstr("test"));
    body.push(0);
    let mut out = Vec::new();
    put_startup(&mut out, code::PROTOCOL_3_0, &body);
    out
}

fn untyped(code: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_startup(&mut out, code, body);
    out
}

fn auth_ok() -> Vec<u8> {
    let mut v = msg(b'R', &[0, 0, 0, 0]);
    let mut ps = cstr("server_version");
    ps.extend(cstr("15.20"));
    v.extend(msg(b'S', &ps));
    v.extend(msg(b'K', &[0, 0, 0, 42, 1, 2, 3, 4]));
    v.extend(ready(b'I'));
    v
}

fn query(sql: &str) -> Vec<u8> {
    msg(b'Q', &cstr(sql))
}

fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut b = cstr(name);
    b.extend(cstr(sql));
    b.extend([0, 0]);
    msg(b'P', &b)
}

fn bind(portal: &str, stmt: &str) -> Vec<u8> {
    let mut b = cstr(portal);
    b.extend(cstr(stmt));
    // One text parameter "42", all results text.
    b.extend([0, 0, 0, 1, 0, 0, 0, 2, b'4', b'2', 0, 0]);
    msg(b'B', &b)
}

fn describe(target: u8, name: &str) -> Vec<u8> {
    let mut b = vec![target];
    b.extend(cstr(name));
    msg(b'D', &b)
}

fn close(target: u8, name: &str) -> Vec<u8> {
    let mut b = vec![target];
    b.extend(cstr(name));
    msg(b'C', &b)
}

fn execute(portal: &str, max_rows: u32) -> Vec<u8> {
    let mut b = cstr(portal);
    b.extend(max_rows.to_be_bytes());
    msg(b'E', &b)
}

fn sync() -> Vec<u8> {
    msg(b'S', b"")
}

fn flush() -> Vec<u8> {
    msg(b'H', b"")
}

fn terminate() -> Vec<u8> {
    msg(b'X', b"")
}

fn row_desc(cols: &[&str]) -> Vec<u8> {
    let mut b = (cols.len() as u16).to_be_bytes().to_vec();
    for c in cols {
        b.extend(cstr(c));
        b.extend([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 23, 0, 4, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0,
        ]);
    }
    msg(b'T', &b)
}

fn data_row(vals: &[Option<&str>]) -> Vec<u8> {
    let mut b = (vals.len() as u16).to_be_bytes().to_vec();
    for v in vals {
        match v {
            Some(s) => {
                b.extend((s.len() as i32).to_be_bytes());
                b.extend(s.as_bytes());
            }
            None => b.extend((-1i32).to_be_bytes()),
        }
    }
    msg(b'D', &b)
}

fn complete(tag: &str) -> Vec<u8> {
    msg(b'C', &cstr(tag))
}

fn error(code: &str, m: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (t, v) in [("S", "ERROR"), ("V", "ERROR"), ("C", code), ("M", m)] {
        b.extend(t.as_bytes());
        b.extend(cstr(v));
    }
    b.push(0);
    msg(b'E', &b)
}

fn fatal(code: &str, m: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (t, v) in [("S", "FATAL"), ("V", "FATAL"), ("C", code), ("M", m)] {
        b.extend(t.as_bytes());
        b.extend(cstr(v));
    }
    b.push(0);
    msg(b'E', &b)
}

fn notice(m: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (t, v) in [("S", "NOTICE"), ("C", "00000"), ("M", m)] {
        b.extend(t.as_bytes());
        b.extend(cstr(v));
    }
    b.push(0);
    msg(b'N', &b)
}

fn ready(status: u8) -> Vec<u8> {
    msg(b'Z', &[status])
}

fn parse_complete() -> Vec<u8> {
    msg(b'1', b"")
}

fn bind_complete() -> Vec<u8> {
    msg(b'2', b"")
}

fn close_complete() -> Vec<u8> {
    msg(b'3', b"")
}

fn no_data() -> Vec<u8> {
    msg(b'n', b"")
}

fn param_desc(n: u16) -> Vec<u8> {
    let mut b = n.to_be_bytes().to_vec();
    for _ in 0..n {
        b.extend(23u32.to_be_bytes());
    }
    msg(b't', &b)
}

fn suspended() -> Vec<u8> {
    msg(b's', b"")
}

fn copy_in_response() -> Vec<u8> {
    msg(b'G', &[0, 0, 1, 0, 0])
}

fn copy_out_response() -> Vec<u8> {
    msg(b'H', &[0, 0, 1, 0, 0])
}

fn copy_data(b: &[u8]) -> Vec<u8> {
    msg(b'd', b)
}

fn copy_done() -> Vec<u8> {
    msg(b'c', b"")
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// A conversation: segments with timestamps 1000 apart.
struct B {
    t: Transcript,
    ts: u64,
}

impl B {
    fn new() -> Self {
        B {
            t: Vec::new(),
            ts: 1_000_000,
        }
    }
    fn seg(&mut self, d: Direction, bytes: Vec<u8>) -> &mut Self {
        self.ts += 1000;
        self.t.push((d, bytes, self.ts));
        self
    }
    fn cli(&mut self, parts: &[Vec<u8>]) -> &mut Self {
        self.seg(C, cat(parts))
    }
    fn srv(&mut self, parts: &[Vec<u8>]) -> &mut Self {
        self.seg(S, cat(parts))
    }
    fn startup(&mut self) -> &mut Self {
        self.seg(C, startup("app", Some("shop")));
        self.seg(S, msg(b'R', &[0, 0, 0, 3]));
        self.seg(C, msg(b'p', &cstr("secret")));
        self.seg(S, auth_ok())
    }
    fn steps(&self) -> Vec<Step> {
        steps(&self.t)
    }
    /// Everything after the startup (4 segments).
    fn after_startup(&self) -> Transcript {
        self.t[4..].to_vec()
    }
}

fn run(b: &B) -> VecSink {
    assert_chunking_invariant(|| session(true), &b.steps())
}

fn cmds(ev: &[QueryEvent]) -> Vec<&'static str> {
    ev.iter().map(|e| e.command).collect()
}

fn texts(ev: &[QueryEvent]) -> Vec<&str> {
    ev.iter()
        .map(|e| e.text.as_deref().unwrap_or("-"))
        .collect()
}

fn state(e: &QueryEvent) -> &str {
    e.error
        .as_ref()
        .and_then(|e| e.state.as_deref())
        .unwrap_or("")
}

fn bytes(t: &[(Direction, Vec<u8>, u64)], d: Direction, skip: usize) -> u64 {
    t.iter()
        .skip(skip)
        .filter(|x| x.0 == d)
        .map(|x| x.1.len() as u64)
        .sum()
}

/// Every byte after the startup is attributed to some event.
fn assert_bytes_attributed(b: &B, ev: &[QueryEvent]) {
    let i: u64 = ev.iter().map(|e| e.bytes_in).sum();
    let o: u64 = ev.iter().map(|e| e.bytes_out).sum();
    assert_eq!(i, bytes(&b.t, C, 4), "bytes in");
    assert_eq!(o, bytes(&b.t, S, 4), "bytes out");
}

// ---- startup -----------------------------------------------------------------------------

#[test]
fn startup_and_simple_query() {
    let mut b = B::new();
    b.startup()
        .cli(&[query("SELECT 1")])
        .srv(&[
            row_desc(&["?column?"]),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
            ready(b'I'),
        ])
        .cli(&[terminate()]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(cmds(&r.events), ["query", "terminate"]);
    let e = &r.events[0];
    assert_eq!(e.text.as_deref(), Some("SELECT 1"));
    assert_eq!(
        (e.rows_sent, e.rows_affected, e.outcome),
        (1, 0, Outcome::Ok)
    );
    assert_eq!(e.user.as_deref(), Some("app"));
    assert_eq!(e.database.as_deref(), Some("shop"));
    assert_eq!(e.protocol, crate::Protocol::Postgres);
    assert_eq!((e.conn, e.statement_id), (9, None));
    let ts = |i: usize| b.t[i].2;
    assert_eq!(e.start_ns, ts(4));
    assert_eq!(e.first_response_ns, Some(ts(5)));
    assert_eq!(e.end_ns, Some(ts(5)));
    assert_eq!(e.bytes_in, query("SELECT 1").len() as u64);
    assert_eq!(r.events[1].outcome, Outcome::NoReplyExpected);
    assert_bytes_attributed(&b, &r.events);
    let mut s = session(true);
    let _ = run_steps(&mut s, &b.steps()[..6], Chunking::Whole);
    assert_eq!(s.user().map(|u| &**u), Some("app"));
    assert_eq!(s.database().map(|u| &**u), Some("shop"));
    assert_eq!(s.application_name().map(|u| &**u), Some("test"));
    assert_eq!(s.transaction_status(), Some(TxStatus::Idle));
}

#[test]
fn database_defaults_to_the_user() {
    let mut b = B::new();
    b.seg(C, startup("bob", None))
        .srv(&[auth_ok()])
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 0"), ready(b'I')]);
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert_eq!(r.events[0].database.as_deref(), Some("bob"));
}

#[test]
fn ssl_request_accepted_stops_refused_continues() {
    let ssl = untyped(code::SSL_REQUEST, b"");
    let mut b = B::new();
    b.seg(C, ssl.clone())
        .seg(S, b"S".to_vec())
        .seg(C, vec![0x16, 3, 1, 0, 5, 1, 2, 3, 4, 5]);
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert!(r.events.is_empty());
    assert_eq!(
        r.health,
        Health {
            encrypted_connections: 1,
            ..Health::default()
        }
    );
    let mut s = session(true);
    let mut sink = VecSink::default();
    assert_eq!(s.feed(C, &ssl, 1, &mut sink), crate::Progress::Continue);
    assert_eq!(s.feed(S, b"S", 2, &mut sink), crate::Progress::Stop);

    // Refused: the plaintext startup follows.
    let mut b = B::new();
    b.seg(C, ssl)
        .seg(S, b"N".to_vec())
        .seg(C, startup("app", Some("shop")))
        .srv(&[auth_ok()])
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 0"), ready(b'I')]);
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert_eq!(r.health, Health::default());
    assert_eq!(texts(&r.events), ["SELECT 1"]);
    assert_eq!(r.events[0].user.as_deref(), Some("app"));
}

#[test]
fn gssenc_request_and_direct_tls() {
    let mut b = B::new();
    b.seg(C, untyped(code::GSSENC_REQUEST, b""))
        .seg(S, b"G".to_vec());
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert_eq!(r.health.encrypted_connections, 1);
    // GSS refused, then SSL refused, then plaintext.
    let mut b = B::new();
    b.seg(C, untyped(code::GSSENC_REQUEST, b""))
        .seg(S, b"N".to_vec())
        .seg(C, untyped(code::SSL_REQUEST, b""))
        .seg(S, b"N".to_vec())
        .seg(C, startup("app", None))
        .srv(&[auth_ok()]);
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert_eq!(r.health, Health::default());
    // sslnegotiation=direct: a ClientHello first.
    let mut b = B::new();
    b.seg(C, vec![0x16, 0x03, 0x01, 0x00, 0x10, 1, 0, 0, 0]);
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert_eq!(r.health.encrypted_connections, 1);
}

#[test]
fn cancel_request_is_an_event_without_reply() {
    let mut b = B::new();
    b.seg(C, untyped(code::CANCEL_REQUEST, &[0, 0, 0, 42, 9, 9, 9, 9]));
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert_eq!(cmds(&r.events), ["cancel"]);
    let e = &r.events[0];
    assert_eq!(
        (e.outcome, e.bytes_in, e.text.as_ref()),
        (Outcome::NoReplyExpected, 16, None)
    );
    assert_eq!(r.health, Health::default());
}

#[test]
fn auth_failure_and_not_postgres() {
    let mut b = B::new();
    b.seg(C, startup("app", Some("shop"))).srv(&[fatal(
        "28P01",
        "password authentication failed for user \"app\"",
    )]);
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert!(r.events.is_empty());
    assert_eq!(r.health, Health::default());
    // Server first, or a client that is not PostgreSQL 3.
    let mut b = B::new();
    b.seg(S, b"\x4a\0\0\0\x0a5.5.5-10.11".to_vec());
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert_eq!(r.health.malformed, 1);
    let mut b = B::new();
    b.seg(C, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec());
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert!(r.health.malformed >= 1);
    assert!(r.events.is_empty());
}

// ---- simple query ------------------------------------------------------------------------

#[test]
fn multi_statement_query_with_an_error_in_the_middle() {
    let sql = "SELECT 1; UPDATE t SET a = 1 WHERE b = 'x;y'; SELECT * FROM nope; SELECT 2";
    let mut b = B::new();
    b.startup()
        .cli(&[query(sql)])
        .srv(&[
            row_desc(&["a"]),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
        ])
        .srv(&[complete("UPDATE 3")])
        .srv(&[
            notice("careful"),
            error("42P01", "relation \"nope\" does not exist"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        texts(&r.events),
        [
            "SELECT 1",
            "UPDATE t SET a = 1 WHERE b = 'x;y'",
            "SELECT * FROM nope"
        ]
    );
    let e = &r.events;
    assert_eq!((e[0].rows_sent, e[0].outcome), (1, Outcome::Ok));
    assert_eq!((e[1].rows_affected, e[1].outcome), (3, Outcome::Ok));
    assert_eq!(e[2].outcome, Outcome::Error);
    assert_eq!(state(&e[2]), "42P01");
    assert_eq!(
        &*e[2].error.as_ref().unwrap().message,
        "relation \"nope\" does not exist"
    );
    assert_eq!(e[2].error.as_ref().unwrap().code, 0);
    // Latency of a later statement starts when the previous one completed.
    let ts = |i: usize| b.t[i].2;
    assert_eq!((e[0].start_ns, e[0].end_ns), (ts(4), Some(ts(5))));
    assert_eq!(
        (e[1].start_ns, e[1].first_response_ns),
        (ts(5), Some(ts(6)))
    );
    assert_eq!(e[1].end_ns, Some(ts(6)));
    assert_eq!((e[2].start_ns, e[2].end_ns), (ts(6), Some(ts(7))));
    // Per-statement bytes: the pieces of the text; the last takes the rest.
    assert_eq!(e[0].bytes_in, "SELECT 1;".len() as u64);
    assert_eq!(
        e[1].bytes_in,
        " UPDATE t SET a = 1 WHERE b = 'x;y';".len() as u64
    );
    assert_bytes_attributed(&b, &r.events);
    assert_eq!(e[1].bytes_out, complete("UPDATE 3").len() as u64);
}

#[test]
fn multi_statement_all_kinds_of_results() {
    let mut b = B::new();
    b.startup()
        .cli(&[query(
            "BEGIN; INSERT INTO t VALUES (1),(2); ; DELETE FROM t; COMMIT;",
        )])
        .srv(&[
            complete("BEGIN"),
            complete("INSERT 0 2"),
            complete("DELETE 2"),
            complete("COMMIT"),
            ready(b'I'),
        ])
        .cli(&[query("")])
        .srv(&[msg(b'I', b""), ready(b'I')])
        .cli(&[query("  -- only a comment\n")])
        .srv(&[msg(b'I', b""), ready(b'T')]);
    let r = run(&b);
    assert_eq!(
        texts(&r.events),
        [
            "BEGIN",
            "INSERT INTO t VALUES (1),(2)",
            "DELETE FROM t",
            "COMMIT",
            "",
            "-- only a comment"
        ]
    );
    let aff: Vec<u64> = r.events.iter().map(|e| e.rows_affected).collect();
    assert_eq!(aff, [0, 2, 2, 0, 0, 0]);
    assert!(r.events.iter().all(|e| e.outcome == Outcome::Ok));
    assert_bytes_attributed(&b, &r.events);
    let mut s = session(true);
    let _ = run_steps(&mut s, &b.steps(), Chunking::Whole);
    assert_eq!(s.transaction_status(), Some(TxStatus::InTransaction));
}

#[test]
fn statements_the_splitter_miscounts_still_pair() {
    // The server answers fewer statements than the text seems to hold (no error): the last
    // event covers the rest. And more than it holds: they count in the last.
    let mut b = B::new();
    b.startup()
        .cli(&[query("SELECT 1; SELECT 2; SELECT 3")])
        .srv(&[complete("SELECT 0"), complete("SELECT 0"), ready(b'I')])
        .cli(&[query("SELECT 1")])
        .srv(&[
            row_desc(&["a"]),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
            row_desc(&["a"]),
            data_row(&[None]),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(
        texts(&r.events),
        ["SELECT 1", "SELECT 2; SELECT 3", "SELECT 1"]
    );
    assert_eq!(r.events[2].rows_sent, 2);
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn select_tag_without_rows_and_fetch() {
    let mut b = B::new();
    b.startup()
        .cli(&[query("CREATE TABLE x AS SELECT * FROM t")])
        .srv(&[complete("SELECT 7"), ready(b'I')])
        .cli(&[query("FETCH 2 FROM c; MOVE 5 IN c")])
        .srv(&[
            row_desc(&["a"]),
            data_row(&[Some("1")]),
            data_row(&[Some("2")]),
            complete("FETCH 2"),
            complete("MOVE 5"),
            ready(b'T'),
        ]);
    let r = run(&b);
    let rows: Vec<(u64, u64)> = r
        .events
        .iter()
        .map(|e| (e.rows_sent, e.rows_affected))
        .collect();
    assert_eq!(rows, [(7, 0), (2, 0), (0, 5)]);
}

#[test]
fn async_messages_are_not_responses() {
    let mut b = B::new();
    b.startup()
        .srv(&[
            notice("idle notice"),
            msg(b'A', &[0, 0, 0, 1, b'c', 0, b'p', 0]),
        ])
        .cli(&[query("SET TimeZone = 'UTC'")])
        .srv(&[
            {
                let mut ps = cstr("TimeZone");
                ps.extend(cstr("UTC"));
                msg(b'S', &ps)
            },
            complete("SET"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(texts(&r.events), ["SET TimeZone = 'UTC'"]);
    assert_eq!(r.events[0].bytes_out, bytes(&b.t, S, 6));
}

// ---- extended protocol -------------------------------------------------------------------

#[test]
fn unnamed_parse_bind_describe_execute_sync() {
    let sql = "SELECT a FROM t WHERE id = $1";
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("", sql),
            bind("", ""),
            describe(b'P', ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            row_desc(&["a"]),
            data_row(&[Some("x")]),
            data_row(&[None]),
            complete("SELECT 2"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(cmds(&r.events), ["prepare", "execute"]);
    assert_eq!(texts(&r.events), [sql, sql]);
    assert!(Arc::ptr_eq(
        r.events[0].text.as_ref().unwrap(),
        r.events[1].text.as_ref().unwrap()
    ));
    let ex = &r.events[1];
    assert_eq!((ex.rows_sent, ex.outcome), (2, Outcome::Ok));
    assert_eq!(ex.start_ns, b.t[4].2);
    assert_eq!(
        ex.bytes_in,
        cat(&[bind("", ""), describe(b'P', ""), execute("", 0), sync()]).len() as u64
    );
    assert_eq!(r.events[0].bytes_out, 5);
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn named_statement_executed_many_times() {
    let sql = "UPDATE t SET n = n + 1 WHERE id = $1";
    let mut b = B::new();
    b.startup()
        .cli(&[parse("s1", sql), describe(b'S', "s1"), sync()])
        .srv(&[parse_complete(), param_desc(1), no_data(), ready(b'I')]);
    for _ in 0..3 {
        b.cli(&[bind("", "s1"), execute("", 0), sync()]).srv(&[
            bind_complete(),
            complete("UPDATE 1"),
            ready(b'I'),
        ]);
    }
    b.cli(&[close(b'S', "s1"), sync()])
        .srv(&[close_complete(), ready(b'I')])
        .cli(&[bind("", "s1"), execute("", 0), sync()])
        .srv(&[
            error("26000", "prepared statement \"s1\" does not exist"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        cmds(&r.events),
        [
            "prepare", "execute", "execute", "execute", "close", "execute"
        ]
    );
    let p = r.events[0].text.as_ref().unwrap();
    for e in &r.events[1..5] {
        assert!(Arc::ptr_eq(e.text.as_ref().unwrap(), p));
    }
    assert!(r.events[1..4].iter().all(|e| e.rows_affected == 1));
    // After the Close the name is unknown: the execution is counted under its name.
    assert_eq!(r.events[5].text.as_deref(), Some("EXECUTE s1"));
    assert_eq!(r.events[5].outcome, Outcome::Error);
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn statement_prepared_before_the_capture_is_counted_by_name() {
    let mut b = B::new();
    b.startup();
    for _ in 0..2 {
        b.cli(&[bind("", "P_3"), execute("", 0), sync()]).srv(&[
            bind_complete(),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    }
    // The unnamed statement, prepared before the capture: no text.
    b.cli(&[bind("", ""), execute("", 0), sync()]).srv(&[
        bind_complete(),
        complete("SELECT 0"),
        ready(b'I'),
    ]);
    let r = run(&b);
    assert_eq!(texts(&r.events), ["EXECUTE P_3", "EXECUTE P_3", "-"]);
    assert!(Arc::ptr_eq(
        r.events[0].text.as_ref().unwrap(),
        r.events[1].text.as_ref().unwrap()
    ));
}

#[test]
fn pipeline_with_several_syncs() {
    let mut b = B::new();
    b.startup();
    let mut cli = Vec::new();
    for i in 0..3 {
        cli.push(parse("", &format!("SELECT {i}")));
        cli.push(bind("", ""));
        cli.push(describe(b'P', ""));
        cli.push(execute("", 0));
        cli.push(sync());
    }
    b.cli(&cli);
    let mut srv = Vec::new();
    for i in 0..3 {
        srv.extend([parse_complete(), bind_complete(), row_desc(&["x"])]);
        for _ in 0..i {
            srv.push(data_row(&[Some("1")]));
        }
        srv.push(complete(&format!("SELECT {i}")));
        srv.push(ready(b'I'));
    }
    // The responses arrive in two pieces.
    let (a, z) = srv.split_at(7);
    b.srv(a).srv(z);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        texts(&r.events),
        [
            "SELECT 0", "SELECT 0", "SELECT 1", "SELECT 1", "SELECT 2", "SELECT 2"
        ]
    );
    let rows: Vec<u64> = r.events.iter().map(|e| e.rows_sent).collect();
    assert_eq!(rows, [0, 0, 0, 1, 0, 2]);
    // Every request started when the client sent it.
    assert!(r.events.iter().all(|e| e.start_ns == b.t[4].2));
    assert_eq!(r.events[5].end_ns, Some(b.t[6].2));
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn error_inside_a_pipeline_skips_to_the_sync() {
    let mut b = B::new();
    b.startup().cli(&[
        parse("", "SELECT 1"),
        bind("", ""),
        execute("", 0),
        sync(),
        parse("", "SELECT nope"),
        bind("", ""),
        describe(b'P', ""),
        execute("", 0),
        parse("", "SELECT 3"),
        bind("", ""),
        execute("", 0),
        sync(),
        parse("", "SELECT 4"),
        bind("", ""),
        execute("", 0),
        sync(),
    ]);
    b.srv(&[
        parse_complete(),
        bind_complete(),
        data_row(&[Some("1")]),
        complete("SELECT 1"),
        ready(b'I'),
        error("42703", "column \"nope\" does not exist"),
        ready(b'I'),
        parse_complete(),
        bind_complete(),
        data_row(&[Some("4")]),
        complete("SELECT 1"),
        ready(b'I'),
    ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    // The requests the server skipped have no event.
    assert_eq!(
        texts(&r.events),
        [
            "SELECT 1",
            "SELECT 1",
            "SELECT nope",
            "SELECT 4",
            "SELECT 4"
        ]
    );
    let e = &r.events[2];
    assert_eq!((e.command, e.outcome), ("prepare", Outcome::Error));
    assert_eq!(state(e), "42703");
    // It carries the bytes of what was skipped, and the Sync and ReadyForQuery.
    assert_eq!(
        e.bytes_in,
        cat(&[
            parse("", "SELECT nope"),
            bind("", ""),
            describe(b'P', ""),
            execute("", 0),
            parse("", "SELECT 3"),
            bind("", ""),
            execute("", 0),
            sync()
        ])
        .len() as u64
    );
    assert_eq!(r.events[4].rows_sent, 1);
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn error_before_the_client_sent_its_sync() {
    // Flush-driven client: the error arrives while the Sync is still to come; what the client
    // sends in between is skipped by the server.
    let mut b = B::new();
    b.startup()
        .cli(&[bind("", "nope"), flush()])
        .srv(&[error("26000", "prepared statement \"nope\" does not exist")])
        .cli(&[execute("", 0), close(b'P', ""), sync()])
        .srv(&[ready(b'I')])
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 0"), ready(b'I')]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(cmds(&r.events), ["bind", "query"]);
    assert_eq!(r.events[0].outcome, Outcome::Error);
    assert_eq!(r.events[0].end_ns, Some(b.t[5].2));
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn portal_suspended_executes_are_an_execute_then_fetches() {
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("", "SELECT g FROM generate_series(1,5) g"),
            bind("c1", ""),
            execute("c1", 2),
            flush(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            data_row(&[Some("1")]),
            data_row(&[Some("2")]),
            suspended(),
        ])
        .cli(&[execute("c1", 2), flush()])
        .srv(&[data_row(&[Some("3")]), data_row(&[Some("4")]), suspended()])
        .cli(&[execute("c1", 2), sync()])
        .srv(&[data_row(&[Some("5")]), complete("SELECT 1"), ready(b'T')]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    // One execution as pg_stat_statements counts it (`calls` 1), then two fetches.
    assert_eq!(cmds(&r.events), ["prepare", "execute", "fetch", "fetch"]);
    let rows: Vec<u64> = r.events.iter().map(|e| e.rows_sent).collect();
    assert_eq!(rows, [0, 2, 2, 1]);
    assert!(
        r.events[1..]
            .iter()
            .all(|e| e.text.as_deref() == Some("SELECT g FROM generate_series(1,5) g"))
    );
    assert_eq!(r.events[2].start_ns, b.t[6].2);
    assert!(r.events.iter().all(|e| e.outcome == Outcome::Ok));
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn describe_close_and_bind_without_execute() {
    let mut b = B::new();
    b.startup()
        .cli(&[parse("s", "SELECT $1::int"), sync()])
        .srv(&[parse_complete(), ready(b'I')])
        .cli(&[describe(b'S', "s"), sync()])
        .srv(&[param_desc(1), row_desc(&["int4"]), ready(b'I')])
        .cli(&[bind("p", "s"), sync()])
        .srv(&[bind_complete(), ready(b'T')])
        .cli(&[
            describe(b'P', "p"),
            close(b'P', "p"),
            close(b'S', "s"),
            sync(),
        ])
        .srv(&[
            row_desc(&["int4"]),
            close_complete(),
            close_complete(),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        cmds(&r.events),
        ["prepare", "describe", "bind", "describe", "close", "close"]
    );
    assert!(
        r.events
            .iter()
            .all(|e| e.text.as_deref() == Some("SELECT $1::int"))
    );
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn error_at_sync_commit() {
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("", "INSERT INTO t VALUES (1)"),
            bind("", ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            complete("INSERT 0 1"),
            error("23514", "deferred constraint violated"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.events[1].outcome, Outcome::Error);
    assert_eq!(r.events[1].rows_affected, 1);
    assert_eq!(state(&r.events[1]), "23514");
    // The end is the CommandComplete, not the ReadyForQuery.
    assert_eq!(r.events[1].end_ns, Some(b.t[5].2));
}

#[test]
fn function_call() {
    let mut b = B::new();
    let mut f = 952u32.to_be_bytes().to_vec();
    f.extend([0, 0, 0, 1, 0, 0, 0, 1, b'x', 0, 0]);
    b.startup()
        .cli(&[msg(b'F', &f)])
        .srv(&[msg(b'V', &[0, 0, 0, 1, 7]), ready(b'I')]);
    let r = run(&b);
    assert_eq!(cmds(&r.events), ["function_call"]);
    assert_eq!(r.events[0].outcome, Outcome::Ok);
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn unknown_message_type_is_counted() {
    let mut b = B::new();
    b.startup()
        .cli(&[msg(b'y', b"what")])
        .srv(&[fatal("08P01", "invalid frontend message type 121")]);
    let r = run(&b);
    assert_eq!(cmds(&r.events), ["unknown"]);
    assert_eq!(r.events[0].outcome, Outcome::Error);
}

// ---- COPY --------------------------------------------------------------------------------

#[test]
fn copy_in_and_out_simple() {
    let mut b = B::new();
    b.startup()
        .cli(&[query("COPY t FROM STDIN")])
        .srv(&[copy_in_response()])
        .cli(&[copy_data(b"1\tone\n"), copy_data(b"2\ttwo\n")])
        .cli(&[copy_done()])
        .srv(&[complete("COPY 2"), ready(b'I')])
        .cli(&[query("COPY t TO STDOUT")])
        .srv(&[
            copy_out_response(),
            copy_data(b"1\tone\n"),
            copy_data(b"2\ttwo\n"),
            copy_done(),
            complete("COPY 2"),
            ready(b'I'),
        ])
        .cli(&[query("COPY t FROM STDIN")])
        .srv(&[copy_in_response()])
        .cli(&[copy_data(b"x\n"), msg(b'f', &cstr("cancelled"))])
        .srv(&[
            error("57014", "COPY from stdin failed: cancelled"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    let e = &r.events;
    assert_eq!(cmds(e), ["query", "query", "query"]);
    assert_eq!((e[0].rows_affected, e[0].rows_sent), (2, 0));
    assert_eq!(
        e[0].bytes_in,
        cat(&[
            query("COPY t FROM STDIN"),
            copy_data(b"1\tone\n"),
            copy_data(b"2\ttwo\n"),
            copy_done()
        ])
        .len() as u64
    );
    assert_eq!((e[1].rows_affected, e[1].rows_sent), (0, 2));
    assert_eq!(e[2].outcome, Outcome::Error);
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn copy_in_extended_ignores_the_sync_sent_during_the_copy() {
    // libpq: Parse/Bind/Describe/Execute/Sync, then CopyData..., CopyDone, Sync.
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("", "COPY t FROM STDIN"),
            bind("", ""),
            describe(b'P', ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            no_data(),
            copy_in_response(),
        ])
        .cli(&[copy_data(b"1\n2\n3\n"), copy_done(), sync()])
        .srv(&[complete("COPY 3"), ready(b'I')])
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 0"), ready(b'I')]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(cmds(&r.events), ["prepare", "execute", "query"]);
    assert_eq!(r.events[1].rows_affected, 3);
    assert_eq!(r.events[1].outcome, Outcome::Ok);
    assert_bytes_attributed(&b, &r.events);

    // Failing mid-copy: the server skips to the Sync after CopyDone.
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("", "COPY t FROM STDIN"),
            bind("", ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[parse_complete(), bind_complete(), copy_in_response()])
        .cli(&[copy_data(b"bad\n")])
        .srv(&[error("22P02", "invalid input syntax")])
        .cli(&[copy_data(b"more\n"), copy_done(), sync()])
        .srv(&[ready(b'I')])
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 0"), ready(b'I')]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(cmds(&r.events), ["prepare", "execute", "query"]);
    assert_eq!(r.events[1].outcome, Outcome::Error);
    assert_bytes_attributed(&b, &r.events);
}

// ---- limits ------------------------------------------------------------------------------

#[test]
fn huge_rows_stream_and_impossible_lengths_are_malformed() {
    let big = "x".repeat(3 << 20);
    let mut b = B::new();
    b.startup()
        .cli(&[query("SELECT repeat('x', 3145728)")])
        .srv(&[
            row_desc(&["r"]),
            data_row(&[Some(&big)]),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    let steps = b.steps();
    let r = assert_chunkings(
        || session(true),
        &steps,
        &[Chunking::Whole, Chunking::Random(1), Chunking::Random(2)],
    );
    assert_eq!(r.events[0].rows_sent, 1);
    let mut s = session(true);
    let mut sink = VecSink::default();
    for st in &steps {
        if let Step::Data(d, bytes, ts) = st {
            for c in bytes.chunks(1000) {
                s.feed(*d, c, *ts, &mut sink);
                assert!(s.buffered_bytes() < 64 * 1024, "{}", s.buffered_bytes());
            }
        }
    }
    // A DataRow claiming 1 GB.
    let mut b = B::new();
    b.startup()
        .cli(&[query("SELECT 1")])
        .srv(&[row_desc(&["a"]), b"D\x40\x00\x00\x00\x00\x01".to_vec()]);
    let r = run(&b);
    assert_eq!(r.health.malformed, 1);
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
}

#[test]
fn long_text_is_cut_at_max_text() {
    let sql = format!("SELECT '{}é'", "a".repeat(100));
    let mut b = B::new();
    b.startup()
        .cli(&[query(&sql), parse("s", &sql), sync()])
        .srv(&[
            complete("SELECT 1"),
            ready(b'I'),
            parse_complete(),
            ready(b'I'),
        ]);
    let cfg = SessionConfig {
        max_inflight: 16,
        max_text: 109,
        ..SessionConfig::default()
    };
    let r = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
    );
    for e in &r.events {
        assert!(e.text_truncated);
        assert_eq!(e.text.as_deref().unwrap().len(), 108, "{e:?}");
    }
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn too_many_in_flight_are_counted_and_pairing_stays_exact() {
    let cfg = SessionConfig {
        max_inflight: 2,
        max_text: 1 << 20,
        ..SessionConfig::default()
    };
    let mut b = B::new();
    b.startup();
    let mut cli = Vec::new();
    let mut srv = Vec::new();
    for i in 0..5 {
        cli.extend([bind("", ""), execute("", 0), sync()]);
        srv.extend([bind_complete()]);
        for _ in 0..i {
            srv.push(data_row(&[Some("1")]));
        }
        srv.extend([complete(&format!("SELECT {i}")), ready(b'I')]);
    }
    b.cli(&cli).srv(&srv).cli(&[query("SELECT 9")]).srv(&[
        data_row(&[Some("1")]),
        complete("SELECT 1"),
        ready(b'I'),
    ]);
    let r = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
    );
    assert_eq!(r.health.inflight_overflow, 3);
    assert_eq!(r.health.responses_without_request, 0);
    let rows: Vec<u64> = r.events.iter().map(|e| e.rows_sent).collect();
    assert_eq!(rows, [0, 1, 1]);
}

// ---- mid-stream and gaps -----------------------------------------------------------------

fn busy() -> B {
    let mut b = B::new();
    b.startup()
        .cli(&[query("SELECT a FROM t")])
        .srv(&[
            row_desc(&["a"]),
            data_row(&[Some("1")]),
            data_row(&[Some("2")]),
            complete("SELECT 2"),
            ready(b'I'),
        ])
        .cli(&[
            parse("", "SELECT $1"),
            bind("", ""),
            describe(b'P', ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            row_desc(&["x"]),
            data_row(&[Some(&"v".repeat(300))]),
            complete("SELECT 1"),
            ready(b'I'),
        ])
        .cli(&[query("UPDATE t SET a = 2")])
        .srv(&[complete("UPDATE 2"), ready(b'I')])
        .cli(&[sync()])
        .srv(&[ready(b'I')])
        .cli(&[query("DELETE FROM t")])
        .srv(&[complete("DELETE 2"), ready(b'I')]);
    b
}

#[test]
fn midstream_pickup() {
    let b = busy();
    let full = run(&b);
    assert_eq!(full.health, Health::default());
    assert_eq!(
        cmds(&full.events),
        ["query", "prepare", "execute", "query", "query"]
    );
    let t = b.after_startup();
    let r = assert_chunking_invariant(|| session(false), &steps(&t));
    assert_eq!(r.health, Health::default());
    assert_eq!(texts(&r.events), texts(&full.events));
    assert!(r.events.iter().all(|e| e.user.is_none()));
    // Picked up inside the first response: it is skipped, the rest pairs.
    let mut t = b.after_startup();
    t.remove(0);
    let r = assert_chunking_invariant(|| session(false), &steps(&t));
    assert_eq!(texts(&r.events), texts(&full.events)[1..]);
    assert_eq!(r.health.responses_without_request, 0);
    assert!(r.health.unparsed_bytes > 0);
    // Picked up in the middle of a client message: the next turn resynchronizes.
    let mut t = b.after_startup();
    t.drain(..2);
    t[0].1.drain(..3);
    let r = assert_chunking_invariant(|| session(false), &steps(&t));
    assert_eq!(texts(&r.events), ["UPDATE t SET a = 2", "DELETE FROM t"]);
    assert_eq!(r.health.responses_without_request, 0);
}

#[test]
fn server_gap_inside_a_row_keeps_the_framing() {
    let b = busy();
    // Lose 100 bytes inside the 300-byte DataRow (it starts 37 bytes into the response).
    let off = bytes(&b.t[..7], S, 0) + 60;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, S, off, 100));
    assert_eq!(r.health.resyncs, 0);
    let outs: Vec<Outcome> = r.events.iter().map(|e| e.outcome).collect();
    assert_eq!(
        outs,
        [
            Outcome::Ok,
            Outcome::Ok,
            Outcome::Incomplete,
            Outcome::Ok,
            Outcome::Ok
        ]
    );
    assert_eq!(r.events[2].rows_sent, 1);
}

#[test]
fn server_gap_across_messages_resyncs() {
    let b = busy();
    // Lose the end of the DataRow and the messages after it.
    let off = bytes(&b.t[..7], S, 0) + 60;
    let len = bytes(&b.t[7..8], S, 0) - 60 - 5;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, S, off, len));
    assert_eq!(r.health.resyncs, 1);
    assert_eq!(
        cmds(&r.events),
        ["query", "prepare", "execute", "query", "query"]
    );
    assert_eq!(r.events[2].outcome, Outcome::Incomplete);
    assert_eq!(r.events[3].outcome, Outcome::Ok);
    assert_eq!(r.events[3].rows_affected, 2);
    assert_eq!(r.health.responses_without_request, 0);
}

#[test]
fn client_gap_loses_the_request_not_the_pairing() {
    let b = busy();
    // Lose most of the extended-protocol batch.
    let off = bytes(&b.t[..6], C, 0) + 10;
    let len = bytes(&b.t[6..7], C, 0) - 20;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, off, len));
    assert_eq!(
        texts(&r.events),
        ["SELECT a FROM t", "UPDATE t SET a = 2", "DELETE FROM t"]
    );
    assert!(r.events.iter().all(|e| e.outcome == Outcome::Ok));
    assert_eq!(r.health.responses_without_request, 0);
    // Lose bytes inside a query text: the framing holds, the request is incomplete.
    let off = bytes(&b.t[..4], C, 0) + 7;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, off, 3));
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert!(r.events[0].text_truncated);
    assert_eq!(r.events.len(), 5);
    assert!(r.events[1..].iter().all(|e| e.outcome == Outcome::Ok));
}

#[test]
fn gap_during_startup_continues_midstream() {
    let b = busy();
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, S, 3, 2));
    assert_eq!(texts(&r.events), texts(&run(&b).events));
    // The startup message was seen: the user is known.
    assert!(r.events.iter().all(|e| e.user.as_deref() == Some("app")));
}

#[test]
fn unanswered_requests_at_close() {
    let mut b = B::new();
    b.startup()
        .cli(&[query("SELECT 1; SELECT pg_sleep(10); SELECT 3")])
        .srv(&[complete("SELECT 1"), row_desc(&["pg_sleep"])])
        .cli(&[]);
    let r = run(&b);
    assert_eq!(
        texts(&r.events),
        ["SELECT 1", "SELECT pg_sleep(10); SELECT 3"]
    );
    assert_eq!(r.events[1].outcome, Outcome::Incomplete);
    let mut b = B::new();
    b.startup()
        .cli(&[parse("", "SELECT 1"), bind("", ""), execute("", 0), sync()]);
    let r = run(&b);
    assert_eq!(cmds(&r.events), ["prepare", "execute"]);
    assert!(r.events.iter().all(|e| e.outcome == Outcome::NoResponse));
    // A statement completed, its ReadyForQuery lost with the connection.
    let mut b = B::new();
    b.startup()
        .cli(&[query("SELECT 1; SELECT 2")])
        .srv(&[complete("SELECT 1")]);
    let r = run(&b);
    assert_eq!(texts(&r.events), ["SELECT 1", "SELECT 2"]);
    assert_eq!(r.events[0].outcome, Outcome::Ok);
    assert_eq!(r.events[1].outcome, Outcome::NoResponse);
}

#[test]
fn stray_responses_are_counted_once() {
    let mut b = B::new();
    b.startup()
        .srv(&[
            row_desc(&["a"]),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
            ready(b'I'),
        ])
        .srv(&[fatal(
            "57P01",
            "terminating connection due to administrator command",
        )]);
    let r = run(&b);
    assert!(r.events.is_empty());
    assert_eq!(r.health.responses_without_request, 1);
}

#[test]
fn startup_variants_negotiate_and_old_server_error() {
    // NegotiateProtocolVersion and notices during the startup are part of it.
    let mut b = B::new();
    b.seg(C, startup("app", Some("shop")))
        .srv(&[
            msg(b'v', &[0, 0, 0, 0, 0, 0, 0, 0]),
            notice("hello"),
            auth_ok(),
        ])
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 0"), ready(b'I')]);
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert_eq!(r.health, Health::default());
    assert_eq!(texts(&r.events), ["SELECT 1"]);
    // A server that answers SSLRequest with an error message closes the connection.
    let mut b = B::new();
    b.seg(C, untyped(code::SSL_REQUEST, b""))
        .srv(&[fatal("08P01", "unsupported frontend protocol")]);
    let r = assert_chunking_invariant(|| session(true), &b.steps());
    assert!(r.events.is_empty());
    assert_eq!(r.health.encrypted_connections, 0);
}

#[test]
fn function_call_error_and_copy_both() {
    let mut f = 952u32.to_be_bytes().to_vec();
    f.extend([0, 0, 0, 0, 0, 0]);
    let mut b = B::new();
    b.startup()
        .cli(&[msg(b'F', &f)])
        .srv(&[error("42883", "function 952 does not exist"), ready(b'I')])
        .cli(&[query("START_REPLICATION SLOT s LOGICAL 0/0")])
        .srv(&[msg(b'W', &[0, 0, 0]), copy_data(b"wal")])
        .cli(&[copy_data(b"status")]);
    let r = run(&b);
    assert_eq!(cmds(&r.events), ["function_call", "query"]);
    assert_eq!(r.events[0].outcome, Outcome::Error);
    assert_eq!(state(&r.events[0]), "42883");
    assert_eq!(r.events[1].outcome, Outcome::Ok);
    let mut s = session(true);
    let mut sink = VecSink::default();
    let mut last = crate::Progress::Continue;
    for (d, bytes, ts) in &b.t {
        last = s.feed(*d, bytes, *ts, &mut sink);
        if last == crate::Progress::Stop {
            break;
        }
    }
    assert_eq!(
        last,
        crate::Progress::Stop,
        "replication streaming ends the session"
    );
}

#[test]
fn midstream_pickup_inside_a_copy() {
    let mut b = B::new();
    b.startup()
        .cli(&[query("COPY t FROM STDIN")])
        .srv(&[copy_in_response()])
        .cli(&[copy_data(b"1\n")])
        .cli(&[copy_data(b"2\n"), copy_done()])
        .srv(&[complete("COPY 2"), ready(b'I')])
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 0"), ready(b'I')]);
    // Start at the second CopyData segment.
    let t: Transcript = b.t[7..].to_vec();
    let r = assert_chunking_invariant(|| session(false), &steps(&t));
    assert_eq!(texts(&r.events), ["SELECT 1"]);
    assert_eq!(r.health.responses_without_request, 0);
    assert_eq!(r.health.malformed, 0);
}

#[test]
fn named_portal_executed_without_its_bind() {
    // Picked up after the Bind: the portal is unknown, so is its text.
    let mut b = B::new();
    b.startup().cli(&[execute("cur", 10), sync()]).srv(&[
        data_row(&[Some("1")]),
        suspended(),
        ready(b'T'),
    ]);
    let r = run(&b);
    assert_eq!(cmds(&r.events), ["execute"]);
    assert_eq!(
        (r.events[0].rows_sent, r.events[0].text.as_ref()),
        (1, None)
    );
}

#[test]
fn failed_named_parse_keeps_the_previous_statement() {
    let mut b = B::new();
    b.startup()
        .cli(&[parse("s", "SELECT 1"), sync()])
        .srv(&[parse_complete(), ready(b'I')])
        .cli(&[parse("s", "SELECT 2"), sync()])
        .srv(&[
            error("42P05", "prepared statement \"s\" already exists"),
            ready(b'I'),
        ])
        .cli(&[bind("", "s"), execute("", 0), sync()])
        .srv(&[
            bind_complete(),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(texts(&r.events), ["SELECT 1", "SELECT 2", "SELECT 1"]);
    assert_eq!(r.events[1].outcome, Outcome::Error);
}

#[test]
fn full_response_queue_drops_requests_and_recovers() {
    // One unit at most, and (max_inflight * 8).max(64) = 64 expected responses: a pipeline of
    // 40 Bind/Execute/Sync overflows the queue.
    let cfg = SessionConfig {
        max_inflight: 1,
        max_text: 1 << 20,
        ..SessionConfig::default()
    };
    let mut b = B::new();
    b.startup();
    let mut cli = Vec::new();
    let mut srv = Vec::new();
    for _ in 0..40 {
        cli.extend([bind("", ""), execute("", 0), sync()]);
        srv.extend([bind_complete(), complete("SELECT 0"), ready(b'I')]);
    }
    b.cli(&cli)
        .srv(&srv)
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 1"), ready(b'I')]);
    let r = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
    );
    assert!(r.health.inflight_overflow > 0);
    assert_eq!(r.health.responses_without_request, 0);
    assert!(
        r.events.iter().all(|e| e.outcome == Outcome::Ok),
        "{:#?}",
        r.events
    );
    assert_eq!(r.events.last().unwrap().text.as_deref(), Some("SELECT 1"));
}

#[test]
fn a_new_bind_makes_the_next_execute_an_execute_again() {
    // Pipelined: the second Execute of c1 is sent before the first one's PortalSuspended
    // arrives; it is a fetch all the same. Then c1 is bound again (a new portal: an execute),
    // the unnamed portal runs twice (execute, fetch), and Close forgets c1.
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("", "SELECT g FROM generate_series(1,3) g"),
            bind("c1", ""),
            execute("c1", 2),
            execute("c1", 2),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            data_row(&[Some("1")]),
            data_row(&[Some("2")]),
            suspended(),
            data_row(&[Some("3")]),
            complete("SELECT 1"),
            ready(b'T'),
        ])
        .cli(&[bind("c1", ""), execute("c1", 0), sync()])
        .srv(&[
            bind_complete(),
            data_row(&[Some("1")]),
            data_row(&[Some("2")]),
            data_row(&[Some("3")]),
            complete("SELECT 3"),
            ready(b'T'),
        ])
        .cli(&[bind("", ""), execute("", 1), execute("", 0), sync()])
        .srv(&[
            bind_complete(),
            data_row(&[Some("1")]),
            suspended(),
            data_row(&[Some("2")]),
            data_row(&[Some("3")]),
            complete("SELECT 2"),
            ready(b'T'),
        ])
        .cli(&[close(b'P', "c1"), sync()])
        .srv(&[close_complete(), ready(b'T')])
        .cli(&[bind("c1", ""), execute("c1", 0), sync()])
        .srv(&[
            bind_complete(),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
            ready(b'T'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        cmds(&r.events),
        [
            "prepare", "execute", "fetch", "execute", "execute", "fetch", "close", "execute"
        ]
    );
    let rows: Vec<u64> = r.events.iter().map(|e| e.rows_sent).collect();
    assert_eq!(rows, [0, 2, 1, 3, 1, 2, 0, 1]);
    assert_bytes_attributed(&b, &r.events);
}

// ---- a Parse in the flight of its execution is count-only --------------------------------

/// (command, timed) of each event.
fn timing(ev: &[QueryEvent]) -> Vec<(&'static str, bool)> {
    ev.iter().map(|e| (e.command, e.timed)).collect()
}

#[test]
fn unnamed_parse_in_the_flight_of_its_execution_is_counted_not_timed() {
    let sql = "SELECT a FROM t WHERE id = $1";
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("", sql),
            bind("", ""),
            describe(b'P', ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            row_desc(&["a"]),
            data_row(&[Some("x")]),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(timing(&r.events), [("prepare", false), ("execute", true)]);
    let (p, ex) = (&r.events[0], &r.events[1]);
    // The prepare is still a complete, answered request, with its bytes; it has no time.
    assert_eq!((p.outcome, p.bytes_out), (Outcome::Ok, 5));
    assert_eq!(p.end_ns, Some(b.t[5].2));
    assert_eq!(p.latency_ns(), None);
    // The execution carries the whole round trip, once.
    assert_eq!(ex.latency_ns(), Some(b.t[5].2 - b.t[4].2));
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn named_parse_with_its_own_round_trip_keeps_its_time() {
    let sql = "UPDATE t SET n = n + 1 WHERE id = $1";
    let mut b = B::new();
    // Prepared once with its own Sync (and a Describe), then executed.
    b.startup()
        .cli(&[parse("s1", sql), describe(b'S', "s1"), sync()])
        .srv(&[parse_complete(), param_desc(1), no_data(), ready(b'I')])
        .cli(&[bind("", "s1"), execute("", 0), sync()])
        .srv(&[bind_complete(), complete("UPDATE 1"), ready(b'I')]);
    // Prepared with a Flush: answered before the Bind was sent, so not in its flight.
    b.cli(&[parse("s2", sql), flush()])
        .srv(&[parse_complete()])
        .cli(&[bind("", "s2"), execute("", 0), sync()])
        .srv(&[bind_complete(), complete("UPDATE 1"), ready(b'I')]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        timing(&r.events),
        [
            ("prepare", true),
            ("execute", true),
            ("prepare", true),
            ("execute", true)
        ]
    );
    assert_eq!(r.events[0].latency_ns(), Some(b.t[5].2 - b.t[4].2));
    assert_eq!(r.events[2].latency_ns(), Some(b.t[9].2 - b.t[8].2));
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn pipelined_parses_fold_into_the_executions_they_travel_with() {
    let mut b = B::new();
    b.startup().cli(&[
        // Two unnamed statements in one flight, one Sync.
        parse("", "SELECT 1"),
        bind("", ""),
        execute("", 0),
        parse("", "SELECT 2"),
        bind("", ""),
        execute("", 0),
        sync(),
        // A named statement with its own Sync, bound before its answer came: same flight.
        parse("s1", "SELECT 3"),
        sync(),
        bind("", "s1"),
        execute("", 0),
        sync(),
        // A Parse no Bind of this flight names keeps its time; the Bind of another
        // statement after it does not fold it.
        parse("s2", "SELECT 4"),
        bind("", "s1"),
        execute("", 0),
        sync(),
    ]);
    b.srv(&[
        parse_complete(),
        bind_complete(),
        complete("SELECT 0"),
        parse_complete(),
        bind_complete(),
        complete("SELECT 0"),
        ready(b'I'),
        parse_complete(),
        ready(b'I'),
        bind_complete(),
        complete("SELECT 0"),
        ready(b'I'),
        parse_complete(),
        bind_complete(),
        complete("SELECT 0"),
        ready(b'I'),
    ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        timing(&r.events),
        [
            ("prepare", false),
            ("execute", true),
            ("prepare", false),
            ("execute", true),
            ("prepare", false),
            ("execute", true),
            ("prepare", true),
            ("execute", true)
        ]
    );
    assert_eq!(
        texts(&r.events),
        [
            "SELECT 1", "SELECT 1", "SELECT 2", "SELECT 2", "SELECT 3", "SELECT 3", "SELECT 4",
            "SELECT 3"
        ]
    );
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn a_failed_parse_in_the_flight_keeps_the_time_of_the_execution_that_never_ran() {
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("", "SELECT nope"),
            bind("", ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            error("42703", "column \"nope\" does not exist"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(timing(&r.events), [("prepare", true)]);
    assert_eq!(r.events[0].outcome, Outcome::Error);
    assert_eq!(r.events[0].latency_ns(), Some(b.t[5].2 - b.t[4].2));
    assert_bytes_attributed(&b, &r.events);
}

mod gap;

#[test]
fn the_global_text_budget_cuts_to_a_prefix_and_keeps_counting() {
    use crate::kit::{TEXT_PREFIX, TextBudget};
    let budget = TextBudget::new(64 * 1024);
    // Another connection holds the whole budget.
    let hold = budget.charge(usize::MAX);
    let cfg = SessionConfig {
        text_budget: budget.clone(),
        ..SessionConfig::default()
    };
    let big = format!("SELECT '{}' AS marker", "q".repeat(20_000));
    let mut b = B::new();
    b.startup()
        .cli(&[query(&big)])
        .srv(&[row_desc(&["marker"]), complete("SELECT 1"), ready(b'I')])
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 1"), ready(b'I')]);
    let r = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
    );
    assert_eq!(r.events.len(), 2);
    let e = &r.events[0];
    assert!(e.text_truncated);
    let t = e.text.as_deref().unwrap();
    assert!(
        t.len() <= TEXT_PREFIX && t.starts_with("SELECT 'qqq"),
        "{}",
        t.len()
    );
    assert_eq!(e.bytes_in, query(&big).len() as u64);
    assert_eq!(e.outcome, Outcome::Ok);
    assert!(e.latency_ns().is_some());
    assert_eq!(r.events[1].text.as_deref(), Some("SELECT 1"));
    assert!(!r.events[1].text_truncated);
    assert!(budget.cut() > 0);
    assert_bytes_attributed(&b, &r.events);
    drop(hold);
    // Every share a session took was given back.
    assert_eq!(budget.used(), 0);
    // With room in the budget, the same text is kept whole (and given back after).
    let r = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
    );
    assert_eq!(r.events[0].text.as_deref(), Some(big.as_str()));
    assert!(!r.events[0].text_truncated);
    assert_eq!(budget.used(), 0);
}

#[test]
fn a_prepared_statement_holds_its_text_budget_while_cached() {
    use crate::kit::TextBudget;
    use crate::testing::{Chunking, run_steps};
    let budget = TextBudget::new(1 << 20);
    let cfg = SessionConfig {
        text_budget: budget.clone(),
        ..SessionConfig::default()
    };
    let big = format!("SELECT '{}'", "p".repeat(20_000));
    let mut b = B::new();
    b.startup()
        .cli(&[parse("s", &big), sync()])
        .srv(&[parse_complete(), ready(b'I')]);
    let mut s = super::super::new_session(meta(true), cfg);
    let r = run_steps(&mut s, &b.steps(), Chunking::Random(3));
    assert_eq!(r.events[0].text.as_deref(), Some(big.as_str()));
    // The statement is still cached after its event: its text still counts.
    assert!(budget.used() > big.len(), "{}", budget.used());
    drop(s);
    assert_eq!(budget.used(), 0);
}
mod tls;
mod txn;

#[test]
fn bind_values_ride_on_the_execution() {
    let sql = "SELECT * FROM t WHERE id = $1 AND name = $2";
    // Parse naming int8 and text; Bind with a binary int8 and a text value.
    let mut p = cstr("s1");
    p.extend(cstr(sql));
    p.extend([0, 2, 0, 0, 0, 20, 0, 0, 0, 25]);
    let mut bd = cstr("");
    bd.extend(cstr("s1"));
    bd.extend([0, 2, 0, 1, 0, 0, 0, 2, 0, 0, 0, 8]);
    bd.extend((-9i64).to_be_bytes());
    bd.extend([0, 0, 0, 3, b'a', b'\'', b'b', 0, 0]);
    let mut b = B::new();
    b.startup()
        .cli(&[msg(b'P', &p), msg(b'B', &bd), execute("", 0), sync()])
        .srv(&[
            parse_complete(),
            bind_complete(),
            complete("SELECT 0"),
            ready(b'I'),
        ])
        // The unnamed statement of the text `bind` helper: no types, one text value.
        .cli(&[parse("", "SELECT $1"), bind("", ""), execute("", 0), sync()])
        .srv(&[
            parse_complete(),
            bind_complete(),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        cmds(&r.events),
        ["prepare", "execute", "prepare", "execute"]
    );
    let lits = |e: &QueryEvent| e.params.as_ref().map(|p| p.literals());
    assert_eq!(
        lits(&r.events[1]),
        Some(vec!["-9::int8".into(), "'a''b'::text".into()])
    );
    assert_eq!(lits(&r.events[3]), Some(vec!["'42'".into()]));
    assert_eq!(lits(&r.events[0]), None);
}

#[test]
fn described_types_decode_binary_values() {
    // A client that parses without types, describes the statement, then binds in binary.
    let mut bd = cstr("");
    bd.extend(cstr("q"));
    bd.extend([0, 1, 0, 1, 0, 1, 0, 0, 0, 4]);
    bd.extend((-7i32).to_be_bytes());
    bd.extend([0, 0]);
    let mut b = B::new();
    b.startup()
        .cli(&[parse("q", "SELECT $1 + 1"), describe(b'S', "q"), sync()])
        .srv(&[
            parse_complete(),
            param_desc(1),
            row_desc(&["x"]),
            ready(b'I'),
        ])
        .cli(&[msg(b'B', &bd), execute("", 0), sync()])
        .srv(&[
            bind_complete(),
            data_row(&[Some("-6")]),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(cmds(&r.events), ["prepare", "execute"]);
    let lits = r.events[1].params.as_ref().map(|p| p.literals());
    assert_eq!(lits, Some(vec!["-7".to_string()]));
}

/// Unnamed Parses cycling through a few statements (pgbench `-M extended`): each execution
/// carries its own statement's text, in every chunking, and repeated texts share one
/// allocation (the recent-texts ring), also after another statement was parsed in between.
#[test]
fn unnamed_parses_cycling_share_their_texts() {
    let sqls = [
        "SELECT 1",
        "UPDATE t SET a = $1",
        "SELECT 1",
        "SELECT 2",
        "UPDATE t SET a = $1",
    ];
    let mut b = B::new();
    b.startup();
    for sql in sqls {
        b.cli(&[
            parse("", sql),
            bind("", ""),
            describe(b'P', ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            no_data(),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    }
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    let exec: Vec<&QueryEvent> = r.events.iter().filter(|e| e.command == "execute").collect();
    let got: Vec<&str> = exec
        .iter()
        .map(|e| e.text.as_deref().unwrap_or("-"))
        .collect();
    assert_eq!(got, sqls);
    let arc = |i: usize| exec[i].text.clone().unwrap();
    assert!(Arc::ptr_eq(&arc(0), &arc(2)));
    assert!(Arc::ptr_eq(&arc(1), &arc(4)));
    assert!(!Arc::ptr_eq(&arc(0), &arc(3)));
    assert_bytes_attributed(&b, &r.events);
}

/// A Parse cut short (its text incomplete) is never answered from the recent texts, and a
/// whole Parse of the same prefix afterwards gets its own whole text.
#[test]
fn a_cut_parse_does_not_take_a_recent_text() {
    let cfg = SessionConfig {
        max_text: 8,
        ..SessionConfig::default()
    };
    let mut s = super::super::new_session(meta(true), cfg);
    let mut b = B::new();
    b.startup();
    for sql in ["SELECT 1", "SELECT 123456", "SELECT 1"] {
        b.cli(&[parse("", sql), bind("", ""), execute("", 0), sync()])
            .srv(&[
                parse_complete(),
                bind_complete(),
                complete("SELECT 1"),
                ready(b'I'),
            ]);
    }
    let mut sink = VecSink::default();
    for (d, bytes, ts) in &b.t {
        s.feed(*d, bytes, *ts, &mut sink);
    }
    let exec: Vec<(&str, bool)> = sink
        .events
        .iter()
        .filter(|e| e.command == "execute")
        .map(|e| (e.text.as_deref().unwrap_or("-"), e.text_truncated))
        .collect();
    assert_eq!(
        exec,
        [("SELECT 1", false), ("SELECT 1", true), ("SELECT 1", false)]
    );
}
