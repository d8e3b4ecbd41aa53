//! The MongoDB connection state machine: framing of both directions, requests paired with
//! replies by `responseTo`, exhaust replies, requests that want no reply, cursors followed
//! from the command that opened them to the getMores that read them, mid-stream pickup and
//! resynchronization after gaps.
//!
//! Layers: raw bytes -> messages (the 16-byte header and a body streamed through a
//! [`BodyParser`]) -> `Request` / `Reply` summaries -> this state machine. The framing half
//! (per direction a `Dir` with the kit's [`Framing`], and the resync) is here; the
//! conversation half (`conn::Conn`: the requests waiting for replies, each a `Unit` on the
//! kit's `RequestCore`, and the open cursors of the connection) is in `session/conn.rs`.

use super::message::{BodyParser, Parsed};
use super::wire::{
    HEADER_LEN, Header, PROBE_LEN, Plausible, is_reply_opcode, is_request_opcode, plausible_start,
};
use crate::kit::{Framing, PerDir, Probe, Sync};
use crate::{ConnMeta, Direction, Health, Outcome, Progress, Session, SessionConfig, Sink};

mod conn;

use conn::Conn;

const CLIENT: Direction = Direction::ToServer;
const SERVER: Direction = Direction::ToClient;

/// The shape text of one request is cut at this many bytes (or at `max_text`, if smaller).
pub const SHAPE_CAP: usize = 64 * 1024;
/// Open cursors remembered per connection (the oldest is forgotten first).
pub const MAX_CURSORS: usize = 256;

/// A message being read.
#[derive(Debug)]
struct InMsg {
    h: Header,
    /// Body bytes still to come.
    left: u64,
    start_ts: u64,
    /// The direction's parser reads the body; `false`: the body is skipped (a reply to
    /// nothing we know, an unknown opcode).
    parsing: bool,
    /// A capture gap cut the body (the framing held).
    damaged: bool,
    /// Body bytes that gaps took (never captured, so never `unparsed_bytes`).
    gap_bytes: u64,
    /// The body failed to parse (counted once).
    parse_failed: bool,
    /// Server side: the unit this reply answers.
    unit: Option<u64>,
}

/// The framing state of one direction.
#[derive(Debug)]
struct Dir {
    hdr: [u8; HEADER_LEN],
    hdr_have: usize,
    hdr_ts: u64,
    msg: Option<InMsg>,
    /// In sync, or lost and searching for a plausible message start (always
    /// `Lost { candidate: true }`: any byte may start a message). Lost, the probe holds the
    /// bytes from the first position not yet judged (fewer than [`PROBE_LEN`]: a message may
    /// start there), with the timestamps of the packets that carried them.
    framing: Framing,
    /// Messages framed in this direction so far.
    messages: u64,
    /// The body parser, made at the first message and started afresh in place for each one
    /// after it (it keeps its buffers).
    parser: Option<BodyParser>,
}

impl Dir {
    /// The body parser, made for this direction's first message.
    fn parser(&mut self, client: bool) -> &mut BodyParser {
        self.parser.get_or_insert_with(|| BodyParser::idle(client))
    }

    fn new(synced: bool) -> Self {
        Dir {
            hdr: [0; HEADER_LEN],
            hdr_have: 0,
            hdr_ts: 0,
            msg: None,
            framing: if synced {
                Framing::synced()
            } else {
                Framing::lost(true)
            },
            messages: 0,
            parser: None,
        }
    }
}

/// Where a message may start in `b` (a direction that lost sync): `Ok` of the first position
/// whose bytes [`plausible_start`] accepts, or `Err` of the first position it cannot judge
/// before `b` ends (`b.len()` if none), every position before it rejected. Judges `b` in
/// place: a look at the opcode rejects most positions before the whole verdict is asked.
fn find_start(b: &[u8], client: bool) -> Result<usize, usize> {
    let mut judged = 0;
    for (p, w) in b.windows(HEADER_LEN).enumerate() {
        judged = p + 1;
        let opcode = match w.get(12..HEADER_LEN).map(<[u8; 4]>::try_from) {
            Some(Ok(o)) => i32::from_le_bytes(o),
            _ => continue,
        };
        // The first check of `plausible_start`: a message of the other side is never a start.
        let side_ok = if client {
            is_request_opcode(opcode)
        } else {
            is_reply_opcode(opcode)
        };
        if !side_ok {
            continue;
        }
        let window = b.get(p..b.len().min(p + PROBE_LEN)).unwrap_or(&[]);
        match plausible_start(window, client) {
            Plausible::Yes => return Ok(p),
            Plausible::NeedMore if window.len() < PROBE_LEN => return Err(p),
            _ => {}
        }
    }
    // The last positions hold less than a header: judged when more bytes come.
    Err(judged.min(b.len()))
}

