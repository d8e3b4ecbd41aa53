//! PostgreSQL fingerprints: the statement as pg_stat_statements shows it, and a 64-bit group key
//! on which a simple-protocol query and the same statement sent through the extended protocol
//! agree.
//!
//! [`fingerprint`] writes the display text into `out`:
//!
//! * constants become `$1`, `$2`... in order of appearance, and parameters already in the text
//!   are renumbered in the same sequence (a parameter used twice keeps one number). Constants
//!   are numbers, strings (`'..'`, `E'..'`, `B'..'`, `X'..'`, `N'..'`, `U&'..'`, dollar-quoted
//!   `$tag$..$tag$`), `NULL`, `TRUE`, `FALSE` and `ALL` after `LIMIT`, as PostgreSQL's parser
//!   sees them: a unary minus belongs to its number (`id = -5`, `- 2`), a cast stays outside
//!   (`'{}'::jsonb` -> `$1::jsonb`), `IS [NOT] NULL` / `IS [NOT] TRUE` are tests, not
//!   constants, and the column numbers of `ORDER BY 1` / `GROUP BY 2` stay;
//! * `IN (...)` and `ARRAY[...]` lists of two or more constants or parameters fold the way
//!   PostgreSQL 18 shows them: `IN ($1 /*, ... */)`; a one-element list stays `IN ($1)`, and
//!   `VALUES` rows are not folded;
//! * comments are removed, each run of whitespace becomes one space, a trailing `;` is dropped;
//!   case is kept.
//!
//! Unlike pg_stat_statements, which keeps the statement's own comments and spacing, the text is
//! cleaned, so that statements differing only there share a group.
//!
//! The returned hash is of a canonical form: keywords and unquoted identifiers case-folded
//! (a double-quoted identifier that needs no quotes is the same name: `"id"` is `id`), constants
//! and parameters one symbol whatever their number, whitespace and comments ignored. So
//! `SELECT * FROM t WHERE id = 5` and `select * from t where id = $1` share it. The hash is
//! FNV-1a with a final mix, stable across runs, platforms and releases.
//!
//! One hand-written pass over the bytes (with short lookaheads for lists); nothing is allocated
//! beyond the growth of `out`, so reuse it across calls.

/// Normalizes `sql` into `out` (cleared first) and returns the group hash.
pub fn fingerprint(sql: &str, out: &mut String) -> u64 {
    out.clear();
    let mut n = Normalizer {
        s: sql.as_bytes(),
        out,
        hash: Fnv::new(),
        next_param: 0,
        map: [0; MAP_LEN],
        ws: false,
        prev: Prev::Start,
        depth: 0,
        by_depth: None,
        by_item: false,
        inner_semis: 0,
    };
    n.run();
    n.hash.finish()
}

/// Existing parameters `$1..$MAP_LEN` keep one new number each; higher ones get a fresh number
/// at every use.
const MAP_LEN: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tk {
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
struct Tok {
    kind: Tk,
    start: usize,
    end: usize,
    /// Whitespace or a comment came before it.
    ws: bool,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_char(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit() || b == b'$'
}

fn is_op_char(b: u8) -> bool {
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
struct Lex<'a> {
    s: &'a [u8],
    pos: usize,
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

    fn next(&mut self) -> Tok {
        let s = self.s;
        let mut ws = false;
        let mut i = self.pos;
        // Whitespace and comments.
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
                ws = true;
            } else {
                break;
            }
        }
        let start = i.min(s.len());
        if start >= s.len() {
            self.pos = s.len();
            return Tok {
                kind: Tk::End,
                start,
                end: start,
                ws,
            };
        }
        let b = s[start];
        let (kind, end) = match b {
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
                Some(t) => {
                    let tag = &s[start..start + t];
                    let mut j = start + t;
                    let end = loop {
                        if j >= s.len() {
                            break s.len();
                        }
                        if s[j] == b'$' && s.get(j..j + t) == Some(tag) {
                            break j + t;
                        }
                        j += 1;
                    };
                    (Tk::Str, end)
                }
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
        };
        self.pos = end;
        Tok {
            kind,
            start,
            end,
            ws,
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

/// What came before, for the few places where it matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prev {
    Start,
    /// A name, constant, parameter or closing bracket: a `-` after it subtracts.
    Operand,
    /// An operator, opening bracket, comma, or a keyword after which an expression starts.
    ExprStart,
    Is,
    /// `IS NOT`: `NULL`, `TRUE`, `FALSE` after it are tests.
    IsNot,
    /// A bare `NOT`: `NULL` after it is a constraint (`NOT NULL`).
    Not,
    Limit,
    /// `ORDER` or `GROUP`, waiting for `BY`.
    OrderGroup,
    Other,
}

fn kw(w: &[u8], k: &[u8]) -> bool {
    w.eq_ignore_ascii_case(k)
}

/// Keywords after which an expression starts (so `-5` is a negative constant).
fn starts_expression(w: &[u8]) -> bool {
    const K: [&[u8]; 22] = [
        b"select",
        b"where",
        b"and",
        b"or",
        b"then",
        b"else",
        b"when",
        b"case",
        b"between",
        b"like",
        b"ilike",
        b"offset",
        b"return",
        b"returning",
        b"having",
        b"on",
        b"distinct",
        b"from",
        b"to",
        b"by",
        b"set",
        b"values",
    ];
    K.iter().any(|k| kw(w, k))
}

/// Words that end an `ORDER BY` / `GROUP BY` item or list.
fn ends_by_item(w: &[u8]) -> bool {
    const K: [&[u8]; 15] = [
        b"asc",
        b"desc",
        b"nulls",
        b"using",
        b"limit",
        b"offset",
        b"fetch",
        b"for",
        b"having",
        b"window",
        b"union",
        b"intersect",
        b"except",
        b"order",
        b"returning",
    ];
    K.iter().any(|k| kw(w, k))
}

/// FNV-1a, 64 bits, with a final avalanche.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn byte(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.byte(x);
        }
    }
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

