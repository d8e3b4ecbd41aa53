//! Single-pass byte tokenizer for SQL text, shared by the dialect normalizers.
//!
//! The lexer never allocates and never panics: every token boundary it reports lies on an ASCII
//! byte or at the end of the input, so slicing a `&str` at those offsets is always valid UTF-8.
//! Bytes >= 0x80 (the parts of multi-byte UTF-8 characters) are identifier characters, as in
//! MySQL and PostgreSQL; inside quotes and comments they are skipped over.
//!
//! Dialect differences are switches in [`Dialect`] so a PostgreSQL normalizer can reuse it.

/// What kind of token the lexer found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Unquoted identifier or keyword: `[A-Za-z0-9_$\x80-\xff]+` not starting like a number
    /// (words that start with digits such as `12foo` are words too), plus any `?` glued to it.
    Word,
    /// Quoted identifier (`` `x` `` in MySQL).
    QuotedIdent,
    /// String literal, including `x'..'`, `b'..'`, `n'..'` prefixed forms.
    Str,
    /// Numeric literal: integer, decimal, exponent, `0x..` hex or `0b..` bits.
    Num,
    /// `?` placeholder.
    Placeholder,
    /// Any other single ASCII byte.
    Punct,
    /// `/* .. */`, `-- ..` or `# ..` comment (version comments excepted).
    Comment,
    /// `/*!` opening a MySQL version comment, whose content is SQL.
    VersionOpen,
    /// `*/` closing a version comment.
    VersionClose,
    /// End of input.
    End,
}

/// A token: its kind, byte range in the input and whether whitespace preceded it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
    /// Whitespace (not comments: those are tokens) between the previous token and this one.
    pub ws_before: bool,
}

/// Dialect switches.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dialect {
    /// `#` starts a comment to end of line.
    pub hash_comments: bool,
    /// Backslash escapes the next byte inside string literals.
    pub backslash_escapes: bool,
    /// `"..."` is a string literal (else a quoted identifier).
    pub double_quote_string: bool,
    /// `` `..` `` is a quoted identifier.
    pub backtick_ident: bool,
    /// `/*! .. */` is a version comment whose content is lexed as SQL.
    pub version_comments: bool,
}

/// MySQL's default lexical rules (no `ANSI_QUOTES`, no `NO_BACKSLASH_ESCAPES`). Like
/// pt-query-digest, `--` starts a comment even when no space follows it.
pub(crate) const MYSQL: Dialect = Dialect {
    hash_comments: true,
    backslash_escapes: true,
    double_quote_string: true,
    backtick_ident: true,
    version_comments: true,
};

const SPACE: u8 = 1;
const IDENT: u8 = 2;
const WORD: u8 = 4;

/// Byte classes: [`SPACE`], [`IDENT`], [`WORD`] (identifier bytes and `?`).
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        if matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
            t[i] = SPACE;
        }
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80 {
            t[i] = IDENT | WORD;
        }
        if b == b'?' {
            t[i] = WORD;
        }
        i += 1;
    }
    t
};

/// ASCII whitespace as Perl's `\s` sees it in a byte string: space, `\t`, `\n`, `\x0b`, `\x0c`, `\r`.
#[inline]
pub(crate) fn is_space(b: u8) -> bool {
    const MASK: u64 = 1 << b' ' | 1 << b'\t' | 1 << b'\n' | 1 << 0x0b | 1 << 0x0c | 1 << b'\r';
    b <= b' ' && (MASK >> b) & 1 != 0
}

/// Identifier byte: ASCII alphanumeric, `_`, `$` or any byte of a multi-byte UTF-8 character.
#[inline]
pub(crate) fn is_ident(b: u8) -> bool {
    CLASS[usize::from(b)] & IDENT != 0
}

