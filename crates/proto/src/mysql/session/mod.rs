//! The MySQL/MariaDB connection state machine: handshake, command/response pairing, prepared
//! statements, compression switch-over, mid-stream pickup and resynchronization after gaps.
//!
//! Layers: raw bytes -> (compressed frames ->) packets joined into messages ([`super::wire`])
//! -> typed messages ([`super::message`]) -> this state machine. The framing half ([`Dir`])
//! and the conversation half ([`conn::Conn`]) are separate structs so a message can borrow the
//! framing buffers while the conversation is updated.
//!
//! One `impl` is spread over files by concern: this file holds the session, its framing
//! state and the glue that turns bytes into messages; [`conn`] the conversation state and
//! event emission; [`handshake`] the greeting, login and its failure; [`command`] one
//! function per client command; [`result`] the stepping of each response kind; [`multi`] one
//! request per statement of a multi-statement query; [`resync`] losing sync and finding it
//! again; [`text`] statement text helpers.

mod command;
mod conn;
mod handshake;
mod multi;
mod params;
mod result;
mod resync;
mod text;
mod tls;

use std::collections::VecDeque;
use std::sync::Arc;

use super::message::cmd;
use super::wire::{Assembler, Deframer};
use crate::kit::{Framing, PerDir, Sync};
use crate::{ConnMeta, Direction, Health, Progress, Session, SessionConfig, Sink};
use conn::{Conn, Pending};
use result::Resp;

const CLIENT: Direction = Direction::ToServer;
const SERVER: Direction = Direction::ToClient;
/// Server payload bytes kept per message: enough for any OK, ERR, EOF, greeting or
/// prepare-OK; rows and column definitions are only classified by their first bytes.
const SERVER_KEEP: usize = 8 * 1024;
/// Client payload bytes kept for commands without SQL text (handshake response included).
const CLIENT_KEEP: usize = 4 * 1024;
/// The longest plausible server greeting.
const MAX_GREETING: u32 = 64 * 1024;

/// The framing state of one direction: the kit's sync state and probe, and MySQL's packet
/// and compressed-frame layers.
#[derive(Debug)]
struct Dir {
    compressed: bool,
    asm: Assembler,
    deframer: Deframer,
    scratch: Vec<u8>,
    /// Wire bytes consumed and not yet attributed to a message.
    credit: u64,
    framing: Framing,
    /// Compressed bytes of a frame whose content was abandoned: skipped without counting
    /// them again (the frame's size was counted when it began).
    skip_frame: u64,
    /// A row the server-side skim consumed in part (uncompressed only).
    cut_row: Option<result::CutRow>,
}

impl Dir {
    fn new(framing: Framing) -> Self {
        Dir {
            compressed: false,
            asm: Assembler::new(),
            deframer: Deframer::new(),
            scratch: Vec::new(),
            credit: 0,
            framing,
            skip_frame: 0,
            cut_row: None,
        }
    }

    /// Drops every partial message; returns the bytes thrown away. With compression these
    /// are the unattributed frames, counted whole when their header was read (which does not
    /// depend on how the bytes were chunked). The probe is kept.
    fn drop_partial(&mut self) -> u64 {
        let mut n = self.asm.reset() + self.cut_row.take().map_or(0, |r| r.have);
        if self.compressed {
            self.deframer.reset();
            self.scratch.clear();
            n = self.credit;
        }
        self.credit = 0;
        self.skip_frame = 0;
        n
    }

    /// Drops every partial message and the probe; returns the bytes thrown away.
    fn reset(&mut self) -> u64 {
        self.drop_partial() + self.framing.probe.clear()
    }

    /// Out of sync: what was partial is unparsed, and bytes are skipped until a candidate.
    fn lose(&mut self, health: &mut Health) {
        health.unparsed_bytes += self.drop_partial();
        self.framing.lose(health);
    }
}

/// Side effects the conversation asks of the framing layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Act {
    stop: bool,
    compress: bool,
    unsync_client: bool,
    unsync_server: bool,
    /// A request was queued: the server's next bytes start its response.
    server_boundary: bool,
}

