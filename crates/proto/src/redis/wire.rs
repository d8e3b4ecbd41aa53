//! RESP framing (RESP2, RESP3, inline commands): the value types, a streaming reader for server
//! replies that summarizes each top-level value without buffering payloads, a streaming reader
//! for client commands (arrays of bulk strings, or inline lines), and the boundary probe used to
//! resynchronize. No state about the conversation lives here.
//!
//! Both readers are push-based: `push(input, ts)` consumes bytes until something worth telling
//! happened and returns how many bytes it consumed. They never hold more than a few hundred
//! bytes of any value (an inline command, at most [`MAX_INLINE`]), however large the value.

/// The longest bulk string accepted (Redis' `proto-max-bulk-len` is 512 MB by default and can
/// be raised; anything beyond this is taken as garbage).
pub const MAX_BULK: u64 = 1 << 40;
/// The most elements an aggregate may announce.
pub const MAX_AGGREGATE: u64 = 1 << 32;
/// The most arguments a command may announce (Redis: `INT_MAX`).
pub const MAX_ARGS: u64 = i32::MAX as u64;
/// Aggregates nested deeper than this are malformed.
pub const MAX_DEPTH: usize = 128;
/// The longest inline command line (Redis' `PROTO_INLINE_MAX_SIZE`).
pub const MAX_INLINE: usize = 64 * 1024;
/// Content bytes kept of a top-level reply or of one of its elements (error messages, simple
/// strings, the start of bulk strings).
pub const HEAD_KEEP: usize = 512;
/// Content bytes kept of each of the first [`ELEMS_KEPT`] elements of a top-level aggregate.
pub const ELEM_KEEP: usize = 64;
/// How many leading elements of a top-level aggregate are kept (pub/sub classification).
pub const ELEMS_KEPT: usize = 3;
/// The longest header line (`*<n>`, `$<n>`, `:<n>`...): a sign and 19 digits.
const MAX_NUMBER_LINE: usize = 20;

/// What went wrong reading RESP bytes: the kit's one read error. `what` names the element
/// being read; `at` is an offset in the input given to `push`.
pub use crate::kit::WireError;

type Res<T> = Result<T, WireError>;

mod probe;
mod request;
mod whole;

pub use probe::{PROBE_MAX, Probe, plausible_name, probe_command, probe_name};
pub use request::{ReqEvent, RequestReader, Span, WHOLE_ARGS, WholeCommand, split_inline};

/// A RESP value type, named by its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// `+`
    SimpleString,
    /// `-`
    Error,
    /// `:`
    Integer,
    /// `$`
    BulkString,
    /// `*`
    Array,
    /// `_` (RESP3)
    Null,
    /// `#` (RESP3)
    Boolean,
    /// `,` (RESP3)
    Double,
    /// `(` (RESP3)
    BigNumber,
    /// `!` (RESP3)
    BlobError,
    /// `=` (RESP3)
    Verbatim,
    /// `%` (RESP3)
    Map,
    /// `~` (RESP3)
    Set,
    /// `|` (RESP3): metadata that precedes a value, not a value itself.
    Attribute,
    /// `>` (RESP3): out-of-band data, never a reply (but see pub/sub confirmations).
    Push,
}

impl Type {
    pub fn from_byte(b: u8) -> Option<Type> {
        Some(match b {
            b'+' => Type::SimpleString,
            b'-' => Type::Error,
            b':' => Type::Integer,
            b'$' => Type::BulkString,
            b'*' => Type::Array,
            b'_' => Type::Null,
            b'#' => Type::Boolean,
            b',' => Type::Double,
            b'(' => Type::BigNumber,
            b'!' => Type::BlobError,
            b'=' => Type::Verbatim,
            b'%' => Type::Map,
            b'~' => Type::Set,
            b'|' => Type::Attribute,
            b'>' => Type::Push,
            _ => return None,
        })
    }

