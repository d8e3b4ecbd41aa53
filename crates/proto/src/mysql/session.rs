//! The MySQL/MariaDB connection state machine: handshake, command/response pairing, prepared
//! statements, compression switch-over, mid-stream pickup and resynchronization after gaps.
//!
//! Layers: raw bytes -> (compressed frames ->) packets joined into messages ([`super::wire`])
//! -> typed messages ([`super::message`]) -> this state machine. The framing half ([`Dir`])
//! and the conversation half ([`Conn`]) are separate structs so a message can borrow the
//! framing buffers while the conversation is updated.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::message::{
    ColumnCount, ColumnDef, Command, EOF_MAX_LEN, ErrOrProgress, Handshake, HandshakeResponse,
    OkPacket, PrepareOk, Reply, Request, Shape, Terminator, caps, cmd, shape, status,
};
use super::wire::{Assembler, Codec, CompressedHeader, Deframer, Message, PacketHeader};
use crate::{
    ConnMeta, DbError, Direction, Health, Outcome, Progress, Protocol, QueryEvent, Session,
    SessionConfig, Sink,
};

const CLIENT: usize = 0;
const SERVER: usize = 1;
/// Server payload bytes kept per message: enough for any OK, ERR, EOF, greeting or
/// prepare-OK; rows and column definitions are only classified by their first bytes.
const SERVER_KEEP: usize = 8 * 1024;
/// Client payload bytes kept for commands without SQL text (handshake response included).
const CLIENT_KEEP: usize = 4 * 1024;
/// The longest plausible server greeting.
const MAX_GREETING: u32 = 64 * 1024;
/// Bytes looked at before trusting a possible command start when resynchronizing.
const PROBE_LEN: usize = 12;
/// Prepared statements remembered per connection, and the text bytes they may hold.
const MAX_STMTS: usize = 4096;
const MAX_STMT_BYTES: usize = 32 << 20;

