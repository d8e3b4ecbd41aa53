//! A checked RESP framer: whole requests (arrays of bulk strings, inline commands) with their
//! arguments, and the length of whole replies of any RESP2/RESP3 type. Total over any bytes.

/// What the bytes at the start of a buffer hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<T> {
    /// A whole message of `len` bytes.
    Whole(usize, T),
    /// A prefix of a message: more bytes are needed.
    More,
    /// Not a message this framer accepts.
    Invalid,
}

/// The most arguments of one request.
pub const MAX_ARGS: usize = 1 << 20;
/// The largest bulk string (Redis' own `proto-max-bulk-len` default).
pub const MAX_BULK: usize = 512 << 20;
/// The longest inline command line.
pub const MAX_INLINE: usize = 64 << 10;
/// The deepest nesting of a reply.
pub const MAX_DEPTH: usize = 128;

/// Reads a decimal line (`<digits>\r\n`, optional `-`) at `at`: the value and the index after
/// the CRLF.
fn number(b: &[u8], at: usize) -> Frame<i64> {
    let rest = b.get(at..).unwrap_or_default();
    let Some(nl) = rest.iter().take(22).position(|&c| c == b'\n') else {
        return if rest.len() >= 22 {
            Frame::Invalid
        } else {
            Frame::More
        };
    };
    let line = rest.get(..nl).unwrap_or_default();
    let Some(line) = line.strip_suffix(b"\r") else {
        return Frame::Invalid;
    };
    match std::str::from_utf8(line).ok().and_then(|s| s.parse().ok()) {
        Some(v) => Frame::Whole(at + nl + 1, v),
        None => Frame::Invalid,
    }
}

/// A request at the start of `b`: its length and the byte ranges of its arguments.
pub fn request(b: &[u8]) -> Frame<Vec<(usize, usize)>> {
    match b.first() {
        None => Frame::More,
        Some(b'*') => array_request(b),
        Some(_) => inline_request(b),
    }
}

fn array_request(b: &[u8]) -> Frame<Vec<(usize, usize)>> {
    let (mut at, n) = match number(b, 1) {
        Frame::Whole(at, n) if (1..=MAX_ARGS as i64).contains(&n) => (at, n as usize),
        Frame::Whole(..) | Frame::Invalid => return Frame::Invalid,
        Frame::More => return Frame::More,
    };
    let mut args = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        match b.get(at) {
            None => return Frame::More,
            Some(b'$') => {}
            Some(_) => return Frame::Invalid,
        }
        let (start, len) = match number(b, at + 1) {
            Frame::Whole(s, l) if (0..=MAX_BULK as i64).contains(&l) => (s, l as usize),
            Frame::Whole(..) | Frame::Invalid => return Frame::Invalid,
            Frame::More => return Frame::More,
        };
        let end = start + len;
        match b.get(end..end + 2) {
            None => return Frame::More,
            Some(b"\r\n") => {}
            Some(_) => return Frame::Invalid,
        }
        args.push((start, end));
        at = end + 2;
    }
    Frame::Whole(at, args)
}

fn inline_request(b: &[u8]) -> Frame<Vec<(usize, usize)>> {
    let Some(nl) = b.iter().take(MAX_INLINE).position(|&c| c == b'\n') else {
        return if b.len() >= MAX_INLINE {
            Frame::Invalid
        } else {
            Frame::More
        };
    };
    let line = b.get(..nl).unwrap_or_default();
    let mut args = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while line.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        let start = i;
        while line.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
            i += 1;
        }
        if i > start {
            args.push((start, i));
        }
    }
    Frame::Whole(nl + 1, args)
}

/// A reply at the start of `b`: its length, and whether it is a RESP3 push (`>`), which
/// answers no request.
pub fn reply(b: &[u8]) -> Frame<bool> {
    let push = b.first() == Some(&b'>');
    match value(b, 0, 0) {
        Frame::Whole(end, ()) => Frame::Whole(end, push),
        Frame::More => Frame::More,
        Frame::Invalid => Frame::Invalid,
    }
}