    pub fn byte(self) -> u8 {
        match self {
            Type::SimpleString => b'+',
            Type::Error => b'-',
            Type::Integer => b':',
            Type::BulkString => b'$',
            Type::Array => b'*',
            Type::Null => b'_',
            Type::Boolean => b'#',
            Type::Double => b',',
            Type::BigNumber => b'(',
            Type::BlobError => b'!',
            Type::Verbatim => b'=',
            Type::Map => b'%',
            Type::Set => b'~',
            Type::Attribute => b'|',
            Type::Push => b'>',
        }
    }

    /// Types whose header line gives a byte length followed by a payload.
    pub fn is_blob(self) -> bool {
        matches!(self, Type::BulkString | Type::BlobError | Type::Verbatim)
    }

    /// Types whose header line gives an element count.
    pub fn is_aggregate(self) -> bool {
        matches!(
            self,
            Type::Array | Type::Map | Type::Set | Type::Attribute | Type::Push
        )
    }

    /// Only RESP3 servers send these.
    pub fn is_resp3(self) -> bool {
        !matches!(
            self,
            Type::SimpleString | Type::Error | Type::Integer | Type::BulkString | Type::Array
        )
    }

    pub fn is_error(self) -> bool {
        matches!(self, Type::Error | Type::BlobError)
    }

    fn what(self) -> &'static str {
        match self {
            Type::SimpleString => "simple string",
            Type::Error => "error",
            Type::Integer => "integer",
            Type::BulkString => "bulk string",
            Type::Array => "array",
            Type::Null => "null",
            Type::Boolean => "boolean",
            Type::Double => "double",
            Type::BigNumber => "big number",
            Type::BlobError => "blob error",
            Type::Verbatim => "verbatim string",
            Type::Map => "map",
            Type::Set => "set",
            Type::Attribute => "attribute",
            Type::Push => "push",
        }
    }

    /// Whether `b` may appear in this type's line (for the header types: the length).
    fn line_byte_ok(self, b: u8) -> bool {
        match self {
            Type::SimpleString | Type::Error => true,
            Type::Integer | Type::BigNumber => b.is_ascii_digit() || b == b'-' || b == b'+',
            Type::Null => false,
            Type::Boolean => b == b't' || b == b'f',
            Type::Double => {
                b.is_ascii_digit()
                    || matches!(
                        b,
                        b'.' | b'-' | b'+' | b'e' | b'E' | b'i' | b'n' | b'f' | b'a'
                    )
            }
            // Lengths and counts (`?` announces a streamed value, refused when the line ends).
            _ => b.is_ascii_digit() || b == b'-' || b == b'?',
        }
    }

    /// Whether the line is bounded to a number's length.
    fn numeric_line(self) -> bool {
        !matches!(
            self,
            Type::SimpleString | Type::Error | Type::BigNumber | Type::Double
        )
    }
}

/// Parses an ASCII decimal `i64` (optional sign, at least one digit, nothing else).
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let (neg, digits) = match b {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

/// The summary of one complete value: a top-level reply, or one element of a top-level
/// aggregate. Attributes before the value are included in its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value {
    pub ty: Type,
    /// `$-1`, `*-1` (RESP2) or `_` (RESP3).
    pub null: bool,
    /// Payload length of a blob, element count of an aggregate (pairs for a map), else 0.
    pub len: u64,
    /// Bytes on the wire, attributes included.
    pub wire: u64,
    /// Timestamp of the bytes carrying its first byte.
    pub start_ts: u64,
    /// Timestamp of the bytes carrying its last byte.
    pub end_ts: u64,
    /// An attribute (`|`) preceded it.
    pub attribute: bool,
    /// Bytes of it lost in capture gaps inside its bulk strings (counted in `wire`: see
    /// [`ReplyReader::gap`]).
    pub lost: u64,
}

