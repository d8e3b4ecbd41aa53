//! Typed MongoDB messages, parsed as their bodies stream in: what a request asks (command,
//! database, collection, query shape, documents sent, cursor ids) and what a reply says (ok,
//! error, n, nModified, documents returned, cursor id, write errors). Every opcode has a small
//! state machine over [`FieldReader`] primitives and the [`Walker`]; OP_COMPRESSED decompresses
//! into the state machine of the opcode it wraps. Pure parsing, no conversation state.

use super::bson::{Act, Ctx, Scalar, Visitor, Walker, ty};
use super::commands::{self, Command, Mode, Role};
use super::shape::{SHAPE, Shape};
use super::wire::{
    Cursor, FieldReader, Inflater, MAX_MESSAGE_LEN, WireError, msg_flag, op, reply_flag,
};

type Res<T> = Result<T, WireError>;

/// Collection and database names longer than this are cut.
const NAME_CAP: u32 = 256;
/// Cursor ids kept from one killCursors.
pub const MAX_KILL_IDS: usize = 64;
/// Command names shown for unknown commands are cut at this length.
const UNKNOWN_NAME_CAP: usize = 64;

// Request contexts.
const ROOT_CMD: Ctx = 1;
/// The command document inside a `$query` wrapper (legacy OP_QUERY on `$cmd`).
const WRAPPED_CMD: Ctx = 2;
/// A legacy OP_QUERY document on a collection: a filter, or `{$query, $orderby, ...}`.
const ROOT_LEGACY_QUERY: Ctx = 3;
const STATEMENTS: Ctx = 4;
const STATEMENT: Ctx = 5;
const DOCUMENTS: Ctx = 6;
const CURSOR_IDS: Ctx = 7;
const SKIP_ROOT: Ctx = 8;

// Reply contexts.
const R_ROOT: Ctx = 20;
const R_CURSOR: Ctx = 21;
const R_BATCH: Ctx = 22;
const R_WRITE_ERRORS: Ctx = 23;
const R_WRITE_ERROR: Ctx = 24;
const R_WCE: Ctx = 25;
const R_LAST_ERROR: Ctx = 26;
const R_VALUES: Ctx = 27;
const R_UPSERTED: Ctx = 28;

/// What a request is.
#[derive(Clone, Copy, Debug)]
pub enum ReqKind {
    /// A command (OP_MSG, or OP_QUERY on `<db>.$cmd`): a known one, or `None` for an unknown
    /// command name.
    Command(Option<&'static Command>),
    /// A legacy operation (OP_QUERY on a collection, OP_INSERT, ...): its opcode.
    Legacy(i32),
    /// An opcode we do not know.
    Unknown(i32),
}

/// Everything a request message says that dbtap keeps.
#[derive(Debug)]
pub struct Request {
    pub kind: ReqKind,
    /// The command name as sent, for unknown commands (cut, sanitized).
    pub unknown_name: Option<String>,
    pub db: Option<Vec<u8>>,
    pub collection: Option<Vec<u8>>,
    pub shape: Shape,
    /// Documents (insert) or statements (update, delete) sent.
    pub docs: u64,
    /// The cursor a getMore (or OP_GET_MORE) reads.
    pub cursor_id: Option<i64>,
    /// Cursors a killCursors (or OP_KILL_CURSORS) closes (the first [`MAX_KILL_IDS`]).
    pub kill_ids: Vec<i64>,
    /// OP_MSG flags (0 for other opcodes).
    pub flags: u32,
    /// The body could not be read to its end (malformed or cut by a capture gap).
    pub malformed: bool,
    // Parsing state.
    /// An OP_QUERY on `$cmd`: the command may be wrapped in `$query`.
    legacy_cmd: bool,
    pending: Pending,
    legacy_plain: Option<bool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    None,
    Shape,
    Collection,
    Db,
    CursorId,
    KillId,
}

impl Request {
    fn new(kind: ReqKind, shape_cap: usize) -> Self {
        Request {
            kind,
            unknown_name: None,
            db: None,
            collection: None,
            shape: Shape::new(shape_cap),
            docs: 0,
            cursor_id: None,
            kill_ids: Vec::new(),
            flags: 0,
            malformed: false,
            legacy_cmd: false,
            pending: Pending::None,
            legacy_plain: None,
        }
    }

    /// No reply will come: OP_MSG with moreToCome, or a legacy write or kill-cursors.
    pub fn expects_no_reply(&self) -> bool {
        match self.kind {
            ReqKind::Command(_) => self.flags & msg_flag::MORE_TO_COME != 0,
            ReqKind::Legacy(o) => {
                matches!(o, op::INSERT | op::UPDATE | op::DELETE | op::KILL_CURSORS)
            }
            ReqKind::Unknown(_) => false,
        }
    }

    /// The lower-case command name of [`crate::QueryEvent::command`].
    pub fn command_name(&self) -> &'static str {
        match self.kind {
            ReqKind::Command(Some(c)) => c.lower,
            ReqKind::Command(None) | ReqKind::Unknown(_) => "unknown",
            ReqKind::Legacy(o) => legacy_name(o).0,
        }
    }