fn idx(d: Direction) -> usize {
    match d {
        Direction::ToServer => CLIENT,
        Direction::ToClient => SERVER,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    Synced,
    /// Skipping bytes. `candidate`: the next byte may start a message (after a gap, at the
    /// start of a mid-stream pickup, or at a turn of the conversation).
    Lost {
        candidate: bool,
    },
}

/// The framing state of one direction.
#[derive(Debug)]
struct Dir {
    compressed: bool,
    asm: Assembler,
    deframer: Deframer,
    scratch: Vec<u8>,
    /// Wire bytes consumed and not yet attributed to a message.
    credit: u64,
    sync: Sync,
    probe: Vec<(u8, u64)>,
    /// Compressed bytes of a frame whose content was abandoned: skipped without counting
    /// them again (the frame's size was counted when it began).
    skip_frame: u64,
}

impl Dir {
    fn new(sync: Sync) -> Self {
        Dir {
            compressed: false,
            asm: Assembler::new(),
            deframer: Deframer::new(),
            scratch: Vec::new(),
            credit: 0,
            sync,
            probe: Vec::new(),
            skip_frame: 0,
        }
    }

    /// Drops every partial message; returns the bytes thrown away. With compression these
    /// are the unattributed frames, counted whole when their header was read (which does not
    /// depend on how the bytes were chunked).
    fn reset(&mut self) -> u64 {
        let mut n = self.asm.reset();
        if self.compressed {
            self.deframer.reset();
            self.scratch.clear();
            n = self.credit;
        }
        n += self.probe.len() as u64;
        self.probe.clear();
        self.credit = 0;
        self.skip_frame = 0;
        n
    }
}

/// Side effects the conversation asks of the framing layer.
#[derive(Clone, Copy, Debug, Default)]
struct Act {
    stop: bool,
    compress: bool,
    unsync_client: bool,
    unsync_server: bool,
    /// A request was queued: the server's next bytes start its response.
    server_boundary: bool,
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

/// Result-set parsing state (query, execute, bulk execute, unknown commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rs {
    Start,
    Defs { left: u64 },
    AfterDefs,
    Rows,
}

/// COM_STMT_PREPARE response parsing state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prep {
    Start,
    Defs {
        left: u32,
        then_cols: u16,
    },
    /// Between the parameter and column sections: an EOF unless DEPRECATE_EOF.
    Sep {
        cols: u16,
    },
    /// After the last definition: an EOF follows unless DEPRECATE_EOF. `certain` when the
    /// handshake told us; otherwise the next request (or a non-EOF packet) settles it.
    WaitEof {
        certain: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resp {
    Results(Rs),
    Prepare(Prep),
    /// COM_STMT_FETCH: binary rows, then a terminator.
    Rows,
    /// COM_FIELD_LIST: column definitions, then a terminator.
    Columns,
    /// COM_STATISTICS: one string.
    Text,
    /// One OK/ERR/EOF.
    Single,
    /// COM_CHANGE_USER: auth switch / more data until OK or ERR; client packets belong to it.
    Auth,
    /// LOCAL INFILE: the client sends file packets until an empty one.
    Infile,
}

/// What a successful request changes on the connection.
#[derive(Clone, Debug, Default)]
enum Effect {
    #[default]
    None,
    SetDb(Arc<str>),
    ChangeUser {
        user: Arc<str>,
        db: Option<Arc<str>>,
    },
    ClearStatements,
}

#[derive(Debug)]
struct Pending {
    command: Command,
    text: Option<Arc<str>>,
    text_truncated: bool,
    stmt: Option<u32>,
    /// The statement's text is looked up when the event is emitted (id -1, or a statement
    /// whose prepare response had not arrived when this was sent).
    resolve_stmt: bool,
    start_ns: u64,
    first_response_ns: Option<u64>,
    end_ns: Option<u64>,
    bytes_in: u64,
    bytes_out: u64,
    rows_sent: u64,
    rows_affected: u64,
    /// Warning counts of the packets that end each result set (or the OK), summed.
    warnings: u64,
    error: Option<DbError>,
    resp: Resp,
    damaged: bool,
    effect: Effect,
    /// Schema reported by session-state tracking in an OK packet.
    new_schema: Option<Arc<str>>,
    /// Set by a prepare OK.
    prepared: Option<u32>,
}

enum Step {
    More,
    Done(Outcome),
    /// The packet is not part of this response (which is therefore complete).
    NotMine,
    Malformed,
}

#[derive(Debug, Default)]
struct StmtMap {
    map: HashMap<u32, (Arc<str>, bool, u64)>,
    age: u64,
    bytes: usize,
}

impl StmtMap {
    fn get(&self, id: u32) -> Option<(Arc<str>, bool)> {
        self.map.get(&id).map(|(t, tr, _)| (t.clone(), *tr))
    }
    fn insert(&mut self, id: u32, text: Arc<str>, truncated: bool) {
        self.remove(id);
        while !self.map.is_empty()
            && (self.map.len() >= MAX_STMTS || self.bytes + text.len() > MAX_STMT_BYTES)
        {
            let oldest = self.map.iter().min_by_key(|(_, v)| v.2).map(|(k, _)| *k);
            match oldest {
                Some(k) => self.remove(k),
                None => break,
            }
        }
        self.age += 1;
        self.bytes += text.len();
        self.map.insert(id, (text, truncated, self.age));
    }
    fn remove(&mut self, id: u32) {
        if let Some((t, _, _)) = self.map.remove(&id) {
            self.bytes -= t.len();
        }
    }
    fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}

impl Pending {
    /// Adds the warning count of a packet that ends a result set.
    fn warned(&mut self, n: u16) {
        self.warnings = self.warnings.saturating_add(u64::from(n));
    }
}

/// The conversation: everything but the framing.
#[derive(Debug)]
struct Conn {
    meta: ConnMeta,
    cfg: SessionConfig,
    phase: Phase,
    server_caps: u64,
    /// Negotiated capabilities, when the handshake was seen.
    caps: Option<u64>,
    /// Learnt from the handshake, or from the shape of the first result set.
    deprecate_eof: Option<bool>,
    user: Option<Arc<str>>,
    database: Option<Arc<str>>,
    stmts: StmtMap,
    last_prepared: Option<u32>,
    inflight: VecDeque<Pending>,
    /// A request was lost (gap or overflow): a response arriving with nothing in flight is
    /// its answer, not a stray.
    orphans_expected: bool,
    /// The login in progress (from the handshake response to the server's OK or ERR).
    login: Option<Login>,
}

/// What a failed login's `connect` event needs.
#[derive(Debug)]
struct Login {
    start_ns: u64,
    first_response_ns: Option<u64>,
    bytes_in: u64,
    bytes_out: u64,
}

impl Conn {
    fn session_track(&self) -> bool {
        self.caps
            .is_some_and(|c| c & caps::CLIENT_SESSION_TRACK != 0)
    }

    fn event(&self, p: Pending, outcome: Outcome) -> QueryEvent {
        let (mut text, mut text_truncated, mut stmt) = (p.text, p.text_truncated, p.stmt);
        if p.resolve_stmt {
            let id = match stmt {
                Some(u32::MAX) | None => self.last_prepared,
                s => s,
            };
            if let Some(id) = id {
                stmt = Some(id);
                if let Some((t, tr)) = self.stmts.get(id) {
                    text = Some(t);
                    text_truncated = tr;
                }
            }
        }
        QueryEvent {
            protocol: Protocol::Mysql,
            conn: self.meta.id,
            client: self.meta.client,
            server: self.meta.server,
            start_ns: p.start_ns,
            first_response_ns: p.first_response_ns,
            end_ns: p.end_ns,
            user: self.user.clone(),
            database: self.database.clone(),
            command: p.command.name(),
            text,
            text_truncated,
            statement_id: stmt,
            bytes_in: p.bytes_in,
            bytes_out: p.bytes_out,
            rows_sent: p.rows_sent,
            rows_affected: p.rows_affected,
            warnings: p.warnings,
            outcome: if p.damaged && outcome != Outcome::NoReplyExpected {
                Outcome::Incomplete
            } else {
                outcome
            },
            error: p.error,
        }
    }

    /// Emits the event (with the user and schema in force when the command was sent), then
    /// applies what the command changed.
    fn emit(&mut self, mut p: Pending, outcome: Outcome, sink: &mut dyn Sink) {
        let apply = matches!(outcome, Outcome::Ok) && !p.damaged;
        let prepared = p
            .prepared
            .zip(p.text.clone())
            .map(|(id, t)| (id, t, p.text_truncated));
        let effect = std::mem::take(&mut p.effect);
        let new_schema = p.new_schema.take();
        let ev = self.event(p, outcome);
        sink.event(ev);
        if apply {
            if let Some((id, t, tr)) = prepared {
                self.stmts.insert(id, t, tr);
                self.last_prepared = Some(id);
            }
            match effect {
                Effect::None => {}
                Effect::SetDb(db) => self.database = Some(db),
                Effect::ChangeUser { user, db } => {
                    self.user = Some(user);
                    self.database = db;
                    self.stmts.clear();
                }
                Effect::ClearStatements => self.stmts.clear(),
            }
            if let Some(s) = new_schema {
                self.database = Some(s);
            }
        }
    }

    /// Emits every request in flight as incomplete (their responses can no longer be read).
    fn abandon_inflight(&mut self, sink: &mut dyn Sink) {
        while let Some(mut p) = self.inflight.pop_front() {
            p.damaged = true;
            self.emit(p, Outcome::Incomplete, sink);
        }
    }

    /// A prepare response whose final EOF was uncertain is complete once the client moves on.
    fn finish_maybe_done(&mut self, sink: &mut dyn Sink) {
        if let Some(h) = self.inflight.front()
            && h.resp == Resp::Prepare(Prep::WaitEof { certain: false })
            && let Some(p) = self.inflight.pop_front()
        {
            self.emit(p, Outcome::Ok, sink);
        }
    }

    fn on_client(&mut self, m: &Message<'_>, wire: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        match self.phase {
            Phase::Greeting => {
                // The client spoke first: not MySQL.
                sink.health().malformed += 1;
                act.stop = true;
            }
            Phase::ClientResponse => match HandshakeResponse::parse(m.head) {
                Ok(r) if r.ssl_request => {
                    sink.health().encrypted_connections += 1;
                    act.stop = true;
                }
                Ok(r) => {
                    self.login = Some(Login {
                        start_ns: m.start_ts,
                        first_response_ns: None,
                        bytes_in: wire,
                        bytes_out: 0,
                    });
                    let eff = r.capabilities & self.server_caps;
                    self.caps = Some(eff);
                    self.deprecate_eof = Some(eff & caps::CLIENT_DEPRECATE_EOF != 0);
                    self.user = Some(lossy_arc(r.user));
                    self.database = r.database.filter(|d| !d.is_empty()).map(lossy_arc);
                    self.phase = Phase::Auth;
                }
                Err(_) => {
                    sink.health().malformed += 1;
                    self.phase = Phase::Auth;
                }
            },
            // Auth data from the client (auth switch responses, public key requests...).
            Phase::Auth => {
                if let Some(l) = &mut self.login {
                    l.bytes_in += wire;
                }
            }
            Phase::Ended => sink.health().unparsed_bytes += wire,
            Phase::Command => return self.client_command(m, wire, sink),
        }
        act
    }

    fn client_command(&mut self, m: &Message<'_>, wire: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        if let Some(h) = self.inflight.front_mut() {
            match h.resp {
                Resp::Infile => {
                    h.bytes_in += wire;
                    if m.len == 0 {
                        h.resp = Resp::Results(Rs::Start);
                    }
                    return act;
                }
                Resp::Auth => {
                    h.bytes_in += wire;
                    return act;
                }
                _ => {}
            }
        }
        self.finish_maybe_done(sink);
        if m.seq != 0 {
            // Not a command: a packet of an exchange we did not follow.
            sink.health().unparsed_bytes += wire;
            return act;
        }
        if m.len == 0 {
            sink.health().malformed += 1;
            sink.health().unparsed_bytes += wire;
            return act;
        }
        let command = Command(m.head.first().copied().unwrap_or(0));
        let mut p = Pending {
            command,
            text: None,
            text_truncated: false,
            stmt: None,
            resolve_stmt: false,
            start_ns: m.start_ts,
            first_response_ns: None,
            end_ns: None,
            bytes_in: wire,
            bytes_out: 0,
            rows_sent: 0,
            rows_affected: 0,
            warnings: 0,
            error: None,
            resp: Resp::Single,
            damaged: false,
            effect: Effect::None,
            new_schema: None,
            prepared: None,
        };
        let max = self.cfg.max_text;
        match Request::parse(m.head, self.caps) {
            Ok(Request::Query { sql }) => {
                let total = sql_total(m, sql);
                let (t, tr) = make_text(sql, m.tail, total, max);
                if let Some(db) = use_statement(&t) {
                    p.effect = Effect::SetDb(db.into());
                }
                p.text = Some(t);
                p.text_truncated = tr;
            }
            Ok(Request::Prepare { sql }) => {
                let total = sql_total(m, sql);
                let (t, tr) = make_text(sql, m.tail, total, max);
                p.text = Some(t);
                p.text_truncated = tr;
            }
            Ok(
                Request::Execute { stmt_id, .. }
                | Request::BulkExecute { stmt_id, .. }
                | Request::Fetch { stmt_id, .. }
                | Request::Close { stmt_id }
                | Request::Reset { stmt_id }
                | Request::SendLongData { stmt_id, .. },
            ) => {
                p.stmt = Some(stmt_id);
                match self.stmts.get(stmt_id) {
                    Some((t, tr)) if stmt_id != u32::MAX => {
                        p.text = Some(t);
                        p.text_truncated = tr;
                    }
                    _ => p.resolve_stmt = true,
                }
                if command.0 == cmd::STMT_CLOSE {
                    if p.resolve_stmt {
                        let ev = self.event(p, Outcome::NoReplyExpected);
                        self.stmts.remove(ev.statement_id.unwrap_or(stmt_id));
                        sink.event(ev);
                    } else {
                        self.stmts.remove(stmt_id);
                        self.emit(p, Outcome::NoReplyExpected, sink);
                    }
                    return act;
                }
            }
            Ok(Request::InitDb { schema }) => {
                if !schema.is_empty() {
                    p.effect = Effect::SetDb(lossy_arc(schema));
                }
            }
            Ok(Request::ChangeUser { user, schema }) => {
                p.effect = Effect::ChangeUser {
                    user: lossy_arc(user),
                    db: schema.filter(|s| !s.is_empty()).map(lossy_arc),
                };
            }
            Ok(Request::Other(c)) if c.0 == cmd::RESET_CONNECTION => {
                p.effect = Effect::ClearStatements;
            }
            Ok(_) => {}
            Err(_) => sink.health().malformed += 1,
        }
        p.resp = match command.reply() {
            Reply::None => {
                self.emit(p, Outcome::NoReplyExpected, sink);
                return act;
            }
            Reply::Stream => {
                // A replication stream follows: there is no reply to pair, and nothing else
                // will be asked on this connection.
                self.emit(p, Outcome::NoReplyExpected, sink);
                act.stop = true;
                return act;
            }
            Reply::Single => Resp::Single,
            Reply::Results => Resp::Results(Rs::Start),
            Reply::Prepare => Resp::Prepare(Prep::Start),
            Reply::Rows => Resp::Rows,
            Reply::Columns => Resp::Columns,
            Reply::Text => Resp::Text,
            Reply::Auth => Resp::Auth,
        };
        if self.inflight.len() >= self.cfg.max_inflight {
            sink.health().inflight_overflow += 1;
            self.orphans_expected = true;
            return act;
        }
        self.inflight.push_back(p);
        act.server_boundary = true;
        act
    }

    /// A `connect` event for a login the server refused with the ERR in `head`.
    fn failed_connect(&self, l: Login, head: &[u8], ts: u64, sink: &mut dyn Sink) {
        let Some(error) = db_error(head) else {
            sink.health().malformed += 1;
            return;
        };
        sink.event(QueryEvent {
            protocol: Protocol::Mysql,
            conn: self.meta.id,
            client: self.meta.client,
            server: self.meta.server,
            start_ns: l.start_ns,
            first_response_ns: l.first_response_ns,
            end_ns: Some(ts),
            user: self.user.clone(),
            database: self.database.clone(),
            command: "connect",
            text: None,
            text_truncated: false,
            statement_id: None,
            bytes_in: l.bytes_in,
            bytes_out: l.bytes_out,
            rows_sent: 0,
            rows_affected: 0,
            warnings: 0,
            outcome: Outcome::Error,
            error: Some(error),
        });
    }

    fn on_server(&mut self, m: &Message<'_>, wire: u64, ts: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        match self.phase {
            Phase::Greeting => match Handshake::parse(m.head) {
                Ok(h) => {
                    self.server_caps = h.capabilities;
                    self.phase = Phase::ClientResponse;
                }
                Err(_) => {
                    if m.head.first() == Some(&0xFF) {
                        // A refusal instead of a greeting ("Too many connections", "Host is
                        // blocked"): a failed connect of its own.
                        let login = Login {
                            start_ns: ts,
                            first_response_ns: Some(ts),
                            bytes_in: 0,
                            bytes_out: wire,
                        };
                        self.failed_connect(login, m.head, ts, sink);
                    } else {
                        sink.health().malformed += 1;
                    }
                    // Not MySQL, or a refusal: nothing to follow.
                    act.stop = true;
                }
            },
            Phase::ClientResponse => {
                sink.health().malformed += 1;
                sink.health().unparsed_bytes += wire;
            }
            Phase::Auth => match m.head.first() {
                Some(0x00) => {
                    // Successful logins are not events (only failed ones are).
                    self.login = None;
                    self.phase = Phase::Command;
                    let c = self.caps.unwrap_or(0);
                    if c & (caps::CLIENT_COMPRESS | caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM) != 0 {
                        act.compress = true;
                    }
                }
                Some(0xFF) => {
                    self.phase = Phase::Ended;
                    if let Some(mut l) = self.login.take() {
                        l.bytes_out += wire;
                        l.first_response_ns.get_or_insert(ts);
                        self.failed_connect(l, m.head, ts, sink);
                    }
                }
                // Auth switch request, auth more data.
                _ => {
                    if let Some(l) = &mut self.login {
                        l.bytes_out += wire;
                        l.first_response_ns.get_or_insert(ts);
                    }
                }
            },
            Phase::Ended => sink.health().unparsed_bytes += wire,
            Phase::Command => return self.server_response(m, wire, ts, sink),
        }
        act
    }

    fn server_response(&mut self, m: &Message<'_>, wire: u64, ts: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        // MariaDB progress reports may come at any point of a long command.
        let progress = m.head.first() == Some(&0xFF)
            && matches!(ErrOrProgress::parse(m.head), Ok(ErrOrProgress::Progress(_)));
        let session_track = self.session_track();
        loop {
            let Some(h) = self.inflight.front_mut() else {
                if self.orphans_expected {
                    sink.health().unparsed_bytes += wire;
                } else {
                    sink.health().responses_without_request += 1;
                    sink.health().unparsed_bytes += wire;
                }
                act.unsync_server = true;
                return act;
            };
            let step = if progress {
                Step::More
            } else {
                step(h, m, &mut self.deprecate_eof, session_track)
            };
            if matches!(step, Step::NotMine) {
                if let Some(p) = self.inflight.pop_front() {
                    self.emit(p, Outcome::Ok, sink);
                }
                continue;
            }
            h.bytes_out += wire;
            h.first_response_ns.get_or_insert(m.start_ts);
            h.end_ns = Some(ts);
            match step {
                Step::More | Step::NotMine => {}
                Step::Done(outcome) => {
                    if let Some(p) = self.inflight.pop_front() {
                        self.emit(p, outcome, sink);
                    }
                }
                Step::Malformed => {
                    sink.health().malformed += 1;
                    self.abandon_inflight(sink);
                    act.unsync_server = true;
                }
            }
            return act;
        }
    }

    /// The server direction lost bytes: what was in flight cannot be completed.
    fn server_gap(&mut self, sink: &mut dyn Sink) {
        self.abandon_inflight(sink);
    }

    /// The client direction lost bytes.
    fn client_gap(&mut self) {
        match self.inflight.front_mut() {
            Some(h) if h.resp == Resp::Infile => {
                h.damaged = true;
                h.resp = Resp::Results(Rs::Start);
            }
            Some(h) if h.resp == Resp::Auth => h.damaged = true,
            _ => self.orphans_expected = true,
        }
    }

    fn close(&mut self, sink: &mut dyn Sink) {
        while let Some(p) = self.inflight.pop_front() {
            let outcome = if matches!(p.resp, Resp::Prepare(Prep::WaitEof { .. })) {
                Outcome::Ok
            } else if p.first_response_ns.is_some() || p.damaged {
                Outcome::Incomplete
            } else {
                Outcome::NoResponse
            };
            self.emit(p, outcome, sink);
        }
    }
}