/// One MongoDB connection.
#[derive(Debug)]
pub struct MongoSession {
    dirs: PerDir<Dir>,
    conn: Conn,
    stopped: bool,
    /// Stopped at a TLS ClientHello: [`Session::start_tls`] resumes the connection.
    tls_stop: bool,
    /// Bytes or a gap were fed: [`Session::start_tls`] cannot start from scratch.
    fed: bool,
    /// `start_tls` resumed a connection counted in `Health::encrypted_connections`: uncounted
    /// at the next call with a sink.
    uncount: bool,
}

impl MongoSession {
    pub fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        // TLS wraps the whole connection: after it, the stream starts as on a seen open.
        let synced = meta.saw_open || meta.after_tls;
        MongoSession {
            dirs: PerDir::new(Dir::new(synced), Dir::new(synced)),
            conn: Conn::new(meta, cfg),
            stopped: false,
            tls_stop: false,
            fed: false,
            uncount: false,
        }
    }

    /// Applies a pending uncount of the encrypted-connection counter.
    fn settle(&mut self, sink: &mut dyn Sink) {
        if std::mem::take(&mut self.uncount) {
            let h = sink.health();
            h.encrypted_connections = h.encrypted_connections.saturating_sub(1);
        }
    }

    /// Open cursors remembered.
    pub fn open_cursors(&self) -> usize {
        self.conn.cursors.len()
    }

    /// Requests waiting for a reply.
    pub fn in_flight(&self) -> usize {
        self.conn.pending.len()
    }

    /// Heap bytes held by the session (framing, parsers, requests in flight, cursors).
    pub fn buffered_bytes(&self) -> usize {
        let dirs: usize = self
            .dirs
            .iter()
            .map(|d| {
                d.framing.probe.heap_bytes()
                    + d.parser.as_ref().map_or(0, |p| match &d.msg {
                        Some(m) if m.parsing => p.buffered_bytes(),
                        _ => p.idle_bytes(),
                    })
            })
            .sum();
        dirs + self.conn.buffered_bytes()
    }

    fn shape_cap(&self) -> usize {
        self.conn.cfg.max_text.min(SHAPE_CAP)
    }

    /// Marks direction `d` as out of sync (it searches for the next message start).
    fn lose(&mut self, d: Direction, health: &mut Health) {
        let dir = &mut self.dirs[d];
        health.unparsed_bytes += dir.hdr_have as u64;
        dir.hdr_have = 0;
        // The probe's bytes (a lost direction's) are unparsed too.
        dir.framing.lose(health);
        dir.framing.candidate();
        if d == Direction::ToServer {
            self.conn.requests_lost();
        } else {
            for u in &mut self.conn.pending {
                u.gap_exposed = true;
            }
        }
    }

    fn feed_dir(&mut self, d: Direction, data: &[u8], ts: u64, sink: &mut dyn Sink) {
        let mut rest = data;
        while !rest.is_empty() && !self.stopped {
            let n = if self.dirs[d].framing.is_synced() {
                self.frame(d, rest, ts, sink)
            } else {
                self.search(d, rest, ts, sink)
            };
            rest = rest.get(n..).unwrap_or(&[]);
        }
    }

    /// Lost: searches the probe and then `input` for a plausible message start, every byte
    /// before it unparsed. Returns the bytes of `input` consumed: those before a start found in
    /// `input` (the direction is then synced and the caller frames the rest), or all of them
    /// (skipped, or kept in the probe when a message may start in their last bytes).
    fn search(&mut self, d: Direction, input: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        let client = d == CLIENT;
        let framing = &mut self.dirs[d].framing;
        if !framing.probe.is_empty() {
            let probe = &mut framing.probe;
            // The probe's positions, judged with the first bytes of `input` after them.
            let mut buf = [0u8; 2 * PROBE_LEN];
            let kept = probe.len().min(PROBE_LEN);
            let extra = input.len().min(PROBE_LEN);
            let avail = kept + extra;
            if let (Some(to), Some(from)) = (buf.get_mut(..kept), probe.bytes().get(..kept)) {
                to.copy_from_slice(from);
            }
            if let (Some(to), Some(from)) = (buf.get_mut(kept..avail), input.get(..extra)) {
                to.copy_from_slice(from);
            }
            // The first position that starts a message (`true`) or that `input` ends too soon
            // to judge (`false`).
            let found = (0..kept).find_map(|p| {
                let window = buf.get(p..avail.min(p + PROBE_LEN)).unwrap_or(&[]);
                match plausible_start(window, client) {
                    Plausible::Yes => Some((p, true)),
                    Plausible::NeedMore if window.len() < PROBE_LEN => Some((p, false)),
                    _ => None,
                }
            });
            let Some((p, start)) = found else {
                sink.health().unparsed_bytes += kept as u64;
                probe.clear();
                return self.search_input(d, input, ts, sink);
            };
            sink.health().unparsed_bytes += p as u64;
            probe.drop_front(p);
            if start {
                let probe = framing.accept_probe();
                self.replay(d, &probe, sink);
                return 0;
            }
            // `input` ends inside the window: all of it joins the probe.
            probe.push(input, ts);
            return input.len();
        }
        self.search_input(d, input, ts, sink)
    }

    /// Lost, nothing in the probe: searches `input` (see [`MongoSession::search`]).
    fn search_input(&mut self, d: Direction, input: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        let framing = &mut self.dirs[d].framing;
        match find_start(input, d == CLIENT) {
            Ok(p) => {
                sink.health().unparsed_bytes += p as u64;
                framing.sync = Sync::Synced;
                p
            }
            Err(p) => {
                sink.health().unparsed_bytes += p as u64;
                framing.probe.push(input.get(p..).unwrap_or(&[]), ts);
                input.len()
            }
        }
    }

    /// Synced again at the start of the probe's bytes: feeds them, each run of bytes with the
    /// timestamp of the packet that carried it.
    fn replay(&mut self, d: Direction, probe: &Probe, sink: &mut dyn Sink) {
        for (run, ts) in probe.runs() {
            if let Some(b) = probe.bytes().get(run) {
                self.feed_dir(d, b, ts, sink);
            }
        }
    }

    /// Synced: consumes bytes of the message in progress (header, then body). Returns how many.
    fn frame(&mut self, d: Direction, input: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        if self.dirs[d].msg.is_none() {
            let dir = &mut self.dirs[d];
            if dir.hdr_have == 0 {
                dir.hdr_ts = ts;
            }
            let n = (HEADER_LEN - dir.hdr_have).min(input.len());
            if let (Some(to), Some(from)) = (
                dir.hdr.get_mut(dir.hdr_have..dir.hdr_have + n),
                input.get(..n),
            ) {
                to.copy_from_slice(from);
            }
            dir.hdr_have += n;
            if dir.hdr_have < HEADER_LEN {
                return n;
            }
            dir.hdr_have = 0;
            let hdr = dir.hdr;
            self.on_header(d, &hdr, sink);
            if let Some(m) = &self.dirs[d].msg
                && m.left == 0
            {
                self.complete(d, ts, sink);
            }
            return n;
        }
        let dir = &mut self.dirs[d];
        let Some(m) = dir.msg.as_mut() else {
            return 0;
        };
        let n = usize::try_from(m.left)
            .unwrap_or(usize::MAX)
            .min(input.len());
        let chunk = input.get(..n).unwrap_or(&[]);
        // After a gap the bytes are not the continuation of what the parser read: it keeps
        // what it read before the gap.
        if m.gap_bytes == 0
            && m.parsing
            && let Some(p) = dir.parser.as_mut()
            && p.push(chunk).is_err()
            && !m.parse_failed
        {
            m.parse_failed = true;
            sink.health().malformed += 1;
            // The parser keeps what it read and skips the rest of the body.
        }
        m.left -= n as u64;
        if m.left == 0 {
            self.complete(d, ts, sink);
        }
        n
    }

    /// A header was read in a synced direction.
    fn on_header(&mut self, d: Direction, hdr: &[u8; HEADER_LEN], sink: &mut dyn Sink) {
        let Some(h) = Header::parse(hdr) else {
            return;
        };
        let ts = self.dirs[d].hdr_ts;
        let client = d == CLIENT;
        let known = super::wire::min_body_len(h.opcode).is_some();
        if client
            && self.dirs[d].messages == 0
            && hdr[0] == 0x16
            && hdr[1] == 0x03
            && !is_request_opcode(h.opcode)
        {
            // A TLS ClientHello: the connection is encrypted.
            sink.health().encrypted_connections += 1;
            self.stopped = true;
            self.tls_stop = true;
            return;
        }
        let side_ok = if client {
            is_request_opcode(h.opcode) || !known
        } else {
            is_reply_opcode(h.opcode) || !known
        };
        if !h.len_ok() || !side_ok {
            sink.health().malformed += 1;
            sink.health().unparsed_bytes += HEADER_LEN as u64;
            self.lose(d, sink.health());
            return;
        }
        self.dirs[d].messages += 1;
        let len = u64::from(h.body_len());
        let shape_cap = self.shape_cap();
        let (parsing, unit) = if client {
            self.dirs[d]
                .parser(true)
                .start_request(h.opcode, len, shape_cap);
            (true, None)
        } else if !known {
            sink.health().malformed += 1;
            sink.health().unparsed_bytes += u64::from(h.len);
            (false, None)
        } else {
            match self.conn.reply_target(&h, ts) {
                Some((id, legacy_cmd)) => {
                    self.dirs[d]
                        .parser(false)
                        .start_reply(h.opcode, len, legacy_cmd);
                    (true, Some(id))
                }
                None => {
                    if self.conn.orphans_before.is_none() {
                        sink.health().responses_without_request += 1;
                    }
                    sink.health().unparsed_bytes += u64::from(h.len);
                    (false, None)
                }
            }
        };
        self.dirs[d].msg = Some(InMsg {
            h,
            left: len,
            start_ts: ts,
            parsing,
            damaged: false,
            gap_bytes: 0,
            parse_failed: false,
            unit,
        });
    }

    /// The message of direction `d` ended (its last byte came at `ts`, or a gap cut it).
    fn complete(&mut self, d: Direction, ts: u64, sink: &mut dyn Sink) {
        let Some(m) = self.dirs[d].msg.take() else {
            return;
        };
        let server_lost = !self.dirs[SERVER].framing.is_synced();
        let parsing = m.parsing;
        let parsed = self.dirs[d].parser.as_mut().filter(|_| parsing).map(|p| {
            let bad = p.finish_here(!m.damaged);
            if bad && !m.damaged && !m.parse_failed {
                sink.health().malformed += 1;
            }
            &*p
        });
        let parsed = parsed.map(BodyParser::parsed);
        if d == CLIENT {
            if let Some(Parsed::Request(req)) = parsed {
                self.conn.on_request(m, req, server_lost, sink);
            }
        } else {
            let reply = match parsed {
                Some(Parsed::Reply(r)) => Some(&**r),
                _ => None,
            };
            self.conn.on_reply(m, reply, ts, sink);
        }
        if parsing && let Some(p) = self.dirs[d].parser.as_mut() {
            p.release();
        }
    }
}

