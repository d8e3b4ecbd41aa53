//! Flow table and TCP reassembly: turns decoded TCP segments into ordered bytes and gaps per
//! connection and direction, with bounded buffers and duplicate/retransmission accounting.
//!
//! The core is a plain synchronous state machine: no IO, no clock (all time comes from
//! [`Segment::ts_ns`]), no `unsafe`, and no input makes it panic. Whatever the input (floods of
//! unrelated flows, endless holes, garbage sequence numbers), memory stays bounded by
//! [`FlowConfig::max_flows`] and the buffer caps.
//!
//! # Orientation: who is the server
//!
//! A connection is tracked only when dbtap knows which end is the server:
//!
//! 1. a SYN without ACK says its destination is the server, a SYN+ACK says its source is; the
//!    server so designated must match [`FlowConfig::server_ports`] or [`FlowConfig::servers`],
//!    unless [`FlowConfig::track_unknown_with_syn`] is set;
//! 2. otherwise (capture began mid-connection) an endpoint listed in `servers` is the server; if
//!    both or neither are listed, an endpoint whose port is in `server_ports` is; if both ports
//!    match, the lower port is the server, and with equal ports the lower address;
//! 3. otherwise the segment is not tracked (counted in [`FlowStats::not_tracked`]).
//!
//! A segment without SYN, payload or missing bytes (a pure ACK, FIN or RST) never opens a
//! connection on its own.
//!
//! # Reassembly
//!
//! Per direction the flow keeps the next expected sequence number (32-bit wrap-around
//! arithmetic). Bytes at it are handed to [`Handler::data`] straight from the segment, without a
//! copy. Bytes before it are duplicates or retransmissions (counted, trimmed), or, when they fall
//! in a stretch already declared a gap, segments that came too late (counted apart: they were
//! never delivered, and their loss is already counted). Bytes after it are
//! copied into a bounded out-of-order buffer and released when the hole fills. A hole becomes a
//! [`Handler::gap`] when the peer acknowledges bytes the capture never showed (the peer got them,
//! they will not be sent again), when a buffer cap is hit, or when the connection ends. A segment
//! more than 1 GiB (the largest TCP window) away from the expected position is a resynchronization:
//! the distance is reported as a gap and the stream continues from it.
//!
//! The handler sees, per connection: one `open`, then `data`/`gap` events whose lengths add up to
//! the stream as sent, then exactly one `close` (only for connections whose `open` returned true).

#![forbid(unsafe_code)]

use std::net::SocketAddr;

mod key;
mod reasm;
mod seq;
mod table;

pub use reasm::PIECE_OVERHEAD;
pub use table::FlowTable;

/// Which way bytes travel on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Client to server: requests.
    ToServer,
    /// Server to client: responses.
    ToClient,
}

impl Dir {
    /// The opposite direction.
    pub fn reverse(self) -> Dir {
        match self {
            Dir::ToServer => Dir::ToClient,
            Dir::ToClient => Dir::ToServer,
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Dir::ToServer => 0,
            Dir::ToClient => 1,
        }
    }
}

/// TCP flag bits as they appear in the header's flags byte.
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// One TCP segment as decoded from a packet.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// Capture timestamp, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    /// See [`tcp_flags`].
    pub flags: u8,
    pub payload: &'a [u8],
    /// Payload bytes cut off by the capture snaplen (they exist on the wire but not here): the flow
    /// reports them as a gap after the captured part.
    pub missing: u32,
}

/// The default of [`FlowConfig::max_flows`]. A tracked connection costs about 3 KB with its
/// protocol session in the binary (measured peak RSS per connection: 2.6 KB MongoDB to 3.2 KB
/// Redis), so 50,000 of them stay under 170 MB whatever the input.
pub const DEFAULT_MAX_FLOWS: usize = 50_000;

/// Ports [`FlowStats::untracked_ports`] remembers at most.
pub const MAX_UNTRACKED_PORTS: usize = 16;

/// What the flow table tracks and how much it may hold.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    /// Ports that identify a server, e.g. `[3306]`.
    pub server_ports: Vec<u16>,
    /// Explicit servers (`--server HOST:PORT`); port 0 means every port of that host.
    pub servers: Vec<SocketAddr>,
    /// Track flows whose ports match nothing when their SYN/SYN-ACK shows who the server is, so the
    /// handler can sniff the protocol from the first bytes.
    pub track_unknown_with_syn: bool,
    /// Out-of-order bytes held per direction (default 4 MiB). Each held piece is charged its bytes
    /// plus [`PIECE_OVERHEAD`].
    pub max_buffer_per_direction: usize,
    /// Global cap on held out-of-order bytes (default 128 MiB, so that with the other bounds a digest
    /// stays under about 256 MB whatever the input). When a segment would exceed it, the
    /// direction receiving that segment gives up its holes first.
    pub max_buffer_total: usize,
    /// Connections idle longer than this (capture time) are closed by [`FlowTable::expire`]
    /// (default 10 min).
    pub idle_timeout_ns: u64,
    /// Entries kept in the table at most (default [`DEFAULT_MAX_FLOWS`]): open connections,
    /// connections the handler ignores, and recently closed ones. Beyond it, recently closed
    /// entries and then the least recently active connections are dropped (closed like an idle
    /// connection, counted in [`FlowStats::evicted`]). A later segment of an evicted connection
    /// opens a new connection picked up mid-stream.
    pub max_flows: usize,
    /// How long a connection closed by FIN or RST is remembered (default 10 s of capture time), so
    /// that its late segments (final ACK, retransmitted FIN or data) are recognized instead of
    /// opening a new mid-stream connection. A new SYN on the same 4-tuple opens a new connection
    /// at once.
    pub closed_linger_ns: u64,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            server_ports: Vec::new(),
            servers: Vec::new(),
            track_unknown_with_syn: false,
            max_buffer_per_direction: 4 << 20,
            max_buffer_total: 128 << 20,
            idle_timeout_ns: 600_000_000_000,
            max_flows: DEFAULT_MAX_FLOWS,
            closed_linger_ns: 10_000_000_000,
        }
    }
}

