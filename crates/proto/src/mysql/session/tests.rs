//! Byte-literal tests of the session: every command and response shape, fed in every chunking.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use super::super::message::caps;
use super::super::wire::{Codec, CompressedHeader, put_lenenc, write_packets};
use super::MysqlSession;
use crate::testing::{
    Chunking, Step, Transcript, assert_chunking_invariant, assert_chunkings, run_steps, steps,
    with_gap,
};
use crate::{ConnMeta, Direction, Outcome, QueryEvent, SessionConfig, VecSink};

const C: Direction = Direction::ToServer;
const S: Direction = Direction::ToClient;

fn meta(saw_open: bool) -> ConnMeta {
    ConnMeta {
        id: 7,
        client: "10.0.0.1:50000".parse::<SocketAddr>().unwrap().into(),
        server: "10.0.0.2:3306".parse::<SocketAddr>().unwrap().into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

fn session(saw_open: bool) -> MysqlSession {
    super::super::new_session(meta(saw_open), SessionConfig::default())
}

const BASE_CAPS: u64 = caps::CLIENT_LONG_FLAG
    | caps::CLIENT_CONNECT_WITH_DB
    | caps::CLIENT_PROTOCOL_41
    | caps::CLIENT_TRANSACTIONS
    | caps::CLIENT_SECURE_CONNECTION
    | caps::CLIENT_MULTI_STATEMENTS
    | caps::CLIENT_MULTI_RESULTS
    | caps::CLIENT_PS_MULTI_RESULTS
    | caps::CLIENT_PLUGIN_AUTH
    | caps::CLIENT_LOCAL_FILES;

// ---- payload builders -------------------------------------------------------------------

fn greeting(c: u64) -> Vec<u8> {
    let mut p = vec![10];
    p.extend_from_slice(b"10.11.6-MariaDB\0");
    p.extend_from_slice(&42u32.to_le_bytes());
    p.extend_from_slice(b"12345678\0");
    p.extend_from_slice(&(c as u16).to_le_bytes());
    p.push(45);
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&((c >> 16) as u16).to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&((c >> 32) as u32).to_le_bytes());
    p.extend_from_slice(b"abcdefghijkl\0mysql_native_password\0");
    p
}

fn response(c: u64, user: &str, db: Option<&str>) -> Vec<u8> {
    let c = if db.is_some() {
        c | caps::CLIENT_CONNECT_WITH_DB
    } else {
        c & !caps::CLIENT_CONNECT_WITH_DB
    };
    let mut p = Vec::new();
    p.extend_from_slice(&(c as u32).to_le_bytes());
    p.extend_from_slice(&(1u32 << 24).to_le_bytes());
    p.push(45);
    p.extend_from_slice(&[0; 19]);
    p.extend_from_slice(&((c >> 32) as u32).to_le_bytes());
    p.extend_from_slice(user.as_bytes());
    p.push(0);
    p.push(20);
    p.extend_from_slice(&[7; 20]);
    if let Some(db) = db {
        p.extend_from_slice(db.as_bytes());
        p.push(0);
    }
    p.extend_from_slice(b"mysql_native_password\0");
    if c & caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 {
        p.push(3);
    }
    p
}

fn ok(affected: u64, status: u16) -> Vec<u8> {
    let mut p = vec![0];
    put_lenenc(&mut p, affected);
    p.push(0);
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    p
}

fn ok_fe(status: u16) -> Vec<u8> {
    let mut p = ok(0, status);
    p[0] = 0xFE;
    p
}

fn eof(status: u16) -> Vec<u8> {
    let mut p = vec![0xFE, 0, 0];
    p.extend_from_slice(&status.to_le_bytes());
    p
}

fn err(code: u16, state: &str, msg: &str) -> Vec<u8> {
    let mut p = vec![0xFF];
    p.extend_from_slice(&code.to_le_bytes());
    p.push(b'#');
    p.extend_from_slice(state.as_bytes());
    p.extend_from_slice(msg.as_bytes());
    p
}

fn coldef(name: &str) -> Vec<u8> {
    let mut p = Vec::new();
    for s in ["def", "shop", "t", "t", name, name] {
        put_lenenc(&mut p, s.len() as u64);
        p.extend_from_slice(s.as_bytes());
    }
    p.push(0x0c);
    p.extend_from_slice(&[0x21, 0, 0xFF, 0, 0, 0, 0xFD, 0, 0, 0, 0, 0]);
    p
}

fn row(vals: &[&str]) -> Vec<u8> {
    let mut p = Vec::new();
    for v in vals {
        put_lenenc(&mut p, v.len() as u64);
        p.extend_from_slice(v.as_bytes());
    }
    p
}

fn count(n: u64) -> Vec<u8> {
    let mut p = Vec::new();
    put_lenenc(&mut p, n);
    p
}

fn query(sql: &str) -> Vec<u8> {
    let mut p = vec![0x03];
    p.extend_from_slice(sql.as_bytes());
    p
}

fn stmt_cmd(cmd: u8, id: u32, tail: &[u8]) -> Vec<u8> {
    let mut p = vec![cmd];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(tail);
    p
}

fn prepare_ok(id: u32, cols: u16, params: u16) -> Vec<u8> {
    let mut p = vec![0];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&cols.to_le_bytes());
    p.extend_from_slice(&params.to_le_bytes());
    p.extend_from_slice(&[0, 0, 0]);
    p
}

/// A text result set: count, definitions, [EOF], rows, terminator.
fn resultset(cols: &[&str], rows: &[&[&str]], deprecate_eof: bool, status: u16) -> Vec<Vec<u8>> {
    let mut v = vec![count(cols.len() as u64)];
    v.extend(cols.iter().map(|c| coldef(c)));
    if !deprecate_eof {
        v.push(eof(0));
    }
    v.extend(rows.iter().map(|r| row(r)));
    v.push(if deprecate_eof {
        ok_fe(status)
    } else {
        eof(status)
    });
    v
}

// ---- transcript builder ----------------------------------------------------------------

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn compressed_frame(seq: u8, data: &[u8], codec: Codec) -> Vec<u8> {
    let (payload, ulen) = if data.len() < 50 {
        (data.to_vec(), 0)
    } else {
        match codec {
            Codec::Zlib => (zlib(data), data.len() as u32),
            Codec::Zstd => (zstd::bulk::compress(data, 3).unwrap(), data.len() as u32),
        }
    };
    let mut out = CompressedHeader {
        compressed_len: payload.len() as u32,
        seq,
        uncompressed_len: ulen,
    }
    .encode()
    .to_vec();
    out.extend_from_slice(&payload);
    out
}

struct B {
    t: Transcript,
    ts: u64,
    seq: u8,
    cseq: u8,
    comp: Option<Codec>,
}

