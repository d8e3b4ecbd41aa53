//! The PostgreSQL connection state machine: startup and encryption requests, authentication,
//! simple-query statements paired one by one, the extended protocol with pipelining and its
//! skip-until-Sync error rule, COPY sub-protocols, prepared statements and portals, mid-stream
//! pickup and resynchronization after gaps.
//!
//! Layers: raw bytes -> messages ([`super::wire::Framer`]) -> typed messages
//! ([`super::message`]) -> this state machine. The framing half ([`Dir`]) and the conversation
//! half ([`Conn`]) are separate structs so a message can borrow the framing buffers while the
//! conversation is updated.
//!
//! Pairing works on two queues. `units` holds the requests that will become events, in the order
//! the client sent them. `items` holds the responses the server owes, in order; each item names
//! the unit it belongs to (or none, for requests beyond `max_inflight`, which are still tracked
//! so that pairing stays exact, but produce no event). A unit is emitted once it owes nothing and
//! the client can no longer add to it.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use super::message::{
    Backend, CommandTag, ErrorFields, Frontend, MAX_NAME, StartupPacket, Target, backend_len_ok,
    be, fe, frontend_len_ok, is_backend_tag, is_frontend_tag,
};
use super::statements::{next_statement, single_statement};
use super::wire::{Framer, HEADER_LEN, Header, MAX_STARTUP_LEN, Message};
use crate::{
    ConnMeta, DbError, Direction, Health, Outcome, Progress, Protocol, QueryEvent, Session,
    SessionConfig, Sink,
};

const CLIENT: usize = 0;
const SERVER: usize = 1;
/// Bytes of an ErrorResponse kept: severity, SQLSTATE and message come first.
const ERROR_KEEP: usize = 4096;
/// Bytes looked at before trusting a possible client message start when resynchronizing.
const PROBE_LEN: usize = 16;
/// Prepared statements remembered per connection, and the text bytes they may hold.
const MAX_STMTS: usize = 4096;
const MAX_STMT_BYTES: usize = 32 << 20;
/// Portals remembered per connection (they live until the end of a transaction).
const MAX_PORTALS: usize = 256;

fn idx(d: Direction) -> usize {
    match d {
        Direction::ToServer => CLIENT,
        Direction::ToClient => SERVER,
    }
}

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    Synced,
    /// Skipping bytes. `candidate`: the next byte may start a message (at the start of a
    /// mid-stream pickup, after a gap, or at a turn of the conversation).
    Lost {
        candidate: bool,
    },
}

/// The framing state of one direction.
#[derive(Debug)]
struct Dir {
    framer: Framer,
    sync: Sync,
    probe: Vec<(u8, u64)>,
}

impl Dir {
    fn new(typed: bool, sync: Sync) -> Self {
        Dir {
            framer: Framer::new(typed),
            sync,
            probe: Vec::new(),
        }
    }

    /// Drops the partial message and the probe; returns the bytes thrown away.
    fn reset(&mut self) -> u64 {
        let n = self.framer.reset() + self.probe.len() as u64;
        self.probe.clear();
        n
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

/// Where a result (an Execute, or one statement of a simple query) stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Start,
    Rows,
    CopyIn,
    CopyOut,
}

/// A response the server owes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    ParseComplete,
    BindComplete,
    CloseComplete,
    /// ParameterDescription, then RowDescription or NoData.
    DescribeStatement {
        params_seen: bool,
    },
    /// RowDescription or NoData.
    DescribePortal,
    Execute(Flow),
    /// Everything up to and including ReadyForQuery.
    Query(Flow),
    /// FunctionCallResponse (or an error), then ReadyForQuery.
    Function,
    /// ReadyForQuery for a Sync.
    Ready,
    /// Any one message (an unknown request type: the server will answer with an error).
    Unknown,
    /// Requests were lost here (client gap, or too many in flight): responses that do not fit
    /// the next item are theirs.
    Lost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Item {
    want: Want,
    unit: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Query,
    Prepare,
    /// A Bind not (yet) followed by its Execute; becomes `Execute` when it is.
    Bind,
    Execute,
    /// A further Execute of a portal already executed since its Bind: it goes on fetching
    /// rows of a suspended portal (a row limit), one statement execution as far as
    /// pg_stat_statements is concerned.
    Fetch,
    Describe,
    Close,
    FunctionCall,
    Terminate,
    Unknown,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Query => "query",
            Kind::Prepare => "prepare",
            Kind::Bind => "bind",
            Kind::Execute => "execute",
            Kind::Fetch => "fetch",
            Kind::Describe => "describe",
            Kind::Close => "close",
            Kind::FunctionCall => "function_call",
            Kind::Terminate => "terminate",
            Kind::Unknown => "unknown",
        }
    }
}

/// What later client messages may still join the last request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpenKind {
    /// Nothing: the next message starts a new request.
    Closed,
    /// A Sync (or Flush) joins it.
    SyncOnly,
    /// A Parse: a Describe of the same statement, or a Sync, joins it.
    Prepare,
    /// A Bind: a Describe or Execute of the same portal, or a Sync, joins it.
    Bind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Open {
    kind: OpenKind,
    /// Hash of the statement or portal name.
    name: u64,
    /// The unit, or `None` for a request tracked without an event (overflow).
    unit: Option<u64>,
}

const CLOSED: Open = Open {
    kind: OpenKind::Closed,
    name: 0,
    unit: None,
};

fn name_hash(name: &[u8]) -> u64 {
    // FNV-1a: only compares a name with the one just sent.
    name.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The statements of one simple Query message.
#[derive(Debug)]
struct QueryState {
    full: Arc<str>,
    /// `full` is the one statement's text.
    single: bool,
    /// The message text was cut (at `max_text`, or by a capture gap).
    truncated: bool,
    /// Wire bytes of the Query message.
    msg_wire: u64,
    /// Message bytes already given to emitted statements.
    attributed: u64,
    /// The current statement's text in `full`.
    cur: Range<usize>,
    /// Where the current statement's piece of the text begins.
    piece_start: usize,
    /// Where the search for the next statement starts.
    next: usize,
    /// The current statement got its CommandComplete, EmptyQueryResponse or ErrorResponse.
    stmt_done: bool,
    /// An error ended the query: later statements do not run.
    aborted: bool,
    /// Notices (and the like) that came after a statement completed: they belong to whatever
    /// comes next.
    pending_async: u64,
}

/// A statement-map entry to restore when a Parse fails.
#[derive(Debug)]
struct Undo {
    name: Box<[u8]>,
    previous: Option<(Arc<str>, bool)>,
    inserted: Option<Arc<str>>,
}

#[derive(Debug)]
struct Unit {
    id: u64,
    kind: Kind,
    text: Option<Arc<str>>,
    text_truncated: bool,
    start_ns: u64,
    first_response_ns: Option<u64>,
    end_ns: Option<u64>,
    bytes_in: u64,
    bytes_out: u64,
    rows_sent: u64,
    rows_affected: u64,
    error: Option<DbError>,
    damaged: bool,
    /// The server skipped it after an earlier error in the same pipeline: no event.
    skipped: bool,
    copy_out: bool,
    no_reply: bool,
    items_left: u32,
    undo: Option<Box<Undo>>,
    query: Option<Box<QueryState>>,
}

impl Unit {
    fn new(id: u64, kind: Kind, start_ns: u64, bytes_in: u64) -> Self {
        Unit {
            id,
            kind,
            text: None,
            text_truncated: false,
            start_ns,
            first_response_ns: None,
            end_ns: None,
            bytes_in,
            bytes_out: 0,
            rows_sent: 0,
            rows_affected: 0,
            error: None,
            damaged: false,
            skipped: false,
            copy_out: false,
            no_reply: false,
            items_left: 0,
            undo: None,
            query: None,
        }
    }

    /// Applies a CommandComplete tag's row count.
    fn apply_tag(&mut self, tag: CommandTag<'_>) {
        let Some(n) = tag.rows else { return };
        match tag.verb {
            b"INSERT" | b"UPDATE" | b"DELETE" | b"MERGE" | b"MOVE" => {
                self.rows_affected = self.rows_affected.saturating_add(n);
            }
            b"COPY" if self.copy_out && self.rows_sent == 0 => self.rows_sent = n,
            b"COPY" if self.copy_out => {}
            b"COPY" => self.rows_affected = self.rows_affected.saturating_add(n),
            // SELECT (also CREATE TABLE AS / SELECT INTO) and FETCH: the rows are the DataRows
            // seen; the tag stands in when there were none.
            b"SELECT" | b"FETCH" if self.rows_sent == 0 => self.rows_sent = n,
            _ => {}
        }
    }

    fn set_error(&mut self, f: &ErrorFields<'_>) {
        self.error = Some(DbError {
            code: 0,
            state: f.code.map(|c| String::from_utf8_lossy(c).into()),
            message: String::from_utf8_lossy(f.message.unwrap_or(b"")).into(),
        });
    }
}

#[derive(Debug, Default)]
struct TextMap {
    map: HashMap<Box<[u8]>, (Arc<str>, bool, u64)>,
    age: u64,
    bytes: usize,
}

impl TextMap {
    fn get(&self, name: &[u8]) -> Option<(Arc<str>, bool)> {
        self.map.get(name).map(|(t, tr, _)| (t.clone(), *tr))
    }
    fn insert(
        &mut self,
        name: &[u8],
        text: Arc<str>,
        truncated: bool,
        max: (usize, usize),
    ) -> Option<(Arc<str>, bool)> {
        let prev = self.remove(name);
        while !self.map.is_empty() && (self.map.len() >= max.0 || self.bytes + text.len() > max.1) {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, v)| v.2)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.remove(&k);
                }
                None => break,
            }
        }
        self.age += 1;
        self.bytes += text.len();
        self.map.insert(name.into(), (text, truncated, self.age));
        prev
    }
    fn remove(&mut self, name: &[u8]) -> Option<(Arc<str>, bool)> {
        self.map.remove(name).map(|(t, tr, _)| {
            self.bytes -= t.len();
            (t, tr)
        })
    }
    fn is_current(&self, name: &[u8], text: &Arc<str>) -> bool {
        self.map.get(name).is_some_and(|v| Arc::ptr_eq(&v.0, text))
    }
    fn heap_bytes(&self) -> usize {
        self.bytes + self.map.len() * 64
    }
}

