//! From records to query events: PostgreSQL connections recorded by a TLS-reading source go
//! through the record format and the reassembler into proto sessions, which read on inside
//! TLS (`start_tls`) or start inside it. The shape of the pipeline's stream entry.

use std::collections::HashMap;
use std::net::SocketAddr;

use proto::postgres::wire::{code, put_message, put_startup};
use proto::{ConnMeta, Direction, Progress, Session, SessionConfig, VecSink};
use stream::{Endpoint, Reassembler, Record, StreamHandler, StreamOpen, decode, encode};

/// Drives one PostgreSQL session per connection.
#[derive(Default)]
struct Sessions {
    live: HashMap<u64, proto::postgres::PgSession>,
    sink: VecSink,
    refused_tls: u64,
}

impl StreamHandler for Sessions {
    fn open(&mut self, o: &StreamOpen) {
        let meta = ConnMeta {
            id: o.conn,
            client: "10.0.0.1:50000".parse::<SocketAddr>().unwrap().into(),
            server: "10.0.0.2:5432".parse::<SocketAddr>().unwrap().into(),
            saw_open: o.saw_open,
            peer: o.peer.clone(),
            after_tls: false,
        };
        let s = proto::postgres::new_session(meta, SessionConfig::default());
        self.live.insert(o.conn, s);
    }
    fn data(&mut self, conn: u64, dir: Direction, bytes: &[u8], ts_ns: u64) {
        if let Some(s) = self.live.get_mut(&conn) {
            // A session that stopped is kept: start_tls may resume it.
            let _: Progress = s.feed(dir, bytes, ts_ns, &mut self.sink);
        }
    }
    fn gap(&mut self, conn: u64, dir: Direction, len: u64, ts_ns: u64) {
        if let Some(s) = self.live.get_mut(&conn) {
            s.gap(dir, len, ts_ns, &mut self.sink);
        }
    }
    fn start_tls(&mut self, conn: u64, _ts_ns: u64) {
        if let Some(s) = self.live.get_mut(&conn)
            && !s.start_tls()
        {
            self.refused_tls += 1;
        }
    }
    fn close(&mut self, conn: u64, ts_ns: u64) {
        if let Some(mut s) = self.live.remove(&conn) {
            s.close(ts_ns, &mut self.sink);
        }
    }
}

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_message(&mut out, tag, body);
    out
}

fn startup(user: &str, db: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for s in ["user", user, "database", db] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = Vec::new();
    put_startup(&mut out, code::PROTOCOL_3_0, &body);
    out
}

/// Startup, trust auth, one simple query answered with one row.
fn conversation(user: &str) -> Vec<(Direction, Vec<u8>)> {
    let mut auth = msg(b'R', &[0, 0, 0, 0]);
    auth.extend(msg(b'Z', b"I"));
    let mut answer = msg(b'T', &[0, 0]);
    answer.extend(msg(b'D', &[0, 0]));
    answer.extend(msg(b'C', b"SELECT 1\0"));
    answer.extend(msg(b'Z', b"I"));
    vec![
        (Direction::ToServer, startup(user, "shop")),
        (Direction::ToClient, auth),
        (Direction::ToServer, msg(b'Q', b"SELECT x FROM t\0")),
        (Direction::ToClient, answer),
    ]
}

/// Encodes the records of one connection: `plain` before TLS, `tls` inside it.
fn record(
    out: &mut Vec<Vec<u8>>,
    conn: u64,
    plain: &[(Direction, Vec<u8>)],
    tls: &[(Direction, Vec<u8>)],
) {
    let mut b = Vec::new();
    let a: SocketAddr = "10.0.0.1:50000".parse().unwrap();
    let open = StreamOpen {
        conn,
        ts_ns: 1,
        client: Endpoint::from(a),
        server: Endpoint::Unix("/run/postgresql/.s.PGSQL.5432".into()),
        peer: None,
        saw_open: true,
    };
    encode(&Record::Open(open), &mut b);
    out.push(std::mem::take(&mut b));
    let mut offsets = [0u64; 2];
    let all = plain
        .iter()
        .map(|p| (p, false))
        .chain(tls.iter().map(|p| (p, true)));
    for (i, ((dir, bytes), tls)) in all.enumerate() {
        let o = &mut offsets[usize::from(*dir == Direction::ToClient)];
        let r = Record::Data {
            conn,
            dir: *dir,
            ts_ns: 10 + i as u64,
            offset: *o,
            len: bytes.len() as u64,
            bytes,
            tls,
        };
        *o += bytes.len() as u64;
        encode(&r, &mut b);
        out.push(std::mem::take(&mut b));
    }
    encode(&Record::Close { conn, ts_ns: 100 }, &mut b);
    out.push(b);
}

#[test]
fn tls_connections_become_events_with_their_user() {
    let mut ssl = Vec::new();
    put_startup(&mut ssl, code::SSL_REQUEST, b"");
    let before = [
        (Direction::ToServer, ssl),
        (Direction::ToClient, b"S".to_vec()),
    ];
    let mut file = Vec::new();
    // Connection 1: SSLRequest and 'S' in plaintext, then TLS.
    record(&mut file, 1, &before, &conversation("alice"));
    // Connection 2: only the decrypted plaintext was recorded.
    record(&mut file, 2, &[], &conversation("bob"));
    let mut r = Reassembler::new(16);
    let mut h = Sessions::default();
    for packet in &file {
        r.push(&decode(packet).expect("decodes"), &mut h);
    }
    r.finish(200, &mut h);
    assert_eq!(h.refused_tls, 0);
    assert_eq!(h.sink.health, proto::Health::default());
    let users: Vec<_> = h.sink.events.iter().map(|e| e.user.as_deref()).collect();
    assert_eq!(users, [Some("alice"), Some("bob")]);
    for e in &h.sink.events {
        assert_eq!(e.text.as_deref(), Some("SELECT x FROM t"));
        assert_eq!(e.database.as_deref(), Some("shop"));
        assert_eq!(e.outcome, proto::Outcome::Ok);
    }
    assert_eq!(r.stats().tls_starts, 2);
}
