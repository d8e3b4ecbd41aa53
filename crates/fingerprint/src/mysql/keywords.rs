//! Keyword classes of MySQL words, read with SWAR loads: a word of up to 8 bytes is one `u64`,
//! classified by a perfect hash and lowercased in a register.

/// Keyword classes the normalizer cares about.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kw {
    Null,
    True,
    False,
    In,
    Values,
    Limit,
    Offset,
    Order,
    By,
    Asc,
    Is,
    Not,
    Union,
    /// A keyword after which `-1` is a negative number, not a subtraction.
    Operator,
    /// Anything else: an identifier or a keyword we do not track.
    Other,
}

pub(super) const ONES: u64 = 0x0101_0101_0101_0101;
pub(super) const HIGH: u64 = 0x8080_8080_8080_8080;

/// The word `s[start..start + len]` as a little-endian integer (bytes past the word zeroed), if
/// it has 1 to 8 bytes.
#[inline(always)]
pub(super) fn word8(s: &[u8], start: usize, len: usize) -> Option<u64> {
    if len == 0 || len > 8 {
        return None;
    }
    let mask = if len == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * len)) - 1
    };
    if let Some(b) = s.get(start..start + 8) {
        let bytes: [u8; 8] = b.try_into().ok()?;
        return Some(u64::from_le_bytes(bytes) & mask);
    }
    let mut x = 0u64;
    for (i, &b) in s.get(start..start + len)?.iter().enumerate() {
        x |= u64::from(b) << (8 * i);
    }
    Some(x)
}