impl B {
    fn new() -> Self {
        B {
            t: Vec::new(),
            ts: 1_000_000,
            seq: 0,
            cseq: 0,
            comp: None,
        }
    }
    fn seg(&mut self, d: Direction, payloads: &[Vec<u8>]) -> &mut Self {
        let mut raw = Vec::new();
        for p in payloads {
            self.seq = write_packets(&mut raw, self.seq, p);
        }
        let bytes = match self.comp {
            Some(c) => {
                let f = compressed_frame(self.cseq, &raw, c);
                self.cseq = self.cseq.wrapping_add(1);
                f
            }
            None => raw,
        };
        self.ts += 1000;
        self.t.push((d, bytes, self.ts));
        self
    }
    /// A new command (sequence ids restart).
    fn cmd(&mut self, payload: Vec<u8>) -> &mut Self {
        self.seq = 0;
        self.cseq = 0;
        self.seg(C, &[payload])
    }
    fn srv(&mut self, payloads: Vec<Vec<u8>>) -> &mut Self {
        self.seg(S, &payloads)
    }
    fn cli(&mut self, payloads: Vec<Vec<u8>>) -> &mut Self {
        self.seg(C, &payloads)
    }
    fn handshake(&mut self, c: u64, user: &str, db: Option<&str>) -> &mut Self {
        self.seq = 0;
        self.srv(vec![greeting(c)]);
        self.cli(vec![response(c, user, db)]);
        self.srv(vec![ok(0, 2)]);
        if c & caps::CLIENT_COMPRESS != 0 {
            self.comp = Some(Codec::Zlib);
        } else if c & caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 {
            self.comp = Some(Codec::Zstd);
        }
        self
    }
    fn steps(&self) -> Vec<Step> {
        steps(&self.t)
    }
}

fn run(b: &B, saw_open: bool) -> VecSink {
    assert_chunking_invariant(|| session(saw_open), &b.steps())
}

fn cmds(ev: &[QueryEvent]) -> Vec<&'static str> {
    ev.iter().map(|e| e.command).collect()
}

fn text(e: &QueryEvent) -> &str {
    e.text.as_deref().unwrap_or("")
}

// ---- tests -----------------------------------------------------------------------------

#[test]
fn handshake_and_text_resultset_both_eof_modes() {
    for deprecate in [true, false] {
        let c = if deprecate {
            BASE_CAPS | caps::CLIENT_DEPRECATE_EOF
        } else {
            BASE_CAPS
        };
        let mut b = B::new();
        b.handshake(c, "app", Some("shop"));
        b.cmd(query("SELECT id, name FROM t"));
        b.srv(resultset(
            &["id", "name"],
            &[&["1", "a"], &["2", "b"], &["3", "c"]],
            deprecate,
            2,
        ));
        b.cmd(query("SELECT id FROM t WHERE 0"));
        b.srv(resultset(&["id"], &[], deprecate, 2));
        let r = run(&b, true);
        assert_eq!(r.health, Default::default(), "deprecate {deprecate}");
        assert_eq!(r.events.len(), 2);
        let e = &r.events[0];
        assert_eq!(e.command, "query");
        assert_eq!(text(e), "SELECT id, name FROM t");
        assert_eq!(e.user.as_deref(), Some("app"));
        assert_eq!(e.database.as_deref(), Some("shop"));
        assert_eq!(e.rows_sent, 3);
        assert_eq!(e.outcome, Outcome::Ok);
        assert_eq!(e.start_ns, b.t[3].2);
        assert_eq!(e.first_response_ns, Some(b.t[4].2));
        assert_eq!(e.end_ns, Some(b.t[4].2));
        assert_eq!(e.bytes_in, b.t[3].1.len() as u64);
        assert_eq!(e.bytes_out, b.t[4].1.len() as u64);
        assert_eq!(r.events[1].rows_sent, 0);
        assert_eq!(r.events[1].outcome, Outcome::Ok);
        // The database Arc is shared by the connection's events.
        assert!(Arc::ptr_eq(
            e.database.as_ref().unwrap(),
            r.events[1].database.as_ref().unwrap()
        ));
    }
}

#[test]
fn response_split_over_segments_has_first_and_last_timestamps() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.cmd(query("SELECT 1"));
    let rs = resultset(&["1"], &[&["1"], &["2"]], true, 2);
    b.srv(rs[..2].to_vec());
    b.seq = 3;
    b.srv(rs[2..].to_vec());
    let r = run(&b, true);
    let e = &r.events[0];
    assert_eq!(e.first_response_ns, Some(b.t[4].2));
    assert_eq!(e.end_ns, Some(b.t[5].2));
    assert_eq!(e.latency_ns(), Some(b.t[5].2 - b.t[3].2));
    assert_eq!(e.rows_sent, 2);
    assert_eq!(e.database, None);
}

#[test]
fn prepared_statement_lifecycle() {
    for deprecate in [true, false] {
        let c = if deprecate {
            BASE_CAPS | caps::CLIENT_DEPRECATE_EOF
        } else {
            BASE_CAPS
        };
        let mut b = B::new();
        b.handshake(c, "app", Some("shop"));
        b.cmd(query("SELECT 1")); // not a statement: just to have a first event
        b.srv(resultset(&["1"], &[&["1"]], deprecate, 2));
        b.cmd([vec![0x16], b"SELECT a, b FROM t WHERE id > ?".to_vec()].concat());
        let mut resp = vec![prepare_ok(5, 2, 1), coldef("?")];
        if !deprecate {
            resp.push(eof(2));
        }
        resp.extend([coldef("a"), coldef("b")]);
        if !deprecate {
            resp.push(eof(2));
        }
        b.srv(resp);
        for n in [2usize, 0] {
            b.cmd(stmt_cmd(
                0x17,
                5,
                &[0, 1, 0, 0, 0, 0, 1, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0],
            ));
            let mut rs = vec![count(2), coldef("a"), coldef("b")];
            if !deprecate {
                rs.push(eof(2));
            }
            for i in 0..n {
                rs.push(vec![0, 0, i as u8 + 1, 0, 0, 0, 1, b'x']);
            }
            rs.push(if deprecate { ok_fe(2) } else { eof(2) });
            b.srv(rs);
        }
        b.cmd(stmt_cmd(0x1a, 5, b""));
        b.srv(vec![ok(0, 2)]);
        b.cmd(stmt_cmd(0x18, 5, &[0, 0, b'l', b'o', b'n', b'g']));
        b.cmd(stmt_cmd(0x19, 5, b""));
        b.cmd(stmt_cmd(0x17, 5, &[0, 1, 0, 0, 0]));
        b.srv(vec![err(
            1243,
            "HY000",
            "Unknown prepared statement handler (5) given to mysqld_stmt_execute",
        )]);
        let r = run(&b, true);
        assert_eq!(
            cmds(&r.events),
            [
                "query",
                "prepare",
                "execute",
                "execute",
                "reset",
                "send_long_data",
                "close",
                "execute"
            ]
        );
        let sql = "SELECT a, b FROM t WHERE id > ?";
        let p = &r.events[1];
        assert_eq!(
            (text(p), p.statement_id, p.outcome),
            (sql, Some(5), Outcome::Ok)
        );
        for e in &r.events[2..7] {
            assert_eq!((text(e), e.statement_id), (sql, Some(5)), "{}", e.command);
            assert!(Arc::ptr_eq(
                e.text.as_ref().unwrap(),
                p.text.as_ref().unwrap()
            ));
        }
        assert_eq!(r.events[2].rows_sent, 2);
        assert_eq!(r.events[3].rows_sent, 0);
        assert_eq!(r.events[5].outcome, Outcome::NoReplyExpected);
        assert_eq!(r.events[6].outcome, Outcome::NoReplyExpected);
        assert_eq!(r.events[6].end_ns, None);
        // After close, the id is unknown.
        let last = &r.events[7];
        assert_eq!(
            (last.text.as_deref(), last.statement_id, last.outcome),
            (None, Some(5), Outcome::Error)
        );
        assert_eq!(r.health, Default::default());
    }
}

