//! Byte-literal tests of the session: every RESP type, inline commands, pipelines,
//! transactions, pub/sub, CLIENT REPLY, HELLO, loss and mid-stream pickup, huge values; each
//! fed whole, byte by byte and in random splits.

use std::net::SocketAddr;

use super::RedisSession;
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
        server: "10.0.0.2:6379".parse::<SocketAddr>().unwrap().into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

fn session(saw_open: bool) -> RedisSession {
    super::super::new_session(meta(saw_open), SessionConfig::default())
}

/// A command as clients send it: an array of bulk strings.
fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        b.extend_from_slice(a);
        b.extend_from_slice(b"\r\n");
    }
    b
}

/// `cmd` of space-separated words.
fn c(words: &str) -> Vec<u8> {
    let args: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
    cmd(&args)
}

fn bulk(v: &[u8]) -> Vec<u8> {
    let mut b = format!("${}\r\n", v.len()).into_bytes();
    b.extend_from_slice(v);
    b.extend_from_slice(b"\r\n");
    b
}

/// Segments with timestamps 1000, 2000, ...
fn tr(segs: &[(Direction, &[u8])]) -> Transcript {
    segs.iter()
        .enumerate()
        .map(|(i, (d, b))| (*d, b.to_vec(), 1000 * (i as u64 + 1)))
        .collect()
}

fn run(t: &Transcript) -> VecSink {
    assert_chunking_invariant(|| session(true), &steps(t))
}

fn texts(evs: &[QueryEvent]) -> Vec<String> {
    evs.iter()
        .map(|e| e.text.as_deref().unwrap_or("").to_string())
        .collect()
}

/// Each reply pairs with a GET; returns the event.
fn one(reply: &[u8]) -> (QueryEvent, Health) {
    let t = tr(&[(C, &c("GET k")), (S, reply)]);
    let r = run(&t);
    assert_eq!(r.events.len(), 1, "{reply:?}: {:#?}", r.events);
    (r.events[0].clone(), r.health)
}

#[test]
fn resp2_types() {
    for (reply, rows, outcome) in [
        (&b"+OK\r\n"[..], 0, Outcome::Ok),
        (b":1000\r\n", 0, Outcome::Ok),
        (b":-5\r\n", 0, Outcome::Ok),
        (b"$3\r\nfoo\r\n", 1, Outcome::Ok),
        (b"$0\r\n\r\n", 1, Outcome::Ok),
        (b"$-1\r\n", 0, Outcome::Ok),
        (b"*-1\r\n", 0, Outcome::Ok),
        (b"*0\r\n", 0, Outcome::Ok),
        (b"*2\r\n$1\r\na\r\n$-1\r\n", 2, Outcome::Ok),
        (
            b"*3\r\n:1\r\n*2\r\n+a\r\n*1\r\n:2\r\n$1\r\nx\r\n",
            3,
            Outcome::Ok,
        ),
        (b"-ERR boom\r\n", 0, Outcome::Error),
        // Bulk payloads may hold CR, LF and type bytes.
        (b"$6\r\n*\r\n-\n:\r\n", 1, Outcome::Ok),
    ] {
        let (e, h) = one(reply);
        assert_eq!(h, Health::default(), "{reply:?}");
        assert_eq!(e.rows_sent, rows, "{reply:?}");
        assert_eq!(e.outcome, outcome, "{reply:?}");
        assert_eq!(e.bytes_out, reply.len() as u64, "{reply:?}");
        assert_eq!(e.bytes_in, c("GET k").len() as u64);
        assert_eq!(e.command, "get");
        assert_eq!(e.text.as_deref(), Some("GET k"));
        assert_eq!(e.start_ns, 1000);
        assert_eq!(e.first_response_ns, Some(2000));
        assert_eq!(e.end_ns, Some(2000));
        assert_eq!(e.database.as_deref(), Some("0"));
    }
}

#[test]
fn resp3_types() {
    for (reply, rows, outcome) in [
        (&b"_\r\n"[..], 0, Outcome::Ok),
        (b"#t\r\n", 0, Outcome::Ok),
        (b"#f\r\n", 0, Outcome::Ok),
        (b",3.14\r\n", 0, Outcome::Ok),
        (b",-inf\r\n", 0, Outcome::Ok),
        (b",1.5e10\r\n", 0, Outcome::Ok),
        (b"(3492890328409238509324850943850943825024385\r\n", 0, Outcome::Ok),
        (b"!21\r\nSYNTAX invalid syntax\r\n", 0, Outcome::Error),
        (b"=15\r\ntxt:Some string\r\n", 1, Outcome::Ok),
        (b"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", 2, Outcome::Ok),
        (b"~3\r\n+a\r\n+b\r\n+c\r\n", 3, Outcome::Ok),
        // Nested aggregates of every kind.
        (
            b"*2\r\n%1\r\n+k\r\n~2\r\n#t\r\n_\r\n*1\r\n%1\r\n$1\r\nx\r\n,1.0\r\n",
            2,
            Outcome::Ok,
        ),
        // An attribute precedes the reply and counts with it.
        (
            b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n",
            2,
            Outcome::Ok,
        ),
        // Attributes inside an aggregate.
        (b"*2\r\n|1\r\n+ttl\r\n:3600\r\n:1\r\n:2\r\n", 2, Outcome::Ok),
    ] {
        let (e, h) = one(reply);
        assert_eq!(h, Health::default(), "{reply:?}");
        assert_eq!(e.rows_sent, rows, "{}", String::from_utf8_lossy(reply));
        assert_eq!(e.outcome, outcome, "{reply:?}");
        assert_eq!(e.bytes_out, reply.len() as u64, "{reply:?}");
    }
    let (e, _) = one(b"!21\r\nSYNTAX invalid syntax\r\n");
    let err = e.error.unwrap();
    assert_eq!(err.state.as_deref(), Some("SYNTAX"));
    assert_eq!(&*err.message, "invalid syntax");
}

