//! The MongoDB connection state machine: framing of both directions, requests paired with
//! replies by `responseTo`, exhaust replies, requests that want no reply, cursors followed
//! from the command that opened them to the getMores that read them, mid-stream pickup and
//! resynchronization after gaps.
//!
//! Layers: raw bytes -> messages (the 16-byte header and a body streamed through a
//! [`BodyParser`]) -> [`Request`] / [`Reply`] summaries -> this state machine, which keeps the
//! requests waiting for replies ([`Unit`]) and the open cursors of the connection.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

use super::message::{BodyParser, Parsed, Reply, ReqKind, Request};
use super::wire::{
    HEADER_LEN, Header, PROBE_LEN, Plausible, is_reply_opcode, is_request_opcode, op,
    plausible_start,
};
use crate::{
    ConnMeta, DbError, Direction, Health, Outcome, Progress, Protocol, QueryEvent, Session,
    SessionConfig, Sink,
};

const CLIENT: usize = 0;
const SERVER: usize = 1;
/// The shape text of one request is cut at this many bytes (or at `max_text`, if smaller).
pub const SHAPE_CAP: usize = 64 * 1024;
/// Open cursors remembered per connection (the oldest is forgotten first).
pub const MAX_CURSORS: usize = 256;

fn idx(d: Direction) -> usize {
    match d {
        Direction::ToServer => CLIENT,
        Direction::ToClient => SERVER,
    }
}

/// A message being read.
#[derive(Debug)]
struct InMsg {
    h: Header,
    /// Body bytes still to come.
    left: u64,
    start_ts: u64,
    /// `None`: the body is skipped (a reply to nothing we know, an unknown opcode).
    parser: Option<BodyParser>,
    /// A capture gap cut the body (the framing held).
    damaged: bool,
    /// The body failed to parse (counted once).
    parse_failed: bool,
    /// Server side: the unit this reply answers.
    unit: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    Synced,
    /// Searching for a plausible message start.
    Lost,
}

/// The framing state of one direction.
#[derive(Debug)]
struct Dir {
    hdr: [u8; HEADER_LEN],
    hdr_have: usize,
    hdr_ts: u64,
    msg: Option<InMsg>,
    sync: Sync,
    /// Lost: the bytes from the first position not yet judged (fewer than [`PROBE_LEN`]: a
    /// message may start there), with the timestamp of the packet that carried each.
    probe: Vec<(u8, u64)>,
    /// Messages framed in this direction so far.
    messages: u64,
}

impl Dir {
    fn new(sync: Sync) -> Self {
        Dir {
            hdr: [0; HEADER_LEN],
            hdr_have: 0,
            hdr_ts: 0,
            msg: None,
            sync,
            probe: Vec::new(),
            messages: 0,
        }
    }
}

/// What a reply adds to its request's row counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rows {
    /// Documents of a cursor batch (find, aggregate, getMore, list*).
    Batch,
    /// `n` (insert, delete).
    N,
    /// `nModified` plus upserts (update).
    Modified,
    /// `lastErrorObject.n` (findAndModify).
    LastError,
    /// distinct's `values`.
    Values,
    /// Legacy OP_REPLY documents (OP_QUERY, OP_GET_MORE).
    Legacy,
}

/// A request waiting for its reply (or replies).
#[derive(Debug)]
struct Unit {
    id: u64,
    /// The `responseTo` the next reply carries: the request's id, then (exhaust) the id of the
    /// previous reply.
    expect: i32,
    command: &'static str,
    text: Option<Arc<str>>,
    text_truncated: bool,
    database: Option<Arc<str>>,
    start_ns: u64,
    first_response_ns: Option<u64>,
    end_ns: Option<u64>,
    bytes_in: u64,
    bytes_out: u64,
    rows_sent: u64,
    rows_affected: u64,
    error: Option<DbError>,
    damaged: bool,
    /// Reply bytes may have been lost in a server-side gap while it waited.
    gap_exposed: bool,
    /// An OP_QUERY on `$cmd`: the OP_REPLY's first document is the command's reply.
    legacy_cmd: bool,
    rows: Rows,
    /// The text a getMore on the cursor this request opens will carry.
    cursor_text: Option<Arc<str>>,
    /// A getMore: the cursor it reads (forgotten when the reply says it is exhausted).
    reads_cursor: Option<i64>,
}