/// The server error an ERR packet carries (None for a progress report or a malformed one).
fn db_error(head: &[u8]) -> Option<DbError> {
    match ErrOrProgress::parse(head) {
        Ok(ErrOrProgress::Err(e)) => Some(DbError {
            code: u32::from(e.code),
            state: e.sql_state.map(|s| String::from_utf8_lossy(s).into()),
            message: String::from_utf8_lossy(e.message).into(),
        }),
        _ => None,
    }
}

/// Advances one response by one server message.
fn step(h: &mut Pending, m: &Message<'_>, deprecate_eof: &mut Option<bool>, st: bool) -> Step {
    let head = m.head;
    let sh = shape(head, m.len);
    let err = |h: &mut Pending| match db_error(head) {
        Some(e) => {
            h.error = Some(e);
            Step::Done(Outcome::Error)
        }
        None => Step::Malformed,
    };
    // The packet that ends a result set (or the whole response): its warning count is the
    // statement's (an EOF between column definitions and rows is not one of these).
    let end_of_results = |h: &mut Pending, status: u16, warnings: u16| {
        h.warned(warnings);
        if status & status::MORE_RESULTS_EXISTS != 0 {
            h.resp = Resp::Results(Rs::Start);
            Step::More
        } else {
            Step::Done(Outcome::Ok)
        }
    };
    let ok = |h: &mut Pending| match OkPacket::parse(head, st) {
        Ok(ok) => {
            h.rows_affected = h.rows_affected.saturating_add(ok.affected_rows);
            if let Some(s) = ok.schema {
                h.new_schema = Some(lossy_arc(s));
            }
            Ok((ok.status, ok.warnings))
        }
        Err(_) => Err(Step::Malformed),
    };
    match h.resp {
        Resp::Infile => {
            // The server answered before the client finished sending (or refused the file).
            h.resp = Resp::Results(Rs::Start);
            step(h, m, deprecate_eof, st)
        }
        Resp::Results(Rs::Start) => match sh {
            Shape::Ok => match ok(h) {
                Ok((status, warnings)) => end_of_results(h, status, warnings),
                Err(s) => s,
            },
            Shape::Err => err(h),
            Shape::Terminator => match Terminator::parse(head, m.len, st) {
                Ok(t) => end_of_results(h, t.status(), t.warnings()),
                Err(_) => Step::Malformed,
            },
            Shape::LocalInfile => {
                h.resp = Resp::Infile;
                Step::More
            }
            Shape::Other => match ColumnCount::parse(head) {
                Ok(cc) => {
                    h.resp = Resp::Results(if cc.metadata_follows == Some(false) {
                        Rs::AfterDefs
                    } else {
                        Rs::Defs { left: cc.count }
                    });
                    Step::More
                }
                Err(_) => Step::Malformed,
            },
        },
        Resp::Results(Rs::Defs { left }) => {
            if !ColumnDef::looks_like(head) {
                return Step::Malformed;
            }
            h.resp = Resp::Results(if left <= 1 {
                Rs::AfterDefs
            } else {
                Rs::Defs { left: left - 1 }
            });
            Step::More
        }
        Resp::Results(Rs::AfterDefs) => match sh {
            Shape::Terminator if m.len < EOF_MAX_LEN => {
                *deprecate_eof = Some(false);
                let status = Terminator::parse(head, m.len, st)
                    .map(|t| t.status())
                    .unwrap_or(0);
                if status & status::CURSOR_EXISTS != 0 {
                    // COM_STMT_EXECUTE with a cursor: rows come through COM_STMT_FETCH.
                    Step::Done(Outcome::Ok)
                } else {
                    h.resp = Resp::Results(Rs::Rows);
                    Step::More
                }
            }
            Shape::Terminator => {
                *deprecate_eof = Some(true);
                match Terminator::parse(head, m.len, st) {
                    Ok(t) => end_of_results(h, t.status(), t.warnings()),
                    Err(_) => Step::Malformed,
                }
            }
            Shape::Err => err(h),
            _ => {
                *deprecate_eof = Some(true);
                h.rows_sent += 1;
                h.resp = Resp::Results(Rs::Rows);
                Step::More
            }
        },
        Resp::Results(Rs::Rows) | Resp::Rows => match sh {
            Shape::Terminator => match Terminator::parse(head, m.len, st) {
                Ok(t) if h.resp == Resp::Rows => {
                    h.warned(t.warnings());
                    Step::Done(Outcome::Ok)
                }
                Ok(t) => end_of_results(h, t.status(), t.warnings()),
                Err(_) => Step::Malformed,
            },
            Shape::Err => err(h),
            _ => {
                h.rows_sent += 1;
                Step::More
            }
        },
        Resp::Columns => match sh {
            Shape::Terminator => Step::Done(Outcome::Ok),
            Shape::Err => err(h),
            _ if ColumnDef::looks_like(head) => Step::More,
            _ => Step::Malformed,
        },
        Resp::Text => match sh {
            Shape::Err => err(h),
            _ => Step::Done(Outcome::Ok),
        },
        Resp::Single => match sh {
            Shape::Ok => match ok(h) {
                Ok((_, warnings)) => {
                    h.warned(warnings);
                    Step::Done(Outcome::Ok)
                }
                Err(s) => s,
            },
            Shape::Err => err(h),
            _ => Step::Done(Outcome::Ok),
        },
        Resp::Auth => match sh {
            Shape::Ok => match ok(h) {
                Ok(_) => Step::Done(Outcome::Ok),
                Err(s) => s,
            },
            Shape::Err => err(h),
            _ => Step::More,
        },
        Resp::Prepare(p) => step_prepare(h, p, m, deprecate_eof, sh, err),
    }
}