#[test]
fn errors_carry_their_prefix() {
    let (e, _) = one(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
    assert_eq!(e.outcome, Outcome::Error);
    let err = e.error.unwrap();
    assert_eq!(err.code, 0);
    assert_eq!(err.state.as_deref(), Some("WRONGTYPE"));
    assert_eq!(
        &*err.message,
        "Operation against a key holding the wrong kind of value"
    );
    let (e, _) = one(b"-ERR unknown command 'NOPE'\r\n");
    assert_eq!(e.error.unwrap().state.as_deref(), Some("ERR"));
}

#[test]
fn malformed_replies_are_counted() {
    for reply in [
        &b"$?\r\n;4\r\nHell\r\n;0\r\n"[..],
        b"*?\r\n:1\r\n.\r\n",
        b"?what\r\n",
        b"$3\r\nfoobar\r\n",
        b":12a\r\n",
        b"#x\r\n",
        b"+OK\n",
        b"$99999999999999999999999\r\n",
    ] {
        let t = tr(&[
            (C, &c("GET k")),
            (S, reply),
            (C, &c("GET j")),
            (S, b"+OK\r\n"),
        ]);
        let r = run(&t);
        assert_eq!(r.health.malformed, 1, "{reply:?}");
        assert_eq!(r.events[0].outcome, Outcome::Incomplete, "{reply:?}");
        // The next command resynchronizes the server side.
        assert_eq!(r.events[1].outcome, Outcome::Ok, "{reply:?}");
        assert_eq!(r.events[1].text.as_deref(), Some("GET j"));
        let total: u64 = t
            .iter()
            .filter(|x| x.0 == S)
            .map(|x| x.1.len() as u64)
            .sum();
        assert_eq!(
            r.health.unparsed_bytes + r.events.iter().map(|e| e.bytes_out).sum::<u64>(),
            total,
            "{reply:?}"
        );
    }
    // Nesting deeper than 128.
    let deep = "*1\r\n".repeat(200) + ":1\r\n";
    let r = run(&tr(&[(C, &c("GET k")), (S, deep.as_bytes())]));
    assert_eq!(r.health.malformed, 1);
    // 128 is fine.
    let ok = "*1\r\n".repeat(128) + ":1\r\n";
    let r = run(&tr(&[(C, &c("GET k")), (S, ok.as_bytes())]));
    assert_eq!(r.health, Health::default());
    assert_eq!(r.events[0].rows_sent, 1);
}

#[test]
fn inline_commands() {
    let t = tr(&[
        (C, b"PING\r\n"),
        (S, b"+PONG\r\n"),
        (C, b"set  b   \"hello world\"\r\n\r\n\nget b\n"),
        (S, b"+OK\r\n$11\r\nhello world\r\n"),
        (C, b"SET 'it\\'s' \"\\x41\\n\"\r\n"),
        (S, b"+OK\r\n"),
        (C, b"nope a b\r\n"),
        (S, b"-ERR unknown command 'nope'\r\n"),
    ]);
    let r = run(&t);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        texts(&r.events),
        ["PING", "SET b", "GET b", "SET it's", "NOPE"]
    );
    assert_eq!(r.events[0].command, "ping");
    assert_eq!(r.events[4].command, "unknown");
    assert_eq!(r.events[4].outcome, Outcome::Error);
    // Blank lines count with the next command.
    assert_eq!(r.events[1].bytes_in, 24);
    assert_eq!(r.events[2].bytes_in, 3 + 6);
    let total_in: u64 = t
        .iter()
        .filter(|x| x.0 == C)
        .map(|x| x.1.len() as u64)
        .sum();
    assert_eq!(r.events.iter().map(|e| e.bytes_in).sum::<u64>(), total_in);
    // Unbalanced quotes: a protocol error.
    let r = run(&tr(&[
        (C, b"SET \"a b\r\n"),
        (S, b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    ]));
    assert_eq!(r.health.malformed, 1);
    assert!(r.events.is_empty());
}

#[test]
fn pipeline_of_hundreds_in_one_segment() {
    let mut req = Vec::new();
    let mut rep = Vec::new();
    for i in 0..300 {
        match i % 3 {
            0 => {
                req.extend(cmd(&[b"SET", format!("key:{i}").as_bytes(), b"value"]));
                rep.extend_from_slice(b"+OK\r\n");
            }
            1 => {
                req.extend(c(&format!("GET key:{i}")));
                rep.extend(bulk(b"value"));
            }
            _ => {
                req.extend(c(&format!("LRANGE list:{i} 0 -1")));
                rep.extend_from_slice(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n");
            }
        }
    }
    let t = tr(&[(C, &req), (S, &rep)]);
    let r = run(&t);
    assert_eq!(r.health, Health::default());
    assert_eq!(r.events.len(), 300);
    for (i, e) in r.events.iter().enumerate() {
        assert_eq!(e.outcome, Outcome::Ok);
        let (text, rows) = match i % 3 {
            0 => (format!("SET key:{i}"), 0),
            1 => (format!("GET key:{i}"), 1),
            _ => (format!("LRANGE list:{i}"), 2),
        };
        assert_eq!(e.text.as_deref(), Some(text.as_str()));
        assert_eq!(e.rows_sent, rows);
        assert_eq!((e.start_ns, e.end_ns), (1000, Some(2000)));
    }
    assert_eq!(
        r.events.iter().map(|e| e.bytes_in).sum::<u64>(),
        req.len() as u64
    );
    assert_eq!(
        r.events.iter().map(|e| e.bytes_out).sum::<u64>(),
        rep.len() as u64
    );
}

#[test]
fn inflight_overflow_keeps_the_order() {
    let mut req = Vec::new();
    let mut rep = Vec::new();
    for i in 0..10 {
        req.extend(c(&format!("GET k{i}")));
        rep.extend(bulk(format!("v{i}").as_bytes()));
    }
    let t = tr(&[
        (C, &req),
        (S, &rep),
        (C, &c("GET last")),
        (S, b"$4\r\nlast\r\n"),
    ]);
    let cfg = SessionConfig {
        max_inflight: 4,
        ..SessionConfig::default()
    };
    let r = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &steps(&t),
    );
    assert_eq!(r.health.inflight_overflow, 6);
    assert_eq!(r.health.responses_without_request, 0);
    assert_eq!(
        texts(&r.events),
        ["GET k0", "GET k1", "GET k2", "GET k3", "GET last"]
    );
    assert_eq!(r.events[4].bytes_out, 10);
    assert!(r.events.iter().all(|e| e.outcome == Outcome::Ok));
}

#[test]
fn multi_exec() {
    let t = tr(&[
        (
            C,
            &[c("MULTI"), c("SET a 3"), c("LPUSH a x"), c("GET a"), c("EXEC")].concat(),
        ),
        (S, b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n"),
        (
            S,
            b"*3\r\n+OK\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n$1\r\n3\r\n",
        ),
    ]);
    let r = run(&t);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        texts(&r.events),
        ["MULTI", "SET a", "LPUSH a", "GET a", "EXEC"]
    );
    let e = &r.events;
    assert_eq!(e[1].outcome, Outcome::Ok);
    assert_eq!(e[2].outcome, Outcome::Error);
    assert_eq!(
        e[2].error.as_ref().unwrap().state.as_deref(),
        Some("WRONGTYPE")
    );
    assert_eq!(e[3].rows_sent, 1);
    assert_eq!(e[4].rows_sent, 3);
    // Queued commands: timing of their +QUEUED, bytes of +QUEUED plus their element.
    assert_eq!(e[1].end_ns, Some(2000));
    assert_eq!(e[1].bytes_out, 9 + 5);
    assert_eq!(e[3].bytes_out, 9 + 7);
    assert_eq!(e[4].bytes_out, 4);
    assert_eq!(e[4].end_ns, Some(3000));
    let out: u64 = t
        .iter()
        .filter(|x| x.0 == S)
        .map(|x| x.1.len() as u64)
        .sum();
    assert_eq!(e.iter().map(|e| e.bytes_out).sum::<u64>(), out);
}

#[test]
fn exec_abort_discard_and_watch() {
    // A command refused while queueing makes EXEC refuse the whole transaction.
    let t = tr(&[
        (C, &[c("MULTI"), c("SET a"), c("GET a"), c("EXEC")].concat()),
        (
            S,
            b"+OK\r\n-ERR wrong number of arguments for 'set' command\r\n+QUEUED\r\n-EXECABORT Transaction discarded because of previous errors.\r\n",
        ),
    ]);
    let r = run(&t);
    assert_eq!(texts(&r.events), ["MULTI", "SET a", "GET a", "EXEC"]);
    let e = &r.events;
    assert_eq!(e[1].outcome, Outcome::Error);
    assert_eq!(e[2].outcome, Outcome::Error);
    assert_eq!(
        e[2].error.as_ref().unwrap().state.as_deref(),
        Some("EXECABORT")
    );
    assert_eq!(e[3].outcome, Outcome::Error);
    assert_eq!(
        e[3].error.as_ref().unwrap().state.as_deref(),
        Some("EXECABORT")
    );

    let t = tr(&[
        (C, &[c("MULTI"), c("INCR a"), c("DISCARD")].concat()),
        (S, b"+OK\r\n+QUEUED\r\n+OK\r\n"),
        (C, &c("EXEC")),
        (S, b"-ERR EXEC without MULTI\r\n"),
    ]);
    let r = run(&t);
    assert_eq!(texts(&r.events), ["MULTI", "INCR a", "DISCARD", "EXEC"]);
    assert_eq!(
        r.events[1].error.as_ref().unwrap().state.as_deref(),
        Some("DISCARDED")
    );
    assert_eq!(r.events[2].outcome, Outcome::Ok);
    assert_eq!(r.events[3].outcome, Outcome::Error);

    let t = tr(&[
        (
            C,
            &[c("WATCH a"), c("MULTI"), c("INCR a"), c("EXEC")].concat(),
        ),
        (S, b"+OK\r\n+OK\r\n+QUEUED\r\n*-1\r\n"),
    ]);
    let r = run(&t);
    assert_eq!(texts(&r.events), ["WATCH a", "MULTI", "INCR a", "EXEC"]);
    assert_eq!(
        r.events[2].error.as_ref().unwrap().state.as_deref(),
        Some("ABORTED")
    );
    assert_eq!(r.events[3].outcome, Outcome::Ok);
    assert_eq!(r.events[3].rows_sent, 0);

    // RESP3: the same with a null.
    let t = tr(&[
        (C, &[c("MULTI"), c("INCR a"), c("EXEC")].concat()),
        (S, b"+OK\r\n+QUEUED\r\n_\r\n"),
    ]);
    let r = run(&t);
    assert_eq!(
        r.events[1].error.as_ref().unwrap().state.as_deref(),
        Some("ABORTED")
    );

    // A transaction never finished: the queued command is incomplete at close.
    let t = tr(&[
        (C, &[c("MULTI"), c("INCR a")].concat()),
        (S, b"+OK\r\n+QUEUED\r\n"),
    ]);
    let r = run(&t);
    assert_eq!(r.events[1].outcome, Outcome::Incomplete);
}

#[test]
fn transaction_picked_up_mid_stream() {
    // The capture starts after MULTI and the first queued command.
    let t = tr(&[
        (C, &[c("INCR b"), c("EXEC")].concat()),
        (S, b"+QUEUED\r\n*2\r\n:5\r\n:7\r\n"),
    ]);
    let r = assert_chunking_invariant(|| session(false), &steps(&t));
    assert_eq!(texts(&r.events), ["INCR b", "EXEC"]);
    // Sent before anything was paired after the pickup: not trusted, but accounted.
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    // The second element is INCR b's.
    assert_eq!(r.events[0].bytes_out, 9 + 4);
    assert_eq!(r.events[1].bytes_out, 4 + 4);
    assert_eq!(r.events[1].rows_sent, 2);
}

#[test]
fn pubsub_resp2() {
    let t = tr(&[
        (C, &c("SUBSCRIBE a b")),
        (
            S,
            b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n",
        ),
        (S, b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nhello\r\n"),
        (C, &c("PSUBSCRIBE p*")),
        (
            S,
            b"*3\r\n$7\r\nmessage\r\n$1\r\nb\r\n$2\r\nhi\r\n*3\r\n$10\r\npsubscribe\r\n$2\r\np*\r\n:3\r\n",
        ),
        (
            S,
            b"*4\r\n$8\r\npmessage\r\n$2\r\np*\r\n$2\r\npx\r\n$1\r\nz\r\n",
        ),
        (C, &c("PING")),
        (S, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"),
        (C, &c("GET x")),
        (
            S,
            b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
        ),
        (C, &c("UNSUBSCRIBE")),
        (
            S,
            b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:2\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:1\r\n",
        ),
        (C, &[c("PUNSUBSCRIBE"), c("UNSUBSCRIBE")].concat()),
        (
            S,
            b"*3\r\n$12\r\npunsubscribe\r\n$2\r\np*\r\n:0\r\n*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n",
        ),
        (C, &c("LRANGE l 0 -1")),
        // Not subscribed any more: a message-shaped array is a reply.
        (S, b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nb\r\n"),
    ]);
    let r = run(&t);
    let len = |i: usize| t[i].1.len() as u64;
    assert_eq!(
        r.health,
        Health {
            server_pushes: 3,
            server_push_bytes: len(2) + 32 + len(5),
            ..Health::default()
        }
    );
    assert_eq!(
        texts(&r.events),
        [
            "SUBSCRIBE",
            "PSUBSCRIBE",
            "PING",
            "GET x",
            "UNSUBSCRIBE",
            "PUNSUBSCRIBE",
            "UNSUBSCRIBE",
            "LRANGE l"
        ]
    );
    assert_eq!(r.events[0].bytes_out, len(1));
    assert_eq!(r.events[0].end_ns, Some(2000));
    assert_eq!(r.events[1].end_ns, Some(5000));
    assert_eq!(r.events[2].rows_sent, 2);
    assert_eq!(r.events[3].outcome, Outcome::Error);
    assert_eq!(r.events[4].bytes_out, len(11));
    assert_eq!(r.events[7].rows_sent, 3);
}

#[test]
fn pubsub_resp3() {
    let hello = b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:6\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
    let t = tr(&[
        (C, &c("HELLO 3")),
        (S, hello),
        (C, &c("SUBSCRIBE a b")),
        (
            S,
            b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n>3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n",
        ),
        (C, &c("GET x")),
        // A message pushed before the reply; the reply looks like a message but is not one.
        (
            S,
            b">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nhello\r\n*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nb\r\n",
        ),
        (C, &c("UNSUBSCRIBE")),
        (
            S,
            b">3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n>3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n",
        ),
        // Client-side caching invalidation.
        (S, b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nx\r\n"),
        (C, &c("PING")),
        (S, b"+PONG\r\n"),
    ]);
    let r = run(&t);
    // Two pushes: the `>3 message` (35 bytes) and the invalidation (32 bytes).
    assert_eq!(
        r.health,
        Health {
            server_pushes: 2,
            server_push_bytes: 35 + 32,
            ..Health::default()
        }
    );
    assert_eq!(
        texts(&r.events),
        ["HELLO", "SUBSCRIBE", "GET x", "UNSUBSCRIBE", "PING"]
    );
    assert_eq!(r.events[0].rows_sent, 7);
    assert_eq!(r.events[2].rows_sent, 3);
    assert_eq!(r.events[2].bytes_out, 31);
    let mut s = session(true);
    run_steps(&mut s, &steps(&t), Chunking::Whole);
    assert!(s.resp3());
}

#[test]
fn hello_switches_and_resets() {
    let t = tr(&[
        (C, &[c("HELLO 3"), c("HGETALL h")].concat()),
        (
            S,
            b"%1\r\n$5\r\nproto\r\n:3\r\n%1\r\n$1\r\nf\r\n$1\r\nv\r\n",
        ),
        (C, &c("HELLO 2")),
        (S, b"*2\r\n$5\r\nproto\r\n:2\r\n"),
        (C, &c("HELLO 4")),
        (S, b"-NOPROTO unsupported protocol version\r\n"),
        (C, &c("AUTH alice pw")),
        (S, b"+OK\r\n"),
        (C, &c("SELECT 4")),
        (S, b"+OK\r\n"),
        (C, &c("GET k")),
        (S, b"$-1\r\n"),
        (C, &c("RESET")),
        (S, b"+RESET\r\n"),
        (C, &c("GET k")),
        (S, b"$-1\r\n"),
    ]);
    let r = run(&t);
    assert_eq!(r.health, Health::default());
    let e = &r.events;
    assert_eq!(e[1].rows_sent, 1);
    assert_eq!(
        e[3].error.as_ref().unwrap().state.as_deref(),
        Some("NOPROTO")
    );
    // Each event shows the state in force when it ran: AUTH and SELECT apply after.
    assert_eq!(e[4].user, None);
    assert_eq!(e[5].user.as_deref(), Some("alice"));
    assert_eq!(e[5].database.as_deref(), Some("0"));
    assert_eq!(e[6].database.as_deref(), Some("4"));
    assert_eq!(e[7].database.as_deref(), Some("4"));
    assert_eq!(e[8].database.as_deref(), Some("0"));
    let mut s = session(true);
    run_steps(&mut s, &steps(&t[..2].to_vec()), Chunking::Whole);
    assert!(s.resp3());
    let mut s = session(true);
    run_steps(&mut s, &steps(&t[..4].to_vec()), Chunking::Whole);
    assert!(!s.resp3());
}

#[test]
fn client_reply_off_skip_on() {
    let t = tr(&[
        (
            C,
            &[c("CLIENT REPLY SKIP"), c("SET a 1"), c("GET a")].concat(),
        ),
        (S, b"$1\r\n1\r\n"),
        (
            C,
            &[
                c("CLIENT REPLY OFF"),
                c("SET a 2"),
                c("CLIENT REPLY SKIP"),
                c("GET a"),
                c("CLIENT REPLY ON"),
                c("GET a"),
            ]
            .concat(),
        ),
        (S, b"+OK\r\n$1\r\n2\r\n"),
    ]);
    let r = run(&t);
    assert_eq!(r.health, Health::default());
    let got: Vec<(String, Outcome)> = r
        .events
        .iter()
        .map(|e| (e.text.as_deref().unwrap().to_string(), e.outcome))
        .collect();
    let nr = Outcome::NoReplyExpected;
    assert_eq!(
        got,
        [
            ("CLIENT REPLY".to_string(), nr),
            ("SET a".into(), nr),
            ("GET a".into(), Outcome::Ok),
            ("CLIENT REPLY".into(), nr),
            ("SET a".into(), nr),
            ("CLIENT REPLY".into(), nr),
            ("GET a".into(), nr),
            ("CLIENT REPLY".into(), Outcome::Ok),
            ("GET a".into(), Outcome::Ok),
        ]
    );
    assert_eq!(r.events[0].command, "client");
    assert_eq!(r.events[1].end_ns, None);
}

#[test]
fn monitor_and_psync_stop() {
    let t = tr(&[
        (C, &c("MONITOR")),
        (S, b"+OK\r\n"),
        (
            S,
            b"+1700000000.123456 [0 127.0.0.1:5000] \"get\" \"a\"\r\n",
        ),
    ]);
    let r = run(&t);
    assert_eq!(texts(&r.events), ["MONITOR"]);
    assert_eq!(r.events[0].outcome, Outcome::Ok);
    let mut s = session(true);
    let mut sink = VecSink::default();
    assert_eq!(
        s.feed(C, &c("MONITOR"), 1, &mut sink),
        crate::Progress::Continue
    );
    assert_eq!(s.feed(S, b"+OK\r\n", 2, &mut sink), crate::Progress::Stop);

    let t = tr(&[
        (C, &c("PSYNC ? -1")),
        (S, b"+FULLRESYNC abc 0\r\n$5\r\nREDIS"),
    ]);
    let r = run(&t);
    assert_eq!(texts(&r.events), ["PSYNC"]);
    assert_eq!(r.events[0].outcome, Outcome::NoReplyExpected);
}

#[test]
fn blocking_command_latency_includes_the_wait() {
    let t: Transcript = vec![
        (C, c("BLPOP q 0"), 1_000),
        (S, b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n".to_vec(), 5_000_000_000),
    ];
    let r = run(&t);
    assert_eq!(r.events[0].latency_ns(), Some(5_000_000_000 - 1_000));
    assert_eq!(r.events[0].text.as_deref(), Some("BLPOP q"));
}

#[test]
fn unanswered_commands_at_close() {
    let t = tr(&[
        (C, &[c("GET a"), c("GET b")].concat()),
        (S, b"$1\r\n1\r\n$5\r\nab"),
    ]);
    let r = run(&t);
    assert_eq!(r.events[0].outcome, Outcome::Ok);
    assert_eq!(r.events[1].outcome, Outcome::Incomplete);
    assert_eq!(r.events[1].bytes_out, 6);
    assert_eq!(r.health.unparsed_bytes, 0);
    let r = run(&tr(&[(C, &c("GET a"))]));
    assert_eq!(r.events[0].outcome, Outcome::NoResponse);
    // A reply nobody asked for.
    let r = run(&tr(&[(S, b"-ERR max number of clients reached\r\n")]));
    assert_eq!(r.health.responses_without_request, 1);
}

fn conversation() -> Transcript {
    let mut t = Vec::new();
    for i in 0..20u64 {
        let key = format!("user:{i}:profile");
        t.push((
            C,
            cmd(&[b"SET", key.as_bytes(), b"some value here"]),
            10 * i + 1,
        ));
        t.push((S, b"+OK\r\n".to_vec(), 10 * i + 2));
        t.push((C, cmd(&[b"GET", key.as_bytes()]), 10 * i + 3));
        t.push((S, bulk(b"some value here"), 10 * i + 4));
    }
    t
}

#[test]
fn client_gap_resyncs_at_the_next_command() {
    let t = conversation();
    let total_in: u64 = t
        .iter()
        .filter(|x| x.0 == C)
        .map(|x| x.1.len() as u64)
        .sum();
    // Lose bytes inside the 5th command (the 3rd SET).
    let off: u64 = t
        .iter()
        .take(8)
        .filter(|x| x.0 == C)
        .map(|x| x.1.len() as u64)
        .sum();
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, off + 10, 7));
    assert_eq!(r.events.len(), 39);
    assert_eq!(r.health.responses_without_request, 0);
    assert_eq!(r.health.resyncs, 1);
    // The lost command's reply came with nothing in flight; the next command is not trusted
    // (the lost one could have been CLIENT REPLY OFF), the ones after it are.
    let bad: Vec<usize> = (0..39)
        .filter(|&i| r.events[i].outcome != Outcome::Ok)
        .collect();
    assert_eq!(bad, [4]);
    assert_eq!(
        texts(&r.events)[4..6],
        ["GET user:2:profile", "SET user:3:profile"]
    );
    assert_eq!(
        r.health.unparsed_bytes
            + r.events
                .iter()
                .map(|e| e.bytes_in + e.bytes_out)
                .sum::<u64>(),
        total_in
            + t.iter()
                .filter(|x| x.0 == S)
                .map(|x| x.1.len() as u64)
                .sum::<u64>()
            - 7
    );
}

#[test]
fn server_gap_abandons_what_is_in_flight() {
    let t = conversation();
    let off: u64 = t
        .iter()
        .take(10)
        .filter(|x| x.0 == S)
        .map(|x| x.1.len() as u64)
        .sum();
    // Lose the middle and the end of the 6th reply (GET user:2:profile, a bulk string of 15
    // bytes, 21 on the wire): past its payload, so the framing cannot hold. (A gap inside the
    // payload keeps it: `reply_gap_inside_a_bulk_string_keeps_the_framing`.)
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, S, off + 6, 15));
    assert_eq!(r.events.len(), 40);
    assert_eq!(r.events[5].outcome, Outcome::Incomplete);
    assert_eq!(r.events[5].bytes_out, 6);
    assert!(
        r.events
            .iter()
            .enumerate()
            .all(|(i, e)| i == 5 || e.outcome == Outcome::Ok)
    );
    // Lose the end of a reply and the start of the next: the command whose reply start was
    // skipped is abandoned too.
    let off: u64 = t
        .iter()
        .take(8)
        .filter(|x| x.0 == S)
        .map(|x| x.1.len() as u64)
        .sum();
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, S, off + 3, 4));
    let bad: Vec<usize> = (0..r.events.len())
        .filter(|&i| r.events[i].outcome != Outcome::Ok)
        .collect();
    assert_eq!(bad, [4, 5]);
    assert_eq!(r.health.responses_without_request, 0);
    assert_eq!(r.health.resyncs, 1);
    assert_eq!(r.health.responses_without_request, 0);
}

