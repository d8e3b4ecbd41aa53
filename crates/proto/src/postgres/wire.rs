//! PostgreSQL wire framing: the 5-byte message header (type byte, big-endian int32 length that
//! counts itself), the untyped startup packets (length, then a code), a streaming message
//! assembler that keeps only the bytes its caller asks for, and the checked big-endian cursor
//! (the kit's). No state about the conversation lives here.

use thiserror::Error;

/// Length of a typed message header: type byte and int32 length.
pub const HEADER_LEN: usize = 5;
/// Length of the header of an untyped startup-phase packet: int32 length only.
pub const STARTUP_HEADER_LEN: usize = 4;
/// Message lengths (the length field, which counts itself) must stay below this: the server
/// never accepts or sends a message of 1 GB or more (`MaxAllocSize`).
pub const MAX_MESSAGE_LEN: u32 = 1 << 30;
/// The longest startup packet a server accepts (`MAX_STARTUP_PACKET_LENGTH`).
pub const MAX_STARTUP_LEN: u32 = 10_000;

/// Startup-phase request codes (the int32 after the length of an untyped packet).
pub mod code {
    /// Protocol 3.0 (`196608`); 3.2 (PostgreSQL 18) is `196610`.
    pub const PROTOCOL_3_0: u32 = 3 << 16;
    pub const CANCEL_REQUEST: u32 = 80_877_102;
    pub const SSL_REQUEST: u32 = 80_877_103;
    pub const GSSENC_REQUEST: u32 = 80_877_104;
}

/// What went wrong reading PostgreSQL bytes: the kit's one read error.
pub use crate::kit::WireError;

/// A checked big-endian reader over untrusted bytes (the kit's cursor).
pub type Cursor<'a> = crate::kit::Cursor<'a, crate::kit::Be>;

/// A message header whose length cannot be right for its type (or for any message).
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("message {tag:#04x}: impossible length {len}")]
pub struct BadLength {
    /// The type byte (0 for an untyped startup packet).
    pub tag: u8,
    /// The length field as sent (it counts itself).
    pub len: u32,
}

/// A typed message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub tag: u8,
    /// The length field: counts itself and the body, not the type byte.
    pub len: u32,
}

impl Header {
    pub fn parse(b: &[u8]) -> Option<Self> {
        match b {
            [tag, a, b, c, d, ..] => Some(Header {
                tag: *tag,
                len: u32::from_be_bytes([*a, *b, *c, *d]),
            }),
            _ => None,
        }
    }
    /// Whether the length is possible for any message: it counts its own 4 bytes and stays
    /// below 1 GB.
    pub fn len_ok(len: u32) -> bool {
        (4..MAX_MESSAGE_LEN).contains(&len)
    }
}

/// Appends a typed message.
pub fn put_message(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
}

/// Appends an untyped startup-phase packet (`code` then `body`).
pub fn put_startup(out: &mut Vec<u8>, code: u32, body: &[u8]) {
    out.extend_from_slice(&(body.len() as u32 + 8).to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(body);
}

/// One message as the [`Framer`] hands it out.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    /// The type byte; 0 for an untyped startup packet.
    pub tag: u8,
    /// Body length (the length field minus its own 4 bytes).
    pub len: u32,
    /// The first bytes of the body: exactly `min(len, keep)` where `keep` is what the caller's
    /// policy asked for when the header was read (fewer only if a capture gap cut the body).
    pub head: &'a [u8],
    /// Timestamp of the bytes that carried the first header byte.
    pub start_ts: u64,
    /// A capture gap removed bytes from the body (the framing stayed in sync).
    pub damaged: bool,
    /// Header length (5 typed, 4 untyped).
    pub header_len: u8,
}

impl Message<'_> {
    /// Bytes on the wire, header included.
    pub fn wire_len(&self) -> u64 {
        u64::from(self.header_len) + u64::from(self.len)
    }
    /// Whether `head` holds the whole body.
    pub fn complete(&self) -> bool {
        !self.damaged && self.head.len() as u64 == u64::from(self.len)
    }
}

/// Splits one direction's bytes into messages, streaming: body bytes beyond what the caller's
/// policy keeps are counted and dropped, never buffered.
#[derive(Debug)]
pub struct Framer {
    typed: bool,
    hdr: [u8; HEADER_LEN],
    hdr_have: usize,
    /// The header is complete and the body is being read.
    active: bool,
    tag: u8,
    body_len: u32,
    left: u32,
    keep: usize,
    head: Vec<u8>,
    start_ts: u64,
    damaged: bool,
}

