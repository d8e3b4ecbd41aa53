//! Simulated captures (proptest): a random byte stream per direction is cut into random segments,
//! then the capture reorders them within a window, duplicates, drops, retransmits overlapping
//! ranges and (in the lossy mode) cuts payloads at a snaplen. Whatever happens, the delivered
//! bytes plus the gaps must rebuild each stream exactly.

mod common;

use common::*;
use flow::tcp_flags::{ACK, FIN, PSH, SYN};
use flow::{Dir, FlowConfig, FlowTable};
use proptest::prelude::*;

const C: &str = "192.168.7.2:41000";
const S: &str = "192.168.7.1:5432";

/// splitmix64: the randomness of a case comes from one proptest-chosen seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, pct: u32) -> bool {
        self.below(100) < u64::from(pct)
    }
}

#[derive(Clone, Debug)]
struct Params {
    seed: u64,
    len: [usize; 2],
    mss: usize,
    drop_pct: u32,
    dup_pct: u32,
    retx_pct: u32,
    window: usize,
    isn: [u32; 2],
    /// Lossy mode: ACKs, snaplen cuts and small buffer caps, which may turn bytes that do arrive
    /// (late) into gaps. Otherwise gaps must equal exactly the bytes never captured.
    lossy: bool,
    cut_pct: u32,
    cap_dir: usize,
    cap_total: usize,
}

fn params(lossy: bool) -> impl Strategy<Value = Params> {
    let isn = prop_oneof![any::<u32>(), (u32::MAX - 4000)..=u32::MAX];
    (
        any::<u64>(),
        (0usize..3000, 0usize..3000),
        1usize..700,
        (0u32..40, 0u32..40, 0u32..25),
        0usize..12,
        (isn.clone(), isn),
        0u32..30,
        prop_oneof![Just(0usize), 50usize..2000, Just(usize::MAX)],
        prop_oneof![Just(0usize), 50usize..4000, Just(usize::MAX)],
    )
        .prop_map(
            move |(
                seed,
                (l0, l1),
                mss,
                (drop_pct, dup_pct, retx_pct),
                window,
                (i0, i1),
                cut,
                cd,
                ct,
            )| {
                Params {
                    seed,
                    len: [l0, l1],
                    mss,
                    drop_pct,
                    dup_pct,
                    retx_pct,
                    window,
                    isn: [i0, i1],
                    lossy,
                    cut_pct: if lossy { cut } else { 0 },
                    cap_dir: if lossy { cd } else { usize::MAX },
                    cap_total: if lossy { ct } else { usize::MAX },
                }
            },
        )
}

/// Direction, stream offset, length.
type Span = (usize, usize, usize);

struct Case {
    streams: [Vec<u8>; 2],
    /// Per direction, per byte: whether some captured packet carries it.
    covered: [Vec<bool>; 2],
    pkts: Vec<Pkt>,
}