#[test]
fn gap_in_a_pipeline_taints_until_it_drains() {
    let mut req = Vec::new();
    let mut rep = Vec::new();
    for i in 0..6 {
        req.extend(c(&format!("GET k{i}")));
        rep.extend(bulk(format!("v{i}").as_bytes()));
    }
    let t = tr(&[(C, &req), (S, &rep), (C, &c("GET z")), (S, b"$1\r\nz\r\n")]);
    // Lose the second reply: the in-flight requests are abandoned; the server side picks up
    // at the next command.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, S, 8, 8));
    assert_eq!(r.events.len(), 7);
    assert_eq!(r.events[0].outcome, Outcome::Ok);
    assert!(
        r.events[1..6]
            .iter()
            .all(|e| e.outcome == Outcome::Incomplete)
    );
    assert_eq!(r.events[6].outcome, Outcome::Incomplete);
    // ... incomplete because the pipeline was hit; the one after is trusted again.
    let mut t2 = t.clone();
    t2.push((C, c("GET y"), 9000));
    t2.push((S, b"$1\r\ny\r\n".to_vec(), 9001));
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t2, S, 8, 8));
    assert_eq!(r.events[7].outcome, Outcome::Ok);
}

#[test]
fn mid_stream_pickup() {
    let t = conversation();
    // Start inside the 3rd command and the 3rd reply.
    let mut tail: Transcript = t[8..].to_vec();
    tail.insert(0, (C, b"\r\n$5\r\nalue!\r\n".to_vec(), 75));
    tail.insert(1, (S, b"ue here\r\n".to_vec(), 76));
    let r = assert_chunking_invariant(|| session(false), &steps(&tail));
    assert_eq!(r.events.len(), 36);
    // The first command after a pickup is not trusted (the client might pipeline and
    // replies to commands not seen might come first); once nothing is in flight, all are.
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert!(r.events[1..].iter().all(|e| e.outcome == Outcome::Ok));
    assert_eq!(r.events[0].text.as_deref(), Some("SET user:2:profile"));
    assert!(r.events.iter().all(|e| e.database.is_none()));
    assert_eq!(r.health.responses_without_request, 0);
    assert_eq!(r.health.unparsed_bytes, 13 + 9);
    assert_eq!(r.health.resyncs, 0);
    // A value that holds a fake command boundary: "*1\r\n$4\r\nPING\r\n" inside a bulk would
    // be taken for a command; a plain '*' is not.
    let t = tr(&[
        (C, b"ue*with*stars\r\n"),
        (C, &c("GET a")),
        (S, b"$1\r\nx\r\n"),
    ]);
    let r = assert_chunking_invariant(|| session(false), &steps(&t));
    assert_eq!(texts(&r.events), ["GET a"]);
}