impl Value {
    fn new(ts: u64) -> Self {
        Value {
            ty: Type::Null,
            null: false,
            len: 0,
            wire: 0,
            start_ts: ts,
            end_ts: ts,
            attribute: false,
            lost: 0,
        }
    }
}

/// One of the first elements of a top-level aggregate, kept for classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    pub ty: Type,
    pub null: bool,
    buf: [u8; ELEM_KEEP],
    len: u8,
}

impl Kept {
    const EMPTY: Kept = Kept {
        ty: Type::Null,
        null: true,
        buf: [0; ELEM_KEEP],
        len: 0,
    };

    /// The first [`ELEM_KEEP`] content bytes (line or payload).
    pub fn content(&self) -> &[u8] {
        self.buf.get(..usize::from(self.len)).unwrap_or(&[])
    }
    /// The value of an integer element.
    pub fn integer(&self) -> Option<i64> {
        (self.ty == Type::Integer)
            .then(|| parse_i64(self.content()))
            .flatten()
    }
}

/// What [`ReplyReader::push`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// An element of the top-level aggregate being read is complete (its content, if a
    /// scalar, in [`ReplyReader::elem_head`]). `top` is that aggregate's type, `top_len` its
    /// announced length and `index` the element's position in it.
    Element {
        elem: Value,
        top: Type,
        top_len: u64,
        index: u64,
    },
    /// A top-level value is complete (its content, if a scalar, in [`ReplyReader::head`]).
    Value(Value),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// The next byte is a type byte.
    Type,
    /// Reading the line after a type byte; `cr`: the `\r` was seen.
    Line {
        ty: Type,
        cr: bool,
    },
    Blob {
        ty: Type,
        left: u64,
    },
    BlobCr {
        ty: Type,
    },
    BlobLf {
        ty: Type,
    },
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    ty: Type,
    /// Child values still to come.
    left: u64,
}

/// Reads server replies, one top-level value after the other, keeping only summaries.
#[derive(Debug)]
pub struct ReplyReader {
    st: St,
    stack: Vec<Frame>,
    /// The current line (header or scalar content), at most [`HEAD_KEEP`] bytes kept.
    line: Vec<u8>,
    line_len: usize,
    /// Content of the scalar being read, when it is at depth 0 or 1.
    content: Vec<u8>,
    top_open: bool,
    top: Value,
    head: Vec<u8>,
    elem_open: bool,
    elem: Value,
    elem_head: Vec<u8>,
    elems_done: u64,
    firsts: [Kept; ELEMS_KEPT],
    firsts_len: usize,
    pending: Option<Event>,
    /// A gap cut the blob being read: its content is no longer kept.
    blob_cut: bool,
}

impl Default for ReplyReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplyReader {
    pub fn new() -> Self {
        ReplyReader {
            st: St::Type,
            stack: Vec::new(),
            line: Vec::new(),
            line_len: 0,
            content: Vec::new(),
            top_open: false,
            top: Value::new(0),
            head: Vec::new(),
            elem_open: false,
            elem: Value::new(0),
            elem_head: Vec::new(),
            elems_done: 0,
            firsts: [Kept::EMPTY; ELEMS_KEPT],
            firsts_len: 0,
            pending: None,
            blob_cut: false,
        }
    }

    /// Content of the last complete top-level scalar: at most [`HEAD_KEEP`] bytes.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// Content of the last complete element, if a scalar: at most [`HEAD_KEEP`] bytes.
    pub fn elem_head(&self) -> &[u8] {
        &self.elem_head
    }

    /// The first elements of the last (or current) top-level aggregate.
    pub fn first_elements(&self) -> &[Kept] {
        self.firsts.get(..self.firsts_len).unwrap_or(&[])
    }

    /// The unfinished top-level value, if any: its type once its header was read (`None`
    /// before), bytes consumed so far and first timestamp.
    pub fn partial(&self) -> Option<(Option<Type>, u64, u64)> {
        let header_read = !matches!(self.st, St::Line { .. }) || !self.stack.is_empty();
        self.top_open.then(|| {
            (
                header_read.then_some(self.top.ty),
                self.top.wire,
                self.top.start_ts,
            )
        })
    }