/// The end of the value at `at`.
fn value(b: &[u8], at: usize, depth: usize) -> Frame<()> {
    if depth > MAX_DEPTH {
        return Frame::Invalid;
    }
    let Some(&t) = b.get(at) else {
        return Frame::More;
    };
    match t {
        b'+' | b'-' | b':' | b',' | b'#' | b'(' | b'_' => line_end(b, at + 1),
        b'$' | b'!' | b'=' => blob(b, at + 1),
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let per = if matches!(t, b'%' | b'|') { 2 } else { 1 };
            let (mut at, n) = match number(b, at + 1) {
                Frame::Whole(a, n) if n < 0 => return Frame::Whole(a, ()),
                Frame::Whole(a, n) if n <= MAX_ARGS as i64 => (a, n as usize * per),
                Frame::Whole(..) | Frame::Invalid => return Frame::Invalid,
                Frame::More => return Frame::More,
            };
            for _ in 0..n {
                match value(b, at, depth + 1) {
                    Frame::Whole(end, ()) => at = end,
                    other => return other,
                }
            }
            if t == b'|' {
                // An attribute precedes the value it describes.
                return value(b, at, depth + 1);
            }
            Frame::Whole(at, ())
        }
        _ => Frame::Invalid,
    }
}

fn line_end(b: &[u8], at: usize) -> Frame<()> {
    let rest = b.get(at..).unwrap_or_default();
    match rest.iter().position(|&c| c == b'\n') {
        Some(nl) => Frame::Whole(at + nl + 1, ()),
        None if rest.len() > MAX_INLINE => Frame::Invalid,
        None => Frame::More,
    }
}

fn blob(b: &[u8], at: usize) -> Frame<()> {
    match number(b, at) {
        Frame::Whole(a, n) if n < 0 => Frame::Whole(a, ()),
        Frame::Whole(a, n) if n <= MAX_BULK as i64 => {
            let end = a + n as usize;
            match b.get(end..end + 2) {
                None => Frame::More,
                Some(b"\r\n") => Frame::Whole(end + 2, ()),
                Some(_) => Frame::Invalid,
            }
        }
        Frame::Whole(..) | Frame::Invalid => Frame::Invalid,
        Frame::More => Frame::More,
    }
}

/// Encodes a command as an array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn args_of(b: &[u8]) -> Vec<Vec<u8>> {
        match request(b) {
            Frame::Whole(_, a) => a.iter().map(|&(s, e)| b[s..e].to_vec()).collect(),
            _ => vec![],
        }
    }

    #[test]
    fn requests() {
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n";
        assert!(matches!(request(set), Frame::Whole(l, _) if l == set.len()));
        assert_eq!(args_of(set), [b"SET".to_vec(), b"k".to_vec(), b"".to_vec()]);
        for cut in 0..set.len() {
            assert_eq!(request(&set[..cut]), Frame::More, "{cut}");
        }
        assert_eq!(args_of(b"PING  x\r\n"), [b"PING".to_vec(), b"x".to_vec()]);
        assert_eq!(request(b"*0\r\n"), Frame::Invalid);
        assert_eq!(request(b"*1\r\n:1\r\n"), Frame::Invalid);
        assert_eq!(request(b"*1\r\n$1\r\nab\r\n"), Frame::Invalid);
        assert_eq!(encode(&[b"SET", b"k", b""]), set.to_vec());
    }

    #[test]
    fn replies() {
        let cases: [&[u8]; 7] = [
            b"+OK\r\n",
            b"$-1\r\n",
            b"*2\r\n$1\r\na\r\n:5\r\n",
            b"%1\r\n+a\r\n*-1\r\n",
            b"|1\r\n+k\r\n+v\r\n+OK\r\n",
            b"-ERR x\r\n",
            b">2\r\n+message\r\n+x\r\n",
        ];
        for c in cases {
            assert!(
                matches!(reply(c), Frame::Whole(l, _) if l == c.len()),
                "{c:?}"
            );
            for cut in 0..c.len() {
                assert_eq!(reply(&c[..cut]), Frame::More, "{c:?} {cut}");
            }
        }
        assert_eq!(reply(b">1\r\n+x\r\n"), Frame::Whole(8, true));
        assert_eq!(reply(b"?x\r\n"), Frame::Invalid);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Frame::Whole(len, args) = request(&b) {
                prop_assert!(len <= b.len());
                for (s, e) in args {
                    prop_assert!(s <= e && e <= len);
                }
            }
            if let Frame::Whole(len, _) = reply(&b) {
                prop_assert!(len <= b.len());
            }
        }

        #[test]
        fn encoded_requests_frame_back(args in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..20), 1..6)) {
            let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
            let bytes = encode(&refs);
            prop_assert_eq!(args_of(&bytes), args);
        }
    }
}
