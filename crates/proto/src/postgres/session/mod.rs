//! The PostgreSQL connection state machine: startup and encryption requests, authentication,
//! simple-query statements paired one by one, the extended protocol with pipelining and its
//! skip-until-Sync error rule, COPY sub-protocols, prepared statements and portals, mid-stream
//! pickup and resynchronization after gaps.
//!
//! Layers: raw bytes -> messages ([`super::wire::Framer`]) -> typed messages
//! ([`super::message`]) -> this state machine. The framing half (`Dir`, one per direction)
//! and the conversation half (`state::Conn`) are separate structs so a message can borrow the
//! framing buffers while the conversation is updated.
//!
//! Pairing works on two queues. `units` holds the requests that will become events, in the order
//! the client sent them. `items` holds the responses the server owes, in order; each item names
//! the unit it belongs to (or none, for requests beyond `max_inflight`, which are still tracked
//! so that pairing stays exact, but produce no event). A unit is emitted once it owes nothing and
//! the client can no longer add to it.
//!
//! The code is split by concern:
//! - `state`: the records (requests in flight, owed responses, the conversation);
//! - `queue`: the two queues and emitting events;
//! - `startup`: the startup packet, encryption answers and authentication;
//! - `client`: one function per frontend message type;
//! - `server`: backend messages against the owed responses (extended protocol, COPY);
//! - `query`: simple-query messages split into statements;
//! - `loss`: gaps and the end of the connection on the conversation side;
//! - `batch`: extended-protocol events held until their Sync's ReadyForQuery gives their
//!   transaction state;
//! - `resync`: the framing shell: feeding bytes, losing and regaining sync.

use std::collections::VecDeque;
use std::sync::Arc;

use super::wire::Framer;
use crate::kit::{Framing, NameCache, PerDir, RecentTexts};
use crate::{ConnMeta, Direction, Progress, Session, SessionConfig, Sink, TxnState};

mod batch;
mod client;
mod loss;
mod params;
mod query;
mod queue;
mod resync;
mod server;
mod startup;
mod state;
mod tls;

use state::{CLOSED, Conn, Item, Unit};

const CLIENT: Direction = Direction::ToServer;
const SERVER: Direction = Direction::ToClient;
/// Bytes of an ErrorResponse kept: severity, SQLSTATE and message come first.
const ERROR_KEEP: usize = 4096;
/// Bytes looked at before trusting a possible client message start when resynchronizing.
const PROBE_LEN: usize = 16;
/// Prepared statements remembered per connection, and the text bytes they may hold.
const MAX_STMTS: usize = 4096;
const MAX_STMT_BYTES: usize = 32 << 20;
/// Portals remembered per connection (they live until the end of a transaction).
const MAX_PORTALS: usize = 256;
/// Texts parsed into the unnamed statement remembered per connection (drivers that do not
/// prepare cycle through a handful of statements), and the longest (short texts, which the
/// run's text budget never charges).
const RECENT: usize = 8;
const RECENT_MAX_LEN: usize = 1024;

/// The transaction status the server reported in its last ReadyForQuery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxStatus {
    /// `I`: not in a transaction block.
    Idle,
    /// `T`: in a transaction block.
    InTransaction,
    /// `E`: in a failed transaction block (queries are rejected until it ends).
    Failed,
}

impl TxStatus {
    /// The status of a ReadyForQuery's byte; `None` for a byte the protocol does not define.
    pub fn from_byte(s: u8) -> Option<TxStatus> {
        match s {
            b'I' => Some(TxStatus::Idle),
            b'T' => Some(TxStatus::InTransaction),
            b'E' => Some(TxStatus::Failed),
            _ => None,
        }
    }

    /// The event's form of this status.
    pub fn event_state(self) -> TxnState {
        match self {
            TxStatus::Idle => TxnState::Idle,
            TxStatus::InTransaction => TxnState::InTransaction,
            TxStatus::Failed => TxnState::Failed,
        }
    }
}

/// The framing state of one direction.
#[derive(Debug)]
struct Dir {
    framer: Framer,
    framing: Framing,
}

impl Dir {
    fn new(typed: bool, framing: Framing) -> Self {
        Dir {
            framer: Framer::new(typed),
            framing,
        }
    }

    /// Drops the partial message (not the probe); returns the bytes thrown away.
    fn drop_partial(&mut self) -> u64 {
        self.framer.reset()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's untyped startup packet.
    Startup,
    /// An SSLRequest or GSSENCRequest was sent: the server answers with one byte.
    EncAnswer,
    /// Authentication and backend start: until the first ReadyForQuery.
    Auth,
    Ready,
    /// Authentication failed or the connection otherwise ended: nothing more to pair.
    Ended,
}

/// Side effects the conversation asks of the framing layer.
#[derive(Clone, Copy, Debug, Default)]
struct Act {
    stop: bool,
    /// A request was queued: the server's next bytes may start its response.
    server_boundary: bool,
    /// The server stream cannot be trusted any more.
    unsync_server: bool,
}

/// One PostgreSQL connection. Build it with [`super::new_session`].
#[derive(Debug)]
pub struct PgSession {
    conn: Conn,
    dirs: PerDir<Dir>,
    stopped: bool,
    /// Stopped because the connection went TLS ('S' to an SSLRequest, or a ClientHello
    /// first): [`Session::start_tls`] resumes it.
    tls_stop: bool,
    /// Bytes or a gap were fed: [`Session::start_tls`] can no longer start from scratch.
    fed: bool,
    /// `start_tls` resumed a connection counted in `Health::encrypted_connections`: uncounted
    /// at the next call with a sink.
    uncount: bool,
}

impl PgSession {
    pub(crate) fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        // After TLS the first client message is the StartupMessage, as on a seen open.
        let saw_open = meta.saw_open || meta.after_tls;
        let (phase, client, server) = if saw_open {
            (Phase::Startup, Framing::synced(), Framing::synced())
        } else {
            (Phase::Ready, Framing::lost(true), Framing::lost(false))
        };
        let max_items = cfg.max_inflight.saturating_mul(8).max(64);
        PgSession {
            conn: Conn {
                meta,
                cfg,
                phase,
                user: None,
                database: None,
                application_name: None,
                tx: None,
                stmts: NameCache::new(MAX_STMTS, MAX_STMT_BYTES),
                portals: NameCache::new(MAX_PORTALS, MAX_STMT_BYTES),
                executed: VecDeque::new(),
                units: VecDeque::new(),
                items: VecDeque::new(),
                next_id: 1,
                open: CLOSED,
                skip: None,
                copy_in: None,
                fresh: !saw_open,
                orphans_expected: !saw_open,
                max_items,
                pending_text: Default::default(),
                param_types: Default::default(),
                param_records: Default::default(),
                held: VecDeque::new(),
                recent: RecentTexts::new(RECENT, RECENT_MAX_LEN),
            },
            dirs: PerDir::new(Dir::new(!saw_open, client), Dir::new(true, server)),
            stopped: false,
            tls_stop: false,
            fed: false,
            uncount: false,
        }
    }