#[test]
fn prepare_without_columns_or_params_and_error() {
    let mut b = B::new();
    b.handshake(BASE_CAPS, "app", None);
    b.cmd([vec![0x16], b"DO 1".to_vec()].concat());
    b.srv(vec![prepare_ok(1, 0, 0)]);
    b.cmd([vec![0x16], b"INSERT INTO t VALUES (?, ?)".to_vec()].concat());
    b.srv(vec![prepare_ok(2, 0, 2), coldef("?"), coldef("?"), eof(2)]);
    b.cmd([vec![0x16], b"SELEC".to_vec()].concat());
    b.srv(vec![err(
        1064,
        "42000",
        "You have an error in your SQL syntax",
    )]);
    b.cmd(stmt_cmd(
        0x17,
        2,
        &[0, 1, 0, 0, 0, 0, 1, 3, 0, 3, 0, 1, 0, 0, 0, 2, 0, 0, 0],
    ));
    b.srv(vec![ok(1, 2)]);
    let r = run(&b, true);
    assert_eq!(
        cmds(&r.events),
        ["prepare", "prepare", "prepare", "execute"]
    );
    assert_eq!(r.events[2].outcome, Outcome::Error);
    assert_eq!(r.events[2].statement_id, None);
    assert_eq!(text(&r.events[3]), "INSERT INTO t VALUES (?, ?)");
    assert_eq!(r.events[3].rows_affected, 1);
    assert_eq!(r.health, Default::default());
}

#[test]
fn cursor_execute_then_fetch() {
    for deprecate in [true, false] {
        let c = if deprecate {
            BASE_CAPS | caps::CLIENT_DEPRECATE_EOF
        } else {
            BASE_CAPS
        };
        let mut b = B::new();
        b.handshake(c, "app", None);
        b.cmd([vec![0x16], b"SELECT a FROM t".to_vec()].concat());
        let mut resp = vec![prepare_ok(3, 1, 0), coldef("a")];
        if !deprecate {
            resp.push(eof(2));
        }
        b.srv(resp);
        b.cmd(stmt_cmd(0x17, 3, &[1, 1, 0, 0, 0]));
        // Metadata then an EOF/OK with CURSOR_EXISTS: no rows here.
        let mut rs = vec![count(1), coldef("a")];
        rs.push(if deprecate { ok_fe(0x42) } else { eof(0x42) });
        b.srv(rs);
        b.cmd(stmt_cmd(0x1c, 3, &[2, 0, 0, 0]));
        b.srv(vec![
            vec![0, 0, 1, b'x'],
            vec![0, 0, 1, b'y'],
            if deprecate { ok_fe(0x42) } else { eof(0x42) },
        ]);
        b.cmd(stmt_cmd(0x1c, 3, &[2, 0, 0, 0]));
        b.srv(vec![
            vec![0, 0, 1, b'z'],
            if deprecate { ok_fe(0xC2) } else { eof(0xC2) },
        ]);
        let r = run(&b, true);
        assert_eq!(cmds(&r.events), ["prepare", "execute", "fetch", "fetch"]);
        assert_eq!(
            r.events.iter().map(|e| e.rows_sent).collect::<Vec<_>>(),
            [0, 0, 2, 1]
        );
        assert_eq!(text(&r.events[2]), "SELECT a FROM t");
        assert_eq!(r.health, Default::default());
    }
}

#[test]
fn local_infile() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.cmd(query("LOAD DATA LOCAL INFILE '/tmp/x.csv' INTO TABLE t"));
    b.srv(vec![b"\xfb/tmp/x.csv".to_vec()]);
    b.cli(vec![b"1,a\n2,b\n".to_vec(), b"3,c\n".to_vec()]);
    b.cli(vec![vec![]]);
    b.srv(vec![ok(3, 2)]);
    b.cmd(query("SELECT 1"));
    b.srv(resultset(&["1"], &[&["1"]], true, 2));
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["query", "query"]);
    let e = &r.events[0];
    assert_eq!(e.rows_affected, 3);
    assert_eq!(e.outcome, Outcome::Ok);
    assert_eq!(
        e.bytes_in,
        (b.t[3].1.len() + b.t[5].1.len() + b.t[6].1.len()) as u64
    );
    assert_eq!(e.bytes_out, (b.t[4].1.len() + b.t[7].1.len()) as u64);
    assert_eq!(r.health, Default::default());
}

#[test]
fn every_simple_command() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.cmd(vec![0x0e]);
    b.srv(vec![ok(0, 2)]);
    b.cmd([vec![0x02], b"shop".to_vec()].concat());
    b.srv(vec![ok(0, 2)]);
    b.cmd([vec![0x04], b"t\0".to_vec()].concat());
    b.srv(vec![coldef("id"), coldef("name"), eof(2)]);
    b.cmd(vec![0x09]);
    b.srv(vec![b"Uptime: 10  Threads: 1  Questions: 5".to_vec()]);
    b.cmd(vec![0x0c, 9, 0, 0, 0]);
    b.srv(vec![err(1094, "HY000", "Unknown thread id: 9")]);
    b.cmd(vec![0x1b, 1, 0]);
    b.srv(vec![eof(2)]);
    b.cmd(vec![0x1f]);
    b.srv(vec![ok(0, 2)]);
    b.cmd(query("use `my``db`"));
    b.srv(vec![ok(0, 2)]);
    b.cmd(query("USE nope"));
    b.srv(vec![err(1049, "42000", "Unknown database 'nope'")]);
    b.cmd(vec![0x99, 1, 2]);
    b.srv(vec![err(1047, "08S01", "Unknown command")]);
    b.cmd(
        [
            vec![0x11],
            b"bob\0\x14aaaaaaaaaaaaaaaaaaaaother\0\x21\0mysql_native_password\0".to_vec(),
        ]
        .concat(),
    );
    b.srv(vec![
        b"\xfemysql_native_password\0abcdefghijklmnopqrst\0".to_vec(),
    ]);
    b.cli(vec![vec![1; 20]]);
    b.srv(vec![ok(0, 2)]);
    b.cmd(vec![0x0e]);
    b.srv(vec![ok(0, 2)]);
    b.cmd(vec![0x01]);
    let r = run(&b, true);
    assert_eq!(
        cmds(&r.events),
        [
            "ping",
            "init_db",
            "field_list",
            "statistics",
            "process_kill",
            "set_option",
            "reset_connection",
            "query",
            "query",
            "unknown",
            "change_user",
            "ping",
            "quit"
        ]
    );
    let db = |i: usize| r.events[i].database.as_deref().map(str::to_owned);
    let user = |i: usize| r.events[i].user.as_deref().map(str::to_owned);
    // Events carry the schema in force when the command was sent.
    assert_eq!(db(0), None);
    assert_eq!(db(1), None);
    assert_eq!(db(2), Some("shop".into()));
    assert_eq!(db(7), Some("shop".into()));
    assert_eq!(db(8), Some("my`db".into()));
    assert_eq!(db(9), Some("my`db".into()));
    assert_eq!(r.events[8].outcome, Outcome::Error);
    assert_eq!(r.events[4].error.as_ref().unwrap().code, 1094);
    assert_eq!(r.events[9].outcome, Outcome::Error);
    assert_eq!(
        (user(10), db(10)),
        (Some("app".into()), Some("my`db".into()))
    );
    assert_eq!(
        (user(11), db(11)),
        (Some("bob".into()), Some("other".into()))
    );
    assert_eq!(
        r.events[10].bytes_in,
        (b.t[23].1.len() + b.t[25].1.len()) as u64
    );
    assert_eq!(r.events[12].outcome, Outcome::NoReplyExpected);
    for e in &r.events[..12] {
        assert!(e.end_ns.is_some(), "{}", e.command);
    }
    assert_eq!(r.health, Default::default());
}

