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

mod canon;
mod display;
mod lex;
mod lists;
mod normalize;
mod values;

pub(crate) use values::substitute;
#[cfg(test)]
mod tests;

use normalize::Normalizer;

/// Normalizes `sql` into `out` (cleared first) and returns the group hash.
pub fn fingerprint(sql: &str, out: &mut String) -> u64 {
    out.clear();
    let mut n = Normalizer::new(sql.as_bytes(), out);
    n.run();
    n.hash.finish()
}

/// Existing parameters `$1..$MAP_LEN` keep one new number each; higher ones get a fresh number
/// at every use.
const MAP_LEN: usize = 128;
