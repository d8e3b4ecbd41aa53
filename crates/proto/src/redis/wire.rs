//! RESP framing (RESP2, RESP3, inline commands): the value types, a streaming reader for server
//! replies that summarizes each top-level value without buffering payloads, a streaming reader
//! for client commands (arrays of bulk strings, or inline lines), and the boundary probe used to
//! resynchronize. No state about the conversation lives here.
//!
//! Both readers are push-based: `push(input, ts)` consumes bytes until something worth telling
//! happened and returns how many bytes it consumed. They never hold more than a few hundred
//! bytes of any value (an inline command, at most [`MAX_INLINE`]), however large the value.

use thiserror::Error;

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

/// What went wrong reading RESP bytes. `what` names the element being read.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum WireError {
    #[error("unknown type byte 0x{byte:02x}")]
    BadType { byte: u8 },
    #[error("{what}: bad line")]
    BadLine { what: &'static str },
    #[error("{what}: line too long")]
    TooLong { what: &'static str },
    #[error("{what}: length {len} out of range")]
    BadLength { what: &'static str, len: i64 },
    #[error("{what}: missing CRLF")]
    MissingCrlf { what: &'static str },
    #[error("aggregates nested deeper than {MAX_DEPTH}")]
    TooDeep,
    #[error("RESP3 streamed strings and aggregates are not supported")]
    Streamed,
    #[error("request: expected '$', got 0x{byte:02x}")]
    ExpectedBulk { byte: u8 },
    #[error("inline command: unbalanced quotes")]
    UnbalancedQuotes,
}

type Res<T> = Result<T, WireError>;

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
        n
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
            return Err(WireError::TooDeep);
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
        let number = || parse_i64(line).ok_or(WireError::BadLine { what });
        if line == b"?" && (ty.is_blob() || ty.is_aggregate()) {
            return Err(WireError::Streamed);
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
            return Err(WireError::BadLine { what });
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

    fn step(&mut self, input: &[u8], ts: u64, pos: &mut usize) -> Res<Option<Event>> {
        if let Some(ev) = self.pending.take() {
            return Ok(Some(ev));
        }
        while let Some(&b) = input.get(*pos) {
            match self.st {
                St::Type => {
                    let ty = Type::from_byte(b).ok_or(WireError::BadType { byte: b })?;
                    self.begin_value(ts);
                    *pos += 1;
                    self.account(1);
                    self.line.clear();
                    self.line_len = 0;
                    self.st = St::Line { ty, cr: false };
                }
                St::Line { ty, cr: false } => {
                    let rest = input.get(*pos..).unwrap_or(&[]);
                    let end = rest
                        .iter()
                        .position(|&c| c == b'\r' || c == b'\n')
                        .unwrap_or(rest.len());
                    // Valid bytes are consumed up to the first bad one (or the length limit),
                    // so what an error leaves behind does not depend on how bytes were split.
                    let mut chunk = rest.get(..end).unwrap_or(&[]);
                    let mut err = None;
                    if let Some(bad) = chunk.iter().position(|&c| !ty.line_byte_ok(c)) {
                        chunk = chunk.get(..bad).unwrap_or(&[]);
                        err = Some(WireError::BadLine { what: ty.what() });
                    }
                    if ty.numeric_line() && self.line_len + chunk.len() > MAX_NUMBER_LINE {
                        let room = MAX_NUMBER_LINE.saturating_sub(self.line_len);
                        chunk = chunk.get(..room).unwrap_or(&[]);
                        err = Some(WireError::TooLong { what: ty.what() });
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
                        None => break,
                        Some(b'\n') => return Err(WireError::MissingCrlf { what: ty.what() }),
                        Some(_) => {
                            *pos += 1;
                            self.account(1);
                            self.st = St::Line { ty, cr: true };
                        }
                    }
                }
                St::Line { ty, cr: true } => {
                    if b != b'\n' {
                        return Err(WireError::MissingCrlf { what: ty.what() });
                    }
                    *pos += 1;
                    self.account(1);
                    self.st = St::Type;
                    if let Some(ev) = self.finish_line(ty, ts)? {
                        return Ok(Some(ev));
                    }
                }
                St::Blob { ty, left } => {
                    let avail = input.len() - *pos;
                    let n = usize::try_from(left).map_or(avail, |l| l.min(avail));
                    if self.capturing() {
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
                St::BlobCr { ty } => {
                    if b != b'\r' {
                        return Err(WireError::MissingCrlf { what: ty.what() });
                    }
                    *pos += 1;
                    self.account(1);
                    self.st = St::BlobLf { ty };
                }
                St::BlobLf { ty } => {
                    if b != b'\n' {
                        return Err(WireError::MissingCrlf { what: ty.what() });
                    }
                    *pos += 1;
                    self.account(1);
                    self.st = St::Type;
                    if let Some(ev) = self.complete(ty, ts) {
                        return Ok(Some(ev));
                    }
                }
            }
        }
        Ok(None)
    }
}

// ---- requests ------------------------------------------------------------------------------

/// What [`RequestReader::push`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqEvent {
    /// A command with `argc` arguments begins (its arguments follow).
    Begin { argc: u64 },
    /// Argument `index` is complete; its first bytes are in [`RequestReader::arg_head`].
    Arg { index: u64, len: u64 },
    /// The command is complete.
    End { argc: u64, wire: u64, start_ts: u64 },
    /// Bytes the server ignores: an empty inline line, or `*0`/`*-1`.
    Empty { wire: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RSt {
    Start,
    /// `*<n>` line; `cr`: the `\r` was seen.
    Count {
        cr: bool,
    },
    /// `$<n>` line of the next argument; `dollar`: the `$` was seen.
    ArgHeader {
        dollar: bool,
        cr: bool,
    },
    Arg {
        left: u64,
    },
    ArgCr,
    ArgLf,
    /// Collecting an inline line up to `\n`.
    Inline,
    /// Handing out the arguments of a split inline line.
    InlineArgs {
        next: usize,
    },
}

/// Reads client commands: `*<n>\r\n` followed by `n` bulk strings, or an inline line of
/// space-separated words (quoted as Redis' `sdssplitargs` does). Arguments are streamed: only
/// the first `keep(index)` bytes of each are kept.
#[derive(Debug)]
pub struct RequestReader {
    st: RSt,
    line: Vec<u8>,
    argc: u64,
    index: u64,
    keep: usize,
    arg_len: u64,
    head: Vec<u8>,
    wire: u64,
    start_ts: u64,
    active: bool,
    inline: Vec<Vec<u8>>,
    /// The last argument was reported; the end of the command is reported next.
    end_pending: bool,
}

impl Default for RequestReader {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestReader {
    pub fn new() -> Self {
        RequestReader {
            st: RSt::Start,
            line: Vec::new(),
            argc: 0,
            index: 0,
            keep: 0,
            arg_len: 0,
            head: Vec::new(),
            wire: 0,
            start_ts: 0,
            active: false,
            inline: Vec::new(),
            end_pending: false,
        }
    }

    /// The kept first bytes of the last argument reported.
    pub fn arg_head(&self) -> &[u8] {
        &self.head
    }

    /// Bytes of the unfinished command consumed so far.
    pub fn partial_bytes(&self) -> u64 {
        if self.active { self.wire } else { 0 }
    }

    /// True between commands.
    pub fn is_idle(&self) -> bool {
        !self.active
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.line.capacity()
            + self.head.capacity()
            + self.inline.iter().map(Vec::capacity).sum::<usize>()
            + self.inline.capacity() * std::mem::size_of::<Vec<u8>>()
    }

    /// Drops the command in progress; returns the bytes it had consumed.
    pub fn reset(&mut self) -> u64 {
        let n = self.partial_bytes();
        self.st = RSt::Start;
        self.line.clear();
        if self.line.capacity() > 4096 {
            self.line = Vec::new();
        }
        self.inline = Vec::new();
        self.active = false;
        self.end_pending = false;
        n
    }

    fn finish(&mut self) -> ReqEvent {
        self.active = false;
        self.end_pending = false;
        self.st = RSt::Start;
        ReqEvent::End {
            argc: self.argc,
            wire: self.wire,
            start_ts: self.start_ts,
        }
    }

    /// Reads a header line byte by byte into `self.line`; `Some(number)` when it ended.
    fn number_line(&mut self, b: u8, cr: bool, what: &'static str) -> Res<(bool, Option<i64>)> {
        if cr {
            if b != b'\n' {
                return Err(WireError::MissingCrlf { what });
            }
            let n = parse_i64(&self.line).ok_or(WireError::BadLine { what })?;
            self.line.clear();
            return Ok((false, Some(n)));
        }
        match b {
            b'\r' => Ok((true, None)),
            b'0'..=b'9' | b'-' | b'+' if self.line.len() < MAX_NUMBER_LINE => {
                self.line.push(b);
                Ok((false, None))
            }
            b'0'..=b'9' | b'-' | b'+' => Err(WireError::TooLong { what }),
            _ => Err(WireError::BadLine { what }),
        }
    }

    /// Consumes bytes until something is reported; returns the bytes consumed. `keep(index)`
    /// says how many bytes of argument `index` to keep.
    ///
    /// On an error the count excludes the offending byte, and the reader must be
    /// [`reset`](Self::reset) before it is used again.
    pub fn push(
        &mut self,
        input: &[u8],
        ts: u64,
        keep: &dyn Fn(u64) -> usize,
    ) -> (usize, Res<Option<ReqEvent>>) {
        let mut pos = 0usize;
        let r = self.step(input, ts, keep, &mut pos);
        (pos, r)
    }

    fn step(
        &mut self,
        input: &[u8],
        ts: u64,
        keep: &dyn Fn(u64) -> usize,
        pos: &mut usize,
    ) -> Res<Option<ReqEvent>> {
        if self.end_pending {
            return Ok(Some(self.finish()));
        }
        if let RSt::InlineArgs { next } = self.st {
            return Ok(Some(self.inline_arg(next, keep)));
        }
        while let Some(&b) = input.get(*pos) {
            match self.st {
                RSt::Start => {
                    self.active = true;
                    self.start_ts = ts;
                    self.wire = 0;
                    self.line.clear();
                    self.st = if b == b'*' {
                        *pos += 1;
                        self.wire += 1;
                        RSt::Count { cr: false }
                    } else {
                        RSt::Inline
                    };
                }
                RSt::Count { cr } => {
                    let (cr, n) = self.number_line(b, cr, "command count")?;
                    *pos += 1;
                    self.wire += 1;
                    self.st = RSt::Count { cr };
                    if let Some(n) = n {
                        if n <= 0 {
                            self.active = false;
                            self.st = RSt::Start;
                            return Ok(Some(ReqEvent::Empty { wire: self.wire }));
                        }
                        let argc = n as u64;
                        if argc > MAX_ARGS {
                            return Err(WireError::BadLength {
                                what: "command count",
                                len: n,
                            });
                        }
                        self.argc = argc;
                        self.index = 0;
                        self.st = RSt::ArgHeader {
                            dollar: false,
                            cr: false,
                        };
                        return Ok(Some(ReqEvent::Begin { argc }));
                    }
                }
                RSt::ArgHeader { dollar: false, .. } => {
                    if b != b'$' {
                        return Err(WireError::ExpectedBulk { byte: b });
                    }
                    *pos += 1;
                    self.wire += 1;
                    self.st = RSt::ArgHeader {
                        dollar: true,
                        cr: false,
                    };
                }
                RSt::ArgHeader { dollar: true, cr } => {
                    let (cr, n) = self.number_line(b, cr, "argument length")?;
                    *pos += 1;
                    self.wire += 1;
                    self.st = RSt::ArgHeader { dollar: true, cr };
                    if let Some(n) = n {
                        let len = u64::try_from(n).ok().filter(|&l| l <= MAX_BULK).ok_or(
                            WireError::BadLength {
                                what: "argument length",
                                len: n,
                            },
                        )?;
                        self.keep = keep(self.index);
                        self.head.clear();
                        self.st = if len == 0 {
                            RSt::ArgCr
                        } else {
                            RSt::Arg { left: len }
                        };
                        self.arg_len = len;
                    }
                }
                RSt::Arg { left } => {
                    let avail = input.len() - *pos;
                    let n = usize::try_from(left).map_or(avail, |l| l.min(avail));
                    let room = self.keep.saturating_sub(self.head.len()).min(n);
                    self.head
                        .extend_from_slice(input.get(*pos..*pos + room).unwrap_or(&[]));
                    *pos += n;
                    self.wire += n as u64;
                    let left = left - n as u64;
                    self.st = if left == 0 {
                        RSt::ArgCr
                    } else {
                        RSt::Arg { left }
                    };
                }
                RSt::ArgCr => {
                    if b != b'\r' {
                        return Err(WireError::MissingCrlf { what: "argument" });
                    }
                    *pos += 1;
                    self.wire += 1;
                    self.st = RSt::ArgLf;
                }
                RSt::ArgLf => {
                    if b != b'\n' {
                        return Err(WireError::MissingCrlf { what: "argument" });
                    }
                    *pos += 1;
                    self.wire += 1;
                    let index = self.index;
                    self.index += 1;
                    let ev = ReqEvent::Arg {
                        index,
                        len: self.arg_len,
                    };
                    if self.index >= self.argc {
                        self.end_pending = true;
                    } else {
                        self.st = RSt::ArgHeader {
                            dollar: false,
                            cr: false,
                        };
                    }
                    return Ok(Some(ev));
                }
                RSt::Inline => {
                    let rest = input.get(*pos..).unwrap_or(&[]);
                    let nl = rest.iter().position(|&c| c == b'\n');
                    let take = nl.map_or(rest.len(), |i| i + 1);
                    if self.line.len() + take > MAX_INLINE {
                        let room = MAX_INLINE.saturating_sub(self.line.len());
                        *pos += room;
                        self.wire += room as u64;
                        self.line.extend_from_slice(rest.get(..room).unwrap_or(&[]));
                        return Err(WireError::TooLong {
                            what: "inline command",
                        });
                    }
                    self.line.extend_from_slice(rest.get(..take).unwrap_or(&[]));
                    *pos += take;
                    self.wire += take as u64;
                    if nl.is_none() {
                        break;
                    }
                    let mut line = std::mem::take(&mut self.line);
                    line.pop();
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    let args = split_inline(&line)?;
                    line.clear();
                    self.line = line;
                    if args.is_empty() {
                        self.active = false;
                        self.st = RSt::Start;
                        return Ok(Some(ReqEvent::Empty { wire: self.wire }));
                    }
                    self.argc = args.len() as u64;
                    self.index = 0;
                    self.inline = args;
                    self.st = RSt::InlineArgs { next: 0 };
                    return Ok(Some(ReqEvent::Begin { argc: self.argc }));
                }
                RSt::InlineArgs { next } => {
                    return Ok(Some(self.inline_arg(next, keep)));
                }
            }
        }
        Ok(None)
    }

    fn inline_arg(&mut self, next: usize, keep: &dyn Fn(u64) -> usize) -> ReqEvent {
        let Some(arg) = self.inline.get(next) else {
            self.inline = Vec::new();
            return self.finish();
        };
        let k = keep(next as u64).min(arg.len());
        self.head.clear();
        self.head.extend_from_slice(arg.get(..k).unwrap_or(&[]));
        let len = arg.len() as u64;
        self.st = RSt::InlineArgs { next: next + 1 };
        ReqEvent::Arg {
            index: next as u64,
            len,
        }
    }
}

/// Splits an inline command line into arguments the way Redis' `sdssplitargs` does: words
/// separated by whitespace; `"..."` with `\n \r \t \b \a \\ \"` and `\xHH` escapes; `'...'`
/// with `\'`. A closing quote must be followed by whitespace or the end of the line.
pub fn split_inline(line: &[u8]) -> Res<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0usize;
    let at = |i: usize| line.get(i).copied();
    let space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C);
    loop {
        while at(i).is_some_and(space) {
            i += 1;
        }
        let Some(first) = at(i) else {
            return Ok(args);
        };
        let mut cur = Vec::new();
        match first {
            b'"' => {
                i += 1;
                loop {
                    match at(i) {
                        None => return Err(WireError::UnbalancedQuotes),
                        Some(b'\\') => {
                            let hex = |c: Option<u8>| {
                                c.and_then(|c| (c as char).to_digit(16)).map(|d| d as u8)
                            };
                            if at(i + 1) == Some(b'x')
                                && let (Some(h), Some(l)) = (hex(at(i + 2)), hex(at(i + 3)))
                            {
                                cur.push(h << 4 | l);
                                i += 4;
                                continue;
                            }
                            match at(i + 1) {
                                None => return Err(WireError::UnbalancedQuotes),
                                Some(c) => {
                                    cur.push(match c {
                                        b'n' => b'\n',
                                        b'r' => b'\r',
                                        b't' => b'\t',
                                        b'b' => 0x08,
                                        b'a' => 0x07,
                                        other => other,
                                    });
                                    i += 2;
                                }
                            }
                        }
                        Some(b'"') => {
                            if at(i + 1).is_some_and(|c| !space(c)) {
                                return Err(WireError::UnbalancedQuotes);
                            }
                            i += 1;
                            break;
                        }
                        Some(c) => {
                            cur.push(c);
                            i += 1;
                        }
                    }
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    match at(i) {
                        None => return Err(WireError::UnbalancedQuotes),
                        Some(b'\\') if at(i + 1) == Some(b'\'') => {
                            cur.push(b'\'');
                            i += 2;
                        }
                        Some(b'\'') => {
                            if at(i + 1).is_some_and(|c| !space(c)) {
                                return Err(WireError::UnbalancedQuotes);
                            }
                            i += 1;
                            break;
                        }
                        Some(c) => {
                            cur.push(c);
                            i += 1;
                        }
                    }
                }
            }
            _ => {
                while let Some(c) = at(i).filter(|&c| !space(c)) {
                    cur.push(c);
                    i += 1;
                }
            }
        }
        args.push(cur);
    }
}

/// What [`probe_command`] concludes about bytes at a possible command boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `*<n>\r\n$<len>\r\n<name>\r\n` with a plausible command name.
    Match,
    NoMatch,
    /// A prefix of a match: more bytes are needed to decide.
    NeedMore,
}

/// The most bytes [`probe_command`] looks at: it always decides with this many.
pub const PROBE_MAX: usize = 1 + 10 + 2 + 1 + 2 + 2 + 64 + 2;

/// Whether a command name is plausible: an ASCII letter, then letters, digits, `.`, `_`, `-`,
/// `|` or `:` (module commands such as `FT.SEARCH` or `JSON.GET`), 1 to 64 bytes.
pub fn plausible_name(name: &[u8]) -> bool {
    name.first().is_some_and(u8::is_ascii_alphabetic)
        && name.len() <= 64
        && name
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'|' | b':'))
}

/// Checks whether `b` starts a command in the array-of-bulk-strings form, with a plausible
/// command name as its first argument. Used to resynchronize on the client side.
pub fn probe_command(b: &[u8]) -> Probe {
    // `*` count CRLF `$` len CRLF name CRLF.
    let mut i = 0usize;
    let at = |i: usize| b.get(i).copied();
    let number = |i: &mut usize, max_digits: usize| -> Result<u64, Probe> {
        let start = *i;
        let mut v = 0u64;
        loop {
            match at(*i) {
                None => return Err(Probe::NeedMore),
                Some(d @ b'0'..=b'9') if *i - start < max_digits => {
                    v = v * 10 + u64::from(d - b'0');
                    *i += 1;
                }
                Some(b'\r') if *i > start => {
                    return match at(*i + 1) {
                        None => Err(Probe::NeedMore),
                        Some(b'\n') => {
                            *i += 2;
                            Ok(v)
                        }
                        Some(_) => Err(Probe::NoMatch),
                    };
                }
                Some(_) => return Err(Probe::NoMatch),
            }
        }
    };
    match at(i) {
        None => return Probe::NeedMore,
        Some(b'*') => i += 1,
        Some(_) => return Probe::NoMatch,
    }
    match number(&mut i, 10) {
        Ok(n) if (1..=MAX_ARGS).contains(&n) => {}
        Ok(_) => return Probe::NoMatch,
        Err(p) => return p,
    }
    match at(i) {
        None => return Probe::NeedMore,
        Some(b'$') => i += 1,
        Some(_) => return Probe::NoMatch,
    }
    let len = match number(&mut i, 2) {
        Ok(n) if (1..=64).contains(&n) => n as usize,
        Ok(_) => return Probe::NoMatch,
        Err(p) => return p,
    };
    let avail = b.get(i..).unwrap_or(&[]);
    let name = avail.get(..len.min(avail.len())).unwrap_or(&[]);
    let plausible_prefix = name.first().is_none_or(u8::is_ascii_alphabetic)
        && name
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'|' | b':'));
    if !plausible_prefix {
        return Probe::NoMatch;
    }
    if name.len() < len {
        return Probe::NeedMore;
    }
    match (at(i + len), at(i + len + 1)) {
        (Some(b'\r'), Some(b'\n')) => Probe::Match,
        (None, _) | (Some(b'\r'), None) => Probe::NeedMore,
        _ => Probe::NoMatch,
    }
}

/// The command name of a probe match: the bytes of its first argument.
pub fn probe_name(b: &[u8]) -> Option<&[u8]> {
    let dollar = b.iter().position(|&c| c == b'$')?;
    let rest = b.get(dollar + 1..)?;
    let cr = rest.iter().position(|&c| c == b'\r')?;
    let len: usize = std::str::from_utf8(rest.get(..cr)?).ok()?.parse().ok()?;
    rest.get(cr + 2..cr + 2 + len)
}
