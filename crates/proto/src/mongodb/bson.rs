//! A streaming BSON skimmer: walks one document as its bytes arrive, in any pieces, without
//! building it. A [`Visitor`] is told of each element (key and type) and answers whether to
//! skip it, read its scalar value, or descend into it; skipped values, strings beyond a cap and
//! whole sub-documents are passed over by their length prefixes, so memory stays bounded by the
//! nesting depth whatever the document's size. Every length is checked against the container
//! that holds it.

use super::wire::{FieldReader, WireError};

/// A visitor-chosen tag for a container it descended into.
pub type Ctx = u16;

/// Element types (the BSON type byte).
pub mod ty {
    pub const DOUBLE: u8 = 0x01;
    pub const STRING: u8 = 0x02;
    pub const DOCUMENT: u8 = 0x03;
    pub const ARRAY: u8 = 0x04;
    pub const BINARY: u8 = 0x05;
    pub const UNDEFINED: u8 = 0x06;
    pub const OBJECT_ID: u8 = 0x07;
    pub const BOOL: u8 = 0x08;
    pub const DATETIME: u8 = 0x09;
    pub const NULL: u8 = 0x0A;
    pub const REGEX: u8 = 0x0B;
    pub const DB_POINTER: u8 = 0x0C;
    pub const JAVASCRIPT: u8 = 0x0D;
    pub const SYMBOL: u8 = 0x0E;
    pub const CODE_W_SCOPE: u8 = 0x0F;
    pub const INT32: u8 = 0x10;
    pub const TIMESTAMP: u8 = 0x11;
    pub const INT64: u8 = 0x12;
    pub const DECIMAL128: u8 = 0x13;
    pub const MIN_KEY: u8 = 0xFF;
    pub const MAX_KEY: u8 = 0x7F;

    /// Whether the type holds a document or an array.
    pub fn is_container(t: u8) -> bool {
        t == DOCUMENT || t == ARRAY
    }
}

/// Keys longer than this are cut (the rest is skipped).
pub const KEY_CAP: u32 = 256;
/// Strings read for a visitor are cut at this many bytes.
pub const STR_CAP: u32 = 1024;
/// Containers nested deeper than this are skipped, never descended into.
pub const MAX_DEPTH: usize = 64;

/// What to do with an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Pass over it.
    Skip,
    /// Read a scalar and hand it to [`Visitor::scalar`] (containers are skipped).
    Read,
    /// Walk into a document or array; its elements get this context.
    Descend(Ctx),
}

/// A scalar value read for a visitor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar<'a> {
    Double(f64),
    Int32(i32),
    Int64(i64),
    Bool(bool),
    Null,
    /// A string (also JavaScript code and symbols), cut at [`STR_CAP`] bytes; `complete` is
    /// false when it was cut.
    Str {
        bytes: &'a [u8],
        complete: bool,
    },
    /// Any other type, value not read.
    Other(u8),
}

impl Scalar<'_> {
    /// The value as an integer, for numeric types (doubles when integral).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Scalar::Int32(v) => Some(i64::from(v)),
            Scalar::Int64(v) => Some(v),
            Scalar::Double(v) if v.fract() == 0.0 && v.abs() < 9.0e18 => Some(v as i64),
            _ => None,
        }
    }
    /// Truthiness as MongoDB judges `ok`.
    pub fn truthy(&self) -> bool {
        match *self {
            Scalar::Double(v) => v != 0.0,
            Scalar::Int32(v) => v != 0,
            Scalar::Int64(v) => v != 0,
            Scalar::Bool(b) => b,
            _ => false,
        }
    }
}