    /// The command name as the text shows it.
    pub fn text_name(&self) -> &str {
        match self.kind {
            ReqKind::Command(Some(c)) => c.name,
            ReqKind::Command(None) => self.unknown_name.as_deref().unwrap_or("unknown"),
            ReqKind::Legacy(o) => legacy_name(o).1,
            ReqKind::Unknown(_) => "unknown",
        }
    }

    /// Whether this is a command with the given lower-case name.
    pub fn is(&self, lower: &str) -> bool {
        matches!(self.kind, ReqKind::Command(Some(c)) if c.lower == lower)
    }

    fn command(&self) -> Option<&'static Command> {
        match self.kind {
            ReqKind::Command(c) => c,
            _ => None,
        }
    }

    /// Sets db and collection from a legacy `<db>.<collection>` name.
    fn set_namespace(&mut self, ns: &[u8]) {
        match ns.iter().position(|&b| b == b'.') {
            Some(i) => {
                self.db = ns.get(..i).map(<[u8]>::to_vec);
                self.collection = ns.get(i + 1..).map(<[u8]>::to_vec);
            }
            None => self.db = Some(ns.to_vec()),
        }
    }

    /// Element of a command document (root, or wrapped in `$query`).
    fn cmd_element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        if index == 0 {
            if parent == ROOT_CMD && self.legacy_cmd && key == b"$query" && t == ty::DOCUMENT {
                return Act::Descend(WRAPPED_CMD);
            }
            let cmd = commands::lookup(key);
            self.kind = ReqKind::Command(cmd);
            match cmd {
                None => {
                    let name: String = String::from_utf8_lossy(key)
                        .chars()
                        .take(UNKNOWN_NAME_CAP)
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '-') {
                                c
                            } else {
                                '_'
                            }
                        })
                        .collect();
                    self.unknown_name = Some(if name.is_empty() { "_".into() } else { name });
                }
                Some(c) if c.coll && t == ty::STRING => {
                    self.pending = Pending::Collection;
                    return Act::Read;
                }
                Some(c) if c.lower == "getmore" && t == ty::INT64 => {
                    self.pending = Pending::CursorId;
                    return Act::Read;
                }
                Some(_) => {}
            }
            return Act::Skip;
        }
        if key == b"$db" && t == ty::STRING {
            self.pending = Pending::Db;
            return Act::Read;
        }
        let Some(role) = self.command().and_then(|c| c.role(key)) else {
            return Act::Skip;
        };
        self.role_element(role, key, t)
    }

    fn role_element(&mut self, role: Role, key: &[u8], t: u8) -> Act {
        match (role, t) {
            (Role::Shape(mode), _) => {
                let act = self.shape.member(key, t, mode);
                self.shape_read(act)
            }
            (Role::Statements, ty::ARRAY) => Act::Descend(STATEMENTS),
            (Role::Documents, ty::ARRAY) => Act::Descend(DOCUMENTS),
            (Role::CursorIds, ty::ARRAY) => Act::Descend(CURSOR_IDS),
            (Role::Collection, ty::STRING) => {
                self.pending = Pending::Collection;
                Act::Read
            }
            _ => Act::Skip,
        }
    }

    /// The shape asked to read a scalar: it gets the value.
    fn shape_read(&mut self, act: Act) -> Act {
        if act == Act::Read {
            self.pending = Pending::Shape;
        }
        act
    }

    /// A document of an OP_MSG kind-1 section.
    fn sequence_role(&self, ident: &[u8]) -> Option<Role> {
        match self.command() {
            Some(c) => c.role(ident),
            // The command document may come after the sequence: go by the identifier.
            None => match ident {
                b"updates" | b"deletes" => Some(Role::Statements),
                b"documents" => Some(Role::Documents),
                _ => None,
            },
        }
    }
}

fn legacy_name(opcode: i32) -> (&'static str, &'static str) {
    match opcode {
        op::QUERY => ("op_query", "OP_QUERY"),
        op::INSERT => ("op_insert", "OP_INSERT"),
        op::UPDATE => ("op_update", "OP_UPDATE"),
        op::DELETE => ("op_delete", "OP_DELETE"),
        op::GET_MORE => ("op_get_more", "OP_GET_MORE"),
        op::KILL_CURSORS => ("op_kill_cursors", "OP_KILL_CURSORS"),
        _ => ("unknown", "unknown"),
    }
}

fn is_query_modifier(key: &[u8]) -> bool {
    matches!(
        key,
        b"$query"
            | b"query"
            | b"$orderby"
            | b"orderby"
            | b"$hint"
            | b"$explain"
            | b"$snapshot"
            | b"$comment"
            | b"$maxTimeMS"
            | b"$readPreference"
            | b"$returnKey"
            | b"$showDiskLoc"
            | b"$min"
            | b"$max"
            | b"$maxScan"
    )
}

