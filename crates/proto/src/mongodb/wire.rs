//! MongoDB wire framing: the 16-byte little-endian message header, opcodes, the plausibility
//! checks used to recognise a message start (detection, mid-stream pickup, resync), a
//! streaming field reader over untrusted bytes, and the streaming decompressors of
//! OP_COMPRESSED (snappy, zlib, zstd). No state about the conversation lives here.

use std::fmt;

/// Length of the standard message header: messageLength, requestID, responseTo, opCode.
pub const HEADER_LEN: usize = 16;
/// The largest message a server accepts or sends (`maxMessageSizeBytes`, 48 000 000).
pub const MAX_MESSAGE_LEN: u32 = 48_000_000;

/// Opcodes (the `opCode` header field).
pub mod op {
    pub const REPLY: i32 = 1;
    pub const UPDATE: i32 = 2001;
    pub const INSERT: i32 = 2002;
    pub const QUERY: i32 = 2004;
    pub const GET_MORE: i32 = 2005;
    pub const DELETE: i32 = 2006;
    pub const KILL_CURSORS: i32 = 2007;
    pub const COMPRESSED: i32 = 2012;
    pub const MSG: i32 = 2013;
}

/// OP_MSG flag bits.
pub mod msg_flag {
    /// The message ends with a CRC-32C.
    pub const CHECKSUM_PRESENT: u32 = 1;
    /// Requests: no reply is wanted. Replies: another reply to the same request follows.
    pub const MORE_TO_COME: u32 = 1 << 1;
    /// Requests: the client accepts several replies (exhaust).
    pub const EXHAUST_ALLOWED: u32 = 1 << 16;
    /// The bits a request may carry.
    pub const REQUEST_BITS: u32 = CHECKSUM_PRESENT | MORE_TO_COME | EXHAUST_ALLOWED;
    /// The bits a reply may carry.
    pub const REPLY_BITS: u32 = CHECKSUM_PRESENT | MORE_TO_COME;
}

/// OP_REPLY `responseFlags` bits.
pub mod reply_flag {
    pub const CURSOR_NOT_FOUND: i32 = 1;
    pub const QUERY_FAILURE: i32 = 1 << 1;
}

/// OP_COMPRESSED compressor ids.
pub mod compressor {
    pub const NOOP: u8 = 0;
    pub const SNAPPY: u8 = 1;
    pub const ZLIB: u8 = 2;
    pub const ZSTD: u8 = 3;
}

/// The name of an opcode, for messages.
pub fn opcode_name(opcode: i32) -> &'static str {
    match opcode {
        op::REPLY => "OP_REPLY",
        op::UPDATE => "OP_UPDATE",
        op::INSERT => "OP_INSERT",
        op::QUERY => "OP_QUERY",
        op::GET_MORE => "OP_GET_MORE",
        op::DELETE => "OP_DELETE",
        op::KILL_CURSORS => "OP_KILL_CURSORS",
        op::COMPRESSED => "OP_COMPRESSED",
        op::MSG => "OP_MSG",
        _ => "unknown",
    }
}

/// Whether a client may send this opcode.
pub fn is_request_opcode(opcode: i32) -> bool {
    matches!(
        opcode,
        op::MSG
            | op::QUERY
            | op::COMPRESSED
            | op::INSERT
            | op::UPDATE
            | op::DELETE
            | op::GET_MORE
            | op::KILL_CURSORS
    )
}

/// Whether a server may send this opcode.
pub fn is_reply_opcode(opcode: i32) -> bool {
    matches!(opcode, op::MSG | op::REPLY | op::COMPRESSED)
}