/// The conversation: everything but the framing.
#[derive(Debug)]
struct Conn {
    meta: ConnMeta,
    cfg: SessionConfig,
    pending: VecDeque<Unit>,
    next_id: u64,
    /// Open cursors: id and the getMore text of the command that opened it.
    cursors: VecDeque<(i64, Arc<str>)>,
    last_db: Option<Arc<str>>,
    /// Requests were lost (pickup, client gap, overflow) before the unit with this id: replies
    /// to nothing are theirs, until a reply to this unit or a later one comes.
    orphans_before: Option<u64>,
}

/// Writes a database or collection name into text: bytes that would confuse the text's
/// format (space and control characters, `%`) are percent-escaped.
fn push_name(out: &mut String, name: &[u8]) {
    let s = String::from_utf8_lossy(name);
    for c in s.chars() {
        if c <= ' ' || c == '%' || c == '\u{7f}' {
            let _ = write!(out, "%{:02X}", c as u32);
        } else {
            out.push(c);
        }
    }
}

/// Cuts `s` to at most `max` bytes at a char boundary.
fn cut(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut n = max;
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    s.truncate(n);
    true
}

impl Conn {
    /// Requests were lost here: their replies may come.
    fn requests_lost(&mut self) {
        if self.orphans_before.is_none() {
            self.orphans_before = Some(self.next_id);
        }
    }

    fn database(&mut self, db: Option<&[u8]>) -> Option<Arc<str>> {
        let db = db?;
        let s = String::from_utf8_lossy(db);
        match &self.last_db {
            Some(a) if **a == *s => Some(a.clone()),
            _ => {
                let a: Arc<str> = Arc::from(s.as_ref());
                self.last_db = Some(a.clone());
                Some(a)
            }
        }
    }

    fn cursor_text(&self, id: i64) -> Option<Arc<str>> {
        self.cursors
            .iter()
            .find(|(c, _)| *c == id)
            .map(|(_, t)| t.clone())
    }

    fn forget_cursor(&mut self, id: i64) {
        self.cursors.retain(|(c, _)| *c != id);
    }

    fn remember_cursor(&mut self, id: i64, text: Arc<str>) {
        self.forget_cursor(id);
        if self.cursors.len() >= MAX_CURSORS {
            self.cursors.pop_front();
        }
        self.cursors.push_back((id, text));
    }

    fn event(&self, u: Unit, outcome: Outcome) -> QueryEvent {
        QueryEvent {
            protocol: Protocol::Mongodb,
            conn: self.meta.id,
            client: self.meta.client,
            server: self.meta.server,
            start_ns: u.start_ns,
            first_response_ns: u.first_response_ns,
            end_ns: u.end_ns,
            user: None,
            database: u.database,
            command: u.command,
            text: u.text,
            text_truncated: u.text_truncated,
            statement_id: None,
            bytes_in: u.bytes_in,
            bytes_out: u.bytes_out,
            rows_sent: u.rows_sent,
            rows_affected: u.rows_affected,
            warnings: 0,
            outcome,
            error: u.error,
        }
    }