    /// Bytes of the unfinished top-level value lost in gaps (counted in its wire bytes).
    pub fn partial_lost(&self) -> u64 {
        if self.top_open { self.top.lost } else { 0 }
    }

    /// Bytes of the unfinished top-level value consumed so far.
    pub fn partial_bytes(&self) -> u64 {
        if self.top_open { self.top.wire } else { 0 }
    }

    /// True between top-level values.
    pub fn is_idle(&self) -> bool {
        !self.top_open && self.pending.is_none()
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.stack.capacity() * std::mem::size_of::<Frame>()
            + self.line.capacity()
            + self.content.capacity()
            + self.head.capacity()
            + self.elem_head.capacity()
    }

    /// Drops the value in progress; returns the bytes it had consumed.
    pub fn reset(&mut self) -> u64 {
        let n = self.partial_bytes();
        self.st = St::Type;
        self.stack.clear();
        if self.stack.capacity() > 64 {
            self.stack = Vec::new();
        }
        self.line.clear();
        self.line_len = 0;
        self.content.clear();
        self.top_open = false;
        self.elem_open = false;
        self.pending = None;
        self.blob_cut = false;
        n
    }

    /// `len` bytes of the stream were lost (a capture gap). When they all fall inside the
    /// announced length of the bulk string (or blob error, verbatim string) being read, the
    /// framing holds: they are skipped and counted in the wire bytes and in `lost` of the
    /// top-level value (and of the element) that holds them, and the blob's content is no
    /// longer kept. Returns false (nothing changed) otherwise: the gap crosses a boundary and
    /// the caller must resynchronize.
    pub fn gap(&mut self, len: u64) -> bool {
        let St::Blob { ty, left } = self.st else {
            return false;
        };
        if self.pending.is_some() || len > left {
            return false;
        }
        if len == 0 {
            return true;
        }
        if self.top_open {
            self.top.wire += len;
            self.top.lost += len;
        }
        if self.elem_open {
            self.elem.wire += len;
            self.elem.lost += len;
        }
        self.blob_cut = true;
        self.st = if left == len {
            St::BlobCr { ty }
        } else {
            St::Blob {
                ty,
                left: left - len,
            }
        };
        true
    }

    fn account(&mut self, n: usize) {
        if self.top_open {
            self.top.wire += n as u64;
        }
        if self.elem_open {
            self.elem.wire += n as u64;
        }
    }

    /// Whether the value starting now at the current depth is captured (depth 0, or an element).
    fn capturing(&self) -> bool {
        match self.stack.len() {
            0 => true,
            1 => self.elem_open,
            _ => false,
        }
    }

    fn begin_value(&mut self, ts: u64) {
        match self.stack.len() {
            0 if !self.top_open => {
                self.top_open = true;
                self.top = Value::new(ts);
                self.head.clear();
                self.elems_done = 0;
                self.firsts_len = 0;
            }
            1 if !self.elem_open && self.stack.first().is_some_and(|f| f.ty != Type::Attribute) => {
                self.elem_open = true;
                self.elem = Value::new(ts);
                self.elem_head.clear();
            }
            _ => {}
        }
    }

    /// The header of a value is known: record it if it is the top value or an element.
    fn header(&mut self, ty: Type, len: u64, null: bool) {
        if ty == Type::Attribute {
            return;
        }
        match self.stack.len() {
            0 => {
                self.top.ty = ty;
                self.top.len = len;
                self.top.null = null;
            }
            1 if self.elem_open => {
                self.elem.ty = ty;
                self.elem.len = len;
                self.elem.null = null;
            }
            _ => {}
        }
    }

