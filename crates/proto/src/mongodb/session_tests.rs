//! Byte-literal tests of the session: every opcode and flow, fed in every chunking.

use std::net::SocketAddr;

use super::super::bson::build::Doc;
use super::super::wire::{compressor, op, put_message};
use super::MongoSession;
use crate::testing::{
    Chunking, Step, Transcript, assert_chunking_invariant, assert_chunkings, run_steps, steps,
    with_gap,
};
use crate::{ConnMeta, Direction, Health, Outcome, QueryEvent, Session, SessionConfig, VecSink};

const C: Direction = Direction::ToServer;
const S: Direction = Direction::ToClient;

fn meta(saw_open: bool) -> ConnMeta {
    ConnMeta {
        id: 7,
        client: "10.0.0.1:50000".parse::<SocketAddr>().unwrap().into(),
        server: "10.0.0.2:27017".parse::<SocketAddr>().unwrap().into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

fn session(saw_open: bool) -> MongoSession {
    super::super::new_session(meta(saw_open), SessionConfig::default())
}

// ---- message builders --------------------------------------------------------------------

enum Sec {
    Body(Doc),
    Seq(&'static str, Vec<Doc>),
}

fn msg_body(flags: u32, secs: &[Sec]) -> Vec<u8> {
    let mut b = flags.to_le_bytes().to_vec();
    for s in secs {
        match s {
            Sec::Body(d) => {
                b.push(0);
                b.extend(d.bytes());
            }
            Sec::Seq(ident, docs) => {
                b.push(1);
                let mut payload = ident.as_bytes().to_vec();
                payload.push(0);
                for d in docs {
                    payload.extend(d.bytes());
                }
                b.extend(((payload.len() + 4) as i32).to_le_bytes());
                b.extend(payload);
            }
        }
    }
    if flags & 1 != 0 {
        b.extend([0xDE, 0xAD, 0xBE, 0xEF]);
    }
    b
}

fn op_msg(rid: i32, rto: i32, flags: u32, secs: &[Sec]) -> Vec<u8> {
    let mut out = Vec::new();
    put_message(&mut out, rid, rto, op::MSG, &msg_body(flags, secs));
    out
}

/// A request: one body section.
fn cmd(rid: i32, d: Doc) -> Vec<u8> {
    op_msg(rid, 0, 0, &[Sec::Body(d)])
}

/// A reply: one body section.
fn reply(rid: i32, rto: i32, d: Doc) -> Vec<u8> {
    op_msg(rid, rto, 0, &[Sec::Body(d)])
}

fn docs(n: usize) -> Vec<Doc> {
    (0..n)
        .map(|i| Doc::new().i32("_id", i as i32).str("name", "someone"))
        .collect()
}

fn cursor_reply(rid: i32, rto: i32, id: i64, ns: &str, first: bool, n: usize) -> Vec<u8> {
    let key = if first { "firstBatch" } else { "nextBatch" };
    reply(
        rid,
        rto,
        Doc::new()
            .doc(
                "cursor",
                Doc::new().arr(key, docs(n)).i64("id", id).str("ns", ns),
            )
            .f64("ok", 1.0),
    )
}

fn ok(rid: i32, rto: i32) -> Vec<u8> {
    reply(rid, rto, Doc::new().f64("ok", 1.0))
}

fn legacy(rid: i32, rto: i32, opcode: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_message(&mut out, rid, rto, opcode, body);
    out
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

fn op_query(rid: i32, ns: &str, skip: i32, ret: i32, q: Doc, proj: Option<Doc>) -> Vec<u8> {
    let mut b = 0i32.to_le_bytes().to_vec();
    b.extend(cstr(ns));
    b.extend(skip.to_le_bytes());
    b.extend(ret.to_le_bytes());
    b.extend(q.bytes());
    if let Some(p) = proj {
        b.extend(p.bytes());
    }
    legacy(rid, 0, op::QUERY, &b)
}

fn op_reply(rid: i32, rto: i32, flags: i32, cursor: i64, ds: &[Doc]) -> Vec<u8> {
    let mut b = flags.to_le_bytes().to_vec();
    b.extend(cursor.to_le_bytes());
    b.extend(0i32.to_le_bytes());
    b.extend((ds.len() as i32).to_le_bytes());
    for d in ds {
        b.extend(d.bytes());
    }
    legacy(rid, rto, op::REPLY, &b)
}

fn compress(id: u8, inner: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let h = super::super::wire::Header::parse(inner).unwrap();
    let body = &inner[16..];
    let data = match id {
        compressor::SNAPPY => snap::raw::Encoder::new().compress_vec(body).unwrap(),
        compressor::ZLIB => {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(body).unwrap();
            z.finish().unwrap()
        }
        compressor::ZSTD => zstd::bulk::compress(body, 3).unwrap(),
        _ => body.to_vec(),
    };
    let mut b = h.opcode.to_le_bytes().to_vec();
    b.extend((body.len() as i32).to_le_bytes());
    b.push(id);
    b.extend(data);
    legacy(h.request_id, h.response_to, op::COMPRESSED, &b)
}

/// A transcript of alternating messages with growing timestamps.
fn conv(msgs: Vec<(Direction, Vec<u8>)>) -> Transcript {
    msgs.into_iter()
        .enumerate()
        .map(|(i, (d, b))| (d, b, 1000 * (i as u64 + 1)))
        .collect()
}

fn run(t: &Transcript) -> VecSink {
    assert_chunking_invariant(|| session(true), &steps(t))
}

fn text(e: &QueryEvent) -> &str {
    e.text.as_deref().unwrap_or("")
}

// ---- OP_MSG ------------------------------------------------------------------------------

#[test]
fn find_then_get_more_through_the_cursor() {
    let find = cmd(
        10,
        Doc::new()
            .str("find", "users")
            .doc(
                "filter",
                Doc::new()
                    .doc("age", Doc::new().i32("$gt", 30))
                    .str("name", "bob"),
            )
            .doc("sort", Doc::new().i32("_id", 1))
            .doc("projection", Doc::new().i32("name", 1))
            .i32("limit", 10)
            .i32("batchSize", 2)
            .str("$db", "test"),
    );
    let more = |rid| {
        cmd(
            rid,
            Doc::new()
                .i64("getMore", 99)
                .str("collection", "users")
                .str("$db", "test"),
        )
    };
    let t = conv(vec![
        (C, find),
        (S, cursor_reply(500, 10, 99, "test.users", true, 2)),
        (C, more(11)),
        (S, cursor_reply(501, 11, 99, "test.users", false, 2)),
        (C, more(12)),
        (S, cursor_reply(502, 12, 0, "test.users", false, 1)),
        (C, more(13)),
        (S, cursor_reply(503, 13, 0, "test.users", false, 0)),
    ]);
    let sink = run(&t);
    let e = &sink.events;
    assert_eq!(e.len(), 4);
    let shape = r#"{"filter":{"age":{"$gt":"?"},"name":"?"},"sort":{"_id":1},"projection":{"name":1},"limit":"?"}"#;
    assert_eq!(text(&e[0]), format!("find test.users {shape}"));
    assert_eq!(
        (e[0].command, e[0].rows_sent, e[0].outcome),
        ("find", 2, Outcome::Ok)
    );
    assert_eq!(e[0].database.as_deref(), Some("test"));
    assert_eq!(
        (e[0].start_ns, e[0].first_response_ns, e[0].end_ns),
        (1000, Some(2000), Some(2000))
    );
    assert_eq!(e[0].bytes_in, t[0].1.len() as u64);
    assert_eq!(e[0].bytes_out, t[1].1.len() as u64);
    for ev in &e[1..3] {
        assert_eq!(ev.command, "getmore");
        assert_eq!(text(ev), format!("getMore test.users {shape}"));
    }
    // The getMores of one cursor share one text allocation.
    assert!(std::sync::Arc::ptr_eq(
        e[1].text.as_ref().unwrap(),
        e[2].text.as_ref().unwrap()
    ));
    assert_eq!((e[1].rows_sent, e[2].rows_sent), (2, 1));
    // The cursor was exhausted: a later getMore on it is not linked.
    assert_eq!(text(&e[3]), "getMore test.users");
    assert_eq!(sink.health, Default::default());
}

#[test]
fn insert_with_a_document_sequence() {
    let t = conv(vec![
        (
            C,
            op_msg(
                1,
                0,
                0,
                &[
                    Sec::Body(
                        Doc::new()
                            .str("insert", "users")
                            .bool("ordered", true)
                            .str("$db", "test"),
                    ),
                    Sec::Seq("documents", docs(3)),
                ],
            ),
        ),
        (S, reply(2, 1, Doc::new().i32("n", 3).f64("ok", 1.0))),
        // The sequence may come first.
        (
            C,
            op_msg(
                3,
                0,
                0,
                &[
                    Sec::Seq("documents", docs(2)),
                    Sec::Body(Doc::new().str("insert", "users").str("$db", "test")),
                ],
            ),
        ),
        (S, reply(4, 3, Doc::new().i32("n", 2).f64("ok", 1.0))),
    ]);
    let e = run(&t).events;
    assert_eq!(e.len(), 2);
    assert_eq!(text(&e[0]), "insert test.users");
    assert_eq!((e[0].command, e[0].rows_affected), ("insert", 3));
    assert_eq!(
        (e[1].command, e[1].rows_affected, text(&e[1])),
        ("insert", 2, "insert test.users")
    );
}

#[test]
fn update_and_delete_statements() {
    let upd = |q: Doc| {
        Doc::new()
            .doc("q", q)
            .doc("u", Doc::new().doc("$set", Doc::new().str("name", "new")))
            .bool("multi", true)
    };
    let t = conv(vec![
        (
            C,
            op_msg(
                1,
                0,
                0,
                &[
                    Sec::Body(Doc::new().str("update", "users").str("$db", "test")),
                    Sec::Seq(
                        "updates",
                        vec![
                            upd(Doc::new().str("name", "a")),
                            upd(Doc::new().i32("x", 1)),
                        ],
                    ),
                ],
            ),
        ),
        (
            S,
            reply(
                2,
                1,
                Doc::new()
                    .i32("n", 3)
                    .i32("nModified", 2)
                    .arr("upserted", vec![Doc::new().i32("index", 1)])
                    .f64("ok", 1.0),
            ),
        ),
        (
            C,
            cmd(
                3,
                Doc::new()
                    .str("delete", "users")
                    .arr(
                        "deletes",
                        vec![
                            Doc::new()
                                .doc("q", Doc::new().str("name", "x"))
                                .i32("limit", 1),
                            Doc::new()
                                .doc("q", Doc::new().str("name", "y"))
                                .i32("limit", 1),
                        ],
                    )
                    .str("$db", "test"),
            ),
        ),
        (S, reply(4, 3, Doc::new().i32("n", 2).f64("ok", 1.0))),
    ]);
    let e = run(&t).events;
    assert_eq!(
        text(&e[0]),
        r#"update test.users {"q":{"name":"?"},"u":{"$set":{"name":"?"}},"multi":true}"#
    );
    assert_eq!(e[0].rows_affected, 3, "nModified plus one upsert");
    assert_eq!(
        text(&e[1]),
        r#"delete test.users {"q":{"name":"?"},"limit":1}"#
    );
    assert_eq!(e[1].rows_affected, 2);
}

#[test]
fn aggregate_count_distinct_find_and_modify() {
    let t = conv(vec![
        (
            C,
            cmd(
                1,
                Doc::new()
                    .str("aggregate", "orders")
                    .arr(
                        "pipeline",
                        vec![
                            Doc::new().doc("$match", Doc::new().str("status", "A")),
                            Doc::new().doc(
                                "$group",
                                Doc::new()
                                    .str("_id", "$cust")
                                    .doc("total", Doc::new().str("$sum", "$amount")),
                            ),
                        ],
                    )
                    .doc("cursor", Doc::new())
                    .str("$db", "shop"),
            ),
        ),
        (S, cursor_reply(2, 1, 0, "shop.orders", true, 4)),
        (
            C,
            cmd(
                3,
                Doc::new()
                    .str("count", "orders")
                    .doc(
                        "query",
                        Doc::new().doc("qty", Doc::new().arr_i32("$in", &[1, 2, 3])),
                    )
                    .str("$db", "shop"),
            ),
        ),
        (S, reply(4, 3, Doc::new().i32("n", 17).f64("ok", 1.0))),
        (
            C,
            cmd(
                5,
                Doc::new()
                    .str("distinct", "orders")
                    .str("key", "status")
                    .doc("query", Doc::new())
                    .str("$db", "shop"),
            ),
        ),
        (
            S,
            reply(
                6,
                5,
                Doc::new()
                    .arr_str("values", &["A", "B", "C"])
                    .f64("ok", 1.0),
            ),
        ),
        (
            C,
            cmd(
                7,
                Doc::new()
                    .str("findAndModify", "orders")
                    .doc("query", Doc::new().i32("_id", 5))
                    .doc("update", Doc::new().doc("$inc", Doc::new().i32("qty", 1)))
                    .bool("new", true)
                    .str("$db", "shop"),
            ),
        ),
        (
            S,
            reply(
                8,
                7,
                Doc::new()
                    .doc(
                        "lastErrorObject",
                        Doc::new().i32("n", 1).bool("updatedExisting", true),
                    )
                    .doc("value", Doc::new().i32("_id", 5))
                    .f64("ok", 1.0),
            ),
        ),
    ]);
    let e = run(&t).events;
    assert_eq!(
        text(&e[0]),
        r#"aggregate shop.orders {"pipeline":[{"$match":{"status":"?"}},{"$group":{"_id":"$cust","total":{"$sum":"$amount"}}}]}"#
    );
    assert_eq!(e[0].rows_sent, 4);
    assert_eq!(
        text(&e[1]),
        r#"count shop.orders {"query":{"qty":{"$in":"?"}}}"#
    );
    assert_eq!((e[1].rows_sent, e[1].rows_affected), (0, 0));
    assert_eq!(
        text(&e[2]),
        r#"distinct shop.orders {"key":"status","query":{}}"#
    );
    assert_eq!(e[2].rows_sent, 3);
    assert_eq!(
        text(&e[3]),
        r#"findAndModify shop.orders {"query":{"_id":"?"},"update":{"$inc":{"qty":"?"}},"new":true}"#
    );
    assert_eq!((e[3].command, e[3].rows_affected), ("findandmodify", 1));
}

#[test]
fn errors_and_write_errors() {
    let t = conv(vec![
        (C, cmd(1, Doc::new().i32("hello", 1).str("$db", "admin"))),
        (
            S,
            reply(
                2,
                1,
                Doc::new()
                    .str("$err", "no such command: 'hello'")
                    .str("errmsg", "no such command: 'hello'")
                    .i32("code", 59)
                    .str("codeName", "CommandNotFound")
                    .i32("ok", 0),
            ),
        ),
        (
            C,
            op_msg(
                3,
                0,
                0,
                &[
                    Sec::Body(Doc::new().str("insert", "users").str("$db", "test")),
                    Sec::Seq("documents", docs(2)),
                ],
            ),
        ),
        (
            S,
            reply(
                4,
                3,
                Doc::new()
                    .i32("n", 1)
                    .arr(
                        "writeErrors",
                        vec![
                            Doc::new()
                                .i32("index", 1)
                                .i32("code", 11000)
                                .str("errmsg", "E11000 duplicate key error"),
                        ],
                    )
                    .f64("ok", 1.0),
            ),
        ),
    ]);
    let e = run(&t).events;
    assert_eq!((e[0].command, text(&e[0])), ("hello", "hello admin"));
    assert_eq!(e[0].outcome, Outcome::Error);
    let err = e[0].error.as_ref().unwrap();
    assert_eq!(
        (err.code, err.state.as_deref(), &*err.message),
        (59, Some("CommandNotFound"), "no such command: 'hello'")
    );
    assert_eq!((e[1].outcome, e[1].rows_affected), (Outcome::Error, 1));
    let err = e[1].error.as_ref().unwrap();
    assert_eq!(
        (err.code, err.state.as_deref(), &*err.message),
        (11000, None, "E11000 duplicate key error")
    );
}

#[test]
fn checksum_more_to_come_and_unknown_commands() {
    let t = conv(vec![
        // checksumPresent: four bytes after the sections.
        (
            C,
            op_msg(
                1,
                0,
                1,
                &[Sec::Body(Doc::new().i32("ping", 1).str("$db", "admin"))],
            ),
        ),
        (S, op_msg(2, 1, 1, &[Sec::Body(Doc::new().f64("ok", 1.0))])),
        // moreToCome: an unacknowledged insert, no reply.
        (
            C,
            op_msg(
                3,
                0,
                2,
                &[
                    Sec::Body(
                        Doc::new()
                            .str("insert", "logs")
                            .doc("writeConcern", Doc::new().i32("w", 0))
                            .str("$db", "test"),
                    ),
                    Sec::Seq("documents", docs(5)),
                ],
            ),
        ),
        (
            C,
            cmd(4, Doc::new().i32("frobnicate me", 1).str("$db", "x")),
        ),
        (S, ok(5, 4)),
    ]);
    let sink = run(&t);
    let e = &sink.events;
    assert_eq!((text(&e[0]), e[0].outcome), ("ping admin", Outcome::Ok));
    assert_eq!(e[1].outcome, Outcome::NoReplyExpected);
    assert_eq!((text(&e[1]), e[1].rows_affected), ("insert test.logs", 5));
    assert_eq!(e[1].end_ns, None);
    assert_eq!((e[2].command, text(&e[2])), ("unknown", "frobnicate_me x"));
    assert_eq!(sink.health, Default::default());
}

#[test]
fn exhaust_replies_add_up_in_one_event() {
    let get_more = op_msg(
        20,
        0,
        1 << 16,
        &[Sec::Body(
            Doc::new()
                .i64("getMore", 5)
                .str("collection", "c")
                .str("$db", "d"),
        )],
    );
    let batch = |rid, rto, id, n| {
        let mut m = cursor_reply(rid, rto, id, "d.c", false, n);
        if id != 0 {
            m[16] |= 2; // moreToCome
        }
        m
    };
    let t = conv(vec![
        (C, get_more),
        (S, batch(100, 20, 5, 3)),
        (S, batch(101, 100, 5, 3)),
        (S, batch(102, 101, 0, 1)),
        (C, cmd(21, Doc::new().i32("ping", 1).str("$db", "admin"))),
        (S, ok(103, 21)),
    ]);
    let sink = run(&t);
    let e = &sink.events;
    assert_eq!(e.len(), 2);
    assert_eq!((e[0].command, e[0].rows_sent), ("getmore", 7));
    assert_eq!(
        (e[0].first_response_ns, e[0].end_ns),
        (Some(2000), Some(4000))
    );
    let out: u64 = t[1..4].iter().map(|x| x.1.len() as u64).sum();
    assert_eq!(e[0].bytes_out, out);
    assert_eq!(e[1].outcome, Outcome::Ok);
    assert_eq!(sink.health, Default::default());
}

#[test]
fn replies_are_matched_by_response_to_not_order() {
    let t = conv(vec![
        (C, cmd(1, Doc::new().str("find", "a").str("$db", "d"))),
        (C, cmd(2, Doc::new().str("find", "b").str("$db", "d"))),
        (S, cursor_reply(11, 2, 0, "d.b", true, 5)),
        (S, cursor_reply(10, 1, 0, "d.a", true, 1)),
    ]);
    let e = run(&t).events;
    assert_eq!((text(&e[0]), e[0].rows_sent), ("find d.b", 5));
    assert_eq!((text(&e[1]), e[1].rows_sent), ("find d.a", 1));
}

#[test]
fn compressed_with_snappy_zlib_and_zstd() {
    for id in [
        compressor::NOOP,
        compressor::SNAPPY,
        compressor::ZLIB,
        compressor::ZSTD,
    ] {
        let find = cmd(
            1,
            Doc::new()
                .str("find", "users")
                .doc("filter", Doc::new().str("name", "bob"))
                .str("$db", "test"),
        );
        let ins = op_msg(
            3,
            0,
            0,
            &[
                Sec::Body(Doc::new().str("insert", "users").str("$db", "test")),
                Sec::Seq("documents", docs(200)),
            ],
        );
        let t = conv(vec![
            (C, compress(id, &find)),
            (
                S,
                compress(id, &cursor_reply(2, 1, 0, "test.users", true, 300)),
            ),
            (C, compress(id, &ins)),
            (
                S,
                compress(id, &reply(4, 3, Doc::new().i32("n", 200).f64("ok", 1.0))),
            ),
        ]);
        let sink = run(&t);
        let e = &sink.events;
        assert_eq!(
            text(&e[0]),
            r#"find test.users {"filter":{"name":"?"}}"#,
            "{id}"
        );
        assert_eq!(e[0].rows_sent, 300);
        assert_eq!(
            e[0].bytes_out,
            t[1].1.len() as u64,
            "wire bytes, compressed"
        );
        assert_eq!(
            (text(&e[1]), e[1].rows_affected),
            ("insert test.users", 200)
        );
        assert_eq!(sink.health, Default::default(), "{id}");
    }
}

#[test]
fn bad_compressed_data_is_malformed_but_paired() {
    let mut bad = compress(
        compressor::ZLIB,
        &cmd(1, Doc::new().i32("ping", 1).str("$db", "a")),
    );
    let n = bad.len();
    bad[n - 3] ^= 0xFF;
    bad[30] ^= 0x55;
    let t = conv(vec![(C, bad), (S, ok(2, 1))]);
    let sink = run(&t);
    assert_eq!(sink.events.len(), 1);
    assert_eq!(sink.events[0].outcome, Outcome::Incomplete);
    assert_eq!(sink.health.malformed, 1);
}

// ---- legacy opcodes ----------------------------------------------------------------------

#[test]
fn legacy_query_with_wrappers_get_more_and_kill_cursors() {
    let q = Doc::new()
        .doc("$query", Doc::new().doc("age", Doc::new().i32("$gte", 18)))
        .doc("$orderby", Doc::new().i32("age", -1));
    let mut gm = 0i32.to_le_bytes().to_vec();
    gm.extend(cstr("test.people"));
    gm.extend(2i32.to_le_bytes());
    gm.extend(4242i64.to_le_bytes());
    let mut kill = 0i32.to_le_bytes().to_vec();
    kill.extend(1i32.to_le_bytes());
    kill.extend(4242i64.to_le_bytes());
    let t = conv(vec![
        (
            C,
            op_query(1, "test.people", 0, 2, q, Some(Doc::new().i32("name", 1))),
        ),
        (S, op_reply(2, 1, 0, 4242, &docs(2))),
        (C, legacy(3, 0, op::GET_MORE, &gm)),
        (S, op_reply(4, 3, 0, 4242, &docs(2))),
        (C, legacy(5, 0, op::KILL_CURSORS, &kill)),
        (
            C,
            op_query(6, "test.people", 0, 0, Doc::new().str("name", "x"), None),
        ),
        (S, op_reply(7, 6, 0, 0, &docs(1))),
        (C, op_query(8, "test.people", 0, 0, Doc::new(), None)),
        (S, op_reply(9, 8, 0, 0, &[])),
    ]);
    let sink = run(&t);
    let e = &sink.events;
    let shape = r#"{"filter":{"age":{"$gte":"?"}},"sort":{"age":-1},"projection":{"name":1}}"#;
    assert_eq!(text(&e[0]), format!("OP_QUERY test.people {shape}"));
    assert_eq!((e[0].command, e[0].rows_sent), ("op_query", 2));
    assert_eq!(text(&e[1]), format!("OP_GET_MORE test.people {shape}"));
    assert_eq!((e[1].command, e[1].rows_sent), ("op_get_more", 2));
    assert_eq!(
        (e[2].command, e[2].outcome),
        ("op_kill_cursors", Outcome::NoReplyExpected)
    );
    assert_eq!(text(&e[2]), "OP_KILL_CURSORS ?");
    assert_eq!(
        text(&e[3]),
        r#"OP_QUERY test.people {"filter":{"name":"?"}}"#
    );
    assert_eq!(text(&e[4]), r#"OP_QUERY test.people {"filter":{}}"#);
    assert_eq!(sink.health, Default::default());
}

#[test]
fn legacy_command_on_cmd_and_query_failure() {
    let t = conv(vec![
        (
            C,
            op_query(
                1,
                "admin.$cmd",
                0,
                -1,
                Doc::new()
                    .i32("isMaster", 1)
                    .doc("client", Doc::new().str("app", "x")),
                None,
            ),
        ),
        (
            S,
            op_reply(
                2,
                1,
                0,
                0,
                &[Doc::new()
                    .bool("ismaster", true)
                    .i32("maxWireVersion", 17)
                    .f64("ok", 1.0)],
            ),
        ),
        (
            C,
            op_query(
                3,
                "test.$cmd",
                0,
                -1,
                Doc::new()
                    .doc(
                        "$query",
                        Doc::new()
                            .str("count", "people")
                            .doc("query", Doc::new().i32("a", 1)),
                    )
                    .doc("$readPreference", Doc::new().str("mode", "secondary")),
                None,
            ),
        ),
        (
            S,
            op_reply(4, 3, 0, 0, &[Doc::new().i32("n", 12).f64("ok", 1.0)]),
        ),
        (
            C,
            op_query(
                5,
                "test.people",
                0,
                0,
                Doc::new().doc("$where", Doc::new()),
                None,
            ),
        ),
        (
            S,
            op_reply(
                6,
                5,
                2,
                0,
                &[Doc::new().str("$err", "bad query").i32("code", 2)],
            ),
        ),
        (
            C,
            legacy(7, 0, op::GET_MORE, &{
                let mut b = 0i32.to_le_bytes().to_vec();
                b.extend(cstr("test.people"));
                b.extend(0i32.to_le_bytes());
                b.extend(77i64.to_le_bytes());
                b
            }),
        ),
        (S, op_reply(8, 7, 1, 0, &[])),
    ]);
    let sink = run(&t);
    let e = sink.events;
    assert_eq!((e[0].command, text(&e[0])), ("ismaster", "isMaster admin"));
    assert_eq!(e[0].outcome, Outcome::Ok);
    assert_eq!(
        (e[1].command, text(&e[1])),
        ("count", r#"count test.people {"query":{"a":"?"}}"#)
    );
    assert_eq!(e[2].outcome, Outcome::Error);
    let err = e[2].error.as_ref().unwrap();
    assert_eq!((err.code, &*err.message), (2, "bad query"));
    assert_eq!(e[3].error.as_ref().unwrap().code, 43, "CursorNotFound");
    assert_eq!(text(&e[3]), "OP_GET_MORE test.people");
}

#[test]
fn legacy_writes_expect_no_reply() {
    let mut ins = 0i32.to_le_bytes().to_vec();
    ins.extend(cstr("test.t"));
    for d in docs(3) {
        ins.extend(d.bytes());
    }
    let mut upd = 0i32.to_le_bytes().to_vec();
    upd.extend(cstr("test.t"));
    upd.extend(2i32.to_le_bytes());
    upd.extend(Doc::new().str("name", "a").bytes());
    upd.extend(Doc::new().doc("$set", Doc::new().i32("x", 1)).bytes());
    let mut del = 0i32.to_le_bytes().to_vec();
    del.extend(cstr("test.t"));
    del.extend(1i32.to_le_bytes());
    del.extend(
        Doc::new()
            .doc("x", Doc::new().arr_i32("$nin", &[1, 2]))
            .bytes(),
    );
    let t = conv(vec![
        (C, legacy(1, 0, op::INSERT, &ins)),
        (C, legacy(2, 0, op::UPDATE, &upd)),
        (C, legacy(3, 0, op::DELETE, &del)),
    ]);
    let sink = run(&t);
    let e = &sink.events;
    assert!(e.iter().all(|x| x.outcome == Outcome::NoReplyExpected));
    assert_eq!(
        (e[0].command, text(&e[0]), e[0].rows_affected),
        ("op_insert", "OP_INSERT test.t", 3)
    );
    assert_eq!(
        text(&e[1]),
        r#"OP_UPDATE test.t {"multi":true,"q":{"name":"?"},"u":{"$set":{"x":"?"}}}"#
    );
    assert_eq!(
        text(&e[2]),
        r#"OP_DELETE test.t {"limit":1,"q":{"x":{"$nin":"?"}}}"#
    );
    assert_eq!(sink.health, Default::default());
}

// ---- streaming, gaps, pickup -------------------------------------------------------------

#[test]
fn large_batches_stream_with_bounded_memory() {
    let big: Vec<Doc> = (0..2000)
        .map(|i| Doc::new().i32("_id", i).str("blob", &"x".repeat(900)))
        .collect();
    let r = reply(
        2,
        1,
        Doc::new()
            .doc("cursor", Doc::new().arr("firstBatch", big).i64("id", 0))
            .f64("ok", 1.0),
    );
    assert!(r.len() > 1_800_000);
    let t = conv(vec![
        (C, cmd(1, Doc::new().str("find", "big").str("$db", "d"))),
        (S, r.clone()),
    ]);
    let mut s = session(true);
    let mut sink = VecSink::default();
    s.feed(C, &t[0].1, 1, &mut sink);
    let mut max = 0;
    for c in r.chunks(1460) {
        s.feed(S, c, 2, &mut sink);
        max = max.max(s.buffered_bytes());
    }
    assert!(max < 64 * 1024, "buffered {max}");
    assert_eq!(sink.events[0].rows_sent, 2000);
    let sink = assert_chunkings(
        || session(true),
        &steps(&t),
        &[Chunking::Whole, Chunking::Random(3), Chunking::Random(4)],
    );
    assert_eq!(sink.events[0].rows_sent, 2000);
}

#[test]
fn gap_inside_a_reply_keeps_the_framing() {
    let t = conv(vec![
        (C, cmd(1, Doc::new().str("find", "a").str("$db", "d"))),
        (S, cursor_reply(2, 1, 0, "d.a", true, 20)),
        (C, cmd(3, Doc::new().i32("ping", 1).str("$db", "admin"))),
        (S, ok(4, 3)),
    ]);
    let sink = assert_chunking_invariant(|| session(true), &with_gap(&t, S, 100, 200));
    let e = &sink.events;
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].outcome, Outcome::Incomplete);
    assert_eq!((e[1].outcome, text(&e[1])), (Outcome::Ok, "ping admin"));
    assert_eq!(sink.health.resyncs, 0);
    // A gap inside a request: still paired by its id.
    let sink = assert_chunking_invariant(|| session(true), &with_gap(&t, C, 30, 5));
    assert_eq!(sink.events[0].outcome, Outcome::Incomplete);
    assert_eq!(sink.events[1].outcome, Outcome::Ok);
}

#[test]
fn gap_across_messages_resyncs() {
    let t = conv(vec![
        (C, cmd(1, Doc::new().str("find", "a").str("$db", "d"))),
        (S, cursor_reply(2, 1, 0, "d.a", true, 3)),
        (C, cmd(3, Doc::new().str("find", "b").str("$db", "d"))),
        (S, cursor_reply(4, 3, 0, "d.b", true, 1)),
        (C, cmd(5, Doc::new().str("find", "c").str("$db", "d"))),
        (S, cursor_reply(6, 5, 0, "d.c", true, 2)),
    ]);
    // Lose the end of the first request and the start of the second.
    let first = t[0].1.len() as u64;
    let sink = assert_chunking_invariant(|| session(true), &with_gap(&t, C, first - 5, 20));
    let e = &sink.events;
    assert_eq!(sink.health.resyncs, 1);
    assert_eq!(
        sink.health.responses_without_request, 0,
        "orphans were expected"
    );
    assert_eq!(e.len(), 2, "{e:#?}");
    assert_eq!((e[0].outcome, e[0].rows_sent), (Outcome::Incomplete, 3));
    assert_eq!(
        (text(&e[1]), e[1].rows_sent, e[1].outcome),
        ("find d.c", 2, Outcome::Ok)
    );
    // Lose a whole reply and part of the next: the request whose reply was lost is incomplete,
    // the one after is paired.
    let r1 = t[1].1.len() as u64;
    let sink = assert_chunking_invariant(|| session(true), &with_gap(&t, S, 10, r1 + 4));
    let e = &sink.events;
    assert_eq!(sink.health.resyncs, 1);
    assert_eq!(e.len(), 3, "{e:#?}");
    assert_eq!(
        e.iter().map(|x| x.outcome).collect::<Vec<_>>(),
        [Outcome::Incomplete, Outcome::Incomplete, Outcome::Ok]
    );
    assert_eq!(text(&e[2]), "find d.c");
}

#[test]
fn mid_stream_pickup() {
    let t = conv(vec![
        (C, cmd(1, Doc::new().str("find", "a").str("$db", "d"))),
        (S, cursor_reply(2, 1, 0, "d.a", true, 3)),
        (C, cmd(3, Doc::new().str("find", "b").str("$db", "d"))),
        (S, cursor_reply(4, 3, 0, "d.b", true, 1)),
    ]);
    // The capture starts 7 bytes into the first request and 5 into its reply.
    let mut cut = t.clone();
    cut[0].1.drain(..7);
    cut[1].1.drain(..5);
    let sink = assert_chunking_invariant(|| session(false), &steps(&cut));
    let e = &sink.events;
    assert_eq!(e.len(), 1);
    assert_eq!((text(&e[0]), e[0].rows_sent), ("find d.b", 1));
    assert_eq!(sink.health.responses_without_request, 0);
    assert!(sink.health.unparsed_bytes > 0);
    // Starting at a message boundary loses nothing.
    let sink = assert_chunking_invariant(|| session(false), &steps(&t));
    assert_eq!(sink.events.len(), 2);
    assert_eq!(sink.health.unparsed_bytes, 0);
}

#[test]
fn gap_in_the_middle_of_a_request_resyncs_at_the_next_one() {
    let t = conv(vec![
        (C, cmd(1, Doc::new().str("find", "a").str("$db", "d"))),
        (S, cursor_reply(2, 1, 0, "d.a", true, 1)),
        (
            C,
            cmd(
                3,
                Doc::new()
                    .str("find", "b")
                    .doc("filter", Doc::new().str("name", "someone").i32("age", 40))
                    .str("$db", "d"),
            ),
        ),
        (S, cursor_reply(4, 3, 0, "d.b", true, 2)),
        (C, cmd(5, Doc::new().str("find", "c").str("$db", "d"))),
        (S, cursor_reply(6, 5, 0, "d.c", true, 3)),
        (C, cmd(7, Doc::new().str("find", "e").str("$db", "d"))),
        (S, cursor_reply(8, 7, 0, "d.e", true, 4)),
    ]);
    // The hole takes the second half of the second request and the first 10 bytes of the
    // third: the rest of the third is searched through, byte by byte, up to the fourth.
    let (c1, c2, c3) = (t[0].1.len(), t[2].1.len(), t[4].1.len());
    let from = (c1 + c2 / 2) as u64;
    let len = (c2 - c2 / 2 + 10) as u64;
    let sink = assert_chunking_invariant(|| session(true), &with_gap(&t, C, from, len));
    let e = &sink.events;
    assert_eq!(e.len(), 3, "{e:#?}");
    assert_eq!((text(&e[0]), e[0].outcome), ("find d.a", Outcome::Ok));
    assert_eq!((e[1].outcome, e[1].rows_sent), (Outcome::Incomplete, 2));
    assert_eq!(
        (text(&e[2]), e[2].outcome, e[2].rows_sent),
        ("find d.e", Outcome::Ok, 4)
    );
    assert_eq!(sink.health.resyncs, 1);
    // What was left of the third request, and the reply to it, which answers nothing known.
    let s3 = t[5].1.len() as u64;
    assert_eq!(sink.health.unparsed_bytes, (c3 - 10) as u64 + s3);
    assert_eq!(sink.health.responses_without_request, 0);
}

#[test]
fn lost_directions_skip_junk_and_near_misses_in_every_chunking() {
    // MySQL bytes on the MongoDB port, then headers that pass the first checks but not the
    // body's (OP_MSG flag bits no request sets; an OP_REPLY counting more documents than fit,
    // judged only at the probe's full length), then real messages.
    let mut junk = Vec::new();
    for q in ["SELECT c FROM sbtest1 WHERE id=17", "COMMIT"] {
        junk.extend(&((q.len() + 1) as u32).to_le_bytes()[..3]);
        junk.extend([0, 0x03]);
        junk.extend(q.as_bytes());
    }
    let near_msg = op_msg(9, 0, 0xFFFF_0000, &[Sec::Body(Doc::new().i32("x", 1))]);
    let mut near_reply_body = vec![0u8; 20];
    near_reply_body[16..].copy_from_slice(&1000i32.to_le_bytes());
    let near_reply = legacy(10, 1, op::REPLY, &near_reply_body);
    let ping = cmd(1, Doc::new().i32("ping", 1).str("$db", "admin"));
    let find = cmd(3, Doc::new().str("find", "a").str("$db", "d"));
    let mut c1 = junk.clone();
    c1.extend(&near_msg);
    c1.extend(&ping[..20]);
    let mut s1 = near_reply.clone();
    s1.extend(&junk);
    s1.extend(ok(2, 1));
    let t = conv(vec![
        (C, c1),
        (C, ping[20..].to_vec()),
        (S, s1),
        (C, find),
        (S, cursor_reply(4, 3, 0, "d.a", true, 2)),
    ]);
    let sink = assert_chunking_invariant(|| session(false), &steps(&t));
    let e = &sink.events;
    assert_eq!(e.len(), 2, "{e:#?}");
    assert_eq!((text(&e[0]), e[0].outcome), ("ping admin", Outcome::Ok));
    assert_eq!(
        e[0].start_ns, 1000,
        "the request starts with its first byte"
    );
    assert_eq!(
        (text(&e[1]), e[1].outcome, e[1].rows_sent),
        ("find d.a", Outcome::Ok, 2)
    );
    let skipped = 2 * junk.len() + near_msg.len() + near_reply.len();
    assert_eq!(sink.health.unparsed_bytes, skipped as u64);
    assert_eq!(sink.health.malformed, 0);
    // Picked up mid-stream: no sync was lost.
    assert_eq!(sink.health.resyncs, 0);
}

#[test]
fn stray_replies_and_unanswered_requests() {
    let t = conv(vec![
        (S, ok(2, 99)),
        (C, cmd(1, Doc::new().i32("ping", 1).str("$db", "admin"))),
    ]);
    let sink = run(&t);
    assert_eq!(sink.health.responses_without_request, 1);
    assert_eq!(sink.events.len(), 1);
    assert_eq!(sink.events[0].outcome, Outcome::NoResponse);
    // A reply cut by the end of the capture.
    let mut t = conv(vec![
        (C, cmd(1, Doc::new().str("find", "a").str("$db", "d"))),
        (S, cursor_reply(2, 1, 0, "d.a", true, 3)),
    ]);
    t[1].1.truncate(40);
    let sink = run(&t);
    assert_eq!(sink.events[0].outcome, Outcome::Incomplete);
    assert_eq!(sink.events[0].first_response_ns, Some(2000));
}

#[test]
fn impossible_headers_and_malformed_bson() {
    let mut bad = cmd(1, Doc::new().str("find", "a").str("$db", "d"));
    bad[37] = 0x77; // the type byte of `$db`
    let t = conv(vec![
        (C, bad),
        (S, ok(2, 1)),
        (C, vec![0xFF; 20]),
        (C, cmd(3, Doc::new().i32("ping", 1).str("$db", "admin"))),
        (S, ok(4, 3)),
    ]);
    let sink = run(&t);
    let e = &sink.events;
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].outcome, Outcome::Incomplete);
    assert_eq!(
        e[0].command, "find",
        "what was read before the damage is kept"
    );
    assert_eq!(e[1].outcome, Outcome::Ok);
    assert_eq!(sink.health.malformed, 2);
    assert_eq!(sink.health.resyncs, 1);
}

#[test]
fn unknown_opcodes_pass() {
    let t = conv(vec![
        (C, legacy(1, 0, 2010, b"internal")),
        (S, legacy(2, 1, 2011, b"reply")),
        (C, cmd(3, Doc::new().i32("ping", 1).str("$db", "admin"))),
        (S, ok(4, 3)),
    ]);
    let sink = run(&t);
    let e = &sink.events;
    assert_eq!(e.len(), 2);
    assert_eq!((e[0].command, e[0].text.is_none()), ("ping", false));
    assert_eq!(
        (e[1].command, e[1].outcome, e[1].text.is_none()),
        ("unknown", Outcome::NoResponse, true)
    );
    assert_eq!(sink.health.malformed, 1);
}

#[test]
fn tls_stops_the_session() {
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.extend([7u8; 40]);
    let t: Transcript = vec![(C, hello, 1)];
    let mut s = session(true);
    let sink = run_steps(&mut s, &steps(&t), Chunking::ByteByByte);
    assert_eq!(sink.health.encrypted_connections, 1);
    assert!(sink.events.is_empty());
    let mut sink = VecSink::default();
    assert_eq!(s.feed(C, b"more", 2, &mut sink), crate::Progress::Stop);
}

#[test]
fn in_flight_requests_are_bounded() {
    let cfg = SessionConfig {
        max_inflight: 2,
        ..SessionConfig::default()
    };
    let make = || super::super::new_session(meta(true), cfg.clone());
    let mut msgs = Vec::new();
    for i in 1..=4 {
        msgs.push((C, cmd(i, Doc::new().i32("ping", 1).str("$db", "a"))));
    }
    for i in 1..=4 {
        msgs.push((S, ok(100 + i, i)));
    }
    let sink = assert_chunking_invariant(make, &steps(&conv(msgs)));
    assert_eq!(sink.events.len(), 2);
    assert_eq!(sink.health.inflight_overflow, 2);
    assert_eq!(sink.health.responses_without_request, 0);
}

#[test]
fn text_is_cut_at_max_text() {
    let cfg = SessionConfig {
        max_text: 40,
        ..SessionConfig::default()
    };
    let mut filter = Doc::new();
    for i in 0..20 {
        filter = filter.i32(&format!("field{i}"), i);
    }
    let t = conv(vec![
        (
            C,
            cmd(
                1,
                Doc::new()
                    .str("find", "a")
                    .doc("filter", filter)
                    .str("$db", "d"),
            ),
        ),
        (S, cursor_reply(2, 1, 0, "d.a", true, 0)),
    ]);
    let sink = assert_chunking_invariant(
        || super::super::new_session(meta(true), cfg.clone()),
        &steps(&t),
    );
    let e = &sink.events[0];
    assert!(e.text_truncated);
    assert!(text(e).len() <= 40);
    assert!(text(e).starts_with("find d.a {\"filter\":{\"field0\":\"?\""));
}

#[test]
fn steps_with_gaps_in_every_position_never_panic() {
    let t = conv(vec![
        (
            C,
            cmd(
                1,
                Doc::new()
                    .str("find", "a")
                    .doc("filter", Doc::new().i32("x", 1))
                    .str("$db", "d"),
            ),
        ),
        (S, cursor_reply(2, 1, 7, "d.a", true, 3)),
        (
            C,
            cmd(
                3,
                Doc::new()
                    .i64("getMore", 7)
                    .str("collection", "a")
                    .str("$db", "d"),
            ),
        ),
        (S, cursor_reply(4, 3, 0, "d.a", false, 3)),
    ]);
    let total_c: u64 = t
        .iter()
        .filter(|x| x.0 == C)
        .map(|x| x.1.len() as u64)
        .sum();
    let total_s: u64 = t
        .iter()
        .filter(|x| x.0 == S)
        .map(|x| x.1.len() as u64)
        .sum();
    for (dir, total) in [(C, total_c), (S, total_s)] {
        for off in (0..total).step_by(7) {
            for len in [1, 5, 40] {
                let st: Vec<Step> = with_gap(&t, dir, off, len);
                let sink = assert_chunkings(
                    || session(true),
                    &st,
                    &[Chunking::Whole, Chunking::ByteByByte],
                );
                assert!(sink.events.len() <= 2);
            }
        }
    }
}

#[test]
fn bytes_a_gap_took_from_an_unfinished_message_are_not_unparsed() {
    // A request whose middle is lost and whose end never comes: at close, only the bytes that
    // were captured (its header and first part) are unparsed; the gap's are gap bytes.
    let req = cmd(
        1,
        Doc::new()
            .str("find", "a")
            .doc("filter", Doc::new().str("name", "someone").i32("age", 40))
            .str("$db", "d"),
    );
    let (head, hole) = (30usize, 20u64);
    assert!(req.len() > head + hole as usize + 1);
    let mut s = session(true);
    let mut sink = VecSink::default();
    s.feed(C, &req[..head], 1, &mut sink);
    s.gap(C, hole, 2, &mut sink);
    s.close(3, &mut sink);
    assert_eq!(sink.health.unparsed_bytes, head as u64, "{:?}", sink.health);
    assert_eq!(sink.events.len(), 0, "{:#?}", sink.events);
}

// ---- gaps inside announced lengths ---------------------------------------------------------

/// An insert of 20 documents of 500 bytes (in a document sequence), a find with a 2,000-byte
/// filter value, a ping; each answered.
fn big_conversation() -> Transcript {
    let blob = "b".repeat(500);
    let rows: Vec<Doc> = (0..20)
        .map(|i| Doc::new().i32("_id", i).str("blob", &blob))
        .collect();
    conv(vec![
        (
            C,
            op_msg(
                1,
                0,
                0,
                &[
                    Sec::Body(
                        Doc::new()
                            .str("insert", "users")
                            .bool("ordered", true)
                            .str("$db", "test"),
                    ),
                    Sec::Seq("documents", rows),
                ],
            ),
        ),
        (S, reply(2, 1, Doc::new().i32("n", 20).f64("ok", 1.0))),
        (
            C,
            cmd(
                3,
                Doc::new()
                    .str("find", "a")
                    .doc("filter", Doc::new().str("name", &"x".repeat(2000)))
                    .str("$db", "d"),
            ),
        ),
        (S, cursor_reply(4, 3, 0, "d.a", true, 3)),
        (C, cmd(5, Doc::new().i32("ping", 1).str("$db", "admin"))),
        (S, ok(6, 5)),
    ])
}

/// Outcome, text, text_partial of each event.
fn summary(e: &[QueryEvent]) -> Vec<(Outcome, String, bool)> {
    e.iter()
        .map(|x| (x.outcome, text(x).to_string(), x.text_partial))
        .collect()
}

#[test]
fn request_gap_inside_a_message_is_counted_paired_and_timed() {
    let t = big_conversation();
    let insert = t[0].1.len() as u64;
    // Into the documents of the insert (its body section is read whole), up to its last
    // byte exactly, or into the filter of the find.
    for (from, len) in [
        (200, 3000),
        (insert - 4000, 4000),
        (insert - 1, 1),
        (insert + 60, 1000),
    ] {
        let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, from, len));
        let e = &r.events;
        assert_eq!(e.len(), 3, "{from}+{len}: {e:#?}");
        let cut = usize::from(from >= insert);
        for (i, x) in e.iter().enumerate() {
            // Paired with its reply and timed; the one with lost bytes is marked partial (and
            // incomplete: what it carried is not all known).
            assert_eq!(x.text_partial, i == cut, "{from}+{len}: {x:#?}");
            let want = if i == cut {
                Outcome::Incomplete
            } else {
                Outcome::Ok
            };
            assert_eq!(x.outcome, want, "{from}+{len}");
            assert_eq!(x.end_ns, Some(2000 * (i as u64 + 1)));
            assert_eq!(x.bytes_in, t[2 * i].1.len() as u64);
        }
        assert_eq!(r.health, Health::default(), "{from}+{len}");
        if cut == 0 {
            assert_eq!((text(&e[0]), e[0].rows_affected), ("insert test.users", 20));
        } else {
            // The shape of what was read before the gap: `$db` came after it.
            assert_eq!(text(&e[1]), r#"find ?.a {"filter":{"name":"?"}}"#);
            assert_eq!(e[1].rows_sent, 3);
        }
    }
    // The whole body lost: the event is still there, named by what could be read (nothing).
    let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, 16, insert - 16));
    let e = &r.events;
    assert_eq!(e.len(), 3);
    assert_eq!(
        (e[0].command, e[0].outcome, e[0].text_partial, e[0].end_ns),
        ("unknown", Outcome::Incomplete, true, Some(2000))
    );
    assert_eq!(
        summary(&e[1..])[1],
        (Outcome::Ok, "ping admin".into(), false)
    );
    assert_eq!(r.health, Health::default());
}