    /// A complete request: its unit, with text.
    fn request(
        &mut self,
        h: &Header,
        start_ns: u64,
        req: &Request,
        damaged: bool,
        wire: u64,
    ) -> Unit {
        let database = self.database(req.db.as_deref());
        let mut ns = String::new();
        match &req.db {
            Some(db) => push_name(&mut ns, db),
            None => ns.push('?'),
        }
        if let Some(c) = &req.collection {
            ns.push('.');
            push_name(&mut ns, c);
        }
        let shape = req.shape.members();
        let mut rest = ns;
        if !shape.is_empty() {
            rest.push_str(" {");
            rest.push_str(shape);
            rest.push('}');
        }
        let mut truncated = req.shape.truncated();
        let getmore = req.is("getmore") || matches!(req.kind, ReqKind::Legacy(op::GET_MORE));
        let mut text = None;
        if getmore && let Some(id) = req.cursor_id {
            // The text of the command that opened the cursor.
            if let Some(t) = self.cursor_text(id) {
                text = Some(if req.is("getmore") {
                    t
                } else {
                    let tail = t.split_once(' ').map_or("", |x| x.1);
                    Arc::from(format!("OP_GET_MORE {tail}"))
                });
            }
        }
        let max = self.cfg.max_text;
        let text = match text {
            Some(t) => t,
            None => {
                let mut s = format!("{} {}", req.text_name(), rest);
                truncated |= cut(&mut s, max);
                Arc::from(s)
            }
        };
        let opens_cursor = req.is("find")
            || req.is("aggregate")
            || req.is("listcollections")
            || req.is("listindexes")
            || matches!(req.kind, ReqKind::Legacy(op::QUERY));
        let cursor_text = opens_cursor.then(|| {
            let mut s = format!("getMore {rest}");
            cut(&mut s, max);
            Arc::from(s)
        });
        let rows = match req.command_name() {
            "insert" | "delete" => Rows::N,
            "update" => Rows::Modified,
            "findandmodify" => Rows::LastError,
            "distinct" => Rows::Values,
            "op_query" | "op_get_more" => Rows::Legacy,
            _ => Rows::Batch,
        };
        for id in &req.kill_ids {
            self.forget_cursor(*id);
        }
        let id = self.next_id;
        self.next_id += 1;
        Unit {
            id,
            expect: h.request_id,
            command: req.command_name(),
            text: (!matches!(req.kind, ReqKind::Unknown(_))).then_some(text),
            text_truncated: truncated,
            database,
            start_ns,
            first_response_ns: None,
            end_ns: None,
            bytes_in: wire,
            bytes_out: 0,
            rows_sent: 0,
            rows_affected: 0,
            error: None,
            damaged: damaged || req.malformed,
            gap_exposed: false,
            legacy_cmd: matches!(req.kind, ReqKind::Command(_)) && h.opcode != op::MSG,
            rows,
            cursor_text,
            reads_cursor: if getmore { req.cursor_id } else { None },
        }
    }

    fn on_request(&mut self, m: InMsg, parsed: Parsed, server_lost: bool, sink: &mut dyn Sink) {
        let Parsed::Request(req) = parsed else {
            return;
        };
        let wire = u64::from(m.h.len);
        let mut u = self.request(&m.h, m.start_ts, &req, m.damaged, wire);
        // Sent while the server side is out of sync: its reply may be lost.
        u.gap_exposed = server_lost;
        if req.expects_no_reply() {
            // Unacknowledged writes: what was sent is all there is to count.
            u.rows_affected = req.docs;
            let ev = self.event(u, Outcome::NoReplyExpected);
            sink.event(ev);
            return;
        }
        if self.pending.len() >= self.cfg.max_inflight.max(1) {
            sink.health().inflight_overflow += 1;
            self.requests_lost();
            return;
        }
        self.pending.push_back(u);
    }

    /// A reply header: the unit it answers.
    fn reply_target(&mut self, h: &Header, ts: u64) -> Option<(u64, bool)> {
        let u = self
            .pending
            .iter_mut()
            .find(|u| u.expect == h.response_to)?;
        if u.first_response_ns.is_none() {
            u.first_response_ns = Some(ts);
        }
        Some((u.id, u.legacy_cmd))
    }

