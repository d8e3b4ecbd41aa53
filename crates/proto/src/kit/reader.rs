//! The one checked byte reader and the one read error for every protocol: a cursor over
//! untrusted bytes whose every read names the field it reads and returns an error instead of
//! panicking. The byte order is a type parameter ([`Le`] for MySQL and MongoDB, [`Be`] for
//! PostgreSQL), so a protocol writes `type Cursor<'a> = kit::Cursor<'a, Be>;` once and its call
//! sites read `c.u32("length")`.

use std::fmt;
use std::marker::PhantomData;

use thiserror::Error;

/// What went wrong reading protocol bytes. `what` names the field being read.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes left than the field needs.
    #[error("{what}: needs {need} bytes at offset {at}, {have} left")]
    Short {
        what: &'static str,
        at: usize,
        need: usize,
        have: usize,
    },
    /// A delimited field (C string, line) without its delimiter.
    #[error("{what}: no terminator after offset {at}")]
    Unterminated { what: &'static str, at: usize },
    /// A byte that cannot be where it is (a bad length-encoded prefix, an unknown type byte).
    #[error("{what}: unexpected byte 0x{byte:02x} at offset {at}")]
    BadByte {
        what: &'static str,
        at: usize,
        byte: u8,
    },
    /// A length or count out of range.
    #[error("{what}: length {len} out of range")]
    BadLength { what: &'static str, len: i64 },
    /// A field that runs past the end of its container.
    #[error("{what}: runs past the end of its container")]
    Overrun { what: &'static str },
    /// Anything else, said in words.
    #[error("{what}: {why}")]
    Invalid {
        what: &'static str,
        why: &'static str,
    },
    /// A compressed frame or stream that does not decompress.
    #[error("decompression: {0}")]
    Decompress(&'static str),
}

/// The result of a read.
pub type ReadResult<T> = Result<T, WireError>;

/// How multi-byte integers are laid out.
pub trait ByteOrder: Copy {
    fn u16(b: [u8; 2]) -> u16;
    fn u32(b: [u8; 4]) -> u32;
    fn u64(b: [u8; 8]) -> u64;
    /// A 3-byte unsigned integer (MySQL packet lengths).
    fn u24(b: [u8; 3]) -> u32;
}

/// Little-endian: MySQL, MongoDB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Le;
/// Big-endian (network order): PostgreSQL.
#[derive(Clone, Copy, Debug, Default)]
pub struct Be;

impl ByteOrder for Le {
    fn u16(b: [u8; 2]) -> u16 {
        u16::from_le_bytes(b)
    }
    fn u32(b: [u8; 4]) -> u32 {
        u32::from_le_bytes(b)
    }
    fn u64(b: [u8; 8]) -> u64 {
        u64::from_le_bytes(b)
    }
    fn u24(b: [u8; 3]) -> u32 {
        u32::from_le_bytes([b[0], b[1], b[2], 0])
    }
}

impl ByteOrder for Be {
    fn u16(b: [u8; 2]) -> u16 {
        u16::from_be_bytes(b)
    }
    fn u32(b: [u8; 4]) -> u32 {
        u32::from_be_bytes(b)
    }
    fn u64(b: [u8; 8]) -> u64 {
        u64::from_be_bytes(b)
    }
    fn u24(b: [u8; 3]) -> u32 {
        u32::from_be_bytes([0, b[0], b[1], b[2]])
    }
}

/// A checked reader over untrusted bytes: every read says what it reads and never panics.
pub struct Cursor<'a, O: ByteOrder = Le> {
    buf: &'a [u8],
    pos: usize,
    order: PhantomData<O>,
}

impl<O: ByteOrder> Clone for Cursor<'_, O> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<O: ByteOrder> Copy for Cursor<'_, O> {}

impl<O: ByteOrder> fmt::Debug for Cursor<'_, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cursor({}/{})", self.pos, self.buf.len())
    }
}

