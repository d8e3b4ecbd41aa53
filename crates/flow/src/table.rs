//! The flow table: finds each segment's connection with one hash lookup, decides who is the
//! server, and drives reassembly and the connection lifecycle (open, FIN/RST, idle expiry,
//! eviction, reuse of a 4-tuple).
//!
//! Idle expiry and eviction use a lazy queue instead of touching a list on every segment: each
//! live connection has one entry stamped with its activity time when the entry was (re)queued.
//! When an entry reaches the front, a connection that was active since is requeued with its
//! newer time; one that was not is the least recently active. Recently closed connections
//! (tombstones) have a queue of their own. Stale entries are compacted away, so the queues stay
//! within a constant factor of the table.

use std::collections::VecDeque;
use std::net::SocketAddr;

use hashbrown::HashMap;

use crate::key::{Endpoint, FlowKey};
use crate::reasm::{Ctx, Half, Stop};
use crate::tcp_flags::{ACK, FIN, RST, SYN};
use crate::{Dir, FlowConfig, FlowStats, Handler, Segment};

type Map = HashMap<FlowKey, Flow, foldhash::fast::RandomState>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reassembled and delivered.
    Tracking,
    /// Recognized but not reassembled: the handler declined it in `open` or stopped it in `data`.
    Passive,
    /// Closed by FIN or RST; kept a while so that late segments are recognized.
    Closed,
}

struct Flow {
    id: u64,
    last_ts: u64,
    state: State,
    /// `open` returned true: a `close` is owed.
    accepted: bool,
    /// Whether the client is the `lo` end of the key.
    client_is_lo: bool,
    /// Indexed by [`Dir::index`]: bytes to the server, bytes to the client.
    halves: [Half; 2],
}

