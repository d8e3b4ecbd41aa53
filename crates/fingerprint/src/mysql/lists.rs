//! Lookaheads of the default MySQL normalizer: literal-only `( ... )` groups and signs glued
//! to a literal.

use super::MAX_SIGNS;
use super::keywords::{Kw, classify};
use crate::lex::{Kind, Lexer, Token};

/// After `in`/`values` ending at `end`: if a literal-only `( ... )` group follows, the position
/// just past its `)`.
#[inline(never)]
pub(super) fn list_after(lx: &Lexer, s: &[u8], end: usize) -> Option<usize> {
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
pub(super) fn past_signs(lx: &mut Lexer, s: &[u8], through_asc: bool) -> Token {
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
pub(super) fn literal_group<'a>(mut lx: Lexer<'a>, s: &[u8]) -> Option<Lexer<'a>> {
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