/// The conversation: everything but the framing.
#[derive(Debug)]
struct Conn {
    meta: ConnMeta,
    cfg: SessionConfig,
    phase: Phase,
    user: Option<Arc<str>>,
    database: Option<Arc<str>>,
    application_name: Option<Arc<str>>,
    tx: Option<TxStatus>,
    stmts: TextMap,
    portals: TextMap,
    /// Name hashes of the portals executed since their Bind (at most [`MAX_PORTALS`], oldest
    /// dropped): a further Execute of one is a [`Kind::Fetch`].
    executed: VecDeque<u64>,
    units: VecDeque<Unit>,
    items: VecDeque<Item>,
    next_id: u64,
    open: Open,
    /// The server discards client messages until a Sync (after an error in the extended
    /// protocol); they are counted with the failed request, here (`None`: an untracked one).
    skip: Option<Option<u64>>,
    /// The client is in COPY IN mode for this request: its CopyData, and any Sync or Flush,
    /// which the server ignores, belong to it.
    copy_in: Option<Option<u64>>,
    /// The server stream was just (re)joined: responses that fit nothing in flight belong to
    /// requests we did not see and are skipped.
    fresh: bool,
    /// Requests were lost: a response with nothing in flight is theirs, not a stray.
    orphans_expected: bool,
    max_items: usize,
}

/// Result of one server message against the item at the front.
enum Step {
    More,
    Done,
    /// An ErrorResponse ended an extended-protocol request: the server skips to the next Sync.
    Failed,
    Mismatch,
}

fn text_of(sql: &[u8], cut: bool, max: usize) -> (Cow<'_, str>, bool) {
    let mut bytes = &sql[..sql.len().min(max)];
    let truncated = cut || bytes.len() < sql.len();
    if truncated
        && let Err(e) = std::str::from_utf8(bytes)
        && e.error_len().is_none()
    {
        // Cut in the middle of a character: drop its first bytes.
        bytes = &bytes[..e.valid_up_to()];
    }
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= max {
        return (text, truncated);
    }
    // Replacement characters made it longer.
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    (Cow::Owned(text[..cut].to_owned()), true)
}

fn lossy_arc(b: &[u8]) -> Arc<str> {
    match std::str::from_utf8(b) {
        Ok(s) => Arc::from(s),
        Err(_) => Arc::from(String::from_utf8_lossy(b).as_ref()),
    }
}

/// Whether `tag` can be the next message of a response in state `want`.
fn fits(want: Want, tag: u8) -> bool {
    let e = tag == be::ERROR_RESPONSE;
    // A simple query or function call always ends with ReadyForQuery.
    let z = tag == be::READY_FOR_QUERY && matches!(want, Want::Query(_) | Want::Function);
    e || z
        || match want {
            Want::ParseComplete => tag == be::PARSE_COMPLETE,
            Want::BindComplete => tag == be::BIND_COMPLETE,
            Want::CloseComplete => tag == be::CLOSE_COMPLETE,
            Want::DescribeStatement { params_seen: false } => tag == be::PARAMETER_DESCRIPTION,
            Want::DescribeStatement { params_seen: true } | Want::DescribePortal => {
                matches!(tag, be::ROW_DESCRIPTION | be::NO_DATA)
            }
            Want::Execute(f) | Want::Query(f) => {
                let query = matches!(want, Want::Query(_));
                match f {
                    Flow::Start => {
                        matches!(
                            tag,
                            be::ROW_DESCRIPTION
                                | be::COMMAND_COMPLETE
                                | be::EMPTY_QUERY_RESPONSE
                                | be::COPY_IN_RESPONSE
                                | be::COPY_OUT_RESPONSE
                                | be::COPY_BOTH_RESPONSE
                        ) || (!query && matches!(tag, be::DATA_ROW | be::PORTAL_SUSPENDED))
                    }
                    Flow::Rows => matches!(
                        tag,
                        be::DATA_ROW | be::COMMAND_COMPLETE | be::PORTAL_SUSPENDED
                    ),
                    Flow::CopyIn => tag == be::COMMAND_COMPLETE,
                    Flow::CopyOut => {
                        matches!(tag, be::COPY_DATA | be::COPY_DONE | be::COMMAND_COMPLETE)
                    }
                }
            }
            Want::Function => matches!(tag, be::FUNCTION_CALL_RESPONSE | be::READY_FOR_QUERY),
            Want::Ready => tag == be::READY_FOR_QUERY,
            Want::Unknown => true,
            Want::Lost => false,
        }
}

impl Conn {
    fn unit_mut(&mut self, id: Option<u64>) -> Option<&mut Unit> {
        let id = id?;
        let front = self.units.front()?.id;
        let i = usize::try_from(id.checked_sub(front)?).ok()?;
        self.units.get_mut(i)
    }

    /// Keep policy: how many body bytes of a message to keep, or `None` for an impossible
    /// length.
    fn keep(&self, d: usize, tag: u8, len: u32, typed: bool) -> Option<usize> {
        if !typed {
            return (8..=MAX_STARTUP_LEN).contains(&len).then_some(len as usize);
        }
        let name = MAX_NAME as usize + 1;
        if d == CLIENT {
            let known = is_frontend_tag(tag);
            if known && !frontend_len_ok(tag, len) || !known && !Header::len_ok(len) {
                return None;
            }
            Some(match tag {
                fe::QUERY => self.cfg.max_text.saturating_add(1),
                fe::PARSE => name + self.cfg.max_text.saturating_add(1),
                fe::BIND => 2 * name,
                fe::DESCRIBE | fe::CLOSE | fe::EXECUTE => len as usize,
                fe::FUNCTION_CALL => 4,
                _ => 0,
            })
        } else {
            let known = is_backend_tag(tag);
            if known && !backend_len_ok(tag, len) || !known && !Header::len_ok(len) {
                return None;
            }
            Some(match tag {
                be::ERROR_RESPONSE => ERROR_KEEP,
                be::COMMAND_COMPLETE | be::READY_FOR_QUERY | be::AUTHENTICATION => len as usize,
                _ => 0,
            })
        }
    }

