//! The general path of the default MySQL normalizer: one token at a time through the rules
//! (IN/VALUES lists, further VALUES rows, LIMIT, IS [NOT], ORDER BY ... ASC, signed literals),
//! which share one [`State`].

use super::emit::{push_folded, push_quoted_ident, push_word, sep, sep_literal};
use super::fast::fast_run;
use super::keywords::{Kw, classify, classify8, word8};
use super::lists::past_signs;
use super::special::toolkit_comment;
use crate::lex::{Kind, Lexer, Token};

/// What a token is, for the list/LIMIT state machines.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Literal,
    Comma,
    Open,
    Close,
    Other,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Row {
    None,
    /// Just closed a row of a `VALUES` list.
    After,
    /// `, ` after a row; the output length before it.
    Comma(usize),
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Limit {
    None,
    /// After `limit`.
    Kw,
    /// After `limit ?`; the output length there.
    Val(usize),
    /// After `limit ?,` or `limit ? offset`.
    Sep(usize),
}

/// 0: nothing; 1: `in`; 2: `value`/`values`.
pub(super) type ExpectList = u8;

pub(super) struct State {
    pub(super) pend_ws: bool,
    pub(super) gap: bool,
    pub(super) prev_operand: bool,
    pub(super) is_state: u8,
    pub(super) expect_list: ExpectList,
    /// Open parenthesized group that may fold to `(?+)`: output length before it, its depth.
    pub(super) cand: Option<(usize, u32)>,
    pub(super) depth: u32,
    pub(super) values_row: Option<u32>,
    pub(super) row: Row,
    /// Skipping a further `VALUES` row until the depth drops back to this.
    pub(super) skip: Option<u32>,
    pub(super) limit: Limit,
    pub(super) order_prev: bool,
    pub(super) order_by: bool,
    pub(super) union: bool,
    /// `!quiet()`, kept up to date by the slow path.
    pub(super) busy: bool,
}

impl State {
    pub(super) fn new() -> Self {
        State {
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
        }
    }

    /// No rule is waiting for the next token: a plain word, literal or operator only needs
    /// emitting (and leaves every rule state as it is).
    #[inline(always)]
    pub(super) fn quiet(&self) -> bool {
        self.row == Row::None
            && self.limit == Limit::None
            && self.cand.is_none()
            && self.expect_list == 0
            && self.is_state == 0
            && !self.order_prev
    }
}

/// One token as the rules see it.
#[derive(Clone, Copy)]
struct Cur<'s> {
    t: Token,
    tok: &'s [u8],
    kw: Kw,
    /// The word's [`word8`] load.
    x8: Option<u64>,
    /// Whitespace (or a comment with whitespace) came before it.
    ws: bool,
    /// A comment came right before it.
    gap: bool,
}