impl Visitor for Request {
    fn element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        match parent {
            ROOT_CMD | WRAPPED_CMD => self.cmd_element(parent, key, t, index),
            SHAPE => {
                let act = self.shape.element(key, t);
                self.shape_read(act)
            }
            ROOT_LEGACY_QUERY => {
                if index == 0 {
                    let plain = !is_query_modifier(key);
                    self.legacy_plain = Some(plain);
                    if plain {
                        self.shape.member_root(b"filter", Mode::Values);
                    }
                }
                if self.legacy_plain == Some(true) {
                    let act = self.shape.element(key, t);
                    return self.shape_read(act);
                }
                let (name, mode): (&[u8], Mode) = match key {
                    b"$query" | b"query" => (b"filter", Mode::Values),
                    b"$orderby" | b"orderby" => (b"sort", Mode::Keep),
                    b"$hint" => (b"hint", Mode::Keep),
                    _ => return Act::Skip,
                };
                let act = self.shape.member(name, t, mode);
                self.shape_read(act)
            }
            STATEMENTS => {
                self.docs += 1;
                if index == 0 && t == ty::DOCUMENT {
                    Act::Descend(STATEMENT)
                } else {
                    Act::Skip
                }
            }
            STATEMENT => match commands::statement_field(key) {
                Some(mode) => {
                    let act = self.shape.member(key, t, mode);
                    self.shape_read(act)
                }
                None => Act::Skip,
            },
            DOCUMENTS => {
                self.docs += 1;
                Act::Skip
            }
            CURSOR_IDS => {
                if t == ty::INT64 && self.kill_ids.len() < MAX_KILL_IDS {
                    self.pending = Pending::KillId;
                    Act::Read
                } else {
                    Act::Skip
                }
            }
            _ => Act::Skip,
        }
    }

    fn scalar(&mut self, _: Ctx, _: &[u8], v: Scalar<'_>) {
        let pending = std::mem::replace(&mut self.pending, Pending::None);
        match (pending, v) {
            (Pending::Shape, v) => self.shape.scalar(v),
            (Pending::Collection, Scalar::Str { bytes, .. }) => {
                self.collection = Some(bytes.get(..NAME_CAP as usize).unwrap_or(bytes).to_vec())
            }
            (Pending::Db, Scalar::Str { bytes, .. }) => {
                self.db = Some(bytes.get(..NAME_CAP as usize).unwrap_or(bytes).to_vec())
            }
            (Pending::CursorId, Scalar::Int64(id)) => self.cursor_id = Some(id),
            (Pending::KillId, Scalar::Int64(id)) => self.kill_ids.push(id),
            _ => {}
        }
    }

    fn leave(&mut self, ctx: Ctx) {
        match ctx {
            SHAPE => self.shape.leave(),
            ROOT_LEGACY_QUERY => match self.legacy_plain {
                Some(true) => self.shape.leave(),
                Some(false) => {}
                None => {
                    // An empty filter.
                    self.shape.member_root(b"filter", Mode::Values);
                    self.shape.leave();
                }
            },
            _ => {}
        }
    }
}