    fn base_event(&self, u: &Unit) -> QueryEvent {
        QueryEvent {
            protocol: Protocol::Postgres,
            conn: self.meta.id,
            client: self.meta.client,
            server: self.meta.server,
            start_ns: u.start_ns,
            first_response_ns: u.first_response_ns,
            end_ns: u.end_ns,
            user: self.user.clone(),
            database: self.database.clone(),
            command: u.kind.name(),
            text: u.text.clone(),
            text_truncated: u.text_truncated,
            statement_id: None,
            bytes_in: u.bytes_in,
            bytes_out: u.bytes_out,
            rows_sent: u.rows_sent,
            rows_affected: u.rows_affected,
            warnings: 0,
            outcome: if u.no_reply {
                Outcome::NoReplyExpected
            } else if u.error.is_some() {
                Outcome::Error
            } else if u.damaged {
                Outcome::Incomplete
            } else {
                Outcome::Ok
            },
            error: u.error.clone(),
        }
    }

    /// The current statement of a query unit as an event (`last`: it also gets the rest of
    /// the message bytes).
    fn statement_event(&self, u: &Unit, last: bool) -> QueryEvent {
        let mut ev = self.base_event(u);
        if let Some(q) = &u.query {
            let piece = if last {
                q.msg_wire.saturating_sub(q.attributed)
            } else {
                (q.next - q.piece_start) as u64
            };
            ev.bytes_in = u.bytes_in + piece;
            if last {
                ev.bytes_out += q.pending_async;
            }
            ev.text = Some(if q.single {
                q.full.clone()
            } else {
                Arc::from(q.full.get(q.cur.clone()).unwrap_or(""))
            });
            ev.text_truncated = q.truncated && q.next >= q.full.len();
        }
        ev
    }

    /// Emits a finished unit. `outcome` overrides the one its state implies.
    fn emit(&mut self, u: Unit, outcome: Option<Outcome>, sink: &mut dyn Sink) {
        if u.skipped {
            return;
        }
        if u.error.is_some()
            && let Some(undo) = &u.undo
            && let Some(ins) = &undo.inserted
            && self.stmts.is_current(&undo.name, ins)
        {
            let max = (MAX_STMTS, MAX_STMT_BYTES);
            match &undo.previous {
                Some((t, tr)) => {
                    self.stmts.insert(&undo.name, t.clone(), *tr, max);
                }
                None => {
                    self.stmts.remove(&undo.name);
                }
            }
        }
        let mut ev = if u.kind == Kind::Query {
            self.statement_event(&u, true)
        } else {
            self.base_event(&u)
        };
        if let Some(o) = outcome {
            ev.outcome = o;
        }
        sink.event(ev);
    }

    /// Emits the units at the front that owe nothing and can no longer grow.
    fn drain(&mut self, sink: &mut dyn Sink) {
        while let Some(u) = self.units.front() {
            let open = self.open.unit == Some(u.id) || self.skip == Some(Some(u.id));
            if u.items_left > 0 || open {
                break;
            }
            if let Some(u) = self.units.pop_front() {
                self.emit(u, None, sink);
            }
        }
    }

    /// Starts a new request: closes the open one and queues a unit (or, beyond `max_inflight`,
    /// nothing: its items are tracked without an event).
    /// Records that `portal` was executed; false if it already had been since its Bind.
    fn mark_executed(&mut self, portal: &[u8]) -> bool {
        let h = name_hash(portal);
        if self.executed.contains(&h) {
            return false;
        }
        if self.executed.len() >= MAX_PORTALS {
            self.executed.pop_front();
        }
        self.executed.push_back(h);
        true
    }

    fn forget_executed(&mut self, portal: &[u8]) {
        let h = name_hash(portal);
        self.executed.retain(|&x| x != h);
    }