/// Told of the elements of a walked document.
pub trait Visitor {
    /// An element of the container tagged `parent` starts: its key (cut at [`KEY_CAP`]), type
    /// and index in the container.
    fn element(&mut self, parent: Ctx, key: &[u8], ty: u8, index: u32) -> Act;
    /// The value of an element answered with [`Act::Read`] (never for containers).
    fn scalar(&mut self, parent: Ctx, key: &[u8], v: Scalar<'_>);
    /// A container that was descended into (or the root) ended.
    fn leave(&mut self, ctx: Ctx);
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    /// Position just past the container's terminator.
    end: u64,
    ctx: Ctx,
    index: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// The int32 length of a container we enter, tagged `ctx`.
    DocLen(Ctx),
    /// The type byte of the next element, or the terminator.
    Type,
    Key,
    /// A fixed-size value.
    Fixed {
        n: u8,
        read: bool,
    },
    /// The int32 length of a string (or a string-like).
    StrLen {
        read: bool,
    },
    StrBody {
        read: bool,
    },
    /// The int32 length of a binary, or of a container we skip, or of code with scope.
    SkipLen {
        extra: u64,
        counts_self: bool,
    },
    Skip,
    /// Regex: pattern then options; `second` once the pattern is done.
    Regex {
        second: bool,
        read: bool,
    },
    /// DBPointer: the string, then 12 bytes.
    DbPointerStr,
    Done,
}

/// Walks one BSON document fed in pieces.
#[derive(Debug)]
pub struct Walker {
    frames: Vec<Frame>,
    pos: u64,
    /// The most bytes the document may take (what remains of its section or message).
    limit: u64,
    st: St,
    ty: u8,
    key: Vec<u8>,
    r: FieldReader,
}

impl Default for Walker {
    fn default() -> Self {
        Walker {
            frames: Vec::new(),
            pos: 0,
            limit: 0,
            st: St::Done,
            ty: 0,
            key: Vec::new(),
            r: FieldReader::default(),
        }
    }
}

/// A type the walker knows how to step over.
#[inline]
fn known_type(t: u8) -> bool {
    ty::is_container(t)
        || fixed_size(t).is_some()
        || matches!(
            t,
            ty::STRING
                | ty::JAVASCRIPT
                | ty::SYMBOL
                | ty::BINARY
                | ty::REGEX
                | ty::DB_POINTER
                | ty::CODE_W_SCOPE
        )
}

fn fixed_size(t: u8) -> Option<u8> {
    Some(match t {
        ty::DOUBLE | ty::DATETIME | ty::TIMESTAMP | ty::INT64 => 8,
        ty::OBJECT_ID => 12,
        ty::BOOL => 1,
        ty::NULL | ty::UNDEFINED | ty::MIN_KEY | ty::MAX_KEY => 0,
        ty::INT32 => 4,
        ty::DECIMAL128 => 16,
        _ => return None,
    })
}

/// A string read for a visitor from its kept prefix (at most [`STR_CAP`] + 1 bytes): the
/// prefix ends with the NUL only when the string was not cut.
fn str_scalar(kept: &[u8]) -> Scalar<'_> {
    let (bytes, complete) = match kept.split_last() {
        Some((0, s)) if s.len() <= STR_CAP as usize => (s, true),
        _ => (kept.get(..STR_CAP as usize).unwrap_or(kept), false),
    };
    Scalar::Str { bytes, complete }
}

/// A fixed-size value of type `t` from its bytes.
fn fixed_scalar(t: u8, b: &[u8]) -> Scalar<'static> {
    let le8 = || u64::from_le_bytes(b.get(..8).and_then(|x| x.try_into().ok()).unwrap_or([0; 8]));
    match t {
        ty::DOUBLE => Scalar::Double(f64::from_bits(le8())),
        ty::INT32 => Scalar::Int32(i32::from_le_bytes(
            b.get(..4).and_then(|x| x.try_into().ok()).unwrap_or([0; 4]),
        )),
        ty::INT64 => Scalar::Int64(le8() as i64),
        ty::BOOL => Scalar::Bool(b.first().is_some_and(|&x| x != 0)),
        ty::NULL | ty::UNDEFINED => Scalar::Null,
        t => Scalar::Other(t),
    }
}