/// The tokenizer. `Copy`, so a caller can look ahead by copying it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
    d: Dialect,
    in_version: bool,
    /// The previous non-comment token is a name or a number (so `t.5` is not a number).
    prev_operand: bool,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(s: &'a [u8], d: Dialect) -> Self {
        Lexer {
            s,
            pos: 0,
            d,
            in_version: false,
            prev_operand: false,
        }
    }

    /// Where the next token (or the whitespace before it) starts.
    #[inline(always)]
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Inside a `/*! ... */` version comment.
    #[inline(always)]
    pub(crate) fn in_version(&self) -> bool {
        self.in_version
    }

    /// Continue at `pos` after a caller scanned simple tokens itself; `prev_operand`: the last of
    /// them was a word, a number or `)`.
    #[inline(always)]
    pub(crate) fn resume(&mut self, pos: usize, prev_operand: bool) {
        self.pos = pos;
        self.prev_operand = prev_operand;
    }

    /// Lexes the number or digit-led word starting at `start` (a digit): its kind and end.
    #[inline(always)]
    pub(crate) fn number_at(&self, start: usize) -> (Kind, usize) {
        let mut l = *self;
        let k = l.number_or_word(start);
        (k, l.pos)
    }

    #[inline]
    fn at(&self, i: usize) -> u8 {
        self.s.get(i).copied().unwrap_or(0)
    }

    /// The next token. After the end it keeps returning [`Kind::End`].
    #[inline(always)]
    pub(crate) fn next_token(&mut self) -> Token {
        let s = self.s;
        let n = s.len();
        let mut start = self.pos;
        while start < n && is_space(s[start]) {
            start += 1;
        }
        let ws = start != self.pos;
        self.pos = start;
        if start >= n {
            return Token {
                kind: Kind::End,
                start: n,
                end: n,
                ws_before: ws,
            };
        }
        let c = s[start];
        let kind = match c {
            b'\'' => {
                self.pos = self.quoted(start + 1, b'\'', self.d.backslash_escapes);
                Kind::Str
            }
            b'"' => self.double_quoted(start),
            b'`' if self.d.backtick_ident => {
                self.pos = self.quoted(start + 1, b'`', false);
                Kind::QuotedIdent
            }
            b'0'..=b'9' => self.number_or_word(start),
            // `.5` is a number unless it qualifies a name right before it (`t.5col`).
            b'.' if (ws || !self.prev_operand) && self.at(start + 1).is_ascii_digit() => {
                self.decimal(start)
            }
            // `?` glued to identifier bytes is part of a word: normalized output such as
            // `sbtest?` or `?oo` then lexes back to the same word.
            b'?' if is_ident(self.at(start + 1)) => {
                self.pos = word_end(s, start + 1);
                Kind::Word
            }
            b'?' => {
                self.pos = start + 1;
                Kind::Placeholder
            }
            b'#' if self.d.hash_comments => {
                self.pos = line_end(s, start);
                Kind::Comment
            }
            b'-' if self.at(start + 1) == b'-' => {
                self.pos = line_end(s, start);
                Kind::Comment
            }
            b'/' if self.at(start + 1) == b'*' => self.block_comment(start),
            b'*' if self.in_version && self.at(start + 1) == b'/' => {
                self.pos = start + 2;
                self.in_version = false;
                Kind::VersionClose
            }
            b'x' | b'X' | b'b' | b'B' | b'n' | b'N' if self.at(start + 1) == b'\'' => {
                self.pos = self.quoted(start + 2, b'\'', self.d.backslash_escapes);
                Kind::Str
            }
            c if is_ident(c) => {
                self.pos = word_end(s, start + 1);
                Kind::Word
            }
            _ => {
                self.pos = start + 1;
                Kind::Punct
            }
        };
        match kind {
            Kind::Comment => {}
            Kind::Punct => self.prev_operand = c == b')',
            _ => self.prev_operand = matches!(kind, Kind::Word | Kind::QuotedIdent | Kind::Num),
        }
        Token {
            kind,
            start,
            end: self.pos,
            ws_before: ws,
        }
    }

    /// A `"..."` at `start`: a string or a quoted identifier, as the dialect has it.
    #[inline(always)]
    fn double_quoted(&mut self, start: usize) -> Kind {
        if self.d.double_quote_string {
            self.pos = self.quoted(start + 1, b'"', self.d.backslash_escapes);
            Kind::Str
        } else {
            self.pos = self.quoted(start + 1, b'"', false);
            Kind::QuotedIdent
        }
    }

    /// A `/*` at `start`: the opening of a `/*! ... */` version comment (where the dialect has
    /// them) or a whole comment, unterminated ones to the end.
    #[inline(always)]
    fn block_comment(&mut self, start: usize) -> Kind {
        if self.d.version_comments && self.at(start + 2) == b'!' {
            self.pos = start + 3;
            self.in_version = true;
            Kind::VersionOpen
        } else {
            self.pos = match find2(self.s, start + 2, b'*', b'/') {
                Some(i) => i + 2,
                None => self.s.len(),
            };
            Kind::Comment
        }
    }

    /// End (exclusive) of a quoted token whose content starts at `i`; doubled quotes continue it.
    /// Unterminated: the end of input.
    #[inline]
    fn quoted(&self, mut i: usize, q: u8, escapes: bool) -> usize {
        let s = self.s;
        let n = s.len();
        while i < n {
            let found = if escapes {
                memchr::memchr2(q, b'\\', &s[i..])
            } else {
                memchr::memchr(q, &s[i..])
            };
            let Some(off) = found else {
                return n;
            };
            i += off;
            if s[i] != q {
                i += 2; // backslash and the byte it escapes
                continue;
            }
            if i + 1 < n && s[i + 1] == q {
                i += 2;
                continue;
            }
            return i + 1;
        }
        n
    }

    fn number_or_word(&mut self, start: usize) -> Kind {
        let s = self.s;
        if s[start] == b'0' {
            let p = self.at(start + 1);
            let digit_ok: Option<fn(u8) -> bool> = match p {
                b'x' => Some(|b: u8| b.is_ascii_hexdigit()),
                b'b' => Some(|b: u8| b == b'0' || b == b'1'),
                _ => None,
            };
            if let Some(ok) = digit_ok {
                if ok(self.at(start + 2)) {
                    let mut i = start + 3;
                    while i < s.len() && ok(s[i]) {
                        i += 1;
                    }
                    if !is_ident(self.at(i)) {
                        self.pos = i;
                        return Kind::Num;
                    }
                }
                self.pos = word_end(s, start + 1);
                return Kind::Word;
            }
        }
        self.decimal(start)
    }

    /// `digits [. digits] [e[+-]digits]` or `.digits ...`; a run of digits followed by identifier
    /// bytes is a word (`12foo`, `1e5x`).
    fn decimal(&mut self, start: usize) -> Kind {
        let s = self.s;
        let n = s.len();
        let mut i = start;
        while i < n && s[i].is_ascii_digit() {
            i += 1;
        }
        let mut dot = false;
        if i < n && s[i] == b'.' {
            dot = true;
            i += 1;
            while i < n && s[i].is_ascii_digit() {
                i += 1;
            }
        }
        if i < n && (s[i] == b'e' || s[i] == b'E') {
            let mut j = i + 1;
            if j < n && (s[j] == b'+' || s[j] == b'-') {
                j += 1;
            }
            if j < n && s[j].is_ascii_digit() {
                while j < n && s[j].is_ascii_digit() {
                    j += 1;
                }
                i = j;
            }
        }
        if !dot && is_ident(self.at(i)) {
            self.pos = word_end(s, i);
            return Kind::Word;
        }
        self.pos = i;
        Kind::Num
    }
}