    fn new_unit(&mut self, kind: Kind, m: &Message<'_>, sink: &mut dyn Sink) -> Option<u64> {
        self.open = CLOSED;
        if self.units.len() >= self.cfg.max_inflight.max(1) {
            sink.health().inflight_overflow += 1;
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut u = Unit::new(id, kind, m.start_ts, m.wire_len());
        u.damaged = m.damaged;
        self.units.push_back(u);
        Some(id)
    }

    /// Queues a response owed to `unit`. Returns false when the queue is full (the caller's
    /// request is then dropped and its responses skipped).
    fn push_item(&mut self, want: Want, unit: Option<u64>, sink: &mut dyn Sink) -> bool {
        if self.items.len() >= self.max_items {
            sink.health().inflight_overflow += 1;
            if let Some(u) = self.unit_mut(unit) {
                // Its response will be skipped: a new request gives no event, a request
                // joined by this message is incomplete.
                if u.items_left == 0 {
                    u.skipped = true;
                } else {
                    u.damaged = true;
                }
            }
            self.lost_requests();
            return false;
        }
        if let Some(u) = self.unit_mut(unit) {
            u.items_left += 1;
        }
        self.items.push_back(Item { want, unit });
        true
    }

    /// Requests were lost (client gap, queue full): mark the place.
    fn lost_requests(&mut self) {
        self.orphans_expected = true;
        self.open = CLOSED;
        if self.items.back().map(|i| i.want) != Some(Want::Lost) {
            self.items.push_back(Item {
                want: Want::Lost,
                unit: None,
            });
        }
    }

    fn pop_item(&mut self) -> Option<Item> {
        let it = self.items.pop_front()?;
        if let Some(u) = self.unit_mut(it.unit) {
            u.items_left = u.items_left.saturating_sub(1);
        }
        Some(it)
    }

    fn add_in(&mut self, unit: Option<u64>, wire: u64, damaged: bool) {
        if let Some(u) = self.unit_mut(unit) {
            u.bytes_in += wire;
            u.damaged |= damaged;
        }
    }

    // ---- client side ---------------------------------------------------------------------

    fn on_client(&mut self, m: &Message<'_>, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        let wire = m.wire_len();
        match self.phase {
            Phase::Startup => return self.on_startup(m, sink),
            Phase::EncAnswer => {
                // The client spoke before the server answered its encryption request.
                sink.health().malformed += 1;
                act.stop = true;
                return act;
            }
            Phase::Ended => {
                sink.health().unparsed_bytes += wire;
                return act;
            }
            Phase::Auth | Phase::Ready => {}
        }
        if m.tag == fe::PASSWORD {
            if self.phase != Phase::Auth {
                sink.health().unparsed_bytes += wire;
            }
            return act;
        }
        // COPY IN: the server reads CopyData, CopyDone, CopyFail and ignores Sync and Flush.
        if let Some(owner) = self.copy_in {
            match m.tag {
                fe::COPY_DATA | fe::SYNC | fe::FLUSH => {
                    self.add_in(owner, wire, m.damaged);
                    return act;
                }
                fe::COPY_DONE | fe::COPY_FAIL => {
                    self.add_in(owner, wire, m.damaged);
                    self.copy_in = None;
                    return act;
                }
                _ => self.copy_in = None,
            }
        }
        // After an error the server discards everything up to the next Sync.
        if let Some(owner) = self.skip {
            self.add_in(owner, wire, m.damaged);
            if m.tag == fe::SYNC {
                self.skip = None;
                self.open = CLOSED;
                if self.push_item(Want::Ready, owner, sink) {
                    act.server_boundary = true;
                }
            } else if m.tag == fe::TERMINATE {
                self.skip = None;
                self.terminate(m, sink);
            }
            return act;
        }
        let parsed = match Frontend::parse(m.tag, m.head) {
            Ok(f) => Some(f),
            Err(_) => {
                sink.health().malformed += 1;
                None
            }
        };
        let want = match m.tag {
            fe::QUERY => {
                let (sql, complete) = match parsed {
                    Some(Frontend::Query { sql, sql_complete }) => (sql, sql_complete),
                    _ => (&b""[..], false),
                };
                let id = self.new_unit(Kind::Query, m, sink);
                let max = self.cfg.max_text;
                if let Some(u) = self.unit_mut(id) {
                    u.bytes_in = 0;
                    u.query = Some(Box::new(query_state(
                        sql,
                        !complete || m.damaged,
                        max,
                        wire,
                    )));
                }
                self.push_item(Want::Query(Flow::Start), id, sink)
            }
            fe::PARSE => {
                let id = self.new_unit(Kind::Prepare, m, sink);
                if let Some(Frontend::Parse {
                    name,
                    sql,
                    sql_complete,
                }) = parsed
                {
                    let (t, tr) = text_of(sql, !sql_complete || m.damaged, self.cfg.max_text);
                    let text: Arc<str> = Arc::from(t.as_ref());
                    let prev =
                        self.stmts
                            .insert(name, text.clone(), tr, (MAX_STMTS, MAX_STMT_BYTES));
                    self.open = Open {
                        kind: OpenKind::Prepare,
                        name: name_hash(name),
                        unit: id,
                    };
                    if let Some(u) = self.unit_mut(id) {
                        u.text = Some(text.clone());
                        u.text_truncated = tr;
                        if !name.is_empty() {
                            u.undo = Some(Box::new(Undo {
                                name: name.into(),
                                previous: prev,
                                inserted: Some(text),
                            }));
                        }
                    }
                } else {
                    self.open = Open {
                        kind: OpenKind::SyncOnly,
                        name: 0,
                        unit: id,
                    };
                }
                self.push_item(Want::ParseComplete, id, sink)
            }
            fe::BIND => {
                let id = self.new_unit(Kind::Bind, m, sink);
                let (portal, statement) = match parsed {
                    Some(Frontend::Bind { portal, statement }) => (portal, statement),
                    _ => (&b"\xff"[..], &b"\xff"[..]),
                };
                let text = match self.stmts.get(statement) {
                    Some(t) => Some(t),
                    None if !statement.is_empty() && parsed.is_some() => {
                        // Prepared before the capture: counted under its name.
                        let t: Arc<str> =
                            Arc::from(format!("EXECUTE {}", String::from_utf8_lossy(statement)));
                        let max = (MAX_STMTS, MAX_STMT_BYTES);
                        self.stmts.insert(statement, t.clone(), false, max);
                        Some((t, false))
                    }
                    None => None,
                };
                // A new portal under this name: not executed yet.
                self.forget_executed(portal);
                match &text {
                    Some((t, tr)) => {
                        let max = (MAX_PORTALS, MAX_STMT_BYTES);
                        self.portals.insert(portal, t.clone(), *tr, max);
                    }
                    None => {
                        self.portals.remove(portal);
                    }
                }
                if let Some(u) = self.unit_mut(id)
                    && let Some((t, tr)) = text
                {
                    u.text = Some(t);
                    u.text_truncated = tr;
                }
                self.open = Open {
                    kind: OpenKind::Bind,
                    name: name_hash(portal),
                    unit: id,
                };
                self.push_item(Want::BindComplete, id, sink)
            }
            fe::DESCRIBE => {
                let (target, name) = match parsed {
                    Some(Frontend::Describe { target, name }) => (Some(target), name),
                    _ => (None, &b""[..]),
                };
                let want = if target == Some(Target::Portal) {
                    Want::DescribePortal
                } else {
                    Want::DescribeStatement { params_seen: false }
                };
                let joins = match (self.open.kind, target) {
                    (OpenKind::Prepare, Some(Target::Statement))
                    | (OpenKind::Bind, Some(Target::Portal)) => self.open.name == name_hash(name),
                    _ => false,
                };
                if joins {
                    let unit = self.open.unit;
                    self.add_in(unit, wire, m.damaged);
                    self.push_item(want, unit, sink)
                } else {
                    let id = self.new_unit(Kind::Describe, m, sink);
                    let text = match target {
                        Some(Target::Statement) => self.stmts.get(name),
                        Some(Target::Portal) => self.portals.get(name),
                        None => None,
                    };
                    if let Some(u) = self.unit_mut(id)
                        && let Some((t, tr)) = text
                    {
                        u.text = Some(t);
                        u.text_truncated = tr;
                    }
                    self.open = Open {
                        kind: OpenKind::SyncOnly,
                        name: 0,
                        unit: id,
                    };
                    self.push_item(want, id, sink)
                }
            }
            fe::EXECUTE => {
                let portal = match parsed {
                    Some(Frontend::Execute { portal, .. }) => Some(portal),
                    _ => None,
                };
                let joins = self.open.kind == OpenKind::Bind
                    && portal.is_some_and(|p| self.open.name == name_hash(p));
                // Executed before since its Bind: fetching more rows of a suspended portal.
                let fetch = portal.is_some_and(|p| !self.mark_executed(p));
                let unit = if joins {
                    let unit = self.open.unit;
                    if let Some(u) = self.unit_mut(unit) {
                        u.kind = Kind::Execute;
                        u.bytes_in += wire;
                        u.damaged |= m.damaged;
                    }
                    unit
                } else {
                    let kind = if fetch { Kind::Fetch } else { Kind::Execute };
                    let id = self.new_unit(kind, m, sink);
                    let text = portal.and_then(|p| self.portals.get(p));
                    if let Some(u) = self.unit_mut(id)
                        && let Some((t, tr)) = text
                    {
                        u.text = Some(t);
                        u.text_truncated = tr;
                    }
                    id
                };
                self.open = Open {
                    kind: OpenKind::SyncOnly,
                    name: 0,
                    unit,
                };
                self.push_item(Want::Execute(Flow::Start), unit, sink)
            }
            fe::CLOSE => {
                let id = self.new_unit(Kind::Close, m, sink);
                let text = match parsed {
                    Some(Frontend::Close {
                        target: Target::Statement,
                        name,
                    }) => self.stmts.remove(name),
                    Some(Frontend::Close {
                        target: Target::Portal,
                        name,
                    }) => {
                        self.forget_executed(name);
                        self.portals.remove(name)
                    }
                    _ => None,
                };
                if let Some(u) = self.unit_mut(id)
                    && let Some((t, tr)) = text
                {
                    u.text = Some(t);
                    u.text_truncated = tr;
                }
                self.open = Open {
                    kind: OpenKind::SyncOnly,
                    name: 0,
                    unit: id,
                };
                self.push_item(Want::CloseComplete, id, sink)
            }
            fe::SYNC => {
                let unit = if self.open.kind != OpenKind::Closed {
                    self.open.unit
                } else {
                    None
                };
                self.add_in(unit, wire, m.damaged);
                self.open = CLOSED;
                self.push_item(Want::Ready, unit, sink)
            }
            fe::FLUSH => {
                if self.open.kind != OpenKind::Closed {
                    self.add_in(self.open.unit, wire, m.damaged);
                }
                return act;
            }
            fe::TERMINATE => {
                self.terminate(m, sink);
                return act;
            }
            fe::FUNCTION_CALL => {
                let id = self.new_unit(Kind::FunctionCall, m, sink);
                self.push_item(Want::Function, id, sink)
            }
            fe::COPY_DATA | fe::COPY_DONE | fe::COPY_FAIL => {
                // Copy data for a COPY that was lost or abandoned.
                sink.health().unparsed_bytes += wire;
                return act;
            }
            _ => {
                let id = self.new_unit(Kind::Unknown, m, sink);
                self.push_item(Want::Unknown, id, sink)
            }
        };
        if want {
            act.server_boundary = true;
        }
        self.drain(sink);
        act
    }

    fn terminate(&mut self, m: &Message<'_>, sink: &mut dyn Sink) {
        let id = self.new_unit(Kind::Terminate, m, sink);
        if let Some(u) = self.unit_mut(id) {
            u.no_reply = true;
        }
        self.drain(sink);
    }

    fn on_startup(&mut self, m: &Message<'_>, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        match StartupPacket::parse(m.head) {
            Ok(StartupPacket::SslRequest | StartupPacket::GssEncRequest) => {
                self.phase = Phase::EncAnswer;
            }
            Ok(StartupPacket::CancelRequest { .. }) => {
                let mut u = Unit::new(0, Kind::Unknown, m.start_ts, m.wire_len());
                u.no_reply = true;
                let mut ev = self.base_event(&u);
                ev.command = "cancel";
                sink.event(ev);
                act.stop = true;
            }
            Ok(StartupPacket::Startup {
                user,
                database,
                application_name,
                ..
            }) => {
                self.user = user.map(lossy_arc);
                // The database defaults to the user name.
                self.database = database
                    .filter(|d| !d.is_empty())
                    .map(lossy_arc)
                    .or_else(|| self.user.clone());
                self.application_name = application_name.map(lossy_arc);
                self.phase = Phase::Auth;
            }
            Err(_) => {
                // Not PostgreSQL 3.x.
                sink.health().malformed += 1;
                act.stop = true;
            }
        }
        act
    }