// Canonical token classes in the hash stream.
const H_WORD: u8 = 1;
const H_QIDENT: u8 = 2;
const H_CONST: u8 = 3;
const H_LIST: u8 = 4;
const H_NUM: u8 = 5;
const H_SYM: u8 = 6;
const H_END: u8 = 0xFF;

struct Normalizer<'a, 'o> {
    s: &'a [u8],
    out: &'o mut String,
    hash: Fnv,
    next_param: u32,
    map: [u16; MAP_LEN],
    /// Whitespace (or a comment) is pending before the next output token.
    ws: bool,
    prev: Prev,
    depth: usize,
    /// Inside an `ORDER BY` / `GROUP BY` list at this bracket depth.
    by_depth: Option<usize>,
    /// The next token starts an item of that list.
    by_item: bool,
    /// Semicolons before this offset are known not to be trailing.
    inner_semis: usize,
}

impl Normalizer<'_, '_> {
    fn sep(&mut self, ws: bool) {
        if (ws || self.ws) && !self.out.is_empty() {
            self.out.push(' ');
        }
        self.ws = false;
    }

    fn copy(&mut self, t: Tok) {
        self.sep(t.ws);
        let s = self.s;
        // Token boundaries are ASCII bytes or the ends: always char boundaries.
        let txt = std::str::from_utf8(s.get(t.start..t.end).unwrap_or(&[])).unwrap_or("");
        self.out.push_str(txt);
    }

