//! The reassembler against generated streams: lost, truncated, repeated and overlapping
//! records; the connection cap; TLS switches; arbitrary record sequences.

use std::collections::HashMap;
use std::net::SocketAddr;

use proptest::prelude::*;
use stream::{Direction, Endpoint, Reassembler, Record, StreamHandler, StreamOpen};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Open(u64),
    Data(u64, Direction, Vec<u8>),
    Gap(u64, Direction, u64),
    Tls(u64),
    Close(u64),
}

#[derive(Default)]
struct Log(Vec<Ev>);

impl StreamHandler for Log {
    fn open(&mut self, o: &StreamOpen) {
        self.0.push(Ev::Open(o.conn));
    }
    fn data(&mut self, conn: u64, dir: Direction, bytes: &[u8], _ts: u64) {
        assert!(!bytes.is_empty(), "empty data delivered");
        self.0.push(Ev::Data(conn, dir, bytes.to_vec()));
    }
    fn gap(&mut self, conn: u64, dir: Direction, len: u64, _ts: u64) {
        assert!(len > 0, "empty gap delivered");
        self.0.push(Ev::Gap(conn, dir, len));
    }
    fn start_tls(&mut self, conn: u64, _ts: u64) {
        self.0.push(Ev::Tls(conn));
    }
    fn close(&mut self, conn: u64, _ts: u64) {
        self.0.push(Ev::Close(conn));
    }
}

fn open(conn: u64) -> Record<'static> {
    let a: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    Record::Open(StreamOpen {
        conn,
        ts_ns: 1,
        client: Endpoint::from(a),
        server: Endpoint::Unix("/run/mysqld/mysqld.sock".into()),
        peer: None,
        saw_open: true,
    })
}

fn data(conn: u64, dir: Direction, offset: u64, len: u64, bytes: &[u8], tls: bool) -> Record<'_> {
    Record::Data {
        conn,
        dir,
        ts_ns: 2,
        offset,
        len,
        bytes,
        tls,
    }
}

const C: Direction = Direction::ToServer;
const S: Direction = Direction::ToClient;

#[test]
fn in_order_gaps_truncation_duplicates_and_overlap() {
    let mut r = Reassembler::new(8);
    let mut h = Log::default();
    r.push(&open(1), &mut h);
    r.push(&data(1, C, 0, 3, b"abc", false), &mut h);
    r.push(&data(1, C, 5, 2, b"fg", false), &mut h); // 2 lost
    r.push(&data(1, C, 7, 5, b"hi", false), &mut h); // 3 over the copy limit
    r.push(&data(1, C, 0, 3, b"abc", false), &mut h); // duplicate
    r.push(&data(1, C, 10, 4, b"klmn", false), &mut h); // overlaps 2
    r.push(&data(1, S, 0, 1, b"z", false), &mut h);
    r.push(&Record::Close { conn: 1, ts_ns: 3 }, &mut h);
    r.push(&data(1, C, 14, 1, b"o", false), &mut h); // closed: unknown
    assert_eq!(
        h.0,
        vec![
            Ev::Open(1),
            Ev::Data(1, C, b"abc".to_vec()),
            Ev::Gap(1, C, 2),
            Ev::Data(1, C, b"fg".to_vec()),
            Ev::Data(1, C, b"hi".to_vec()),
            Ev::Gap(1, C, 3),
            Ev::Data(1, C, b"mn".to_vec()),
            Ev::Data(1, S, b"z".to_vec()),
            Ev::Close(1),
        ]
    );
    let s = r.stats();
    assert_eq!(s.records, 9);
    assert_eq!(s.data_bytes, 3 + 2 + 2 + 2 + 1);
    assert_eq!(s.gap_lost_bytes, 2);
    assert_eq!(s.gap_truncated_bytes, 3);
    assert_eq!(s.duplicate_records, 1);
    assert_eq!(s.duplicate_bytes, 3 + 2);
    assert_eq!(s.unknown_conn_records, 1);
    assert_eq!(r.open_conns(), 0);
}