/// End of a word: identifier bytes, and `?` glued to them.
#[inline(always)]
pub(crate) fn word_end(s: &[u8], i: usize) -> usize {
    match s[i..]
        .iter()
        .position(|&b| CLASS[usize::from(b)] & WORD == 0)
    {
        Some(p) => i + p,
        None => s.len(),
    }
}

/// Position of the `\n` ending the line that contains `i`, or the end of input.
#[inline]
fn line_end(s: &[u8], i: usize) -> usize {
    match memchr::memchr(b'\n', &s[i..]) {
        Some(p) => i + p,
        None => s.len(),
    }
}

/// First position `>= from` where `a` is followed by `b`.
#[inline]
pub(crate) fn find2(s: &[u8], from: usize, a: u8, b: u8) -> Option<usize> {
    let mut i = from;
    while i < s.len() {
        i += memchr::memchr(a, &s[i..])?;
        if s.get(i + 1) == Some(&b) {
            return Some(i);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(sql: &str) -> Vec<(Kind, &str)> {
        let mut lx = Lexer::new(sql.as_bytes(), MYSQL);
        let mut v = Vec::new();
        loop {
            let t = lx.next_token();
            if t.kind == Kind::End {
                return v;
            }
            v.push((t.kind, &sql[t.start..t.end]));
        }
    }

    #[test]
    fn tokens() {
        use Kind::*;
        assert_eq!(
            kinds("SELECT a,`b``c` FROM t1 WHERE x='it''s\\'' AND y=-1.5e3 -- c"),
            vec![
                (Word, "SELECT"),
                (Word, "a"),
                (Punct, ","),
                (QuotedIdent, "`b``c`"),
                (Word, "FROM"),
                (Word, "t1"),
                (Word, "WHERE"),
                (Word, "x"),
                (Punct, "="),
                (Str, "'it''s\\''"),
                (Word, "AND"),
                (Word, "y"),
                (Punct, "="),
                (Punct, "-"),
                (Num, "1.5e3"),
                (Comment, "-- c"),
            ]
        );
        assert_eq!(
            kinds("/*!40001 x */ 0x1F 0b2 12foo t.5 .5 X'AB' ?"),
            vec![
                (VersionOpen, "/*!"),
                (Num, "40001"),
                (Word, "x"),
                (VersionClose, "*/"),
                (Num, "0x1F"),
                (Word, "0b2"),
                (Word, "12foo"),
                (Word, "t"),
                (Punct, "."),
                (Num, "5"),
                (Num, ".5"),
                (Str, "X'AB'"),
                (Placeholder, "?"),
            ]
        );
        assert_eq!(kinds("'abc"), vec![(Str, "'abc")]);
        assert_eq!(kinds("'ab\\"), vec![(Str, "'ab\\")]);
        assert_eq!(kinds("/* x"), vec![(Comment, "/* x")]);
    }
}
