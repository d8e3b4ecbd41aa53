//! Typed MongoDB messages, parsed as their bodies stream in: what a request asks (command,
//! database, collection, query shape, documents sent, cursor ids) and what a reply says (ok,
//! error, n, nModified, documents returned, cursor id, write errors). Every opcode has a small
//! state machine over [`FieldReader`] primitives and the [`Walker`]; OP_COMPRESSED decompresses
//! into the state machine of the opcode it wraps. Pure parsing, no conversation state.
//!
//! Split by concern: `request` and `reply` collect what the documents say; the body
//! parser's fields are handled per opcode family in `op_msg`, `legacy` and `compressed`, and
//! its documents (walked, skipped, counted) in `docs`.

mod compressed;
mod docs;
mod legacy;
mod op_msg;
mod reply;
mod request;

pub use reply::Reply;
pub use request::{ReqKind, Request};

use super::bson::{Act, Ctx, Scalar, Visitor, Walker};
use super::commands::Role;
use super::wire::{FieldReader, Inflater, WireError, op};
use compressed::COMPRESSED_PREFIX;

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

/// What a request of this opcode is, before its body says more.
fn req_kind(opcode: i32) -> ReqKind {
    match opcode {
        op::MSG => ReqKind::Command(None),
        op::QUERY
        | op::INSERT
        | op::UPDATE
        | op::DELETE
        | op::GET_MORE
        | op::KILL_CURSORS
        | op::COMPRESSED => ReqKind::Legacy(opcode),
        o => ReqKind::Unknown(o),
    }
}

fn invalid(what: &'static str, why: &'static str) -> WireError {
    WireError::Invalid { what, why }
}

impl BodyParser {
    /// A parser for a request body of `len` bytes. `shape_cap` bounds the shape text.
    pub fn request(opcode: i32, len: u64, shape_cap: usize) -> Self {
        let out = Parsed::Request(Box::new(Request::new(req_kind(opcode), shape_cap)));
        Self::new(opcode, len, out, false, shape_cap)
    }

    /// A parser that has read nothing: the slot a direction of a session keeps and starts
    /// afresh for each message ([`Self::start_request`], [`Self::start_reply`]), so that a
    /// message neither allocates its reader, walker and output nor moves the parser around.
    pub fn idle(requests: bool) -> Self {
        let out = if requests {
            Parsed::Request(Box::new(Request::new(ReqKind::Unknown(0), 0)))
        } else {
            Parsed::Reply(Box::default())
        };
        Self::new(0, 0, out, false, 0)
    }

    /// Starts [`Self::request`] in place, keeping this parser's buffers.
    pub fn start_request(&mut self, opcode: i32, len: u64, shape_cap: usize) {
        let kind = req_kind(opcode);
        match &mut self.out {
            Parsed::Request(r) => r.reset(kind, shape_cap),
            out => *out = Parsed::Request(Box::new(Request::new(kind, shape_cap))),
        }
        self.init(opcode, len, false, shape_cap);
    }

    /// Starts [`Self::reply`] in place, keeping this parser's buffers.
    pub fn start_reply(&mut self, opcode: i32, len: u64, legacy_command: bool) {
        match &mut self.out {
            Parsed::Reply(r) => **r = Reply::default(),
            out => *out = Parsed::Reply(Box::default()),
        }
        self.init(opcode, len, legacy_command, 0);
    }

    /// [`Self::finish`] in place: the result is [`Self::parsed`] until [`Self::release`].
    pub fn finish_here(&mut self, complete: bool) -> bool {
        let bad = !(complete && self.ok_at_end());
        if let Some(i) = self.inner.take() {
            self.out = i.out;
        }
        match &mut self.out {
            Parsed::Request(r) => {
                r.shape.close_all();
                r.malformed |= bad;
            }
            Parsed::Reply(r) => {
                r.finish();
                r.malformed |= bad;
            }
        }
        bad
    }

