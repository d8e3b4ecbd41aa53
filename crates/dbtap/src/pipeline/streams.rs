//! The stream entry of the pipeline: connections that arrive as ordered bytes per direction
//! with exact gaps (the eBPF source, and the `--write` files it leaves), not as packets. A
//! record goes through [`stream::Reassembler`] (stream offsets become data and exact gaps) and
//! then into the same per-connection sessions as TCP, through the same [`Conns`] methods, so
//! service time, the health ledger and every consumer treat both alike.

use std::collections::HashMap;

use proto::{ConnMeta, Direction};
use report::StreamHealth;
use stream::{Reassembler, Record, StreamHandler, StreamOpen};

use super::{Conns, Consumer, Engine};
use flow::{Dir, Handler};

/// Stream connections get pipeline ids from here up, apart from the flow table's.
pub(super) const FIRST_ID: u64 = 1 << 62;
/// Socket streams open at once; beyond it the least recently active is closed and counted.
pub(super) const MAX_STREAMS: usize = 100_000;

/// The stream side of an engine.
pub(super) struct Streams {
    reasm: Reassembler,
    state: State,
}

#[derive(Default)]
struct State {
    /// The source's connection key → this connection (keys are reused by the kernel: a new
    /// open gets a new id).
    conns: HashMap<u64, StreamConn, foldhash::fast::RandomState>,
    next_id: u64,
    /// True once any stream record arrived (the health then has a stream section).
    seen: bool,
    connections: u64,
    /// Holes of lost bytes delivered to sessions (not the cut tails of long messages).
    gaps: u64,
    bad_records: u64,
}

struct StreamConn {
    id: u64,
    server: proto::Endpoint,
    /// Until the first bytes arrive: the session opens then (knowing whether TLS came first).
    pending: Option<ConnMeta>,
    /// The session stopped reading (TLS it cannot see, or nothing more to learn).
    stopped: bool,
}

impl Streams {
    pub(super) fn new() -> Streams {
        Streams {
            reasm: Reassembler::new(MAX_STREAMS),
            state: State {
                next_id: FIRST_ID,
                ..State::default()
            },
        }
    }

    /// The stream section of the health ledger; `None` when no stream record was read.
    pub(super) fn health(&self) -> Option<StreamHealth> {
        let s = &self.state;
        if !s.seen {
            return None;
        }
        let r = self.reasm.stats();
        Some(StreamHealth {
            stream_connections: s.connections,
            stream_bytes: r.data_bytes,
            stream_tls_connections: r.tls_starts,
            stream_gaps: s.gaps,
            stream_gap_bytes: r.gap_lost_bytes,
            stream_uncopied_bytes: r.gap_truncated_bytes,
            stream_duplicate_bytes: r.duplicate_bytes,
            stream_connections_evicted: r.evicted,
            stream_bad_records: s.bad_records + r.unknown_conn_records,
            ..StreamHealth::default()
        })
    }

    /// Connections open now.
    #[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
    pub(super) fn open_connections(&self) -> usize {
        self.state.conns.len()
    }
}

impl<C: Consumer> Engine<C> {
    /// One record of a stream source (the eBPF tracer, or a `--write` file of it).
    pub fn stream_record(&mut self, r: &Record<'_>) {
        self.note_time(r.ts_ns());
        let Streams { reasm, state } = &mut self.streams;
        state.seen = true;
        let lost = reasm.stats().gap_lost_bytes;
        let mut h = Feed {
            conns: &mut self.conns,
            state,
        };
        reasm.push(r, &mut h);
        if reasm.stats().gap_lost_bytes > lost {
            self.streams.state.gaps += 1;
        }
    }

    /// A frame of a stream file (link type [`stream::LINKTYPE`]): one encoded record.
    pub(super) fn stream_frame(&mut self, data: &[u8], ts: u64) {
        match stream::decode(data) {
            Ok(r) => self.stream_record(&r),
            Err(_) => {
                self.note_time(ts);
                self.streams.state.seen = true;
                self.streams.state.bad_records += 1;
            }
        }
    }