#[test]
fn huge_values_stream_in_bounded_memory() {
    const MB20: usize = 20 << 20;
    let value = vec![b'v'; MB20];
    let set = cmd(&[b"SET", b"big:1", &value]);
    let mut get_reply = format!("${MB20}\r\n").into_bytes();
    get_reply.extend_from_slice(&value);
    get_reply.extend_from_slice(b"\r\n");
    // Carried in 64 KB segments, as TCP would.
    let mut t: Transcript = Vec::new();
    let mut ts = 1;
    for ch in set.chunks(65536) {
        t.push((C, ch.to_vec(), ts));
        ts += 1;
    }
    t.push((S, b"+OK\r\n".to_vec(), ts));
    t.push((C, c("GET big:1"), ts + 1));
    for ch in get_reply.chunks(65536) {
        ts += 1;
        t.push((S, ch.to_vec(), ts + 1));
    }
    let r = assert_chunkings(
        || session(true),
        &steps(&t),
        &[Chunking::Whole, Chunking::Random(3)],
    );
    assert_eq!(r.health, Health::default());
    assert_eq!(texts(&r.events), ["SET big:1", "GET big:1"]);
    assert_eq!(r.events[0].bytes_in, set.len() as u64);
    assert_eq!(r.events[1].bytes_out, get_reply.len() as u64);
    assert_eq!(r.events[1].rows_sent, 1);
    assert_eq!(r.events[0].start_ns, 1);
    let mut s = session(true);
    let mut sink = VecSink::default();
    for (d, b, ts) in &t {
        s.feed(*d, b, *ts, &mut sink);
        assert!(s.buffered_bytes() < 16 * 1024, "{}", s.buffered_bytes());
    }
}