/// A document held whole, read by offsets: every read stays before a bound.
struct InPlace<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> InPlace<'a> {
    /// The next `n` bytes, which must end at or before `lim`.
    #[inline]
    fn take(&mut self, n: usize, lim: usize) -> Result<&'a [u8], WireError> {
        let s = if n <= lim.saturating_sub(self.pos) {
            self.b.get(self.pos..self.pos + n)
        } else {
            None
        };
        let s = s.ok_or(WireError::Overrun {
            what: "BSON element",
        })?;
        self.pos += n;
        Ok(s)
    }

    #[inline]
    fn i32(&mut self, lim: usize) -> Result<i32, WireError> {
        let b = self.take(4, lim)?;
        Ok(i32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }

    /// A C string ending before `lim` (its NUL consumed, not returned).
    #[inline]
    fn cstr(&mut self, lim: usize) -> Result<&'a [u8], WireError> {
        let region = self.b.get(self.pos..lim).unwrap_or(&[]);
        let Some(n) = region.iter().position(|&x| x == 0) else {
            return Err(WireError::Overrun {
                what: "BSON element",
            });
        };
        self.pos += n + 1;
        Ok(region.get(..n).unwrap_or(&[]))
    }

    /// Skips a value by its length: binary (`extra` 1 for the subtype, the length not
    /// counting itself) or a container or code with scope (`counts_self`).
    #[inline]
    fn skip(&mut self, lim: usize, extra: i64, counts_self: bool) -> Result<(), WireError> {
        let len = self.i32(lim)?;
        let body = if counts_self {
            i64::from(len) - 4
        } else {
            i64::from(len) + extra
        };
        let min = i64::from(counts_self);
        if len < 0 || body < min || body as u64 > lim.saturating_sub(self.pos) as u64 {
            return Err(WireError::Invalid {
                what: "BSON length",
                why: "negative or past its container",
            });
        }
        self.pos += body as usize;
        Ok(())
    }
}

impl Walker {
    /// Starts a document whose root elements get context `root`, and which may take at most
    /// `limit` bytes.
    pub fn start(&mut self, root: Ctx, limit: u64) {
        self.frames.clear();
        if self.frames.capacity() > 2 * MAX_DEPTH {
            self.frames = Vec::new();
        }
        self.pos = 0;
        self.limit = limit;
        self.st = St::DocLen(root);
        self.r.reset();
        self.r.fixed(4);
    }

    /// The document ended (its terminator was read).
    pub fn done(&self) -> bool {
        self.st == St::Done
    }

