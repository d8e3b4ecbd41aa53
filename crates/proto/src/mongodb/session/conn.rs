//! The MongoDB conversation: the requests waiting for replies (each a [`Unit`] on the kit's
//! [`RequestCore`]), their text, replies paired by `responseTo` (exhaust replies included),
//! row counts and errors, and the open cursors followed from the command that opened them to
//! the getMores that read them. Everything but the framing (in [`super::MongoSession`]).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

use super::super::message::{Reply, ReqKind, Request};
use super::super::wire::{Header, op};
use super::{InMsg, MAX_CURSORS};
use crate::kit::{Origin, RecentTexts, RequestCore, Tags};
use crate::{ConnMeta, DbError, Outcome, Protocol, QueryEvent, SessionConfig, Sink};

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
pub(super) struct Unit {
    pub(super) id: u64,
    /// The `responseTo` the next reply carries: the request's id, then (exhaust) the id of the
    /// previous reply.
    expect: i32,
    /// Timestamps, bytes, rows, error, text.
    pub(super) core: RequestCore,
    command: &'static str,
    database: Option<Arc<str>>,
    /// Reply bytes may have been lost in a server-side gap while it waited.
    pub(super) gap_exposed: bool,
    /// An OP_QUERY on `$cmd`: the OP_REPLY's first document is the command's reply.
    legacy_cmd: bool,
    rows: Rows,
    /// The text a getMore on the cursor this request opens will carry.
    cursor_text: Option<Arc<str>>,
    /// A getMore: the cursor it reads (forgotten when the reply says it is exhausted).
    reads_cursor: Option<i64>,
}

