//! MySQL fingerprints: dbtap's default normalization and an exact pt-query-digest 3.2.1 mode.
//!
//! See the crate documentation for the rules and for where the default mode deliberately differs
//! from pt-query-digest.

mod pt;

use crate::lex::{self, Kind, Lexer, Token};

/// dbtap's default MySQL normalization into `out` (cleared first). pt-query-digest's rules
/// (literals -> ?, IN(...)/VALUES(...) lists folded to (?+), comments stripped, case and
/// whitespace folded, LIMIT a,b / LIMIT a OFFSET b -> limit ?, digit runs in identifiers folded
/// like sbtest1 -> sbtest?, ORDER BY ... ASC dropped, UNION repeats folded, CALL foo(..) -> call foo,
/// use `db` -> use ?, mysqldump detection...) but WITHOUT pt's known bugs: arithmetic operators are
/// not swallowed with the number that follows them (`b = b + 30` -> `b = b + ?`, `a-1` -> `a-?`),
/// `IS NULL`/`IS NOT NULL` stay as they are, uppercase hex 0xFF is a literal, trailing space trimmed.
///
/// The full list of differences is in the crate documentation. One pass over the bytes; the only
/// allocation is `out` growing, so reuse it across calls.
pub fn fingerprint(sql: &str, out: &mut String) {
    let mut buf = std::mem::take(out).into_bytes();
    buf.clear();
    normalize(sql.as_bytes(), &mut buf);
    *out = crate::into_string(buf);
    // An unterminated quoted identifier is copied as is, whitespace included (`CALL \`\n`):
    // trim the ends like every other fingerprint. The admin form keeps its fixed prefix.
    if !out.as_bytes().starts_with(ADMIN) {
        let end = out.trim_end().len();
        out.truncate(end);
        let start = out.len() - out.trim_start().len();
        if start > 0 {
            out.drain(..start);
        }
    }
}

/// Exact pt-query-digest 3.2.1 (`pt-fingerprint`) behaviour, bugs included, so IDs join with theirs.
///
/// This is pt-query-digest's `QueryRewriter::fingerprint`, which also turns `true`/`false` into
/// `?`; the separate `pt-fingerprint` 3.2.1 tool lacks that one step. Feed it the query text the
/// way pt-query-digest sees it (for a slow log: without the terminating `;`).
pub fn fingerprint_pt(sql: &str, out: &mut String) {
    let mut buf = std::mem::take(out).into_bytes();
    pt::fingerprint(sql.as_bytes(), &mut buf, true);
    *out = crate::into_string(buf);
}

/// Longest chain of glued signs and comments (`-+-1`) still read as one signed literal.
const MAX_SIGNS: usize = 16;

const MYSQLDUMP: &[u8] = b"SELECT /*!40001 SQL_NO_CACHE */ * FROM `";
const ADMIN: &[u8] = b"administrator command: ";

