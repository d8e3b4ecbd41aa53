//! MySQL wire framing: the 4-byte packet header, 16 MB continuation packets, the compressed
//! protocol (7-byte header, zlib or zstd, streamed), and the length-encoded integers and
//! strings every message is made of (read through the kit's checked cursor). No state about the
//! conversation lives here.

use std::fmt;

use crate::kit;

/// Length of a packet header: 3 bytes payload length, 1 byte sequence id.
pub const HEADER_LEN: usize = 4;
/// The largest payload one packet carries; a packet this long is continued by the next one.
pub const MAX_PACKET_PAYLOAD: u32 = 0x00FF_FFFF;
/// Length of a compressed-protocol frame header.
pub const COMPRESSED_HEADER_LEN: usize = 7;

pub use crate::kit::WireError;

/// The kit's checked reader, little-endian as MySQL is.
pub type Cursor<'a> = kit::Cursor<'a, kit::Le>;

type Res<T> = Result<T, WireError>;

/// MySQL's length-encoded integers and strings, read through the kit's [`Cursor`].
pub trait LenencRead<'a> {
    /// A length-encoded integer. `0xFB` (NULL in rows) and `0xFF` are errors here.
    fn lenenc(&mut self, what: &'static str) -> Res<u64>;
    /// A length-encoded string.
    fn lenenc_bytes(&mut self, what: &'static str) -> Res<&'a [u8]>;
}

impl<'a> LenencRead<'a> for Cursor<'a> {
    fn lenenc(&mut self, what: &'static str) -> Res<u64> {
        let at = self.pos();
        match self.u8(what)? {
            b @ 0..=0xFA => Ok(u64::from(b)),
            0xFC => self.u16(what).map(u64::from),
            0xFD => self.u24(what).map(u64::from),
            0xFE => self.u64(what),
            byte => Err(WireError::BadByte { what, at, byte }),
        }
    }
    fn lenenc_bytes(&mut self, what: &'static str) -> Res<&'a [u8]> {
        let at = self.pos();
        let n = self.lenenc(what)?;
        let n = usize::try_from(n).map_err(|_| WireError::Short {
            what,
            at,
            need: usize::MAX,
            have: self.remaining(),
        })?;
        self.bytes(n, what)
    }
}

/// The size in bytes of the length-encoded integer whose first byte is `first`.
pub fn lenenc_size(first: u8) -> usize {
    match first {
        0xFC => 3,
        0xFD => 4,
        0xFE => 9,
        _ => 1,
    }
}

/// Appends `v` as a length-encoded integer.
pub fn put_lenenc(out: &mut Vec<u8>, v: u64) {
    if v < 0xFB {
        out.push(v as u8);
    } else if v <= 0xFFFF {
        out.push(0xFC);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= 0xFF_FFFF {
        out.push(0xFD);
        out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
    } else {
        out.push(0xFE);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A packet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeader {
    pub len: u32,
    pub seq: u8,
}

impl PacketHeader {
    pub fn parse(b: &[u8]) -> Option<Self> {
        match b {
            [a, b, c, seq, ..] => Some(PacketHeader {
                len: u32::from_le_bytes([*a, *b, *c, 0]),
                seq: *seq,
            }),
            _ => None,
        }
    }
    pub fn encode(self) -> [u8; 4] {
        let l = self.len.to_le_bytes();
        [l[0], l[1], l[2], self.seq]
    }
}

/// Writes `payload` as one logical message starting at sequence id `seq`, split into 16 MB
/// packets (with the empty trailing packet when the length is a multiple of 0xFFFFFF).
/// Returns the next sequence id.
pub fn write_packets(out: &mut Vec<u8>, mut seq: u8, payload: &[u8]) -> u8 {
    let max = MAX_PACKET_PAYLOAD as usize;
    let mut rest = payload;
    loop {
        let n = rest.len().min(max);
        out.extend_from_slice(&PacketHeader { len: n as u32, seq }.encode());
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        seq = seq.wrapping_add(1);
        if n < max {
            return seq;
        }
    }
}

/// A compressed-protocol frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressedHeader {
    /// Length of the (compressed) payload that follows on the wire.
    pub compressed_len: u32,
    pub seq: u8,
    /// Length after decompression; 0 means the payload is stored raw.
    pub uncompressed_len: u32,
}

impl CompressedHeader {
    pub fn parse(b: &[u8]) -> Option<Self> {
        match b {
            [a, b, c, seq, d, e, f, ..] => Some(CompressedHeader {
                compressed_len: u32::from_le_bytes([*a, *b, *c, 0]),
                seq: *seq,
                uncompressed_len: u32::from_le_bytes([*d, *e, *f, 0]),
            }),
            _ => None,
        }
    }
    pub fn encode(self) -> [u8; 7] {
        let c = self.compressed_len.to_le_bytes();
        let u = self.uncompressed_len.to_le_bytes();
        [c[0], c[1], c[2], self.seq, u[0], u[1], u[2]]
    }
}

/// The compression algorithm of one frame, recognised by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Zlib,
    Zstd,
}

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

impl Codec {
    /// Recognises a zlib header (RFC 1950: deflate, window <= 32K, check bits) or the zstd
    /// frame magic. `None` when the bytes are neither (or too few to tell).
    pub fn sniff(b: &[u8]) -> Option<Codec> {
        if let [cmf, flg, ..] = b
            && cmf & 0x0F == 8
            && cmf >> 4 <= 7
            && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
            && flg & 0x20 == 0
        {
            return Some(Codec::Zlib);
        }
        if b.get(..4) == Some(&ZSTD_MAGIC[..]) {
            return Some(Codec::Zstd);
        }
        None
    }
}

/// One logical message (one or more packets joined by 16 MB continuation).
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    /// Sequence id of its first packet.
    pub seq: u8,
    /// Number of packets it took.
    pub packets: u32,
    /// Total payload length.
    pub len: u64,
    /// The first bytes of the payload: at least `min(len, keep)` where `keep` is what the
    /// caller's policy asked for when the message began (exactly that many: the framing never
    /// hands out more, so parsing cannot depend on how the bytes were chunked).
    pub head: &'a [u8],
    /// When the payload was longer than `head` and the caller kept at least [`TAIL_KEEP_MIN`]
    /// bytes of it: its last bytes (at most [`TAIL_KEEP`]) after `head`, so statement text can
    /// be kept whole at both ends with only its middle dropped. Empty otherwise.
    pub tail: &'a [u8],
    /// Timestamp of the bytes that carried the first header byte.
    pub start_ts: u64,
    /// Payload bytes lost in capture gaps inside the message (its framing held): `head`
    /// stops at the first of them and `tail` holds only bytes after the last.
    pub lost: u64,
}

/// How many of the last payload bytes are kept of a message whose middle is dropped.
pub const TAIL_KEEP: usize = 64 * 1024;
/// Messages whose `keep` is below this (rows, responses) keep no tail: only statement text
/// needs it.
pub const TAIL_KEEP_MIN: usize = 1024 * 1024;

/// Joins packets into logical messages, streaming: payload bytes beyond the caller's `keep`
/// limit are counted and dropped, never buffered.
#[derive(Debug, Default)]
pub struct Assembler {
    hdr: [u8; 4],
    hdr_have: usize,
    active: bool,
    pkt_left: u32,
    more: bool,
    keep: usize,
    keep_set: bool,
    head: Vec<u8>,
    /// The last payload bytes past `head` (see [`Message::tail`]).
    tail: std::collections::VecDeque<u8>,
    len: u64,
    packets: u32,
    seq: u8,
    first_len: u32,
    start_ts: u64,
    consumed: u64,
    /// Payload bytes of the message in progress lost in gaps (see [`Message::lost`]).
    lost: u64,
}

impl Assembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of the message in progress consumed so far (header bytes included).
    pub fn partial_bytes(&self) -> u64 {
        if self.active {
            self.consumed
        } else {
            self.hdr_have as u64
        }
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.head.capacity() + self.tail.capacity()
    }

    /// The header of the first packet of the message in progress, once read.
    pub fn header(&self) -> Option<PacketHeader> {
        if self.active {
            Some(PacketHeader {
                len: self.first_len,
                seq: self.seq,
            })
        } else {
            None
        }
    }

    /// True between messages.
    pub fn is_idle(&self) -> bool {
        !self.active && self.hdr_have == 0
    }

    /// Between messages, frees the buffers of a large message already handed out (so a
    /// connection that sent one huge statement does not hold its memory until its next one).
    pub fn release_large(&mut self) {
        if !self.active && self.head.capacity() > 256 * 1024 {
            self.head = Vec::new();
            self.tail = Default::default();
        }
    }

    /// Drops the message in progress; returns the bytes it had consumed.
    pub fn reset(&mut self) -> u64 {
        let n = self.partial_bytes();
        self.hdr_have = 0;
        self.active = false;
        self.head.clear();
        if self.head.capacity() > 64 * 1024 {
            self.head = Vec::new();
        }
        self.tail = Default::default();
        n
    }

    /// Starts a message whose first packet header is `h`.
    fn begin(&mut self, h: PacketHeader) {
        self.active = true;
        self.seq = h.seq;
        self.first_len = h.len;
        self.len = 0;
        self.packets = 0;
        self.consumed = 0;
        self.lost = 0;
        self.keep_set = false;
        self.keep = 0;
        self.head.clear();
        if self.head.capacity() > 256 * 1024 {
            // Do not hold on to the memory of one huge message.
            self.head = Vec::new();
        }
        self.tail = Default::default();
    }

    /// Keeps what the caller wants of a piece of payload: the head up to `keep`, and for
    /// statement text the last bytes in the tail.
    fn keep_payload(&mut self, chunk: &[u8], keep: &dyn Fn(u8, u64) -> usize) {
        if !self.keep_set
            && let Some(&b) = chunk.first()
        {
            self.keep_set = true;
            // The payload length is known when the first packet is not a full one.
            let len = if self.first_len < MAX_PACKET_PAYLOAD {
                u64::from(self.first_len)
            } else {
                u64::MAX
            };
            self.keep = keep(b, len);
        }
        let n = chunk.len();
        // After a gap the head is frozen: it holds only bytes before the first loss.
        let room = if self.lost > 0 {
            0
        } else {
            self.keep.saturating_sub(self.head.len()).min(n)
        };
        self.head.extend_from_slice(&chunk[..room]);
        if self.keep >= TAIL_KEEP_MIN && room < n {
            let rest = &chunk[room..];
            let rest = &rest[rest.len().saturating_sub(TAIL_KEEP)..];
            let over = (self.tail.len() + rest.len()).saturating_sub(TAIL_KEEP);
            self.tail.drain(..over.min(self.tail.len()));
            self.tail.extend(rest);
        }
    }

    /// Consumes bytes from `input` until one message is complete. Returns how many bytes were
    /// consumed and the message, if one completed. `keep(first_payload_byte, payload_len)` says
    /// how many payload bytes of a new message to keep (`payload_len` is `u64::MAX` when the
    /// message spans several packets, so its length is not known yet).
    pub fn push<'a>(
        &'a mut self,
        input: &'a [u8],
        ts: u64,
        keep: &dyn Fn(u8, u64) -> usize,
    ) -> (usize, Option<Message<'a>>) {
        // Fast path: a whole single-packet message in the input, nothing buffered.
        if !self.active
            && self.hdr_have == 0
            && let Some((n, msg)) = whole_packet(input, ts, keep)
        {
            return (n, Some(msg));
        }
        let mut pos = 0usize;
        while pos < input.len() {
            if self.hdr_have < HEADER_LEN {
                if !self.active && self.hdr_have == 0 {
                    self.start_ts = ts;
                }
                let n = (HEADER_LEN - self.hdr_have).min(input.len() - pos);
                self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&input[pos..pos + n]);
                self.hdr_have += n;
                pos += n;
                if self.hdr_have < HEADER_LEN {
                    break;
                }
                let h = PacketHeader::parse(&self.hdr).unwrap_or(PacketHeader { len: 0, seq: 0 });
                if !self.active {
                    self.begin(h);
                }
                self.packets += 1;
                self.consumed += HEADER_LEN as u64;
                self.pkt_left = h.len;
                self.more = h.len == MAX_PACKET_PAYLOAD;
            }
            if self.pkt_left > 0 && pos < input.len() {
                let n = (self.pkt_left as usize).min(input.len() - pos);
                let chunk = &input[pos..pos + n];
                self.keep_payload(chunk, keep);
                self.len += n as u64;
                self.consumed += n as u64;
                self.pkt_left -= n as u32;
                pos += n;
            }
            if self.pkt_left == 0 {
                // Packet done: either the message continues with another header, or it ends.
                self.hdr_have = 0;
                if !self.more {
                    return (pos, Some(self.finish()));
                }
            }
        }
        (pos, None)
    }

    /// The message whose last payload byte was just consumed.
    fn finish(&mut self) -> Message<'_> {
        self.active = false;
        Message {
            seq: self.seq,
            packets: self.packets,
            len: self.len,
            head: &self.head,
            tail: self.tail.make_contiguous(),
            start_ts: self.start_ts,
            lost: self.lost,
        }
    }

    /// `n` bytes were lost in a capture gap. When they fall inside the payload of the packet
    /// in progress after its message's first payload byte (the command or response type was
    /// seen), they are skipped and the framing holds: returns `Some` with the message if the
    /// gap ended it. Otherwise (between packets, in a header, before the first payload byte,
    /// or longer than what the packet has left) nothing changes and `None` is returned.
    pub fn skip(&mut self, n: u64) -> Option<Option<Message<'_>>> {
        let inside = self.active
            && self.hdr_have == HEADER_LEN
            && self.keep_set
            && n <= u64::from(self.pkt_left);
        if !inside {
            return None;
        }
        // `n` fits in the packet's u32 length.
        self.pkt_left -= n as u32;
        self.len += n;
        self.consumed += n;
        self.lost += n;
        // The tail holds only bytes after the last loss.
        self.tail.clear();
        if self.pkt_left > 0 {
            return Some(None);
        }
        self.hdr_have = 0;
        if self.more {
            return Some(None);
        }
        Some(Some(self.finish()))
    }
}