#[test]
fn start_tls_once_before_the_first_tls_record() {
    let mut r = Reassembler::new(8);
    let mut h = Log::default();
    r.push(&open(1), &mut h);
    r.push(&data(1, C, 0, 2, b"ab", false), &mut h);
    r.push(&data(1, S, 0, 1, b"S", false), &mut h);
    r.push(&data(1, C, 2, 2, b"cd", true), &mut h);
    r.push(&data(1, S, 1, 2, b"ef", true), &mut h);
    // Inside TLS from the start: start_tls comes first of all.
    r.push(&open(2), &mut h);
    r.push(&data(2, C, 0, 1, b"x", true), &mut h);
    r.finish(9, &mut h);
    assert_eq!(
        h.0,
        vec![
            Ev::Open(1),
            Ev::Data(1, C, b"ab".to_vec()),
            Ev::Data(1, S, b"S".to_vec()),
            Ev::Tls(1),
            Ev::Data(1, C, b"cd".to_vec()),
            Ev::Data(1, S, b"ef".to_vec()),
            Ev::Open(2),
            Ev::Tls(2),
            Ev::Data(2, C, b"x".to_vec()),
            Ev::Close(1),
            Ev::Close(2),
        ]
    );
    assert_eq!(r.stats().tls_starts, 2);
}

#[test]
fn the_cap_evicts_the_least_recently_active() {
    let mut r = Reassembler::new(2);
    let mut h = Log::default();
    r.push(&open(1), &mut h);
    r.push(&open(2), &mut h);
    r.push(&data(1, C, 0, 1, b"a", false), &mut h); // 2 is now the least recent
    r.push(&open(3), &mut h);
    assert_eq!(h.0[3..], [Ev::Close(2), Ev::Open(3)]);
    assert_eq!(r.stats().evicted, 1);
    assert_eq!(r.open_conns(), 2);
    r.push(&data(2, C, 0, 1, b"b", false), &mut h);
    assert_eq!(r.stats().unknown_conn_records, 1);
    // An Open for an open id ends the old connection first; no eviction.
    r.push(&open(3), &mut h);
    assert_eq!(h.0[5..], [Ev::Close(3), Ev::Open(3)]);
    assert_eq!(r.stats().evicted, 1);
}

#[test]
fn idle_connections_expire() {
    let mut r = Reassembler::new(8);
    let mut h = Log::default();
    r.push(&open(1), &mut h); // ts 1
    r.push(&open(2), &mut h); // ts 1
    r.push(
        &Record::Data {
            conn: 2,
            dir: C,
            ts_ns: 50,
            offset: 0,
            len: 1,
            bytes: b"a",
            tls: false,
        },
        &mut h,
    );
    assert_eq!(r.expire(40, 100, &mut h), 0);
    assert_eq!(r.expire(120, 100, &mut h), 1);
    assert_eq!(h.0.last(), Some(&Ev::Close(1)));
    assert_eq!(r.expire(151, 100, &mut h), 1);
    assert_eq!(h.0.last(), Some(&Ev::Close(2)));
    assert_eq!((r.stats().expired, r.open_conns()), (2, 0));
}

/// What happens to one chunk of a generated stream.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Keep,
    Drop,
    /// Only this many of its bytes are copied.
    Truncate(usize),
    /// Sent twice.
    Repeat,
    /// Sent starting this many bytes earlier (overlapping the previous chunk).
    Overlap(usize),
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => Just(Fate::Keep),
        1 => Just(Fate::Drop),
        1 => (0usize..50).prop_map(Fate::Truncate),
        1 => Just(Fate::Repeat),
        1 => (1usize..50).prop_map(Fate::Overlap),
    ]
}

/// One direction's stream cut into chunks, each with a fate.
fn side() -> impl Strategy<Value = (Vec<u8>, Vec<(usize, Fate)>)> {
    (
        proptest::collection::vec(any::<u8>(), 0..3000),
        proptest::collection::vec((1usize..400, fate()), 1..40),
    )
}