    /// Drops what only one message needed (a decompressor, a request whose buffers grew past
    /// a few KiB, a reply's text), keeping the buffers a next message reuses.
    pub fn release(&mut self) {
        self.inflater = None;
        self.inner = None;
        match &mut self.out {
            Parsed::Request(r) if r.buffered_bytes() > 4096 => {
                **r = Request::new(ReqKind::Unknown(0), 0);
            }
            Parsed::Request(_) => {}
            Parsed::Reply(r) => r.forget_text(),
        }
    }

    /// Heap bytes held between messages (after [`Self::release`]).
    pub fn idle_bytes(&self) -> usize {
        let out = match &self.out {
            Parsed::Request(r) => r.buffered_bytes(),
            Parsed::Reply(_) => std::mem::size_of::<Reply>(),
        };
        self.r.buffered_bytes() + self.w.buffered_bytes() + out
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
        p.init(opcode, len, reply_cmd, shape_cap);
        p
    }

    /// Every field but the output and the buffers as a new parser for this message has them;
    /// the walker is started afresh by its first document.
    fn init(&mut self, opcode: i32, len: u64, reply_cmd: bool, shape_cap: usize) {
        self.opcode = opcode;
        self.left = len;
        self.st = St::Drain;
        self.next = Next::Body;
        // Idle, its buffer emptied (and given back if it grew past a few KiB).
        self.r.resume_from(&FieldReader::default());
        self.reserve = 0;
        self.body_seen = false;
        self.seq_left = 0;
        self.seq_role = None;
        self.seq_first = false;
        self.reply_is_command = reply_cmd;
        self.query_is_command = false;
        self.ids_left = 0;
        self.inflater = None;
        self.inner = None;
        self.shape_cap = shape_cap;
        match opcode {
            op::MSG => self.fixed(St::MsgFlags, 4),
            op::QUERY => {
                self.next = Next::Query;
                self.fixed(St::Flags, 4);
            }
            op::INSERT => {
                self.next = Next::Inserts;
                self.fixed(St::Flags, 4);
            }
            op::UPDATE | op::DELETE | op::GET_MORE | op::KILL_CURSORS => self.fixed(St::Zero, 4),
            op::REPLY => self.fixed(St::ReplyHeader, 20),
            op::COMPRESSED => self.fixed(St::CompressedPrefix, COMPRESSED_PREFIX),
            _ => {}
        }
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
    pub fn finish(mut self, complete: bool) -> (Parsed, bool) {
        let bad = self.finish_here(complete);
        (self.out, bad)
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
            Parsed::Request(r) => r.buffered_bytes(),
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

    /// A fixed field, C string or skipped run completed: the state it ends decides what
    /// comes next. One handler per field, grouped by opcode family.
    fn field_done(&mut self) -> Res<()> {
        match self.st {
            // OP_MSG (op_msg.rs)
            St::MsgFlags => self.msg_flags(),
            St::SectionKind => self.section_kind(),
            St::SeqSize => self.seq_size(),
            St::SeqIdent => self.seq_ident(),
            St::Checksum => self.checksum(),
            // Legacy opcodes (legacy.rs)
            St::Flags => self.legacy_flags(),
            St::Zero => self.zero(),
            St::Namespace => self.namespace(),
            St::NumberToSkip => self.number_to_skip(),
            St::NumberToReturn => self.number_to_return(),
            St::CursorId => self.get_more_cursor(),
            St::WriteFlags => self.write_flags(),
            St::NumberOfIds => self.number_of_ids(),
            St::KillId => self.kill_id(),
            St::ReplyHeader => self.reply_header(),
            // Skipped documents (docs.rs)
            St::DocLen => self.doc_len(),
            St::DocBody => self.doc_done(SKIP_ROOT),
            // OP_COMPRESSED (compressed.rs)
            St::CompressedPrefix => self.compressed_prefix(),
            St::Doc(_) | St::Inflating | St::Drain | St::Done => Ok(()),
        }
    }
}