/// A whole single-packet message at the start of `input`, read in place (the fast path when
/// nothing is buffered): the bytes it takes and the message.
fn whole_packet<'a>(
    input: &'a [u8],
    ts: u64,
    keep: &dyn Fn(u8, u64) -> usize,
) -> Option<(usize, Message<'a>)> {
    let h = PacketHeader::parse(input)?;
    if h.len >= MAX_PACKET_PAYLOAD {
        return None;
    }
    let payload = input.get(HEADER_LEN..HEADER_LEN + h.len as usize)?;
    let want = payload.first().map_or(0, |&b| keep(b, u64::from(h.len)));
    let k = want.min(payload.len());
    let tail = if want >= TAIL_KEEP_MIN && payload.len() > k {
        payload
            .get(k.max(payload.len().saturating_sub(TAIL_KEEP))..)
            .unwrap_or(&[])
    } else {
        &[]
    };
    let msg = Message {
        seq: h.seq,
        packets: 1,
        len: u64::from(h.len),
        head: payload.get(..k).unwrap_or(&[]),
        tail,
        start_ts: ts,
        lost: 0,
    };
    Some((HEADER_LEN + h.len as usize, msg))
}

/// What one [`Deframer::push`] step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeframeStep {
    /// Input bytes consumed.
    pub consumed: usize,
    /// A frame header was completed in this step.
    pub header: Option<CompressedHeader>,
    /// The frame in progress ended in this step.
    pub frame_done: bool,
}

