//! MySQL fingerprints: dbtap's default normalization and an exact pt-query-digest 3.2.1 mode.
//!
//! See the crate documentation for the rules and for where the default mode deliberately differs
//! from pt-query-digest.

mod emit;
mod fast;
mod keywords;
mod lists;
mod normalize;
mod pt;
mod special;

use crate::lex::{self, Lexer};
use normalize::State;

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

/// The default normalization of `s` appended to `buf`.
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
    let mut st = State::new();
    buf.reserve(s.len() + 16);
    if special::call_or_use(s, lx, buf) || !normalize::run(s, &mut lx, buf, &mut st) {
        return;
    }
    if st.union {
        pt::union_fold(buf, 8);
    }
    // Only an unterminated quoted identifier can end in whitespace.
    while buf.last() == Some(&b' ') {
        buf.pop();
    }
}