    /// Closes every stream connection (the end of the source).
    pub(super) fn finish_streams(&mut self, ts_ns: u64) {
        let Streams { reasm, state } = &mut self.streams;
        let mut h = Feed {
            conns: &mut self.conns,
            state,
        };
        reasm.finish(ts_ns, &mut h);
    }
}

/// The reassembler's handler: stream events into the connection sessions.
struct Feed<'a, C> {
    conns: &'a mut Conns<C>,
    state: &'a mut State,
}

fn dir(d: Direction) -> Dir {
    match d {
        Direction::ToServer => Dir::ToServer,
        Direction::ToClient => Dir::ToClient,
    }
}

impl<C: Consumer> Feed<'_, C> {
    /// The connection's id, its session opened if this is its first delivery.
    fn started(&mut self, conn: u64) -> Option<u64> {
        let c = self.state.conns.get_mut(&conn)?;
        if let Some(meta) = c.pending.take() {
            // Counted when its first bytes arrive: the source may announce sockets that never
            // carry anything it reports (plaintext TCP left to the packets under `auto`).
            self.state.connections += 1;
            self.conns.open_meta(meta);
        }
        Some(c.id)
    }
}

impl<C: Consumer> StreamHandler for Feed<'_, C> {
    fn open(&mut self, o: &StreamOpen) {
        let id = self.state.next_id;
        self.state.next_id += 1;
        let meta = ConnMeta {
            id,
            client: o.client.clone(),
            server: o.server.clone(),
            saw_open: o.saw_open,
            peer: o.peer.clone(),
            after_tls: false,
        };
        let c = StreamConn {
            id,
            server: o.server.clone(),
            pending: Some(meta),
            stopped: false,
        };
        if let Some(old) = self.state.conns.insert(o.conn, c) {
            // The source reused a key without closing it first: the old stream ended.
            if old.pending.is_none() {
                self.conns.close(old.id, o.ts_ns);
            }
        }
    }

    fn data(&mut self, conn: u64, d: Direction, bytes: &[u8], ts_ns: u64) {
        // `started`, with the one lookup kept for the rest (the per-record path).
        let State {
            conns, connections, ..
        } = &mut *self.state;
        let Some(c) = conns.get_mut(&conn) else {
            return;
        };
        if let Some(meta) = c.pending.take() {
            *connections += 1;
            self.conns.open_meta(meta);
        }
        let id = c.id;
        self.conns
            .consumer
            .stream_bytes(&c.server, d == Direction::ToServer, bytes.len());
        if c.stopped {
            return;
        }
        if !self.conns.data(id, dir(d), bytes, ts_ns) {
            c.stopped = true;
        }
    }

    fn gap(&mut self, conn: u64, d: Direction, len: u64, ts_ns: u64) {
        let Some(id) = self.started(conn) else {
            return;
        };
        if self.state.conns.get(&conn).is_some_and(|c| !c.stopped) {
            self.conns.gap(id, dir(d), len, ts_ns);
        }
    }

    fn start_tls(&mut self, conn: u64, _ts_ns: u64) {
        let Some(c) = self.state.conns.get_mut(&conn) else {
            return;
        };
        if let Some(meta) = &mut c.pending {
            // Nothing delivered yet (a stream that starts inside TLS): the session opens with
            // the first bytes, after TLS.
            meta.after_tls = true;
            return;
        }
        // The session reads on (and uncounts the connection as encrypted at its next call),
        // or its bytes are not read further.
        c.stopped = !self.conns.start_tls(c.id);
    }

    fn close(&mut self, conn: u64, ts_ns: u64) {
        if let Some(c) = self.state.conns.remove(&conn)
            && c.pending.is_none()
        {
            self.conns.close(c.id, ts_ns);
        }
    }
}