impl Session for MongoSession {
    fn feed(&mut self, dir: Direction, data: &[u8], ts_ns: u64, sink: &mut dyn Sink) -> Progress {
        self.settle(sink);
        self.fed |= !data.is_empty();
        if !self.stopped {
            self.feed_dir(dir, data, ts_ns, sink);
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
        if self.stopped || len == 0 {
            return;
        }
        let d = dir;
        if !self.dirs[d].framing.is_synced() {
            // The probe's bytes are unparsed.
            self.lose(d, sink.health());
            return;
        }
        match self.dirs[d].msg.as_mut() {
            Some(m) if m.left >= len => {
                // The hole is inside this message: the framing holds.
                m.damaged = true;
                m.left -= len;
                m.gap_bytes += len;
                if d == SERVER
                    && let Some(uid) = m.unit
                    && let Some(u) = self.conn.pending.iter_mut().find(|u| u.id == uid)
                {
                    u.core.damaged = true;
                }
                if m.left == 0 {
                    self.complete(d, ts_ns, sink);
                }
            }
            Some(m) => {
                // The hole ends past this message: its end was lost, then the framing.
                m.damaged = true;
                m.gap_bytes += m.left;
                m.left = 0;
                self.complete(d, ts_ns, sink);
                self.lose(d, sink.health());
            }
            None => self.lose(d, sink.health()),
        }
    }

    fn close(&mut self, _ts_ns: u64, sink: &mut dyn Sink) {
        self.settle(sink);
        for d in [CLIENT, SERVER] {
            let dir = &mut self.dirs[d];
            let mut lost = dir.framing.probe.clear() + dir.hdr_have as u64;
            dir.hdr_have = 0;
            if let Some(m) = dir.msg.take() {
                // Bytes of the unfinished message that were captured: the gaps' are not.
                lost += (u64::from(m.h.len) - m.left).saturating_sub(m.gap_bytes);
                if d == SERVER
                    && let Some(uid) = m.unit
                    && let Some(u) = self.conn.pending.iter_mut().find(|u| u.id == uid)
                {
                    u.core.damaged = true;
                }
            }
            sink.health().unparsed_bytes += lost;
        }
        while let Some(u) = self.conn.pending.pop_front() {
            let outcome = if u.core.first_response_ns.is_some() || u.gap_exposed || u.core.damaged {
                Outcome::Incomplete
            } else {
                Outcome::NoResponse
            };
            let ev = self.conn.event(u, outcome);
            sink.event(ev);
        }
    }

    /// MongoDB has no in-protocol switch to TLS: TLS wraps the whole connection. Told so
    /// before any byte, the session reads the decrypted stream as after an open (true); after
    /// the session stopped at the ClientHello (the ciphertext's first bytes), it starts over
    /// in sync at the first decrypted message and the connection is no longer counted as
    /// encrypted (true); after anything else was fed, false.
    fn start_tls(&mut self) -> bool {
        if self.tls_stop {
            self.tls_stop = false;
            self.stopped = false;
            self.uncount = true;
            self.dirs = PerDir::new(Dir::new(true), Dir::new(true));
            return true;
        }
        !self.fed && !self.stopped
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