#[test]
fn binlog_dump_stops() {
    let mut b = B::new();
    b.handshake(BASE_CAPS, "repl", None);
    b.cmd(vec![0x12, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    b.srv(vec![vec![0, 1, 2, 3]]);
    let mut s = session(true);
    let mut sink = VecSink::default();
    let mut progress = vec![];
    for (d, bytes, ts) in &b.t {
        progress.push(crate::Session::feed(&mut s, *d, bytes, *ts, &mut sink));
    }
    assert_eq!(progress.last(), Some(&crate::Progress::Stop));
    assert_eq!(cmds(&sink.events), ["binlog_dump"]);
}

#[test]
fn ssl_request_stops_and_counts() {
    let c = BASE_CAPS | caps::CLIENT_SSL;
    let mut b = B::new();
    b.srv(vec![greeting(c)]);
    let mut ssl = response(c, "", None)[..32].to_vec();
    ssl[..4].copy_from_slice(&(c as u32 & !(caps::CLIENT_CONNECT_WITH_DB as u32)).to_le_bytes());
    b.cli(vec![ssl]);
    b.t.push((C, vec![0x16, 0x03, 0x01, 0x02, 0x00], b.ts + 1));
    let r = run(&b, true);
    assert!(r.events.is_empty());
    assert_eq!(r.health.encrypted_connections, 1);
    let mut s = session(true);
    let mut sink = VecSink::default();
    assert_eq!(
        crate::Session::feed(&mut s, S, &b.t[0].1, 1, &mut sink),
        crate::Progress::Continue
    );
    assert_eq!(
        crate::Session::feed(&mut s, C, &b.t[1].1, 2, &mut sink),
        crate::Progress::Stop
    );
}

#[test]
fn auth_failure_and_auth_switch() {
    let mut b = B::new();
    b.srv(vec![greeting(BASE_CAPS)]);
    b.cli(vec![response(BASE_CAPS, "app", None)]);
    b.srv(vec![b"\xfeclient_ed25519\0xyz".to_vec()]);
    b.cli(vec![vec![9; 64]]);
    b.srv(vec![err(1045, "28000", "Access denied for user 'app'")]);
    let r = run(&b, true);
    // A failed login is a `connect` event: from the handshake response to the ERR, with the
    // auth exchange's bytes, the user and the server's error.
    assert_eq!(cmds(&r.events), ["connect"]);
    let e = &r.events[0];
    assert_eq!(e.outcome, Outcome::Error);
    assert_eq!(e.user.as_deref(), Some("app"));
    let err = e.error.as_ref().expect("error");
    assert_eq!((err.code, err.state.as_deref()), (1045, Some("28000")));
    assert_eq!(&*err.message, "Access denied for user 'app'");
    assert_eq!(
        (e.start_ns, e.first_response_ns, e.end_ns),
        (b.t[1].2, Some(b.t[2].2), Some(b.t[4].2))
    );
    let wire = |i: usize| (b.t[i].1.len()) as u64;
    assert_eq!(
        (e.bytes_in, e.bytes_out),
        (wire(1) + wire(3), wire(2) + wire(4))
    );
    assert_eq!(r.health, Default::default());

    // A refusal instead of a greeting ("Too many connections"): a failed connect too.
    let mut b = B::new();
    b.srv(vec![b"\xff\x10\x04Too many connections".to_vec()]);
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["connect"]);
    let err = r.events[0].error.as_ref().expect("error");
    assert_eq!((err.code, &*err.message), (1040, "Too many connections"));
    assert_eq!(r.events[0].user, None);
    assert_eq!(r.health, Default::default());

    let mut b = B::new();
    b.srv(vec![greeting(BASE_CAPS)]);
    b.cli(vec![response(BASE_CAPS, "app", None)]);
    b.srv(vec![b"\x01\x03".to_vec(), ok(0, 2)]);
    b.cmd(query("SELECT 1"));
    b.srv(resultset(&["1"], &[&["1"]], false, 2));
    let r = run(&b, true);
    // A successful login is not an event.
    assert_eq!(cmds(&r.events), ["query"]);
    assert_eq!(r.events[0].rows_sent, 1);
}

#[test]
fn mariadb_progress_reports_and_cache_metadata() {
    let mut b = B::new();
    b.handshake(
        BASE_CAPS | caps::CLIENT_DEPRECATE_EOF | caps::MARIADB_CLIENT_PROGRESS,
        "app",
        None,
    );
    b.cmd(query("ALTER TABLE t ADD INDEX (a)"));
    b.srv(vec![
        b"\xff\xff\xff\x01\x02\x10\x27\x00\x08copy tbl".to_vec(),
    ]);
    b.srv(vec![b"\xff\xff\xff\x02\x02\x10\x27\x00\x00".to_vec()]);
    b.srv(vec![ok(0, 2)]);
    // Cache metadata: column count with "metadata follows" 0, then rows directly.
    b.cmd(stmt_cmd(0x17, 1, &[0, 1, 0, 0, 0]));
    b.srv(vec![vec![1, 0], vec![0, 0, 1, b'x'], ok_fe(2)]);
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["query", "execute"]);
    assert_eq!(r.events[0].outcome, Outcome::Ok);
    assert_eq!(r.events[0].first_response_ns, Some(b.t[4].2));
    assert_eq!(r.events[0].end_ns, Some(b.t[6].2));
    assert_eq!(r.events[1].rows_sent, 1);
    assert_eq!(r.health, Default::default());
}

#[test]
fn skimmed_definitions_and_eof_before_rows() {
    // EOFs in use: cached metadata (no definitions) then an EOF before the rows; a text
    // result set's definitions; one without rows. Each response in one segment, so that the
    // skim takes the definitions, the EOF and the rows, and split every way by `run`.
    let mut b = B::new();
    b.handshake(BASE_CAPS, "app", None);
    b.cmd(stmt_cmd(0x17, 1, &[0, 1, 0, 0, 0]));
    b.srv(vec![
        vec![1, 0],
        eof(2),
        vec![0, 0, 1, b'x'],
        vec![0, 0, 1, b'y'],
        eof(0x22),
    ]);
    b.cmd(query("SELECT a, b FROM t"));
    b.srv(resultset(
        &["a", "b"],
        &[&["1", "2"], &["3", "4"], &["5", "6"]],
        false,
        2,
    ));
    b.cmd(query("SELECT a FROM t WHERE 0"));
    b.srv(resultset(&["a"], &[], false, 2));
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["execute", "query", "query"]);
    let rows: Vec<u64> = r.events.iter().map(|e| e.rows_sent).collect();
    assert_eq!(rows, [2, 3, 0]);
    assert!(r.events.iter().all(|e| e.outcome == Outcome::Ok));
    assert!(r.events[0].index.no_index_used);
    let bytes: Vec<u64> =
        b.t.iter()
            .filter(|s| s.0 == S)
            .map(|s| s.1.len() as u64)
            .collect();
    let out: Vec<u64> = r.events.iter().map(|e| e.bytes_out).collect();
    assert_eq!(out, bytes[2..]);
    assert_eq!(r.health, Default::default());
}

#[test]
fn session_track_schema_change() {
    let c = BASE_CAPS | caps::CLIENT_DEPRECATE_EOF | caps::CLIENT_SESSION_TRACK;
    let mut b = B::new();
    b.handshake(c, "app", None);
    b.cmd(query("CALL switch_db()"));
    b.srv(vec![
        b"\x00\x00\x00\x02\x40\x00\x00\x00\x07\x01\x05\x04shop".to_vec(),
    ]);
    b.cmd(query("SELECT 1"));
    b.srv(vec![ok(0, 2)]);
    let r = run(&b, true);
    assert_eq!(r.events[0].database, None);
    assert_eq!(r.events[1].database.as_deref(), Some("shop"));
}

