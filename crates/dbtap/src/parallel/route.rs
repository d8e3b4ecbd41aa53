//! Which worker of the parallel digest takes a frame: a connection's 4-tuple goes to the worker
//! with the fewest open connections when the tuple is first seen (on a tie, the fewest bytes so
//! far), and stays there as long as any worker's engine may still hold state for it, so every
//! worker sees whole connections and the merge stays exact whatever the assignment.
//! Connections first, because bytes so far predict badly: clients that open many connections at
//! once (redis-benchmark's 50) would all go to the worker that the first one's early bytes had
//! not loaded yet (measured: 63 % against 25 % of the CPU, where a hash gave 46 % against 40 %).
//! Open ones (a FIN or RST closes a connection for this count, a SYN opens it again), because
//! clients often open a short connection first: pgbench's check before its 4 clients made
//! connections given so far put 3 of the 4 busy ones on one worker (27 % against 73 % of the
//! workers' CPU on pgbench × 24).
//!
//! Exactness rests on one rule: a tuple's route is forgotten only when no engine can still hold
//! its flow. An engine forgets a flow at the latest `2 × idle timeout` (plus one expiry tick)
//! after the flow's last segment (its idle queue is lazy: an entry requeued late can wait one
//! more timeout behind fresher ones), and a closed flow sooner. So a route is forgotten only
//! when it has been idle for longer than that, measured against the newest time of the frames
//! before the current one (the engines have expired up to there), and never once the capture's
//! times have gone backwards. Routes are keyed by a 64-bit hash of the tuple: two tuples that
//! collide share a route, which is still exact (both stay on one worker while either may have
//! state). The map is bounded: when it is full of routes that may still be live, new tuples go
//! by hash from then on (a fixed function, also exact), and are not remembered.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;

use wire::{Decoded, TcpSegment};

/// Routes remembered at most (about 40 bytes each with the map's overhead: 10 MiB).
const MAX_ROUTES: usize = 1 << 18;
/// What a frame costs a worker besides its bytes, in bytes (its headers, its engine's per-frame
/// work), so that many small frames weigh more than their bytes alone.
const FRAME_COST: u64 = 64;
/// One expiry tick of packet time, and some slack.
const TICK_SLACK_NS: u64 = 3_000_000_000;

#[derive(Clone, Copy)]
struct Route {
    worker: u32,
    /// Counted in its worker's open connections: no FIN or RST seen since it opened.
    open: bool,
    last_ts: u64,
}

/// The reader's routing state for `n` workers.
pub(super) struct Router {
    hasher: foldhash::fast::FixedState,
    routes: HashMap<u64, Route, foldhash::fast::FixedState>,
    /// Bytes (plus [`FRAME_COST`] per frame) given to each worker so far.
    load: Vec<u64>,
    /// Open connections given to each worker: tuples remembered, less those closed (a FIN or
    /// RST seen, until a SYN opens the tuple again).
    conns: Vec<u64>,
    /// A route idle this long (packet time) may be forgotten.
    keep_ns: u64,
    /// The newest frame time so far.
    newest: u64,
    /// Frame times have gone backwards at least once: routes are never forgotten.
    unordered: bool,
    /// The map was full of live routes once: new tuples go by hash.
    full: bool,
}