/// What the flow table drives. ids are unique for the run.
pub trait Handler {
    /// A new connection with a known orientation. `saw_syn` is false when the capture began
    /// mid-connection. Return false to ignore this connection (it is then not buffered or
    /// reassembled, and gets no further calls, `close` included).
    fn open(
        &mut self,
        id: u64,
        client: SocketAddr,
        server: SocketAddr,
        saw_syn: bool,
        ts_ns: u64,
    ) -> bool;
    /// In-order bytes, never empty. Return false to stop tracking the connection (e.g. it went
    /// TLS): the flow stops buffering it but still recognizes (and cheaply drops) its later
    /// segments until FIN/RST/idle, and then calls `close`.
    fn data(&mut self, id: u64, dir: Dir, data: &[u8], ts_ns: u64) -> bool;
    /// `len` bytes in `dir` were never captured (or could not be reassembled). Never 0.
    fn gap(&mut self, id: u64, dir: Dir, len: u64, ts_ns: u64);
    /// The connection is over (FIN both ways or RST, idle timeout, eviction, reuse of its 4-tuple
    /// by a new SYN, or finish()). Called exactly once per connection whose `open` returned true.
    fn close(&mut self, id: u64, ts_ns: u64);
}

/// Counters. Connection counters (`connections`, `closed_*`, `evicted`, `stopped`) count only
/// connections whose [`Handler::open`] returned true, so that
/// `connections = closed_fin + closed_rst + closed_idle + evicted + closed_reused + closed_finish`
/// once [`FlowTable::finish`] has run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Segments given to [`FlowTable::process`].
    pub segments: u64,
    /// Captured payload bytes of those segments.
    pub payload_bytes: u64,
    /// Segments of flows no server matched, that could not open a connection (pure ACK/FIN/RST of
    /// an unknown flow), or of connections the handler ignores.
    pub not_tracked: u64,
    /// Of `not_tracked`: segments of connections whose handler stopped reading them (returned
    /// false from [`Handler::data`]); the handler knows why.
    pub not_tracked_stopped: u64,
    /// Of `not_tracked`, the others: segments without payload or missing bytes (pure ACK, FIN,
    /// RST). Nothing was lost in them.
    pub not_tracked_empty: u64,
    /// Of `not_tracked`, those with payload, by the lower port of their two endpoints (most
    /// likely the server's): at most [`MAX_UNTRACKED_PORTS`] ports, the first seen, so that the
    /// report can say which port to add with `--port`.
    pub untracked_ports: std::collections::BTreeMap<u16, u64>,
    /// Segments of a connection already closed by FIN/RST (final ACKs, retransmissions).
    pub late: u64,
    /// Segments carrying payload entirely already seen.
    pub duplicates: u64,
    /// Payload bytes seen again (duplicates and partial overlaps).
    pub retransmitted_bytes: u64,
    /// Segments held because they arrived ahead of a hole.
    pub out_of_order: u64,
    /// Segments (with payload) that arrived after the hole they would have filled had been
    /// declared a gap: reordered beyond what the buffer could wait for, or retransmitted after
    /// the loss was declared. Neither duplicates (their bytes were never delivered) nor a new
    /// loss (their bytes are already in `gap_bytes`).
    pub out_of_order_too_late: u64,
    /// Gaps reported to the handler, and their bytes.
    pub gaps: u64,
    pub gap_bytes: u64,
    /// Connections opened (handler accepted).
    pub connections: u64,
    /// Connections the handler declined in `open`.
    pub rejected: u64,
    /// Connections whose handler returned false from `data`.
    pub stopped: u64,
    pub closed_fin: u64,
    pub closed_rst: u64,
    pub closed_idle: u64,
    pub evicted: u64,
    /// Closed because a new SYN reused the 4-tuple while they were still open.
    pub closed_reused: u64,
    /// Closed by [`FlowTable::finish`].
    pub closed_finish: u64,
    /// Times a buffer cap forced a hole to be declared a gap.
    pub buffer_overflows: u64,
    /// Peak of the global out-of-order buffer, as charged against the caps (bytes plus
    /// [`PIECE_OVERHEAD`] per piece).
    pub buffered_bytes_peak: u64,
}