fn step_prepare(
    h: &mut Pending,
    p: Prep,
    m: &Message<'_>,
    deprecate_eof: &mut Option<bool>,
    sh: Shape,
    err: impl Fn(&mut Pending) -> Step,
) -> Step {
    let head = m.head;
    let is_eof = sh == Shape::Terminator && m.len < EOF_MAX_LEN;
    // After the last definition of the last section.
    let last = |h: &mut Pending, deprecate_eof: &Option<bool>| match deprecate_eof {
        Some(true) => Step::Done(Outcome::Ok),
        known => {
            h.resp = Resp::Prepare(Prep::WaitEof {
                certain: known.is_some(),
            });
            Step::More
        }
    };
    match p {
        Prep::Start => match sh {
            Shape::Ok => match PrepareOk::parse(head) {
                Ok(ok) => {
                    h.stmt = Some(ok.stmt_id);
                    h.prepared = Some(ok.stmt_id);
                    let (params, cols) = (ok.num_params, ok.num_columns);
                    if ok.metadata_follows == Some(false) || (params == 0 && cols == 0) {
                        Step::Done(Outcome::Ok)
                    } else {
                        h.resp = Resp::Prepare(if params > 0 {
                            Prep::Defs {
                                left: u32::from(params),
                                then_cols: cols,
                            }
                        } else {
                            Prep::Defs {
                                left: u32::from(cols),
                                then_cols: 0,
                            }
                        });
                        Step::More
                    }
                }
                Err(_) => Step::Malformed,
            },
            Shape::Err => err(h),
            _ => Step::Malformed,
        },
        Prep::Defs { left, then_cols } => {
            if !ColumnDef::looks_like(head) {
                return Step::Malformed;
            }
            if left > 1 {
                h.resp = Resp::Prepare(Prep::Defs {
                    left: left - 1,
                    then_cols,
                });
                Step::More
            } else if then_cols > 0 {
                h.resp = Resp::Prepare(Prep::Sep { cols: then_cols });
                Step::More
            } else {
                last(h, deprecate_eof)
            }
        }
        Prep::Sep { cols } => {
            if is_eof {
                *deprecate_eof = Some(false);
                h.resp = Resp::Prepare(Prep::Defs {
                    left: u32::from(cols),
                    then_cols: 0,
                });
                Step::More
            } else if ColumnDef::looks_like(head) {
                *deprecate_eof = Some(true);
                if cols > 1 {
                    h.resp = Resp::Prepare(Prep::Defs {
                        left: u32::from(cols) - 1,
                        then_cols: 0,
                    });
                    Step::More
                } else {
                    last(h, deprecate_eof)
                }
            } else {
                Step::Malformed
            }
        }
        Prep::WaitEof { certain } => {
            if is_eof {
                *deprecate_eof = Some(false);
                Step::Done(Outcome::Ok)
            } else {
                if !certain {
                    *deprecate_eof = Some(true);
                }
                Step::NotMine
            }
        }
    }
}