impl Act {
    /// Nothing to do: the common case (a response part, a row batch).
    #[inline]
    fn is_none(&self) -> bool {
        *self == Act::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Greeting,
    ClientResponse,
    Auth,
    Command,
    /// Authentication failed or the connection otherwise ended: nothing more to pair.
    Ended,
}

/// One MySQL/MariaDB connection. Build it with [`super::new_session`].
#[derive(Debug)]
pub struct MysqlSession {
    conn: Conn,
    dirs: PerDir<Dir>,
    /// Whether we know if the connection uses the compressed protocol (always after a seen
    /// handshake; mid-stream, once the first command was recognised).
    framing_known: bool,
    stopped: bool,
    /// Bytes or a gap were fed: [`Session::start_tls`] can no longer start from scratch.
    fed: bool,
    /// `start_tls` resumed a connection counted in `Health::encrypted_connections`: uncounted
    /// at the next call with a sink.
    uncount: bool,
}

impl MysqlSession {
    pub(crate) fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        let saw_open = meta.saw_open || meta.after_tls;
        let after_tls = meta.after_tls;
        let (phase, client, server) = if after_tls {
            (Phase::ClientResponse, Framing::synced(), Framing::synced())
        } else if saw_open {
            (Phase::Greeting, Framing::synced(), Framing::synced())
        } else {
            (Phase::Command, Framing::lost(true), Framing::lost(false))
        };
        MysqlSession {
            conn: Conn {
                meta,
                cfg,
                phase,
                server_caps: if after_tls {
                    tls::UNKNOWN_SERVER_CAPS
                } else {
                    0
                },
                caps: None,
                deprecate_eof: None,
                user: None,
                database: None,
                stmts: Conn::statement_cache(),
                last_prepared: None,
                inflight: VecDeque::new(),
                spare: Vec::new(),
                orphans_expected: false,
                login: None,
                multi_statements: None,
                pending_text: Default::default(),
                params: Default::default(),
                tls_requested: false,
                in_tls: after_tls,
            },
            dirs: PerDir::new(Dir::new(client), Dir::new(server)),
            framing_known: saw_open,
            stopped: false,
            fed: false,
            uncount: false,
        }
    }

    /// The user and schema currently known for the connection.
    pub fn user(&self) -> Option<&Arc<str>> {
        self.conn.user.as_ref()
    }
    pub fn database(&self) -> Option<&Arc<str>> {
        self.conn.database.as_ref()
    }
    /// Heap bytes this session holds in buffers and tables (decoder contexts excluded), for
    /// checking that memory stays bounded: at most about two `max_text`-sized messages, plus
    /// statement texts (capped at 32 MB) and in-flight requests (`max_inflight`).
    pub fn buffered_bytes(&self) -> usize {
        let dirs: usize = self
            .dirs
            .iter()
            .map(|d| d.asm.buffered_bytes() + d.scratch.capacity() + d.framing.probe.heap_bytes())
            .sum();
        let inflight: usize = self
            .conn
            .inflight
            .iter()
            .map(|p| std::mem::size_of::<Pending>() + p.text_bytes())
            .sum();
        let spare = self.conn.spare.len() * std::mem::size_of::<Pending>();
        dirs + inflight + spare + self.conn.stmts.heap_bytes() + self.conn.params.records_bytes()
    }

    /// Whether the compressed protocol is in use (as negotiated or detected).
    pub fn compressed(&self) -> bool {
        self.dirs[CLIENT].compressed
    }

    fn apply(&mut self, act: Act, sink: &mut dyn Sink) {
        if act.stop {
            self.stopped = true;
        }
        if act.compress {
            for d in self.dirs.iter_mut() {
                d.compressed = true;
                d.deframer.reset();
            }
        }
        if act.unsync_server {
            self.lose_keeping_frame(SERVER, sink.health());
        }
        if act.unsync_client {
            self.lose_keeping_frame(CLIENT, sink.health());
        }
        if act.server_boundary {
            self.dirs[SERVER].framing.candidate();
        }
    }

    /// Pushes bytes through direction `d`'s packet layer; returns how many were consumed. A
    /// completed message goes to the conversation and its side effects are applied.
    fn push_packets(&mut self, d: Direction, data: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        if d == SERVER && self.dirs[d].cut_row.is_some() {
            let dir = &mut self.dirs[d];
            let n = data.len() as u64;
            return self
                .conn
                .cut_row_bytes(n, ts, false, &mut dir.credit, &mut dir.cut_row)
                as usize;
        }
        if d == SERVER
            && self.conn.phase == Phase::Command
            && !self.dirs[d].compressed
            && self.dirs[d].asm.is_idle()
        {
            let dir = &mut self.dirs[d];
            let n = self
                .conn
                .skim_rows(data, ts, &mut dir.credit, &mut dir.cut_row);
            if n > 0 {
                return n;
            }
        }
        let conn = &self.conn;
        let dir = &mut self.dirs[d];
        let keep = |b: u8, len: u64| keep_for(conn, d, b, len);
        let (n, msg) = dir.asm.push(data, ts, &keep);
        if !dir.compressed {
            dir.credit += n as u64;
        }
        if let Some(m) = msg {
            let wire = std::mem::take(&mut dir.credit);
            let act = self.conn.on_message(d, &m, wire, ts, sink);
            self.dirs[d].asm.release_large();
            if d == CLIENT {
                // A share the message's request did not take (none was made) is given back.
                self.conn.pending_text.take();
            }
            if !act.is_none() {
                self.apply(act, sink);
            }
        }
        n
    }