#[test]
fn module_and_unknown_commands() {
    let t = tr(&[
        (C, &c("JSON.GET doc $.a")),
        (S, b"$5\r\n[1,2]\r\n"),
        (C, &c("FT.SEARCH idx hello")),
        (S, b"*1\r\n:0\r\n"),
        (C, &c("config get maxmemory")),
        (S, b"*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"),
    ]);
    let r = run(&t);
    assert_eq!(texts(&r.events), ["JSON.GET", "FT.SEARCH", "CONFIG GET"]);
    assert_eq!(r.events[0].command, "unknown");
    assert_eq!(r.events[2].command, "config");
}

#[test]
fn step_gap_is_counted_once() {
    let t = tr(&[(C, &c("GET a")), (S, b"$1\r\nx\r\n")]);
    let s: Vec<Step> = vec![
        Step::Data(C, c("GET a"), 1),
        Step::Gap(C, 5, 2),
        Step::Data(C, c("GET b"), 3),
        Step::Data(S, b"$1\r\nx\r\n$1\r\ny\r\n".to_vec(), 4),
    ];
    let r = assert_chunking_invariant(|| session(true), &s);
    assert_eq!(texts(&r.events), ["GET a", "GET b"]);
    // The gap hit the pipeline (GET a was in flight): GET b is not trusted.
    assert_eq!(r.events[1].outcome, Outcome::Incomplete);
    drop(t);
}

