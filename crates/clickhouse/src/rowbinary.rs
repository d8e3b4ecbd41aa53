//! ClickHouse's RowBinary format, by hand: little-endian fixed-width integers, strings and
//! arrays prefixed by their length as an unsigned LEB128 varint, `DateTime` as a `UInt32` of
//! unix seconds. It is the same from ClickHouse 18.16 to current versions (no header: the
//! column order is the insert's column list). [`Reader`] is a checked cursor over it (tests,
//! and the spool's check of a batch read back from disk).

/// Appends RowBinary values to a buffer.
#[derive(Default, Debug, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// An unsigned LEB128 varint (the length prefix of strings and arrays).
    pub fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.buf.push(b);
                return;
            }
            self.buf.push(b | 0x80);
        }
    }

    pub fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }

    pub fn array_u32(&mut self, v: &[u32]) {
        self.varint(v.len() as u64);
        v.iter().for_each(|&x| self.u32(x));
    }

    pub fn array_u64(&mut self, v: &[u64]) {
        self.varint(v.len() as u64);
        v.iter().for_each(|&x| self.u64(x));
    }
}

/// Why RowBinary bytes did not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The bytes ended inside a value.
    Truncated,
    /// A varint longer than 10 bytes or past `u64`.
    BadVarint,
    /// A length past the bytes left (or past the reader's cap).
    BadLength(u64),
    /// A string that is not UTF-8.
    NotUtf8,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Truncated => write!(f, "truncated RowBinary"),
            ReadError::BadVarint => write!(f, "bad varint"),
            ReadError::BadLength(n) => write!(f, "length {n} past the data"),
            ReadError::NotUtf8 => write!(f, "string is not UTF-8"),
        }
    }
}

impl std::error::Error for ReadError {}

/// A checked cursor over RowBinary bytes: never panics, never allocates more than the bytes
/// left can hold.
pub struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b }
    }

    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ReadError> {
        if self.b.len() < n {
            return Err(ReadError::Truncated);
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], ReadError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, ReadError> {
        Ok(self.fixed::<1>()?[0])
    }

    pub fn u32(&mut self) -> Result<u32, ReadError> {
        Ok(u32::from_le_bytes(self.fixed()?))
    }

    pub fn u64(&mut self) -> Result<u64, ReadError> {
        Ok(u64::from_le_bytes(self.fixed()?))
    }

    pub fn varint(&mut self) -> Result<u64, ReadError> {
        let mut v = 0u64;
        for i in 0..10u32 {
            let b = self.u8()?;
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                return Err(ReadError::BadVarint);
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ReadError::BadVarint)
    }

    /// A length prefix for items of `size` bytes each, checked against the bytes left.
    fn len(&mut self, size: usize) -> Result<usize, ReadError> {
        let n = self.varint()?;
        let bytes = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(size))
            .filter(|&b| b <= self.b.len())
            .ok_or(ReadError::BadLength(n))?;
        Ok(bytes / size.max(1))
    }

    pub fn str(&mut self) -> Result<&'a str, ReadError> {
        let n = self.len(1)?;
        std::str::from_utf8(self.take(n)?).map_err(|_| ReadError::NotUtf8)
    }

    pub fn array_u32(&mut self) -> Result<Vec<u32>, ReadError> {
        let n = self.len(4)?;
        (0..n).map(|_| self.u32()).collect()
    }

    pub fn array_u64(&mut self) -> Result<Vec<u64>, ReadError> {
        let n = self.len(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_leb128() {
        let mut w = Writer::default();
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            w.varint(v);
        }
        assert_eq!(&w.buf[..5], &[0, 1, 0x7f, 0x80, 0x01]);
        assert_eq!(&w.buf[5..7], &[0xac, 0x02]);
        let mut r = Reader::new(&w.buf);
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            assert_eq!(r.varint(), Ok(v));
        }
        assert!(r.is_empty());
        assert_eq!(Reader::new(&[0xff; 11]).varint(), Err(ReadError::BadVarint));
        assert_eq!(Reader::new(&[0x80]).varint(), Err(ReadError::Truncated));
    }

    #[test]
    fn strings_and_arrays_are_length_prefixed() {
        let mut w = Writer::default();
        w.str("ab");
        w.array_u32(&[1, 2]);
        w.array_u64(&[]);
        assert_eq!(
            w.buf,
            [2, b'a', b'b', 2, 1, 0, 0, 0, 2, 0, 0, 0, 0].as_slice()
        );
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.str(), Ok("ab"));
        assert_eq!(r.array_u32(), Ok(vec![1, 2]));
        assert_eq!(r.array_u64(), Ok(vec![]));
        // A huge length allocates nothing.
        let mut w = Writer::default();
        w.varint(u64::MAX / 2);
        assert!(matches!(
            Reader::new(&w.buf).array_u64(),
            Err(ReadError::BadLength(_))
        ));
    }
}