    fn emit(&mut self, ev: Event, first: &mut Option<Event>) {
        if first.is_none() {
            *first = Some(ev);
        } else {
            self.pending = Some(ev);
        }
    }

    /// A value of type `ty` is complete at the current depth: cascades up the stack.
    fn complete(&mut self, mut ty: Type, ts: u64) -> Option<Event> {
        let mut first = None;
        loop {
            let is_attr = ty == Type::Attribute;
            let depth = self.stack.len();
            let scalar = !ty.is_aggregate();
            if depth == 0 {
                if is_attr {
                    self.top.attribute = true;
                } else {
                    if scalar {
                        std::mem::swap(&mut self.head, &mut self.content);
                    }
                    self.content.clear();
                    self.top.end_ts = ts;
                    self.top_open = false;
                    let v = self.top;
                    self.emit(Event::Value(v), &mut first);
                }
                return first;
            }
            if depth == 1 && self.elem_open {
                if is_attr {
                    self.elem.attribute = true;
                } else {
                    if scalar {
                        std::mem::swap(&mut self.elem_head, &mut self.content);
                    }
                    self.elem.end_ts = ts;
                    self.elem_open = false;
                    if let Some(slot) = usize::try_from(self.elems_done)
                        .ok()
                        .and_then(|i| self.firsts.get_mut(i))
                    {
                        self.firsts_len += 1;
                        let mut k = Kept {
                            ty: self.elem.ty,
                            null: self.elem.null,
                            buf: [0; ELEM_KEEP],
                            len: 0,
                        };
                        if scalar {
                            let n = self.elem_head.len().min(ELEM_KEEP);
                            if let (Some(dst), Some(src)) =
                                (k.buf.get_mut(..n), self.elem_head.get(..n))
                            {
                                dst.copy_from_slice(src);
                            }
                            k.len = n as u8;
                        }
                        *slot = k;
                    }
                    let ev = Event::Element {
                        elem: self.elem,
                        top: self.top.ty,
                        top_len: self.top.len,
                        index: self.elems_done,
                    };
                    self.elems_done += 1;
                    self.emit(ev, &mut first);
                }
            }
            self.content.clear();
            let Some(parent) = self.stack.last_mut() else {
                return first;
            };
            if !is_attr {
                parent.left = parent.left.saturating_sub(1);
            }
            if parent.left > 0 {
                return first;
            }
            ty = parent.ty;
            self.stack.pop();
        }
    }

    /// An aggregate header: pushes a frame, or completes an empty or null aggregate.
    fn aggregate(&mut self, ty: Type, n: i64, ts: u64) -> Res<Option<Event>> {
        if n == -1 && ty == Type::Array {
            self.header(ty, 0, true);
            return Ok(self.complete(ty, ts));
        }
        let len = u64::try_from(n)
            .ok()
            .filter(|&l| l <= MAX_AGGREGATE)
            .ok_or(WireError::BadLength {
                what: ty.what(),
                len: n,
            })?;
        self.header(ty, len, false);
        if len == 0 {
            return Ok(self.complete(ty, ts));
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(WireError::Invalid {
                what: "aggregate",
                why: "nested too deep",
            });
        }
        let left = if matches!(ty, Type::Map | Type::Attribute) {
            len * 2
        } else {
            len
        };
        self.stack.push(Frame { ty, left });
        Ok(None)
    }

    /// The line after a type byte is complete.
    fn finish_line(&mut self, ty: Type, ts: u64) -> Res<Option<Event>> {
        let what = ty.what();
        let line = std::mem::take(&mut self.line);
        let r = self.finish_line_inner(ty, &line, ts, what);
        self.line = line;
        self.line.clear();
        self.line_len = 0;
        r
    }