#[test]
fn compressed_zlib_and_zstd() {
    for (flag, codec) in [
        (caps::CLIENT_COMPRESS, Codec::Zlib),
        (caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM, Codec::Zstd),
    ] {
        let c = BASE_CAPS | caps::CLIENT_DEPRECATE_EOF | flag;
        let mut b = B::new();
        b.handshake(c, "app", Some("shop"));
        assert_eq!(b.comp, Some(codec));
        b.cmd(query("SELECT 1"));
        b.srv(resultset(&["1"], &[&["1"]], true, 2));
        let long = format!(
            "SELECT * FROM t WHERE name IN ({})",
            vec!["'abcdef'"; 200].join(",")
        );
        b.cmd(query(&long));
        let rows: Vec<Vec<String>> = (0..500)
            .map(|i| vec![i.to_string(), format!("name-{i}")])
            .collect();
        let rows: Vec<Vec<&str>> = rows
            .iter()
            .map(|r| r.iter().map(String::as_str).collect())
            .collect();
        let rows: Vec<&[&str]> = rows.iter().map(Vec::as_slice).collect();
        b.srv(resultset(&["id", "name"], &rows, true, 2));
        b.cmd(query("SELECT nope"));
        b.srv(vec![err(
            1054,
            "42S22",
            "Unknown column 'nope' in 'field list'",
        )]);
        let r = run(&b, true);
        assert_eq!(r.health, Default::default(), "{codec:?}");
        assert_eq!(cmds(&r.events), ["query", "query", "query"]);
        assert_eq!(r.events[0].rows_sent, 1);
        assert_eq!(text(&r.events[1]), long);
        assert_eq!(r.events[1].rows_sent, 500);
        // Wire (compressed) bytes are counted.
        assert_eq!(r.events[1].bytes_in, b.t[5].1.len() as u64);
        assert_eq!(r.events[1].bytes_out, b.t[6].1.len() as u64);
        assert!(r.events[1].bytes_out < 500 * 10);
        assert_eq!(r.events[2].error.as_ref().unwrap().code, 1054);
    }
}

#[test]
fn compressed_response_in_many_frames() {
    let c = BASE_CAPS | caps::CLIENT_DEPRECATE_EOF | caps::CLIENT_COMPRESS;
    let mut b = B::new();
    b.handshake(c, "app", None);
    b.cmd(query("SELECT a FROM t"));
    let rows: Vec<Vec<u8>> = (0..3000)
        .map(|i| row(&[&format!("value-{i:06}")]))
        .collect();
    let mut resp = vec![count(1), coldef("a")];
    resp.extend(rows);
    resp.push(ok_fe(2));
    // Split the response bytes over frames at arbitrary points (like a 16K net buffer).
    let mut raw = Vec::new();
    let mut seq = 1u8;
    for p in &resp {
        seq = write_packets(&mut raw, seq, p);
    }
    let mut wire_len = 0;
    for (i, chunk) in raw.chunks(16384).enumerate() {
        let f = compressed_frame(i as u8 + 1, chunk, Codec::Zlib);
        wire_len += f.len();
        b.ts += 10;
        b.t.push((S, f, b.ts));
    }
    b.cmd(vec![0x0e]);
    b.srv(vec![ok(0, 2)]);
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["query", "ping"]);
    assert_eq!(r.events[0].rows_sent, 3000);
    assert_eq!(r.events[0].bytes_out, wire_len as u64);
    assert_eq!(r.health, Default::default());
}

#[test]
fn huge_packets_stream_through() {
    // A query of 16 MB + 100 bytes, and a result row of 16 MB + 10 bytes, both continued.
    let max_text = 1 << 20;
    let cfg = SessionConfig {
        max_inflight: 16,
        max_text,
        ..SessionConfig::default()
    };
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    let mut sql = String::from("INSERT INTO t VALUES ('");
    sql.push_str(&"é".repeat(8 * 1024 * 1024 + 40));
    sql.push_str("')");
    b.cmd(query(&sql));
    b.srv(vec![ok(1, 2)]);
    b.cmd(query("SELECT blob FROM t"));
    let big = vec![b'z'; 0xFF_FFFF + 10];
    let mut r = vec![0xFE];
    r.extend_from_slice(&(big.len() as u64).to_le_bytes());
    r.extend_from_slice(&big);
    b.srv(vec![count(1), coldef("blob"), r, row(&["small"]), ok_fe(2)]);
    let res = assert_chunkings(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
        &[Chunking::Whole, Chunking::Random(1), Chunking::Random(2)],
    );
    assert_eq!(res.health, Default::default());
    let e = &res.events[0];
    assert!(e.text_truncated);
    let t = text(e);
    // The beginning and the end of the statement are kept, the middle of the literal dropped.
    assert!(t.len() <= max_text && t.len() > max_text - 8, "{}", t.len());
    assert!(t.starts_with("INSERT INTO t VALUES ('éé"));
    assert!(t.ends_with("éé')"));
    assert_eq!(e.bytes_in, (sql.len() + 1 + 8) as u64);
    assert_eq!(e.rows_affected, 1);
    assert_eq!(res.events[1].rows_sent, 2);
    assert!(res.events[1].bytes_out > 0xFF_FFFF);
}

#[test]
fn statement_cut_in_the_middle_keeps_its_end() {
    // Longer than max_text: what follows the long literal must survive for the fingerprint.
    let max_text = 1 << 20;
    let cfg = SessionConfig {
        max_inflight: 16,
        max_text,
        ..SessionConfig::default()
    };
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    let sql = format!(
        "SELECT LENGTH('{}') AS huge_query_marker",
        "b".repeat(3 << 20)
    );
    b.cmd(query(&sql));
    b.srv(vec![
        count(1),
        coldef("huge_query_marker"),
        row(&["3145728"]),
        ok_fe(2),
    ]);
    b.cmd(query("SELECT 1"));
    b.srv(vec![count(1), coldef("1"), row(&["1"]), ok_fe(2)]);
    let res = assert_chunkings(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
        &[Chunking::Whole, Chunking::Random(4), Chunking::Random(5)],
    );
    let e = &res.events[0];
    assert!(e.text_truncated);
    let t = text(e);
    assert!(t.len() <= max_text, "{}", t.len());
    assert!(t.starts_with("SELECT LENGTH('bbb"));
    assert!(t.ends_with("bbb') AS huge_query_marker"));
    assert_eq!(e.bytes_in, (sql.len() + 1 + 4) as u64);
    assert_eq!(e.rows_sent, 1);
    assert_eq!(text(&res.events[1]), "SELECT 1");
    assert!(!res.events[1].text_truncated);
}

#[test]
fn two_megabyte_query_is_kept() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    let sql = format!("SELECT '{}'", "x".repeat(2 << 20));
    b.cmd(query(&sql));
    b.srv(vec![ok(0, 2)]);
    let res = assert_chunkings(
        || session(true),
        &b.steps(),
        &[Chunking::Whole, Chunking::Random(3)],
    );
    assert_eq!(text(&res.events[0]), sql);
    assert!(!res.events[0].text_truncated);
}

#[test]
fn text_is_cut_at_a_char_boundary() {
    let cfg = SessionConfig {
        max_inflight: 16,
        max_text: 10,
        ..SessionConfig::default()
    };
    let mut b = B::new();
    b.handshake(BASE_CAPS, "app", None);
    b.cmd(query("SELECT 'ééééé'"));
    b.srv(vec![ok(0, 2)]);
    b.cmd(query("SELECT 1"));
    b.srv(vec![ok(0, 2)]);
    let r = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
    );
    assert_eq!(text(&r.events[0]), "SELECT 'é");
    assert!(r.events[0].text_truncated);
    assert_eq!(text(&r.events[1]), "SELECT 1");
    assert!(!r.events[1].text_truncated);
}