#[test]
fn confirmations_of_a_lost_subscribe_pair_with_nothing() {
    // SUBSCRIBE and PSUBSCRIBE sent together; the capture lost part of SUBSCRIBE, across the
    // end of its name (a gap inside the name alone would keep the framing).
    let sub = c("SUBSCRIBE news sport");
    let s: Vec<Step> = vec![
        Step::Data(C, sub[..15].to_vec(), 1),
        Step::Gap(C, 5, 1),
        Step::Data(C, sub[20..].to_vec(), 1),
        Step::Data(C, c("PSUBSCRIBE n*"), 2),
        Step::Data(
            S,
            [
                &b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"[..],
                b"*3\r\n$9\r\nsubscribe\r\n$5\r\nsport\r\n:2\r\n",
                b"*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:3\r\n",
                b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$1\r\nx\r\n",
            ]
            .concat(),
            3,
        ),
    ];
    let r = assert_chunking_invariant(|| session(true), &s);
    assert_eq!(texts(&r.events), ["PSUBSCRIBE"]);
    // Paired with its own confirmation, but not trusted: it was sent after a loss.
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert_eq!(r.events[0].rows_sent, 0);
    assert_eq!(r.events[0].bytes_out, 33);
    assert_eq!(r.health.responses_without_request, 0);
}