#[test]
fn reply_gap_inside_a_message_pairs_as_incomplete() {
    let t = big_conversation();
    let cursor = t[3].1.len() as u64;
    let before = t[1].1.len() as u64;
    // Inside the cursor reply, up to its last byte exactly, all the body of the first reply.
    for (from, len) in [
        (before + 40, 50),
        (before + 30, cursor - 30),
        (16, before - 16),
    ] {
        let r = assert_chunking_invariant(|| session(true), &with_gap(&t, S, from, len));
        let e = &r.events;
        assert_eq!(e.len(), 3, "{from}+{len}: {e:#?}");
        let cut = usize::from(from >= before);
        for (i, x) in e.iter().enumerate() {
            let want = if i == cut {
                Outcome::Incomplete
            } else {
                Outcome::Ok
            };
            assert_eq!((x.outcome, x.text_partial), (want, false), "{from}+{len}");
            assert_eq!(x.end_ns, Some(2000 * (i as u64 + 1)));
            assert_eq!(x.bytes_out, t[2 * i + 1].1.len() as u64);
        }
        assert_eq!(r.health, Health::default());
    }
}

#[test]
fn gap_across_a_message_boundary_still_resyncs() {
    let t = big_conversation();
    let insert = t[0].1.len() as u64;
    // From inside the insert into the find; from the start of the find; longer than the
    // find and the ping together.
    let total: u64 = t
        .iter()
        .filter(|x| x.0 == C)
        .map(|x| x.1.len() as u64)
        .sum();
    for (from, len) in [(insert - 10, 20), (insert, 30), (200, total - 200)] {
        let r = assert_chunking_invariant(|| session(true), &with_gap(&t, C, from, len));
        assert_eq!(r.health.resyncs, 1, "{from}+{len}");
        // A message the gap cut before crossing its end is still emitted, marked partial.
        if from < insert {
            let e = &r.events[0];
            assert_eq!((e.command, e.text_partial), ("insert", true), "{e:#?}");
            assert_eq!(e.outcome, Outcome::Incomplete);
        } else {
            assert!(r.events.iter().all(|e| !e.text_partial));
        }
    }
}