    // ---- server side ---------------------------------------------------------------------

    fn on_server(&mut self, m: &Message<'_>, ts: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        let wire = m.wire_len();
        match self.phase {
            Phase::Startup | Phase::EncAnswer => {
                // The server spoke first: not PostgreSQL.
                sink.health().malformed += 1;
                act.stop = true;
                return act;
            }
            Phase::Ended => {
                sink.health().unparsed_bytes += wire;
                return act;
            }
            Phase::Auth => {
                match Backend::parse(m.tag, m.head) {
                    Ok(Backend::ErrorResponse(_)) => self.phase = Phase::Ended,
                    Ok(Backend::ReadyForQuery { status }) => {
                        self.phase = Phase::Ready;
                        self.tx = Some(tx_status(status));
                    }
                    Ok(_) => {}
                    Err(_) => sink.health().malformed += 1,
                }
                return act;
            }
            Phase::Ready => {}
        }
        if Backend::is_async(m.tag) {
            // Notices, notifications and parameter changes may come at any time; they are
            // counted with the response in progress, if any.
            let unit = self.items.front().and_then(|i| i.unit);
            if let Some(u) = self.unit_mut(unit) {
                match u.query.as_mut() {
                    Some(q) if q.stmt_done => q.pending_async += wire,
                    _ => u.bytes_out += wire,
                }
            }
            return act;
        }
        let parsed = match Backend::parse(m.tag, m.head) {
            Ok(b) => b,
            Err(_) => {
                sink.health().malformed += 1;
                sink.health().unparsed_bytes += wire;
                self.fresh = true;
                return act;
            }
        };
        if let Backend::ReadyForQuery { status } = parsed {
            self.tx = Some(tx_status(status));
        }
        loop {
            self.drain(sink);
            let Some(item) = self.items.front().copied() else {
                return self.orphan(&parsed, wire, sink);
            };
            if item.want == Want::Lost {
                match self.items.get(1) {
                    Some(next) if fits(next.want, m.tag) => {
                        self.pop_item();
                        continue;
                    }
                    None if m.tag == be::READY_FOR_QUERY => {
                        // The lost requests' responses may be over; more of them (after more
                        // lost Syncs) would come with nothing in flight.
                        self.pop_item();
                        self.orphans_expected = true;
                    }
                    _ => {}
                }
                sink.health().unparsed_bytes += wire;
                return act;
            }
            if !fits(item.want, m.tag) {
                if self.fresh {
                    sink.health().unparsed_bytes += wire;
                    return act;
                }
                if m.tag == be::READY_FOR_QUERY
                    && let Some(k) = self.items.iter().skip(1).position(|i| {
                        matches!(i.want, Want::Ready | Want::Query(_) | Want::Function)
                    })
                {
                    let k = k + 1;
                    // The server reached a Sync we expected later: what lies before it was not
                    // answered as we thought.
                    for _ in 0..k {
                        if let Some(it) = self.pop_item()
                            && let Some(u) = self.unit_mut(it.unit)
                        {
                            u.damaged = true;
                        }
                    }
                    sink.health().malformed += 1;
                    continue;
                }
                sink.health().malformed += 1;
                sink.health().unparsed_bytes += wire;
                if let Some(u) = self.unit_mut(item.unit) {
                    u.damaged = true;
                }
                self.fresh = true;
                return act;
            }
            self.fresh = false;
            self.orphans_expected = false;
            let step = self.step(item, m, &parsed, ts, sink, &mut act);
            match step {
                Step::More => {}
                Step::Done => {
                    self.pop_item();
                }
                Step::Failed => self.skip_to_sync(item.unit),
                Step::Mismatch => {
                    sink.health().malformed += 1;
                    self.fresh = true;
                }
            }
            self.drain(sink);
            return act;
        }
    }

    /// A response with nothing in flight.
    fn orphan(&mut self, b: &Backend<'_>, wire: u64, sink: &mut dyn Sink) -> Act {
        let fatal = matches!(b, Backend::ErrorResponse(f) if f.is_fatal());
        if !fatal {
            sink.health().unparsed_bytes += wire;
            if !self.orphans_expected && !self.fresh {
                sink.health().responses_without_request += 1;
            }
            // The rest of this response is skipped without counting it again.
            self.fresh = true;
        }
        Act::default()
    }

    /// An error ended the extended-protocol request at the front: the server discards every
    /// message up to the next Sync. Requests skipped that way produce no response and no event;
    /// their bytes are counted with the failed request.
    fn skip_to_sync(&mut self, failed: Option<u64>) {
        self.pop_item();
        loop {
            match self.items.front().copied() {
                Some(Item {
                    want: Want::Ready, ..
                }) => {
                    // The Sync's ReadyForQuery now belongs to the failed request.
                    let it = self.pop_item();
                    self.skip_unit(it.and_then(|i| i.unit), failed);
                    if let Some(u) = self.unit_mut(failed) {
                        u.items_left += 1;
                    }
                    self.items.push_front(Item {
                        want: Want::Ready,
                        unit: failed,
                    });
                    return;
                }
                Some(it) => {
                    self.pop_item();
                    self.skip_unit(it.unit, failed);
                }
                None => break,
            }
        }
        // The Sync is still to come: everything the client sends until then is skipped.
        self.skip = Some(failed);
        self.open = CLOSED;
        self.copy_in = None;
    }

    /// Marks `unit` (not the failed one) as skipped and moves its request bytes.
    fn skip_unit(&mut self, unit: Option<u64>, failed: Option<u64>) {
        if unit.is_none() || unit == failed {
            return;
        }
        let mut moved = 0;
        if let Some(u) = self.unit_mut(unit)
            && !u.skipped
        {
            u.skipped = true;
            moved = std::mem::take(&mut u.bytes_in);
        }
        if self.open.unit == unit {
            self.open = CLOSED;
        }
        self.add_in(failed, moved, false);
    }

    /// Advances the item at the front by one server message.
    fn step(
        &mut self,
        item: Item,
        m: &Message<'_>,
        b: &Backend<'_>,
        ts: u64,
        sink: &mut dyn Sink,
        act: &mut Act,
    ) -> Step {
        let wire = m.wire_len();
        let tag = m.tag;
        let is_query = matches!(item.want, Want::Query(_));
        if is_query {
            return self.step_query(item, m, b, ts, sink, act);
        }
        let Some(u) = self.unit_mut(item.unit) else {
            // Tracked without an event: only the state matters.
            return self.step_state(item.want, tag, b, None, act);
        };
        u.bytes_out += wire;
        u.first_response_ns.get_or_insert(m.start_ts);
        if item.want == Want::Ready {
            u.end_ns.get_or_insert(ts);
        } else if !(item.want == Want::Function && tag == be::READY_FOR_QUERY) {
            u.end_ns = Some(ts);
        }
        self.step_state(item.want, tag, b, item.unit, act)
    }