    /// Feeds bytes to a direction that is in sync; returns how many were consumed (the call
    /// stops early after a message that changed the framing or the sync state).
    fn feed_synced(&mut self, d: Direction, data: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        if !self.dirs[d].compressed {
            return self.push_packets(d, data, ts, sink);
        }
        // Compressed: one deframing step, then the decompressed bytes through the packet layer.
        let mut consumed = 0usize;
        loop {
            let mut scratch = std::mem::take(&mut self.dirs[d].scratch);
            scratch.clear();
            let step = match self.dirs[d].deframer.push(&data[consumed..], &mut scratch) {
                Ok(s) => s,
                Err(_) => {
                    sink.health().malformed += 1;
                    self.dirs[d].scratch = scratch;
                    self.abandon(d, sink);
                    return consumed;
                }
            };
            consumed += step.consumed;
            if let Some(h) = step.header {
                self.dirs[d].credit += 7 + u64::from(h.compressed_len);
            }
            let mut inner: &[u8] = &scratch;
            while !inner.is_empty() {
                if self.stopped || !self.dirs[d].framing.is_synced() || !self.dirs[d].compressed {
                    // The frame was counted when it began.
                    break;
                }
                let n = self.push_packets(d, inner, ts, sink);
                inner = &inner[n..];
            }
            self.dirs[d].scratch = scratch;
            let stay = self.dirs[d].framing.is_synced() && !self.stopped;
            if !stay || !self.dirs[d].deframer.has_pending_output() {
                return consumed;
            }
        }
    }

    fn feed_dir(&mut self, d: Direction, mut data: &[u8], ts: u64, sink: &mut dyn Sink) {
        while !data.is_empty() && !self.stopped {
            let dir = &mut self.dirs[d];
            if dir.skip_frame > 0 && !dir.framing.is_synced() {
                let n = dir.skip_frame.min(data.len() as u64);
                dir.skip_frame -= n;
                data = &data[n as usize..];
                continue;
            }
            match self.dirs[d].framing.sync {
                Sync::Synced => {
                    let n = self.feed_synced(d, data, ts, sink);
                    if n == 0 && self.dirs[d].framing.is_synced() && !self.stopped {
                        // No progress is a framing bug; never spin.
                        sink.health().malformed += 1;
                        self.abandon(d, sink);
                    }
                    data = &data[n..];
                }
                Sync::Lost { candidate: false } => {
                    sink.health().unparsed_bytes += data.len() as u64;
                    return;
                }
                Sync::Lost { candidate: true } if d == SERVER => self.server_resume(),
                Sync::Lost { candidate: true } => {
                    let n = self.probe_more(data, ts, sink);
                    data = &data[n..];
                }
            }
        }
    }
}

/// Payload bytes kept of a message in direction `d` whose first payload byte is `first` and
/// whose payload is `len` bytes long (`u64::MAX` when not known yet). Statement text is kept
/// within the run's text budget: the share taken waits in `pending_text` for the request.
fn keep_for(conn: &Conn, d: Direction, first: u8, len: u64) -> usize {
    if d == SERVER {
        return SERVER_KEEP;
    }
    if conn.phase != Phase::Command {
        return CLIENT_KEEP;
    }
    if conn
        .inflight
        .front()
        .is_some_and(|h| matches!(h.resp, Resp::Infile | Resp::Auth))
    {
        return 16;
    }
    match first {
        cmd::QUERY | cmd::STMT_PREPARE => {
            let max = conn.cfg.max_text.saturating_add(1 + 1024);
            let need = usize::try_from(len).unwrap_or(usize::MAX).min(max);
            let (keep, charge) = conn.cfg.text_budget.keep(need);
            *conn.pending_text.borrow_mut() = charge;
            if keep < need { keep } else { max }
        }
        _ => CLIENT_KEEP,
    }
}

impl Session for MysqlSession {
    fn feed(&mut self, dir: Direction, data: &[u8], ts_ns: u64, sink: &mut dyn Sink) -> Progress {
        self.settle(sink);
        if self.stopped {
            return Progress::Stop;
        }
        if data.is_empty() {
            return Progress::Continue;
        }
        self.fed = true;
        let d = dir;
        if self.conn.phase == Phase::Greeting && d == CLIENT {
            // The server speaks first in MySQL: this is another protocol.
            sink.health().malformed += 1;
            self.stopped = true;
            return Progress::Stop;
        }
        if d == SERVER {
            self.client_turn(sink);
        }
        self.feed_dir(d, data, ts_ns, sink);
        if self.conn.phase == Phase::Greeting
            && !self.stopped
            && let Some(h) = self.dirs[SERVER].asm.header()
            && (h.seq != 0 || h.len > MAX_GREETING)
        {
            sink.health().malformed += 1;
            self.stopped = true;
        }
        if self.stopped {
            Progress::Stop
        } else {
            Progress::Continue
        }
    }

    fn gap(&mut self, dir: Direction, len: u64, ts_ns: u64, sink: &mut dyn Sink) {
        self.settle(sink);
        self.fed = true;
        if self.stopped || self.skip_inside(dir, len, ts_ns, sink) {
            return;
        }
        if matches!(
            self.conn.phase,
            Phase::Greeting | Phase::ClientResponse | Phase::Auth
        ) {
            self.degrade_to_midstream(sink);
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
            self.eval_probe(sink);
        }
        self.conn.close(sink);
        for dir in self.dirs.iter_mut() {
            sink.health().unparsed_bytes += dir.reset();
        }
        self.stopped = true;
    }

    fn start_tls(&mut self) -> bool {
        self.switch_to_tls()
    }
}

#[cfg(test)]
mod tests;