#[test]
fn midstream_pickup_both_eof_modes() {
    for deprecate in [true, false] {
        let mut b = B::new();
        // The tail of a result set we never saw the request of.
        b.seq = 7;
        b.srv(vec![
            row(&["9"]),
            row(&["10"]),
            if deprecate { ok_fe(2) } else { eof(2) },
        ]);
        b.cmd(query("SELECT a FROM t"));
        b.srv(resultset(&["a"], &[&["1"], &["2"]], deprecate, 2));
        b.cmd([vec![0x16], b"SELECT ?".to_vec()].concat());
        let mut p = vec![prepare_ok(1, 1, 1), coldef("?")];
        if !deprecate {
            p.push(eof(2));
        }
        p.push(coldef("?"));
        if !deprecate {
            p.push(eof(2));
        }
        b.srv(p);
        b.cmd(stmt_cmd(
            0x17,
            1,
            &[0, 1, 0, 0, 0, 0, 1, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0],
        ));
        b.srv(vec![ok(0, 2)]);
        let r = run(&b, false);
        assert_eq!(
            cmds(&r.events),
            ["query", "prepare", "execute"],
            "deprecate {deprecate}"
        );
        assert_eq!(r.events[0].rows_sent, 2);
        assert_eq!(r.events[1].outcome, Outcome::Ok);
        assert_eq!(r.events[1].end_ns, Some(b.t[4].2));
        assert_eq!(text(&r.events[2]), "SELECT ?");
        assert_eq!(r.events[0].user, None);
        assert_eq!(r.health.unparsed_bytes, b.t[0].1.len() as u64);
        assert_eq!(r.health.responses_without_request, 0);
        assert_eq!(r.health.malformed, 0);
    }
}

#[test]
fn midstream_pickup_inside_a_client_packet() {
    let mut b = B::new();
    b.cmd(query("SELECT a FROM t WHERE x = 'a long string here'"));
    b.srv(resultset(&["a"], &[&["1"]], true, 2));
    b.cmd(query("SELECT 2"));
    b.srv(resultset(&["2"], &[&["2"]], true, 2));
    b.t[0].1.drain(..9);
    let r = run(&b, false);
    assert_eq!(cmds(&r.events), ["query"]);
    assert_eq!(text(&r.events[0]), "SELECT 2");
    assert_eq!(r.events[0].rows_sent, 1);
}

#[test]
fn midstream_detects_compression() {
    for codec in [Codec::Zlib, Codec::Zstd] {
        let mut b = B::new();
        b.comp = Some(codec);
        let long = format!(
            "SELECT * FROM t WHERE name IN ({})",
            vec!["'abc'"; 30].join(",")
        );
        b.cmd(query(&long));
        b.srv(resultset(&["a"], &[&["1"]], true, 2));
        b.cmd(vec![0x0e]);
        b.srv(vec![ok(0, 2)]);
        let r = run(&b, false);
        assert_eq!(cmds(&r.events), ["query", "ping"], "{codec:?}");
        assert_eq!(text(&r.events[0]), long);
        assert_eq!(r.health, Default::default());
    }
}

fn gap_transcript() -> B {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", Some("shop"));
    b.cmd(query("SELECT a FROM t"));
    let rows: Vec<Vec<u8>> = (0..50).map(|i| row(&[&format!("{i:04}")])).collect();
    let mut rs = vec![count(1), coldef("a")];
    rs.extend(rows);
    rs.push(ok_fe(2));
    b.srv(rs);
    b.cmd(query("SELECT 'second query'"));
    b.srv(resultset(&["x"], &[&["1"]], true, 2));
    b.cmd(query("SELECT 3"));
    b.srv(resultset(&["3"], &[&["3"]], true, 2));
    b
}

fn stream_offset(t: &Transcript, dir: Direction, index: usize) -> u64 {
    t[..index]
        .iter()
        .filter(|x| x.0 == dir)
        .map(|x| x.1.len() as u64)
        .sum()
}

#[test]
fn server_gap_marks_response_incomplete_and_resyncs() {
    let b = gap_transcript();
    // Lose 100 bytes in the middle of the first result set.
    let off = stream_offset(&b.t, S, 4) + 60;
    let st = with_gap(&b.t, S, off, 100);
    let r = assert_chunking_invariant(|| session(true), &st);
    assert_eq!(cmds(&r.events), ["query", "query", "query"]);
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert_eq!(r.events[1].outcome, Outcome::Ok);
    assert_eq!(r.events[1].rows_sent, 1);
    assert_eq!(r.events[2].rows_sent, 1);
    assert_eq!(r.events[1].database.as_deref(), Some("shop"));
    assert_eq!(r.health.resyncs, 1);
    assert!(r.health.unparsed_bytes > 0);
}

#[test]
fn client_gap_does_not_invent_the_request() {
    let b = gap_transcript();
    // The gap takes the end of the packet header: the framing is gone. (A gap inside the
    // payload keeps it: see tests/gap.rs.)
    let off = stream_offset(&b.t, C, 5) + 2;
    let st = with_gap(&b.t, C, off, 5);
    let r = assert_chunking_invariant(|| session(true), &st);
    assert_eq!(cmds(&r.events), ["query", "query"]);
    assert_eq!(text(&r.events[0]), "SELECT a FROM t");
    assert_eq!(r.events[0].rows_sent, 50);
    assert_eq!(text(&r.events[1]), "SELECT 3");
    assert_eq!(r.events[1].outcome, Outcome::Ok);
    assert_eq!(r.health.responses_without_request, 0);
    // The client lost sync, and the server skipped the lost request's response.
    assert_eq!(r.health.resyncs, 2);
    // A gap that removes exactly one whole command.
    let st = with_gap(&b.t, C, stream_offset(&b.t, C, 5), b.t[5].1.len() as u64);
    let r = assert_chunking_invariant(|| session(true), &st);
    assert_eq!(cmds(&r.events), ["query", "query"]);
    assert_eq!(text(&r.events[1]), "SELECT 3");
}

#[test]
fn gap_inside_compressed_stream() {
    let mut b = B::new();
    b.handshake(
        BASE_CAPS | caps::CLIENT_DEPRECATE_EOF | caps::CLIENT_COMPRESS,
        "app",
        None,
    );
    let rows: Vec<Vec<u8>> = (0..300)
        .map(|i| row(&[&format!("row number {i}")]))
        .collect();
    b.cmd(query("SELECT a FROM t"));
    let mut rs = vec![count(1), coldef("a")];
    rs.extend(rows);
    rs.push(ok_fe(2));
    b.srv(rs);
    let long = format!("SELECT '{}' FROM dual", "y".repeat(300));
    b.cmd(query(&long));
    b.srv(resultset(&["x"], &[&["1"]], true, 2));
    let off = stream_offset(&b.t, S, 4) + 30;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, S, off, 20));
    assert_eq!(cmds(&r.events), ["query", "query"]);
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert_eq!(text(&r.events[1]), long);
    assert_eq!(r.events[1].outcome, Outcome::Ok);
    let off = stream_offset(&b.t, C, 5) + 20;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, off, 10));
    assert_eq!(cmds(&r.events), ["query"]);
}

#[test]
fn gap_during_handshake_falls_back_to_midstream() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.cmd(query("SELECT 1"));
    b.srv(resultset(&["1"], &[&["1"]], true, 2));
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, 10, 10));
    assert_eq!(cmds(&r.events), ["query"]);
    assert_eq!(r.events[0].rows_sent, 1);
}