/// The shortest body (after the header) a message of this opcode can have, or `None` for an
/// opcode we do not know.
pub fn min_body_len(opcode: i32) -> Option<u32> {
    Some(match opcode {
        // flagBits, one kind-0 section with an empty document.
        op::MSG => 4 + 1 + 5,
        // responseFlags, cursorID, startingFrom, numberReturned.
        op::REPLY => 20,
        // flags, "x.y\0", numberToSkip, numberToReturn, query.
        op::QUERY => 4 + 2 + 8 + 5,
        // flags, cstring.
        op::INSERT => 4 + 2,
        // ZERO, cstring, flags, selector, update.
        op::UPDATE => 4 + 2 + 4 + 10,
        // ZERO, cstring, numberToReturn, cursorID.
        op::GET_MORE => 4 + 2 + 4 + 8,
        // ZERO, cstring, flags, selector.
        op::DELETE => 4 + 2 + 4 + 5,
        // ZERO, numberOfCursorIDs.
        op::KILL_CURSORS => 8,
        // originalOpcode, uncompressedSize, compressorId.
        op::COMPRESSED => 9,
        _ => return None,
    })
}

/// The standard message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Total message size, header included.
    pub len: u32,
    pub request_id: i32,
    pub response_to: i32,
    pub opcode: i32,
}

impl Header {
    pub fn parse(b: &[u8]) -> Option<Header> {
        let mut c = Cursor::new(b);
        Some(Header {
            len: c.u32("messageLength").ok()?,
            request_id: c.i32("requestID").ok()?,
            response_to: c.i32("responseTo").ok()?,
            opcode: c.i32("opCode").ok()?,
        })
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..4].copy_from_slice(&self.len.to_le_bytes());
        out[4..8].copy_from_slice(&self.request_id.to_le_bytes());
        out[8..12].copy_from_slice(&self.response_to.to_le_bytes());
        out[12..].copy_from_slice(&self.opcode.to_le_bytes());
        out
    }

    /// Body length (the message minus its header).
    pub fn body_len(&self) -> u32 {
        self.len.saturating_sub(HEADER_LEN as u32)
    }

    /// Whether the length fits the opcode (known opcodes) or any message (unknown ones).
    pub fn len_ok(&self) -> bool {
        let min = min_body_len(self.opcode).unwrap_or(0) + HEADER_LEN as u32;
        (min..=MAX_MESSAGE_LEN).contains(&self.len)
    }
}

/// The verdict on bytes that may start a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plausible {
    Yes,
    No,
    /// More bytes are needed to judge (at most [`PROBE_LEN`]).
    NeedMore,
}

/// Bytes [`plausible_start`] may need to judge.
pub const PROBE_LEN: usize = HEADER_LEN + 20;

fn le_i32(b: &[u8], at: usize) -> Option<i32> {
    let mut c = Cursor::new(b);
    c.skip(at, "field offset").ok()?;
    c.i32("int32").ok()
}