/// The records of one direction's stream, in order.
fn records(stream: &[u8], cuts: &[(usize, Fate)]) -> Vec<(u64, u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for &(size, f) in cuts {
        if at >= stream.len() {
            break;
        }
        let end = (at + size).min(stream.len());
        let (o, l) = (at as u64, (end - at) as u64);
        match f {
            Fate::Keep => out.push((o, l, stream[at..end].to_vec())),
            Fate::Drop => {}
            Fate::Truncate(n) => out.push((o, l, stream[at..end.min(at + n)].to_vec())),
            Fate::Repeat => {
                out.push((o, l, stream[at..end].to_vec()));
                out.push((o, l, stream[at..end].to_vec()));
            }
            Fate::Overlap(back) => {
                let s = at.saturating_sub(back);
                out.push((s as u64, (end - s) as u64, stream[s..end].to_vec()));
            }
        }
        at = end;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Data and gaps add up to each direction's stream up to the last record sent; every
    /// delivered byte is the original at its position; the counters agree.
    #[test]
    fn data_and_gaps_cover_each_stream_exactly(
        c in side(), s in side(), order in proptest::collection::vec(any::<bool>(), 0..100),
    ) {
        let (streams, recs) = ([&c.0, &s.0], [records(&c.0, &c.1), records(&s.0, &s.1)]);
        let mut r = Reassembler::new(4);
        let mut h = Log::default();
        r.push(&open(7), &mut h);
        let (mut i, mut pick) = ([0usize; 2], order.iter().cycle());
        while i[0] < recs[0].len() || i[1] < recs[1].len() {
            let mut d = usize::from(*pick.next().unwrap_or(&false));
            if i[d] >= recs[d].len() { d = 1 - d; }
            let (o, l, b) = &recs[d][i[d]];
            let dir = if d == 0 { C } else { S };
            r.push(&data(7, dir, *o, *l, b, false), &mut h);
            i[d] += 1;
        }
        r.finish(10, &mut h);
        let mut pos = [0u64; 2];
        let (mut data_bytes, mut gaps) = (0u64, 0u64);
        for ev in &h.0 {
            match ev {
                Ev::Data(_, dir, b) => {
                    let d = usize::from(*dir == S);
                    let at = pos[d] as usize;
                    prop_assert_eq!(&streams[d][at..at + b.len()], &b[..]);
                    pos[d] += b.len() as u64;
                    data_bytes += b.len() as u64;
                }
                Ev::Gap(_, dir, n) => {
                    pos[usize::from(*dir == S)] += n;
                    gaps += n;
                }
                _ => {}
            }
        }
        for d in 0..2 {
            let end = recs[d].iter().map(|(o, l, _)| o + l).max().unwrap_or(0);
            prop_assert_eq!(pos[d], end);
        }
        let st = r.stats();
        prop_assert_eq!(st.data_bytes, data_bytes);
        prop_assert_eq!(st.gap_lost_bytes + st.gap_truncated_bytes, gaps);
        prop_assert_eq!(h.0.last(), Some(&Ev::Close(7)));
    }

    /// Without loss, every byte arrives as data and there are no gaps.
    #[test]
    fn a_lossless_stream_arrives_whole(
        stream in proptest::collection::vec(any::<u8>(), 0..3000),
        sizes in proptest::collection::vec(1usize..500, 1..30),
    ) {
        let cuts: Vec<(usize, Fate)> = sizes.iter().map(|s| (*s, Fate::Keep)).collect();
        let mut r = Reassembler::new(1);
        let mut h = Log::default();
        r.push(&open(1), &mut h);
        for (o, l, b) in records(&stream, &cuts) {
            r.push(&data(1, C, o, l, &b, false), &mut h);
        }
        let got: Vec<u8> = h.0.iter().flat_map(|e| match e {
            Ev::Data(_, _, b) => b.clone(),
            Ev::Gap(..) => panic!("gap in a lossless stream"),
            _ => Vec::new(),
        }).collect();
        let end = records(&stream, &cuts).iter().map(|(o, l, _)| o + l).max().unwrap_or(0);
        prop_assert_eq!(&got[..], &stream[..end as usize]);
    }

    /// Arbitrary record sequences never panic, and per connection and direction the data
    /// and gaps delivered never pass the furthest end a record announced.
    #[test]
    fn arbitrary_records_never_panic(ops in proptest::collection::vec(
        (0u8..4, 0u64..4, any::<bool>(), 0u64..5000, 0u64..600,
         proptest::collection::vec(any::<u8>(), 0..300), any::<bool>()), 0..200),
        cap in 1usize..4,
    ) {
        let mut r = Reassembler::new(cap);
        let mut h = Log::default();
        let mut furthest: HashMap<(u64, bool), u64> = HashMap::new();
        for (kind, conn, to_client, offset, len, bytes, tls) in &ops {
            let dir = if *to_client { S } else { C };
            match kind {
                0 => r.push(&open(*conn), &mut h),
                1 => r.push(&Record::Close { conn: *conn, ts_ns: 5 }, &mut h),
                _ => {
                    let e = furthest.entry((*conn, *to_client)).or_default();
                    *e = (*e).max(offset + (*len).max(bytes.len() as u64));
                    r.push(&data(*conn, dir, *offset, *len, bytes, *tls), &mut h);
                }
            }
        }
        r.finish(6, &mut h);
        prop_assert_eq!(r.open_conns(), 0);
        let mut pos: HashMap<(u64, bool), u64> = HashMap::new();
        let mut tls: HashMap<u64, u32> = HashMap::new();
        for ev in &h.0 {
            let (conn, dir, n) = match ev {
                Ev::Data(c, d, b) => (*c, *d, b.len() as u64),
                Ev::Gap(c, d, n) => (*c, *d, *n),
                Ev::Open(c) => {
                    pos.retain(|k, _| k.0 != *c);
                    tls.remove(c);
                    continue;
                }
                Ev::Tls(c) => {
                    let t = tls.entry(*c).or_default();
                    *t += 1;
                    prop_assert_eq!(*t, 1, "start_tls twice for one connection");
                    continue;
                }
                _ => continue,
            };
            let p = pos.entry((conn, dir == S)).or_default();
            *p += n;
            prop_assert!(*p <= furthest[&(conn, dir == S)]);
        }
    }
}

proptest! {
    /// The cap and idle expiry close the least recently active connections, in that order,
    /// however opens, records and closes interleave: checked against a plain recency list.
    #[test]
    fn eviction_and_expiry_follow_recency(
        ops in proptest::collection::vec((0u8..4, 0u64..6), 0..120),
        cap in 1usize..5,
    ) {
        let mut r = Reassembler::new(cap);
        let mut h = Log::default();
        let mut model: Vec<u64> = Vec::new(); // least recent first
        let mut want: Vec<Ev> = Vec::new();
        let mut offs: HashMap<u64, u64> = HashMap::new();
        let mut last: HashMap<u64, u64> = HashMap::new();
        for (i, &(op, id)) in ops.iter().enumerate() {
            let ts = i as u64 + 1;
            match op {
                0 => {
                    if let Some(p) = model.iter().position(|&c| c == id) {
                        model.remove(p);
                        want.push(Ev::Close(id));
                    }
                    while model.len() >= cap {
                        want.push(Ev::Close(model.remove(0)));
                    }
                    model.push(id);
                    want.push(Ev::Open(id));
                    offs.insert(id, 0);
                    last.insert(id, 1); // open() carries ts 1
                    r.push(&open(id), &mut h);
                }
                1 => {
                    let off = offs.get(&id).copied().unwrap_or(0);
                    if let Some(p) = model.iter().position(|&c| c == id) {
                        model.remove(p);
                        model.push(id);
                        want.push(Ev::Data(id, C, b"x".to_vec()));
                        offs.insert(id, off + 1);
                        last.insert(id, ts);
                    }
                    let rec = Record::Data { conn: id, dir: C, ts_ns: ts, offset: off, len: 1,
                                             bytes: b"x", tls: false };
                    r.push(&rec, &mut h);
                }
                2 => {
                    if let Some(p) = model.iter().position(|&c| c == id) {
                        model.remove(p);
                        want.push(Ev::Close(id));
                    }
                    r.push(&Record::Close { conn: id, ts_ns: ts }, &mut h);
                }
                _ => {
                    // From the least recent, up to the first with a record since ts - 3.
                    let n = r.expire(ts, 3, &mut h);
                    let mut m = 0;
                    while model.first().is_some_and(|c| last[c] < ts.saturating_sub(3)) {
                        want.push(Ev::Close(model.remove(0)));
                        m += 1;
                    }
                    prop_assert_eq!(n, m);
                }
            }
            prop_assert_eq!(r.open_conns(), model.len());
        }
        prop_assert_eq!(&h.0, &want);
    }
}