#[test]
fn responses_without_request_and_close_without_response() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.srv(vec![err(
        4031,
        "HY000",
        "The client was disconnected by the server because of inactivity",
    )]);
    b.cmd(query("SELECT SLEEP(100)"));
    let r = run(&b, true);
    assert_eq!(r.health.responses_without_request, 1);
    assert_eq!(r.events.len(), 1);
    assert_eq!(r.events[0].outcome, Outcome::NoResponse);
    assert_eq!(r.events[0].end_ns, None);
    // A response cut by the end of the capture.
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.cmd(query("SELECT a FROM t"));
    b.srv(vec![count(1), coldef("a"), row(&["1"])]);
    let r = run(&b, true);
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert_eq!(r.events[0].rows_sent, 1);
}

#[test]
fn pipelined_requests_and_overflow() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.seq = 0;
    let mut pipe = Vec::new();
    for q in ["SELECT 1", "SELECT 2", "SELECT 3"] {
        write_packets(&mut pipe, 0, &query(q));
    }
    b.ts += 1000;
    b.t.push((C, pipe, b.ts));
    for _ in 0..3 {
        b.seq = 1;
        b.srv(resultset(&["1"], &[&["1"]], true, 2));
    }
    b.cmd(vec![0x0e]);
    b.srv(vec![ok(0, 2)]);
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["query", "query", "query", "ping"]);
    assert!(
        r.events[..3]
            .iter()
            .all(|e| e.outcome == Outcome::Ok && e.rows_sent == 1)
    );
    let cfg = SessionConfig {
        max_inflight: 2,
        max_text: 100,
        ..SessionConfig::default()
    };
    let r = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &b.steps(),
    );
    assert_eq!(r.health.inflight_overflow, 1);
    assert_eq!(r.health.responses_without_request, 0);
    assert_eq!(cmds(&r.events), ["query", "query", "ping"]);
    assert_eq!(r.events[2].outcome, Outcome::Ok);
}

#[test]
fn not_mysql_stops() {
    let mut s = session(true);
    let mut sink = VecSink::default();
    let p = crate::Session::feed(&mut s, S, b"HTTP/1.1 200 OK\r\n\r\n", 1, &mut sink);
    assert_eq!(p, crate::Progress::Stop);
    assert_eq!(sink.health.malformed, 1);
    let r = run_steps(
        &mut session(true),
        &[Step::Data(C, b"GET / HTTP/1.1\r\n".to_vec(), 1)],
        Chunking::Whole,
    );
    assert!(r.events.is_empty());
}

#[test]
fn greeting_detection() {
    let mut g = Vec::new();
    write_packets(&mut g, 0, &greeting(BASE_CAPS));
    assert!(super::super::looks_like_server_greeting(&g));
    assert!(super::super::looks_like_server_greeting(&g[..30]));
    let mut e = Vec::new();
    write_packets(&mut e, 0, &err(1040, "08004", "Too many connections")[..]);
    assert!(super::super::looks_like_server_greeting(&e));
    assert!(!super::super::looks_like_server_greeting(
        b"HTTP/1.1 200 OK\r\n"
    ));
    assert!(!super::super::looks_like_server_greeting(b"+OK\r\n"));
    assert!(!super::super::looks_like_server_greeting(&[]));
    let mut pg = Vec::new();
    write_packets(&mut pg, 1, &greeting(BASE_CAPS));
    assert!(!super::super::looks_like_server_greeting(&pg));
}

#[test]
fn pipelined_prepare_and_execute_last_statement() {
    // MariaDB connectors send COM_STMT_PREPARE and COM_STMT_EXECUTE(-1) without waiting.
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    let mut pipe = Vec::new();
    write_packets(
        &mut pipe,
        0,
        &[vec![0x16], b"SELECT ? + 1".to_vec()].concat(),
    );
    write_packets(
        &mut pipe,
        0,
        &stmt_cmd(
            0x17,
            u32::MAX,
            &[0, 1, 0, 0, 0, 0, 1, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0],
        ),
    );
    b.ts += 1000;
    b.t.push((C, pipe, b.ts));
    b.seq = 1;
    b.srv(vec![prepare_ok(9, 1, 1), coldef("?"), coldef("? + 1")]);
    b.seq = 1;
    b.srv(vec![
        count(1),
        coldef("? + 1"),
        vec![0, 0, 2, 0, 0, 0, 0, 0, 0, 0],
        ok_fe(2),
    ]);
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["prepare", "execute"]);
    assert_eq!(r.events[1].statement_id, Some(9));
    assert_eq!(text(&r.events[1]), "SELECT ? + 1");
    assert_eq!(r.events[1].rows_sent, 1);
    // Its parameters wait for the prepare's answer to be decoded.
    let lits = r.events[1].params.as_ref().map(|p| p.literals());
    assert_eq!(lits, Some(vec!["1".to_string()]));
    assert_eq!(r.health, Default::default());
}

#[test]
fn midstream_prepare_before_any_result_set() {
    // Nothing has told the session whether EOF packets are deprecated yet.
    for deprecate in [true, false] {
        let mut b = B::new();
        b.cmd([vec![0x16], b"SELECT a FROM t WHERE b = ?".to_vec()].concat());
        let mut p = vec![prepare_ok(4, 1, 1), coldef("?")];
        if !deprecate {
            p.push(eof(2));
        }
        p.push(coldef("a"));
        if !deprecate {
            p.push(eof(2));
        }
        b.srv(p);
        b.cmd(stmt_cmd(
            0x17,
            4,
            &[0, 1, 0, 0, 0, 0, 1, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0],
        ));
        let mut rs = vec![count(1), coldef("a")];
        if !deprecate {
            rs.push(eof(2));
        }
        rs.extend([
            vec![0, 0, 1, b'x'],
            if deprecate { ok_fe(2) } else { eof(2) },
        ]);
        b.srv(rs);
        let r = run(&b, false);
        assert_eq!(
            cmds(&r.events),
            ["prepare", "execute"],
            "deprecate {deprecate}"
        );
        assert_eq!(r.events[0].outcome, Outcome::Ok);
        assert_eq!(r.events[0].bytes_out, b.t[1].1.len() as u64);
        assert_eq!(r.events[1].rows_sent, 1);
        assert_eq!(text(&r.events[1]), "SELECT a FROM t WHERE b = ?");
        assert_eq!(r.health, Default::default());
    }
}

#[test]
fn zlib_wins_when_both_compressions_are_offered() {
    let c = BASE_CAPS | caps::CLIENT_COMPRESS | caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM;
    let mut b = B::new();
    b.handshake(c, "app", None);
    assert_eq!(b.comp, Some(Codec::Zlib));
    let long = format!("SELECT '{}'", "q".repeat(100));
    b.cmd(query(&long));
    b.srv(resultset(&["x"], &[&["1"]], false, 2));
    let r = run(&b, true);
    assert_eq!(text(&r.events[0]), long);
    assert_eq!(r.events[0].rows_sent, 1);
    assert_eq!(r.health, Default::default());
}

/// Sets the warning count (bytes 3..5 of an EOF, the last two of our OK).
fn warn(mut p: Vec<u8>, n: u16) -> Vec<u8> {
    let at = if p[0] == 0xFE && p.len() < 7 {
        1
    } else {
        p.len() - 2
    };
    p[at..at + 2].copy_from_slice(&n.to_le_bytes());
    p
}