/// Whether `b` (the bytes from a possible message start) looks like the start of a message
/// the client (`from_client`) or the server sends: a length the opcode allows, a known opcode
/// for that side, `responseTo` 0 for requests and not 0 for replies, and the first body
/// fields sane (OP_MSG flag bits and section kind, OP_QUERY flags, OP_REPLY flags and count,
/// OP_COMPRESSED's wrapped opcode and compressor, the ZERO field of legacy operations).
pub fn plausible_start(b: &[u8], from_client: bool) -> Plausible {
    let Some(h) = Header::parse(b) else {
        return Plausible::NeedMore;
    };
    let side_ok = if from_client {
        is_request_opcode(h.opcode) && h.response_to == 0
    } else {
        is_reply_opcode(h.opcode) && h.response_to != 0
    };
    if !side_ok || !h.len_ok() {
        return Plausible::No;
    }
    let need = |n: usize| -> Option<&[u8]> { b.get(HEADER_LEN..HEADER_LEN + n) };
    let verdict = |ok: bool| if ok { Plausible::Yes } else { Plausible::No };
    match h.opcode {
        op::MSG => {
            let Some(body) = need(5) else {
                return Plausible::NeedMore;
            };
            let flags = le_i32(body, 0).unwrap_or(-1) as u32;
            let allowed = if from_client {
                msg_flag::REQUEST_BITS
            } else {
                msg_flag::REPLY_BITS
            };
            let kind = body.get(4).copied().unwrap_or(0xFF);
            verdict(flags & !allowed == 0 && (kind == 0 || (from_client && kind == 1)))
        }
        op::QUERY => match need(4) {
            None => Plausible::NeedMore,
            // Bits 1..=7 are defined; bit 0 is reserved.
            Some(body) => verdict(le_i32(body, 0).unwrap_or(-1) as u32 & !0xFE == 0),
        },
        op::REPLY => match need(20) {
            None => Plausible::NeedMore,
            Some(body) => {
                let flags = le_i32(body, 0).unwrap_or(-1) as u32;
                let returned = le_i32(body, 16).unwrap_or(-1);
                let max_docs = (h.body_len() - 20) / 5;
                verdict(flags & !0xF == 0 && returned >= 0 && returned as u32 <= max_docs)
            }
        },
        op::COMPRESSED => match need(9) {
            None => Plausible::NeedMore,
            Some(body) => {
                let orig = le_i32(body, 0).unwrap_or(0);
                let size = le_i32(body, 4).unwrap_or(-1);
                let id = body.get(8).copied().unwrap_or(0xFF);
                let orig_ok = if from_client {
                    is_request_opcode(orig)
                } else {
                    is_reply_opcode(orig)
                };
                verdict(
                    orig_ok
                        && orig != op::COMPRESSED
                        && size >= 0
                        && (size as u32) <= MAX_MESSAGE_LEN
                        && id <= compressor::ZSTD,
                )
            }
        },
        // Legacy operations start with ZERO (OP_INSERT: flags, only bit 0 defined).
        op::INSERT => match need(4) {
            None => Plausible::NeedMore,
            Some(body) => verdict(le_i32(body, 0).unwrap_or(-1) as u32 & !1 == 0),
        },
        _ => match need(4) {
            None => Plausible::NeedMore,
            Some(body) => verdict(le_i32(body, 0) == Some(0)),
        },
    }
}

/// Appends a message: header then body.
pub fn put_message(out: &mut Vec<u8>, request_id: i32, response_to: i32, opcode: i32, body: &[u8]) {
    let h = Header {
        len: (HEADER_LEN + body.len()) as u32,
        request_id,
        response_to,
        opcode,
    };
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(body);
}

/// What went wrong reading MongoDB bytes: the kit's one read error.
pub use crate::kit::WireError;

/// The kit's checked reader, little-endian.
pub type Cursor<'a> = crate::kit::Cursor<'a, crate::kit::Le>;

/// Which primitive a [`FieldReader`] is reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Idle,
    /// Exactly `n` bytes (at most 32), all kept.
    Fixed(u8),
    /// A NUL-terminated string; the first `cap` bytes are kept.
    CStr {
        cap: u32,
    },
    /// `n` bytes; the first `cap` are kept.
    Take {
        n: u64,
        cap: u32,
    },
}

/// Reads one primitive field at a time from chunked input: a fixed-size value, a C string or
/// a length-prefixed run of bytes, keeping only a bounded prefix. Never panics on any input.
pub struct FieldReader {
    want: Want,
    buf: Vec<u8>,
    /// Bytes of a C string seen beyond the kept prefix; or bytes left of a `Take`.
    extra: u64,
}

impl Default for FieldReader {
    fn default() -> Self {
        FieldReader {
            want: Want::Idle,
            buf: Vec::new(),
            extra: 0,
        }
    }
}

impl fmt::Debug for FieldReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FieldReader({:?}, {} kept)", self.want, self.buf.len())
    }
}

impl FieldReader {
    /// Starts reading `n` fixed bytes (`n <= 32`).
    pub fn fixed(&mut self, n: u8) {
        self.start(Want::Fixed(n.min(32)));
    }
    /// Starts reading a C string, keeping its first `cap` bytes.
    pub fn cstr(&mut self, cap: u32) {
        self.start(Want::CStr { cap });
    }
    /// Starts reading `n` bytes, keeping the first `cap`.
    pub fn take(&mut self, n: u64, cap: u32) {
        self.start(Want::Take { n, cap });
        self.extra = n;
    }