/// Everything a reply message says that dbtap keeps.
#[derive(Debug, Default)]
pub struct Reply {
    /// OP_MSG flags (moreToCome: more replies to the same request follow).
    pub flags: u32,
    /// `ok` as sent (absent in legacy query results).
    pub ok: Option<bool>,
    pub code: Option<i64>,
    pub code_name: Option<String>,
    pub errmsg: Option<String>,
    pub n: Option<i64>,
    pub n_modified: Option<i64>,
    /// Elements of `upserted`.
    pub upserted: u64,
    /// `cursor.id`.
    pub cursor_id: Option<i64>,
    /// Documents in `cursor.firstBatch` / `cursor.nextBatch`.
    pub batch: u64,
    /// Elements of distinct's `values`.
    pub values: u64,
    /// Elements of `writeErrors`.
    pub write_errors: u64,
    pub write_error: Option<(i64, Option<String>, String)>,
    /// `writeConcernError`: code, codeName, errmsg.
    pub write_concern_error: Option<(i64, Option<String>, String)>,
    /// `lastErrorObject.n` (findAndModify).
    pub last_error_n: Option<i64>,
    /// OP_REPLY: responseFlags, cursorID and the documents counted.
    pub legacy_flags: i32,
    pub legacy_cursor_id: i64,
    pub legacy_docs: u64,
    pub malformed: bool,
    pending: RPending,
    wce: (Option<i64>, Option<String>, Option<String>),
    we: (Option<i64>, Option<String>, Option<String>),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum RPending {
    #[default]
    None,
    Key(Ctx),
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Reply {
    /// The error the reply reports: `ok: 0`, the first write error, a write-concern error or
    /// a legacy query failure; as (code, codeName, errmsg).
    pub fn error(&self) -> Option<(i64, Option<String>, String)> {
        if self.ok == Some(false) || self.legacy_flags & reply_flag::QUERY_FAILURE != 0 {
            return Some((
                self.code.unwrap_or(0),
                self.code_name.clone(),
                self.errmsg.clone().unwrap_or_default(),
            ));
        }
        if self.legacy_flags & reply_flag::CURSOR_NOT_FOUND != 0 {
            return Some((43, Some("CursorNotFound".into()), "cursor not found".into()));
        }
        self.write_error
            .clone()
            .or_else(|| self.write_concern_error.clone())
    }

    /// More replies to the same request follow (exhaust).
    pub fn more_to_come(&self) -> bool {
        self.flags & msg_flag::MORE_TO_COME != 0
    }

    fn finish(&mut self) {
        if let (Some(c), n, m) = std::mem::take(&mut self.we) {
            self.write_error = Some((c, n, m.unwrap_or_default()));
        }
        if let (Some(c), n, m) = std::mem::take(&mut self.wce) {
            self.write_concern_error = Some((c, n, m.unwrap_or_default()));
        }
    }
}

impl Visitor for Reply {
    fn element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        let read = |s: &mut Reply| {
            s.pending = RPending::Key(parent);
            Act::Read
        };
        match (parent, key, t) {
            (R_ROOT, b"cursor", ty::DOCUMENT) => Act::Descend(R_CURSOR),
            (R_ROOT, b"writeErrors", ty::ARRAY) => Act::Descend(R_WRITE_ERRORS),
            (R_ROOT, b"writeConcernError", ty::DOCUMENT) => Act::Descend(R_WCE),
            (R_ROOT, b"lastErrorObject", ty::DOCUMENT) => Act::Descend(R_LAST_ERROR),
            (R_ROOT, b"values", ty::ARRAY) => Act::Descend(R_VALUES),
            (R_ROOT, b"upserted", ty::ARRAY) => Act::Descend(R_UPSERTED),
            (
                R_ROOT,
                b"ok" | b"code" | b"codeName" | b"errmsg" | b"$err" | b"n" | b"nModified",
                _,
            ) => read(self),
            (R_CURSOR, b"id", _) => read(self),
            (R_CURSOR, b"firstBatch" | b"nextBatch", ty::ARRAY) => Act::Descend(R_BATCH),
            (R_BATCH, ..) => {
                self.batch += 1;
                Act::Skip
            }
            (R_VALUES, ..) => {
                self.values += 1;
                Act::Skip
            }
            (R_UPSERTED, ..) => {
                self.upserted += 1;
                Act::Skip
            }
            (R_WRITE_ERRORS, _, _) => {
                self.write_errors += 1;
                if index == 0 && t == ty::DOCUMENT {
                    Act::Descend(R_WRITE_ERROR)
                } else {
                    Act::Skip
                }
            }
            (R_WRITE_ERROR | R_WCE, b"code" | b"codeName" | b"errmsg", _) => read(self),
            (R_LAST_ERROR, b"n", _) => read(self),
            _ => Act::Skip,
        }
    }

    fn scalar(&mut self, _: Ctx, key: &[u8], v: Scalar<'_>) {
        let RPending::Key(parent) = std::mem::take(&mut self.pending) else {
            return;
        };
        let text = match v {
            Scalar::Str { bytes, .. } => Some(lossy(bytes)),
            _ => None,
        };
        match (parent, key) {
            (R_ROOT, b"ok") => self.ok = Some(v.truthy()),
            (R_ROOT, b"code") => self.code = v.as_i64(),
            (R_ROOT, b"codeName") => self.code_name = text,
            (R_ROOT, b"errmsg") => self.errmsg = text,
            (R_ROOT, b"$err") if self.errmsg.is_none() => self.errmsg = text,
            (R_ROOT, b"n") => self.n = v.as_i64(),
            (R_ROOT, b"nModified") => self.n_modified = v.as_i64(),
            (R_CURSOR, b"id") => self.cursor_id = v.as_i64(),
            (R_LAST_ERROR, b"n") => self.last_error_n = v.as_i64(),
            (R_WRITE_ERROR | R_WCE, k) => {
                let e = if parent == R_WCE {
                    &mut self.wce
                } else {
                    &mut self.we
                };
                match k {
                    b"code" => e.0 = v.as_i64(),
                    b"codeName" => e.1 = text,
                    _ => e.2 = text,
                }
            }
            _ => {}
        }
    }

    fn leave(&mut self, _: Ctx) {}
}

/// Which side a body belongs to, and what it collects.
#[derive(Debug)]
pub enum Parsed {
    Request(Box<Request>),
    Reply(Box<Reply>),
}

impl Visitor for Parsed {
    fn element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        match self {
            Parsed::Request(r) => r.element(parent, key, t, index),
            Parsed::Reply(r) => r.element(parent, key, t, index),
        }
    }
    fn scalar(&mut self, parent: Ctx, key: &[u8], v: Scalar<'_>) {
        match self {
            Parsed::Request(r) => r.scalar(parent, key, v),
            Parsed::Reply(r) => r.scalar(parent, key, v),
        }
    }
    fn leave(&mut self, ctx: Ctx) {
        match self {
            Parsed::Request(r) => r.leave(ctx),
            Parsed::Reply(r) => r.leave(ctx),
        }
    }
}

/// Where a body parser is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    // OP_MSG
    MsgFlags,
    SectionKind,
    SeqSize,
    SeqIdent,
    Checksum,
    // Legacy fields
    Flags,
    Zero,
    Namespace,
    NumberToSkip,
    NumberToReturn,
    CursorId,
    WriteFlags,
    NumberOfIds,
    KillId,
    ReplyHeader,
    /// A document being walked, its root elements tagged with the context.
    Doc(Ctx),
    /// The length of a document that is skipped.
    DocLen,
    DocBody,
    // OP_COMPRESSED
    CompressedPrefix,
    Inflating,
    /// Skipping to the end (unknown opcode, or after an error).
    Drain,
    Done,
}