impl Flow {
    fn dir_of(&self, src_is_lo: bool) -> Dir {
        if src_is_lo == self.client_is_lo {
            Dir::ToServer
        } else {
            Dir::ToClient
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum End {
    Fin,
    Rst,
    Idle,
    Evicted,
    Reused,
    Finish,
}

struct QEntry {
    stamp: u64,
    id: u64,
    key: FlowKey,
}

/// A set of ports as a 65 536-bit map.
struct PortSet(Box<[u64; 1024]>);

impl PortSet {
    fn new(ports: &[u16]) -> Self {
        let mut bits = Box::new([0u64; 1024]);
        for &p in ports {
            bits[usize::from(p >> 6)] |= 1 << (p & 63);
        }
        PortSet(bits)
    }

    fn contains(&self, p: u16) -> bool {
        (self.0[usize::from(p >> 6)] >> (p & 63)) & 1 != 0
    }
}

/// Everything but the map, so that a flow borrowed from the map and the rest can be used
/// together.
struct Core {
    cfg: FlowConfig,
    ports: PortSet,
    stats: FlowStats,
    /// Out-of-order bytes charged across all connections.
    total: usize,
    next_id: u64,
    /// One entry per Tracking/Passive flow (plus stale ones), oldest activity first.
    live: VecDeque<QEntry>,
    /// One entry per Closed flow (plus stale ones), oldest close first.
    dead: VecDeque<QEntry>,
}

/// The connections of a capture, keyed by their normalized 4-tuple.
pub struct FlowTable {
    map: Map,
    core: Core,
}

impl FlowTable {
    pub fn new(cfg: FlowConfig) -> Self {
        let ports = PortSet::new(&cfg.server_ports);
        FlowTable {
            map: Map::with_hasher(foldhash::fast::RandomState::default()),
            core: Core {
                cfg,
                ports,
                stats: FlowStats::default(),
                total: 0,
                next_id: 1,
                live: VecDeque::new(),
                dead: VecDeque::new(),
            },
        }
    }

    /// Feeds one segment.
    pub fn process<H: Handler>(&mut self, seg: &Segment<'_>, h: &mut H) {
        self.process_inner(seg, h);
        self.maybe_compact();
    }

    fn process_inner<H: Handler>(&mut self, seg: &Segment<'_>, h: &mut H) {
        let c = &mut self.core;
        c.stats.segments += 1;
        c.stats.payload_bytes += seg.payload.len() as u64;
        let (key, src_is_lo) = FlowKey::new(seg.src, seg.dst);
        if let Some(flow) = self.map.get_mut(&key) {
            flow.last_ts = flow.last_ts.max(seg.ts_ns);
            let dir = flow.dir_of(src_is_lo);
            let reopen = match flow.state {
                // A SYN or SYN+ACK after a close, unless it retransmits this connection's.
                State::Closed => {
                    seg.flags & SYN != 0 && flow.halves[dir.index()].isn() != Some(seg.seq)
                }
                // A SYN that is not a retransmission of this connection's SYN: a new connection
                // (we missed the end of the old one).
                _ => {
                    seg.flags & (SYN | ACK) == SYN
                        && !(dir == Dir::ToServer && flow.halves[0].isn() == Some(seg.seq))
                }
            };
            if !reopen {
                c.segment(flow, key, dir, seg, h);
                return;
            }
            let Some(client_is_src) = c.orient(seg) else {
                c.not_tracked(seg, false);
                return;
            };
            c.end(flow, End::Reused, seg.ts_ns, h);
            *flow = c.open(seg, src_is_lo, client_is_src, h);
            c.live.push_back(QEntry {
                stamp: flow.last_ts,
                id: flow.id,
                key,
            });
            let dir = flow.dir_of(src_is_lo);
            c.segment(flow, key, dir, seg, h);
            return;
        }
        let Some(client_is_src) = c.orient(seg) else {
            c.not_tracked(seg, false);
            return;
        };
        if self.map.len() >= c.cfg.max_flows {
            make_room(&mut self.map, c, seg.ts_ns, h);
            if self.map.len() >= c.cfg.max_flows {
                c.not_tracked(seg, false);
                return;
            }
        }
        let flow = c.open(seg, src_is_lo, client_is_src, h);
        c.live.push_back(QEntry {
            stamp: flow.last_ts,
            id: flow.id,
            key,
        });
        let flow = self.map.entry(key).or_insert(flow);
        let dir = flow.dir_of(src_is_lo);
        c.segment(flow, key, dir, seg, h);
    }

    /// Closes connections idle longer than the timeout (call every ~second of capture time), and
    /// forgets connections closed longer ago than [`FlowConfig::closed_linger_ns`].
    pub fn expire<H: Handler>(&mut self, now_ns: u64, h: &mut H) {
        let c = &mut self.core;
        let linger = c.cfg.closed_linger_ns.min(c.cfg.idle_timeout_ns);
        while c
            .dead
            .front()
            .is_some_and(|e| now_ns.saturating_sub(e.stamp) > linger)
        {
            let Some(e) = c.dead.pop_front() else { break };
            if self
                .map
                .get(&e.key)
                .is_some_and(|f| f.id == e.id && f.state == State::Closed)
            {
                self.map.remove(&e.key);
            }
        }
        let timeout = c.cfg.idle_timeout_ns;
        while c
            .live
            .front()
            .is_some_and(|e| now_ns.saturating_sub(e.stamp) > timeout)
        {
            let Some(mut e) = c.live.pop_front() else {
                break;
            };
            let Some(f) = self.map.get_mut(&e.key) else {
                continue;
            };
            if f.id != e.id || f.state == State::Closed {
                continue;
            }
            if now_ns.saturating_sub(f.last_ts) > timeout {
                c.end(f, End::Idle, now_ns, h);
                self.map.remove(&e.key);
            } else {
                // Active since it was queued: requeue with its latest activity, which is recent
                // enough that this loop does not meet it again.
                e.stamp = f.last_ts;
                c.live.push_back(e);
            }
        }
    }

    /// End of input: delivers what can be delivered (declaring gaps for holes) and closes every
    /// connection, in the order they were opened.
    pub fn finish<H: Handler>(&mut self, h: &mut H) {
        let mut open: Vec<(u64, FlowKey)> = self
            .map
            .iter()
            .filter(|(_, f)| f.state != State::Closed)
            .map(|(k, f)| (f.id, *k))
            .collect();
        open.sort_unstable_by_key(|&(id, _)| id);
        for (_, k) in open {
            if let Some(f) = self.map.get_mut(&k) {
                let ts = f.last_ts;
                self.core.end(f, End::Finish, ts, h);
            }
        }
        self.map.clear();
        self.core.live.clear();
        self.core.dead.clear();
        self.core.total = 0;
    }

    pub fn stats(&self) -> &FlowStats {
        &self.core.stats
    }

    pub fn config(&self) -> &FlowConfig {
        &self.core.cfg
    }

    /// Entries in the table: open, ignored and recently closed connections.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Out-of-order bytes held now, as charged against [`FlowConfig::max_buffer_total`].
    pub fn buffered_bytes(&self) -> usize {
        self.core.total
    }

    /// Drops queue entries of connections that are gone, once they outnumber the live ones.
    fn maybe_compact(&mut self) {
        let limit = 2 * self.map.len() + 1024;
        let map = &self.map;
        if self.core.live.len() > limit {
            self.core.live.retain(|e| {
                map.get(&e.key)
                    .is_some_and(|f| f.id == e.id && f.state != State::Closed)
            });
        }
        if self.core.dead.len() > limit {
            self.core.dead.retain(|e| {
                map.get(&e.key)
                    .is_some_and(|f| f.id == e.id && f.state == State::Closed)
            });
        }
    }
}

/// A SYN (or SYN+ACK) from the `this` side: both streams' starting points.
fn note_syn(this: &mut Half, other: &mut Half, seg: &Segment<'_>) {
    this.syn(seg.seq);
    if seg.flags & ACK != 0 {
        other.syn_acked(seg.ack);
    }
}

/// Frees one entry or more until the table is below `max_flows`: the oldest tombstones first,
/// then the least recently active connections.
fn make_room<H: Handler>(map: &mut Map, c: &mut Core, ts: u64, h: &mut H) {
    while map.len() >= c.cfg.max_flows {
        if let Some(e) = c.dead.pop_front() {
            if map
                .get(&e.key)
                .is_some_and(|f| f.id == e.id && f.state == State::Closed)
            {
                map.remove(&e.key);
            }
            continue;
        }
        let Some(mut e) = c.live.pop_front() else {
            return;
        };
        let Some(f) = map.get_mut(&e.key) else {
            continue;
        };
        if f.id != e.id || f.state == State::Closed {
            continue;
        }
        if f.last_ts > e.stamp {
            e.stamp = f.last_ts;
            c.live.push_back(e);
            continue;
        }
        c.end(f, End::Evicted, ts, h);
        map.remove(&e.key);
    }
}

impl Core {
    fn cx<'a, H>(&'a mut self, h: &'a mut H, id: u64) -> Ctx<'a, H> {
        Ctx {
            h,
            stats: &mut self.stats,
            total: &mut self.total,
            max_dir: self.cfg.max_buffer_per_direction,
            max_total: self.cfg.max_buffer_total,
            id,
        }
    }

    fn explicit(&self, a: SocketAddr) -> bool {
        self.cfg
            .servers
            .iter()
            .any(|s| s.ip() == a.ip() && (s.port() == 0 || s.port() == a.port()))
    }

    fn is_server(&self, a: SocketAddr) -> bool {
        self.ports.contains(a.port()) || self.explicit(a)
    }

    /// Whether a segment of an unknown flow opens a connection, and if so whether its source is
    /// the client. See the crate docs for the rules.
    fn orient(&self, seg: &Segment<'_>) -> Option<bool> {
        let f = seg.flags;
        if f & RST != 0 {
            return None;
        }
        if f & SYN != 0 {
            let client_is_src = f & ACK == 0;
            let server = if client_is_src { seg.dst } else { seg.src };
            return (self.cfg.track_unknown_with_syn || self.is_server(server))
                .then_some(client_is_src);
        }
        if seg.payload.is_empty() && seg.missing == 0 {
            return None;
        }
        let (es, ed) = (self.explicit(seg.src), self.explicit(seg.dst));
        if es != ed {
            return Some(ed);
        }
        if !es {
            let (ps, pd) = (
                self.ports.contains(seg.src.port()),
                self.ports.contains(seg.dst.port()),
            );
            if ps != pd {
                return Some(pd);
            }
            if !ps {
                return None;
            }
        }
        // Both ends could be the server: the lower port is, then the lower address.
        let (s, d) = (Endpoint::from(seg.src), Endpoint::from(seg.dst));
        Some((d.port, d.ip) < (s.port, s.ip))
    }

    fn open<H: Handler>(
        &mut self,
        seg: &Segment<'_>,
        src_is_lo: bool,
        client_is_src: bool,
        h: &mut H,
    ) -> Flow {
        let id = self.next_id;
        self.next_id += 1;
        let (client, server) = if client_is_src {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        let accepted = h.open(id, client, server, seg.flags & SYN != 0, seg.ts_ns);
        if accepted {
            self.stats.connections += 1;
        } else {
            self.stats.rejected += 1;
        }
        let mut flow = Flow {
            id,
            last_ts: seg.ts_ns,
            state: if accepted {
                State::Tracking
            } else {
                State::Passive
            },
            accepted,
            client_is_lo: client_is_src == src_is_lo,
            halves: Default::default(),
        };
        // Remembered even when not reassembled, so that a retransmitted SYN is recognized.
        if seg.flags & SYN != 0 {
            let dir = flow.dir_of(src_is_lo);
            let [to_server, to_client] = &mut flow.halves;
            match dir {
                Dir::ToServer => note_syn(to_server, to_client, seg),
                Dir::ToClient => note_syn(to_client, to_server, seg),
            }
        }
        flow
    }

    /// Counts a segment that is not reassembled: of a connection the handler stopped reading
    /// (`stopped`), else empty (a pure ACK, FIN or RST: nothing lost) or with payload.
    fn not_tracked(&mut self, seg: &Segment<'_>, stopped: bool) {
        self.stats.not_tracked += 1;
        if stopped {
            self.stats.not_tracked_stopped += 1;
        } else if seg.payload.is_empty() && seg.missing == 0 {
            self.stats.not_tracked_empty += 1;
        } else {
            let port = seg.src.port().min(seg.dst.port());
            let ports = &mut self.stats.untracked_ports;
            if ports.len() < crate::MAX_UNTRACKED_PORTS || ports.contains_key(&port) {
                *ports.entry(port).or_default() += 1;
            }
        }
    }

    /// A segment of a known flow (not a reopening SYN).
    fn segment<H: Handler>(
        &mut self,
        flow: &mut Flow,
        key: FlowKey,
        dir: Dir,
        seg: &Segment<'_>,
        h: &mut H,
    ) {
        let closed = match flow.state {
            State::Closed => {
                self.stats.late += 1;
                false
            }
            State::Passive => {
                // Accepted then passive: the handler stopped reading it.
                self.not_tracked(seg, flow.accepted);
                self.passive(flow, dir, seg, h)
            }
            State::Tracking => match self.reassemble(flow, dir, seg, h) {
                Ok(None) => false,
                Ok(Some(why)) => {
                    self.end(flow, why, seg.ts_ns, h);
                    true
                }
                Err(Stop) => {
                    self.stats.stopped += 1;
                    for half in &mut flow.halves {
                        half.discard(&mut self.total);
                    }
                    flow.state = State::Passive;
                    self.passive(flow, dir, seg, h)
                }
            },
        };
        if closed {
            self.dead.push_back(QEntry {
                stamp: flow.last_ts,
                id: flow.id,
                key,
            });
        }
    }

    /// FIN/RST bookkeeping of a connection that is not reassembled. True when it closed.
    fn passive<H: Handler>(
        &mut self,
        flow: &mut Flow,
        dir: Dir,
        seg: &Segment<'_>,
        h: &mut H,
    ) -> bool {
        let why = if seg.flags & RST != 0 {
            Some(End::Rst)
        } else if seg.flags & FIN != 0 {
            flow.halves[dir.index()].mark_fin(0);
            (flow.halves[0].has_fin() && flow.halves[1].has_fin()).then_some(End::Fin)
        } else {
            None
        };
        if let Some(why) = why {
            self.end(flow, why, seg.ts_ns, h);
        }
        why.is_some()
    }

    /// Reassembles one segment; says whether the connection is over.
    fn reassemble<H: Handler>(
        &mut self,
        flow: &mut Flow,
        dir: Dir,
        seg: &Segment<'_>,
        h: &mut H,
    ) -> Result<Option<End>, Stop> {
        let ts = seg.ts_ns;
        let mut cx = self.cx(h, flow.id);
        let [to_server, to_client] = &mut flow.halves;
        let (this, other) = match dir {
            Dir::ToServer => (to_server, to_client),
            Dir::ToClient => (to_client, to_server),
        };
        // The peer's acknowledgment first: it received those bytes before sending this segment.
        if seg.flags & ACK != 0 {
            other.ack(dir.reverse(), seg.ack, ts, &mut cx)?;
        }
        if seg.flags & RST != 0 {
            return Ok(Some(End::Rst));
        }
        let mut seq = seg.seq;
        if seg.flags & SYN != 0 {
            note_syn(this, other, seg);
            seq = seq.wrapping_add(1);
        }
        this.segment(
            dir,
            seq,
            seg.payload,
            seg.missing,
            seg.flags & FIN != 0,
            ts,
            &mut cx,
        )?;
        Ok((flow.halves[0].fin_reached() && flow.halves[1].fin_reached()).then_some(End::Fin))
    }

    /// Ends a connection: flushes what is held (holes become gaps), calls `close` if owed.
    fn end<H: Handler>(&mut self, flow: &mut Flow, why: End, ts: u64, h: &mut H) {
        if flow.state == State::Closed {
            return;
        }
        if flow.state == State::Tracking {
            let mut cx = self.cx(h, flow.id);
            let [to_server, to_client] = &mut flow.halves;
            // A handler that says stop while flushing gets nothing more.
            if to_server.flush(Dir::ToServer, ts, &mut cx).is_ok() {
                let _ = to_client.flush(Dir::ToClient, ts, &mut cx);
            }
        }
        for half in &mut flow.halves {
            half.discard(&mut self.total);
        }
        if flow.accepted {
            h.close(flow.id, ts);
            let s = &mut self.stats;
            match why {
                End::Fin => s.closed_fin += 1,
                End::Rst => s.closed_rst += 1,
                End::Idle => s.closed_idle += 1,
                End::Evicted => s.evicted += 1,
                End::Reused => s.closed_reused += 1,
                End::Finish => s.closed_finish += 1,
            }
        }
        flow.state = State::Closed;
    }
}