/// The token loop, from `lx` to the end. False if a Percona Toolkit comment replaced the whole
/// output with `percona-toolkit`.
pub(super) fn run(s: &[u8], lx: &mut Lexer, buf: &mut Vec<u8>, st: &mut State) -> bool {
    loop {
        if !st.busy && !st.gap && !st.pend_ws && st.skip.is_none() && !lx.in_version() {
            fast_run(s, lx, buf, st);
        }
        let t = lx.next_token();
        match t.kind {
            Kind::End => return true,
            Kind::Comment => {
                if toolkit_comment(&s[t.start..t.end]) {
                    buf.clear();
                    buf.extend_from_slice(b"percona-toolkit");
                    return false;
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
            skip_row_token(st, t.kind, tok, d0);
            continue;
        }
        let (kw, x8) = if t.kind == Kind::Word {
            let x8 = word8(s, t.start, tok.len());
            (x8.map_or(Kw::Other, |x| classify8(x, tok.len())), x8)
        } else {
            (Kw::Other, None)
        };
        let c = Cur {
            t,
            tok,
            kw,
            x8,
            ws,
            gap,
        };
        let done = if !st.busy {
            plain_token(buf, st, &c)
        } else if st.cand.is_some()
            && st.row == Row::None
            && st.limit == Limit::None
            && st.expect_list == 0
            && st.is_state == 0
            && !st.order_prev
        {
            list_member(buf, st, &c)
        } else {
            false
        };
        if done {
            continue;
        }
        let Some(class) = class_of(s, lx, st, &c) else {
            continue;
        };
        let pos0 = buf.len();
        if values_rows(buf, st, class, pos0) {
            continue;
        }
        emit(buf, st, &c, class);
        after_token(st, &c, class, pos0);
    }
}

/// Inside a further `VALUES` row being dropped: only the brackets count, until the depth is
/// back to `d0`.
#[inline(always)]
fn skip_row_token(st: &mut State, kind: Kind, tok: &[u8], d0: u32) {
    if kind == Kind::Punct {
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
}

/// A plain token while no rule is waiting for the next one: emits it and returns true, or
/// returns false (nothing written) for the tokens the rules must see.
#[inline(always)]
fn plain_token(buf: &mut Vec<u8>, st: &mut State, c: &Cur) -> bool {
    let (tok, ws, gap) = (c.tok, c.ws, c.gap);
    match c.t.kind {
        Kind::Word if c.kw == Kw::Other && !matches!(tok[0], b'0'..=b'9' | b'?') => {
            sep(buf, ws, gap, tok[0]);
            push_word(buf, tok, c.x8);
            st.prev_operand = true;
        }
        // SELECT, WHERE, AND...: only the sign rule looks at them.
        Kind::Word if c.kw == Kw::Operator => {
            sep(buf, ws, gap, tok[0]);
            push_word(buf, tok, c.x8);
            st.prev_operand = false;
        }
        Kind::Str | Kind::Num | Kind::Placeholder => {
            sep_literal(buf, ws);
            buf.push(b'?');
            st.prev_operand = true;
        }
        Kind::Punct if !matches!(tok[0], b'+' | b'-' | b')') => {
            sep(buf, ws, gap, tok[0]);
            buf.push(tok[0]);
            st.prev_operand = false;
            st.depth += u32::from(tok[0] == b'(');
        }
        Kind::Punct if tok[0] == b')' && st.values_row != Some(st.depth) => {
            sep(buf, ws, gap, b')');
            buf.push(b')');
            st.prev_operand = true;
            st.depth = st.depth.saturating_sub(1);
        }
        // A binary `+`/`-` (after an operand).
        Kind::Punct if st.prev_operand && matches!(tok[0], b'+' | b'-') => {
            sep(buf, ws, gap, tok[0]);
            buf.push(tok[0]);
            st.prev_operand = false;
        }
        _ => return false,
    }
    true
}

/// Inside an `IN (`/`VALUES (` list that may still fold: literals and commas keep it, and are
/// emitted here (true).
#[inline(always)]
fn list_member(buf: &mut Vec<u8>, st: &mut State, c: &Cur) -> bool {
    match c.t.kind {
        Kind::Str | Kind::Num | Kind::Placeholder => {
            sep_literal(buf, c.ws);
            buf.push(b'?');
            st.prev_operand = true;
            true
        }
        Kind::Punct if c.tok[0] == b',' => {
            sep(buf, c.ws, c.gap, b',');
            buf.push(b',');
            st.prev_operand = false;
            true
        }
        _ => false,
    }
}

/// The token's class for the rules; `None` for an `ASC` the ORDER BY rule drops. A sign glued
/// to a literal where no operand precedes it takes the literal with it (`lx` moves past it).
#[inline(always)]
fn class_of(s: &[u8], lx: &mut Lexer, st: &mut State, c: &Cur) -> Option<Class> {
    let tok = c.tok;
    Some(match c.t.kind {
        Kind::Str | Kind::Num | Kind::Placeholder => Class::Literal,
        Kind::Word => {
            match c.kw {
                Kw::Null | Kw::True | Kw::False if st.is_state == 0 => Class::Literal,
                // `12foo`, `?oo` (our own output for it): words that start like a number
                // are literals to the list and LIMIT rules, but keep their folded text.
                _ if matches!(tok[0], b'0'..=b'9' | b'?') => Class::Literal,
                Kw::Asc if st.order_by => {
                    // Dropped with the whitespace before it; the states see nothing. Like a
                    // comment, it must not let its neighbours join (`-ASC-` -> `- -`).
                    st.gap = true;
                    return None;
                }
                _ => Class::Other,
            }
        }
        Kind::Punct => match tok[0] {
            b'(' => Class::Open,
            b')' => Class::Close,
            b',' => Class::Comma,
            // Signs glued to a literal where no operand precedes them: `= -1`, `(-'5'`, `+-1`.
            b'+' | b'-' if !st.prev_operand => signed_literal(s, lx, st.order_by),
            _ => Class::Other,
        },
        _ => Class::Other,
    })
}

/// At a sign with no operand before it: [`Class::Literal`] with `lx` moved past the literal the
/// sign (with any further glued signs) belongs to, or [`Class::Other`].
#[inline(always)]
fn signed_literal(s: &[u8], lx: &mut Lexer, order_by: bool) -> Class {
    let mut ahead = *lx;
    let t2 = past_signs(&mut ahead, s, order_by);
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
        *lx = ahead;
        Class::Literal
    } else {
        Class::Other
    }
}

/// VALUES rows after the first: `, (` starts a row to skip (the output goes back to before
/// the comma, `pos0` is its length now). True when the row starts here.
#[inline(always)]
fn values_rows(buf: &mut Vec<u8>, st: &mut State, class: Class, pos0: usize) -> bool {
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
            return true;
        }
        _ => st.row = Row::None,
    }
    false
}