/// What the documents being read are, and what comes after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// OP_QUERY: the query, then an optional projection.
    Query,
    Projection,
    /// OP_UPDATE: selector then update.
    Selector,
    Update,
    /// OP_DELETE: the selector, last.
    Last,
    /// OP_INSERT: documents, counted, to the end.
    Inserts,
    /// OP_REPLY documents, counted, to the end.
    ReplyDocs,
    /// OP_MSG: the body section.
    Body,
    /// OP_MSG kind-1 sequence documents.
    Sequence,
}

/// Bytes of the prefix of an OP_COMPRESSED body: originalOpcode, uncompressedSize,
/// compressorId.
const COMPRESSED_PREFIX: u8 = 9;

/// Parses one message body (everything after the header) fed in pieces.
#[derive(Debug)]
pub struct BodyParser {
    opcode: i32,
    /// Body bytes not consumed yet.
    left: u64,
    st: St,
    next: Next,
    r: FieldReader,
    w: Walker,
    /// OP_MSG: bytes reserved at the end for the checksum.
    reserve: u64,
    /// OP_MSG: the body section was read.
    body_seen: bool,
    /// OP_MSG kind-1: bytes left in the current sequence, what its documents are, and
    /// whether the next one is its first.
    seq_left: u64,
    seq_role: Option<Role>,
    seq_first: bool,
    /// OP_REPLY: the first document answers a command.
    reply_is_command: bool,
    /// OP_QUERY on `<db>.$cmd`.
    query_is_command: bool,
    ids_left: u32,
    inflater: Option<Inflater>,
    inner: Option<Box<BodyParser>>,
    shape_cap: usize,
    out: Parsed,
}

fn invalid(what: &'static str, why: &'static str) -> WireError {
    WireError::Invalid { what, why }
}

impl BodyParser {
    /// A parser for a request body of `len` bytes. `shape_cap` bounds the shape text.
    pub fn request(opcode: i32, len: u64, shape_cap: usize) -> Self {
        let kind = match opcode {
            op::MSG => ReqKind::Command(None),
            op::QUERY
            | op::INSERT
            | op::UPDATE
            | op::DELETE
            | op::GET_MORE
            | op::KILL_CURSORS
            | op::COMPRESSED => ReqKind::Legacy(opcode),
            o => ReqKind::Unknown(o),
        };
        let out = Parsed::Request(Box::new(Request::new(kind, shape_cap)));
        Self::new(opcode, len, out, false, shape_cap)
    }

    /// A parser for a reply body of `len` bytes. `legacy_command`: an OP_REPLY's first
    /// document answers a command (the request was an OP_QUERY on `$cmd`).
    pub fn reply(opcode: i32, len: u64, legacy_command: bool) -> Self {
        let out = Parsed::Reply(Box::default());
        Self::new(opcode, len, out, legacy_command, 0)
    }

    fn new(opcode: i32, len: u64, out: Parsed, reply_cmd: bool, shape_cap: usize) -> Self {
        let mut p = BodyParser {
            opcode,
            left: len,
            st: St::Drain,
            next: Next::Body,
            r: FieldReader::default(),
            w: Walker::default(),
            reserve: 0,
            body_seen: false,
            seq_left: 0,
            seq_role: None,
            seq_first: false,
            reply_is_command: reply_cmd,
            query_is_command: false,
            ids_left: 0,
            inflater: None,
            inner: None,
            shape_cap,
            out,
        };
        match opcode {
            op::MSG => p.fixed(St::MsgFlags, 4),
            op::QUERY => {
                p.next = Next::Query;
                p.fixed(St::Flags, 4);
            }
            op::INSERT => {
                p.next = Next::Inserts;
                p.fixed(St::Flags, 4);
            }
            op::UPDATE | op::DELETE | op::GET_MORE | op::KILL_CURSORS => p.fixed(St::Zero, 4),
            op::REPLY => p.fixed(St::ReplyHeader, 20),
            op::COMPRESSED => p.fixed(St::CompressedPrefix, COMPRESSED_PREFIX),
            _ => {}
        }
        p
    }

    fn fixed(&mut self, st: St, n: u8) {
        self.st = st;
        self.r.fixed(n);
    }

    /// The content read so far.
    pub fn parsed(&self) -> &Parsed {
        match &self.inner {
            Some(i) => i.parsed(),
            None => &self.out,
        }
    }

    /// Ends parsing once the whole body was fed (`complete`), or when it was cut (a capture
    /// gap). Returns what was read and whether the body failed to parse to its end.
    pub fn finish(self, complete: bool) -> (Parsed, bool) {
        let bad = !(complete && self.ok_at_end());
        let mut out = match self.inner {
            Some(i) => i.out,
            None => self.out,
        };
        match &mut out {
            Parsed::Request(r) => {
                r.shape.close_all();
                r.malformed |= bad;
            }
            Parsed::Reply(r) => {
                r.finish();
                r.malformed |= bad;
            }
        }
        (out, bad)
    }