fn build(p: &Params) -> Case {
    let mut rng = Rng(p.seed);
    let ends = [addr(C), addr(S)];
    let streams: [Vec<u8>; 2] = [0, 1].map(|d| {
        (0..p.len[d])
            .map(|_| rng.below(256) as u8)
            .collect::<Vec<u8>>()
    });
    // Cut each stream into segments.
    let cuts: [Vec<(usize, usize)>; 2] = [0, 1].map(|d| {
        let mut v = Vec::new();
        let mut off = 0;
        while off < p.len[d] {
            let n = (1 + rng.below(p.mss as u64) as usize).min(p.len[d] - off);
            v.push((off, n));
            off += n;
        }
        v
    });
    // The order the endpoints send in, with retransmissions of earlier ranges mixed in.
    let mut sent: Vec<Span> = Vec::new();
    let mut next = [0usize; 2];
    let mut done = [0usize; 2];
    while next[0] < cuts[0].len() || next[1] < cuts[1].len() {
        let d = if next[0] >= cuts[0].len() {
            1
        } else if next[1] >= cuts[1].len() {
            0
        } else {
            rng.below(2) as usize
        };
        let (off, n) = cuts[d][next[d]];
        next[d] += 1;
        sent.push((d, off, n));
        done[d] = off + n;
        if rng.chance(p.retx_pct) {
            let a = rng.below(done[d] as u64) as usize;
            let b = a + 1 + rng.below((done[d] - a) as u64) as usize;
            sent.push((d, a, b.min(done[d]) - a));
        }
    }
    // Packets as sent: timestamps in send order, ACKs of what the peer had sent before.
    let mut acked = [0usize; 2];
    let mut wire: Vec<(Pkt, Option<Span>)> = Vec::new();
    for (i, &(d, off, n)) in sent.iter().enumerate() {
        let e = 1 - d;
        let mut pkt = Pkt {
            ts: 10_000 + i as u64 * 1000,
            src: ends[d],
            dst: ends[e],
            seq: p.isn[d].wrapping_add(1).wrapping_add(off as u32),
            ack: p.isn[e].wrapping_add(1).wrapping_add(acked[e] as u32),
            flags: if p.lossy { ACK | PSH } else { PSH },
            payload: streams[d][off..off + n].to_vec(),
            missing: 0,
        };
        acked[d] = acked[d].max(off + n);
        let mut captured = n;
        if rng.chance(p.cut_pct) {
            captured = rng.below(n as u64) as usize;
            pkt.payload.truncate(captured);
            pkt.missing = (n - captured) as u32;
        }
        wire.push((pkt, Some((d, off, captured))));
    }
    let ts_end = 10_000 + sent.len() as u64 * 1000;
    for d in 0..2 {
        let e = 1 - d;
        wire.push((
            Pkt {
                ts: ts_end + d as u64,
                src: ends[d],
                dst: ends[e],
                seq: p.isn[d].wrapping_add(1).wrapping_add(p.len[d] as u32),
                ack: p.isn[e].wrapping_add(1).wrapping_add(p.len[e] as u32),
                flags: if p.lossy { FIN | ACK } else { FIN },
                payload: vec![],
                missing: 0,
            },
            None,
        ));
    }
    // The capture: drops, duplicates, then reordering within a window.
    let mut covered = [vec![false; p.len[0]], vec![false; p.len[1]]];
    let mut cap: Vec<Pkt> = Vec::new();
    for (pkt, what) in wire {
        if let Some((d, off, captured)) = what {
            if rng.chance(p.drop_pct) {
                continue;
            }
            covered[d][off..off + captured]
                .iter_mut()
                .for_each(|b| *b = true);
        }
        if rng.chance(p.dup_pct) {
            cap.push(pkt.clone());
        }
        cap.push(pkt);
    }
    let mut keyed: Vec<(usize, Pkt)> = cap
        .into_iter()
        .enumerate()
        .map(|(i, x)| (i + rng.below(p.window as u64 + 1) as usize, x))
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    let handshake = [
        Pkt {
            ts: 1_000,
            src: ends[0],
            dst: ends[1],
            seq: p.isn[0],
            ack: 0,
            flags: SYN,
            payload: vec![],
            missing: 0,
        },
        Pkt {
            ts: 2_000,
            src: ends[1],
            dst: ends[0],
            seq: p.isn[1],
            ack: p.isn[0].wrapping_add(1),
            flags: SYN | ACK,
            payload: vec![],
            missing: 0,
        },
    ];
    let pkts = handshake
        .into_iter()
        .chain(keyed.into_iter().map(|(_, x)| x))
        .collect();
    Case {
        streams,
        covered,
        pkts,
    }
}

fn expected(stream: &[u8], covered: &[bool]) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    for (&b, &c) in stream.iter().zip(covered) {
        match (out.last_mut(), c) {
            (Some(Chunk::D(v)), true) => v.push(b),
            (Some(Chunk::G(n)), false) => *n += 1,
            (_, true) => out.push(Chunk::D(vec![b])),
            (_, false) => out.push(Chunk::G(1)),
        }
    }
    out
}

