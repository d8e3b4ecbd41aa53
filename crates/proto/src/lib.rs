//! The protocol session contract: what a per-connection protocol parser is fed and what it emits.
//!
//! A session is a plain synchronous state machine. It never reads the clock (all time comes from
//! the `ts_ns` arguments, nanoseconds since the Unix epoch taken from packet timestamps) and never
//! does IO. It is fed the bytes of one TCP connection in order, per direction, by the flow layer.
//! Untrusted bytes never make it panic: a malformed message is counted in [`Health`] and the
//! session resynchronizes.

#![forbid(unsafe_code)]

use std::sync::Arc;

pub mod endpoint;
pub mod kit;
pub mod mongodb;
pub mod mysql;
pub mod params;
pub mod postgres;
pub mod redis;
pub mod registry;
pub mod testing;

pub use endpoint::{Endpoint, Process};
pub use registry::Protocol;

/// Which way bytes travel on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client to server: requests.
    ToServer,
    /// Server to client: responses.
    ToClient,
}

/// What the flow layer knows of a connection when it hands it to a session.
#[derive(Clone, Debug)]
pub struct ConnMeta {
    /// Unique per run; stable for the life of the connection.
    pub id: u64,
    pub client: Endpoint,
    pub server: Endpoint,
    /// False when the capture began after the connection was opened (no SYN seen): the session
    /// must pick up at the next plausible command boundary and cannot know the handshake.
    pub saw_open: bool,
    /// The client process, where the source knows it (eBPF); `None` for packet captures.
    pub peer: Option<Arc<Process>>,
    /// True when the bytes delivered are the decrypted plaintext that follows a TLS handshake
    /// and the plaintext before TLS (MySQL greeting and SSL request, PostgreSQL SSLRequest and
    /// 'S') was not delivered: MySQL's first client packet is the HandshakeResponse (sequence
    /// id 2), PostgreSQL's first client message the StartupMessage; Redis and MongoDB read it
    /// as [`ConnMeta::saw_open`]. It implies the start of the TLS stream is delivered, whatever
    /// `saw_open` says. False for packet captures.
    pub after_tls: bool,
}

/// Limits a session must respect.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Requests in flight per connection; beyond it, requests are counted in
    /// [`Health::inflight_overflow`] and dropped.
    pub max_inflight: usize,
    /// The longest request text kept for fingerprinting, in bytes. Longer text is cut at a char
    /// boundary (and the event says so); the byte counts stay exact.
    pub max_text: usize,
    /// The request-text budget shared by every session of a run (clones share it): beyond
    /// it, a request keeps only a prefix of its text (marked truncated); it is still counted.
    pub text_budget: kit::TextBudget,
    /// Keep the bound values of prepared-statement executions on the events
    /// ([`QueryEvent::params`]); off when nothing downstream shows examples.
    pub keep_params: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_inflight: 1024,
            max_text: 16 << 20,
            text_budget: kit::TextBudget::default(),
            keep_params: true,
        }
    }
}

/// The outcome of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A complete success response was seen.
    Ok,
    /// The server answered with an error ([`QueryEvent::error`] says which).
    Error,
    /// The connection ended (or the capture did) before any response byte.
    NoResponse,
    /// Bytes of the response were lost in a capture gap; latency and rows may be incomplete.
    Incomplete,
    /// The request expects no response (e.g. MySQL COM_QUIT, COM_STMT_CLOSE).
    NoReplyExpected,
}

/// A server error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbError {
    /// Numeric code where the protocol has one (MySQL 1064, MongoDB 11000); 0 otherwise.
    pub code: u32,
    /// SQLSTATE for MySQL/PostgreSQL ("42S02"), error prefix for Redis ("WRONGTYPE").
    pub state: Option<Box<str>>,
    pub message: Box<str>,
}