/// 8 bytes from `start` as a little-endian integer, if there are 8.
#[inline(always)]
pub(super) fn load8(s: &[u8], start: usize) -> Option<u64> {
    let bytes: [u8; 8] = s.get(start..start + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// SWAR: the high bit of each byte of `x` that is a word byte (identifier byte or `?`).
#[inline(always)]
pub(super) fn word_bytes(x: u64) -> u64 {
    let letters = in_range(x | 0x2020_2020_2020_2020, b'a', b'z');
    letters
        | in_range(x, b'0', b'9')
        | in_range(x, b'_', b'_')
        | in_range(x, b'$', b'$')
        | in_range(x, b'?', b'?')
        | (x & HIGH)
}

/// SWAR: the high bit of each byte of `x` (ASCII bytes only) that lies in `lo..=hi`.
#[inline(always)]
pub(super) fn in_range(x: u64, lo: u8, hi: u8) -> u64 {
    let low7 = x & !HIGH;
    let ge_lo = low7 + ONES * u64::from(0x80 - lo);
    let gt_hi = low7 + ONES * u64::from(0x7f - hi);
    ge_lo & !gt_hi & !x & HIGH
}

pub(super) const fn kw_key(s: &[u8]) -> u64 {
    let mut k = 0u64;
    let mut i = s.len();
    while i > 0 {
        i -= 1;
        k = (k << 8) | s[i] as u64;
    }
    k
}

/// Multiplier of the perfect hash of the keyword keys into 128 slots (found by search; the
/// `keywords` unit test checks there is no collision).
pub(super) const KW_MAGIC: u64 = 0xc8ad_434b_542f_3413;

macro_rules! keywords {
    ($($lit:literal => $kw:expr,)*) => {
        const KEYWORDS: &[(u64, Kw)] = &[$((kw_key($lit), $kw),)*];

        static KW_TABLE: [(u64, Kw); 128] = {
            let mut t = [(0u64, Kw::Other); 128];
            let mut i = 0;
            while i < KEYWORDS.len() {
                let (k, kw) = KEYWORDS[i];
                t[(k.wrapping_mul(KW_MAGIC) >> 57) as usize] = (k, kw);
                i += 1;
            }
            t
        };

        /// The keyword class of a word of `len` bytes, 1 to 8, given as [`word8`] loads it.
        #[inline(always)]
        pub(super) fn classify8(x: u64, len: usize) -> Kw {
            let k = x | (0x2020_2020_2020_2020 & (u64::MAX >> (64 - 8 * len)));
            let (key, kw) = KW_TABLE[(k.wrapping_mul(KW_MAGIC) >> 57) as usize];
            if key == k { kw } else { Kw::Other }
        }

        /// The keyword class of a word (ASCII case-insensitive).
        pub(super) fn classify(w: &[u8]) -> Kw {
            match word8(w, 0, w.len()) {
                Some(x) => classify8(x, w.len()),
                None => Kw::Other,
            }
        }
    };
}

keywords! {
    b"in" => Kw::In,
    b"is" => Kw::Is,
    b"by" => Kw::By,
    b"or" => Kw::Operator,
    b"on" => Kw::Operator,
    b"asc" => Kw::Asc,
    b"not" => Kw::Not,
    b"and" => Kw::Operator,
    b"xor" => Kw::Operator,
    b"div" => Kw::Operator,
    b"mod" => Kw::Operator,
    b"all" => Kw::Operator,
    b"any" => Kw::Operator,
    b"null" => Kw::Null,
    b"true" => Kw::True,
    b"when" => Kw::Operator,
    b"then" => Kw::Operator,
    b"else" => Kw::Operator,
    b"like" => Kw::Operator,
    b"case" => Kw::Operator,
    b"some" => Kw::Operator,
    b"false" => Kw::False,
    b"value" => Kw::Values,
    b"limit" => Kw::Limit,
    b"order" => Kw::Order,
    b"union" => Kw::Union,
    b"where" => Kw::Operator,
    b"rlike" => Kw::Operator,
    b"until" => Kw::Operator,
    b"values" => Kw::Values,
    b"offset" => Kw::Offset,
    b"select" => Kw::Operator,
    b"return" => Kw::Operator,
    b"having" => Kw::Operator,
    b"regexp" => Kw::Operator,
    b"elseif" => Kw::Operator,
    b"escape" => Kw::Operator,
    b"between" => Kw::Operator,
    b"default" => Kw::Operator,
    b"interval" => Kw::Operator,
    b"distinct" => Kw::Operator,
}

#[cfg(test)]
mod tests {
    use super::{Kw, classify};

    #[test]
    fn keywords() {
        // The perfect hash has no collision: every keyword finds itself.
        for &(k, kw) in super::KEYWORDS {
            let w = k.to_le_bytes();
            let len = w.iter().position(|&b| b == 0).unwrap_or(8);
            assert!(classify(&w[..len]) == kw, "{:?}", &w[..len]);
            assert!(classify(&w[..len].to_ascii_uppercase()) == kw);
        }
        assert!(classify(b"SELECT") == Kw::Operator);
        assert!(classify(b"Null") == Kw::Null);
        assert!(classify(b"VALUES") == Kw::Values);
        assert!(classify(b"interval") == Kw::Operator);
        for w in [
            &b"nul"[..],
            b"nulls",
            b"selec_",
            b"in_",
            b"_in",
            b"i",
            b"",
            b"intervals",
            b"NUL\x0c",
        ] {
            assert!(classify(w) == Kw::Other, "{w:?}");
        }
        // Bytes that `| 0x20` could confuse with letters do not match.
        assert!(classify(b"N@LL") == Kw::Other);
        assert!(classify(b"NU\xccL") == Kw::Other);
    }
}

#[cfg(test)]
mod swar_tests {
    use super::super::emit::push_word;
    use super::{in_range, word8};

    #[test]
    fn ranges() {
        let x = u64::from_le_bytes(*b"aZ09@[/:");
        assert_eq!(in_range(x, b'0', b'9'), 0x80 << 16 | 0x80 << 24);
        assert_eq!(in_range(x, b'A', b'Z'), 0x80 << 8);
        let y = u64::from_le_bytes([0xc3, 0xa9, b'A', 0x80, 0xff, b'z', b'9', 0]);
        assert_eq!(in_range(y, b'A', b'Z'), 0x80 << 16);
        assert_eq!(in_range(y, b'0', b'9'), 0x80 << 48);
    }

    #[test]
    fn word_bytes_match_the_lexer() {
        for b in 0..=255u8 {
            let x = u64::from(b) << 16 | u64::from(b'a');
            let want = crate::lex::is_ident(b) || b == b'?';
            assert_eq!(super::word_bytes(x) & (0x80 << 16) != 0, want, "{b:#x}");
        }
    }

    #[test]
    fn words() {
        let s = b"SELECT Ab_c\xc3\xa9 t1 x ABCDEFGH ABCDEFGHI and-some-padding";
        let mut buf = Vec::new();
        for w in s.split(|&b| b == b' ') {
            let start = w.as_ptr() as usize - s.as_ptr() as usize;
            push_word(&mut buf, w, word8(s, start, w.len()));
            buf.push(b'|');
        }
        assert_eq!(
            &buf[..],
            &b"select|ab_c\xc3\xa9|t?|x|abcdefgh|abcdefghi|and-some-padding|"[..]
        );
        assert_eq!(word8(b"abc", 0, 3), Some(0x636261));
        assert_eq!(word8(b"abc", 0, 0), None);
    }
}
