//! The hot loop of the default MySQL normalizer: runs of simple tokens emitted straight from
//! the bytes while no rule waits for the next token.

use super::emit::{push_word, sep, sep_literal};
use super::keywords::{HIGH, Kw, classify8, load8, word_bytes, word8};
use super::lists::list_after;
use super::normalize::{Row, State};
use crate::lex::{self, Kind, Lexer};

/// What the hot loop tracks itself, handed back to the lexer and [`State`] when it stops.
struct Run {
    /// The next byte to look at.
    pos: usize,
    /// Where the current token's whitespace started: the stop position if it is not handled.
    before: usize,
    /// Whitespace came before the current token.
    ws: bool,
    prev_operand: bool,
    /// The lexer's own notion: the last token was a word, a number or `)`.
    lex_prev: bool,
    moved: bool,
    /// `ORDER` was the last token.
    order_prev: bool,
    /// Just folded the first row of a VALUES list.
    row_after: bool,
}

/// The hot loop: while no rule waits for the next token, emits runs of simple tokens (words
/// other than tracked keywords, numbers, operators, parentheses) without going through the
/// general token handling, then hands the position back to the lexer at the first other token.
#[inline(always)]
pub(super) fn fast_run(s: &[u8], lx: &mut Lexer, buf: &mut Vec<u8>, st: &mut State) {
    let mut r = Run {
        pos: lx.pos(),
        before: 0,
        ws: false,
        prev_operand: st.prev_operand,
        lex_prev: false,
        moved: false,
        order_prev: false,
        row_after: false,
    };
    let stop = loop {
        r.before = r.pos;
        // Usually exactly one space, or none.
        if s.get(r.pos) == Some(&b' ') && s.get(r.pos + 1).is_some_and(|&b| !lex::is_space(b)) {
            r.pos += 1;
        } else {
            match s[r.pos..].iter().position(|&b| !lex::is_space(b)) {
                Some(k) => r.pos += k,
                None => break r.before,
            }
        }
        r.ws = r.pos != r.before;
        let c = s[r.pos];
        let stop = if lex::is_ident(c) && !c.is_ascii_digit() {
            fast_word(s, lx, buf, st, &mut r, c)
        } else if c.is_ascii_digit() {
            fast_number(s, lx, buf, &mut r)
        } else {
            fast_punct(s, buf, st, &mut r, c)
        };
        if let Some(stop) = stop {
            break stop;
        }
    };
    if r.moved {
        lx.resume(stop, r.lex_prev);
        st.prev_operand = r.prev_operand;
        st.order_prev = r.order_prev;
        if r.row_after {
            st.row = Row::After;
        }
        st.busy = r.order_prev || r.row_after;
    }
}