// ---- TLS read on as decrypted plaintext ----------------------------------------------------

fn tls_conv() -> Transcript {
    let find = cmd(10, Doc::new().str("find", "users").str("$db", "test"));
    conv(vec![
        (C, find),
        (S, cursor_reply(10, 10, 0, "test.users", true, 2)),
    ])
}

#[test]
fn after_tls_reads_as_a_seen_open() {
    let t = tls_conv();
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
        assert_eq!(r.events.len(), 1);
        assert_eq!(
            (r.events[0].command, r.events[0].outcome),
            ("find", Outcome::Ok)
        );
        assert_eq!(r.events[0].rows_sent, 2);
    }
    // Told before any byte: the same as opened with after_tls.
    let make = || {
        let mut s = session(true);
        assert!(s.start_tls());
        s
    };
    assert_eq!(assert_chunking_invariant(make, &steps(&t)).events.len(), 1);
}

#[test]
fn start_tls_after_the_client_hello_reads_on_and_uncounts() {
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.extend([7u8; 40]);
    let mut s = session(true);
    let mut sink = VecSink::default();
    assert_eq!(s.feed(C, &hello, 1, &mut sink), crate::Progress::Stop);
    assert_eq!(sink.health.encrypted_connections, 1);
    assert!(s.start_tls());
    for (d, b, ts) in tls_conv() {
        assert_eq!(s.feed(d, &b, ts + 10, &mut sink), crate::Progress::Continue);
    }
    s.close(99_999, &mut sink);
    assert_eq!(sink.health, Health::default());
    assert_eq!(sink.events.len(), 1);
    assert_eq!(sink.events[0].outcome, Outcome::Ok);
    // Anything but the ClientHello fed first: refused.
    let mut s = session(true);
    let (d, b, ts) = &tls_conv()[0];
    s.feed(*d, b, *ts, &mut VecSink::default());
    assert!(!s.start_tls());
}