    /// The user, database and application name from the startup message, when it was seen
    /// (the database defaults to the user name, as the server does).
    pub fn user(&self) -> Option<&Arc<str>> {
        self.conn.user.as_ref()
    }
    pub fn database(&self) -> Option<&Arc<str>> {
        self.conn.database.as_ref()
    }
    pub fn application_name(&self) -> Option<&Arc<str>> {
        self.conn.application_name.as_ref()
    }
    /// The transaction status from the last ReadyForQuery.
    pub fn transaction_status(&self) -> Option<TxStatus> {
        self.conn.tx
    }

    /// Heap bytes this session holds in buffers and tables, for checking that memory stays
    /// bounded: about two `max_text`-sized messages, statement texts (capped at 32 MB), portals
    /// and requests in flight (`max_inflight`).
    pub fn buffered_bytes(&self) -> usize {
        let dirs: usize = self
            .dirs
            .iter()
            .map(|d| d.framer.buffered_bytes() + d.framing.probe.heap_bytes())
            .sum();
        let units: usize = self
            .conn
            .units
            .iter()
            .map(|u| {
                std::mem::size_of::<Unit>()
                    + u.core.text.as_ref().map_or(0, |t| t.len())
                    + u.query.as_ref().map_or(0, |q| q.full.len() + 128)
            })
            .sum();
        dirs + units
            + self.conn.held.len() * (std::mem::size_of::<crate::QueryEvent>() + 128)
            + self.conn.items.len() * std::mem::size_of::<Item>()
            + self.conn.stmts.heap_bytes()
            + self.conn.portals.heap_bytes()
            + self.conn.recent.heap_bytes()
            + self.conn.param_records.heap_bytes()
    }
}

impl Session for PgSession {
    fn feed(&mut self, dir: Direction, data: &[u8], ts_ns: u64, sink: &mut dyn Sink) -> Progress {
        self.settle(sink);
        if self.stopped {
            return Progress::Stop;
        }
        if data.is_empty() {
            return Progress::Continue;
        }
        self.fed = true;
        if dir == SERVER {
            self.client_turn(sink);
        } else if self.conn.phase == Phase::Startup
            && self.dirs[CLIENT].framer.is_idle()
            && data.first() == Some(&0x16)
        {
            // A TLS ClientHello straight away (`sslnegotiation=direct`).
            sink.health().encrypted_connections += 1;
            self.stopped = true;
            self.tls_stop = true;
            return Progress::Stop;
        }
        self.feed_dir(dir, data, ts_ns, sink);
        if self.stopped {
            Progress::Stop
        } else {
            Progress::Continue
        }
    }

    fn gap(&mut self, dir: Direction, len: u64, ts_ns: u64, sink: &mut dyn Sink) {
        self.settle(sink);
        self.fed = true;
        if self.stopped {
            return;
        }
        if self.conn.phase != Phase::Ready && self.conn.phase != Phase::Ended {
            self.degrade_to_midstream(sink);
            return;
        }
        let d = &mut self.dirs[dir];
        if d.framing.is_synced() && d.framer.skip_lost(len) {
            // The hole is inside one message whose end we know: the framing holds.
            if dir == SERVER {
                let unit = self.conn.items.front().and_then(|i| i.unit);
                if let Some(u) = self.conn.unit_mut(unit) {
                    u.core.damaged = true;
                }
            }
            if self.dirs[dir].framer.body_done() {
                // The gap ended the message: it is complete now.
                self.feed_synced(dir, &[], ts_ns, sink);
            }
            return;
        }
        if dir == SERVER {
            self.conn.server_gap(sink);
            self.lose(SERVER, sink.health());
        } else {
            self.conn.client_gap();
            self.lose(CLIENT, sink.health());
            self.dirs[CLIENT].framing.candidate();
        }
    }

    fn close(&mut self, _ts_ns: u64, sink: &mut dyn Sink) {
        self.settle(sink);
        if !self.stopped && !self.dirs[CLIENT].framing.probe.is_empty() {
            self.eval_probe(CLIENT, sink);
        }
        self.conn.close(sink);
        for dir in self.dirs.iter_mut() {
            let h = sink.health();
            h.unparsed_bytes += dir.drop_partial() + dir.framing.probe.clear();
        }
        self.stopped = true;
    }

    fn start_tls(&mut self) -> bool {
        self.switch_to_tls()
    }
}

#[cfg(test)]
mod tests;