/// Writes the token (literals as `?`, a closing list as `(?+)`), or under the LIMIT rule drops
/// the separator and second value of `LIMIT a, b` / `LIMIT a OFFSET b`.
#[inline(always)]
fn emit(buf: &mut Vec<u8>, st: &mut State, c: &Cur, class: Class) {
    let (t, tok, ws, gap) = (c.t, c.tok, c.ws, c.gap);
    if let (Limit::Sep(p), Class::Literal) = (st.limit, class) {
        buf.truncate(p);
        // Still after `limit ?`: a malformed `LIMIT 1, 2, 3` folds whole (idempotence).
        st.limit = Limit::Val(p);
        return;
    }
    match class {
        Class::Literal => {
            if t.kind == Kind::Word {
                sep(buf, ws, gap, b'?');
            } else {
                sep_literal(buf, ws);
            }
            if t.kind == Kind::Word && c.kw == Kw::Other {
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
                push_word(buf, tok, c.x8);
            } else if t.kind == Kind::QuotedIdent {
                push_quoted_ident(buf, tok);
            } else {
                buf.extend_from_slice(tok);
            }
        }
    }
    st.limit = match (st.limit, class, c.kw) {
        (_, Class::Other, Kw::Limit) => Limit::Kw,
        (Limit::Kw, Class::Literal, _) => Limit::Val(buf.len()),
        (Limit::Val(p), Class::Comma, _) | (Limit::Val(p), _, Kw::Offset) => Limit::Sep(p),
        _ => Limit::None,
    };
}

/// The rule states after a written token: list candidates (`pos0` is the output length
/// before it), IS [NOT], ORDER BY, UNION, and whether the next `-` is a sign.
#[inline(always)]
fn after_token(st: &mut State, c: &Cur, class: Class, pos0: usize) {
    let kw = c.kw;
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
        Class::Other => match c.t.kind {
            Kind::Word => {
                matches!(kw, Kw::Other | Kw::Values | Kw::Null | Kw::True | Kw::False)
            }
            Kind::QuotedIdent => true,
            _ => false,
        },
    };
    st.busy = !st.quiet();
}