impl Router {
    /// A router for `n` workers whose engines close connections idle for `idle_timeout_ns`.
    pub(super) fn new(n: usize, idle_timeout_ns: u64) -> Self {
        Router {
            hasher: foldhash::fast::FixedState::with_seed(0x5eed),
            routes: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0x7a11)),
            load: vec![0; n.max(1)],
            conns: vec![0; n.max(1)],
            keep_ns: idle_timeout_ns
                .saturating_mul(2)
                .saturating_add(TICK_SLACK_NS),
            newest: 0,
            unordered: false,
            full: false,
        }
    }

    /// The worker of a frame of link type `lt` captured at `ts`: its connection's for TCP (both
    /// directions alike), worker 0 for frames without TCP; `None` for an IP fragment (its
    /// connection is not known before reassembly).
    pub(super) fn route(&mut self, lt: u32, data: &[u8], ts: u64) -> Option<u32> {
        let w = if let Some((a, b, flags)) = ipv4_tcp(lt, data) {
            let h = self.v4_hash(a, b);
            self.tcp(h, ts, flags)
        } else {
            match wire::decode(lt, data) {
                Decoded::Tcp(t) => {
                    let h = self.hash(&t);
                    self.tcp(h, ts, t.flags)
                }
                Decoded::Fragment(_) => return None,
                _ => 0,
            }
        };
        if ts < self.newest {
            self.unordered = true;
        }
        self.newest = self.newest.max(ts);
        if let Some(l) = self.load.get_mut(w as usize) {
            *l += data.len() as u64 + FRAME_COST;
        }
        Some(w)
    }

    /// The hash of a decoded segment's tuple, both directions alike: [`Router::v4_hash`]'s for
    /// IPv4, so a tuple hashes alike whichever way its frames were read.
    fn hash(&self, t: &TcpSegment<'_>) -> u64 {
        match (t.src, t.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                self.v4_hash(end_key(s.to_bits(), t.sport), end_key(d.to_bits(), t.dport))
            }
            _ => {
                let a = (t.src, t.sport);
                let b = (t.dst, t.dport);
                self.hasher.hash_one(if a < b { (a, b) } else { (b, a) })
            }
        }
    }

    /// The hash of an IPv4 tuple from its two ends ([`end_key`]), both directions alike.
    fn v4_hash(&self, a: u64, b: u64) -> u64 {
        self.hasher.hash_one(if a < b { (a, b) } else { (b, a) })
    }

    /// The worker of the tuple hashed to `h`, seen at `ts` (before `self.newest` counts it) in a
    /// segment with TCP `flags`.
    fn tcp(&mut self, h: u64, ts: u64, flags: u8) -> u32 {
        let closing = flags & (TcpSegment::FIN | TcpSegment::RST) != 0;
        if let Some(r) = self.routes.get_mut(&h) {
            r.last_ts = r.last_ts.max(ts);
            // Open connections count toward balance only: a route stays whatever its state.
            let open = if closing {
                false
            } else {
                r.open || flags & TcpSegment::SYN != 0
            };
            if let Some(c) = self.conns.get_mut(r.worker as usize)
                && open != r.open
            {
                *c = if open { *c + 1 } else { c.saturating_sub(1) };
                r.open = open;
            }
            return r.worker;
        }
        let n = self.load.len() as u64;
        if self.full {
            return (h % n) as u32;
        }
        if self.routes.len() >= MAX_ROUTES && !self.sweep() {
            self.full = true;
            return (h % n) as u32;
        }
        let worker = self.least_loaded();
        if let Some(c) = self.conns.get_mut(worker as usize)
            && !closing
        {
            *c += 1;
        }
        self.routes.insert(
            h,
            Route {
                worker,
                open: !closing,
                last_ts: ts,
            },
        );
        worker
    }

    /// Forgets the routes no engine can still need; true when that freed a quarter of the map
    /// or more (else new tuples go by hash: sweeping again soon would free little).
    fn sweep(&mut self) -> bool {
        if self.unordered {
            return false;
        }
        let (newest, keep) = (self.newest, self.keep_ns);
        let conns = &mut self.conns;
        self.routes.retain(|_, r| {
            let keep = newest.saturating_sub(r.last_ts) <= keep;
            if let Some(c) = conns.get_mut(r.worker as usize)
                && !keep
                && r.open
            {
                *c = c.saturating_sub(1);
            }
            keep
        });
        self.routes.len() <= MAX_ROUTES / 4 * 3
    }

    /// The worker with the fewest open connections; on a tie the fewest bytes so far, then the
    /// first.
    fn least_loaded(&self) -> u32 {
        self.conns
            .iter()
            .zip(&self.load)
            .enumerate()
            .min_by_key(|&(w, (&c, &l))| (c, l, w))
            .map_or(0, |(w, _)| w as u32)
    }

    /// Bytes given to each worker (with [`FRAME_COST`] per frame).
    #[cfg(test)]
    fn loads(&self) -> &[u64] {
        &self.load
    }
}