    fn start(&mut self, w: Want) {
        self.want = w;
        self.buf.clear();
        if self.buf.capacity() > 4096 {
            self.buf = Vec::new();
        }
        self.extra = 0;
    }

    /// Whether a read is in progress.
    pub fn busy(&self) -> bool {
        self.want != Want::Idle
    }

    /// Feeds input; returns bytes consumed and whether the field is complete. A `CStr` is
    /// complete at its NUL (consumed, not kept).
    pub fn push(&mut self, input: &[u8]) -> (usize, bool) {
        match self.want {
            Want::Idle => (0, true),
            Want::Fixed(n) => {
                let k = (usize::from(n) - self.buf.len()).min(input.len());
                self.buf.extend_from_slice(input.get(..k).unwrap_or(&[]));
                let done = self.buf.len() == usize::from(n);
                if done {
                    self.want = Want::Idle;
                }
                (k, done)
            }
            Want::CStr { cap } => match input.iter().position(|&b| b == 0) {
                Some(i) => {
                    self.keep(input.get(..i).unwrap_or(&[]), cap);
                    self.want = Want::Idle;
                    (i + 1, true)
                }
                None => {
                    self.keep(input, cap);
                    (input.len(), false)
                }
            },
            Want::Take { cap, .. } => {
                let k = usize::try_from(self.extra)
                    .unwrap_or(usize::MAX)
                    .min(input.len());
                self.keep(input.get(..k).unwrap_or(&[]), cap);
                self.extra -= k as u64;
                let done = self.extra == 0;
                if done {
                    self.want = Want::Idle;
                }
                (k, done)
            }
        }
    }

    fn keep(&mut self, s: &[u8], cap: u32) {
        let room = (cap as usize).saturating_sub(self.buf.len()).min(s.len());
        self.buf.extend_from_slice(s.get(..room).unwrap_or(&[]));
        if room < s.len() && !matches!(self.want, Want::Take { .. }) {
            self.extra += (s.len() - room) as u64;
        }
    }

    /// The kept bytes of the last completed field.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// For a completed C string: its full length (kept or not), NUL excluded.
    pub fn cstr_len(&self) -> u64 {
        self.buf.len() as u64 + self.extra
    }

    pub fn i32(&self) -> i32 {
        le_i32(&self.buf, 0).unwrap_or(0)
    }

    pub fn i64(&self) -> i64 {
        Cursor::new(&self.buf).i64("int64").unwrap_or(0)
    }

    pub fn f64(&self) -> f64 {
        f64::from_bits(self.i64() as u64)
    }

    /// Takes over the read `other` started (none of its bytes read yet), keeping this
    /// reader's buffer.
    pub fn resume_from(&mut self, other: &FieldReader) {
        self.start(other.want);
        self.extra = other.extra;
    }

    pub fn reset(&mut self) {
        self.want = Want::Idle;
        self.buf.clear();
        self.extra = 0;
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.capacity()
    }
}

/// Output is handed out in pieces of at most this many bytes.
pub const INFLATE_CHUNK: usize = 16 * 1024;
/// Snappy copies may reach back this far: every real encoder (the C++ library and the ports
/// of it in Go, Java and Rust) compresses in independent 64 KiB blocks.
const SNAPPY_WINDOW: usize = 64 * 1024;

/// A streaming decompressor for the body of an OP_COMPRESSED message.
pub enum Inflater {
    Noop,
    Zlib(Box<flate2::Decompress>),
    Zstd(Box<zstd::stream::raw::Decoder<'static>>),
    Snappy(Box<Snappy>),
}

impl fmt::Debug for Inflater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Inflater::Noop => "Noop",
            Inflater::Zlib(_) => "Zlib",
            Inflater::Zstd(_) => "Zstd",
            Inflater::Snappy(_) => "Snappy",
        })
    }
}

