//! Output of the default MySQL normalizer: separating spaces that keep tokens apart, and
//! words, digit runs and quoted identifiers folded the way pt-query-digest folds them.

use super::keywords::in_range;
use crate::lex;

/// Bytes that would glue with a neighbour if a comment between them vanished.
#[inline]
pub(super) fn wordish(b: u8) -> bool {
    lex::is_ident(b) || b == b'?'
}

/// `last` and `first`, once the comment between them is gone, would lex as something else:
/// one word (`a/**/b`), a comment opener (`-/**/-`, `//**/*`), a comment closer, or a doubled
/// quote inside one quoted token (`` `a`/**/`b` ``).
#[inline]
pub(super) fn glues(last: u8, first: u8) -> bool {
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
pub(super) fn sep(buf: &mut Vec<u8>, ws: bool, gap: bool, first: u8) {
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
pub(super) fn sep_literal(buf: &mut Vec<u8>, ws: bool) {
    let Some(&last) = buf.last() else { return };
    if ws || (wordish(last) && !after_introducer(buf)) {
        buf.push(b' ');
    }
}

/// `buf` ends with a word that starts with `_` (a charset introducer such as `_utf?mb?`).
pub(super) fn after_introducer(buf: &[u8]) -> bool {
    let start = buf.iter().rposition(|&b| !wordish(b)).map_or(0, |i| i + 1);
    buf.get(start) == Some(&b'_')
}

/// Lowercase ASCII and fold each digit run (with the hex letters and `x` that follow it, as pt
/// does) to `?`: `sbtest1` -> `sbtest?`, `12foo` -> `?oo`.
/// A word, folded; `x` is its [`word8`] load.
#[inline(always)]
pub(super) fn push_word(buf: &mut Vec<u8>, w: &[u8], x: Option<u64>) {
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
pub(super) fn fold8(x: u64, len: usize) -> (u64, usize) {
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
pub(super) fn push_folded(buf: &mut Vec<u8>, w: &[u8]) {
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
pub(super) fn push_quoted_ident(buf: &mut Vec<u8>, q: &[u8]) {
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