/// One request paired with its response. The unit everything downstream counts.
#[derive(Clone, Debug)]
pub struct QueryEvent {
    pub protocol: Protocol,
    pub conn: u64,
    pub client: Endpoint,
    pub server: Endpoint,
    /// Timestamp of the packet that carried the first byte of the request.
    pub start_ns: u64,
    /// Timestamp of the packet that carried the first byte of the response.
    pub first_response_ns: Option<u64>,
    /// Timestamp of the packet that carried the last byte of the response.
    pub end_ns: Option<u64>,
    /// When the server could start on this request: the later of `start_ns` and the end of the
    /// previous response on the same connection. Set by the pipeline, in one place for every
    /// protocol, for timed events with a response; `None` from sessions, for unanswered requests
    /// and for count-only events ([`QueryEvent::timed`] false).
    /// See [`QueryEvent::service_ns`].
    pub service_start_ns: Option<u64>,
    pub user: Option<Arc<str>>,
    pub database: Option<Arc<str>>,
    /// Command kind, lower case, stable across releases: "query", "execute", "prepare", "close",
    /// "init_db", "ping", ... (protocol specific; listed in docs/json-format.md).
    pub command: &'static str,
    /// The statement text (SQL, or for an `execute` the prepared statement's SQL when known).
    /// Shared so that every execution of a prepared statement points at one allocation.
    pub text: Option<Arc<str>>,
    /// True when `text` was cut at [`SessionConfig::max_text`].
    pub text_truncated: bool,
    /// True when bytes of the request were lost in a capture gap (or cut by the snap length)
    /// while its framing held: the request is counted, paired and timed, and `text` holds
    /// what was seen (enough to fingerprint a multi-row INSERT by its prefix).
    pub text_partial: bool,
    /// Prepared statement id (MySQL) when the command refers to one.
    pub statement_id: Option<u32>,
    /// Request bytes on the wire (protocol framing included, TCP/IP excluded).
    pub bytes_in: u64,
    /// Response bytes on the wire.
    pub bytes_out: u64,
    /// Rows returned by the server.
    pub rows_sent: u64,
    /// Rows the server reports as changed (MySQL affected rows, PostgreSQL tag counts, ...).
    pub rows_affected: u64,
    /// Warnings the server reported (MySQL/MariaDB: the warning count of the OK or EOF that
    /// ends each result set, summed; 0 for the other protocols).
    pub warnings: u64,
    pub outcome: Outcome,
    pub error: Option<DbError>,
    /// False for a count-only event: a step whose time another event of the same connection
    /// already carries (a PostgreSQL Parse sent in the same flight as its Bind and Execute).
    /// It counts in its group with its outcome, bytes and rows, but is never timed:
    /// [`QueryEvent::latency_ns`] is `None`, so it adds no latency sample and no time to any
    /// total. True for every other event.
    pub timed: bool,
    /// The transaction state the response left the connection in, where the protocol says
    /// it at the end of this response (PostgreSQL ReadyForQuery `I`/`T`/`E`, MySQL/MariaDB
    /// `SERVER_STATUS_IN_TRANS` in the OK/EOF that ends the command); `None` when unknown.
    /// PostgreSQL extended protocol: the state at the end of the request's Sync batch (see
    /// `postgres/session/batch.rs`).
    pub txn: Option<TxnState>,
    /// MySQL/MariaDB: the server status flags of the response said no index
    /// (`SERVER_QUERY_NO_INDEX_USED`) or no good index (`SERVER_QUERY_NO_GOOD_INDEX_USED`) was
    /// used. Default (both false) for the other protocols.
    pub index: IndexUse,
    /// The bound values of a prepared statement's execution (MySQL COM_STMT_EXECUTE,
    /// PostgreSQL Bind), raw and bounded; decoded only for a group's example
    /// ([`params::BoundParams::literals`]). `None` when there are none or they were not kept.
    pub params: Option<Arc<params::BoundParams>>,
    /// The client process ([`ConnMeta::peer`]), where known.
    pub peer: Option<Arc<Process>>,
}

/// What the server said of its index use for a statement (MySQL/MariaDB status flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexUse {
    /// `SERVER_QUERY_NO_INDEX_USED` (0x0020) on a packet that ended one of its result sets.
    pub no_index_used: bool,
    /// `SERVER_QUERY_NO_GOOD_INDEX_USED` (0x0010) likewise.
    pub no_good_index_used: bool,
}

/// A connection's transaction state after a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnState {
    /// Not in a transaction (autocommit).
    Idle,
    /// In a transaction block.
    InTransaction,
    /// In a failed transaction block (PostgreSQL `E`: statements are rejected until it ends).
    Failed,
}

impl TxnState {
    /// True inside a transaction (failed or not).
    pub fn in_transaction(self) -> bool {
        self != TxnState::Idle
    }
}

impl QueryEvent {
    /// Response time: request start to last response byte, in nanoseconds (`None` when
    /// unanswered, or for a count-only event: see [`QueryEvent::timed`]).
    pub fn latency_ns(&self) -> Option<u64> {
        self.end_ns
            .filter(|_| self.timed)
            .map(|e| e.saturating_sub(self.start_ns))
    }