    fn on_reply(&mut self, m: InMsg, parsed: Option<Parsed>, end_ts: u64, sink: &mut dyn Sink) {
        let Some(uid) = m.unit else {
            return;
        };
        let Some(i) = self.pending.iter().position(|u| u.id == uid) else {
            return;
        };
        let reply: Option<Box<Reply>> = match parsed {
            Some(Parsed::Reply(r)) => Some(r),
            _ => None,
        };
        let more = reply.as_ref().is_some_and(|r| r.more_to_come());
        let mut open_cursor = None;
        let mut exhausted = None;
        {
            let Some(u) = self.pending.get_mut(i) else {
                return;
            };
            u.bytes_out += u64::from(m.h.len);
            u.end_ns = Some(end_ts);
            u.damaged |= m.damaged;
            match &reply {
                None => u.damaged = true,
                Some(r) => {
                    u.damaged |= r.malformed;
                    let legacy = u.rows == Rows::Legacy && !u.legacy_cmd;
                    match u.rows {
                        Rows::Batch => u.rows_sent += r.batch,
                        Rows::Values => u.rows_sent += r.values,
                        Rows::Legacy if legacy => u.rows_sent += r.legacy_docs,
                        Rows::Legacy => u.rows_sent += r.batch,
                        Rows::N => u.rows_affected += r.n.unwrap_or(0).max(0) as u64,
                        Rows::Modified => {
                            u.rows_affected += r.n_modified.unwrap_or(0).max(0) as u64 + r.upserted
                        }
                        Rows::LastError => {
                            u.rows_affected += r.last_error_n.unwrap_or(0).max(0) as u64
                        }
                    }
                    if u.error.is_none()
                        && let Some((code, name, msg)) = r.error()
                    {
                        u.error = Some(DbError {
                            code: u32::try_from(code).unwrap_or(0),
                            state: name.map(Into::into),
                            message: msg.into(),
                        });
                    }
                    let cursor = if legacy {
                        Some(r.legacy_cursor_id)
                    } else {
                        r.cursor_id
                    };
                    if let Some(c) = cursor {
                        if c != 0 {
                            if let Some(t) = &u.cursor_text {
                                open_cursor = Some((c, t.clone()));
                            }
                        } else if let Some(read) = u.reads_cursor {
                            exhausted = Some(read);
                        }
                    }
                    if more {
                        u.expect = m.h.request_id;
                    }
                }
            }
        }
        if let Some((c, t)) = open_cursor {
            self.remember_cursor(c, t);
        }
        if let Some(c) = exhausted {
            self.forget_cursor(c);
        }
        if more {
            return;
        }
        // Replies come in request order: older requests exposed to a server-side gap lost
        // theirs.
        while self
            .pending
            .front()
            .is_some_and(|u| u.id != uid && u.gap_exposed)
        {
            if let Some(old) = self.pending.pop_front() {
                let ev = self.event(old, Outcome::Incomplete);
                sink.event(ev);
            }
        }
        if let Some(pos) = self.pending.iter().position(|u| u.id == uid)
            && let Some(u) = self.pending.remove(pos)
        {
            if self.orphans_before.is_some_and(|b| uid >= b) {
                self.orphans_before = None;
            }
            let outcome = if u.error.is_some() {
                Outcome::Error
            } else if u.damaged {
                Outcome::Incomplete
            } else {
                Outcome::Ok
            };
            let ev = self.event(u, outcome);
            sink.event(ev);
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
    dirs: [Dir; 2],
    conn: Conn,
    stopped: bool,
}

impl MongoSession {
    pub fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        let sync = if meta.saw_open {
            Sync::Synced
        } else {
            Sync::Lost
        };
        MongoSession {
            dirs: [Dir::new(sync), Dir::new(sync)],
            conn: Conn {
                orphans_before: (!meta.saw_open).then_some(0),
                meta,
                cfg,
                pending: VecDeque::new(),
                next_id: 0,
                cursors: VecDeque::new(),
                last_db: None,
            },
            stopped: false,
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
                d.probe.capacity() * 16
                    + d.msg
                        .as_ref()
                        .and_then(|m| m.parser.as_ref())
                        .map_or(0, BodyParser::buffered_bytes)
            })
            .sum();
        let units: usize = self
            .conn
            .pending
            .iter()
            .map(|u| {
                std::mem::size_of::<Unit>()
                    + u.text.as_ref().map_or(0, |t| t.len())
                    + u.cursor_text.as_ref().map_or(0, |t| t.len())
                    + u.error.as_ref().map_or(0, |e| e.message.len())
            })
            .sum();
        let cursors: usize = self.conn.cursors.iter().map(|c| c.1.len() + 32).sum();
        dirs + units + cursors
    }

    fn shape_cap(&self) -> usize {
        self.conn.cfg.max_text.min(SHAPE_CAP)
    }

    /// Marks direction `d` as out of sync (it searches for the next message start).
    fn lose(&mut self, d: usize, health: &mut Health) {
        let dir = &mut self.dirs[d];
        health.unparsed_bytes += dir.hdr_have as u64;
        dir.hdr_have = 0;
        if dir.sync == Sync::Synced {
            health.resyncs += 1;
        }
        dir.sync = Sync::Lost;
        if d == CLIENT {
            self.conn.requests_lost();
        } else {
            for u in &mut self.conn.pending {
                u.gap_exposed = true;
            }
        }
    }