/// Output produced per step at most, so decompression never needs a large buffer.
pub const DEFRAME_CHUNK: usize = 32 * 1024;

/// Streams compressed-protocol frames: headers are parsed, payloads are decompressed as they
/// arrive (zlib or zstd, recognised per frame) or passed through when stored raw.
pub struct Deframer {
    hdr: [u8; COMPRESSED_HEADER_LEN],
    hdr_have: usize,
    in_frame: bool,
    cur: CompressedHeader,
    left: u32,
    produced: u64,
    sniff: [u8; 4],
    sniff_have: usize,
    codec: Option<Codec>,
    zlib: Option<Box<flate2::Decompress>>,
    zstd: Option<Box<zstd::stream::raw::Decoder<'static>>>,
    consumed_in_frame: u64,
}

impl fmt::Debug for Deframer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deframer")
            .field("in_frame", &self.in_frame)
            .field("cur", &self.cur)
            .field("left", &self.left)
            .field("codec", &self.codec)
            .finish()
    }
}

impl Default for Deframer {
    fn default() -> Self {
        Self::new()
    }
}

impl Deframer {
    pub fn new() -> Self {
        Deframer {
            hdr: [0; COMPRESSED_HEADER_LEN],
            hdr_have: 0,
            in_frame: false,
            cur: CompressedHeader {
                compressed_len: 0,
                seq: 0,
                uncompressed_len: 0,
            },
            left: 0,
            produced: 0,
            sniff: [0; 4],
            sniff_have: 0,
            codec: None,
            zlib: None,
            zstd: None,
            consumed_in_frame: 0,
        }
    }