impl Framer {
    /// A framer for typed messages (`typed`) or for untyped startup packets.
    pub fn new(typed: bool) -> Self {
        Framer {
            typed,
            hdr: [0; HEADER_LEN],
            hdr_have: 0,
            active: false,
            tag: 0,
            body_len: 0,
            left: 0,
            keep: 0,
            head: Vec::new(),
            start_ts: 0,
            damaged: false,
        }
    }

    fn header_len(&self) -> usize {
        if self.typed {
            HEADER_LEN
        } else {
            STARTUP_HEADER_LEN
        }
    }

    /// Switches between typed and untyped framing; only between messages.
    pub fn set_typed(&mut self, typed: bool) {
        self.typed = typed;
    }

    pub fn typed(&self) -> bool {
        self.typed
    }

    /// True between messages.
    pub fn is_idle(&self) -> bool {
        !self.active && self.hdr_have == 0
    }

    /// Bytes of the message in progress consumed so far.
    pub fn partial_bytes(&self) -> u64 {
        if self.active {
            self.header_len() as u64 + u64::from(self.body_len - self.left)
        } else {
            self.hdr_have as u64
        }
    }

    /// The header of the message in progress, once read.
    pub fn header(&self) -> Option<Header> {
        self.active.then_some(Header {
            tag: self.tag,
            len: self.body_len + 4,
        })
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.head.capacity()
    }

    /// Between messages, frees the buffer of a large message already handed out (so a
    /// connection that sent one huge statement does not hold its memory until its next one).
    pub fn release_large(&mut self) {
        if !self.active && self.head.capacity() > 256 * 1024 {
            self.head = Vec::new();
        }
    }

    /// Drops the message in progress; returns the bytes it had consumed.
    pub fn reset(&mut self) -> u64 {
        let n = self.partial_bytes();
        self.hdr_have = 0;
        self.active = false;
        self.damaged = false;
        self.head.clear();
        if self.head.capacity() > 64 * 1024 {
            self.head = Vec::new();
        }
        n
    }

    /// A capture gap of `n` bytes. When the gap falls inside the body of the message in
    /// progress (ending at its last byte at the latest), the framing stays in sync: the body is
    /// marked damaged (nothing after the hole is kept) and `true` is returned; if the gap took
    /// the body's last bytes, [`Framer::body_done`] is then true and the next [`Framer::push`]
    /// (even of no bytes) completes the message. Otherwise nothing changes and `false` is
    /// returned.
    pub fn skip_lost(&mut self, n: u64) -> bool {
        if self.active && u64::from(self.left) >= n {
            self.left -= n as u32;
            self.damaged = true;
            self.keep = self.head.len();
            true
        } else {
            false
        }
    }

    /// The whole body of the message in progress was consumed or lost: it is complete.
    pub fn body_done(&self) -> bool {
        self.active && self.left == 0
    }