    /// The state transition of a non-query item; `unit` gets rows, errors and flags.
    fn step_state(
        &mut self,
        want: Want,
        tag: u8,
        b: &Backend<'_>,
        unit: Option<u64>,
        act: &mut Act,
    ) -> Step {
        if let Backend::ErrorResponse(f) = b {
            if let Some(u) = self.unit_mut(unit) {
                u.set_error(f);
            }
            return match want {
                // The Sync's implicit COMMIT failed: ReadyForQuery still follows.
                Want::Ready | Want::Function => Step::More,
                Want::Unknown => Step::Done,
                _ => Step::Failed,
            };
        }
        let set = |s: &mut Self, w: Want| {
            if let Some(i) = s.items.front_mut() {
                i.want = w;
            }
            Step::More
        };
        match want {
            Want::ParseComplete | Want::BindComplete | Want::CloseComplete | Want::Ready => {
                Step::Done
            }
            Want::DescribeStatement { params_seen: false } => {
                set(self, Want::DescribeStatement { params_seen: true })
            }
            Want::DescribeStatement { params_seen: true } | Want::DescribePortal => Step::Done,
            Want::Function => {
                if tag == be::READY_FOR_QUERY {
                    Step::Done
                } else {
                    Step::More
                }
            }
            Want::Unknown => Step::Done,
            Want::Execute(flow) => match b {
                Backend::DataRow => {
                    if let Some(u) = self.unit_mut(unit) {
                        u.rows_sent += 1;
                    }
                    if flow == Flow::Start {
                        set(self, Want::Execute(Flow::Rows))
                    } else {
                        Step::More
                    }
                }
                Backend::RowDescription => Step::More,
                Backend::CommandComplete(t) => {
                    if let Some(u) = self.unit_mut(unit) {
                        u.apply_tag(*t);
                    }
                    Step::Done
                }
                Backend::EmptyQueryResponse | Backend::PortalSuspended => Step::Done,
                Backend::CopyInResponse => {
                    self.start_copy_in(unit, true);
                    set(self, Want::Execute(Flow::CopyIn))
                }
                Backend::CopyOutResponse => {
                    if let Some(u) = self.unit_mut(unit) {
                        u.copy_out = true;
                    }
                    set(self, Want::Execute(Flow::CopyOut))
                }
                Backend::CopyData | Backend::CopyDone => Step::More,
                Backend::CopyBothResponse => {
                    // Replication streaming: nothing more to pair on this connection (the
                    // Syncs sent after it will not be answered).
                    act.stop = true;
                    self.drop_following_ready();
                    Step::Done
                }
                _ => Step::Mismatch,
            },
            Want::Query(_) | Want::Lost => Step::Mismatch,
        }
    }

    /// COPY FROM STDIN began. In the extended protocol, the Syncs the client sent after the
    /// Execute are read and ignored by the server while it copies (libpq sends another Sync
    /// after CopyDone): they owe nothing.
    fn start_copy_in(&mut self, unit: Option<u64>, extended: bool) {
        self.copy_in = Some(unit);
        if !extended {
            return;
        }
        let swallowed = self.drop_following_ready();
        if swallowed && self.items.len() == 1 && self.skip.is_none() {
            // The next Sync completes this request.
            self.open = Open {
                kind: OpenKind::SyncOnly,
                name: 0,
                unit,
            };
        }
    }

    /// Removes the ReadyForQuery items right after the front item (Syncs the server will read
    /// and ignore). Returns whether there were any.
    fn drop_following_ready(&mut self) -> bool {
        let mut dropped = false;
        while self.items.get(1).is_some_and(|i| i.want == Want::Ready) {
            if let Some(it) = self.items.remove(1)
                && let Some(u) = self.unit_mut(it.unit)
            {
                u.items_left = u.items_left.saturating_sub(1);
            }
            dropped = true;
        }
        dropped
    }

    /// One message of a simple query's response.
    fn step_query(
        &mut self,
        item: Item,
        m: &Message<'_>,
        b: &Backend<'_>,
        ts: u64,
        sink: &mut dyn Sink,
        act: &mut Act,
    ) -> Step {
        let Want::Query(flow) = item.want else {
            return Step::Mismatch;
        };
        let wire = m.wire_len();
        let is_ready = matches!(b, Backend::ReadyForQuery { .. });
        // The first message of the next statement: the previous one is over.
        if !is_ready && self.unit_mut(item.unit).is_some_and(|u| stmt_done(u)) {
            self.next_statement(item.unit, sink);
        }
        let set = |s: &mut Self, f: Flow| {
            if let Some(i) = s.items.front_mut() {
                i.want = Want::Query(f);
            }
        };
        let unit = item.unit;
        if let Some(u) = self.unit_mut(unit) {
            let pending = u
                .query
                .as_mut()
                .map_or(0, |q| std::mem::take(&mut q.pending_async));
            u.bytes_out += wire + pending;
            if !is_ready {
                u.first_response_ns.get_or_insert(m.start_ts);
                u.end_ns = Some(ts);
            } else {
                u.first_response_ns.get_or_insert(m.start_ts);
                u.end_ns.get_or_insert(ts);
            }
        }
        let done = |s: &mut Self, aborted: bool| {
            if let Some(u) = s.unit_mut(unit)
                && let Some(q) = u.query.as_mut()
            {
                q.stmt_done = true;
                q.aborted |= aborted;
            }
        };
        match b {
            Backend::ReadyForQuery { .. } => {
                self.finish_query(unit);
                return Step::Done;
            }
            Backend::RowDescription => set(self, Flow::Rows),
            Backend::DataRow => {
                if let Some(u) = self.unit_mut(unit) {
                    u.rows_sent += 1;
                }
                set(self, Flow::Rows);
            }
            Backend::CommandComplete(t) => {
                if let Some(u) = self.unit_mut(unit) {
                    u.apply_tag(*t);
                }
                set(self, Flow::Start);
                done(self, false);
            }
            Backend::EmptyQueryResponse => {
                set(self, Flow::Start);
                done(self, false);
            }
            Backend::ErrorResponse(f) => {
                if let Some(u) = self.unit_mut(unit) {
                    u.set_error(f);
                }
                set(self, Flow::Start);
                done(self, true);
            }
            Backend::CopyInResponse => {
                self.start_copy_in(unit, false);
                set(self, Flow::CopyIn);
            }
            Backend::CopyOutResponse => {
                if let Some(u) = self.unit_mut(unit) {
                    u.copy_out = true;
                }
                set(self, Flow::CopyOut);
            }
            Backend::CopyData | Backend::CopyDone if flow == Flow::CopyOut => {}
            Backend::CopyBothResponse => {
                // Replication streaming: the statement is answered, nothing more will be.
                act.stop = true;
                done(self, false);
                self.finish_query(unit);
                return Step::Done;
            }
            _ => return Step::Mismatch,
        }
        Step::More
    }

    /// The current statement of a query unit is over and another one answers: emit it and
    /// move on (or, when the text holds no further statement, keep counting into it).
    fn next_statement(&mut self, unit: Option<u64>, sink: &mut dyn Sink) {
        let Some(u) = self.unit_mut(unit) else { return };
        let Some(q) = u.query.as_mut() else { return };
        q.stmt_done = false;
        if q.single || q.aborted {
            return;
        }
        let Some(st) = next_statement(q.full.as_bytes(), q.next) else {
            return;
        };
        let Some(u) = self.units.iter().find(|x| Some(x.id) == unit) else {
            return;
        };
        let ev = self.statement_event(u, false);
        sink.event(ev);
        let Some(u) = self.unit_mut(unit) else { return };
        let Some(q) = u.query.as_mut() else { return };
        q.attributed += (q.next - q.piece_start) as u64;
        q.piece_start = q.next;
        q.cur = st.text;
        q.next = st.end;
        u.start_ns = u.end_ns.unwrap_or(u.start_ns);
        u.first_response_ns = None;
        u.end_ns = None;
        u.bytes_in = 0;
        u.bytes_out = 0;
        u.rows_sent = 0;
        u.rows_affected = 0;
        u.error = None;
        u.copy_out = false;
    }

    /// ReadyForQuery ended a simple query. If statements the splitter found were never
    /// answered and no error explains it, the text held fewer statements than we thought: the
    /// last event covers the rest of it.
    fn finish_query(&mut self, unit: Option<u64>) {
        let Some(u) = self.unit_mut(unit) else { return };
        let Some(q) = u.query.as_mut() else { return };
        if q.single || q.aborted {
            return;
        }
        let mut end = None;
        let mut from = q.next;
        while let Some(st) = next_statement(q.full.as_bytes(), from) {
            end = Some(st.text.end);
            from = st.end;
        }
        if let Some(e) = end {
            q.cur.end = e;
            q.next = q.full.len();
        }
    }

    // ---- loss ----------------------------------------------------------------------------

