//! The PostgreSQL normalizer: one pass over the tokens, with one handler per token class, that
//! writes the display form and feeds the canonical hash.

use super::MAP_LEN;
use super::canon::{Fnv, H_NUM, H_SYM};
use super::lex::{Lex, Tk, Tok};

/// What came before, for the few places where it matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Prev {
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

pub(super) fn kw(w: &[u8], k: &[u8]) -> bool {
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

pub(super) struct Normalizer<'a, 'o> {
    pub(super) s: &'a [u8],
    pub(super) out: &'o mut String,
    pub(super) hash: Fnv,
    pub(super) next_param: u32,
    pub(super) map: [u16; MAP_LEN],
    /// Whitespace (or a comment) is pending before the next output token.
    pub(super) ws: bool,
    pub(super) prev: Prev,
    pub(super) depth: usize,
    /// Inside an `ORDER BY` / `GROUP BY` list at this bracket depth.
    pub(super) by_depth: Option<usize>,
    /// The next token starts an item of that list.
    pub(super) by_item: bool,
    /// Semicolons before this offset are known not to be trailing.
    pub(super) inner_semis: usize,
}

impl<'a, 'o> Normalizer<'a, 'o> {
    pub(super) fn new(s: &'a [u8], out: &'o mut String) -> Self {
        Normalizer {
            s,
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
        }
    }

    pub(super) fn run(&mut self) {
        let mut lex = Lex { s: self.s, pos: 0 };
        loop {
            let t = lex.next();
            let by_item = std::mem::take(&mut self.by_item);
            let s = self.s;
            let w = s.get(t.start..t.end).unwrap_or(&[]);
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
                Tk::Num => self.number(&lex, t, w, by_item),
                Tk::Op => self.operator(&mut lex, t, w),
                Tk::QIdent => {
                    self.copy(t);
                    self.hash_quoted_ident(w);
                    self.prev = Prev::Operand;
                }
                Tk::Word => self.word(&mut lex, t, w),
                Tk::Punct => {
                    if !self.punct(&lex, t, w) {
                        break;
                    }
                }
            }
        }
    }

    /// A number: a constant, except a lone integer starting an `ORDER BY` / `GROUP BY` item,
    /// which is a column number.
    #[inline(always)]
    fn number(&mut self, lex: &Lex<'a>, t: Tok, w: &[u8], by_item: bool) {
        let lone_int = by_item && w.iter().all(u8::is_ascii_digit) && {
            let mut look = *lex;
            let nt = look.next();
            let nw = self.s.get(nt.start..nt.end).unwrap_or(&[]);
            nt.kind == Tk::End
                || (nt.kind == Tk::Punct && matches!(nw, b"," | b")" | b";"))
                || (nt.kind == Tk::Word && ends_by_item(nw))
        };
        if lone_int {
            self.copy(t);
            self.hash_tok(H_NUM, w);
            self.prev = Prev::Operand;
        } else {
            let n = self.fresh();
            self.constant(t.ws, n);
        }
    }

    /// An operator; a unary minus before a number makes one negative constant with it.
    #[inline(always)]
    fn operator(&mut self, lex: &mut Lex<'a>, t: Tok, w: &[u8]) {
        let unary = matches!(
            self.prev,
            Prev::Start | Prev::ExprStart | Prev::Not | Prev::Limit
        ) && w == b"-";
        let mut look = *lex;
        if unary && look.next().kind == Tk::Num {
            *lex = look;
            let n = self.fresh();
            self.constant(t.ws, n);
        } else {
            self.copy(t);
            self.hash_tok(H_SYM, w);
            self.prev = Prev::ExprStart;
        }
    }

    /// A keyword or unquoted name: `NULL`/`TRUE`/`FALSE` and `LIMIT ALL` constants, `IN (`
    /// and `ARRAY[` lists, and the state the next tokens depend on.
    #[inline(always)]
    fn word(&mut self, lex: &mut Lex<'a>, t: Tok, w: &[u8]) {
        let null_like = kw(w, b"null") || kw(w, b"true") || kw(w, b"false");
        let test = matches!(self.prev, Prev::Is | Prev::IsNot)
            || (self.prev == Prev::Not && kw(w, b"null"));
        if (null_like && !test) || (kw(w, b"all") && self.prev == Prev::Limit) {
            let n = self.fresh();
            self.constant(t.ws, n);
            return;
        }
        if (kw(w, b"in") || kw(w, b"array")) && self.list_word(lex, t, w) {
            return;
        }
        self.copy(t);
        self.hash_word(w);
        let modifier = kw(w, b"asc") || kw(w, b"desc") || kw(w, b"nulls") || kw(w, b"using");
        if self.by_depth == Some(self.depth) && ends_by_item(w) && !modifier {
            self.by_depth = None;
        }
        self.prev = self.after_word(w);
    }

    /// `IN` or `ARRAY` followed by its opening bracket: writes the word and, if the list is
    /// all constants, the folded list. False (nothing written) without the bracket.
    #[inline(always)]
    fn list_word(&mut self, lex: &mut Lex<'a>, t: Tok, w: &[u8]) -> bool {
        let close = if kw(w, b"in") { b')' } else { b']' };
        let open_ch = if close == b')' { b"(" } else { b"[" };
        let mut look = *lex;
        let open = look.next();
        if open.kind != Tk::Punct || self.s.get(open.start..open.end) != Some(open_ch) {
            return false;
        }
        self.copy(t);
        self.hash_word(w);
        if self.try_fold(&mut look, open, close) {
            *lex = look;
        } else {
            self.prev = Prev::ExprStart;
        }
        true
    }

    /// What a copied word `w` means for the tokens after it (starting an `ORDER BY` /
    /// `GROUP BY` list on its `BY`).
    #[inline(always)]
    fn after_word(&mut self, w: &[u8]) -> Prev {
        if kw(w, b"is") {
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
        }
    }

    /// Punctuation: brackets, commas, `.`, `::`, `;`. False at a trailing semicolon (followed
    /// only by semicolons, whitespace and comments), where the text ends.
    #[inline(always)]
    fn punct(&mut self, lex: &Lex<'a>, t: Tok, w: &[u8]) -> bool {
        if w == b";" && t.start >= self.inner_semis {
            let mut look = *lex;
            let mut rest = look.next();
            while rest.kind == Tk::Punct && self.s.get(rest.start..rest.end) == Some(b";") {
                rest = look.next();
            }
            if rest.kind == Tk::End {
                return false;
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
        true
    }
}