    fn finish_line_inner(
        &mut self,
        ty: Type,
        line: &[u8],
        ts: u64,
        what: &'static str,
    ) -> Res<Option<Event>> {
        let number = || {
            parse_i64(line).ok_or(WireError::Invalid {
                what,
                why: "bad line",
            })
        };
        if line == b"?" && (ty.is_blob() || ty.is_aggregate()) {
            return Err(WireError::Invalid {
                what,
                why: "RESP3 streamed strings and aggregates are not supported",
            });
        }
        if ty.is_aggregate() {
            let n = number()?;
            return self.aggregate(ty, n, ts);
        }
        if ty.is_blob() {
            let n = number()?;
            if n == -1 && ty == Type::BulkString {
                self.header(ty, 0, true);
                return Ok(self.complete(ty, ts));
            }
            let len = u64::try_from(n)
                .ok()
                .filter(|&l| l <= MAX_BULK)
                .ok_or(WireError::BadLength { what, len: n })?;
            self.header(ty, len, false);
            self.content.clear();
            self.blob_cut = false;
            self.st = if len == 0 {
                St::BlobCr { ty }
            } else {
                St::Blob { ty, left: len }
            };
            return Ok(None);
        }
        let ok = match ty {
            Type::Integer => parse_i64(line).is_some(),
            Type::Null => line.is_empty(),
            Type::Boolean => line == b"t" || line == b"f",
            Type::Double | Type::BigNumber => !line.is_empty(),
            _ => true,
        };
        if !ok {
            return Err(WireError::Invalid {
                what,
                why: "bad line",
            });
        }
        if self.capturing() {
            self.content.clear();
            self.content.extend_from_slice(line);
        }
        self.header(ty, 0, ty == Type::Null);
        Ok(self.complete(ty, ts))
    }

    /// Consumes bytes until a value or element completes. Returns the bytes consumed and what
    /// completed. A pending second event (an element and its top-level value completing on the
    /// same byte) is returned by the next call, even with empty input.
    ///
    /// On an error the count excludes the offending byte, and the reader must be
    /// [`reset`](Self::reset) before it is used again.
    pub fn push(&mut self, input: &[u8], ts: u64) -> (usize, Res<Option<Event>>) {
        let mut pos = 0usize;
        let r = self.step(input, ts, &mut pos);
        (pos, r)
    }

    /// Runs the state machine over `input` from `*pos` until an event completes or the input
    /// ends. One handler per state.
    fn step(&mut self, input: &[u8], ts: u64, pos: &mut usize) -> Res<Option<Event>> {
        if let Some(ev) = self.pending.take() {
            return Ok(Some(ev));
        }
        while let Some(&b) = input.get(*pos) {
            if self.st == St::Type
                && let Some(ev) = self.whole_scalar(input, ts, pos)
            {
                return Ok(Some(ev));
            }
            let ev = match self.st {
                St::Type => {
                    self.type_byte(b, ts, pos)?;
                    None
                }
                St::Line { ty, cr: false } => {
                    self.line_bytes(ty, input, pos)?;
                    None
                }
                St::Line { ty, cr: true } => self.line_lf(ty, b, ts, pos)?,
                St::Blob { ty, left } => {
                    self.blob_bytes(ty, left, input, pos);
                    None
                }
                St::BlobCr { ty } => {
                    self.blob_cr(ty, b, pos)?;
                    None
                }
                St::BlobLf { ty } => self.blob_lf(ty, b, ts, pos)?,
            };
            if ev.is_some() {
                return Ok(ev);
            }
        }
        Ok(None)
    }

    /// The type byte that starts a value: then its line.
    #[inline]
    fn type_byte(&mut self, b: u8, ts: u64, pos: &mut usize) -> Res<()> {
        let ty = Type::from_byte(b).ok_or(WireError::BadByte {
            what: "type byte",
            at: *pos,
            byte: b,
        })?;
        self.begin_value(ts);
        *pos += 1;
        self.account(1);
        self.line.clear();
        self.line_len = 0;
        self.st = St::Line { ty, cr: false };
        Ok(())
    }

