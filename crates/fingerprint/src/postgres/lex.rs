//! The PostgreSQL lexer: token boundaries and kinds by PostgreSQL's lexical rules.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tk {
    /// Unquoted identifier or keyword.
    Word,
    /// `"quoted identifier"` (or `U&"..."`).
    QIdent,
    /// A string constant of any form.
    Str,
    Num,
    /// `$n`.
    Param,
    /// An operator (`+`, `<=`, `::` is Punct).
    Op,
    /// `( ) [ ] , ; : . ::` and anything else.
    Punct,
    End,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Tok {
    pub(super) kind: Tk,
    pub(super) start: usize,
    pub(super) end: usize,
    /// Whitespace or a comment came before it.
    pub(super) ws: bool,
}

pub(super) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

pub(super) fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

pub(super) fn is_ident_char(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit() || b == b'$'
}

pub(super) fn is_op_char(b: u8) -> bool {
    matches!(
        b,
        b'+' | b'-'
            | b'*'
            | b'/'
            | b'<'
            | b'>'
            | b'='
            | b'~'
            | b'!'
            | b'@'
            | b'#'
            | b'%'
            | b'^'
            | b'&'
            | b'|'
            | b'`'
            | b'?'
    )
}

/// PostgreSQL's lexical rules, enough to find token boundaries. Never panics: every boundary
/// is an ASCII byte or the end, so slicing the `&str` there is valid.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lex<'a> {
    pub(super) s: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Lex<'a> {
    fn at(&self, i: usize) -> u8 {
        self.s.get(i).copied().unwrap_or(0)
    }

    /// End of a quoted run opened at `i` by `q`; a doubled quote stands for itself and, with
    /// `backslash`, `\` escapes the next byte. Unterminated: the end of the text.
    fn quoted(&self, i: usize, q: u8, backslash: bool) -> usize {
        let s = self.s;
        let mut j = i + 1;
        while j < s.len() {
            let b = s[j];
            if backslash && b == b'\\' {
                j += 2;
            } else if b == q {
                if s.get(j + 1) == Some(&q) {
                    j += 2;
                } else {
                    return j + 1;
                }
            } else {
                j += 1;
            }
        }
        s.len()
    }

    /// Length of a dollar-quote tag at `i` (`$$`, `$tag$`), if one starts there.
    fn dollar_tag(&self, i: usize) -> Option<usize> {
        let s = self.s;
        let mut j = i + 1;
        match s.get(j) {
            Some(b'$') => return Some(2),
            Some(&b) if is_ident_start(b) => j += 1,
            _ => return None,
        }
        while let Some(&b) = s.get(j) {
            if b == b'$' {
                return Some(j + 1 - i);
            }
            if !(is_ident_start(b) || b.is_ascii_digit()) {
                return None;
            }
            j += 1;
        }
        None
    }

    fn number(&self, i: usize) -> usize {
        let s = self.s;
        let digits = |mut j: usize| {
            while j < s.len() && (s[j].is_ascii_digit() || s[j] == b'_') {
                j += 1;
            }
            j
        };
        // 0x.., 0o.., 0b.. (PostgreSQL 16).
        if s[i] == b'0'
            && matches!(self.at(i + 1), b'x' | b'X' | b'o' | b'O' | b'b' | b'B')
            && self.at(i + 2).is_ascii_alphanumeric()
        {
            let mut j = i + 2;
            while j < s.len() && (s[j].is_ascii_alphanumeric() || s[j] == b'_') {
                j += 1;
            }
            return j;
        }
        let mut j = digits(i);
        if self.at(j) == b'.' && self.at(j + 1) != b'.' {
            j = digits(j + 1);
        }
        if matches!(self.at(j), b'e' | b'E') {
            let k = if matches!(self.at(j + 1), b'+' | b'-') {
                j + 2
            } else {
                j + 1
            };
            if self.at(k).is_ascii_digit() {
                j = digits(k);
            }
        }
        j
    }

    pub(super) fn next(&mut self) -> Tok {
        let (i, ws) = self.skip_trivia(self.pos);
        let start = i.min(self.s.len());
        if start >= self.s.len() {
            self.pos = self.s.len();
            return Tok {
                kind: Tk::End,
                start,
                end: start,
                ws,
            };
        }
        let (kind, end) = self.token_at(start);
        self.pos = end;
        Tok {
            kind,
            start,
            end,
            ws,
        }
    }

    /// Skips whitespace and comments from `i`: where the next token starts, and whether
    /// anything was skipped.
    #[inline(always)]
    fn skip_trivia(&self, mut i: usize) -> (usize, bool) {
        let s = self.s;
        let mut ws = false;
        loop {
            while i < s.len() && is_space(s[i]) {
                i += 1;
                ws = true;
            }
            if self.at(i) == b'-' && self.at(i + 1) == b'-' {
                i = s[i..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(s.len(), |p| i + p);
                ws = true;
            } else if self.at(i) == b'/' && self.at(i + 1) == b'*' {
                i = self.block_comment(i);
                ws = true;
            } else {
                return (i, ws);
            }
        }
    }

    /// The end of a (nested) block comment opened at `i`. Unterminated: the end of the text.
    #[inline(always)]
    fn block_comment(&self, mut i: usize) -> usize {
        let s = self.s;
        let mut depth = 0usize;
        while i < s.len() {
            if s[i] == b'/' && self.at(i + 1) == b'*' {
                depth += 1;
                i += 2;
            } else if s[i] == b'*' && self.at(i + 1) == b'/' {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    break;
                }
            } else {
                i += 1;
            }
        }
        i
    }

    /// The kind and end of the token starting at `start` (which is in the text).
    #[inline(always)]
    fn token_at(&self, start: usize) -> (Tk, usize) {
        let s = self.s;
        let b = s[start];
        match b {
            b'\'' => (Tk::Str, self.quoted(start, b'\'', false)),
            b'"' => (Tk::QIdent, self.quoted(start, b'"', false)),
            b'e' | b'E' if self.at(start + 1) == b'\'' => {
                (Tk::Str, self.quoted(start + 1, b'\'', true))
            }
            b'b' | b'B' | b'x' | b'X' | b'n' | b'N' if self.at(start + 1) == b'\'' => {
                (Tk::Str, self.quoted(start + 1, b'\'', false))
            }
            b'u' | b'U' if self.at(start + 1) == b'&' && self.at(start + 2) == b'\'' => {
                (Tk::Str, self.quoted(start + 2, b'\'', false))
            }
            b'u' | b'U' if self.at(start + 1) == b'&' && self.at(start + 2) == b'"' => {
                (Tk::QIdent, self.quoted(start + 2, b'"', false))
            }
            b'$' if self.at(start + 1).is_ascii_digit() => {
                let mut j = start + 1;
                while j < s.len() && s[j].is_ascii_digit() {
                    j += 1;
                }
                (Tk::Param, j)
            }
            b'$' => match self.dollar_tag(start) {
                Some(t) => (Tk::Str, self.dollar_quoted(start, t)),
                None => (Tk::Punct, start + 1),
            },
            b'0'..=b'9' => (Tk::Num, self.number(start)),
            b'.' if self.at(start + 1).is_ascii_digit() => (Tk::Num, self.number(start)),
            b':' if self.at(start + 1) == b':' => (Tk::Punct, start + 2),
            _ if is_ident_start(b) => {
                let mut j = start + 1;
                while j < s.len() && is_ident_char(s[j]) {
                    j += 1;
                }
                (Tk::Word, j)
            }
            _ if is_op_char(b) => (Tk::Op, self.operator(start)),
            _ => (Tk::Punct, start + 1),
        }
    }

    /// The end of a dollar-quoted string opened at `start` by a tag `t` bytes long (`$$`,
    /// `$tag$`): past the same tag again. Unterminated: the end of the text.
    #[inline(always)]
    fn dollar_quoted(&self, start: usize, t: usize) -> usize {
        let s = self.s;
        let tag = &s[start..start + t];
        let mut j = start + t;
        loop {
            if j >= s.len() {
                break s.len();
            }
            if s[j] == b'$' && s.get(j..j + t) == Some(tag) {
                break j + t;
            }
            j += 1;
        }
    }

    /// The end of an operator starting at `i`, by PostgreSQL's rules: a run of operator
    /// characters, cut before `--` or `/*`, and a multi-character operator cannot end in `+`
    /// or `-` unless it holds one of `~ ! @ # % ^ & | ` ?` (so `=-1` is `=` then `-1`).
    fn operator(&self, i: usize) -> usize {
        let s = self.s;
        let mut j = i;
        while j < s.len() && is_op_char(s[j]) {
            if j > i
                && ((s[j] == b'-' && self.at(j + 1) == b'-')
                    || (s[j] == b'/' && self.at(j + 1) == b'*'))
            {
                break;
            }
            if j == i
                && ((s[j] == b'-' && self.at(j + 1) == b'-')
                    || (s[j] == b'/' && self.at(j + 1) == b'*'))
            {
                break;
            }
            j += 1;
        }
        let j = j.max(i + 1);
        let op = &s[i..j];
        if op.len() > 1 && !op.iter().any(|b| b"~!@#%^&|`?".contains(b)) {
            let mut k = j;
            while k > i + 1 && matches!(s[k - 1], b'+' | b'-') {
                k -= 1;
            }
            return k;
        }
        j
    }
}