    /// Service time: [`service_start_ns`](QueryEvent::service_start_ns) to last response byte,
    /// in nanoseconds (0 when the response ended before it). Excludes the time the request
    /// queued behind earlier requests on the same connection, so the service times of one
    /// connection never sum to more than the time it was busy.
    pub fn service_ns(&self) -> Option<u64> {
        match (self.service_start_ns, self.end_ns.filter(|_| self.timed)) {
            (Some(s), Some(e)) => Some(e.saturating_sub(s)),
            _ => None,
        }
    }
}

/// Counters a session bumps for what it could not read (and, not a problem, for what the server
/// sent outside any reply). Summed over all sessions into the capture-health report so a user
/// sees when numbers are incomplete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Bytes the session could not interpret and skipped.
    pub unparsed_bytes: u64,
    /// Response messages that matched no request.
    pub responses_without_request: u64,
    /// Requests dropped because [`SessionConfig::max_inflight`] was reached.
    pub inflight_overflow: u64,
    /// Times the session lost sync and searched for the next message boundary.
    pub resyncs: u64,
    /// Connections that switched to TLS (or another encryption) and were skipped (one read on
    /// decrypted after [`Session::start_tls`] is taken out again).
    pub encrypted_connections: u64,
    /// Messages that failed to parse (malformed, or an unsupported variant).
    pub malformed: u64,
    /// Not a problem: messages the server pushed outside any reply (Redis pub/sub messages and
    /// RESP3 pushes such as client-side caching invalidations). Not events, not paired.
    pub server_pushes: u64,
    /// Their bytes on the wire.
    pub server_push_bytes: u64,
}

impl Health {
    pub fn merge(&mut self, o: &Health) {
        self.unparsed_bytes += o.unparsed_bytes;
        self.responses_without_request += o.responses_without_request;
        self.inflight_overflow += o.inflight_overflow;
        self.resyncs += o.resyncs;
        self.encrypted_connections += o.encrypted_connections;
        self.malformed += o.malformed;
        self.server_pushes += o.server_pushes;
        self.server_push_bytes += o.server_push_bytes;
    }
}

/// Where a session puts its events and counts its trouble.
pub trait Sink {
    fn event(&mut self, ev: QueryEvent);
    fn health(&mut self) -> &mut Health;
}

/// A simple sink that keeps everything: for tests, and for tools that want a `Vec`.
#[derive(Default, Debug)]
pub struct VecSink {
    pub events: Vec<QueryEvent>,
    pub health: Health,
}

impl Sink for VecSink {
    fn event(&mut self, ev: QueryEvent) {
        self.events.push(ev);
    }
    fn health(&mut self) -> &mut Health {
        &mut self.health
    }
}

/// Whether the caller should keep feeding this connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Continue,
    /// Nothing more can be learned (the connection went encrypted, or is not this protocol):
    /// stop reassembling it and stop feeding it.
    Stop,
}

/// The streaming session contract. One object per TCP connection.
pub trait Session {
    /// Bytes in stream order for one direction. A partial message is normal: the session keeps
    /// what it needs and waits for more. `ts_ns` is the timestamp of the packet these bytes came in.
    fn feed(&mut self, dir: Direction, data: &[u8], ts_ns: u64, sink: &mut dyn Sink) -> Progress;
    /// Reassembly lost `len` bytes in `dir`. The session drops what it cannot trust, counts it,
    /// and resynchronizes at the next plausible message boundary.
    fn gap(&mut self, dir: Direction, len: u64, ts_ns: u64, sink: &mut dyn Sink);
    /// The connection ended (FIN/RST, idle, or end of capture). Requests never answered are
    /// emitted with [`Outcome::NoResponse`].
    fn close(&mut self, ts_ns: u64, sink: &mut dyn Sink);
    /// From now on the stream delivers decrypted TLS plaintext (a source that reads TLS
    /// libraries saw the connection switch; packet captures never call it). Returns true when
    /// the session continues: MySQL expects the HandshakeResponse next, PostgreSQL the
    /// StartupMessage; a session that has parsed nothing yet reads on as if opened with
    /// [`ConnMeta::after_tls`]. Works after the session returned [`Progress::Stop`] because
    /// the connection went TLS; a connection counted in [`Health::encrypted_connections`]
    /// is uncounted at the session's next call with a sink (it was read after all).
    fn start_tls(&mut self) -> bool {
        false
    }
}