/// Keyword classes the normalizer cares about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kw {
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

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The word `s[start..start + len]` as a little-endian integer (bytes past the word zeroed), if
/// it has 1 to 8 bytes.
#[inline(always)]
fn word8(s: &[u8], start: usize, len: usize) -> Option<u64> {
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
fn load8(s: &[u8], start: usize) -> Option<u64> {
    let bytes: [u8; 8] = s.get(start..start + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// SWAR: the high bit of each byte of `x` that is a word byte (identifier byte or `?`).
#[inline(always)]
fn word_bytes(x: u64) -> u64 {
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
fn in_range(x: u64, lo: u8, hi: u8) -> u64 {
    let low7 = x & !HIGH;
    let ge_lo = low7 + ONES * u64::from(0x80 - lo);
    let gt_hi = low7 + ONES * u64::from(0x7f - hi);
    ge_lo & !gt_hi & !x & HIGH
}

const fn kw_key(s: &[u8]) -> u64 {
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
const KW_MAGIC: u64 = 0xc8ad_434b_542f_3413;

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
        fn classify8(x: u64, len: usize) -> Kw {
            let k = x | (0x2020_2020_2020_2020 & (u64::MAX >> (64 - 8 * len)));
            let (key, kw) = KW_TABLE[(k.wrapping_mul(KW_MAGIC) >> 57) as usize];
            if key == k { kw } else { Kw::Other }
        }

        /// The keyword class of a word (ASCII case-insensitive).
        fn classify(w: &[u8]) -> Kw {
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

/// What a token is, for the list/LIMIT state machines.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Literal,
    Comma,
    Open,
    Close,
    Other,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Row {
    None,
    /// Just closed a row of a `VALUES` list.
    After,
    /// `, ` after a row; the output length before it.
    Comma(usize),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Limit {
    None,
    /// After `limit`.
    Kw,
    /// After `limit ?`; the output length there.
    Val(usize),
    /// After `limit ?,` or `limit ? offset`.
    Sep(usize),
}

/// 0: nothing; 1: `in`; 2: `value`/`values`.
type ExpectList = u8;

struct State {
    pend_ws: bool,
    gap: bool,
    prev_operand: bool,
    is_state: u8,
    expect_list: ExpectList,
    /// Open parenthesized group that may fold to `(?+)`: output length before it, its depth.
    cand: Option<(usize, u32)>,
    depth: u32,
    values_row: Option<u32>,
    row: Row,
    /// Skipping a further `VALUES` row until the depth drops back to this.
    skip: Option<u32>,
    limit: Limit,
    order_prev: bool,
    order_by: bool,
    union: bool,
    /// `!quiet()`, kept up to date by the slow path.
    busy: bool,
}

impl State {
    /// No rule is waiting for the next token: a plain word, literal or operator only needs
    /// emitting (and leaves every rule state as it is).
    #[inline(always)]
    fn quiet(&self) -> bool {
        self.row == Row::None
            && self.limit == Limit::None
            && self.cand.is_none()
            && self.expect_list == 0
            && self.is_state == 0
            && !self.order_prev
    }
}

/// Bytes that would glue with a neighbour if a comment between them vanished.
#[inline]
fn wordish(b: u8) -> bool {
    lex::is_ident(b) || b == b'?'
}

/// `last` and `first`, once the comment between them is gone, would lex as something else:
/// one word (`a/**/b`), a comment opener (`-/**/-`, `//**/*`), a comment closer, or a doubled
/// quote inside one quoted token (`` `a`/**/`b` ``).
#[inline]
fn glues(last: u8, first: u8) -> bool {
    (wordish(last) && wordish(first))
        || matches!(
            (last, first),
            (b'-', b'-')
                | (b'/', b'*')
                | (b'*', b'/')
                | (b'`', b'`')
                | (b'"', b'"')
                | (b'\'', b'\'')
        )
}

#[inline(always)]
fn sep(buf: &mut Vec<u8>, ws: bool, gap: bool, first: u8) {
    if let Some(&last) = buf.last()
        && (ws || (gap && glues(last, first)))
    {
        buf.push(b' ');
    }
}

/// Before the `?` of a string, number or signed number, which is a token of its own even where
/// it touches a word (`IN-1`, `p'a'`, `'a'1`): a space unless one is pending, so the `?` does not
/// join the word on the next pass (`in?` would be one word). A charset introducer keeps its
/// string (`_utf8mb4'u'` -> `_utf?mb??`, as pt writes it: a word either way).
#[inline]
fn sep_literal(buf: &mut Vec<u8>, ws: bool) {
    let Some(&last) = buf.last() else { return };
    if ws || (wordish(last) && !after_introducer(buf)) {
        buf.push(b' ');
    }
}

/// `buf` ends with a word that starts with `_` (a charset introducer such as `_utf?mb?`).
fn after_introducer(buf: &[u8]) -> bool {
    let start = buf.iter().rposition(|&b| !wordish(b)).map_or(0, |i| i + 1);
    buf.get(start) == Some(&b'_')
}

/// Lowercase ASCII and fold each digit run (with the hex letters and `x` that follow it, as pt
/// does) to `?`: `sbtest1` -> `sbtest?`, `12foo` -> `?oo`.
/// A word, folded; `x` is its [`word8`] load.
#[inline(always)]
fn push_word(buf: &mut Vec<u8>, w: &[u8], x: Option<u64>) {
    // Words of up to 8 bytes: lowercase (and fold) in a register, store 8 bytes at once.
    if let Some(x) = x {
        let lower = x | (in_range(x, b'A', b'Z') >> 2);
        let (out, n) = if in_range(x, b'0', b'9') == 0 {
            (lower, w.len())
        } else {
            fold8(lower, w.len())
        };
        let len = buf.len();
        buf.extend_from_slice(&out.to_le_bytes());
        buf.truncate(len + n);
        return;
    }
    push_folded(buf, w);
}

/// [`push_folded`] on a lowercased word of `len` bytes held in a `u64`: the result and its length.
#[inline]
fn fold8(x: u64, len: usize) -> (u64, usize) {
    let b = x.to_le_bytes();
    let (mut out, mut o, mut i) = (0u64, 0usize, 0usize);
    while i < len.min(8) {
        let c = b[i];
        i += 1;
        let emit = if c.is_ascii_digit() {
            while i < len.min(8) && (b[i].is_ascii_hexdigit() || b[i] == b'x') {
                i += 1;
            }
            b'?'
        } else {
            c
        };
        out |= u64::from(emit) << (8 * (o & 7));
        o += 1;
    }
    (out, o)
}

#[inline]
fn push_folded(buf: &mut Vec<u8>, w: &[u8]) {
    buf.reserve(w.len());
    let mut i = 0;
    while i < w.len() {
        let c = w[i];
        i += 1;
        if c.is_ascii_digit() {
            buf.push(b'?');
            while i < w.len() && (w[i].is_ascii_hexdigit() || (w[i] | 0x20) == b'x') {
                i += 1;
            }
        } else {
            buf.push(c.to_ascii_lowercase());
        }
    }
}

/// A quoted identifier: folded like a word, with each whitespace run inside made one space.
fn push_quoted_ident(buf: &mut Vec<u8>, q: &[u8]) {
    let mut i = 0;
    while i < q.len() {
        let start = i;
        while i < q.len() && !lex::is_space(q[i]) {
            i += 1;
        }
        push_folded(buf, &q[start..i]);
        if i < q.len() {
            buf.push(b' ');
            while i < q.len() && lex::is_space(q[i]) {
                i += 1;
            }
        }
    }
}

/// `/*db.tbl:1/2*/`, the comment pt-table-checksum and friends put in their queries.
fn toolkit_comment(c: &[u8]) -> bool {
    let Some(body) = c.strip_prefix(b"/*").and_then(|b| b.strip_suffix(b"*/")) else {
        return false;
    };
    let w = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let Some(colon) = body.iter().position(|&b| b == b':') else {
        return false;
    };
    let (name, tail) = body.split_at(colon);
    let Some(dot) = name.iter().position(|&b| b == b'.') else {
        return false;
    };
    let (a, b) = (&name[..dot], &name[dot + 1..]);
    !a.is_empty()
        && !b.is_empty()
        && a.iter().all(w)
        && b.iter().all(w)
        && tail.len() == 4
        && tail[1].is_ascii_digit()
        && tail[2] == b'/'
        && tail[3].is_ascii_digit()
}

/// Next non-comment token.
fn next_code(lx: &mut Lexer) -> Token {
    loop {
        let t = lx.next_token();
        if t.kind != Kind::Comment {
            return t;
        }
    }
}

/// Next non-comment token, and whether whitespace or a comment came before it.
fn next_code_sep(lx: &mut Lexer) -> (Token, bool, bool) {
    let (mut ws, mut comment) = (false, false);
    loop {
        let t = lx.next_token();
        ws |= t.ws_before;
        if t.kind != Kind::Comment {
            return (t, ws, comment);
        }
        comment = true;
    }
}

/// `CALL name(` or `CALL name` alone: writes `call name` (lowercased, possibly qualified) and
/// returns true; otherwise leaves `buf` as it was. Comments are read the way the general path
/// reads them, so that its output for the statements refused here is refused here too, and the
/// output is idempotent.
fn call_target(mut lx: Lexer, s: &[u8], buf: &mut Vec<u8>) -> bool {
    let (t, ws, comment) = next_code_sep(&mut lx);
    if !(ws || comment) || !matches!(t.kind, Kind::Word | Kind::QuotedIdent) {
        return false;
    }
    let mark = buf.len();
    buf.extend_from_slice(b"call ");
    buf.extend(s[t.start..t.end].iter().map(u8::to_ascii_lowercase));
    loop {
        let (t, ws, _) = next_code_sep(&mut lx);
        // `CALL p` alone (our own output for `CALL p(1)`) stays `call p`, for idempotence.
        if t.kind == Kind::End {
            return true;
        }
        if ws || t.kind != Kind::Punct {
            break;
        }
        match s[t.start] {
            b'(' => return true,
            b'.' => {
                let (t, ws, _) = next_code_sep(&mut lx);
                if ws || !matches!(t.kind, Kind::Word | Kind::QuotedIdent) {
                    break;
                }
                buf.push(b'.');
                buf.extend(s[t.start..t.end].iter().map(u8::to_ascii_lowercase));
            }
            _ => break,
        }
    }
    buf.truncate(mark);
    false
}

/// `USE db` (optionally `;`) and nothing else.
fn use_stmt(mut lx: Lexer, s: &[u8]) -> bool {
    let t = next_code(&mut lx);
    if !matches!(t.kind, Kind::Word | Kind::QuotedIdent) {
        return false;
    }
    let mut t = next_code(&mut lx);
    if t.kind == Kind::Punct && s[t.start] == b';' {
        t = next_code(&mut lx);
    }
    t.kind == Kind::End
}

/// The hot loop: while no rule waits for the next token, emits runs of simple tokens (words
/// other than tracked keywords, numbers, operators, parentheses) without going through the
/// general token handling, then hands the position back to the lexer at the first other token.
#[inline(always)]
fn fast_run(s: &[u8], lx: &mut Lexer, buf: &mut Vec<u8>, st: &mut State) {
    let n = s.len();
    let mut pos = lx.pos();
    let mut prev_operand = st.prev_operand;
    // The lexer's own notion: the last token was a word, a number or `)`.
    let mut lex_prev = false;
    let mut moved = false;
    // `ORDER` was the last token.
    let mut order_prev = false;
    // Just folded the first row of a VALUES list.
    let mut row_after = false;
    let stop = loop {
        let before = pos;
        // Usually exactly one space, or none.
        if s.get(pos) == Some(&b' ') && s.get(pos + 1).is_some_and(|&b| !lex::is_space(b)) {
            pos += 1;
        } else {
            match s[pos..].iter().position(|&b| !lex::is_space(b)) {
                Some(k) => pos += k,
                None => break before,
            }
        }
        let ws = pos != before;
        let c = s[pos];
        if lex::is_ident(c) && !c.is_ascii_digit() {
            if matches!(c | 0x20, b'x' | b'b' | b'n') && s.get(pos + 1) == Some(&b'\'') {
                break before;
            }
            // Words of up to 7 bytes: length and value from one 8-byte load.
            let loaded = load8(s, pos).map(|x| (x, !word_bytes(x) & HIGH));
            let (end, x8) = match loaded {
                Some((x, non_word)) if non_word != 0 => {
                    let len = (non_word.trailing_zeros() / 8) as usize;
                    (pos + len, Some(x & ((1u64 << (8 * len)) - 1)))
                }
                _ => {
                    let end = lex::word_end(s, pos + 1);
                    (end, word8(s, pos, end - pos))
                }
            };
            let w = &s[pos..end];
            let kw = x8.map_or(Kw::Other, |x| classify8(x, w.len()));
            let was_order = std::mem::take(&mut order_prev);
            match kw {
                Kw::Other => prev_operand = true,
                Kw::Null | Kw::True | Kw::False => {
                    sep(buf, ws, false, b'?');
                    buf.push(b'?');
                    prev_operand = true;
                    lex_prev = true;
                    pos = end;
                    moved = true;
                    continue;
                }
                Kw::Asc if st.order_by => {
                    // Dropped, with the whitespace before it; like a comment, it must not
                    // let its neighbours join (`-ASC-` -> `- -`): the general path sees to that.
                    lex_prev = true;
                    pos = end;
                    moved = true;
                    st.gap = true;
                    break pos;
                }
                Kw::Order => {
                    order_prev = true;
                    prev_operand = false;
                }
                Kw::By => {
                    st.order_by |= was_order;
                    prev_operand = false;
                }
                Kw::Union => {
                    st.union = true;
                    prev_operand = false;
                }
                Kw::Operator | Kw::Asc | Kw::Not | Kw::Offset => prev_operand = false,
                Kw::In | Kw::Values => {
                    // `in (1, 2)`, `values ('a', 3)`: fold a literal-only list right here.
                    let Some(after) = list_after(lx, s, end) else {
                        order_prev = was_order;
                        break before;
                    };
                    sep(buf, ws, false, c);
                    push_word(buf, w, x8);
                    buf.extend_from_slice(b"(?+)");
                    prev_operand = true;
                    lex_prev = true;
                    pos = after;
                    moved = true;
                    if kw == Kw::Values {
                        // Further rows: the general path drops them.
                        row_after = true;
                        break pos;
                    }
                    continue;
                }
                Kw::Limit | Kw::Is => {
                    order_prev = was_order;
                    break before;
                }
            }
            sep(buf, ws, false, c);
            push_word(buf, w, x8);
            lex_prev = true;
            pos = end;
            moved = true;
            continue;
        } else if c.is_ascii_digit() {
            // Plain digit runs here; anything else (`1.5`, `0x1f`, `12foo`) through the lexer.
            let mut end = pos + 1;
            while end < n && s[end].is_ascii_digit() {
                end += 1;
            }
            if end < n && (lex::is_ident(s[end]) || s[end] == b'.') {
                let (kind, e) = lx.number_at(pos);
                if kind != Kind::Num {
                    break before;
                }
                end = e;
            }
            sep_literal(buf, ws);
            buf.push(b'?');
            prev_operand = true;
            lex_prev = true;
            pos = end;
        } else {
            let next = s.get(pos + 1).copied().unwrap_or(0);
            match c {
                b'=' | b'<' | b'>' | b'*' | b'!' | b'%' | b'&' | b'|' | b'^' | b'~' | b':'
                | b',' | b';' | b'@' | b'(' => {
                    st.depth += u32::from(c == b'(');
                    prev_operand = false;
                    lex_prev = false;
                }
                b')' if st.values_row != Some(st.depth) => {
                    st.depth = st.depth.saturating_sub(1);
                    prev_operand = true;
                    lex_prev = true;
                }
                b'+' | b'-' if prev_operand && next != b'-' => {
                    prev_operand = false;
                    lex_prev = false;
                }
                b'.' if !next.is_ascii_digit() => {
                    prev_operand = false;
                    lex_prev = false;
                }
                _ => break before,
            }
            sep(buf, ws, false, c);
            buf.push(c);
            pos += 1;
        }
        order_prev = false;
        moved = true;
    };
    if moved {
        lx.resume(stop, lex_prev);
        st.prev_operand = prev_operand;
        st.order_prev = order_prev;
        if row_after {
            st.row = Row::After;
        }
        st.busy = order_prev || row_after;
    }
}

/// After `in`/`values` ending at `end`: if a literal-only `( ... )` group follows, the position
/// just past its `)`.
#[inline(never)]
fn list_after(lx: &Lexer, s: &[u8], end: usize) -> Option<usize> {
    let mut la = *lx;
    la.resume(end, true);
    let open = la.next_token();
    if open.kind != Kind::Punct || s[open.start] != b'(' {
        return None;
    }
    literal_group(la, s).map(|l| l.pos())
}

/// After a sign: the first token that is not a further sign or comment glued to it (bounded, so
/// a long `+-+-...` run stays linear). With `through_asc`, an `ASC` the ORDER BY rule drops is
/// looked through too, with the whitespace before it (dropped with it): once it is gone the sign
/// meets what follows (`by +ASC-1` and `by + ASC-1` -> `by ?`).
fn past_signs(lx: &mut Lexer, s: &[u8], through_asc: bool) -> Token {
    let mut t = lx.next_token();
    let mut hops = 0;
    while hops < MAX_SIGNS
        && ((!t.ws_before
            && (t.kind == Kind::Comment
                || (t.kind == Kind::Punct && matches!(s[t.start], b'+' | b'-'))))
            || (through_asc && t.kind == Kind::Word && classify(&s[t.start..t.end]) == Kw::Asc))
    {
        t = lx.next_token();
        hops += 1;
    }
    t
}

/// With the lexer just past a `(`: if the group holds only literals (as the list rule counts
/// them: strings, numbers, `?`, NULL/TRUE/FALSE, words starting with a digit or `?`, signed
/// literals) and commas up to its `)`, the lexer just past that `)`.
fn literal_group<'a>(mut lx: Lexer<'a>, s: &[u8]) -> Option<Lexer<'a>> {
    let literal = |t: &Token| match t.kind {
        Kind::Str | Kind::Num | Kind::Placeholder => true,
        Kind::Word => {
            matches!(s[t.start], b'0'..=b'9' | b'?')
                || matches!(
                    classify(&s[t.start..t.end]),
                    Kw::Null | Kw::True | Kw::False
                )
        }
        _ => false,
    };
    let mut prev_literal = false;
    loop {
        let t = lx.next_token();
        match t.kind {
            Kind::Comment => {}
            Kind::Punct => match s[t.start] {
                b',' => prev_literal = false,
                b')' => return Some(lx),
                b'+' | b'-' if !prev_literal => {
                    let t2 = past_signs(&mut lx, s, false);
                    if t2.ws_before || !literal(&t2) {
                        return None;
                    }
                    prev_literal = true;
                }
                _ => return None,
            },
            _ if literal(&t) => prev_literal = true,
            _ => return None,
        }
    }
}

fn normalize(s: &[u8], buf: &mut Vec<u8>) {
    if s.starts_with(MYSQLDUMP) {
        buf.extend_from_slice(b"mysqldump");
        return;
    }
    if s.starts_with(ADMIN) {
        buf.extend_from_slice(s);
        return;
    }
    let mut lx = Lexer::new(s, lex::MYSQL);
    let mut st = State {
        pend_ws: false,
        gap: false,
        prev_operand: false,
        is_state: 0,
        expect_list: 0,
        cand: None,
        depth: 0,
        values_row: None,
        row: Row::None,
        skip: None,
        limit: Limit::None,
        order_prev: false,
        order_by: false,
        union: false,
        busy: false,
    };
    buf.reserve(s.len() + 16);

    // `CALL p(...)` -> `call p`; `USE db` -> `use ?`.
    let lead = s.iter().copied().find(|&b| !lex::is_space(b)).unwrap_or(0);
    let mut after = lx;
    let first = if matches!(lead | 0x20, b'c' | b'u' | b'/' | b'-' | b'#') {
        next_code(&mut after)
    } else {
        Token {
            kind: Kind::End,
            start: 0,
            end: 0,
            ws_before: false,
        }
    };
    if first.kind == Kind::Word {
        let w = &s[first.start..first.end];
        if w.eq_ignore_ascii_case(b"call") {
            if call_target(after, s, buf) {
                return;
            }
        } else if w.eq_ignore_ascii_case(b"use") && use_stmt(after, s) {
            buf.extend_from_slice(b"use ?");
            return;
        }
    }

    loop {
        if !st.busy && !st.gap && !st.pend_ws && st.skip.is_none() && !lx.in_version() {
            fast_run(s, &mut lx, buf, &mut st);
        }
        let t = lx.next_token();
        match t.kind {
            Kind::End => break,
            Kind::Comment => {
                if toolkit_comment(&s[t.start..t.end]) {
                    buf.clear();
                    buf.extend_from_slice(b"percona-toolkit");
                    return;
                }
                st.pend_ws |= t.ws_before;
                st.gap = true;
                continue;
            }
            _ => {}
        }
        let ws = st.pend_ws | t.ws_before;
        st.pend_ws = false;
        let gap = std::mem::take(&mut st.gap);
        let tok = &s[t.start..t.end];

        if let Some(d0) = st.skip {
            if t.kind == Kind::Punct {
                match tok[0] {
                    b'(' => st.depth += 1,
                    b')' => {
                        st.depth = st.depth.saturating_sub(1);
                        if st.depth == d0 {
                            st.skip = None;
                            st.row = Row::After;
                            st.busy = true;
                        }
                    }
                    _ => {}
                }
            }
            continue;
        }

        let (kw, x8) = if t.kind == Kind::Word {
            let x8 = word8(s, t.start, tok.len());
            (x8.map_or(Kw::Other, |x| classify8(x, tok.len())), x8)
        } else {
            (Kw::Other, None)
        };

        // Fast path: a plain token while no rule is waiting for the next one.
        if !st.busy {
            match t.kind {
                Kind::Word if kw == Kw::Other && !matches!(tok[0], b'0'..=b'9' | b'?') => {
                    sep(buf, ws, gap, tok[0]);
                    push_word(buf, tok, x8);
                    st.prev_operand = true;
                    continue;
                }
                // SELECT, WHERE, AND...: only the sign rule looks at them.
                Kind::Word if kw == Kw::Operator => {
                    sep(buf, ws, gap, tok[0]);
                    push_word(buf, tok, x8);
                    st.prev_operand = false;
                    continue;
                }
                Kind::Str | Kind::Num | Kind::Placeholder => {
                    sep_literal(buf, ws);
                    buf.push(b'?');
                    st.prev_operand = true;
                    continue;
                }
                Kind::Punct if !matches!(tok[0], b'+' | b'-' | b')') => {
                    sep(buf, ws, gap, tok[0]);
                    buf.push(tok[0]);
                    st.prev_operand = false;
                    st.depth += u32::from(tok[0] == b'(');
                    continue;
                }
                Kind::Punct if tok[0] == b')' && st.values_row != Some(st.depth) => {
                    sep(buf, ws, gap, b')');
                    buf.push(b')');
                    st.prev_operand = true;
                    st.depth = st.depth.saturating_sub(1);
                    continue;
                }
                // A binary `+`/`-` (after an operand).
                Kind::Punct if st.prev_operand && matches!(tok[0], b'+' | b'-') => {
                    sep(buf, ws, gap, tok[0]);
                    buf.push(tok[0]);
                    st.prev_operand = false;
                    continue;
                }
                _ => {}
            }
        } else if st.cand.is_some()
            && st.row == Row::None
            && st.limit == Limit::None
            && st.expect_list == 0
            && st.is_state == 0
            && !st.order_prev
        {
            // Inside an `IN (`/`VALUES (` list that may still fold: literals and commas keep it.
            match t.kind {
                Kind::Str | Kind::Num | Kind::Placeholder => {
                    sep_literal(buf, ws);
                    buf.push(b'?');
                    st.prev_operand = true;
                    continue;
                }
                Kind::Punct if tok[0] == b',' => {
                    sep(buf, ws, gap, b',');
                    buf.push(b',');
                    st.prev_operand = false;
                    continue;
                }
                _ => {}
            }
        }

        let class = match t.kind {
            Kind::Str | Kind::Num | Kind::Placeholder => Class::Literal,
            Kind::Word => {
                match kw {
                    Kw::Null | Kw::True | Kw::False if st.is_state == 0 => Class::Literal,
                    // `12foo`, `?oo` (our own output for it): words that start like a number
                    // are literals to the list and LIMIT rules, but keep their folded text.
                    _ if matches!(tok[0], b'0'..=b'9' | b'?') => Class::Literal,
                    Kw::Asc if st.order_by => {
                        // Dropped with the whitespace before it; the states see nothing. Like a
                        // comment, it must not let its neighbours join (`-ASC-` -> `- -`).
                        st.gap = true;
                        continue;
                    }
                    _ => Class::Other,
                }
            }
            Kind::Punct => match tok[0] {
                b'(' => Class::Open,
                b')' => Class::Close,
                b',' => Class::Comma,
                // Signs glued to a literal where no operand precedes them: `= -1`, `(-'5'`, `+-1`.
                b'+' | b'-' if !st.prev_operand => {
                    let mut ahead = lx;
                    let t2 = past_signs(&mut ahead, s, st.order_by);
                    // A word starting with a digit or `?` (`1abc`, `?oo`) folds like a number; NULL, TRUE
                    // and FALSE are literals too.
                    let literal = match t2.kind {
                        Kind::Num | Kind::Str | Kind::Placeholder => true,
                        Kind::Word => {
                            matches!(s[t2.start], b'0'..=b'9' | b'?')
                                || matches!(
                                    classify(&s[t2.start..t2.end]),
                                    Kw::Null | Kw::True | Kw::False
                                )
                        }
                        _ => false,
                    };
                    if !t2.ws_before && literal {
                        lx = ahead;
                        Class::Literal
                    } else {
                        Class::Other
                    }
                }
                _ => Class::Other,
            },
            _ => Class::Other,
        };

        let pos0 = buf.len();
        // VALUES rows after the first: `, (` starts a row to skip.
        match (st.row, class) {
            (Row::After, Class::Comma) => st.row = Row::Comma(pos0),
            (Row::Comma(p), Class::Open) => {
                buf.truncate(p);
                st.row = Row::None;
                st.skip = Some(st.depth);
                st.depth += 1;
                st.expect_list = 0;
                st.limit = Limit::None;
                st.busy = !st.quiet();
                continue;
            }
            _ => st.row = Row::None,
        }

        // LIMIT a, b / LIMIT a OFFSET b: drop the separator and the second value.
        if let (Limit::Sep(p), Class::Literal) = (st.limit, class) {
            buf.truncate(p);
            // Still after `limit ?`: a malformed `LIMIT 1, 2, 3` folds whole (idempotence).
            st.limit = Limit::Val(p);
        } else {
            match class {
                Class::Literal => {
                    if t.kind == Kind::Word {
                        sep(buf, ws, gap, b'?');
                    } else {
                        sep_literal(buf, ws);
                    }
                    if t.kind == Kind::Word && kw == Kw::Other {
                        push_folded(buf, tok);
                    } else {
                        buf.push(b'?');
                    }
                }
                Class::Close => match st.cand {
                    Some((p, d)) if d == st.depth => {
                        buf.truncate(p);
                        buf.extend_from_slice(b"(?+)");
                    }
                    _ => {
                        sep(buf, ws, gap, b')');
                        buf.push(b')');
                    }
                },
                _ => {
                    sep(buf, ws, gap, tok[0]);
                    if t.kind == Kind::Word {
                        push_word(buf, tok, x8);
                    } else if t.kind == Kind::QuotedIdent {
                        push_quoted_ident(buf, tok);
                    } else {
                        buf.extend_from_slice(tok);
                    }
                }
            }
            st.limit = match (st.limit, class, kw) {
                (_, Class::Other, Kw::Limit) => Limit::Kw,
                (Limit::Kw, Class::Literal, _) => Limit::Val(buf.len()),
                (Limit::Val(p), Class::Comma, _) | (Limit::Val(p), _, Kw::Offset) => Limit::Sep(p),
                _ => Limit::None,
            };
        }

        // IN (...) / VALUES (...) candidates.
        match class {
            Class::Open => {
                st.depth += 1;
                st.cand = (st.expect_list != 0).then_some((pos0, st.depth));
                if st.expect_list == 2 && st.values_row.is_none() {
                    st.values_row = Some(st.depth);
                }
            }
            Class::Close => {
                st.cand = None;
                if st.values_row == Some(st.depth) {
                    st.values_row = None;
                    st.row = Row::After;
                }
                st.depth = st.depth.saturating_sub(1);
            }
            Class::Literal | Class::Comma => {}
            Class::Other => st.cand = None,
        }
        st.expect_list = match kw {
            Kw::In => 1,
            Kw::Values => 2,
            _ => 0,
        };

        st.is_state = match (kw, st.is_state) {
            (Kw::Is, _) => 1,
            (Kw::Not, 1) => 2,
            _ => 0,
        };
        st.order_by |= st.order_prev && kw == Kw::By;
        st.order_prev = kw == Kw::Order;
        st.union |= kw == Kw::Union;
        st.prev_operand = match class {
            Class::Literal | Class::Close => true,
            Class::Open | Class::Comma => false,
            Class::Other => match t.kind {
                Kind::Word => {
                    matches!(kw, Kw::Other | Kw::Values | Kw::Null | Kw::True | Kw::False)
                }
                Kind::QuotedIdent => true,
                _ => false,
            },
        };
        st.busy = !st.quiet();
    }
    if st.union {
        pt::union_fold(buf, 8);
    }
    // Only an unterminated quoted identifier can end in whitespace.
    while buf.last() == Some(&b' ') {
        buf.pop();
    }
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
    use super::{in_range, push_word, word8};

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