    /// Consumes bytes from `input` until one message is complete. Returns how many bytes were
    /// consumed and the message, if one completed. `policy(tag, len)` is asked once per header
    /// (`len` is the length field) and says how many body bytes to keep, or `None` when the
    /// length is impossible for that type: the framer then stops with [`BadLength`] right after
    /// the header, which it has consumed. Lengths outside `4..1 GB` are always refused.
    ///
    /// Inlined: the common case (a whole message in the input, nothing buffered) is a few
    /// loads, so the message stays in registers in the caller instead of going through memory;
    /// the rest is [`Framer::push_buffered`].
    #[inline]
    pub fn push<'a>(
        &'a mut self,
        input: &'a [u8],
        ts: u64,
        policy: &dyn Fn(u8, u32) -> Option<usize>,
    ) -> (usize, Result<Option<Message<'a>>, BadLength>) {
        let hl = self.header_len();
        // Fast path: a whole message in the input, nothing buffered.
        if self.is_idle()
            && let Some((tag, len)) = self.read_header(input)
            && Header::len_ok(len)
            && let Some(body) = input.get(hl..hl + (len as usize - 4))
        {
            let Some(keep) = policy(tag, len) else {
                return (hl, Err(BadLength { tag, len }));
            };
            let msg = Message {
                tag,
                len: len - 4,
                head: body.get(..keep.min(body.len())).unwrap_or(&[]),
                start_ts: ts,
                damaged: false,
                header_len: hl as u8,
            };
            return (hl + body.len(), Ok(Some(msg)));
        }
        self.push_buffered(input, ts, policy)
    }

    /// [`Framer::push`] when the message is split over several inputs (or its header is
    /// impossible): the header and the kept body bytes are gathered in the framer.
    #[inline(never)]
    fn push_buffered<'a>(
        &'a mut self,
        input: &'a [u8],
        ts: u64,
        policy: &dyn Fn(u8, u32) -> Option<usize>,
    ) -> (usize, Result<Option<Message<'a>>, BadLength>) {
        let hl = self.header_len();
        let mut pos = 0usize;
        if !self.active {
            if self.hdr_have == 0 {
                self.start_ts = ts;
            }
            let n = (hl - self.hdr_have).min(input.len());
            self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&input[..n]);
            self.hdr_have += n;
            pos = n;
            if self.hdr_have < hl {
                return (pos, Ok(None));
            }
            let (tag, len) = self.read_header(&self.hdr).unwrap_or((0, 0));
            self.hdr_have = 0;
            let keep = if Header::len_ok(len) {
                policy(tag, len)
            } else {
                None
            };
            let Some(keep) = keep else {
                return (pos, Err(BadLength { tag, len }));
            };
            self.active = true;
            self.tag = tag;
            self.body_len = len - 4;
            self.left = len - 4;
            self.keep = keep.min(self.body_len as usize);
            self.damaged = false;
            self.head.clear();
            if self.head.capacity() > 256 * 1024 {
                // Do not hold on to the memory of one huge message.
                self.head = Vec::new();
            }
        }
        let n = (self.left as usize).min(input.len() - pos);
        let chunk = &input[pos..pos + n];
        let room = self.keep.saturating_sub(self.head.len()).min(n);
        self.head.extend_from_slice(&chunk[..room]);
        self.left -= n as u32;
        pos += n;
        if self.left > 0 {
            return (pos, Ok(None));
        }
        self.active = false;
        let msg = Message {
            tag: self.tag,
            len: self.body_len,
            head: &self.head,
            start_ts: self.start_ts,
            damaged: self.damaged,
            header_len: hl as u8,
        };
        (pos, Ok(Some(msg)))
    }

    fn read_header(&self, b: &[u8]) -> Option<(u8, u32)> {
        if self.typed {
            Header::parse(b).map(|h| (h.tag, h.len))
        } else {
            match b {
                [a, b, c, d, ..] => Some((0, u32::from_be_bytes([*a, *b, *c, *d]))),
                _ => None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep_all(_: u8, _: u32) -> Option<usize> {
        Some(usize::MAX)
    }

    #[test]
    fn cursor_reads_and_never_panics() {
        let b = [0x00, 0x01, 0xFF, 0xFE, 0, 0, 0, 7, b'a', b'b', 0, b'x'];
        let mut c = Cursor::new(&b);
        assert_eq!(c.i16("a").unwrap(), 1);
        assert_eq!(c.i16("b").unwrap(), -2);
        assert_eq!(c.u32("c").unwrap(), 7);
        assert_eq!(c.cstr("d").unwrap(), b"ab");
        assert!(matches!(
            c.cstr("e"),
            Err(WireError::Unterminated { what: "e", at: 11 })
        ));
        assert_eq!(c.cstr_or_rest(), (&b"x"[..], false));
        assert!(c.is_empty());
        assert!(matches!(
            c.i32("f"),
            Err(WireError::Short { what: "f", .. })
        ));
        assert!(c.bytes(usize::MAX, "g").is_err());
        assert_eq!(c.u8("h").ok(), None);
    }

    #[test]
    fn header_lengths() {
        assert_eq!(
            Header::parse(b"Z\0\0\0\x05I"),
            Some(Header { tag: b'Z', len: 5 })
        );
        assert_eq!(Header::parse(b"Z\0\0\0"), None);
        assert!(!Header::len_ok(3));
        assert!(Header::len_ok(4));
        assert!(Header::len_ok(MAX_MESSAGE_LEN - 1));
        assert!(!Header::len_ok(MAX_MESSAGE_LEN));
    }

    #[test]
    fn framer_fast_path_and_split_input_agree() {
        let mut wire = Vec::new();
        put_message(&mut wire, b'Q', b"SELECT 1\0");
        put_message(&mut wire, b'S', b"");
        let mut f = Framer::new(true);
        let (n, m) = f.push(&wire, 1, &keep_all);
        let m = m.unwrap().unwrap();
        assert_eq!((n, m.tag, m.len, m.head), (14, b'Q', 9, &b"SELECT 1\0"[..]));
        assert_eq!(m.wire_len(), 14);
        assert!(m.complete());
        // Byte by byte.
        let mut f = Framer::new(true);
        let mut got = Vec::new();
        for (i, b) in wire.iter().enumerate() {
            let (n, m) = f.push(std::slice::from_ref(b), i as u64, &keep_all);
            assert_eq!(n, 1);
            if let Some(m) = m.unwrap() {
                got.push((m.tag, m.head.to_vec(), m.start_ts));
            }
        }
        assert_eq!(
            got,
            vec![(b'Q', b"SELECT 1\0".to_vec(), 0), (b'S', vec![], 14)]
        );
    }

    #[test]
    fn framer_keeps_only_what_the_policy_asks() {
        let mut wire = Vec::new();
        put_message(&mut wire, b'D', &[7; 1000]);
        let mut f = Framer::new(true);
        let keep = |t: u8, _: u32| Some(if t == b'D' { 3 } else { 0 });
        let (n1, m) = f.push(&wire[..500], 0, &keep);
        assert!(m.unwrap().is_none());
        assert_eq!(f.partial_bytes(), 500);
        let (n2, m) = f.push(&wire[500..], 1, &keep);
        let m = m.unwrap().unwrap();
        assert_eq!(
            (n1 + n2, m.len, m.head, m.start_ts),
            (1005, 1000, &[7, 7, 7][..], 0)
        );
        assert!(!m.complete());
        assert!(f.buffered_bytes() < 100);
    }

    #[test]
    fn framer_refuses_impossible_lengths() {
        let mut f = Framer::new(true);
        let (n, r) = f.push(b"Q\0\0\0\x03xyz", 0, &keep_all);
        assert_eq!((n, r.unwrap_err()), (5, BadLength { tag: b'Q', len: 3 }));
        let mut f = Framer::new(true);
        let (n, r) = f.push(b"D\x40\0\0\0", 0, &keep_all);
        assert_eq!(n, 5);
        assert_eq!(r.unwrap_err().len, MAX_MESSAGE_LEN);
        // The policy refuses per type; split header.
        let mut f = Framer::new(true);
        let strict = |t: u8, l: u32| (t != b'S' || l == 4).then_some(0);
        assert_eq!(f.push(b"S\0\0", 0, &strict).0, 3);
        let (n, r) = f.push(b"\0\x05\0", 0, &strict);
        assert_eq!((n, r.unwrap_err()), (2, BadLength { tag: b'S', len: 5 }));
    }

    #[test]
    fn framer_untyped_startup_packets() {
        let mut wire = Vec::new();
        put_startup(&mut wire, code::SSL_REQUEST, b"");
        let mut f = Framer::new(false);
        let (n, m) = f.push(&wire, 0, &keep_all);
        let m = m.unwrap().unwrap();
        assert_eq!((n, m.tag, m.len, m.wire_len()), (8, 0, 4, 8));
        assert_eq!(m.head, &80_877_103u32.to_be_bytes()[..]);
        f.set_typed(true);
        assert!(f.typed());
    }

    #[test]
    fn gap_inside_a_body_keeps_the_framing() {
        let mut wire = Vec::new();
        put_message(&mut wire, b'd', &[1; 100]);
        put_message(&mut wire, b'c', b"");
        let mut f = Framer::new(true);
        let (n, _) = f.push(&wire[..20], 0, &keep_all);
        assert_eq!(n, 20);
        assert!(!f.skip_lost(90), "the gap reaches past the body");
        assert!(f.skip_lost(30));
        let (n, m) = f.push(&wire[50..], 1, &keep_all);
        let m = m.unwrap().unwrap();
        assert_eq!((n, m.len, m.head.len()), (55, 100, 15));
        assert!(m.damaged && !m.complete());
        let (_, m) = f.push(&wire[105..], 2, &keep_all);
        assert_eq!(m.unwrap().unwrap().tag, b'c');
        assert!(!f.skip_lost(1), "between messages nothing can be skipped");
        assert_eq!(f.reset(), 0);
    }
}