fn check(p: &Params) -> Result<(), TestCaseError> {
    let case = build(p);
    let cfg = FlowConfig {
        server_ports: vec![5432],
        max_buffer_per_direction: p.cap_dir,
        max_buffer_total: p.cap_total,
        ..FlowConfig::default()
    };
    let mut tbl = FlowTable::new(cfg);
    let mut rec = Rec::default();
    for x in &case.pkts {
        tbl.process(&x.seg(), &mut rec);
        prop_assert!(tbl.buffered_bytes() <= p.cap_total);
    }
    tbl.finish(&mut rec);
    prop_assert_eq!(tbl.buffered_bytes(), 0);
    prop_assert_eq!(rec.opens(), vec![1]);
    prop_assert_eq!(rec.closes(), vec![1]);
    for (d, dir) in [(0, Dir::ToServer), (1, Dir::ToClient)] {
        let got = rec.chunks(1, dir);
        let stream = &case.streams[d];
        if !p.lossy {
            prop_assert_eq!(&got, &expected(stream, &case.covered[d]), "dir {:?}", dir);
            continue;
        }
        // Data bytes equal the original at their offsets and were captured; gaps fill the rest.
        let mut off = 0usize;
        for c in &got {
            match c {
                Chunk::D(v) => {
                    prop_assert!(off + v.len() <= stream.len(), "data past the end");
                    prop_assert_eq!(&stream[off..off + v.len()], &v[..], "bytes at {}", off);
                    prop_assert!(case.covered[d][off..off + v.len()].iter().all(|&b| b));
                    off += v.len();
                }
                Chunk::G(n) => off += *n as usize,
            }
        }
        prop_assert_eq!(off, stream.len(), "dir {:?}", dir);
    }
    let st = tbl.stats();
    prop_assert_eq!(st.connections, 1);
    prop_assert_eq!(st.closed_fin + st.closed_finish, 1);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn reorder_duplicate_drop_rebuilds_exactly(p in params(false)) {
        check(&p)?;
    }

    #[test]
    fn acks_snaplen_and_caps_stay_consistent(p in params(true)) {
        check(&p)?;
    }

    /// Garbage: random flags, sequence numbers, ACKs and lengths on a few 4-tuples, with tiny
    /// limits. Nothing panics, the handler contract holds, limits hold.
    #[test]
    fn garbage_never_panics(
        segs in proptest::collection::vec(
            (0usize..4, any::<bool>(), any::<u32>(), any::<u32>(), any::<u8>(),
             proptest::collection::vec(any::<u8>(), 0..40), prop_oneof![Just(0u32), any::<u32>(), 0u32..100], 0u64..5_000),
            0..200),
        cap_dir in 0usize..500, cap_total in 0usize..800, max_flows in 0usize..4, seqbase in any::<u32>(),
    ) {
        let cfg = FlowConfig {
            server_ports: vec![3306],
            track_unknown_with_syn: true,
            max_buffer_per_direction: cap_dir,
            max_buffer_total: cap_total,
            max_flows,
            idle_timeout_ns: 3_000,
            closed_linger_ns: 1_000,
            ..FlowConfig::default()
        };
        let ends = ["10.0.0.1:3306", "10.0.0.2:40000", "10.0.0.3:40001", "[::1]:3306", "[::1]:5555"].map(addr);
        let mut tbl = FlowTable::new(cfg);
        let mut rec = Rec::default();
        let mut ts = 0u64;
        for (pair, rev, seq, ack, flags, payload, missing, dt) in segs {
            let (a, b) = match pair { 0 => (ends[0], ends[1]), 1 => (ends[0], ends[2]), 2 => (ends[3], ends[4]), _ => (ends[1], ends[2]) };
            let (src, dst) = if rev { (b, a) } else { (a, b) };
            ts += dt;
            // Mostly near one base so that segments interact, sometimes anywhere.
            let seq = if seq % 4 == 0 { seq } else { seqbase.wrapping_add(seq % 300) };
            let ack = if ack % 4 == 0 { ack } else { seqbase.wrapping_add(ack % 300) };
            let pkt = Pkt { ts, src, dst, seq, ack, flags, payload, missing };
            tbl.process(&pkt.seg(), &mut rec);
            prop_assert!(tbl.buffered_bytes() <= cap_total);
            prop_assert!(tbl.len() <= max_flows);
            tbl.expire(ts, &mut rec);
        }
        tbl.finish(&mut rec);
        prop_assert_eq!(tbl.buffered_bytes(), 0);
        prop_assert!(tbl.is_empty());
        let st = tbl.stats();
        prop_assert_eq!(rec.closes().len() as u64, st.connections);
        prop_assert_eq!(
            st.connections,
            st.closed_fin + st.closed_rst + st.closed_idle + st.evicted + st.closed_reused + st.closed_finish
        );
    }
}