    /// The server stream lost bytes we cannot step over: what was in flight cannot be
    /// completed; it is emitted now as incomplete.
    fn server_gap(&mut self, sink: &mut dyn Sink) {
        self.items.clear();
        while let Some(mut u) = self.units.pop_front() {
            let pending = u.items_left > 0;
            u.items_left = 0;
            if pending {
                u.damaged = true;
            }
            let outcome = (pending && u.error.is_none()).then_some(Outcome::Incomplete);
            if u.kind == Kind::Query
                && let Some(q) = u.query.as_mut()
                && !q.single
                && !q.aborted
            {
                // What was not answered of the query goes with this last event.
                let mut from = q.next;
                while let Some(st) = next_statement(q.full.as_bytes(), from) {
                    q.cur.end = st.text.end;
                    from = st.end;
                }
                q.next = q.full.len();
            }
            self.emit(u, outcome, sink);
        }
        self.open = CLOSED;
        self.skip = None;
        self.copy_in = None;
        self.orphans_expected = true;
        self.fresh = true;
    }

    /// The client stream lost bytes we cannot step over: requests may have been lost.
    fn client_gap(&mut self) {
        if let Some(owner) = self.copy_in {
            // Lost copy data: the COPY's byte count is short.
            if let Some(u) = self.unit_mut(owner) {
                u.damaged = true;
            }
            return;
        }
        if let Some(u) = self.unit_mut(self.open.unit) {
            u.damaged = true;
        }
        if let Some(owner) = self.skip {
            if let Some(u) = self.unit_mut(owner) {
                u.damaged = true;
            }
            return;
        }
        self.lost_requests();
    }

    fn close(&mut self, sink: &mut dyn Sink) {
        self.open = CLOSED;
        self.skip = None;
        self.items.clear();
        while let Some(mut u) = self.units.pop_front() {
            if u.items_left == 0 {
                self.emit(u, None, sink);
                continue;
            }
            u.items_left = 0;
            let answered = u.first_response_ns.is_some();
            if u.kind == Kind::Query
                && let Some(q) = u.query.as_mut()
                && !q.single
            {
                if q.stmt_done {
                    // The statement in progress finished; the rest was never answered.
                    let rest = if q.aborted {
                        None
                    } else {
                        next_statement(q.full.as_bytes(), q.next)
                    };
                    if let Some(st) = rest {
                        let id = Some(u.id);
                        self.units.push_front(u);
                        self.next_statement(id, sink);
                        let Some(mut u) = self.units.pop_front() else {
                            return;
                        };
                        if let Some(q) = u.query.as_mut() {
                            let mut from = st.end;
                            while let Some(s) = next_statement(q.full.as_bytes(), from) {
                                q.cur.end = s.text.end;
                                from = s.end;
                            }
                            q.next = q.full.len();
                        }
                        self.emit(u, Some(Outcome::NoResponse), sink);
                        continue;
                    }
                    self.emit(u, None, sink);
                    continue;
                }
                let mut from = q.next;
                while let Some(st) = next_statement(q.full.as_bytes(), from) {
                    q.cur.end = st.text.end;
                    from = st.end;
                }
                q.next = q.full.len();
            }
            let outcome = if u.error.is_some() {
                Outcome::Error
            } else if answered || u.damaged {
                Outcome::Incomplete
            } else {
                Outcome::NoResponse
            };
            self.emit(u, Some(outcome), sink);
        }
    }
}

fn stmt_done(u: &Unit) -> bool {
    u.query.as_ref().is_some_and(|q| q.stmt_done)
}

fn tx_status(s: u8) -> TxStatus {
    match s {
        b'T' => TxStatus::InTransaction,
        b'E' => TxStatus::Failed,
        _ => TxStatus::Idle,
    }
}

/// The statements of a Query message's text.
fn query_state(sql: &[u8], cut: bool, max: usize, wire: u64) -> QueryState {
    let (text, truncated) = text_of(sql, cut, max);
    let b = text.as_bytes();
    let (full, single, cur, next): (Arc<str>, bool, Range<usize>, usize) = match single_statement(b)
    {
        Some(r) => {
            let t: Arc<str> = Arc::from(text.get(r).unwrap_or(""));
            let n = t.len();
            (t, true, 0..n, n)
        }
        None => {
            let first = next_statement(b, 0);
            let (cur, next) = first.map_or((0..0, b.len()), |s| (s.text, s.end));
            (Arc::from(text.as_ref()), false, cur, next)
        }
    };
    QueryState {
        full,
        single,
        truncated,
        msg_wire: wire,
        attributed: 0,
        cur,
        piece_start: 0,
        next,
        stmt_done: false,
        aborted: false,
        pending_async: 0,
    }
}

/// Whether the bytes collected at a possible client message boundary start messages: every
/// header in them is a frontend message with a possible length, and the first body looks like
/// what its type carries.
fn client_probe_ok(b: &[u8]) -> bool {
    let Some(h) = Header::parse(b) else {
        return false;
    };
    if h.tag == fe::PASSWORD || !frontend_len_ok(h.tag, h.len) {
        return false;
    }
    let end = (1 + h.len as usize).min(b.len());
    let body = b.get(HEADER_LEN..end).unwrap_or(&[]);
    let whole = b.len() > h.len as usize;
    let texty = |s: &[u8]| {
        s.iter()
            .all(|&c| c >= 0x20 || matches!(c, b'\t' | b'\n' | b'\r'))
    };
    let name_then = |s: &[u8]| -> bool {
        match s.iter().position(|&c| c == 0) {
            Some(i) => texty(&s[..i]),
            None => texty(s),
        }
    };
    let ok = match h.tag {
        fe::QUERY => {
            let (text, nul) = match body.iter().position(|&c| c == 0) {
                Some(i) => (&body[..i], true),
                None => (body, false),
            };
            // The NUL may only be the last byte; the text starts like SQL.
            texty(text)
                && (!nul || HEADER_LEN + text.len() + 1 == 1 + h.len as usize)
                && text
                    .first()
                    .is_none_or(|&c| c.is_ascii_alphabetic() || b" \t\r\n(/-".contains(&c))
        }
        fe::PARSE | fe::BIND => name_then(body),
        fe::DESCRIBE | fe::CLOSE => {
            body.first().is_none_or(|&c| c == b'S' || c == b'P')
                && name_then(body.get(1..).unwrap_or(&[]))
        }
        fe::EXECUTE => name_then(body),
        _ => true,
    };
    if !ok {
        return false;
    }
    // The next header, if the probe holds it, must be plausible too.
    match b.get(1 + h.len as usize..) {
        Some(rest) if whole && rest.len() >= HEADER_LEN => client_probe_ok(rest),
        _ => true,
    }
}

/// One PostgreSQL connection. Build it with [`super::new_session`].
#[derive(Debug)]
pub struct PgSession {
    conn: Conn,
    dirs: [Dir; 2],
    stopped: bool,
}