/// Total SQL bytes on the wire for a message whose head ends with `sql`.
fn sql_total(m: &Message<'_>, sql: &[u8]) -> u64 {
    let offset = m.head.len().saturating_sub(sql.len());
    m.len.saturating_sub(offset as u64)
}

fn lossy_arc(b: &[u8]) -> Arc<str> {
    match std::str::from_utf8(b) {
        Ok(s) => Arc::from(s),
        Err(_) => Arc::from(String::from_utf8_lossy(b).as_ref()),
    }
}

/// Statement text kept for an event: at most `max` bytes, cut at a char boundary. When the
/// middle of a longer statement was dropped on the way (`tail` holds its last bytes), the text is
/// its beginning joined to its end: a statement is huge because of one long literal or VALUES
/// list, so the join lands inside it and the fingerprint still sees the whole statement's shape
/// (`SELECT LENGTH('…') AS x` stays `select length(?) as x`).
fn make_text(sql: &[u8], tail: &[u8], total: u64, max: usize) -> (Arc<str>, bool) {
    if !tail.is_empty() && total > sql.len() as u64 && max > tail.len() {
        let head = &sql[..sql.len().min(max - tail.len())];
        let head = match std::str::from_utf8(head) {
            Err(e) if e.error_len().is_none() => &head[..e.valid_up_to()],
            _ => head,
        };
        // The tail may start inside a character: skip its continuation bytes.
        let skip = tail
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count();
        let mut text = String::from_utf8_lossy(head).into_owned();
        text.push_str(&String::from_utf8_lossy(&tail[skip..]));
        return (Arc::from(text), true);
    }
    let mut bytes = &sql[..sql.len().min(max)];
    let truncated = total > bytes.len() as u64;
    if truncated
        && let Err(e) = std::str::from_utf8(bytes)
        && e.error_len().is_none()
    {
        // Cut in the middle of a character: drop its first bytes.
        bytes = &bytes[..e.valid_up_to()];
    }
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= max {
        return (Arc::from(text.as_ref()), truncated);
    }
    // Replacement characters made it longer.
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    (Arc::from(&text[..cut]), true)
}