    /// Bytes of the line after a type byte, up to its CR (kept up to [`HEAD_KEEP`]).
    #[inline]
    fn line_bytes(&mut self, ty: Type, input: &[u8], pos: &mut usize) -> Res<()> {
        let rest = input.get(*pos..).unwrap_or(&[]);
        let end = rest
            .iter()
            .position(|&c| c == b'\r' || c == b'\n')
            .unwrap_or(rest.len());
        // Valid bytes are consumed up to the first bad one (or the length limit), so what an
        // error leaves behind does not depend on how bytes were split.
        let mut chunk = rest.get(..end).unwrap_or(&[]);
        let mut err = None;
        if let Some(bad) = chunk.iter().position(|&c| !ty.line_byte_ok(c)) {
            chunk = chunk.get(..bad).unwrap_or(&[]);
            err = Some(WireError::Invalid {
                what: ty.what(),
                why: "bad line",
            });
        }
        if ty.numeric_line() && self.line_len + chunk.len() > MAX_NUMBER_LINE {
            let room = MAX_NUMBER_LINE.saturating_sub(self.line_len);
            chunk = chunk.get(..room).unwrap_or(&[]);
            err = Some(WireError::Invalid {
                what: ty.what(),
                why: "line too long",
            });
        }
        self.line_len += chunk.len();
        let room = HEAD_KEEP.saturating_sub(self.line.len());
        self.line
            .extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or(&[]));
        *pos += chunk.len();
        self.account(chunk.len());
        if let Some(e) = err {
            return Err(e);
        }
        match rest.get(end) {
            // The input ended inside the line (everything was consumed).
            None => Ok(()),
            Some(b'\n') => Err(missing_crlf(ty)),
            Some(_) => {
                *pos += 1;
                self.account(1);
                self.st = St::Line { ty, cr: true };
                Ok(())
            }
        }
    }

    /// The LF that ends a line: the line is acted on.
    #[inline]
    fn line_lf(&mut self, ty: Type, b: u8, ts: u64, pos: &mut usize) -> Res<Option<Event>> {
        if b != b'\n' {
            return Err(missing_crlf(ty));
        }
        *pos += 1;
        self.account(1);
        self.st = St::Type;
        self.finish_line(ty, ts)
    }

    /// Bytes of a blob's content (kept up to [`HEAD_KEEP`] when capturing).
    #[inline]
    fn blob_bytes(&mut self, ty: Type, left: u64, input: &[u8], pos: &mut usize) {
        let avail = input.len() - *pos;
        let n = usize::try_from(left).map_or(avail, |l| l.min(avail));
        if self.capturing() && !self.blob_cut {
            let room = HEAD_KEEP.saturating_sub(self.content.len()).min(n);
            self.content
                .extend_from_slice(input.get(*pos..*pos + room).unwrap_or(&[]));
        }
        *pos += n;
        self.account(n);
        let left = left - n as u64;
        self.st = if left == 0 {
            St::BlobCr { ty }
        } else {
            St::Blob { ty, left }
        };
    }

    /// The CR after a blob's content.
    #[inline]
    fn blob_cr(&mut self, ty: Type, b: u8, pos: &mut usize) -> Res<()> {
        if b != b'\r' {
            return Err(missing_crlf(ty));
        }
        *pos += 1;
        self.account(1);
        self.st = St::BlobLf { ty };
        Ok(())
    }

    /// The LF after a blob's content: the blob is complete.
    #[inline]
    fn blob_lf(&mut self, ty: Type, b: u8, ts: u64, pos: &mut usize) -> Res<Option<Event>> {
        if b != b'\n' {
            return Err(missing_crlf(ty));
        }
        *pos += 1;
        self.account(1);
        self.st = St::Type;
        Ok(self.complete(ty, ts))
    }
}

/// The error for a value not ended by CRLF.
fn missing_crlf(ty: Type) -> WireError {
    WireError::Invalid {
        what: ty.what(),
        why: "missing CRLF",
    }
}