    fn ok_at_end(&self) -> bool {
        let unknown = !matches!(
            self.opcode,
            op::MSG
                | op::QUERY
                | op::INSERT
                | op::UPDATE
                | op::DELETE
                | op::GET_MORE
                | op::KILL_CURSORS
                | op::REPLY
                | op::COMPRESSED
        );
        self.left == 0
            && (self.st == St::Done || (unknown && self.st == St::Drain))
            && (self.opcode != op::MSG || self.body_seen)
            && self.inner.as_ref().is_none_or(|i| i.ok_at_end())
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        let out = match &self.out {
            Parsed::Request(r) => r.shape.buffered_bytes() + r.kill_ids.capacity() * 8,
            Parsed::Reply(r) => {
                r.errmsg.as_ref().map_or(0, String::capacity)
                    + r.code_name.as_ref().map_or(0, String::capacity)
                    + 3 * 1024
            }
        };
        self.r.buffered_bytes()
            + self.w.buffered_bytes()
            + self.inflater.as_ref().map_or(0, Inflater::buffered_bytes)
            + self.inner.as_ref().map_or(0, |i| i.buffered_bytes())
            + out
    }

    /// Feeds body bytes (never more than the body holds). On error the rest of the body is
    /// skipped and the message will be malformed.
    pub fn push(&mut self, input: &[u8]) -> Res<()> {
        let mut used = 0usize;
        while used < input.len() {
            let take = usize::try_from(self.left)
                .unwrap_or(usize::MAX)
                .min(input.len() - used);
            if take == 0 {
                self.st = St::Drain;
                return Err(WireError::Overrun {
                    what: "message body",
                });
            }
            let avail = input.get(used..used + take).unwrap_or(&[]);
            match self.step(avail) {
                Ok(n) => used += n,
                Err(e) => {
                    self.st = St::Drain;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Takes `n` consumed bytes off what is left (of the body and of the sequence).
    fn consumed(&mut self, n: usize) {
        self.left -= n as u64;
        if self.next == Next::Sequence && !matches!(self.st, St::SeqIdent) {
            self.seq_left = self.seq_left.saturating_sub(n as u64);
        }
    }

    /// Consumes some of `avail` (at most the body's remaining bytes).
    fn step(&mut self, avail: &[u8]) -> Res<usize> {
        match self.st {
            St::Drain => {
                self.left -= avail.len() as u64;
                Ok(avail.len())
            }
            St::Done => Err(invalid("message body", "bytes after the last field")),
            St::Doc(ctx) => {
                let n = self.w.push(avail, &mut self.out)?;
                self.consumed(n);
                if self.w.done() {
                    self.doc_done(ctx)?;
                }
                Ok(n)
            }
            St::Inflating => {
                self.left -= avail.len() as u64;
                let last = self.left == 0;
                self.inflate(avail, last)?;
                if last {
                    self.st = St::Done;
                }
                Ok(avail.len())
            }
            St::SeqIdent => {
                let lim = usize::try_from(self.seq_left)
                    .unwrap_or(usize::MAX)
                    .min(avail.len());
                let (n, done) = self.r.push(avail.get(..lim).unwrap_or(&[]));
                self.left -= n as u64;
                self.seq_left -= n as u64;
                if done {
                    self.field_done()?;
                } else if self.seq_left == 0 {
                    return Err(WireError::Overrun {
                        what: "sequence identifier",
                    });
                }
                Ok(n)
            }
            _ => {
                let (n, done) = self.r.push(avail);
                self.consumed(n);
                if done {
                    self.field_done()?;
                }
                Ok(n)
            }
        }
    }

    fn inflate(&mut self, input: &[u8], last: bool) -> Res<()> {
        let (Some(inf), Some(inner)) = (self.inflater.as_mut(), self.inner.as_mut()) else {
            return Err(invalid("OP_COMPRESSED", "no decompressor"));
        };
        inf.push(input, last, &mut |out| inner.push(out))
    }

    fn req_mut(&mut self) -> Option<&mut Request> {
        match &mut self.out {
            Parsed::Request(r) => Some(r),
            Parsed::Reply(_) => None,
        }
    }

    fn reply_mut(&mut self) -> Option<&mut Reply> {
        match &mut self.out {
            Parsed::Reply(r) => Some(r),
            Parsed::Request(_) => None,
        }
    }

    /// Walks a document whose root elements get context `ctx`.
    fn doc(&mut self, ctx: Ctx) {
        self.st = St::Doc(ctx);
        let limit = match self.next {
            Next::Sequence => self.seq_left,
            _ => self.left.saturating_sub(self.reserve),
        };
        self.w.start(ctx, limit);
    }

    /// Skips a document by its length.
    fn skip_doc(&mut self) {
        self.fixed(St::DocLen, 4);
    }

    /// Counts one document of the current run.
    fn count_doc(&mut self) {
        match self.next {
            Next::Inserts => {
                if let Some(r) = self.req_mut() {
                    r.docs += 1;
                }
            }
            Next::Sequence => {
                if matches!(self.seq_role, Some(Role::Statements | Role::Documents))
                    && let Some(r) = self.req_mut()
                {
                    r.docs += 1;
                }
            }
            Next::ReplyDocs => {
                if let Some(r) = self.reply_mut() {
                    r.legacy_docs += 1;
                }
            }
            _ => {}
        }
    }

    /// OP_MSG: the next section, the checksum, or the end.
    fn section_or_end(&mut self) {
        self.next = Next::Body;
        if self.left > self.reserve {
            self.fixed(St::SectionKind, 1);
        } else if self.reserve > 0 {
            self.fixed(St::Checksum, 4);
        } else {
            self.st = St::Done;
        }
    }

    /// OP_MSG: the next document of a kind-1 sequence, or the next section.
    fn next_in_sequence(&mut self) {
        if self.seq_left == 0 {
            self.section_or_end();
            return;
        }
        self.count_doc();
        if self.seq_first && self.seq_role == Some(Role::Statements) {
            self.seq_first = false;
            self.doc(STATEMENT);
        } else {
            self.seq_first = false;
            self.skip_doc();
        }
    }

    /// After the documents of a legacy body: the end.
    fn end_legacy(&mut self) -> Res<()> {
        if self.left != 0 {
            return Err(invalid("message body", "bytes after the last document"));
        }
        self.st = St::Done;
        Ok(())
    }

    /// A document (walked or skipped) ended.
    fn doc_done(&mut self, ctx: Ctx) -> Res<()> {
        match self.next {
            Next::Body => {
                if matches!(ctx, ROOT_CMD | R_ROOT) {
                    self.body_seen = true;
                }
                self.section_or_end();
            }
            Next::Sequence => self.next_in_sequence(),
            Next::Query => {
                if self.left == 0 {
                    self.st = St::Done;
                } else {
                    self.next = Next::Projection;
                    if self.query_is_command {
                        self.skip_doc();
                    } else {
                        if let Some(r) = self.req_mut() {
                            r.shape.member_root(b"projection", Mode::Keep);
                        }
                        self.doc(SHAPE);
                    }
                }
            }
            Next::Selector => {
                self.next = Next::Update;
                if let Some(r) = self.req_mut() {
                    r.shape.member_root(b"u", Mode::Update);
                }
                self.doc(SHAPE);
            }
            Next::Projection | Next::Update | Next::Last => self.end_legacy()?,
            Next::Inserts | Next::ReplyDocs => {
                if self.left == 0 {
                    self.st = St::Done;
                } else {
                    self.count_doc();
                    self.skip_doc();
                }
            }
        }
        Ok(())
    }

    /// A fixed field, C string or skipped run completed.
    fn field_done(&mut self) -> Res<()> {
        match self.st {
            St::MsgFlags => {
                let flags = self.r.i32() as u32;
                self.reserve = if flags & msg_flag::CHECKSUM_PRESENT != 0 {
                    4
                } else {
                    0
                };
                match &mut self.out {
                    Parsed::Request(r) => r.flags = flags,
                    Parsed::Reply(r) => r.flags = flags,
                }
                if self.left < self.reserve {
                    return Err(invalid("OP_MSG", "no room for the checksum"));
                }
                self.section_or_end();
            }
            St::SectionKind => match self.r.bytes().first() {
                Some(0) => {
                    if self.body_seen {
                        return Err(invalid("OP_MSG", "two body sections"));
                    }
                    let ctx = match self.out {
                        Parsed::Request(_) => ROOT_CMD,
                        Parsed::Reply(_) => R_ROOT,
                    };
                    self.doc(ctx);
                }
                Some(1) => self.fixed(St::SeqSize, 4),
                _ => return Err(invalid("OP_MSG", "unknown section kind")),
            },
            St::SeqSize => {
                let size = i64::from(self.r.i32());
                if size < 5 || (size - 4) as u64 > self.left.saturating_sub(self.reserve) {
                    return Err(invalid("OP_MSG sequence", "size outside the message"));
                }
                self.seq_left = (size - 4) as u64;
                self.st = St::SeqIdent;
                self.r.cstr(64);
            }
            St::SeqIdent => {
                let ident = self.r.bytes().to_vec();
                self.seq_role = match &self.out {
                    Parsed::Request(r) => r.sequence_role(&ident),
                    Parsed::Reply(_) => None,
                };
                self.seq_first = true;
                self.next = Next::Sequence;
                self.next_in_sequence();
            }
            St::Checksum => self.st = St::Done,
            St::Flags => {
                self.st = St::Namespace;
                self.r.cstr(2 * NAME_CAP);
            }
            St::Zero => {
                if self.opcode == op::KILL_CURSORS {
                    self.fixed(St::NumberOfIds, 4);
                } else {
                    self.st = St::Namespace;
                    self.r.cstr(2 * NAME_CAP);
                }
            }
            St::Namespace => {
                let ns = self.r.bytes().to_vec();
                let opcode = self.opcode;
                let left = self.left;
                let mut is_cmd = false;
                if let Some(r) = self.req_mut() {
                    r.set_namespace(&ns);
                    if opcode == op::QUERY && r.collection.as_deref() == Some(b"$cmd") {
                        r.kind = ReqKind::Command(None);
                        r.collection = None;
                        r.legacy_cmd = true;
                        is_cmd = true;
                    }
                }
                self.query_is_command = is_cmd;
                match opcode {
                    op::QUERY => self.fixed(St::NumberToSkip, 4),
                    op::INSERT if left == 0 => self.st = St::Done,
                    op::INSERT => {
                        self.count_doc();
                        self.skip_doc();
                    }
                    op::UPDATE | op::DELETE => self.fixed(St::WriteFlags, 4),
                    _ => self.fixed(St::NumberToReturn, 4),
                }
            }
            St::NumberToSkip => self.fixed(St::NumberToReturn, 4),
            St::NumberToReturn => {
                if self.opcode == op::GET_MORE {
                    self.fixed(St::CursorId, 8);
                } else {
                    let ctx = if self.query_is_command {
                        ROOT_CMD
                    } else {
                        ROOT_LEGACY_QUERY
                    };
                    self.doc(ctx);
                }
            }
            St::CursorId => {
                let id = self.r.i64();
                if let Some(r) = self.req_mut() {
                    r.cursor_id = Some(id);
                }
                self.end_legacy()?;
            }
            St::WriteFlags => {
                let flags = self.r.i32();
                let opcode = self.opcode;
                if let Some(r) = self.req_mut() {
                    if opcode == op::UPDATE {
                        if flags & 1 != 0 {
                            r.shape.member(b"upsert", ty::BOOL, Mode::Keep);
                            r.shape.scalar(Scalar::Bool(true));
                        }
                        if flags & 2 != 0 {
                            r.shape.member(b"multi", ty::BOOL, Mode::Keep);
                            r.shape.scalar(Scalar::Bool(true));
                        }
                    } else if flags & 1 != 0 {
                        r.shape.member(b"limit", ty::INT32, Mode::Keep);
                        r.shape.scalar(Scalar::Int32(1));
                    }
                    r.shape.member_root(b"q", Mode::Values);
                }
                self.next = if opcode == op::UPDATE {
                    Next::Selector
                } else {
                    Next::Last
                };
                self.doc(SHAPE);
            }
            St::NumberOfIds => {
                let n = self.r.i32();
                if n < 0 || n as u64 * 8 != self.left {
                    return Err(invalid("OP_KILL_CURSORS", "id count does not fit"));
                }
                self.ids_left = n as u32;
                if n == 0 {
                    self.st = St::Done;
                } else {
                    self.fixed(St::KillId, 8);
                }
            }
            St::KillId => {
                let id = self.r.i64();
                if let Some(r) = self.req_mut()
                    && r.kill_ids.len() < MAX_KILL_IDS
                {
                    r.kill_ids.push(id);
                }
                self.ids_left -= 1;
                if self.ids_left == 0 {
                    self.st = St::Done;
                } else {
                    self.fixed(St::KillId, 8);
                }
            }
            St::ReplyHeader => {
                // Always 20 bytes: responseFlags, cursorID, startingFrom, numberReturned.
                let mut c = Cursor::new(self.r.bytes());
                let flags = c.i32("responseFlags").unwrap_or(0);
                let cursor = c.i64("cursorID").unwrap_or(0);
                let walk_first = self.reply_is_command || flags & reply_flag::QUERY_FAILURE != 0;
                if let Some(r) = self.reply_mut() {
                    r.legacy_flags = flags;
                    r.legacy_cursor_id = cursor;
                }
                self.next = Next::ReplyDocs;
                if self.left == 0 {
                    self.st = St::Done;
                } else {
                    self.count_doc();
                    if walk_first {
                        self.doc(R_ROOT);
                    } else {
                        self.skip_doc();
                    }
                }
            }
            St::DocLen => {
                let len = i64::from(self.r.i32());
                let room = match self.next {
                    Next::Sequence => self.seq_left,
                    _ => self.left.saturating_sub(self.reserve),
                };
                if len < 5 || (len - 4) as u64 > room {
                    return Err(invalid(
                        "BSON document length",
                        "below 5 or past its container",
                    ));
                }
                self.st = St::DocBody;
                self.r.take((len - 4) as u64, 0);
            }
            St::DocBody => self.doc_done(SKIP_ROOT)?,
            St::CompressedPrefix => {
                let b = self.r.bytes();
                let orig = le(b, 0);
                let size = le(b, 4);
                let id = b.get(8).copied().unwrap_or(0xFF);
                let from_client = matches!(self.out, Parsed::Request(_));
                let side_ok = if from_client {
                    super::wire::is_request_opcode(orig)
                } else {
                    super::wire::is_reply_opcode(orig)
                };
                if !side_ok || orig == op::COMPRESSED {
                    return Err(invalid("OP_COMPRESSED", "wraps an impossible opcode"));
                }
                if size < 0 || size as u32 > MAX_MESSAGE_LEN {
                    return Err(invalid("OP_COMPRESSED", "uncompressed size out of range"));
                }
                self.inflater = Some(Inflater::new(id)?);
                let inner = if from_client {
                    BodyParser::request(orig, size as u64, self.shape_cap)
                } else {
                    BodyParser::reply(orig, size as u64, self.reply_is_command)
                };
                self.inner = Some(Box::new(inner));
                self.st = St::Inflating;
                if self.left == 0 {
                    self.inflate(&[], true)?;
                    self.st = St::Done;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn le(b: &[u8], at: usize) -> i32 {
    let mut c = Cursor::new(b);
    c.skip(at, "field offset")
        .and_then(|()| c.i32("int32"))
        .unwrap_or(0)
}