/// One end of an IPv4 tuple as a number: address and port.
fn end_key(addr: u32, port: u16) -> u64 {
    u64::from(addr) << 16 | u64::from(port)
}

/// The two ends ([`end_key`]) and TCP flags of a frame that is an IPv4 TCP segment on
/// Ethernet (untagged) or raw IPv4, read straight from its bytes: the reader's common case,
/// without a full decode. Only when `wire::decode` would call it a TCP segment, with the same
/// checks; `None` for anything else (which the full decode then classifies).
fn ipv4_tcp(lt: u32, f: &[u8]) -> Option<(u64, u64, u8)> {
    let p = match lt {
        wire::linktype::ETHERNET => match f.get(12..14) {
            Some(&[0x08, 0x00]) => f.get(14..)?,
            _ => return None,
        },
        wire::linktype::RAW
        | wire::linktype::RAW_12
        | wire::linktype::RAW_14
        | wire::linktype::IPV4 => f,
        _ => return None,
    };
    let h = p.first_chunk::<20>()?;
    let ihl = usize::from(h[0] & 0x0f) * 4;
    // Version 4, no options beyond the header's bound, TCP, not a fragment.
    if h[0] >> 4 != 4 || ihl < 20 || h[9] != 6 || u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
        return None;
    }
    let total = match usize::from(u16::from_be_bytes([h[2], h[3]])) {
        0 => p.len().max(ihl),
        t => t,
    };
    let end = total.min(p.len());
    let body = p.get(ihl..end)?;
    let missing = total - end;
    let t = body.first_chunk::<20>()?;
    let doff = usize::from(t[12] >> 4) * 4;
    if doff < 20 || doff > body.len() + missing || doff > body.len() {
        return None;
    }
    let addr = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let a = end_key(addr(12), u16::from_be_bytes([t[0], t[1]]));
    let b = end_key(addr(16), u16::from_be_bytes([t[2], t[3]]));
    Some((a, b, t[13]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An Ethernet/IPv4/TCP frame from 10.0.0.`a`:`sport` to 10.0.0.`b`:`dport` with `len`
    /// payload bytes.
    fn frame(a: u8, sport: u16, b: u8, dport: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&((40 + len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, a, 10, 0, 0, b]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        f.resize(f.len() + len, b'x');
        f
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn new_connections_go_to_the_least_loaded_worker_and_stay() {
        let mut r = Router::new(2, 600 * S);
        let a = frame(1, 40000, 2, 3306, 1000);
        let a_back = frame(2, 3306, 1, 40000, 10);
        assert_eq!(r.route(1, &a, S), Some(0));
        assert_eq!(r.route(1, &a_back, S), Some(0));
        // Worker 0 has a connection: the next goes to worker 1; with one each, the third goes
        // to worker 0, given fewer bytes.
        let b = frame(1, 40001, 2, 3306, 5000);
        assert_eq!(r.route(1, &b, S), Some(1));
        let c = frame(1, 40002, 2, 3306, 10);
        assert_eq!(r.route(1, &c, S), Some(0));
        // However the load moves later, a connection keeps its worker, both ways.
        for _ in 0..10 {
            assert_eq!(r.route(1, &a, 2 * S), Some(0));
            assert_eq!(r.route(1, &frame(2, 3306, 1, 40001, 1), 2 * S), Some(1));
        }
        assert_eq!(r.route(1, &c, 3 * S), Some(0));
        let (l0, l1) = (r.loads()[0], r.loads()[1]);
        assert_eq!(l0, 11 * (1054 + FRAME_COST) + 3 * (64 + FRAME_COST));
        assert_eq!(l1, 5054 + FRAME_COST + 10 * (55 + FRAME_COST));
        // Frames without TCP go to worker 0; fragments have no worker.
        assert_eq!(r.route(1, &[0u8; 20], 3 * S), Some(0));
        let mut frag = frame(1, 40003, 2, 3306, 12);
        frag[20] = 0x20; // more fragments
        assert_eq!(r.route(1, &frag, 3 * S), None);
    }

    #[test]
    fn connections_opened_together_split_evenly_whatever_their_early_bytes() {
        // The first connection sends a lot before the others open (as a benchmark client's
        // first connection does): by bytes, all the later ones would go to worker 1.
        let mut r = Router::new(2, 600 * S);
        assert_eq!(r.route(1, &frame(1, 40000, 2, 6379, 60_000), S), Some(0));
        let mut per = [0u32; 2];
        per[0] += 1;
        for port in 40001..40050u16 {
            let w = r.route(1, &frame(1, port, 2, 6379, 100), S).unwrap();
            per[w as usize] += 1;
        }
        assert_eq!(per, [25, 25]);
    }

    /// A frame with TCP `flags` from 10.0.0.1:`sport` to 10.0.0.2:5432, `len` payload bytes.
    fn flagged(sport: u16, flags: u8, len: usize) -> Vec<u8> {
        let mut f = frame(1, sport, 2, 5432, len);
        f[47] = flags;
        f
    }

    #[test]
    fn closed_connections_do_not_count_and_a_syn_counts_a_tuple_again() {
        let mut r = Router::new(2, 600 * S);
        let (syn, fin, rst, ack) = (0x02, 0x11, 0x04, 0x10);
        // A short connection first (pgbench's check), closed before the clients open.
        assert_eq!(r.route(1, &flagged(40000, syn, 0), S), Some(0));
        assert_eq!(r.route(1, &flagged(40000, ack, 3000), S), Some(0));
        assert_eq!(r.route(1, &flagged(40000, fin, 0), S), Some(0));
        assert_eq!(r.conns, [0, 0]);
        // Four busy clients: two on each worker (by connections given, three would go to 1).
        let mut per = [0u32; 2];
        for port in 40001..40005u16 {
            let w = r.route(1, &flagged(port, syn, 0), S).unwrap();
            assert_eq!(r.route(1, &flagged(port, ack, 100), S), Some(w));
            per[w as usize] += 1;
        }
        assert_eq!(per, [2, 2]);
        // A reset closes; a FIN after it does not close twice; the tuple keeps its worker and
        // counts again from its next SYN.
        let w = r.route(1, &flagged(40001, rst, 0), S).unwrap() as usize;
        assert_eq!(r.route(1, &flagged(40001, fin, 0), S), Some(w as u32));
        assert_eq!(r.conns[w], 1);
        assert_eq!(r.route(1, &flagged(40001, syn, 0), 2 * S), Some(w as u32));
        assert_eq!(r.conns[w], 2);
        // A tuple first seen closing is not counted.
        assert!(r.route(1, &flagged(40009, fin, 0), 2 * S).is_some());
        assert_eq!(r.conns, [2, 2]);
    }

    /// Fills the map with `MAX_ROUTES` tuples, the first at `t0`, all others at `t1`.
    fn fill(r: &mut Router, t0: u64, t1: u64) {
        for i in 0..MAX_ROUTES {
            let f = frame(1, (i % 60000) as u16, 2 + (i / 60000) as u8, 3306, 0);
            assert!(r.route(1, &f, if i == 0 { t0 } else { t1 }).is_some());
        }
        assert_eq!(r.routes.len(), MAX_ROUTES);
    }

    #[test]
    fn a_full_map_forgets_only_routes_idle_past_any_engine_and_then_hashes() {
        let idle = 10 * S;
        let mut r = Router::new(2, idle);
        fill(&mut r, S, 2 * S);
        // Nothing is idle long enough: every route stays, and new tuples go by hash for good.
        let late = 2 * S + r.keep_ns;
        let f = frame(9, 1, 9, 3306, 0);
        let h = r.v4_hash(end_key(0x0a00_0009, 1), end_key(0x0a00_0009, 3306));
        assert_eq!(r.route(1, &f, late), Some((h % 2) as u32));
        assert!(r.full);
        assert_eq!(r.routes.len(), MAX_ROUTES);
        // The first tuple is remembered: it keeps its worker whatever the time.
        let first = frame(1, 0, 2, 3306, 0);
        assert_eq!(r.route(1, &first, late + 100 * idle), Some(0));
    }

    #[test]
    fn routes_are_forgotten_only_by_the_time_of_earlier_frames_and_in_order() {
        let idle = 10 * S;
        let mut r = Router::new(2, idle);
        fill(&mut r, S, S);
        // The newest time before this frame is S: no route may be forgotten, whatever this
        // frame's own time (the engines have not expired up to it yet).
        let jump = frame(9, 2, 9, 3306, 0);
        assert!(r.route(1, &jump, S + 100 * idle).is_some());
        assert!(r.full);
        let mut r = Router::new(2, idle);
        fill(&mut r, S, S);
        // A frame past the bound (of a remembered tuple), then a new tuple: the map is swept
        // and the new tuple remembered.
        let t = S + r.keep_ns + 1;
        assert_eq!(r.route(1, &frame(1, 0, 2, 3306, 0), t), Some(0));
        assert!(r.route(1, &frame(9, 3, 9, 3306, 0), t).is_some());
        assert!(!r.full);
        assert_eq!(r.routes.len(), 2);
        // Times that went backwards once: never swept.
        let mut r = Router::new(2, idle);
        fill(&mut r, 2 * S, S);
        let t = 2 * S + 10 * r.keep_ns;
        assert_eq!(r.route(1, &frame(1, 0, 2, 3306, 0), t), Some(0));
        assert!(r.route(1, &frame(9, 4, 9, 3306, 0), t).is_some());
        assert!(r.full);
    }

    /// Frames of any bytes behind an Ethernet/IPv4/TCP start (cut, with options, fragment
    /// bits, odd lengths), on every link type the fast path reads.
    fn near_tcp_frame() -> impl Strategy<Value = (u32, Vec<u8>)> {
        let lt = prop::sample::select(vec![
            wire::linktype::ETHERNET,
            wire::linktype::RAW,
            wire::linktype::IPV4,
            wire::linktype::LINUX_SLL,
        ]);
        let edits = prop::collection::vec((0usize..80, any::<u8>()), 0..6);
        (lt, 0usize..200, edits, 0usize..90).prop_map(|(lt, len, edits, cut)| {
            let mut f = frame(1, 40000, 2, 3306, len);
            for (i, b) in edits {
                if let Some(x) = f.get_mut(i) {
                    *x = b;
                }
            }
            if lt != wire::linktype::ETHERNET {
                f.drain(..14);
            }
            f.truncate(f.len().saturating_sub(cut));
            (lt, f)
        })
    }

    proptest! {
        /// The fast path takes exactly the frames the full decode calls IPv4 TCP segments, and
        /// keys them as the full decode's tuple is keyed.
        #[test]
        fn the_fast_path_agrees_with_the_full_decode((lt, f) in near_tcp_frame()) {
            let r = Router::new(2, S);
            match (ipv4_tcp(lt, &f), wire::decode(lt, &f)) {
                (Some((a, b, flags)), Decoded::Tcp(t)) => {
                    prop_assert_eq!(r.v4_hash(a, b), r.hash(&t));
                    prop_assert_eq!(flags, t.flags);
                }
                (None, Decoded::Tcp(t)) => {
                    // Only link types or frames the fast path leaves to the full decode.
                    let plain_eth = lt == wire::linktype::ETHERNET && f.get(12..14) == Some(&[8, 0]);
                    let raw = lt != wire::linktype::ETHERNET && lt != wire::linktype::LINUX_SLL;
                    prop_assert!(!(plain_eth || raw) || !t.src.is_ipv4(), "missed {:?}", t);
                }
                (Some(_), other) => prop_assert!(false, "fast path took {other:?}"),
                (None, _) => {}
            }
        }
    }
}