#[test]
fn messages_after_a_malformed_one_read_as_in_a_new_session() {
    // The parsers reuse each direction's reader and walker: one left mid-document by
    // malformed BSON (a request and a reply) must not change how the next messages read.
    let mut bad = cmd(1, Doc::new().str("find", "a").str("$db", "d"));
    bad[37] = 0x77;
    let mut bad_reply = cursor_reply(2, 1, 5, "d.a", true, 3);
    let n = bad_reply.len();
    bad_reply[n - 20] = 0x77;
    let good = vec![
        (
            C,
            cmd(
                3,
                Doc::new()
                    .str("find", "users")
                    .doc("filter", Doc::new().doc("age", Doc::new().i32("$gt", 3)))
                    .str("$db", "test"),
            ),
        ),
        (S, cursor_reply(4, 3, 99, "test.users", true, 2)),
        (
            C,
            cmd(
                5,
                Doc::new()
                    .i64("getMore", 99)
                    .str("collection", "users")
                    .str("$db", "test"),
            ),
        ),
        (S, cursor_reply(6, 5, 0, "test.users", false, 1)),
    ];
    let mut damaged = vec![(C, bad), (S, bad_reply)];
    damaged.extend(good.iter().cloned());
    let seen = |e: &QueryEvent| {
        (
            text(e).to_string(),
            e.command,
            e.rows_sent,
            e.outcome,
            e.bytes_in,
            e.bytes_out,
        )
    };
    let sink = run(&conv(damaged));
    assert_eq!(
        sink.health.malformed, 2,
        "both damaged messages failed to parse"
    );
    let after: Vec<_> = sink.events.iter().skip(1).map(seen).collect();
    let fresh: Vec<_> = run(&conv(good)).events.iter().map(seen).collect();
    assert_eq!(fresh.len(), 2);
    assert_eq!(after, fresh);
}