    /// Drops the frame in progress; returns the bytes of it consumed so far.
    pub fn reset(&mut self) -> u64 {
        let n = if self.in_frame {
            self.consumed_in_frame
        } else {
            self.hdr_have as u64
        };
        self.hdr_have = 0;
        self.in_frame = false;
        self.left = 0;
        self.sniff_have = 0;
        self.codec = None;
        self.consumed_in_frame = 0;
        n
    }

    /// True between frames.
    pub fn is_idle(&self) -> bool {
        !self.in_frame && self.hdr_have == 0
    }

    /// Consumes some of `input`, appending decompressed bytes to `out` (at most about
    /// [`DEFRAME_CHUNK`] per call). Call again while input remains. On error the frame is
    /// unusable: the caller resets and resynchronizes.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<DeframeStep, WireError> {
        let mut step = DeframeStep::default();
        let mut pos = 0usize;
        if !self.in_frame {
            let n = (COMPRESSED_HEADER_LEN - self.hdr_have).min(input.len());
            self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&input[..n]);
            self.hdr_have += n;
            pos += n;
            step.consumed = pos;
            if self.hdr_have < COMPRESSED_HEADER_LEN {
                return Ok(step);
            }
            let h =
                CompressedHeader::parse(&self.hdr).ok_or(WireError::Decompress("short header"))?;
            self.hdr_have = 0;
            self.in_frame = true;
            self.cur = h;
            self.left = h.compressed_len;
            self.produced = 0;
            self.sniff_have = 0;
            self.codec = None;
            self.consumed_in_frame = COMPRESSED_HEADER_LEN as u64;
            step.header = Some(h);
            if h.uncompressed_len > MAX_PACKET_PAYLOAD {
                return Err(WireError::Decompress("uncompressed length too large"));
            }
            if h.compressed_len == 0 {
                if h.uncompressed_len != 0 {
                    return Err(WireError::Decompress("empty payload with a length"));
                }
                self.in_frame = false;
                step.frame_done = true;
                return Ok(step);
            }
            if pos == input.len() {
                return Ok(step);
            }
        }
        let take = (self.left as usize).min(input.len() - pos);
        let chunk = &input[pos..pos + take];
        let used = if self.cur.uncompressed_len == 0 {
            out.extend_from_slice(chunk);
            chunk.len()
        } else {
            self.inflate(chunk, out)?
        };
        pos += used;
        self.left -= used as u32;
        self.consumed_in_frame += used as u64;
        step.consumed = pos;
        if self.left == 0 && self.cur.uncompressed_len != 0 {
            // Drain what the decoder still holds.
            if out.len() < DEFRAME_CHUNK {
                self.inflate(&[], out)?;
            }
            if out.len() >= DEFRAME_CHUNK {
                // More output may remain; the caller calls again with the rest of its input
                // (possibly empty, which `finish_pending` handles).
                return Ok(step);
            }
            if self.produced != u64::from(self.cur.uncompressed_len) {
                self.in_frame = false;
                return Err(WireError::Decompress("uncompressed length mismatch"));
            }
        }
        if self.left == 0 {
            self.in_frame = false;
            step.frame_done = true;
        }
        Ok(step)
    }

    /// Compressed bytes of the current frame not consumed yet (0 between frames).
    pub fn frame_left(&self) -> u32 {
        if self.in_frame { self.left } else { 0 }
    }

    /// True when a frame's input is all consumed but decompressed output is still held.
    pub fn has_pending_output(&self) -> bool {
        self.in_frame && self.left == 0
    }

    fn inflate(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, WireError> {
        let mut used = 0usize;
        if self.codec.is_none() {
            let n = (4 - self.sniff_have).min(input.len());
            self.sniff[self.sniff_have..self.sniff_have + n].copy_from_slice(&input[..n]);
            self.sniff_have += n;
            used += n;
            let enough =
                self.sniff_have == 4 || self.cur.compressed_len as usize == self.sniff_have;
            if !enough {
                return Ok(used);
            }
            let codec = Codec::sniff(&self.sniff[..self.sniff_have])
                .ok_or(WireError::Decompress("neither zlib nor zstd"))?;
            self.codec = Some(codec);
            match codec {
                Codec::Zlib => match &mut self.zlib {
                    Some(z) => z.reset(true),
                    None => self.zlib = Some(Box::new(flate2::Decompress::new(true))),
                },
                Codec::Zstd => match &mut self.zstd {
                    Some(z) => {
                        use zstd::stream::raw::Operation;
                        z.reinit()
                            .map_err(|_| WireError::Decompress("zstd reset"))?;
                    }
                    None => {
                        let mut d = zstd::stream::raw::Decoder::new()
                            .map_err(|_| WireError::Decompress("zstd init"))?;
                        // Frames carry at most 16 MB: refuse larger windows.
                        d.set_parameter(zstd::stream::raw::DParameter::WindowLogMax(24))
                            .map_err(|_| WireError::Decompress("zstd init"))?;
                        self.zstd = Some(Box::new(d));
                    }
                },
            }
            let sniffed = self.sniff;
            let k = self.sniff_have;
            self.run_codec(&sniffed[..k], out, true)?;
        }
        let rest = &input[used..];
        let n = self.run_codec(rest, out, false)?;
        Ok(used + n)
    }

    /// Feeds `input` to the decoder until it is all consumed or the output chunk is full.
    /// `all` forces consuming everything (the few sniffed bytes).
    fn run_codec(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        all: bool,
    ) -> Result<usize, WireError> {
        let limit = u64::from(self.cur.uncompressed_len);
        let mut buf = [0u8; 8192];
        let mut pos = 0usize;
        loop {
            if !all && out.len() >= DEFRAME_CHUNK {
                break;
            }
            let (read, written) = match self.codec {
                Some(Codec::Zlib) => {
                    let z = self
                        .zlib
                        .as_mut()
                        .ok_or(WireError::Decompress("no decoder"))?;
                    let (i0, o0) = (z.total_in(), z.total_out());
                    let r = z.decompress(&input[pos..], &mut buf, flate2::FlushDecompress::None);
                    if r.is_err() {
                        return Err(WireError::Decompress("zlib data error"));
                    }
                    ((z.total_in() - i0) as usize, (z.total_out() - o0) as usize)
                }
                Some(Codec::Zstd) => {
                    use zstd::stream::raw::Operation;
                    let z = self
                        .zstd
                        .as_mut()
                        .ok_or(WireError::Decompress("no decoder"))?;
                    let s = z
                        .run_on_buffers(&input[pos..], &mut buf)
                        .map_err(|_| WireError::Decompress("zstd data error"))?;
                    (s.bytes_read, s.bytes_written)
                }
                None => return Err(WireError::Decompress("no codec")),
            };
            if read == 0 && written == 0 && pos < input.len() {
                return Err(WireError::Decompress("bytes after the end of the stream"));
            }
            pos += read;
            self.produced += written as u64;
            if self.produced > limit {
                return Err(WireError::Decompress("more output than announced"));
            }
            out.extend_from_slice(&buf[..written]);
            if read == 0 && written == 0 {
                break;
            }
            if pos == input.len() && written < buf.len() {
                break;
            }
        }
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_reads_and_never_panics() {
        let b = [
            0x01, 0xFC, 0x34, 0x12, 0xFD, 1, 2, 3, b'a', b'b', 0, 0x02, b'x', b'y',
        ];
        let mut c = Cursor::new(&b);
        assert_eq!(c.u8("a").unwrap(), 1);
        assert_eq!(c.lenenc("b").unwrap(), 0x1234);
        assert_eq!(c.lenenc("c").unwrap(), 0x030201);
        assert_eq!(c.cstr("d").unwrap(), b"ab");
        assert_eq!(c.lenenc_bytes("e").unwrap(), b"xy");
        assert!(c.is_empty());
        assert!(matches!(
            c.u32("f"),
            Err(WireError::Short { what: "f", .. })
        ));
        let mut c = Cursor::new(&[0xFB]);
        assert!(matches!(
            c.lenenc("n"),
            Err(WireError::BadByte { byte: 0xFB, .. })
        ));
        let mut c = Cursor::new(&[0xFE, 1, 2]);
        assert!(c.lenenc("n").is_err());
        let mut c = Cursor::new(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(c.lenenc_bytes("huge").is_err());
        let mut c = Cursor::new(b"abc");
        assert!(c.cstr("s").is_err());
        assert_eq!(c.cstr_or_rest().0, b"abc");
    }

    #[test]
    fn lenenc_roundtrip() {
        for v in [
            0u64,
            250,
            251,
            0xFFFF,
            0x10000,
            0xFF_FFFF,
            0x100_0000,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_lenenc(&mut b, v);
            assert_eq!(b.len(), lenenc_size(b[0]));
            assert_eq!(Cursor::new(&b).lenenc("v").unwrap(), v);
        }
    }

    fn collect(asm: &mut Assembler, input: &[u8], keep: usize) -> Vec<(u8, u32, u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            let (n, m) = asm.push(rest, 7, &|_, _| keep);
            if let Some(m) = m {
                out.push((m.seq, m.packets, m.len, m.head.to_vec()));
            }
            rest = &rest[n..];
        }
        out
    }

    #[test]
    fn assembler_whole_and_bytewise() {
        let mut s = Vec::new();
        write_packets(&mut s, 0, b"\x03SELECT 1");
        write_packets(&mut s, 0, b"");
        write_packets(&mut s, 5, b"\x0e");
        let whole = collect(&mut Assembler::new(), &s, 100);
        assert_eq!(
            whole,
            vec![
                (0, 1, 9, b"\x03SELECT 1".to_vec()),
                (0, 1, 0, vec![]),
                (5, 1, 1, vec![0x0e])
            ]
        );
        let mut a = Assembler::new();
        let mut bytewise = Vec::new();
        for b in &s {
            bytewise.extend(collect(&mut a, std::slice::from_ref(b), 100));
        }
        assert_eq!(whole, bytewise);
        // Keep limit applies on both paths.
        let cut = collect(&mut Assembler::new(), &s, 3);
        assert_eq!(cut[0].3, b"\x03SE");
    }

    #[test]
    fn assembler_joins_16mb_continuation_without_buffering() {
        for total in [
            MAX_PACKET_PAYLOAD as usize,
            MAX_PACKET_PAYLOAD as usize + 10,
        ] {
            let payload = vec![0xAB; total];
            let mut s = Vec::new();
            let next = write_packets(&mut s, 0, &payload);
            assert_eq!(next, 2);
            write_packets(&mut s, 0, b"\x0e");
            let mut a = Assembler::new();
            let mut got = Vec::new();
            for chunk in s.chunks(1 << 20) {
                got.extend(collect(&mut a, chunk, 16));
            }
            assert_eq!(got.len(), 2);
            assert_eq!((got[0].0, got[0].1, got[0].2), (0, 2, total as u64));
            assert_eq!(got[0].3.len(), 16);
            assert!(a.head.capacity() < 1024);
            assert_eq!(got[1].3, vec![0x0e]);
        }
    }

    #[test]
    fn assembler_reset_reports_partial() {
        let mut a = Assembler::new();
        let (n, m) = a.push(&[10, 0, 0, 0, 1, 2], 1, &|_, _| 100);
        assert_eq!(n, 6);
        assert!(m.is_none());
        assert_eq!(a.reset(), 6);
        assert!(a.is_idle());
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    pub(crate) fn frame(seq: u8, data: &[u8], codec: Option<Codec>) -> Vec<u8> {
        let (payload, ulen) = match codec {
            None => (data.to_vec(), 0),
            Some(Codec::Zlib) => (zlib(data), data.len() as u32),
            Some(Codec::Zstd) => (zstd::bulk::compress(data, 3).unwrap(), data.len() as u32),
        };
        let mut out = CompressedHeader {
            compressed_len: payload.len() as u32,
            seq,
            uncompressed_len: ulen,
        }
        .encode()
        .to_vec();
        out.extend_from_slice(&payload);
        out
    }

    fn deframe_all(
        d: &mut Deframer,
        input: &[u8],
        step_size: usize,
    ) -> Result<(Vec<u8>, usize), WireError> {
        let mut out = Vec::new();
        let mut all = Vec::new();
        let mut frames = 0;
        for chunk in input.chunks(step_size.max(1)) {
            let mut rest = chunk;
            loop {
                let s = d.push(rest, &mut out)?;
                frames += usize::from(s.header.is_some());
                rest = &rest[s.consumed..];
                all.append(&mut out);
                if rest.is_empty() && !d.has_pending_output() {
                    break;
                }
            }
        }
        Ok((all, frames))
    }

    #[test]
    fn deframer_zlib_zstd_raw_any_chunking() {
        let big: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let mut s = Vec::new();
        s.extend(frame(0, b"\x05\0\0\0\x03ab", None));
        s.extend(frame(1, &big, Some(Codec::Zlib)));
        s.extend(frame(2, &big[..1000], Some(Codec::Zstd)));
        s.extend(frame(3, &big, Some(Codec::Zstd)));
        let mut want = b"\x05\0\0\0\x03ab".to_vec();
        want.extend(&big);
        want.extend(&big[..1000]);
        want.extend(&big);
        for step in [1, 3, 1000, s.len()] {
            let (got, frames) = deframe_all(&mut Deframer::new(), &s, step).unwrap();
            assert_eq!(frames, 4);
            assert!(got == want, "step {step}");
        }
    }

    #[test]
    fn deframer_rejects_garbage_and_lies() {
        let mut f = frame(0, &[7u8; 300], Some(Codec::Zlib));
        f[4] = 10; // announced length smaller than the real output
        assert!(deframe_all(&mut Deframer::new(), &f, 10_000).is_err());
        let g = [5, 0, 0, 0, 9, 0, 0, 1, 2, 3, 4, 5];
        assert_eq!(
            deframe_all(&mut Deframer::new(), &g, 100).unwrap_err(),
            WireError::Decompress("neither zlib nor zstd")
        );
    }

    #[test]
    fn codec_sniff() {
        assert_eq!(Codec::sniff(&[0x78, 0x9C]), Some(Codec::Zlib));
        assert_eq!(Codec::sniff(&[0x78, 0x01]), Some(Codec::Zlib));
        assert_eq!(Codec::sniff(&[0x78, 0xDA]), Some(Codec::Zlib));
        assert_eq!(Codec::sniff(&ZSTD_MAGIC), Some(Codec::Zstd));
        assert_eq!(Codec::sniff(b"SELE"), None);
        assert_eq!(Codec::sniff(&[0x78]), None);
    }
}