    /// Bytes of the document consumed so far.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.frames.capacity() * std::mem::size_of::<Frame>()
            + self.key.capacity()
            + self.r.buffered_bytes()
    }

    /// How far the current primitive may read: up to the terminator of the innermost
    /// container (its end, for the type byte that may be the terminator).
    fn bound(&self) -> u64 {
        match self.frames.last() {
            Some(f) => {
                let end = if self.st == St::Type {
                    f.end
                } else {
                    f.end - 1
                };
                end.saturating_sub(self.pos)
            }
            None => self.limit.saturating_sub(self.pos),
        }
    }

    /// Feeds bytes; returns how many were consumed. Stops at the end of the document (the
    /// rest of the input is not consumed). An error leaves the walker unusable until the next
    /// [`Walker::start`].
    pub fn push(&mut self, input: &[u8], v: &mut dyn Visitor) -> Result<usize, WireError> {
        if let Some(len) = self.whole_len(input) {
            let doc = input.get(..len).unwrap_or(&[]);
            return self.walk_whole(doc, v).map(|()| len);
        }
        let mut used = 0usize;
        while self.st != St::Done {
            let bound = self.bound();
            let avail = input.get(used..).unwrap_or(&[]);
            if avail.is_empty() {
                break;
            }
            let lim = usize::try_from(bound)
                .unwrap_or(usize::MAX)
                .min(avail.len());
            let (n, complete) = self.r.push(avail.get(..lim).unwrap_or(&[]));
            used += n;
            self.pos += n as u64;
            if !complete {
                if n == lim && lim < avail.len() || bound == 0 {
                    return Err(WireError::Overrun {
                        what: "BSON element",
                    });
                }
                continue;
            }
            self.step(v)?;
        }
        Ok(used)
    }

    /// The length of the document when none of it was read yet and `input` holds all of it
    /// (a length prefix the limit allows): it is then walked in place, not streamed.
    fn whole_len(&self, input: &[u8]) -> Option<usize> {
        if self.pos != 0 || !matches!(self.st, St::DocLen(_)) || !self.frames.is_empty() {
            return None;
        }
        let len = i32::from_le_bytes(input.get(..4)?.try_into().ok()?);
        let len = usize::try_from(len).ok()?;
        (len >= 5 && len as u64 <= self.limit && len <= input.len()).then_some(len)
    }

    /// Walks the whole document `b` (its length prefix checked by [`Walker::whole_len`]) in
    /// place: the same visitor calls, in the same order, and the same verdict as streaming it,
    /// without copying a primitive. Done after it, as a streamed document would be.
    fn walk_whole(&mut self, b: &[u8], v: &mut dyn Visitor) -> Result<(), WireError> {
        let St::DocLen(root) = self.st else {
            return Ok(());
        };
        self.frames.push(Frame {
            end: b.len() as u64,
            ctx: root,
            index: 0,
        });
        let mut c = InPlace { b, pos: 4 };
        let res = loop {
            match self.whole_element(&mut c, v) {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.r.reset();
        self.frames.clear();
        if res.is_ok() {
            self.pos = b.len() as u64;
            self.st = St::Done;
        }
        res
    }

    /// One element of the innermost container (or its terminator) read in place; false once
    /// the root ended.
    fn whole_element(
        &mut self,
        c: &mut InPlace<'_>,
        v: &mut dyn Visitor,
    ) -> Result<bool, WireError> {
        let Some(f) = self.frames.last_mut() else {
            return Ok(false);
        };
        let end = usize::try_from(f.end).unwrap_or(usize::MAX);
        let t = c.take(1, end)?.first().copied().unwrap_or(0);
        if c.pos == end {
            return close_frame(&mut self.frames, t, v);
        }
        if t == 0 {
            return Err(WireError::Invalid {
                what: "BSON document",
                why: "terminator before its end",
            });
        }
        // Values end before the container's terminator.
        let lim = end - 1;
        let key = c.cstr(lim)?;
        let key = key.get(..KEY_CAP as usize).unwrap_or(key);
        let (parent, index) = (f.ctx, f.index);
        f.index = f.index.saturating_add(1);
        if !known_type(t) {
            return Err(WireError::Invalid {
                what: "BSON element",
                why: "unknown type",
            });
        }
        let mut act = v.element(parent, key, t, index);
        if matches!(act, Act::Descend(_))
            && (!ty::is_container(t) || self.frames.len() >= MAX_DEPTH)
        {
            act = Act::Skip;
        }
        let el = (parent, key, t);
        self.whole_value(c, lim, el, act, v)?;
        Ok(true)
    }

    /// The value of element `el` (parent, key, type), read in place as the visitor asked.
    fn whole_value(
        &mut self,
        c: &mut InPlace<'_>,
        lim: usize,
        el: (Ctx, &[u8], u8),
        act: Act,
        v: &mut dyn Visitor,
    ) -> Result<(), WireError> {
        let (parent, key, t) = el;
        let read = act == Act::Read;
        match (t, act) {
            (_, Act::Descend(ctx)) => {
                let start = c.pos;
                let len = c.i32(lim)?;
                if len < 5 || len as u64 > lim.saturating_sub(start) as u64 {
                    return Err(WireError::Invalid {
                        what: "BSON document length",
                        why: "below 5 or past its container",
                    });
                }
                self.frames.push(Frame {
                    end: (start + len as usize) as u64,
                    ctx,
                    index: 0,
                });
            }
            (ty::DOCUMENT | ty::ARRAY | ty::CODE_W_SCOPE, _) => c.skip(lim, 0, true)?,
            (ty::BINARY, _) => c.skip(lim, 1, false)?,
            (ty::STRING | ty::JAVASCRIPT | ty::SYMBOL, _) => {
                let len = c.i32(lim)?;
                if len < 1 || len as u64 > lim.saturating_sub(c.pos) as u64 {
                    return Err(WireError::Invalid {
                        what: "BSON string length",
                        why: "below 1 or past its container",
                    });
                }
                let s = c.take(len as usize, lim)?;
                if read {
                    let kept = s.get(..STR_CAP as usize + 1).unwrap_or(s);
                    v.scalar(parent, key, str_scalar(kept));
                }
            }
            (ty::REGEX, _) => {
                c.cstr(lim)?;
                c.cstr(lim)?;
                if read {
                    v.scalar(parent, key, Scalar::Other(ty::REGEX));
                }
            }
            (ty::DB_POINTER, _) => {
                let len = c.i32(lim)?;
                let body = i64::from(len) + 12;
                if len < 1 || body as u64 > lim.saturating_sub(c.pos) as u64 {
                    return Err(WireError::Invalid {
                        what: "BSON DBPointer",
                        why: "bad length",
                    });
                }
                c.take(body as usize, lim)?;
            }
            _ => {
                let b = c.take(usize::from(fixed_size(t).unwrap_or(0)), lim)?;
                if read {
                    v.scalar(parent, key, fixed_scalar(t, b));
                }
            }
        }
        Ok(())
    }

    /// A primitive completed: act on it and start the next one. One handler per state.
    fn step(&mut self, v: &mut dyn Visitor) -> Result<(), WireError> {
        match self.st {
            St::DocLen(ctx) => self.doc_len(ctx),
            St::Type => self.type_byte(v),
            St::Key => self.key(v),
            St::Fixed { .. } => self.fixed_done(v),
            St::StrLen { read } => self.str_len(read),
            St::StrBody { read } => {
                self.str_body(read, v);
                Ok(())
            }
            St::SkipLen { extra, counts_self } => self.skipped_len(extra, counts_self),
            St::Skip => {
                self.next_element();
                Ok(())
            }
            St::Regex { second, read } => {
                self.regex_part(second, read, v);
                Ok(())
            }
            St::DbPointerStr => self.db_pointer_str(),
            St::Done => Ok(()),
        }
    }

    /// The length of a container we enter: push its frame.
    #[inline]
    fn doc_len(&mut self, ctx: Ctx) -> Result<(), WireError> {
        let len = self.r.i32();
        let start = self.pos - 4;
        let room = match self.frames.last() {
            Some(f) => (f.end - 1).saturating_sub(start),
            None => self.limit.saturating_sub(start),
        };
        if len < 5 || len as u64 > room {
            return Err(WireError::Invalid {
                what: "BSON document length",
                why: "below 5 or past its container",
            });
        }
        self.frames.push(Frame {
            end: start + len as u64,
            ctx,
            index: 0,
        });
        self.next_element();
        Ok(())
    }

    /// The type byte of the next element, or the terminator of the innermost container.
    #[inline]
    fn type_byte(&mut self, v: &mut dyn Visitor) -> Result<(), WireError> {
        let b = self.r.bytes().first().copied().unwrap_or(0);
        let Some(f) = self.frames.last() else {
            self.st = St::Done;
            return Ok(());
        };
        if self.pos == f.end {
            if !close_frame(&mut self.frames, b, v)? {
                self.st = St::Done;
            } else {
                self.next_element();
            }
            return Ok(());
        }
        if b == 0 {
            return Err(WireError::Invalid {
                what: "BSON document",
                why: "terminator before its end",
            });
        }
        self.ty = b;
        self.st = St::Key;
        self.r.cstr(KEY_CAP);
        Ok(())
    }

    /// The key of an element: the visitor decides what to do with its value.
    #[inline]
    fn key(&mut self, v: &mut dyn Visitor) -> Result<(), WireError> {
        self.key.clear();
        self.key.extend_from_slice(self.r.bytes());
        let Some(f) = self.frames.last_mut() else {
            return Err(WireError::Overrun { what: "BSON key" });
        };
        let (parent, index) = (f.ctx, f.index);
        f.index = f.index.saturating_add(1);
        let t = self.ty;
        if !known_type(t) {
            return Err(WireError::Invalid {
                what: "BSON element",
                why: "unknown type",
            });
        }
        let mut act = v.element(parent, &self.key, t, index);
        if matches!(act, Act::Descend(_))
            && (!ty::is_container(t) || self.frames.len() >= MAX_DEPTH)
        {
            act = Act::Skip;
        }
        self.value(t, act, v)
    }

    /// Starts reading the value of type `t` as the visitor asked.
    #[inline]
    fn value(&mut self, t: u8, act: Act, v: &mut dyn Visitor) -> Result<(), WireError> {
        let read = act == Act::Read;
        match (t, act) {
            (_, Act::Descend(c)) => {
                self.st = St::DocLen(c);
                self.r.fixed(4);
            }
            (ty::DOCUMENT | ty::ARRAY, _) => self.skip_len(0, true),
            (ty::STRING | ty::JAVASCRIPT | ty::SYMBOL, _) => {
                self.st = St::StrLen { read };
                self.r.fixed(4);
            }
            (ty::BINARY, _) => self.skip_len(1, false),
            (ty::CODE_W_SCOPE, _) => self.skip_len(0, true),
            (ty::REGEX, _) => {
                self.st = St::Regex {
                    second: false,
                    read,
                };
                self.r.cstr(0);
            }
            (ty::DB_POINTER, _) => {
                self.st = St::DbPointerStr;
                self.r.fixed(4);
            }
            _ => {
                let n = fixed_size(t).unwrap_or(0);
                self.st = St::Fixed { n, read };
                if n == 0 {
                    return self.fixed_done(v);
                }
                self.r.fixed(n);
            }
        }
        Ok(())
    }

    /// The length of a string: then its body, kept (cut) when it is read.
    #[inline]
    fn str_len(&mut self, read: bool) -> Result<(), WireError> {
        let len = self.r.i32();
        if len < 1 || len as u64 > self.bound() {
            return Err(WireError::Invalid {
                what: "BSON string length",
                why: "below 1 or past its container",
            });
        }
        self.st = St::StrBody { read };
        self.r.take(len as u64, if read { STR_CAP + 1 } else { 0 });
        Ok(())
    }

    /// The body of a string: the visitor gets it when it asked to read it.
    #[inline]
    fn str_body(&mut self, read: bool, v: &mut dyn Visitor) {
        if read {
            let parent = self.frames.last().map_or(0, |f| f.ctx);
            v.scalar(parent, &self.key, str_scalar(self.r.bytes()));
        }
        self.next_element();
    }

    /// The length of a value we skip (binary, container, code with scope): skip its body.
    #[inline]
    fn skipped_len(&mut self, extra: u64, counts_self: bool) -> Result<(), WireError> {
        let len = self.r.i32();
        let body = if counts_self {
            i64::from(len) - 4
        } else {
            i64::from(len) + extra as i64
        };
        let min = if counts_self { 1 } else { 0 };
        if len < 0 || body < min || body as u64 > self.bound() {
            return Err(WireError::Invalid {
                what: "BSON length",
                why: "negative or past its container",
            });
        }
        if body == 0 {
            self.next_element();
        } else {
            self.st = St::Skip;
            self.r.take(body as u64, 0);
        }
        Ok(())
    }

    /// A regex's pattern (then its options) or its options (then the next element).
    fn regex_part(&mut self, second: bool, read: bool, v: &mut dyn Visitor) {
        if !second {
            self.st = St::Regex { second: true, read };
            self.r.cstr(0);
        } else {
            if read {
                let parent = self.frames.last().map_or(0, |f| f.ctx);
                v.scalar(parent, &self.key, Scalar::Other(ty::REGEX));
            }
            self.next_element();
        }
    }

    /// A DBPointer's string length: skip the string and the 12-byte id.
    fn db_pointer_str(&mut self) -> Result<(), WireError> {
        let len = self.r.i32();
        let body = i64::from(len) + 12;
        if len < 1 || body as u64 > self.bound() {
            return Err(WireError::Invalid {
                what: "BSON DBPointer",
                why: "bad length",
            });
        }
        self.st = St::Skip;
        self.r.take(body as u64, 0);
        Ok(())
    }

    fn skip_len(&mut self, extra: u64, counts_self: bool) {
        self.st = St::SkipLen { extra, counts_self };
        self.r.fixed(4);
    }

    fn fixed_done(&mut self, v: &mut dyn Visitor) -> Result<(), WireError> {
        if let St::Fixed { read: true, .. } = self.st {
            let s = fixed_scalar(self.ty, self.r.bytes());
            let parent = self.frames.last().map_or(0, |f| f.ctx);
            v.scalar(parent, &self.key, s);
        }
        self.next_element();
        Ok(())
    }

    fn next_element(&mut self) {
        self.st = St::Type;
        self.r.fixed(1);
    }
}

/// Builds BSON documents: for tests and examples.
pub mod build {
    /// A document under construction.
    #[derive(Clone, Debug, Default)]
    pub struct Doc(Vec<u8>);

    impl Doc {
        pub fn new() -> Self {
            Doc(Vec::new())
        }
        /// An element of type `t` whose value is the bytes `v`, as they are.
        pub fn el(mut self, t: u8, key: &str, v: &[u8]) -> Self {
            self.0.push(t);
            self.0.extend_from_slice(key.as_bytes());
            self.0.push(0);
            self.0.extend_from_slice(v);
            self
        }
        pub fn str(self, key: &str, s: &str) -> Self {
            let mut v = ((s.len() + 1) as i32).to_le_bytes().to_vec();
            v.extend_from_slice(s.as_bytes());
            v.push(0);
            self.el(0x02, key, &v)
        }
        pub fn i32(self, key: &str, x: i32) -> Self {
            self.el(0x10, key, &x.to_le_bytes())
        }
        pub fn i64(self, key: &str, x: i64) -> Self {
            self.el(0x12, key, &x.to_le_bytes())
        }
        pub fn f64(self, key: &str, x: f64) -> Self {
            self.el(0x01, key, &x.to_le_bytes())
        }
        pub fn bool(self, key: &str, b: bool) -> Self {
            self.el(0x08, key, &[u8::from(b)])
        }
        pub fn null(self, key: &str) -> Self {
            self.el(0x0A, key, &[])
        }
        pub fn oid(self, key: &str, id: [u8; 12]) -> Self {
            self.el(0x07, key, &id)
        }
        pub fn regex(self, key: &str, pattern: &str, opts: &str) -> Self {
            let mut v = pattern.as_bytes().to_vec();
            v.push(0);
            v.extend_from_slice(opts.as_bytes());
            v.push(0);
            self.el(0x0B, key, &v)
        }
        pub fn bin(self, key: &str, data: &[u8]) -> Self {
            let mut v = (data.len() as i32).to_le_bytes().to_vec();
            v.push(0);
            v.extend_from_slice(data);
            self.el(0x05, key, &v)
        }
        pub fn doc(self, key: &str, d: Doc) -> Self {
            let b = d.bytes();
            self.el(0x03, key, &b)
        }
        /// An array of documents.
        pub fn arr(self, key: &str, items: Vec<Doc>) -> Self {
            let mut a = Doc::new();
            for (i, d) in items.into_iter().enumerate() {
                a = a.doc(&i.to_string(), d);
            }
            self.el(0x04, key, &a.bytes())
        }
        /// An array of int32.
        pub fn arr_i32(self, key: &str, items: &[i32]) -> Self {
            let mut a = Doc::new();
            for (i, x) in items.iter().enumerate() {
                a = a.i32(&i.to_string(), *x);
            }
            self.el(0x04, key, &a.bytes())
        }
        /// An array of int64.
        pub fn arr_i64(self, key: &str, items: &[i64]) -> Self {
            let mut a = Doc::new();
            for (i, x) in items.iter().enumerate() {
                a = a.i64(&i.to_string(), *x);
            }
            self.el(0x04, key, &a.bytes())
        }
        /// An array of strings.
        pub fn arr_str(self, key: &str, items: &[&str]) -> Self {
            let mut a = Doc::new();
            for (i, x) in items.iter().enumerate() {
                a = a.str(&i.to_string(), x);
            }
            self.el(0x04, key, &a.bytes())
        }
        /// The encoded document.
        pub fn bytes(&self) -> Vec<u8> {
            let mut out = ((self.0.len() + 5) as i32).to_le_bytes().to_vec();
            out.extend_from_slice(&self.0);
            out.push(0);
            out
        }
    }
}

/// At the end of the innermost document (`t` is its last byte, which must be the terminator):
/// pops its frame and tells the visitor; whether documents remain open. Shared by the in-place
/// and the streaming walk.
#[inline]
fn close_frame(frames: &mut Vec<Frame>, t: u8, v: &mut dyn Visitor) -> Result<bool, WireError> {
    if t != 0 {
        return Err(WireError::Invalid {
            what: "BSON document",
            why: "no terminator at its end",
        });
    }
    if let Some(f) = frames.pop() {
        v.leave(f.ctx);
    }
    Ok(!frames.is_empty())
}

#[cfg(test)]
#[path = "bson_tests.rs"]
mod tests;