/// The schema named by a `USE db` statement.
fn use_statement(sql: &str) -> Option<String> {
    let s = skip_space_and_comments(sql);
    let kw = s.get(..3)?;
    if !kw.eq_ignore_ascii_case("use") {
        return None;
    }
    let rest = &s[3..];
    let after = skip_space_and_comments(rest);
    if after.len() == rest.len() && !after.starts_with('`') {
        return None;
    }
    if let Some(q) = after.strip_prefix('`') {
        let mut name = String::new();
        let mut chars = q.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '`' {
                if chars.peek() == Some(&'`') {
                    chars.next();
                    name.push('`');
                } else {
                    return (!name.is_empty()).then_some(name);
                }
            } else {
                name.push(c);
            }
        }
        return None;
    }
    let name: String = after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
        .collect();
    let tail = skip_space_and_comments(&after[name.len()..]);
    if name.is_empty() || !(tail.is_empty() || tail.starts_with(';')) {
        return None;
    }
    Some(name)
}

fn skip_space_and_comments(mut s: &str) -> &str {
    loop {
        let t = s.trim_start();
        if let Some(r) = t.strip_prefix("/*") {
            s = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else if t.starts_with("-- ") || t.starts_with('#') {
            s = t.find('\n').map_or("", |i| &t[i + 1..]);
        } else {
            return t;
        }
    }
}

/// Checks whether `b` (the first bytes seen at a possible command boundary) starts a command.
/// Returns whether the stream is compressed, or `None` when it does not look like a command.
fn probe_verdict(b: &[u8], compressed: Option<bool>) -> Option<bool> {
    let plain_ok = |b: &[u8], room: Option<u32>| -> bool {
        let (Some(h), Some(&c)) = (PacketHeader::parse(b), b.get(4)) else {
            return false;
        };
        h.seq == 0
            && h.len >= 1
            && room.is_none_or(|r| h.len.saturating_add(4) <= r)
            && Command(c).plausible_len(h.len)
    };
    let compressed_ok = || -> bool {
        let Some(h) = CompressedHeader::parse(b) else {
            return false;
        };
        if h.seq != 0 || h.compressed_len == 0 {
            return false;
        }
        let payload = b.get(7..).unwrap_or(&[]);
        if h.uncompressed_len == 0 {
            plain_ok(payload, Some(h.compressed_len))
        } else {
            Codec::sniff(payload).is_some()
        }
    };
    match compressed {
        Some(false) => plain_ok(b, None).then_some(false),
        Some(true) => compressed_ok().then_some(true),
        None => {
            if compressed_ok() {
                Some(true)
            } else if plain_ok(b, None) {
                Some(false)
            } else {
                None
            }
        }
    }
}

/// One MySQL/MariaDB connection. Build it with [`super::new_session`].
#[derive(Debug)]
pub struct MysqlSession {
    conn: Conn,
    dirs: [Dir; 2],
    /// Whether we know if the connection uses the compressed protocol (always after a seen
    /// handshake; mid-stream, once the first command was recognised).
    framing_known: bool,
    stopped: bool,
}

impl MysqlSession {
    pub(crate) fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        let saw_open = meta.saw_open;
        let (phase, client, server) = if saw_open {
            (Phase::Greeting, Sync::Synced, Sync::Synced)
        } else {
            (
                Phase::Command,
                Sync::Lost { candidate: true },
                Sync::Lost { candidate: false },
            )
        };
        MysqlSession {
            conn: Conn {
                meta,
                cfg,
                phase,
                server_caps: 0,
                caps: None,
                deprecate_eof: None,
                user: None,
                database: None,
                stmts: StmtMap::default(),
                last_prepared: None,
                inflight: VecDeque::new(),
                orphans_expected: false,
                login: None,
            },
            dirs: [Dir::new(client), Dir::new(server)],
            framing_known: saw_open,
            stopped: false,
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
            .map(|d| d.asm.buffered_bytes() + d.scratch.capacity() + d.probe.capacity() * 16)
            .sum();
        let inflight: usize = self
            .conn
            .inflight
            .iter()
            .map(|p| std::mem::size_of::<Pending>() + p.text.as_ref().map_or(0, |t| t.len()))
            .sum();
        dirs + inflight + self.conn.stmts.bytes + self.conn.stmts.map.len() * 48
    }

    /// Whether the compressed protocol is in use (as negotiated or detected).
    pub fn compressed(&self) -> bool {
        self.dirs[CLIENT].compressed
    }

    /// Marks direction `d` as out of sync. The compressed frame in progress, if its framing
    /// is still trusted (`frame_ok`), is skipped to its end without counting it twice.
    fn lose_keeping_frame(&mut self, d: usize, health: &mut Health) {
        let left = if self.dirs[d].compressed {
            self.dirs[d].deframer.frame_left()
        } else {
            0
        };
        self.lose(d, health);
        self.dirs[d].skip_frame = u64::from(left);
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
        if act.compress {
            for d in &mut self.dirs {
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
        if act.server_boundary && matches!(self.dirs[SERVER].sync, Sync::Lost { .. }) {
            self.dirs[SERVER].sync = Sync::Lost { candidate: true };
        }
    }

    /// Feeds bytes to a direction that is in sync; returns how many were consumed (the call
    /// stops early after a message that changed the framing or the sync state).
    fn feed_synced(&mut self, d: usize, data: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        if !self.dirs[d].compressed {
            let conn = &self.conn;
            let dir = &mut self.dirs[d];
            let keep = |b: u8| keep_for(conn, d, b);
            let (n, msg) = dir.asm.push(data, ts, &keep);
            dir.credit += n as u64;
            if let Some(m) = msg {
                let wire = std::mem::take(&mut dir.credit);
                let act = match d {
                    CLIENT => self.conn.on_client(&m, wire, sink),
                    _ => self.conn.on_server(&m, wire, ts, sink),
                };
                self.apply(act, sink);
            }
            return n;
        }
        // Compressed: one deframing step, then the decompressed bytes through the packet layer.
        let mut consumed = 0usize;
        loop {
            let mut scratch = std::mem::take(&mut self.dirs[d].scratch);
            scratch.clear();
            let step = self.dirs[d].deframer.push(&data[consumed..], &mut scratch);
            let step = match step {
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
                if self.stopped || self.dirs[d].sync != Sync::Synced || !self.dirs[d].compressed {
                    // The frame was counted when it began.
                    break;
                }
                let conn = &self.conn;
                let dir = &mut self.dirs[d];
                let keep = |b: u8| keep_for(conn, d, b);
                let (n, msg) = dir.asm.push(inner, ts, &keep);
                inner = &inner[n..];
                if let Some(m) = msg {
                    let wire = std::mem::take(&mut dir.credit);
                    let act = match d {
                        CLIENT => self.conn.on_client(&m, wire, sink),
                        _ => self.conn.on_server(&m, wire, ts, sink),
                    };
                    self.apply(act, sink);
                }
            }
            self.dirs[d].scratch = scratch;
            let stay = self.dirs[d].sync == Sync::Synced && !self.stopped;
            if !stay || !self.dirs[d].deframer.has_pending_output() {
                return consumed;
            }
        }
    }

    /// A malformed frame: what was in flight in that direction is lost.
    fn abandon(&mut self, d: usize, sink: &mut dyn Sink) {
        if d == SERVER {
            self.conn.server_gap(sink);
        } else {
            self.conn.client_gap();
        }
        self.lose(d, sink.health());
    }

    fn feed_dir(&mut self, d: usize, mut data: &[u8], ts: u64, sink: &mut dyn Sink) {
        while !data.is_empty() && !self.stopped {
            let skip = &mut self.dirs[d].skip_frame;
            if *skip > 0 && self.dirs[d].sync != Sync::Synced {
                let n = (*skip).min(data.len() as u64);
                *skip -= n;
                data = &data[n as usize..];
                continue;
            }
            match self.dirs[d].sync {
                Sync::Synced => {
                    let n = self.feed_synced(d, data, ts, sink);
                    if n == 0 && self.dirs[d].sync == Sync::Synced && !self.stopped {
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
                Sync::Lost { candidate: true } if d == SERVER => {
                    // The first server byte after a request: the start of its response.
                    self.dirs[SERVER].reset();
                    self.dirs[SERVER].sync = Sync::Synced;
                    self.conn.orphans_expected = false;
                }
                Sync::Lost { candidate: true } => {
                    let dir = &mut self.dirs[CLIENT];
                    let n = (PROBE_LEN - dir.probe.len()).min(data.len());
                    dir.probe.extend(data[..n].iter().map(|&b| (b, ts)));
                    data = &data[n..];
                    if dir.probe.len() >= PROBE_LEN {
                        self.eval_probe(sink);
                    }
                }
            }
        }
    }

    /// Decides whether the bytes collected at a possible command boundary start a command;
    /// if so, replays them in sync.
    fn eval_probe(&mut self, sink: &mut dyn Sink) {
        let probe = std::mem::take(&mut self.dirs[CLIENT].probe);
        if probe.is_empty() {
            return;
        }
        let bytes: Vec<u8> = probe.iter().map(|p| p.0).collect();
        let known = self.framing_known.then_some(self.dirs[CLIENT].compressed);
        match probe_verdict(&bytes, known) {
            None => {
                sink.health().unparsed_bytes += bytes.len() as u64;
                self.dirs[CLIENT].sync = Sync::Lost { candidate: false };
            }
            Some(compressed) => {
                if !self.framing_known {
                    self.framing_known = true;
                    for dir in &mut self.dirs {
                        dir.compressed = compressed;
                    }
                }
                let dir = &mut self.dirs[CLIENT];
                dir.asm.reset();
                dir.deframer.reset();
                dir.credit = 0;
                dir.sync = Sync::Synced;
                for (run, ts) in crate::timestamp_runs(&probe) {
                    self.feed_dir(CLIENT, &bytes[run], ts, sink);
                }
            }
        }
    }

    /// Server bytes are arriving: the client's turn ended. A pending probe is decided now, and
    /// a client that lost sync may find a command at its next byte.
    fn client_turn(&mut self, sink: &mut dyn Sink) {
        if !self.dirs[CLIENT].probe.is_empty() {
            self.eval_probe(sink);
        }
        if self.dirs[CLIENT].sync == (Sync::Lost { candidate: false }) {
            self.dirs[CLIENT].sync = Sync::Lost { candidate: true };
        }
    }

    /// A gap during the handshake: continue as if picked up mid-stream.
    fn degrade_to_midstream(&mut self, sink: &mut dyn Sink) {
        self.conn.phase = Phase::Command;
        self.conn.caps = None;
        self.conn.deprecate_eof = None;
        self.framing_known = false;
        self.lose(CLIENT, sink.health());
        self.lose(SERVER, sink.health());
        self.dirs[CLIENT].sync = Sync::Lost { candidate: true };
    }
}

fn keep_for(conn: &Conn, d: usize, first: u8) -> usize {
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
        cmd::QUERY | cmd::STMT_PREPARE => conn.cfg.max_text.saturating_add(1 + 1024),
        _ => CLIENT_KEEP,
    }
}

impl Session for MysqlSession {
    fn feed(&mut self, dir: Direction, data: &[u8], ts_ns: u64, sink: &mut dyn Sink) -> Progress {
        if self.stopped {
            return Progress::Stop;
        }
        if data.is_empty() {
            return Progress::Continue;
        }
        let d = idx(dir);
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

    fn gap(&mut self, dir: Direction, _len: u64, _ts_ns: u64, sink: &mut dyn Sink) {
        if self.stopped {
            return;
        }
        let d = idx(dir);
        if matches!(
            self.conn.phase,
            Phase::Greeting | Phase::ClientResponse | Phase::Auth
        ) {
            self.degrade_to_midstream(sink);
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
            self.eval_probe(sink);
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