#[test]
fn warnings_of_the_packets_that_end_each_result_set() {
    for deprecate in [false, true] {
        let caps = BASE_CAPS
            | if deprecate {
                caps::CLIENT_DEPRECATE_EOF
            } else {
                0
            };
        let mut b = B::new();
        b.handshake(caps, "app", None);
        // An OK with 2 warnings.
        b.cmd(query("UPDATE t SET a = 'x1' WHERE id = 1"));
        b.srv(vec![warn(ok(1, 2), 2)]);
        // A result set whose final terminator says 3; the EOF between definitions and rows
        // (old protocol) carries 1, which is not counted again.
        b.cmd(query("SELECT 1/0"));
        let mut rs = resultset(&["1/0"], &[&["NULL"]], deprecate, 2);
        if !deprecate {
            rs[2] = warn(eof(0), 1);
        }
        let last = rs.len() - 1;
        rs[last] = warn(rs[last].clone(), 3);
        b.srv(rs);
        // Two result sets (multi-statement): 1 and 4, one statement each.
        b.cmd(query("SELECT 1/0; SELECT 'a' + 1"));
        let mut first = resultset(&["1/0"], &[&["NULL"]], deprecate, 2 | 8);
        let l = first.len() - 1;
        first[l] = warn(first[l].clone(), 1);
        let mut second = resultset(&["x"], &[&["1"]], deprecate, 2);
        let l = second.len() - 1;
        second[l] = warn(second[l].clone(), 4);
        first.extend(second);
        b.srv(first);
        // No warnings.
        b.cmd(query("SELECT 2"));
        b.srv(resultset(&["2"], &[&["2"]], deprecate, 2));
        let r = run(&b, true);
        assert_eq!(cmds(&r.events), ["query"; 5], "deprecate_eof {deprecate}");
        assert_eq!(
            r.events.iter().map(|e| e.warnings).collect::<Vec<_>>(),
            [2, 3, 1, 4, 0],
            "deprecate_eof {deprecate}"
        );
        assert_eq!(r.health, Default::default());
    }
}

mod gap;
mod multi;

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
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.cmd(query(&big));
    b.srv(vec![count(1), coldef("marker"), row(&["x"]), ok_fe(2)]);
    b.cmd(query("SELECT 1"));
    b.srv(vec![count(1), coldef("1"), row(&["1"]), ok_fe(2)]);
    let steps = b.steps();
    let chunkings = [Chunking::Whole, Chunking::Random(1), Chunking::Random(2)];
    let res = assert_chunkings(
        || super::super::new_session(meta(true), cfg.clone()),
        &steps,
        &chunkings,
    );
    assert_eq!(res.events.len(), 2);
    let e = &res.events[0];
    assert!(e.text_truncated);
    let t = text(e);
    assert!(
        t.len() <= TEXT_PREFIX && t.starts_with("SELECT 'qqq"),
        "{}",
        t.len()
    );
    assert_eq!(e.bytes_in, (big.len() + 1 + 4) as u64);
    assert_eq!(e.rows_sent, 1);
    assert!(e.latency_ns().is_some());
    assert_eq!(text(&res.events[1]), "SELECT 1");
    assert!(!res.events[1].text_truncated);
    assert!(budget.cut() > 0);
    drop(hold);
    assert_eq!(budget.used(), 0);
    // With room in the budget, the same text is kept whole (and given back after).
    let res = assert_chunkings(
        || super::super::new_session(meta(true), cfg.clone()),
        &steps,
        &chunkings,
    );
    assert_eq!(text(&res.events[0]), big);
    assert_eq!(budget.used(), 0);
}

#[test]
fn a_prepared_statement_holds_its_text_budget_while_cached() {
    use crate::kit::TextBudget;
    let budget = TextBudget::new(1 << 20);
    let cfg = SessionConfig {
        text_budget: budget.clone(),
        ..SessionConfig::default()
    };
    let big = format!(
        "SELECT a FROM t WHERE b = '{}' AND c = ?",
        "m".repeat(20_000)
    );
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", None);
    b.cmd([vec![0x16], big.clone().into_bytes()].concat());
    b.srv(vec![prepare_ok(5, 1, 1), coldef("?"), coldef("a")]);
    let mut s = super::super::new_session(meta(true), cfg);
    let r = run_steps(&mut s, &b.steps(), Chunking::Random(3));
    assert_eq!(cmds(&r.events), ["prepare"]);
    assert_eq!(text(&r.events[0]), big);
    // The statement is still cached after its event: its text still counts.
    assert!(budget.used() > big.len(), "{}", budget.used());
    drop(s);
    assert_eq!(budget.used(), 0);
}
mod tls;
mod txn;

#[test]
fn bound_values_and_index_flags() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", Some("shop"));
    b.cmd(
        [
            vec![0x16],
            b"SELECT a FROM t WHERE id = ? AND c = ?".to_vec(),
        ]
        .concat(),
    );
    b.srv(vec![
        prepare_ok(9, 1, 2),
        coldef("?"),
        coldef("?"),
        coldef("a"),
    ]);
    // First execution: types sent (longlong, var_string), values 7 and 'x'.
    let mut first = vec![0, 1, 0, 0, 0, 0, 1, 8, 0, 0xfd, 0];
    first.extend_from_slice(&7u64.to_le_bytes());
    first.extend_from_slice(&[1, b'x']);
    b.cmd(stmt_cmd(0x17, 9, &first));
    b.srv(vec![count(1), coldef("a"), ok_fe(0x0022)]);
    // Second: no types (the remembered ones apply), second value NULL.
    let mut second = vec![0, 1, 0, 0, 0, 0b10, 0];
    second.extend_from_slice(&(-3i64).to_le_bytes());
    b.cmd(stmt_cmd(0x17, 9, &second));
    b.srv(vec![count(1), coldef("a"), ok_fe(0x0012)]);
    b.cmd(query("SELECT 1"));
    b.srv(resultset(&["1"], &[&["1"]], true, 2));
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["prepare", "execute", "execute", "query"]);
    let lits = |e: &QueryEvent| e.params.as_ref().map(|p| p.literals());
    assert_eq!(lits(&r.events[1]), Some(vec!["7".into(), "'x'".into()]));
    assert_eq!(lits(&r.events[2]), Some(vec!["-3".into(), "NULL".into()]));
    assert_eq!(lits(&r.events[0]), None);
    assert_eq!(lits(&r.events[3]), None);
    let idx = |e: &QueryEvent| (e.index.no_index_used, e.index.no_good_index_used);
    assert_eq!(idx(&r.events[1]), (true, false));
    assert_eq!(idx(&r.events[2]), (false, true));
    assert_eq!(idx(&r.events[3]), (false, false));
}

#[test]
fn execute_of_id_minus_one_after_the_prepare_answer_has_values() {
    let mut b = B::new();
    b.handshake(BASE_CAPS | caps::CLIENT_DEPRECATE_EOF, "app", Some("shop"));
    b.cmd([vec![0x16], b"SELECT ? + 1".to_vec()].concat());
    b.srv(vec![prepare_ok(4, 1, 1), coldef("?"), coldef("x")]);
    // MariaDB's "the statement just prepared", sent after the prepare's answer.
    let mut body = vec![0, 1, 0, 0, 0, 0, 1, 8, 0];
    body.extend_from_slice(&41u64.to_le_bytes());
    b.cmd(stmt_cmd(0x17, u32::MAX, &body));
    b.srv(vec![count(1), coldef("x"), ok_fe(0x0002)]);
    let r = run(&b, true);
    assert_eq!(cmds(&r.events), ["prepare", "execute"]);
    let lits = r.events[1].params.as_ref().map(|p| p.literals());
    assert_eq!(lits, Some(vec!["41".to_string()]));
}