// ---- gaps inside announced lengths ---------------------------------------------------------

/// A SET of a 1,000-byte value, a GET of it, a small SET; `(transcript, offset of the SET's
/// value in the client stream, offset of the GET reply's payload in the server stream)`.
fn big_value_conversation() -> (Transcript, u64, u64) {
    let value = vec![b'v'; 1000];
    let set = cmd(&[b"SET", b"big:1", &value]);
    let value_at = (set.len() - 1002) as u64;
    let t = tr(&[
        (C, &set),
        (S, b"+OK\r\n"),
        (C, &c("GET big:1")),
        (S, &bulk(&value)),
        (C, &c("SET k2 v")),
        (S, b"+OK\r\n"),
    ]);
    // "+OK\r\n", then "$1000\r\n".
    (t, value_at, 5 + 7)
}

fn stream_len(t: &Transcript, d: Direction) -> u64 {
    t.iter()
        .filter(|x| x.0 == d)
        .map(|x| x.1.len() as u64)
        .sum()
}

#[test]
fn request_gap_inside_a_bulk_string_keeps_the_framing() {
    let (t, at, _) = big_value_conversation();
    let set_len = t[0].1.len() as u64;
    // Inside the value: its first byte, the middle, up to its last byte exactly, all of it.
    for (from, len) in [
        (0, 1),
        (100, 500),
        (1, 999),
        (999, 1),
        (0, 1000),
        (400, 600),
    ] {
        let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, at + from, len));
        let e = &r.events;
        assert_eq!(
            texts(e),
            ["SET big:1", "GET big:1", "SET k2"],
            "{from}+{len}"
        );
        assert!(e.iter().all(|x| x.outcome == Outcome::Ok), "{e:#?}");
        assert_eq!(
            e.iter().map(|x| x.text_partial).collect::<Vec<_>>(),
            [true, false, false]
        );
        // Counted, paired and timed as if nothing was lost: the lost bytes were on the wire.
        assert_eq!(e[0].bytes_in, set_len);
        assert_eq!((e[0].end_ns, e[0].bytes_out), (Some(2000), 5));
        assert!(!e[0].text_truncated);
        assert_eq!(r.health, Health::default(), "{from}+{len}");
    }
}

#[test]
fn request_gap_inside_the_key_keeps_what_was_seen() {
    let t = tr(&[
        (C, &c("SET user:1234:profile v")),
        (S, b"+OK\r\n"),
        (C, &c("GET a")),
        (S, b"$1\r\nx\r\n"),
    ]);
    // "*3\r\n$3\r\nSET\r\n$17\r\n" is 18 bytes: lose "1234" of the key.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, 23, 4));
    let e = &r.events;
    assert_eq!(texts(e), ["SET user:", "GET a"]);
    assert_eq!((e[0].text_partial, e[0].text_truncated), (true, true));
    assert!(e.iter().all(|x| x.outcome == Outcome::Ok));
    assert_eq!(e[0].bytes_in, t[0].1.len() as u64);
    assert_eq!(r.health, Health::default());
    // Inside the command name: the text is the part of the name that was seen.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, 9, 1));
    let e = &r.events;
    assert_eq!(
        (e[0].command, texts(e)[0].as_str(), e[0].text_partial),
        ("unknown", "S", true)
    );
    assert_eq!(e[0].outcome, Outcome::Ok);
    assert_eq!(texts(e)[1], "GET a");
    assert_eq!(r.health, Health::default());
}

#[test]
fn request_gap_inside_a_pipeline_loses_nothing_else() {
    let mut req = Vec::new();
    let mut rep = Vec::new();
    for i in 0..6 {
        req.extend(cmd(&[b"SET", format!("k{i}").as_bytes(), &[b'x'; 300]]));
        rep.extend(b"+OK\r\n");
    }
    let t = tr(&[(C, &req), (S, &rep), (C, &c("GET z")), (S, b"$1\r\nz\r\n")]);
    let one = req.len() as u64 / 6;
    for k in 0..6 {
        let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, k * one + 100, 200));
        let e = &r.events;
        assert_eq!(e.len(), 7);
        assert!(e.iter().all(|x| x.outcome == Outcome::Ok), "{e:#?}");
        let partial: Vec<usize> = (0..7).filter(|&i| e[i].text_partial).collect();
        assert_eq!(partial, [k as usize]);
        assert_eq!(r.health, Health::default());
    }
}

#[test]
fn request_gap_across_a_boundary_still_resyncs() {
    let (t, at, _) = big_value_conversation();
    let set_len = t[0].1.len() as u64;
    let total = stream_len(&t, C);
    // From inside the value into its CRLF; exactly the CRLF; from the end of the SET into the
    // next command; from the start of a command; longer than the whole SET.
    for (from, len) in [
        (at + 990, 11),
        (at + 1000, 2),
        (set_len - 1, 3),
        (set_len, 5),
        (0, set_len + 3),
        (at + 10, total - at - 10),
    ] {
        let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, from, len));
        assert_eq!(r.health.resyncs, 1, "{from}+{len}: {:#?}", r.events);
        assert!(r.events.iter().all(|e| !e.text_partial));
    }
    // An inline command announces no length: a gap in it resyncs.
    let t = tr(&[(C, b"SET k somevalue\r\n"), (S, b"+OK\r\n")]);
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, 8, 3));
    assert_eq!((r.health.resyncs, r.events.len()), (1, 0));
}