impl<'a, O: ByteOrder> Cursor<'a, O> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor {
            buf,
            pos: 0,
            order: PhantomData,
        }
    }
    /// Bytes read so far.
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    /// The next byte without consuming it.
    pub fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }
    /// Everything not yet read, not consumed.
    pub fn peek_rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }
    /// Everything not yet read, consumed.
    pub fn rest(&mut self) -> &'a [u8] {
        let r = self.peek_rest();
        self.pos = self.buf.len();
        r
    }
    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize, what: &'static str) -> ReadResult<&'a [u8]> {
        match self
            .pos
            .checked_add(n)
            .and_then(|e| self.buf.get(self.pos..e))
        {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(WireError::Short {
                what,
                at: self.pos,
                need: n,
                have: self.remaining(),
            }),
        }
    }
    pub fn skip(&mut self, n: usize, what: &'static str) -> ReadResult<()> {
        self.bytes(n, what).map(|_| ())
    }
    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> ReadResult<[u8; N]> {
        let s = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    pub fn u8(&mut self, what: &'static str) -> ReadResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn u16(&mut self, what: &'static str) -> ReadResult<u16> {
        Ok(O::u16(self.array(what)?))
    }
    pub fn i16(&mut self, what: &'static str) -> ReadResult<i16> {
        Ok(self.u16(what)? as i16)
    }
    pub fn u24(&mut self, what: &'static str) -> ReadResult<u32> {
        Ok(O::u24(self.array(what)?))
    }
    pub fn u32(&mut self, what: &'static str) -> ReadResult<u32> {
        Ok(O::u32(self.array(what)?))
    }
    pub fn i32(&mut self, what: &'static str) -> ReadResult<i32> {
        Ok(self.u32(what)? as i32)
    }
    pub fn u64(&mut self, what: &'static str) -> ReadResult<u64> {
        Ok(O::u64(self.array(what)?))
    }
    pub fn i64(&mut self, what: &'static str) -> ReadResult<i64> {
        Ok(self.u64(what)? as i64)
    }
    pub fn f64(&mut self, what: &'static str) -> ReadResult<f64> {
        Ok(f64::from_bits(self.u64(what)?))
    }
    /// The bytes up to the delimiter `delim` (consumed, not returned). An empty delimiter
    /// matches at once.
    pub fn until(&mut self, delim: &[u8], what: &'static str) -> ReadResult<&'a [u8]> {
        let rest = self.peek_rest();
        let found = if delim.is_empty() {
            Some(0)
        } else if let [b] = delim {
            find_byte(rest, *b)
        } else {
            rest.windows(delim.len()).position(|w| w == delim)
        };
        match found {
            Some(i) => {
                let s = rest.get(..i).unwrap_or(&[]);
                self.pos += i + delim.len();
                Ok(s)
            }
            None => Err(WireError::Unterminated { what, at: self.pos }),
        }
    }
    /// A NUL-terminated string (the NUL is consumed, not returned).
    pub fn cstr(&mut self, what: &'static str) -> ReadResult<&'a [u8]> {
        self.until(b"\0", what)
    }
    /// A NUL-terminated string that may be cut short by the end of the kept bytes (or whose
    /// sender omitted the final terminator): the string and whether its terminator was seen.
    pub fn cstr_or_rest(&mut self) -> (&'a [u8], bool) {
        match self.cstr("") {
            Ok(s) => (s, true),
            Err(_) => (self.rest(), false),
        }
    }
}

/// The first position of `b` in `hay`, eight bytes at a time (C strings of statement text
/// are scanned on every PostgreSQL Parse and Query).
#[inline]
fn find_byte(hay: &[u8], b: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let rep = LO.wrapping_mul(u64::from(b));
    let mut words = hay.chunks_exact(8);
    let mut at = 0;
    for w in words.by_ref() {
        let Ok(bytes) = <[u8; 8]>::try_from(w) else {
            break;
        };
        let x = u64::from_le_bytes(bytes) ^ rep;
        // The lowest flagged byte is the first zero byte of `x` (a borrow only flags bytes
        // above a zero one).
        let z = x.wrapping_sub(LO) & !x & HI;
        if z != 0 {
            return Some(at + (z.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == b)
        .map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn find_byte_agrees_with_a_plain_scan(
            hay in proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0x80), Just(0xff), any::<u8>()], 0..40),
            b in prop_oneof![Just(0u8), Just(1), Just(0x80), Just(0xff), any::<u8>()],
        ) {
            prop_assert_eq!(find_byte(&hay, b), hay.iter().position(|&c| c == b));
        }
    }

    #[test]
    fn reads_in_both_byte_orders() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut le = Cursor::<Le>::new(&b);
        assert_eq!(le.u16("a"), Ok(0x0201));
        assert_eq!(le.u24("b"), Ok(0x05_0403));
        assert_eq!(le.remaining(), 3);
        let mut be = Cursor::<Be>::new(&b);
        assert_eq!(be.u32("a"), Ok(0x0102_0304));
        assert_eq!(be.i16("b"), Ok(0x0506));
        assert_eq!(
            be.u24("c"),
            Err(WireError::Short {
                what: "c",
                at: 6,
                need: 3,
                have: 2
            })
        );
        // A failed read consumes nothing.
        assert_eq!(be.pos(), 6);
        assert_eq!(Cursor::<Be>::new(&b).u64("x"), Ok(0x0102_0304_0506_0708));
        assert_eq!(Cursor::<Le>::new(&b).u64("x"), Ok(0x0807_0605_0403_0201));
        assert_eq!(Cursor::<Le>::new(&[0xff; 4]).i32("x"), Ok(-1));
        let one = 1.5f64.to_le_bytes();
        assert_eq!(Cursor::<Le>::new(&one).f64("x"), Ok(1.5));
    }

    #[test]
    fn strings_and_delimiters() {
        let mut c = Cursor::<Le>::new(b"ab\0cd\r\nef");
        assert_eq!(c.peek(), Some(b'a'));
        assert_eq!(c.cstr("s"), Ok(&b"ab"[..]));
        assert_eq!(c.until(b"\r\n", "line"), Ok(&b"cd"[..]));
        assert_eq!(c.peek_rest(), b"ef");
        assert_eq!(
            c.cstr("t"),
            Err(WireError::Unterminated { what: "t", at: 7 })
        );
        assert_eq!(c.cstr_or_rest(), (&b"ef"[..], false));
        assert!(c.is_empty());
        assert_eq!(c.rest(), b"");
        assert_eq!(c.peek(), None);
        let mut d = Cursor::<Be>::new(b"x\0");
        assert_eq!(d.cstr_or_rest(), (&b"x"[..], true));
        assert_eq!(d.until(b"", "e"), Ok(&b""[..]));
        assert!(d.skip(1, "k").is_err());
        assert_eq!(format!("{d:?}"), "Cursor(2/2)");
    }

    #[test]
    fn huge_lengths_are_errors() {
        let mut c = Cursor::<Le>::new(b"abc");
        c.skip(1, "a").unwrap();
        assert!(matches!(
            c.bytes(usize::MAX, "big"),
            Err(WireError::Short { have: 2, .. })
        ));
        assert_eq!(c.array::<2>("two"), Ok(*b"bc"));
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..64),
                        ops in proptest::collection::vec((0u8..14, any::<usize>()), 0..32)) {
            let mut c = Cursor::<Be>::new(&data);
            let mut last = 0;
            for (op, n) in ops {
                let n = if n % 3 == 0 { n } else { n % 80 };
                let _ = match op {
                    0 => c.bytes(n, "b").map(|_| ()),
                    1 => c.skip(n, "s"),
                    2 => c.u8("u8").map(|_| ()),
                    3 => c.u16("u16").map(|_| ()),
                    4 => c.u24("u24").map(|_| ()),
                    5 => c.u32("u32").map(|_| ()),
                    6 => c.i64("i64").map(|_| ()),
                    7 => c.f64("f64").map(|_| ()),
                    8 => c.cstr("c").map(|_| ()),
                    9 => c.until(b"\r\n", "l").map(|_| ()),
                    10 => { c.cstr_or_rest(); Ok(()) }
                    11 => { c.peek(); c.peek_rest(); Ok(()) }
                    12 => c.array::<3>("a").map(|_| ()),
                    _ => { c.rest(); Ok(()) }
                };
                prop_assert!(c.pos() >= last && c.pos() <= data.len());
                prop_assert_eq!(c.pos() + c.remaining(), data.len());
                last = c.pos();
            }
        }
    }
}