    fn feed_dir(&mut self, d: usize, data: &[u8], ts: u64, sink: &mut dyn Sink) {
        let mut rest = data;
        while !rest.is_empty() && !self.stopped {
            let n = match self.dirs[d].sync {
                Sync::Synced => self.frame(d, rest, ts, sink),
                Sync::Lost => self.search(d, rest, ts, sink),
            };
            rest = rest.get(n..).unwrap_or(&[]);
        }
    }

    /// Lost: searches the probe and then `input` for a plausible message start, every byte
    /// before it unparsed. Returns the bytes of `input` consumed: those before a start found in
    /// `input` (the direction is then synced and the caller frames the rest), or all of them
    /// (skipped, or kept in the probe when a message may start in their last bytes).
    fn search(&mut self, d: usize, input: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        let client = d == CLIENT;
        if !self.dirs[d].probe.is_empty() {
            let mut probe = std::mem::take(&mut self.dirs[d].probe);
            // The probe's positions, judged with the first bytes of `input` after them.
            let mut buf = [0u8; 2 * PROBE_LEN];
            let kept = probe.len().min(PROBE_LEN);
            let extra = input.len().min(PROBE_LEN);
            for (b, p) in buf.iter_mut().zip(&probe) {
                *b = p.0;
            }
            let avail = kept + extra;
            if let (Some(to), Some(from)) = (buf.get_mut(kept..avail), input.get(..extra)) {
                to.copy_from_slice(from);
            }
            for p in 0..kept {
                let window = buf.get(p..avail.min(p + PROBE_LEN)).unwrap_or(&[]);
                match plausible_start(window, client) {
                    Plausible::Yes => {
                        sink.health().unparsed_bytes += p as u64;
                        probe.drain(..p);
                        self.dirs[d].sync = Sync::Synced;
                        self.replay(d, &probe, sink);
                        return 0;
                    }
                    // `input` ends inside the window: all of it joins the probe.
                    Plausible::NeedMore if window.len() < PROBE_LEN => {
                        sink.health().unparsed_bytes += p as u64;
                        probe.drain(..p);
                        probe.extend(input.iter().map(|b| (*b, ts)));
                        self.dirs[d].probe = probe;
                        return input.len();
                    }
                    _ => {}
                }
            }
            sink.health().unparsed_bytes += kept as u64;
            probe.clear();
            self.dirs[d].probe = probe;
        }
        match find_start(input, client) {
            Ok(p) => {
                sink.health().unparsed_bytes += p as u64;
                self.dirs[d].sync = Sync::Synced;
                p
            }
            Err(p) => {
                sink.health().unparsed_bytes += p as u64;
                let tail = input.get(p..).unwrap_or(&[]);
                self.dirs[d].probe.extend(tail.iter().map(|b| (*b, ts)));
                input.len()
            }
        }
    }

    /// Synced again at the start of the probe's bytes: feeds them, each run of bytes with the
    /// timestamp of the packet that carried it.
    fn replay(&mut self, d: usize, probe: &[(u8, u64)], sink: &mut dyn Sink) {
        let bytes: Vec<u8> = probe.iter().map(|p| p.0).collect();
        for (run, ts) in crate::timestamp_runs(probe) {
            if let Some(b) = bytes.get(run) {
                self.feed_dir(d, b, ts, sink);
            }
        }
    }