#[test]
fn reply_gap_inside_a_bulk_string_keeps_the_framing() {
    let (t, _, at) = big_value_conversation();
    let reply_len = t[3].1.len() as u64;
    for (from, len) in [(0, 1), (100, 500), (1, 999), (999, 1), (0, 1000)] {
        let r = assert_chunking_invariant(|| session(true), &with_gap(&t, S, at + from, len));
        let e = &r.events;
        assert_eq!(
            texts(e),
            ["SET big:1", "GET big:1", "SET k2"],
            "{from}+{len}"
        );
        // The reply lost bytes: paired and timed, incomplete.
        assert_eq!(
            e.iter().map(|x| x.outcome).collect::<Vec<_>>(),
            [Outcome::Ok, Outcome::Incomplete, Outcome::Ok]
        );
        assert_eq!((e[1].bytes_out, e[1].rows_sent), (reply_len, 1));
        assert_eq!(e[1].end_ns, Some(4000));
        assert!(e.iter().all(|x| !x.text_partial));
        assert_eq!(r.health, Health::default(), "{from}+{len}");
    }
    // Across the end of the payload: the framing is lost, as before.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, S, at + 990, 11));
    assert_eq!(r.health.resyncs, 1);
    assert_eq!(r.events[1].outcome, Outcome::Incomplete);
    assert_eq!(r.events[1].bytes_out, 7 + 990);
}

#[test]
fn reply_gap_inside_an_element_keeps_the_array() {
    let mut rep = b"*3\r\n".to_vec();
    for v in [&b"a"[..], &[b'x'; 500], b"c"] {
        rep.extend(bulk(v));
    }
    let t = tr(&[
        (C, &c("MGET a b c")),
        (S, &rep),
        (C, &c("GET z")),
        (S, b"$1\r\nz\r\n"),
    ]);
    // "*3\r\n$1\r\na\r\n$500\r\n" is 17 bytes.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, S, 17 + 50, 400));
    let e = &r.events;
    assert_eq!(texts(e), ["MGET a", "GET z"]);
    assert_eq!((e[0].outcome, e[0].rows_sent), (Outcome::Incomplete, 3));
    assert_eq!(e[0].bytes_out, rep.len() as u64);
    assert_eq!(e[1].outcome, Outcome::Ok);
    assert_eq!(r.health, Health::default());
}

#[test]
fn bytes_lost_in_a_held_gap_are_never_unparsed() {
    let (t, at, rat) = big_value_conversation();
    let set = &t[0].1;
    let at = at as usize;
    // A gap inside the value, then one that runs past its end: only the captured bytes of
    // the command are unparsed; the next command is read.
    let s: Vec<Step> = vec![
        Step::Data(C, set[..at + 100].to_vec(), 1),
        Step::Gap(C, 500, 2),
        Step::Data(C, set[at + 600..at + 700].to_vec(), 3),
        Step::Gap(C, (set.len() - at - 700) as u64, 4),
        Step::Data(C, c("GET a"), 5),
        Step::Data(S, b"+OK\r\n$1\r\nx\r\n".to_vec(), 6),
    ];
    let r = assert_chunking_invariant(|| session(true), &s);
    assert_eq!(texts(&r.events), ["GET a"]);
    assert_eq!(r.health.resyncs, 1);
    // GET a takes the SET's `+OK` (not trusted: incomplete); its own reply comes with nothing
    // in flight.
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert_eq!(r.health.unparsed_bytes, (at + 200 + 7) as u64);
    // The capture ends after a held gap: the same.
    let s: Vec<Step> = vec![
        Step::Data(C, set[..at + 100].to_vec(), 1),
        Step::Gap(C, 500, 2),
    ];
    let r = assert_chunking_invariant(|| session(true), &s);
    assert_eq!(r.health.unparsed_bytes, (at + 100) as u64);
    // A reply cut by a held gap and then by the end of the capture: its bytes go to its
    // command, lost ones included (they were on the wire).
    let rep = &t[3].1;
    let rat = rat as usize - 5;
    let s: Vec<Step> = vec![
        Step::Data(C, c("GET big:1"), 1),
        Step::Data(S, rep[..rat + 100].to_vec(), 2),
        Step::Gap(S, 500, 3),
    ];
    let r = assert_chunking_invariant(|| session(true), &s);
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert_eq!(r.events[0].bytes_out, (rat + 600) as u64);
    assert_eq!(r.health, Health::default());
}

// ---- TLS read on as decrypted plaintext ----------------------------------------------------

#[test]
fn after_tls_reads_as_a_seen_open() {
    let t = tr(&[
        (C, &c("AUTH alice secret")),
        (S, b"+OK\r\n"),
        (C, &c("SET k v")),
        (S, b"+OK\r\n"),
    ]);
    let opened = run(&t);
    for saw_open in [true, false] {
        let make = || {
            let m = ConnMeta {
                after_tls: true,
                ..meta(saw_open)
            };
            super::super::new_session(m, SessionConfig::default())
        };
        let r = assert_chunking_invariant(make, &steps(&t));
        assert_eq!(r.health, Health::default());
        assert_eq!(texts(&r.events), texts(&opened.events));
        let last = r.events.last().unwrap();
        assert_eq!(last.user.as_deref(), Some("alice"));
        assert_eq!(last.database.as_deref(), Some("0"));
    }
    // Told before any byte: reads on (true); after bytes: refused.
    let make = || {
        let mut s = session(true);
        assert!(s.start_tls());
        s
    };
    assert_eq!(
        texts(&assert_chunking_invariant(make, &steps(&t)).events),
        texts(&opened.events)
    );
    let mut s = session(true);
    s.feed(C, &c("PING"), 1, &mut VecSink::default());
    assert!(!s.start_tls());
}
