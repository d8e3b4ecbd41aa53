//! Ordered byte streams from offset-tagged records: what a socket-level source (the eBPF
//! tracer) emits, turned into the in-order data and exact gaps a protocol session is fed,
//! and the binary form of a record kept in `--write` files.
//!
//! A source reports each connection as `Open`, then `Data` records tagged with their offset in
//! the direction's stream, then `Close`. [`Reassembler`] keeps, per connection and direction,
//! the next expected offset: in-order data passes through, a jump forward is a gap of exactly
//! the missing length, a repeat is trimmed and counted. It is pure: no IO, no clock.

#![forbid(unsafe_code)]

pub mod format;
mod reassemble;

use std::sync::Arc;

pub use format::{DecodeError, LINKTYPE, decode, encode};
pub use proto::Direction;
pub use proto::{Endpoint, Process};
pub use reassemble::{Reassembler, Stats};

/// A connection a source starts reporting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOpen {
    pub conn: u64,
    pub ts_ns: u64,
    pub client: Endpoint,
    pub server: Endpoint,
    /// The client process, where known.
    pub peer: Option<Arc<Process>>,
    /// True when the source saw the connection begin (accept), false when first seen mid-way.
    pub saw_open: bool,
}

/// One thing a source reports about a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Open(StreamOpen),
    /// `bytes` are the first bytes of `len` (len >= bytes.len(): the rest did not fit the copy
    /// limit and is a gap). `offset`: where the first byte sits in this connection's stream in
    /// `dir` (bytes delivered as data, counted from 0 at the first byte the source ever emitted
    /// for this direction). `tls`: decrypted TLS plaintext (from SSL_read/SSL_write).
    Data {
        conn: u64,
        dir: Direction,
        ts_ns: u64,
        offset: u64,
        len: u64,
        bytes: &'a [u8],
        tls: bool,
    },
    Close {
        conn: u64,
        ts_ns: u64,
    },
}

impl Record<'_> {
    /// The connection the record is about.
    pub fn conn(&self) -> u64 {
        match self {
            Record::Open(o) => o.conn,
            Record::Data { conn, .. } | Record::Close { conn, .. } => *conn,
        }
    }

    /// The record's timestamp.
    pub fn ts_ns(&self) -> u64 {
        match self {
            Record::Open(o) => o.ts_ns,
            Record::Data { ts_ns, .. } | Record::Close { ts_ns, .. } => *ts_ns,
        }
    }
}

/// What the [`Reassembler`] delivers, in stream order per connection and direction.
pub trait StreamHandler {
    fn open(&mut self, o: &StreamOpen);
    fn data(&mut self, conn: u64, dir: Direction, bytes: &[u8], ts_ns: u64);
    fn gap(&mut self, conn: u64, dir: Direction, len: u64, ts_ns: u64);
    /// From now on `conn` carries decrypted TLS plaintext. Called once per connection, before
    /// its first `tls` record is delivered: after plaintext (the handshake bytes before TLS:
    /// MySQL greeting + SSL request, PostgreSQL SSLRequest + 'S'), or, when nothing was
    /// delivered yet, first of all (a stream seen only from inside TLS).
    fn start_tls(&mut self, conn: u64, ts_ns: u64);
    fn close(&mut self, conn: u64, ts_ns: u64);
}