impl Inflater {
    /// A decompressor for `compressor_id`, or `None` for an unknown id.
    pub fn new(compressor_id: u8) -> Result<Inflater, WireError> {
        Ok(match compressor_id {
            compressor::NOOP => Inflater::Noop,
            compressor::ZLIB => Inflater::Zlib(Box::new(flate2::Decompress::new(true))),
            compressor::ZSTD => {
                let mut d = zstd::stream::raw::Decoder::new()
                    .map_err(|_| WireError::Decompress("zstd init"))?;
                // A message is at most 48 MB; refuse windows above 8 MiB to bound memory
                // (MongoDB's own compressor stays well below it).
                d.set_parameter(zstd::stream::raw::DParameter::WindowLogMax(23))
                    .map_err(|_| WireError::Decompress("zstd init"))?;
                Inflater::Zstd(Box::new(d))
            }
            compressor::SNAPPY => Inflater::Snappy(Box::default()),
            _ => return Err(WireError::Decompress("unknown compressor id")),
        })
    }

    /// Heap bytes held (approximate for the C decoders).
    pub fn buffered_bytes(&self) -> usize {
        match self {
            Inflater::Noop => 0,
            Inflater::Zlib(_) => 48 * 1024,
            Inflater::Zstd(_) => 160 * 1024,
            Inflater::Snappy(s) => s.history.capacity() + 64,
        }
    }