    fn push_number(&mut self, n: u32) {
        self.out.push('$');
        let mut buf = [0u8; 10];
        let mut i = buf.len();
        let mut v = n;
        loop {
            i -= 1;
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for &d in &buf[i..] {
            self.out.push(char::from(d));
        }
    }

    fn fresh(&mut self) -> u32 {
        self.next_param += 1;
        self.next_param
    }

    /// A constant (or parameter): `$n` in the text, one symbol in the hash.
    fn constant(&mut self, ws: bool, n: u32) {
        self.sep(ws);
        // `x'1'` must not become the identifier `x$1`.
        if self
            .out
            .as_bytes()
            .last()
            .is_some_and(|&b| is_ident_char(b))
        {
            self.out.push(' ');
        }
        self.push_number(n);
        self.hash.byte(H_CONST);
        self.hash.byte(H_END);
        self.prev = Prev::Operand;
    }

    fn param_number(&mut self, t: Tok) -> u32 {
        let digits = self.s.get(t.start + 1..t.end).unwrap_or(&[]);
        let mut v: usize = 0;
        for &d in digits {
            v = v.saturating_mul(10).saturating_add(usize::from(d - b'0'));
        }
        let slot = v.checked_sub(1).filter(|&i| i < MAP_LEN);
        match slot.and_then(|i| self.map.get(i)) {
            Some(&known) if known != 0 => u32::from(known),
            _ => {
                let n = self.fresh();
                if let (Some(i), Ok(x)) = (slot, u16::try_from(n))
                    && let Some(m) = self.map.get_mut(i)
                {
                    *m = x;
                }
                n
            }
        }
    }

    fn hash_word(&mut self, w: &[u8]) {
        self.hash.byte(H_WORD);
        for &b in w {
            self.hash.byte(b.to_ascii_lowercase());
        }
        self.hash.byte(H_END);
    }

    fn hash_tok(&mut self, class: u8, b: &[u8]) {
        self.hash.byte(class);
        self.hash.bytes(b);
        self.hash.byte(H_END);
    }

    /// Whether the text after a `(` or `[` at `lex` is a list of two or more constants or
    /// parameters (each optionally cast with `::type`) closed by `close`. Returns the number of
    /// elements and the lexer after the closing bracket.
    fn const_list<'l>(&self, mut lex: Lex<'l>, close: u8) -> Option<(usize, Lex<'l>)> {
        let mut count = 0usize;
        loop {
            let mut t = lex.next();
            if t.kind == Tk::Op && self.s.get(t.start..t.end) == Some(b"-") {
                t = lex.next();
                if t.kind != Tk::Num {
                    return None;
                }
            }
            let w = self.s.get(t.start..t.end).unwrap_or(&[]);
            let ok = matches!(t.kind, Tk::Num | Tk::Str | Tk::Param)
                || (t.kind == Tk::Word && (kw(w, b"null") || kw(w, b"true") || kw(w, b"false")));
            if !ok {
                return None;
            }
            count += 1;
            let mut t = lex.next();
            // Casts: `::name`, `::name(n)`, `::name[]`, repeated.
            while t.kind == Tk::Punct && self.s.get(t.start..t.end) == Some(b"::") {
                let ty = lex.next();
                if ty.kind != Tk::Word && ty.kind != Tk::QIdent {
                    return None;
                }
                t = lex.next();
                loop {
                    let p = self.s.get(t.start..t.end).unwrap_or(&[]);
                    if t.kind == Tk::Word {
                        // Multi-word types: `double precision`, `character varying`.
                        t = lex.next();
                    } else if p == b"(" {
                        let n = lex.next();
                        let c = lex.next();
                        if n.kind != Tk::Num || self.s.get(c.start..c.end) != Some(b")") {
                            return None;
                        }
                        t = lex.next();
                    } else if p == b"[" {
                        let c = lex.next();
                        if self.s.get(c.start..c.end) != Some(b"]") {
                            return None;
                        }
                        t = lex.next();
                    } else {
                        break;
                    }
                }
            }
            let p = self.s.get(t.start..t.end).unwrap_or(&[]);
            if t.kind != Tk::Punct {
                return None;
            }
            if p == b"," {
                continue;
            }
            if p == [close] {
                return (count >= 2).then_some((count, lex));
            }
            return None;
        }
    }

    /// `IN (` or `ARRAY[` at `open`: folds a constant list into `$n /*, ... */`.
    fn try_fold(&mut self, lex: &mut Lex<'_>, open: Tok, close: u8) -> bool {
        let Some((_, after)) = self.const_list(*lex, close) else {
            return false;
        };
        self.copy(open);
        self.hash_tok(H_SYM, &[self.s.get(open.start).copied().unwrap_or(b'(')]);
        let n = self.fresh();
        self.push_number(n);
        self.out.push_str(" /*, ... */");
        self.out.push(char::from(close));
        self.hash.byte(H_LIST);
        self.hash.byte(H_END);
        self.hash_tok(H_SYM, &[close]);
        *lex = after;
        self.prev = Prev::Operand;
        true
    }