    /// Synced: consumes bytes of the message in progress (header, then body). Returns how many.
    fn frame(&mut self, d: usize, input: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        if self.dirs[d].msg.is_none() {
            let dir = &mut self.dirs[d];
            if dir.hdr_have == 0 {
                dir.hdr_ts = ts;
            }
            let n = (HEADER_LEN - dir.hdr_have).min(input.len());
            dir.hdr[dir.hdr_have..dir.hdr_have + n].copy_from_slice(&input[..n]);
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
        let Some(m) = self.dirs[d].msg.as_mut() else {
            return 0;
        };
        let n = usize::try_from(m.left)
            .unwrap_or(usize::MAX)
            .min(input.len());
        let chunk = &input[..n];
        if let Some(p) = m.parser.as_mut()
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
    fn on_header(&mut self, d: usize, hdr: &[u8; HEADER_LEN], sink: &mut dyn Sink) {
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
        let (parser, unit) = if client {
            (
                Some(BodyParser::request(h.opcode, len, self.shape_cap())),
                None,
            )
        } else if !known {
            sink.health().malformed += 1;
            sink.health().unparsed_bytes += u64::from(h.len);
            (None, None)
        } else {
            match self.conn.reply_target(&h, ts) {
                Some((id, legacy_cmd)) => {
                    (Some(BodyParser::reply(h.opcode, len, legacy_cmd)), Some(id))
                }
                None => {
                    if self.conn.orphans_before.is_none() {
                        sink.health().responses_without_request += 1;
                    }
                    sink.health().unparsed_bytes += u64::from(h.len);
                    (None, None)
                }
            }
        };
        self.dirs[d].msg = Some(InMsg {
            h,
            left: len,
            start_ts: ts,
            parser,
            damaged: false,
            parse_failed: false,
            unit,
        });
    }

    /// The message of direction `d` ended (its last byte came at `ts`, or a gap cut it).
    fn complete(&mut self, d: usize, ts: u64, sink: &mut dyn Sink) {
        let Some(mut m) = self.dirs[d].msg.take() else {
            return;
        };
        let parsed = m.parser.take().map(|p| {
            let (parsed, bad) = p.finish(!m.damaged);
            if bad && !m.damaged && !m.parse_failed {
                sink.health().malformed += 1;
            }
            parsed
        });
        if d == CLIENT {
            if let Some(parsed) = parsed {
                let server_lost = self.dirs[SERVER].sync == Sync::Lost;
                self.conn.on_request(m, parsed, server_lost, sink);
            }
        } else {
            self.conn.on_reply(m, parsed, ts, sink);
        }
    }
}

impl Session for MongoSession {
    fn feed(&mut self, dir: Direction, data: &[u8], ts_ns: u64, sink: &mut dyn Sink) -> Progress {
        if !self.stopped {
            self.feed_dir(idx(dir), data, ts_ns, sink);
        }
        if self.stopped {
            Progress::Stop
        } else {
            Progress::Continue
        }
    }

    fn gap(&mut self, dir: Direction, len: u64, ts_ns: u64, sink: &mut dyn Sink) {
        if self.stopped || len == 0 {
            return;
        }
        let d = idx(dir);
        if self.dirs[d].sync == Sync::Lost {
            let n = self.dirs[d].probe.len() as u64;
            self.dirs[d].probe.clear();
            sink.health().unparsed_bytes += n;
            self.lose(d, sink.health());
            return;
        }
        match self.dirs[d].msg.as_mut() {
            Some(m) if m.left >= len => {
                // The hole is inside this message: the framing holds.
                m.damaged = true;
                m.left -= len;
                if d == SERVER
                    && let Some(uid) = m.unit
                    && let Some(u) = self.conn.pending.iter_mut().find(|u| u.id == uid)
                {
                    u.damaged = true;
                }
                if m.left == 0 {
                    self.complete(d, ts_ns, sink);
                }
            }
            Some(m) => {
                m.damaged = true;
                m.left = 0;
                self.complete(d, ts_ns, sink);
                self.lose(d, sink.health());
            }
            None => self.lose(d, sink.health()),
        }
    }

    fn close(&mut self, _ts_ns: u64, sink: &mut dyn Sink) {
        for d in [CLIENT, SERVER] {
            let dir = &mut self.dirs[d];
            let mut lost = dir.probe.len() as u64 + dir.hdr_have as u64;
            dir.probe.clear();
            dir.hdr_have = 0;
            if let Some(m) = dir.msg.take() {
                lost += u64::from(m.h.len) - m.left;
                if d == SERVER
                    && let Some(uid) = m.unit
                    && let Some(u) = self.conn.pending.iter_mut().find(|u| u.id == uid)
                {
                    u.damaged = true;
                }
            }
            sink.health().unparsed_bytes += lost;
        }
        while let Some(u) = self.conn.pending.pop_front() {
            let outcome = if u.first_response_ns.is_some() || u.gap_exposed || u.damaged {
                Outcome::Incomplete
            } else {
                Outcome::NoResponse
            };
            let ev = self.conn.event(u, outcome);
            sink.event(ev);
        }
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