impl Unit {
    /// A reply `r` (header `h`; `more`: another reply follows) adds its rows and error.
    /// Returns the cursor it opens (with its getMore text) and the cursor it says is
    /// exhausted.
    fn answered(
        &mut self,
        r: &Reply,
        h: &Header,
        more: bool,
    ) -> (Option<(i64, Arc<str>)>, Option<i64>) {
        let u = self;
        let mut open_cursor = None;
        let mut exhausted = None;
        u.core.damaged |= r.malformed;
        let legacy = u.rows == Rows::Legacy && !u.legacy_cmd;
        let c = &mut u.core;
        match u.rows {
            Rows::Batch => c.rows_sent += r.batch,
            Rows::Values => c.rows_sent += r.values,
            Rows::Legacy if legacy => c.rows_sent += r.legacy_docs,
            Rows::Legacy => c.rows_sent += r.batch,
            Rows::N => c.rows_affected += r.n.unwrap_or(0).max(0) as u64,
            Rows::Modified => {
                c.rows_affected += r.n_modified.unwrap_or(0).max(0) as u64 + r.upserted
            }
            Rows::LastError => c.rows_affected += r.last_error_n.unwrap_or(0).max(0) as u64,
        }
        if c.error.is_none()
            && let Some((code, name, msg)) = r.error()
        {
            c.error = Some(DbError {
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
            u.expect = h.request_id;
        }
        (open_cursor, exhausted)
    }
}

/// The conversation: everything but the framing.
#[derive(Debug)]
pub(super) struct Conn {
    meta: ConnMeta,
    pub(super) cfg: SessionConfig,
    pub(super) pending: VecDeque<Unit>,
    next_id: u64,
    /// Open cursors: id and the getMore text of the command that opened it.
    pub(super) cursors: VecDeque<(i64, Arc<str>)>,
    last_db: Option<Arc<str>>,
    /// Texts built last (request text, cursor text; one each) and the buffer they are built
    /// in: a request repeating the last shape shares its text instead of a new allocation.
    last_text: RecentTexts,
    last_cursor_text: RecentTexts,
    buf: String,
    text_buf: String,
    /// Requests were lost (pickup, client gap, overflow) before the unit with this id: replies
    /// to nothing are theirs, until a reply to this unit or a later one comes.
    pub(super) orphans_before: Option<u64>,
}

/// Writes a database or collection name into text: bytes that would confuse the text's
/// format (space and control characters, `%`) are percent-escaped.
fn push_name(out: &mut String, name: &[u8]) {
    // The usual name: printable ASCII, nothing to escape, copied in the one pass that checks
    // it (an ASCII byte is its own char); anything else starts over on the escaping path.
    let start = out.len();
    out.reserve(name.len());
    for &b in name {
        if b > b' ' && b < 0x7f && b != b'%' {
            out.push(char::from(b));
        } else {
            out.truncate(start);
            push_name_escaped(out, name);
            return;
        }
    }
}

/// [`push_name`] for a name with bytes to escape (or not UTF-8).
fn push_name_escaped(out: &mut String, name: &[u8]) {
    let s = String::from_utf8_lossy(name);
    for c in s.chars() {
        if c <= ' ' || c == '%' || c == '\u{7f}' {
            let _ = write!(out, "%{:02X}", c as u32);
        } else {
            out.push(c);
        }
    }
}

/// Appends what follows the command name in a request's text: `<db>[.<collection>]` and the
/// shape in braces, if any.
fn push_rest(out: &mut String, req: &Request) {
    match &req.db {
        Some(db) => push_name(out, db),
        None => out.push('?'),
    }
    if let Some(c) = &req.collection {
        out.push('.');
        push_name(out, c);
    }
    let shape = req.shape.members();
    if !shape.is_empty() {
        out.push_str(" {");
        out.push_str(shape);
        out.push('}');
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
    pub(super) fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        Conn {
            orphans_before: (!meta.saw_open).then_some(0),
            meta,
            cfg,
            pending: VecDeque::new(),
            next_id: 0,
            cursors: VecDeque::new(),
            last_db: None,
            last_text: RecentTexts::new(1, usize::MAX),
            last_cursor_text: RecentTexts::new(1, usize::MAX),
            buf: String::new(),
            text_buf: String::new(),
        }
    }

    /// Heap bytes of the requests in flight and the cursors remembered.
    pub(super) fn buffered_bytes(&self) -> usize {
        let units: usize = self
            .pending
            .iter()
            .map(|u| {
                std::mem::size_of::<Unit>()
                    + u.core.text.as_ref().map_or(0, |t| t.len())
                    + u.cursor_text.as_ref().map_or(0, |t| t.len())
                    + u.core.error.as_ref().map_or(0, |e| e.message.len())
            })
            .sum();
        let cursors: usize = self.cursors.iter().map(|c| c.1.len() + 32).sum();
        let texts = self.buf.capacity()
            + self.text_buf.capacity()
            + self.last_text.heap_bytes()
            + self.last_cursor_text.heap_bytes();
        units + cursors + texts
    }

    /// Requests were lost here: their replies may come.
    pub(super) fn requests_lost(&mut self) {
        if self.orphans_before.is_none() {
            self.orphans_before = Some(self.next_id);
        }
    }

    fn database(&mut self, db: Option<&[u8]>) -> Option<Arc<str>> {
        let db = db?;
        // The same database as last time (its bytes are then valid UTF-8, which the lossy
        // reading keeps as they are): shared without reading the name again.
        if let Some(a) = &self.last_db
            && a.as_bytes() == db
        {
            return Some(a.clone());
        }
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

    pub(super) fn event(&self, u: Unit, outcome: Outcome) -> QueryEvent {
        let origin = Origin {
            protocol: Protocol::Mongodb,
            meta: &self.meta,
        };
        let tags = Tags::new(u.command).user_db(None, u.database);
        u.core.into_event(origin, tags, outcome)
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
        // The text is `<name> <rest>` and the cursor's `getMore <rest>`, built in one buffer:
        // `getMore ` first, then `<rest>`.
        const GETMORE: &str = "getMore ";
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.push_str(GETMORE);
        push_rest(&mut buf, req);
        let rest = buf.get(GETMORE.len()..).unwrap_or("");
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
                let s = &mut self.text_buf;
                s.clear();
                s.push_str(req.text_name());
                s.push(' ');
                s.push_str(rest);
                truncated |= cut(s, max);
                let t = self.last_text.share(s);
                if s.capacity() > 4096 {
                    *s = String::new();
                }
                t
            }
        };
        let opens_cursor = req.is("find")
            || req.is("aggregate")
            || req.is("listcollections")
            || req.is("listindexes")
            || matches!(req.kind, ReqKind::Legacy(op::QUERY));
        let cursor_text = opens_cursor.then(|| {
            cut(&mut buf, max);
            self.last_cursor_text.share(&buf)
        });
        // The buffer is kept for the next request unless one huge text grew it.
        if buf.capacity() <= 4096 {
            self.buf = buf;
        }
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
        let mut core = RequestCore::new(start_ns, wire);
        core.text = (!matches!(req.kind, ReqKind::Unknown(_))).then_some(text);
        core.text_truncated = truncated;
        core.damaged = damaged || req.malformed;
        Unit {
            id,
            expect: h.request_id,
            core,
            command: req.command_name(),
            database,
            gap_exposed: false,
            legacy_cmd: matches!(req.kind, ReqKind::Command(_)) && h.opcode != op::MSG,
            rows,
            cursor_text,
            reads_cursor: if getmore { req.cursor_id } else { None },
        }
    }

    pub(super) fn on_request(
        &mut self,
        m: InMsg,
        req: &Request,
        server_lost: bool,
        sink: &mut dyn Sink,
    ) {
        let wire = u64::from(m.h.len);
        let mut u = self.request(&m.h, m.start_ts, req, m.damaged, wire);
        // Bytes of it were lost in a gap inside its announced length: its text is the shape
        // of what was read before the gap.
        u.core.text_partial = m.gap_bytes > 0;
        // Sent while the server side is out of sync: its reply may be lost.
        u.gap_exposed = server_lost;
        if req.expects_no_reply() {
            // Unacknowledged writes: what was sent is all there is to count.
            u.core.rows_affected = req.docs;
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
    pub(super) fn reply_target(&mut self, h: &Header, ts: u64) -> Option<(u64, bool)> {
        let u = self
            .pending
            .iter_mut()
            .find(|u| u.expect == h.response_to)?;
        u.core.first_response_ns.get_or_insert(ts);
        Some((u.id, u.legacy_cmd))
    }

    pub(super) fn on_reply(
        &mut self,
        m: InMsg,
        reply: Option<&Reply>,
        end_ts: u64,
        sink: &mut dyn Sink,
    ) {
        let Some(uid) = m.unit else {
            return;
        };
        let Some(i) = self.pending.iter().position(|u| u.id == uid) else {
            return;
        };
        let more = reply.as_ref().is_some_and(|r| r.more_to_come());
        let Some(u) = self.pending.get_mut(i) else {
            return;
        };
        u.core.response(m.start_ts, end_ts, u64::from(m.h.len));
        u.core.damaged |= m.damaged;
        let (open_cursor, exhausted) = match reply {
            None => {
                u.core.damaged = true;
                (None, None)
            }
            Some(r) => u.answered(r, &m.h, more),
        };
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
            let outcome = u.core.implied_outcome(false);
            let ev = self.event(u, outcome);
            sink.event(ev);
        }
    }
}