    /// Decompresses all of `input`, handing the output to `out` in pieces. `last`: this is
    /// the end of the compressed data (the decoder is drained).
    pub fn push(
        &mut self,
        input: &[u8],
        last: bool,
        out: &mut dyn FnMut(&[u8]) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        let mut buf = [0u8; INFLATE_CHUNK];
        match self {
            Inflater::Noop => {
                for c in input.chunks(INFLATE_CHUNK) {
                    out(c)?;
                }
                Ok(())
            }
            Inflater::Zlib(z) => {
                let mut pos = 0usize;
                loop {
                    let rest = input.get(pos..).unwrap_or(&[]);
                    let (i0, o0) = (z.total_in(), z.total_out());
                    let res = z.decompress(rest, &mut buf, flate2::FlushDecompress::None);
                    let used = (z.total_in() - i0) as usize;
                    let made = (z.total_out() - o0) as usize;
                    pos += used;
                    // Hand over what was decoded before any error, so the same damaged stream
                    // gives the same decoded prefix however it was chunked (zlib-rs reports an
                    // error in the same call that produced the output before it).
                    if made > 0 {
                        out(buf.get(..made).unwrap_or(&[]))?;
                    }
                    let st = res.map_err(|_| WireError::Decompress("bad zlib data"))?;
                    if st == flate2::Status::StreamEnd {
                        return if pos < input.len() {
                            Err(WireError::Decompress("bytes after the zlib stream"))
                        } else {
                            Ok(())
                        };
                    }
                    if used == 0 && made == 0 {
                        if last {
                            return Err(WireError::Decompress("zlib stream cut short"));
                        }
                        return Ok(());
                    }
                }
            }
            Inflater::Zstd(z) => {
                use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
                let mut src = InBuffer::around(input);
                loop {
                    let mut dst = OutBuffer::around(&mut buf[..]);
                    let res = z.run(&mut src, &mut dst);
                    let made = dst.pos();
                    // As for zlib: what was decoded before an error is handed over first.
                    if made > 0 {
                        out(buf.get(..made).unwrap_or(&[]))?;
                    }
                    let hint = res.map_err(|_| WireError::Decompress("bad zstd data"))?;
                    if src.pos() >= input.len() && made < INFLATE_CHUNK {
                        if last && hint != 0 {
                            return Err(WireError::Decompress("zstd frame cut short"));
                        }
                        return Ok(());
                    }
                }
            }
            Inflater::Snappy(s) => {
                s.push(input, out)?;
                if last && !s.at_end() {
                    return Err(WireError::Decompress("snappy data cut short"));
                }
                Ok(())
            }
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SnapState {
    /// Reading the varint preamble (uncompressed length).
    #[default]
    Preamble,
    Tag,
    /// Reading `need` extra bytes after the tag into `arg`.
    Extra,
    /// Copying `left` literal bytes.
    Literal,
}

/// A streaming decoder of the raw snappy block format with a 64 KiB history.
#[derive(Debug, Default)]
pub struct Snappy {
    state: SnapState,
    /// Uncompressed length announced by the preamble.
    total: u64,
    produced: u64,
    shift: u32,
    tag: u8,
    need: u8,
    got: u8,
    arg: u32,
    left: u64,
    /// The last output: at least the last 64 KiB once that much was produced.
    history: Vec<u8>,
}

impl Snappy {
    fn at_end(&self) -> bool {
        self.state == SnapState::Tag && self.produced == self.total
    }

    /// Keeps the history bounded: the last 64 KiB is all a copy may reach.
    fn trim(&mut self) {
        if self.history.len() >= 2 * SNAPPY_WINDOW {
            let cut = self.history.len() - SNAPPY_WINDOW;
            self.history.drain(..cut);
        }
    }

    fn push(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        let mut pos = 0usize;
        while pos < input.len() {
            let b = input.get(pos).copied().unwrap_or(0);
            match self.state {
                SnapState::Preamble => {
                    pos += 1;
                    if self.shift > 28 {
                        return Err(WireError::Decompress("snappy length varint too long"));
                    }
                    self.total |= u64::from(b & 0x7F) << self.shift;
                    self.shift += 7;
                    if b & 0x80 == 0 {
                        if self.total > u64::from(MAX_MESSAGE_LEN) {
                            return Err(WireError::Decompress("snappy length too large"));
                        }
                        self.state = SnapState::Tag;
                    }
                }
                SnapState::Tag => {
                    pos += 1;
                    self.tag = b;
                    self.arg = 0;
                    self.got = 0;
                    self.need = match b & 3 {
                        0 => match b >> 2 {
                            60 => 1,
                            61 => 2,
                            62 => 3,
                            63 => 4,
                            _ => 0,
                        },
                        1 => 1,
                        2 => 2,
                        _ => 4,
                    };
                    if self.need == 0 {
                        self.tag_done(out)?;
                    } else {
                        self.state = SnapState::Extra;
                    }
                }
                SnapState::Extra => {
                    pos += 1;
                    self.arg |= u32::from(b) << (8 * u32::from(self.got));
                    self.got += 1;
                    if self.got == self.need {
                        self.tag_done(out)?;
                    }
                }
                SnapState::Literal => {
                    let k = usize::try_from(self.left)
                        .unwrap_or(usize::MAX)
                        .min(input.len() - pos);
                    let lit = input.get(pos..pos + k).unwrap_or(&[]);
                    self.produced += k as u64;
                    if self.produced > self.total {
                        return Err(WireError::Decompress("snappy output longer than announced"));
                    }
                    out(lit)?;
                    self.history.extend_from_slice(lit);
                    self.trim();
                    pos += k;
                    self.left -= k as u64;
                    if self.left == 0 {
                        self.state = SnapState::Tag;
                    }
                }
            }
        }
        Ok(())
    }

    fn tag_done(
        &mut self,
        out: &mut dyn FnMut(&[u8]) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        let t = self.tag;
        let (len, offset) = match t & 3 {
            0 => {
                let len = if t >> 2 < 60 {
                    u64::from(t >> 2) + 1
                } else {
                    u64::from(self.arg) + 1
                };
                self.left = len;
                self.state = SnapState::Literal;
                return Ok(());
            }
            1 => (
                4 + usize::from((t >> 2) & 7),
                (usize::from(t >> 5) << 8) | self.arg as usize,
            ),
            _ => (usize::from(t >> 2) + 1, self.arg as usize),
        };
        self.state = SnapState::Tag;
        if offset == 0 || offset > self.history.len() {
            return Err(WireError::Decompress("snappy copy before the start"));
        }
        self.produced += len as u64;
        if self.produced > self.total {
            return Err(WireError::Decompress("snappy output longer than announced"));
        }
        // Byte by byte: a copy may overlap its own output (runs).
        let start = self.history.len();
        for i in 0..len {
            let b = self.history.get(start + i - offset).copied().unwrap_or(0);
            self.history.push(b);
        }
        out(self.history.get(start..).unwrap_or(&[]))?;
        self.trim();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: u32, rid: i32, rto: i32, opcode: i32) -> Vec<u8> {
        Header {
            len,
            request_id: rid,
            response_to: rto,
            opcode,
        }
        .encode()
        .to_vec()
    }

    #[test]
    fn header_roundtrip_and_lengths() {
        let h = Header::parse(&header(30, 7, 0, op::MSG)).unwrap();
        assert_eq!(
            (h.len, h.request_id, h.response_to, h.opcode),
            (30, 7, 0, op::MSG)
        );
        assert_eq!(h.body_len(), 14);
        assert!(h.len_ok());
        assert!(
            !Header { len: 25, ..h }.len_ok(),
            "shorter than the smallest OP_MSG"
        );
        assert!(
            !Header {
                len: MAX_MESSAGE_LEN + 1,
                ..h
            }
            .len_ok()
        );
        assert!(
            Header {
                len: 16,
                opcode: 9999,
                ..h
            }
            .len_ok(),
            "unknown opcodes: any sane length"
        );
        assert_eq!(Header::parse(&[0; 15]), None);
        assert_eq!(opcode_name(op::KILL_CURSORS), "OP_KILL_CURSORS");
        assert_eq!(opcode_name(42), "unknown");
    }

    #[test]
    fn plausibility() {
        let mut m = header(31, 5, 0, op::MSG);
        m.extend([0, 0, 0, 0, 0, 5, 0, 0, 0, 0]);
        assert_eq!(plausible_start(&m, true), Plausible::Yes);
        assert_eq!(plausible_start(&m[..18], true), Plausible::NeedMore);
        assert_eq!(
            plausible_start(&m, false),
            Plausible::No,
            "responseTo 0 is no reply"
        );
        // Unknown flag bit, section kind 2.
        let mut bad = m.clone();
        bad[16] = 4;
        assert_eq!(plausible_start(&bad, true), Plausible::No);
        let mut bad = m.clone();
        bad[20] = 2;
        assert_eq!(plausible_start(&bad, true), Plausible::No);
        // A reply to request 5.
        let mut r = header(31, 9, 5, op::MSG);
        r.extend([2, 0, 0, 0, 0]);
        assert_eq!(plausible_start(&r, false), Plausible::Yes);
        r[16] = 0;
        r[18] = 1; // exhaustAllowed is a request bit
        assert_eq!(plausible_start(&r, false), Plausible::No);
        // OP_REPLY with more documents than bytes.
        let mut r = header(36 + 5, 9, 5, op::REPLY);
        r.extend([0; 16]);
        r.extend(2i32.to_le_bytes());
        assert_eq!(plausible_start(&r, false), Plausible::No);
        // Legacy OP_GET_MORE starts with ZERO.
        let mut g = header(40, 3, 0, op::GET_MORE);
        g.extend([0, 0, 0, 0]);
        assert_eq!(plausible_start(&g, true), Plausible::Yes);
        g[16] = 1;
        assert_eq!(plausible_start(&g, true), Plausible::No);
        // OP_COMPRESSED wrapping OP_MSG with zstd; an unknown compressor is refused.
        let mut c = header(40, 3, 0, op::COMPRESSED);
        c.extend(op::MSG.to_le_bytes());
        c.extend(100i32.to_le_bytes());
        c.push(3);
        assert_eq!(plausible_start(&c, true), Plausible::Yes);
        c[24] = 4;
        assert_eq!(plausible_start(&c, true), Plausible::No);
        assert_eq!(
            plausible_start(b"GET / HTTP/1.1\r\n\r\n", true),
            Plausible::No
        );
    }

    #[test]
    fn field_reader_in_pieces() {
        let mut r = FieldReader::default();
        r.fixed(4);
        assert_eq!(r.push(&[1, 0]), (2, false));
        assert_eq!(r.push(&[0, 0, 9]), (2, true));
        assert_eq!(r.i32(), 1);
        r.cstr(3);
        assert_eq!(r.push(b"abcd"), (4, false));
        assert_eq!(r.push(b"e\0x"), (2, true));
        assert_eq!((r.bytes(), r.cstr_len()), (&b"abc"[..], 5));
        r.take(5, 2);
        assert_eq!(r.push(b"xyz"), (3, false));
        assert_eq!(r.push(b"uvw"), (2, true));
        assert_eq!(r.bytes(), b"xy");
        assert!(!r.busy());
    }

    fn inflate_all(id: u8, data: &[u8], piece: usize) -> Result<Vec<u8>, WireError> {
        let mut inf = Inflater::new(id)?;
        let mut out = Vec::new();
        let chunks: Vec<&[u8]> = data.chunks(piece.max(1)).collect();
        for (i, c) in chunks.iter().enumerate() {
            inf.push(c, i + 1 == chunks.len(), &mut |b| {
                out.extend_from_slice(b);
                Ok(())
            })?;
        }
        if chunks.is_empty() {
            inf.push(&[], true, &mut |b| {
                out.extend_from_slice(b);
                Ok(())
            })?;
        }
        Ok(out)
    }

    fn sample(n: usize) -> Vec<u8> {
        // Compressible but not trivial: repeated phrases with a counter.
        let mut v = Vec::new();
        let mut i = 0u32;
        while v.len() < n {
            v.extend_from_slice(
                format!("{{\"name\":\"user{}\",\"age\":{}}}", i % 97, i % 13).as_bytes(),
            );
            i = i.wrapping_mul(31).wrapping_add(7) % 100_000;
        }
        v.truncate(n);
        v
    }

    #[test]
    fn snappy_zlib_zstd_in_any_pieces() {
        use std::io::Write as _;
        for n in [0usize, 1, 100, 70_000, 300_000] {
            let data = sample(n);
            let snappy = snap::raw::Encoder::new().compress_vec(&data).unwrap();
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(&data).unwrap();
            let zlib = z.finish().unwrap();
            let zstd = zstd::bulk::compress(&data, 3).unwrap();
            for piece in [1usize, 7, 4096, 1 << 20] {
                if n > 100_000 && piece == 1 {
                    continue;
                }
                assert_eq!(
                    inflate_all(compressor::SNAPPY, &snappy, piece).unwrap(),
                    data
                );
                assert_eq!(inflate_all(compressor::ZLIB, &zlib, piece).unwrap(), data);
                assert_eq!(inflate_all(compressor::ZSTD, &zstd, piece).unwrap(), data);
                assert_eq!(inflate_all(compressor::NOOP, &data, piece).unwrap(), data);
            }
        }
    }

    #[test]
    fn bad_compressed_data_is_an_error() {
        assert!(Inflater::new(9).is_err());
        assert!(inflate_all(compressor::ZLIB, b"not zlib at all", 4).is_err());
        assert!(inflate_all(compressor::ZSTD, b"not zstd at all", 4).is_err());
        // A copy reaching before the start of the output.
        assert!(inflate_all(compressor::SNAPPY, &[10, 0b0000_0101, 9], 1).is_err());
        // Cut short.
        let data = sample(5000);
        let s = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert!(inflate_all(compressor::SNAPPY, &s[..s.len() / 2], 64).is_err());
        let z = zstd::bulk::compress(&data, 3).unwrap();
        assert!(inflate_all(compressor::ZSTD, &z[..z.len() / 2], 64).is_err());
    }
}
