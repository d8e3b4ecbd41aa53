//! Folding of PostgreSQL `IN (...)` and `ARRAY[...]` constant lists into `$n /*, ... */`.

use super::canon::{H_END, H_LIST, H_SYM};
use super::lex::{Lex, Tk, Tok};
use super::normalize::{Normalizer, Prev, kw};

impl Normalizer<'_, '_> {
    /// Whether the text after a `(` or `[` at `lex` is a list of two or more constants or
    /// parameters (each optionally cast with `::type`) closed by `close`. Returns the number of
    /// elements and the lexer after the closing bracket.
    pub(super) fn const_list<'l>(&self, mut lex: Lex<'l>, close: u8) -> Option<(usize, Lex<'l>)> {
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
    pub(super) fn try_fold(&mut self, lex: &mut Lex<'_>, open: Tok, close: u8) -> bool {
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
}