impl PgSession {
    pub(crate) fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        let saw_open = meta.saw_open;
        let (phase, client, server) = if saw_open {
            (Phase::Startup, Sync::Synced, Sync::Synced)
        } else {
            (
                Phase::Ready,
                Sync::Lost { candidate: true },
                Sync::Lost { candidate: false },
            )
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
                stmts: TextMap::default(),
                portals: TextMap::default(),
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
            },
            dirs: [Dir::new(!saw_open, client), Dir::new(true, server)],
            stopped: false,
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
            .map(|d| d.framer.buffered_bytes() + d.probe.capacity() * 16)
            .sum();
        let units: usize = self
            .conn
            .units
            .iter()
            .map(|u| {
                std::mem::size_of::<Unit>()
                    + u.text.as_ref().map_or(0, |t| t.len())
                    + u.query.as_ref().map_or(0, |q| q.full.len() + 128)
            })
            .sum();
        dirs + units
            + self.conn.items.len() * std::mem::size_of::<Item>()
            + self.conn.stmts.heap_bytes()
            + self.conn.portals.heap_bytes()
    }

    /// Marks direction `d` as out of sync.
    fn lose(&mut self, d: usize, health: &mut Health) {
        let dir = &mut self.dirs[d];
        health.unparsed_bytes += dir.reset();
        if dir.sync == Sync::Synced {
            health.resyncs += 1;
        }
        dir.sync = Sync::Lost { candidate: false };
    }

    fn apply(&mut self, act: Act, sink: &mut dyn Sink) {
        if act.stop {
            self.stopped = true;
        }
        if act.unsync_server {
            self.conn.server_gap(sink);
            self.lose(SERVER, sink.health());
        }
        if act.server_boundary && self.dirs[SERVER].sync == (Sync::Lost { candidate: false }) {
            self.dirs[SERVER].sync = Sync::Lost { candidate: true };
        }
        let typed = !matches!(self.conn.phase, Phase::Startup | Phase::EncAnswer);
        let f = &mut self.dirs[CLIENT].framer;
        if f.typed() != typed && f.is_idle() {
            f.set_typed(typed);
        }
    }

    /// Feeds bytes to a direction that is in sync; returns how many were consumed (at most one
    /// message).
    fn feed_synced(&mut self, d: usize, data: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        let conn = &self.conn;
        let dir = &mut self.dirs[d];
        let typed = dir.framer.typed();
        let policy = |tag: u8, len: u32| conn.keep(d, tag, len, typed);
        let (n, r) = dir.framer.push(data, ts, &policy);
        let act = match r {
            Ok(None) => return n,
            Ok(Some(m)) => match d {
                CLIENT => self.conn.on_client(&m, sink),
                _ => self.conn.on_server(&m, ts, sink),
            },
            Err(_) => {
                // The framer consumed the whole header (perhaps over several calls).
                let header = if typed { HEADER_LEN } else { 4 };
                sink.health().malformed += 1;
                sink.health().unparsed_bytes += header as u64;
                if self.conn.phase == Phase::Startup {
                    // The first packet is not a PostgreSQL startup packet.
                    self.stopped = true;
                    return n;
                }
                if d == SERVER {
                    self.conn.server_gap(sink);
                } else {
                    self.conn.client_gap();
                }
                self.lose(d, sink.health());
                return n;
            }
        };
        self.apply(act, sink);
        n
    }

    fn feed_dir(&mut self, d: usize, mut data: &[u8], ts: u64, sink: &mut dyn Sink) {
        while !data.is_empty() && !self.stopped {
            if d == SERVER && self.conn.phase == Phase::Startup && self.conn.meta.saw_open {
                // The server speaks before the client's startup packet: not PostgreSQL.
                sink.health().malformed += 1;
                self.stopped = true;
                return;
            }
            match self.dirs[d].sync {
                Sync::Synced => {
                    if d == SERVER && self.conn.phase == Phase::EncAnswer {
                        self.enc_answer(data[0], sink);
                        data = &data[1..];
                        continue;
                    }
                    let n = self.feed_synced(d, data, ts, sink);
                    if n == 0 && self.dirs[d].sync == Sync::Synced && !self.stopped {
                        // No progress is a framing bug; never spin.
                        sink.health().malformed += 1;
                        self.lose(d, sink.health());
                    }
                    data = &data[n..];
                }
                Sync::Lost { candidate: false } => {
                    sink.health().unparsed_bytes += data.len() as u64;
                    return;
                }
                Sync::Lost { candidate: true } => {
                    let want = if d == CLIENT { PROBE_LEN } else { HEADER_LEN };
                    let dir = &mut self.dirs[d];
                    let n = (want - dir.probe.len()).min(data.len());
                    dir.probe.extend(data[..n].iter().map(|&b| (b, ts)));
                    data = &data[n..];
                    if dir.probe.len() >= want {
                        self.eval_probe(d, sink);
                    }
                }
            }
        }
    }

    /// The server's one-byte answer to SSLRequest / GSSENCRequest.
    fn enc_answer(&mut self, b: u8, sink: &mut dyn Sink) {
        match b {
            b'S' | b'G' => {
                sink.health().encrypted_connections += 1;
                self.stopped = true;
            }
            b'N' => self.conn.phase = Phase::Startup,
            b'E' => {
                // An error message instead (a server too old for the request): it closes.
                self.conn.phase = Phase::Ended;
                sink.health().unparsed_bytes += 1;
            }
            _ => {
                sink.health().malformed += 1;
                self.stopped = true;
            }
        }
    }

    /// Decides whether the bytes collected at a possible message boundary start a message; if
    /// so, replays them in sync.
    fn eval_probe(&mut self, d: usize, sink: &mut dyn Sink) {
        let probe = std::mem::take(&mut self.dirs[d].probe);
        if probe.is_empty() {
            return;
        }
        let bytes: Vec<u8> = probe.iter().map(|p| p.0).collect();
        let ok = if d == CLIENT {
            client_probe_ok(&bytes)
        } else {
            Header::parse(&bytes).is_some_and(|h| backend_len_ok(h.tag, h.len))
        };
        if !ok {
            sink.health().unparsed_bytes += bytes.len() as u64;
            self.dirs[d].sync = Sync::Lost { candidate: false };
            return;
        }
        let dir = &mut self.dirs[d];
        dir.framer.reset();
        dir.framer.set_typed(true);
        dir.sync = Sync::Synced;
        if d == SERVER {
            self.conn.fresh = true;
        }
        for (run, ts) in crate::timestamp_runs(&probe) {
            self.feed_dir(d, &bytes[run], ts, sink);
        }
    }

    /// Server bytes are arriving: the client's turn ended. A pending probe is decided now, and
    /// a client that lost sync may find a message at its next byte.
    fn client_turn(&mut self, sink: &mut dyn Sink) {
        if !self.dirs[CLIENT].probe.is_empty() {
            self.eval_probe(CLIENT, sink);
        }
        if self.dirs[CLIENT].sync == (Sync::Lost { candidate: false }) {
            self.dirs[CLIENT].sync = Sync::Lost { candidate: true };
        }
    }

    /// A gap before the conversation reached the query phase: continue as if picked up
    /// mid-stream.
    fn degrade_to_midstream(&mut self, sink: &mut dyn Sink) {
        self.conn.phase = Phase::Ready;
        self.lose(CLIENT, sink.health());
        self.lose(SERVER, sink.health());
        self.dirs[CLIENT].sync = Sync::Lost { candidate: true };
        self.conn.fresh = true;
        self.conn.orphans_expected = true;
    }
}

impl Session for PgSession {
    fn feed(&mut self, dir: Direction, data: &[u8], ts_ns: u64, sink: &mut dyn Sink) -> Progress {
        if self.stopped {
            return Progress::Stop;
        }
        if data.is_empty() {
            return Progress::Continue;
        }
        let d = idx(dir);
        if d == SERVER {
            self.client_turn(sink);
        } else if self.conn.phase == Phase::Startup
            && self.dirs[CLIENT].framer.is_idle()
            && data.first() == Some(&0x16)
        {
            // A TLS ClientHello straight away (`sslnegotiation=direct`).
            sink.health().encrypted_connections += 1;
            self.stopped = true;
            return Progress::Stop;
        }
        self.feed_dir(d, data, ts_ns, sink);
        if self.stopped {
            Progress::Stop
        } else {
            Progress::Continue
        }
    }

    fn gap(&mut self, dir: Direction, len: u64, _ts_ns: u64, sink: &mut dyn Sink) {
        if self.stopped {
            return;
        }
        let d = idx(dir);
        if self.conn.phase != Phase::Ready && self.conn.phase != Phase::Ended {
            self.degrade_to_midstream(sink);
            return;
        }
        if self.dirs[d].sync == Sync::Synced && self.dirs[d].framer.skip_lost(len) {
            // The hole is inside one message whose end we know: the framing holds.
            if d == SERVER {
                let unit = self.conn.items.front().and_then(|i| i.unit);
                if let Some(u) = self.conn.unit_mut(unit) {
                    u.damaged = true;
                }
            }
            return;
        }
        if d == SERVER {
            self.conn.server_gap(sink);
            self.lose(SERVER, sink.health());
        } else {
            self.conn.client_gap();
            self.lose(CLIENT, sink.health());
            self.dirs[CLIENT].sync = Sync::Lost { candidate: true };
        }
    }

    fn close(&mut self, _ts_ns: u64, sink: &mut dyn Sink) {
        if !self.stopped && !self.dirs[CLIENT].probe.is_empty() {
            self.eval_probe(CLIENT, sink);
        }
        self.conn.close(sink);
        for dir in &mut self.dirs {
            sink.health().unparsed_bytes += dir.reset();
        }
        self.stopped = true;
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