/// A word starting with a letter at `r.pos` (its first byte `c`): emitted, or folded with the
/// literal list after `IN`/`VALUES`. `Some(stop)` ends the run there.
#[inline(always)]
fn fast_word(
    s: &[u8],
    lx: &Lexer,
    buf: &mut Vec<u8>,
    st: &mut State,
    r: &mut Run,
    c: u8,
) -> Option<usize> {
    let pos = r.pos;
    if matches!(c | 0x20, b'x' | b'b' | b'n') && s.get(pos + 1) == Some(&b'\'') {
        return Some(r.before);
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
    let was_order = std::mem::take(&mut r.order_prev);
    match kw {
        Kw::Other => r.prev_operand = true,
        Kw::Null | Kw::True | Kw::False => {
            sep(buf, r.ws, false, b'?');
            buf.push(b'?');
            r.prev_operand = true;
            r.lex_prev = true;
            r.pos = end;
            r.moved = true;
            return None;
        }
        Kw::Asc if st.order_by => {
            // Dropped, with the whitespace before it; like a comment, it must not
            // let its neighbours join (`-ASC-` -> `- -`): the general path sees to that.
            r.lex_prev = true;
            r.pos = end;
            r.moved = true;
            st.gap = true;
            return Some(r.pos);
        }
        Kw::Order => {
            r.order_prev = true;
            r.prev_operand = false;
        }
        Kw::By => {
            st.order_by |= was_order;
            r.prev_operand = false;
        }
        Kw::Union => {
            st.union = true;
            r.prev_operand = false;
        }
        Kw::Operator | Kw::Asc | Kw::Not | Kw::Offset => r.prev_operand = false,
        Kw::In | Kw::Values => return fast_list(s, lx, buf, r, (w, x8, kw, was_order)),
        Kw::Limit | Kw::Is => {
            r.order_prev = was_order;
            return Some(r.before);
        }
    }
    sep(buf, r.ws, false, c);
    push_word(buf, w, x8);
    r.lex_prev = true;
    r.pos = end;
    r.moved = true;
    None
}

/// `in (1, 2)`, `values ('a', 3)`: folds a literal-only list right here. `word` is the
/// keyword, its [`word8`] load and class, and whether `ORDER` came before it.
#[inline(always)]
fn fast_list(
    s: &[u8],
    lx: &Lexer,
    buf: &mut Vec<u8>,
    r: &mut Run,
    word: (&[u8], Option<u64>, Kw, bool),
) -> Option<usize> {
    let (w, x8, kw, was_order) = word;
    let end = r.pos + w.len();
    let Some(after) = list_after(lx, s, end) else {
        r.order_prev = was_order;
        return Some(r.before);
    };
    sep(buf, r.ws, false, w[0]);
    push_word(buf, w, x8);
    buf.extend_from_slice(b"(?+)");
    r.prev_operand = true;
    r.lex_prev = true;
    r.pos = after;
    r.moved = true;
    if kw == Kw::Values {
        // Further rows: the general path drops them.
        r.row_after = true;
        return Some(r.pos);
    }
    None
}

/// A number at `r.pos`: plain digit runs here; anything else (`1.5`, `0x1f`, `12foo`) through
/// the lexer, and what is not a number ends the run.
#[inline(always)]
fn fast_number(s: &[u8], lx: &Lexer, buf: &mut Vec<u8>, r: &mut Run) -> Option<usize> {
    let n = s.len();
    let mut end = r.pos + 1;
    while end < n && s[end].is_ascii_digit() {
        end += 1;
    }
    if end < n && (lex::is_ident(s[end]) || s[end] == b'.') {
        let (kind, e) = lx.number_at(r.pos);
        if kind != Kind::Num {
            return Some(r.before);
        }
        end = e;
    }
    sep_literal(buf, r.ws);
    buf.push(b'?');
    r.prev_operand = true;
    r.lex_prev = true;
    r.pos = end;
    r.order_prev = false;
    r.moved = true;
    None
}

/// Punctuation `c` at `r.pos`: operators, commas and brackets the rules need not see.
#[inline(always)]
fn fast_punct(s: &[u8], buf: &mut Vec<u8>, st: &mut State, r: &mut Run, c: u8) -> Option<usize> {
    let next = s.get(r.pos + 1).copied().unwrap_or(0);
    match c {
        b'=' | b'<' | b'>' | b'*' | b'!' | b'%' | b'&' | b'|' | b'^' | b'~' | b':' | b','
        | b';' | b'@' | b'(' => {
            st.depth += u32::from(c == b'(');
            r.prev_operand = false;
            r.lex_prev = false;
        }
        b')' if st.values_row != Some(st.depth) => {
            st.depth = st.depth.saturating_sub(1);
            r.prev_operand = true;
            r.lex_prev = true;
        }
        b'+' | b'-' if r.prev_operand && next != b'-' => {
            r.prev_operand = false;
            r.lex_prev = false;
        }
        b'.' if !next.is_ascii_digit() => {
            r.prev_operand = false;
            r.lex_prev = false;
        }
        _ => return Some(r.before),
    }
    sep(buf, r.ws, false, c);
    buf.push(c);
    r.pos += 1;
    r.order_prev = false;
    r.moved = true;
    None
}
