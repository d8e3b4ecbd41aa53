//! MongoDB session throughput: normal parsing of OP_MSG traffic next to the resynchronisation
//! of a session that lost sync and is fed bytes that are not MongoDB (MySQL traffic on port
//! 27017), both in MB/s of input. The two should be of the same order: a session searching
//! for a message start must not be the slow path of a capture.
//!
//! `cargo bench -p dbtap-proto --bench mongodb -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use proto::mongodb::bson::build::Doc;
use proto::mongodb::new_session;
use proto::mongodb::wire::{op, put_message};
use proto::testing::{CountSink, loopback_meta};
use proto::{Direction, Session, SessionConfig};

/// Bytes per `feed` call, as a TCP segment on Ethernet carries.
const SEGMENT: usize = 1460;
/// Request/reply pairs in one conversation.
const PAIRS: i32 = 2000;

/// A conversation of finds and their cursor replies (a few small documents each), the way
/// a driver talks: `(direction, message)` in order.
fn op_msg_conversation() -> Vec<(Direction, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..PAIRS {
        let find = Doc::new()
            .str("find", "orders")
            .doc(
                "filter",
                Doc::new()
                    .i32("customer", i)
                    .doc("total", Doc::new().i32("$gt", 100)),
            )
            .doc("sort", Doc::new().i32("date", -1))
            .i32("limit", 10)
            .str("$db", "shop");
        let docs: Vec<Doc> = (0..10)
            .map(|k| {
                Doc::new()
                    .i32("_id", i * 10 + k)
                    .i32("customer", i)
                    .i32("total", 150 + k)
                    .str("status", "shipped")
                    .str("note", "a short note that makes the document look real")
            })
            .collect();
        let reply = Doc::new()
            .doc(
                "cursor",
                Doc::new()
                    .arr("firstBatch", docs)
                    .i64("id", 0)
                    .str("ns", "shop.orders"),
            )
            .f64("ok", 1.0);
        out.push((Direction::ToServer, msg(2 * i + 1, 0, &find)));
        out.push((Direction::ToClient, msg(2 * i + 2, 2 * i + 1, &reply)));
    }
    out
}

fn msg(request_id: i32, response_to: i32, d: &Doc) -> Vec<u8> {
    let mut body = 0u32.to_le_bytes().to_vec();
    body.push(0);
    body.extend(d.bytes());
    let mut out = Vec::new();
    put_message(&mut out, request_id, response_to, op::MSG, &body);
    out
}

/// A MySQL packet: 3-byte length, sequence id, payload.
fn mysql_packet(out: &mut Vec<u8>, seq: u8, payload: &[u8]) {
    out.extend(&(payload.len() as u32).to_le_bytes()[..3]);
    out.push(seq);
    out.extend(payload);
}

/// Length-encoded string (short).
fn lenenc(out: &mut Vec<u8>, s: &[u8]) {
    out.push(s.len() as u8);
    out.extend(s);
}

/// sysbench-like MySQL traffic: point selects (COM_QUERY) and their one-row text result sets
/// (column count, column definition, EOF, row, EOF).
fn mysql_conversation() -> Vec<(Direction, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..PAIRS * 2 {
        let mut q = vec![0x03];
        q.extend(format!("SELECT c FROM sbtest1 WHERE id={}", 1000 + i * 7).as_bytes());
        let mut req = Vec::new();
        mysql_packet(&mut req, 0, &q);
        let mut res = Vec::new();
        mysql_packet(&mut res, 1, &[1]);
        let mut col = Vec::new();
        for s in [&b"def"[..], b"sbtest", b"sbtest1", b"sbtest1", b"c", b"c"] {
            lenenc(&mut col, s);
        }
        col.extend([
            0x0c, 0x08, 0x00, 0xf0, 0x00, 0x00, 0x00, 0xfe, 0x00, 0x00, 0x00, 0x00, 0x00,
        ]);
        mysql_packet(&mut res, 2, &col);
        mysql_packet(&mut res, 3, &[0xfe, 0, 0, 0x22, 0]);
        let mut row = Vec::new();
        let c = format!(
            "{:011}-{:011}-{:011}-{:011}-{:011}-{:011}-{:011}-{:011}-{:011}-{:011}",
            i,
            i * 3,
            i * 5,
            i * 7,
            i * 11,
            i * 13,
            i * 17,
            i * 19,
            i * 23,
            i * 29
        );
        lenenc(&mut row, c.as_bytes());
        mysql_packet(&mut res, 4, &row);
        mysql_packet(&mut res, 5, &[0xfe, 0, 0, 0x22, 0]);
        out.push((Direction::ToServer, req));
        out.push((Direction::ToClient, res));
    }
    out
}

/// Feeds the conversation in segments to a fresh session; `saw_open: false` starts it lost
/// (picked up mid-stream), searching for a message start in both directions.
fn feed(conv: &[(Direction, Vec<u8>)], saw_open: bool) -> CountSink {
    let cfg = SessionConfig::default();
    let mut s = new_session(loopback_meta(27017, saw_open), cfg);
    let mut sink = CountSink::default();
    let mut ts = 0;
    for (d, bytes) in conv {
        ts += 1000;
        for seg in bytes.chunks(SEGMENT) {
            s.feed(*d, black_box(seg), ts, &mut sink);
        }
    }
    s.close(ts + 1, &mut sink);
    sink
}

fn total_bytes(conv: &[(Direction, Vec<u8>)]) -> u64 {
    conv.iter().map(|(_, b)| b.len() as u64).sum()
}

fn parse(c: &mut Criterion) {
    let conv = op_msg_conversation();
    let sink = feed(&conv, true);
    assert_eq!(sink.events, PAIRS as u64, "every find is an event");
    let mut g = c.benchmark_group("mongodb_parse");
    g.throughput(Throughput::Bytes(total_bytes(&conv)));
    g.bench_function("op_msg_synced", |b| b.iter(|| feed(&conv, true)));
    g.finish();
}

fn resync(c: &mut Criterion) {
    let conv = mysql_conversation();
    let sink = feed(&conv, false);
    assert_eq!(sink.events, 0, "MySQL bytes are never a MongoDB message");
    assert_eq!(
        sink.health.unparsed_bytes,
        total_bytes(&conv),
        "every byte is searched"
    );
    let mut g = c.benchmark_group("mongodb_resync");
    g.throughput(Throughput::Bytes(total_bytes(&conv)));
    g.bench_function("mysql_bytes_lost", |b| b.iter(|| feed(&conv, false)));
    g.finish();
}

criterion_group!(benches, parse, resync);
criterion_main!(benches);