    fn run(&mut self) {
        let mut lex = Lex { s: self.s, pos: 0 };
        loop {
            let t = lex.next();
            let by_item = std::mem::take(&mut self.by_item);
            let w = self.s.get(t.start..t.end).unwrap_or(&[]);
            match t.kind {
                Tk::End => break,
                Tk::Str => {
                    let n = self.fresh();
                    self.constant(t.ws, n);
                }
                Tk::Param => {
                    let n = self.param_number(t);
                    self.constant(t.ws, n);
                }
                Tk::Num => {
                    let lone_int = by_item && w.iter().all(u8::is_ascii_digit) && {
                        let mut look = lex;
                        let nt = look.next();
                        let nw = self.s.get(nt.start..nt.end).unwrap_or(&[]);
                        nt.kind == Tk::End
                            || (nt.kind == Tk::Punct && matches!(nw, b"," | b")" | b";"))
                            || (nt.kind == Tk::Word && ends_by_item(nw))
                    };
                    if lone_int {
                        // A column number in ORDER BY / GROUP BY, not a constant.
                        self.copy(t);
                        self.hash_tok(H_NUM, w);
                        self.prev = Prev::Operand;
                    } else {
                        let n = self.fresh();
                        self.constant(t.ws, n);
                    }
                }
                Tk::Op => {
                    let unary = matches!(
                        self.prev,
                        Prev::Start | Prev::ExprStart | Prev::Not | Prev::Limit
                    ) && w == b"-";
                    let mut look = lex;
                    if unary && look.next().kind == Tk::Num {
                        // A negative number is one constant.
                        lex = look;
                        let n = self.fresh();
                        self.constant(t.ws, n);
                    } else {
                        self.copy(t);
                        self.hash_tok(H_SYM, w);
                        self.prev = Prev::ExprStart;
                    }
                }
                Tk::QIdent => {
                    self.copy(t);
                    // `"id"` names the same column as `id`.
                    let inner = self
                        .s
                        .get(t.start + 1..t.end.saturating_sub(1))
                        .unwrap_or(&[]);
                    let plain = w.first() == Some(&b'"')
                        && w.len() >= 2
                        && inner
                            .first()
                            .is_some_and(|&b| b.is_ascii_lowercase() || b == b'_')
                        && inner.iter().all(|&b| {
                            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'$'
                        });
                    if plain {
                        self.hash_word(inner);
                    } else {
                        self.hash_tok(H_QIDENT, w);
                    }
                    self.prev = Prev::Operand;
                }
                Tk::Word => {
                    let null_like = kw(w, b"null") || kw(w, b"true") || kw(w, b"false");
                    let test = matches!(self.prev, Prev::Is | Prev::IsNot)
                        || (self.prev == Prev::Not && kw(w, b"null"));
                    if null_like && !test {
                        let n = self.fresh();
                        self.constant(t.ws, n);
                        continue;
                    }
                    if kw(w, b"all") && self.prev == Prev::Limit {
                        let n = self.fresh();
                        self.constant(t.ws, n);
                        continue;
                    }
                    if kw(w, b"in") || kw(w, b"array") {
                        let close = if kw(w, b"in") { b')' } else { b']' };
                        let open_ch = if close == b')' { b"(" } else { b"[" };
                        let mut look = lex;
                        let open = look.next();
                        if open.kind == Tk::Punct
                            && self.s.get(open.start..open.end) == Some(open_ch)
                        {
                            self.copy(t);
                            self.hash_word(w);
                            if self.try_fold(&mut look, open, close) {
                                lex = look;
                                continue;
                            }
                            self.prev = Prev::ExprStart;
                            continue;
                        }
                    }
                    self.copy(t);
                    self.hash_word(w);
                    let modifier =
                        kw(w, b"asc") || kw(w, b"desc") || kw(w, b"nulls") || kw(w, b"using");
                    if self.by_depth == Some(self.depth) && ends_by_item(w) && !modifier {
                        self.by_depth = None;
                    }
                    self.prev = if kw(w, b"is") {
                        Prev::Is
                    } else if kw(w, b"not") {
                        if self.prev == Prev::Is {
                            Prev::IsNot
                        } else {
                            Prev::Not
                        }
                    } else if kw(w, b"limit") {
                        Prev::Limit
                    } else if kw(w, b"order") || kw(w, b"group") {
                        Prev::OrderGroup
                    } else if kw(w, b"by") && self.prev == Prev::OrderGroup {
                        self.by_depth = Some(self.depth);
                        self.by_item = true;
                        Prev::ExprStart
                    } else if starts_expression(w) {
                        Prev::ExprStart
                    } else if self.prev == Prev::Is && kw(w, b"distinct") {
                        Prev::Other
                    } else {
                        Prev::Operand
                    };
                }
                Tk::Punct => {
                    if w == b";" && t.start >= self.inner_semis {
                        // A trailing semicolon (and anything only whitespace or comments).
                        let mut look = lex;
                        let mut rest = look.next();
                        while rest.kind == Tk::Punct
                            && self.s.get(rest.start..rest.end) == Some(b";")
                        {
                            rest = look.next();
                        }
                        if rest.kind == Tk::End {
                            break;
                        }
                        self.inner_semis = rest.start;
                    }
                    if w == b";" {
                        self.by_depth = None;
                    }
                    self.copy(t);
                    self.hash_tok(H_SYM, w);
                    match w {
                        b"(" | b"[" => {
                            self.depth += 1;
                            self.prev = Prev::ExprStart;
                        }
                        b")" | b"]" => {
                            if self.by_depth == Some(self.depth) {
                                self.by_depth = None;
                            }
                            self.depth = self.depth.saturating_sub(1);
                            if self.by_depth.is_some_and(|d| d > self.depth) {
                                self.by_depth = None;
                            }
                            self.prev = Prev::Operand;
                        }
                        b"," => {
                            self.by_item = self.by_depth == Some(self.depth);
                            self.prev = Prev::ExprStart;
                        }
                        b"." => self.prev = Prev::Other,
                        _ => self.prev = Prev::ExprStart,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(sql: &str) -> (String, u64) {
        let mut out = String::new();
        let h = fingerprint(sql, &mut out);
        (out, h)
    }

    fn text(sql: &str) -> String {
        fp(sql).0
    }

    /// Reference vectors 6.2 (pg_stat_statements), where they apply.
    #[test]
    fn reference_vectors() {
        // P1
        let (a, ha) = fp(r#"SELECT 1 AS "int""#);
        let (b, hb) = fp(r#"SELECT 2 AS "int""#);
        assert_eq!(a, r#"SELECT $1 AS "int""#);
        assert_eq!((a, ha), (b, hb));
        // P2
        let (a, ha) = fp(r#"SELECT 1 AS "int" LIMIT 1"#);
        let (_, hb) = fp(r#"SELECT 1 AS "int" LIMIT 2"#);
        let (_, hc) = fp(r#"SELECT 1 AS "int" OFFSET 1"#);
        assert_eq!(a, r#"SELECT $1 AS "int" LIMIT $2"#);
        assert_eq!(ha, hb);
        assert_ne!(ha, hc);
        // P3
        assert_eq!(
            text(r#"SELECT 1 AS "int" ORDER BY 1"#),
            r#"SELECT $1 AS "int" ORDER BY 1"#
        );
        // P4 (the existing parameter and the constants share one sequence)
        assert_eq!(
            text("PREPARE pgss_test (int) AS SELECT $1, 'test' LIMIT 1"),
            "PREPARE pgss_test (int) AS SELECT $1, $2 LIMIT $3"
        );
        // P5
        assert_eq!(
            text(r#"select '{"a":1, "b":2}'::jsonb ? 'b'"#),
            "select $1::jsonb ? $2"
        );
        // P6 (PostgreSQL 18) and P7
        let (a, ha) = fp("SELECT * FROM t WHERE id IN (1,2,3)");
        let (_, hb) = fp("SELECT * FROM t WHERE id IN (1,2,3,4)");
        let (_, hc) = fp("SELECT * FROM t WHERE id IN (1, 2, 3, 4, 5)");
        assert_eq!(a, "SELECT * FROM t WHERE id IN ($1 /*, ... */)");
        assert_eq!((ha, ha), (hb, hc));
        let (a, h1) = fp("SELECT * FROM t WHERE id IN (1)");
        assert_eq!(a, "SELECT * FROM t WHERE id IN ($1)");
        assert_ne!(h1, ha);
        // P9: VALUES rows are not folded.
        assert_eq!(
            text("WITH t(f) AS (VALUES (1.0), (2.0)) SELECT f FROM t ORDER BY f"),
            "WITH t(f) AS (VALUES ($1), ($2)) SELECT f FROM t ORDER BY f"
        );
    }

    /// Statements run on PostgreSQL 15 and the text pg_stat_statements recorded for each
    /// (`tests/data/postgres` in dbtap-proto holds the workloads; these were run one by one after
    /// `pg_stat_statements_reset()`). The original and the server's normalized text share the
    /// group; the display equals the server's text except where PostgreSQL 18 folds lists.
    const PGSS15: &[(&str, &str)] = &[
        (
            "SELECT id, name FROM items ORDER BY id",
            "SELECT id, name FROM items ORDER BY id",
        ),
        ("SELECT count(*) FROM items", "SELECT count(*) FROM items"),
        (
            "UPDATE items SET price = price + 1 WHERE id <= 2",
            "UPDATE items SET price = price + $1 WHERE id <= $2",
        ),
        (
            "UPDATE items SET price = price - 1 WHERE id <= 2",
            "UPDATE items SET price = price - $1 WHERE id <= $2",
        ),
        (
            "SELECT id, name, price FROM items WHERE id = 3",
            "SELECT id, name, price FROM items WHERE id = $1",
        ),
        (
            "SELECT id, name FROM items WHERE name IN ('apple', 'fig', 'nope') ORDER BY id",
            "SELECT id, name FROM items WHERE name IN ($1, $2, $3) ORDER BY id",
        ),
        (
            "SELECT * FROM items WHERE id = 1 AND name = 'x''); DROP TABLE items; --'",
            "SELECT * FROM items WHERE id = $1 AND name = $2",
        ),
        (
            "SELECT 'hello; world'::text AS greeting, 42 AS n",
            "SELECT $1::text AS greeting, $2 AS n",
        ),
        ("SELECT 1 AS a, NULL AS b", "SELECT $1 AS a, $2 AS b"),
        (
            "SELECT g FROM generate_series(1, 3000) g",
            "SELECT g FROM generate_series($1, $2) g",
        ),
        (
            r#"select '{"a":1, "b":2}'::jsonb ? 'b'"#,
            "select $1::jsonb ? $2",
        ),
        (
            "SELECT x FROM (VALUES (1.0), (2.0)) t(x) ORDER BY x",
            "SELECT x FROM (VALUES ($1), ($2)) t(x) ORDER BY x",
        ),
        (
            "SELECT id FROM items WHERE id=-5 AND price<-1",
            "SELECT id FROM items WHERE id=$1 AND price<$2",
        ),
        (
            "SELECT name FROM items WHERE id BETWEEN 1 AND 3 ORDER BY 1 DESC LIMIT 2",
            "SELECT name FROM items WHERE id BETWEEN $1 AND $2 ORDER BY 1 DESC LIMIT $3",
        ),
        (
            r#"SELECT COALESCE(price, 0) * 2 FROM items WHERE name LIKE 'a%' OR name ILIKE E'%\'%'"#,
            "SELECT COALESCE(price, $1) * $2 FROM items WHERE name LIKE $3 OR name ILIKE $4",
        ),
        (
            "SELECT now() - INTERVAL '1 day' > TIMESTAMP '2020-01-01 00:00:00'",
            "SELECT now() - INTERVAL $1 > TIMESTAMP $2",
        ),
        (
            "SELECT CASE WHEN price > 2 THEN 'big' WHEN price IS NULL THEN 'none' ELSE 'small' END FROM items",
            "SELECT CASE WHEN price > $1 THEN $2 WHEN price IS NULL THEN $3 ELSE $4 END FROM items",
        ),
        (
            "SELECT $$dollar 'quoted'$$ || $t$tagged$t$",
            "SELECT $1 || $2",
        ),
        (
            "SELECT ARRAY[1, 2, 3]::int[] @> ARRAY[2]",
            "SELECT ARRAY[$1, $2, $3]::int[] @> ARRAY[$4]",
        ),
        (
            "SELECT id FROM items WHERE price IS NOT NULL AND (price > 1.5 OR price < 0.5e1)",
            "SELECT id FROM items WHERE price IS NOT NULL AND (price > $1 OR price < $2)",
        ),
        (
            "WITH x AS (SELECT id FROM items WHERE id > 2) SELECT count(*) FROM x",
            "WITH x AS (SELECT id FROM items WHERE id > $1) SELECT count(*) FROM x",
        ),
        (
            r#"SELECT "id", "name" FROM items WHERE "id" = 4"#,
            r#"SELECT "id", "name" FROM items WHERE "id" = $1"#,
        ),
        (
            "SELECT 1 FROM items GROUP BY 1 HAVING count(*) > 1",
            "SELECT $1 FROM items GROUP BY 1 HAVING count(*) > $2",
        ),
        (
            "INSERT INTO items (name, price) VALUES ('t1', 1.25), ('t2', NULL) RETURNING id",
            "INSERT INTO items (name, price) VALUES ($1, $2), ($3, $4) RETURNING id",
        ),
        (
            "DELETE FROM items WHERE name IN ('t1', 't2')",
            "DELETE FROM items WHERE name IN ($1, $2)",
        ),
        (
            "SELECT id FROM items WHERE NOT (id = 1) AND TRUE",
            "SELECT id FROM items WHERE NOT (id = $1) AND $2",
        ),
        (
            "SELECT substring(name FROM 2 FOR 3) FROM items WHERE id = 1",
            "SELECT substring(name FROM $1 FOR $2) FROM items WHERE id = $3",
        ),
        (
            "SELECT B'101' | B'010', X'FF'::int",
            "SELECT $1 | $2, $3::int",
        ),
        ("SELECT -1 * - 2.5", "SELECT $1 * $2"),
        (
            "SELECT id FROM items LIMIT ALL OFFSET 0",
            "SELECT id FROM items LIMIT $1 OFFSET $2",
        ),
        (
            "SELECT name FROM items WHERE id = ANY('{1,2}'::int[])",
            "SELECT name FROM items WHERE id = ANY($1::int[])",
        ),
        (
            "SELECT id FROM items ORDER BY price DESC NULLS LAST, 1",
            "SELECT id FROM items ORDER BY price DESC NULLS LAST, 1",
        ),
        (r#"SELECT U&'d\0061t' AS u"#, "SELECT $1 AS u"),
    ];

    #[test]
    fn agrees_with_pg_stat_statements() {
        for (orig, pgss) in PGSS15 {
            let (t, h) = fp(orig);
            let (tp, hp) = fp(pgss);
            assert_eq!(h, hp, "{orig}");
            assert_eq!(t, tp, "{orig}");
            if !t.contains("/*, ... */") {
                assert_eq!(&t, pgss, "{orig}");
            }
        }
    }

    #[test]
    fn simple_and_extended_protocol_share_the_hash() {
        let pairs = [
            (
                "SELECT * FROM t WHERE id = 5",
                "select * from t where id = $1",
            ),
            (
                "UPDATE pgbench_accounts SET abalance = abalance + -4030 WHERE aid = 29312;",
                "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
            ),
            (
                "INSERT INTO t (a, b) VALUES ('x', NULL)",
                "INSERT INTO t (a, b) VALUES ($1, $2)",
            ),
            (
                "SELECT * FROM t WHERE \"id\" = 'a''b'",
                "SELECT * FROM T WHERE id = $1",
            ),
            (
                "SELECT * FROM t WHERE id IN (1, 2, 3)",
                "SELECT * FROM t WHERE id IN ($1, $2)",
            ),
            ("SELECT 1 WHERE x = -1", "SELECT $1 WHERE x = $2"),
            ("SELECT E'\\'', $$a$$", "SELECT $1, $2"),
        ];
        for (a, b) in pairs {
            assert_eq!(fp(a).1, fp(b).1, "{a} / {b}");
        }
        // Quoted identifiers that need their quotes are other names.
        assert_ne!(fp(r#"SELECT "Id" FROM t"#).1, fp("SELECT id FROM t").1);
        assert_ne!(fp("SELECT a FROM t").1, fp("SELECT b FROM t").1);
        assert_ne!(fp("SELECT a - 1").1, fp("SELECT a, 1").1);
    }

    #[test]
    fn pgbench_statements() {
        let cases = [
            (
                "UPDATE pgbench_accounts SET abalance = abalance + -4030 WHERE aid = 29312;",
                "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
            ),
            (
                "SELECT abalance FROM pgbench_accounts WHERE aid = 29312;",
                "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
            ),
            (
                "UPDATE pgbench_tellers SET tbalance = tbalance + -4030 WHERE tid = 3;",
                "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
            ),
            (
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (3, 1, 29312, -4030, CURRENT_TIMESTAMP);",
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
            ),
            ("BEGIN;", "BEGIN"),
            ("END;", "END"),
        ];
        for (sql, want) in cases {
            let (t, h) = fp(sql);
            assert_eq!(t, want);
            // pg_stat_statements shows exactly this text; it fingerprints to the same group.
            assert_eq!(fp(want), (t, h));
        }
    }

    #[test]
    fn constants_as_the_server_sees_them() {
        for (sql, want) in [
            ("SELECT NULL AS x", "SELECT $1 AS x"),
            ("SELECT TRUE, FALSE", "SELECT $1, $2"),
            ("SELECT -1, - 2, 3 - 4, +5", "SELECT $1, $2, $3 - $4, +$5"),
            (
                "SELECT DATE '2020-01-01', INTERVAL '1 day', '{1,2}'::int[]",
                "SELECT DATE $1, INTERVAL $2, $3::int[]",
            ),
            (
                "SELECT id FROM items ORDER BY 1 LIMIT 2 OFFSET 1",
                "SELECT id FROM items ORDER BY 1 LIMIT $1 OFFSET $2",
            ),
            (
                "SELECT id FROM items GROUP BY 1 ORDER BY 1 DESC",
                "SELECT id FROM items GROUP BY 1 ORDER BY 1 DESC",
            ),
            (
                "SELECT a FROM t ORDER BY a + 1, 2",
                "SELECT a FROM t ORDER BY a + $1, 2",
            ),
            (
                "SELECT E'a\\'b', $$x;y$$, $t$q$t$, B'101', X'1F', U&'d\\0061t'",
                "SELECT $1, $2, $3, $4, $5, $6",
            ),
            (
                "SELECT 1 WHERE NULL IS NULL AND 1 IS NOT NULL AND TRUE IS NOT FALSE",
                "SELECT $1 WHERE $2 IS NULL AND $3 IS NOT NULL AND $4 IS NOT FALSE",
            ),
            (
                "SELECT id FROM items WHERE id=-5 AND price<-1",
                "SELECT id FROM items WHERE id=$1 AND price<$2",
            ),
            (
                "SELECT 'a' || 'b' AS \"Mixed Case\"",
                "SELECT $1 || $2 AS \"Mixed Case\"",
            ),
            (
                "SELECT 1::int + '2'::text::int",
                "SELECT $1::int + $2::text::int",
            ),
            (
                "SELECT id FROM items LIMIT ALL",
                "SELECT id FROM items LIMIT $1",
            ),
            ("SELECT 1.5e3, .5, 0x1F, 1_000", "SELECT $1, $2, $3, $4"),
            (
                "SELECT ARRAY[1,2,3], (1, 'a')",
                "SELECT ARRAY[$1 /*, ... */], ($2, $3)",
            ),
            (
                "SELECT x FROM t WHERE a = $2 AND b = $1 AND c = $2 AND d = 7",
                "SELECT x FROM t WHERE a = $1 AND b = $2 AND c = $1 AND d = $3",
            ),
            (
                "CREATE TABLE t (a int NOT NULL DEFAULT NULL)",
                "CREATE TABLE t (a int NOT NULL DEFAULT $1)",
            ),
            (
                "SELECT x FROM t WHERE a IN ('a'::text, 'b'::text) AND b IN ($1, $2)",
                "SELECT x FROM t WHERE a IN ($1 /*, ... */) AND b IN ($2 /*, ... */)",
            ),
            (
                "SELECT x FROM t WHERE a IN (SELECT 1) OR a IN (b, 2)",
                "SELECT x FROM t WHERE a IN (SELECT $1) OR a IN (b, $2)",
            ),
            (
                "SELECT x FROM t WHERE a NOT IN (-1, -2)",
                "SELECT x FROM t WHERE a NOT IN ($1 /*, ... */)",
            ),
        ] {
            assert_eq!(text(sql), want, "{sql}");
        }
    }

    #[test]
    fn comments_whitespace_and_case() {
        assert_eq!(
            text("  SELECT /* comment */ 1   +\n\t2 -- trailing\n;  "),
            "SELECT $1 + $2"
        );
        assert_eq!(text("SELECT a/**/FROM t"), "SELECT a FROM t");
        assert_eq!(text("SELECT /* a /* nested */ still */ 1"), "SELECT $1");
        assert_eq!(
            text("select COUNT(*) from ITEMS where \"id\" = 1"),
            "select COUNT(*) from ITEMS where \"id\" = $1"
        );
        assert_eq!(fp("SELECT 1").1, fp("select   1 ;").1);
        assert_eq!(text(""), "");
        assert_eq!(text("-- only"), "");
        assert_eq!(fp("").1, fp("/* x */").1);
        assert_eq!(text("SELECT 1; SELECT 2"), "SELECT $1; SELECT $2");
        assert_eq!(text("SELECT 'é', ñ FROM \"ü\""), "SELECT $1, ñ FROM \"ü\"");
        assert_eq!(text("SELECT a<-b, a-->b\n"), "SELECT a<-b, a");
        assert_eq!(text("SELECT a<-1"), "SELECT a<$1");
    }

    #[test]
    fn unterminated_input_is_safe() {
        for s in [
            "SELECT 'abc",
            "SELECT \"x",
            "SELECT $q$ a",
            "SELECT /* x",
            "SELECT E'\\",
            "SELECT $",
            "SELECT U&",
            "IN (",
            "ARRAY[1,",
            "x IN (1::",
            "SELECT 0x",
        ] {
            let _ = fp(s);
        }
    }

    #[test]
    fn many_semicolons_stay_linear() {
        let s = ";".repeat(200_000) + "x";
        let (t, _) = fp(&s);
        assert_eq!(t.len(), 200_001);
        assert_eq!(text("SELECT 1;;; ;"), "SELECT $1");
    }

    #[test]
    fn a_constant_never_glues_to_a_name() {
        assert_eq!(text("SELECT y'1'"), "SELECT y $1");
    }

    use proptest::prelude::*;

    const PIECES: &[&str] = &[
        "SELECT", "select", "FROM", "t", "\"Id\"", "\"id\"", "WHERE", "IN", "(", ")", "[", "]",
        "ARRAY", ",", "1", "-", "- ", "2.5e3", ".5", "'a''b'", "E'\\''", "$$x$$", "$q$;$q$", "$1",
        "$2", "NULL", "IS", "NOT", "TRUE", "ORDER", "BY", "GROUP", "LIMIT", "ALL", "::", "int",
        "[]", "/* c */", "-- c\n", ";", " ", "\n", "<", "=", "+", "@>", "U&'x'", "x", "B'1'", "é",
        "DESC", "VALUES", "$", "'", "\"", "/*", "0x1F",
    ];

    fn sqlish() -> impl Strategy<Value = String> {
        proptest::collection::vec((0..PIECES.len(), any::<bool>()), 0..40).prop_map(|v| {
            let mut s = String::new();
            for (i, sp) in v {
                s.push_str(PIECES[i]);
                if sp {
                    s.push(' ');
                }
            }
            s
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

        #[test]
        fn never_panics_on_any_text(s in "\\PC*") {
            let _ = fp(&s);
        }

        #[test]
        fn never_panics_on_sql_like_text(s in sqlish()) {
            let (t, h) = fp(&s);
            // The display is its own fingerprint (where no list was folded into a comment).
            if !t.contains("/*, ... */") {
                prop_assert_eq!(fp(&t), (t.clone(), h), "{}", s);
            }
        }
    }
}
