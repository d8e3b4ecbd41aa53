//! Splits the text of a simple-protocol Query message into its statements, the way the server's
//! parser does: on top-level `;`, not inside quotes ('...', E'...' with backslash escapes,
//! "identifiers", $tag$ dollar quotes $tag$), comments (`--`, nested `/* */`), parentheses, or
//! the body of a `BEGIN ATOMIC ... END` function. Empty statements are skipped as the server
//! skips them. Works on bytes (every delimiter is ASCII, so the ranges are char boundaries of
//! UTF-8 text) and never allocates.

use std::ops::Range;

/// One statement found by [`next_statement`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The statement text: leading and trailing whitespace and the terminating `;` excluded
    /// (comments inside or before it are kept).
    pub text: Range<usize>,
    /// Where the next statement's search starts: just after the `;`, or the end of the text.
    pub end: usize,
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

/// End of a quoted run starting at `i` (the opening quote) closed by `q`, where a doubled quote
/// stands for itself and, if `backslash`, `\` escapes the next byte. Unterminated: the end.
fn skip_quoted(s: &[u8], i: usize, q: u8, backslash: bool) -> usize {
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

/// End of a (nested) block comment starting at `i` (`/*`).
fn skip_block_comment(s: &[u8], i: usize) -> usize {
    let mut depth = 0usize;
    let mut j = i;
    while j < s.len() {
        if s[j] == b'/' && s.get(j + 1) == Some(&b'*') {
            depth += 1;
            j += 2;
        } else if s[j] == b'*' && s.get(j + 1) == Some(&b'/') {
            depth -= 1;
            j += 2;
            if depth == 0 {
                return j;
            }
        } else {
            j += 1;
        }
    }
    s.len()
}

/// The length of a dollar-quote tag (`$$`, `$name$`) starting at `i`, if one starts there.
pub(crate) fn dollar_tag_len(s: &[u8], i: usize) -> Option<usize> {
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

/// End of a dollar-quoted string whose opening tag (`tag_len` bytes) starts at `i`.
pub(crate) fn skip_dollar_quoted(s: &[u8], i: usize, tag_len: usize) -> usize {
    let tag = &s[i..i + tag_len];
    let mut j = i + tag_len;
    while j < s.len() {
        if s[j] == b'$' && s.get(j..j + tag_len) == Some(tag) {
            return j + tag_len;
        }
        j += 1;
    }
    s.len()
}

/// The first non-empty statement at or after `from`, or `None` when only whitespace, comments
/// and semicolons remain.
pub fn next_statement(s: &[u8], from: usize) -> Option<Statement> {
    let mut i = from.min(s.len());
    let mut start: Option<usize> = None;
    let mut has_token = false;
    let mut last_end = i;
    let mut parens = 0usize;
    // `BEGIN ATOMIC` bodies: CASE ... END nests inside them.
    let mut atomic = 0usize;
    let mut prev_begin = false;
    while i < s.len() {
        let b = s[i];
        if is_space(b) {
            i += 1;
            continue;
        }
        start.get_or_insert(i);
        let tok = i;
        let mut word_begin = false;
        i = match b {
            b'-' if s.get(i + 1) == Some(&b'-') => {
                let e = s[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(s.len(), |p| i + p);
                last_end = e;
                i = e;
                continue;
            }
            b'/' if s.get(i + 1) == Some(&b'*') => {
                let e = skip_block_comment(s, i);
                last_end = e;
                i = e;
                continue;
            }
            b';' if parens == 0 && atomic == 0 => {
                if has_token {
                    return Some(Statement {
                        text: start.unwrap_or(tok)..last_end,
                        end: i + 1,
                    });
                }
                // An empty statement: the server skips it.
                start = None;
                i += 1;
                last_end = i;
                continue;
            }
            b'\'' => skip_quoted(s, i, b'\'', false),
            b'"' => skip_quoted(s, i, b'"', false),
            b'$' => match s.get(i + 1) {
                Some(d) if d.is_ascii_digit() => {
                    let n = s[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                    i + 1 + n
                }
                _ => match dollar_tag_len(s, i) {
                    Some(t) => skip_dollar_quoted(s, i, t),
                    None => i + 1,
                },
            },
            b'(' => {
                parens += 1;
                i + 1
            }
            b')' => {
                parens = parens.saturating_sub(1);
                i + 1
            }
            _ if is_ident_start(b) => {
                let n = s[i..].iter().take_while(|&&c| is_ident_char(c)).count();
                let w = &s[i..i + n];
                if matches!(w, b"E" | b"e") && s.get(i + 1) == Some(&b'\'') {
                    skip_quoted(s, i + 1, b'\'', true)
                } else {
                    if (prev_begin && w.eq_ignore_ascii_case(b"atomic"))
                        || (atomic > 0 && w.eq_ignore_ascii_case(b"case"))
                    {
                        atomic += 1;
                    } else if atomic > 0 && w.eq_ignore_ascii_case(b"end") {
                        atomic -= 1;
                    }
                    word_begin = w.eq_ignore_ascii_case(b"begin");
                    i + n
                }
            }
            _ => i + 1,
        };
        prev_begin = word_begin;
        has_token = true;
        last_end = i;
    }
    if has_token {
        Some(Statement {
            text: start.unwrap_or(from)..last_end,
            end: s.len(),
        })
    } else {
        None
    }
}

/// Whether `s` holds at most one statement: its range, or `None` when there are several.
/// Text without any statement yields the whole text, trimmed.
pub fn single_statement(s: &[u8]) -> Option<Range<usize>> {
    match next_statement(s, 0) {
        None => {
            let a = s.iter().position(|&b| !is_space(b)).unwrap_or(s.len());
            let z = s.iter().rposition(|&b| !is_space(b)).map_or(a, |p| p + 1);
            Some(a..z.max(a))
        }
        Some(st) => next_statement(s, st.end).is_none().then_some(st.text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(st) = next_statement(s.as_bytes(), from) {
            out.push(&s[st.text.clone()]);
            assert!(st.end > from, "no progress in {s:?}");
            from = st.end;
        }
        out
    }

    #[test]
    fn splits_on_top_level_semicolons() {
        assert_eq!(split("SELECT 1"), ["SELECT 1"]);
        assert_eq!(split("  SELECT 1 ;  "), ["SELECT 1"]);
        assert_eq!(
            split("SELECT 1; SELECT 2;UPDATE t SET a=1"),
            ["SELECT 1", "SELECT 2", "UPDATE t SET a=1"]
        );
        assert_eq!(split(";;SELECT 1;;; ;"), ["SELECT 1"]);
        assert!(split("").is_empty());
        assert!(split(" ; -- nothing\n ; /* x */").is_empty());
        assert_eq!(split("SELECT 1; -- done"), ["SELECT 1"]);
        assert_eq!(
            split("SELECT 1; /* c */ SELECT 2"),
            ["SELECT 1", "/* c */ SELECT 2"]
        );
    }

    #[test]
    fn quotes_comments_and_parens_hide_semicolons() {
        assert_eq!(
            split("SELECT ';', 'it''s;'; SELECT 2"),
            ["SELECT ';', 'it''s;'", "SELECT 2"]
        );
        assert_eq!(
            split(r"SELECT E'\';'; SELECT 2"),
            [r"SELECT E'\';'", "SELECT 2"]
        );
        // Standard strings: a backslash is an ordinary character.
        assert_eq!(split(r"SELECT '\'; SELECT 2"), [r"SELECT '\'", "SELECT 2"]);
        assert_eq!(
            split(r#"SELECT 1 AS "a;""b"; SELECT 2"#),
            [r#"SELECT 1 AS "a;""b""#, "SELECT 2"]
        );
        assert_eq!(
            split("SELECT $$a;b$$, $x$ $$; $x$; SELECT 2"),
            ["SELECT $$a;b$$, $x$ $$; $x$", "SELECT 2"]
        );
        assert_eq!(split("SELECT $1; SELECT $2"), ["SELECT $1", "SELECT $2"]);
        assert_eq!(split("SELECT a$b; SELECT 2"), ["SELECT a$b", "SELECT 2"]);
        assert_eq!(
            split("SELECT 1 -- x;y\n; SELECT 2"),
            ["SELECT 1 -- x;y", "SELECT 2"]
        );
        assert_eq!(
            split("SELECT /* a /* b; */ c; */ 1; SELECT 2"),
            ["SELECT /* a /* b; */ c; */ 1", "SELECT 2"]
        );
        assert_eq!(
            split("SELECT (1;2); SELECT 2"),
            ["SELECT (1;2)", "SELECT 2"]
        );
        // Unterminated constructs run to the end.
        assert_eq!(split("SELECT 'a; SELECT 2"), ["SELECT 'a; SELECT 2"]);
        assert_eq!(split("SELECT $q$ a; b"), ["SELECT $q$ a; b"]);
        assert_eq!(split("SELECT 1 /* ; "), ["SELECT 1 /* ; "]);
        assert_eq!(split("SELECT E'\\"), ["SELECT E'\\"]);
    }

    #[test]
    fn begin_atomic_bodies() {
        let f = "CREATE FUNCTION f(a int) RETURNS int LANGUAGE sql BEGIN ATOMIC \
                 SELECT CASE WHEN a > 0 THEN 1 ELSE 2 END; SELECT 3; END; SELECT 4";
        let parts = split(f);
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert!(parts[0].ends_with("SELECT 3; END"));
        assert_eq!(parts[1], "SELECT 4");
        // A plain BEGIN is a transaction.
        assert_eq!(split("BEGIN; SELECT 1; END"), ["BEGIN", "SELECT 1", "END"]);
    }

    #[test]
    fn single_statement_detection() {
        assert_eq!(single_statement(b" SELECT 1; "), Some(1..9));
        assert_eq!(single_statement(b"SELECT 1; SELECT 2"), None);
        assert_eq!(single_statement(b"  "), Some(2..2));
        assert_eq!(single_statement(b" -- c\n"), Some(1..5));
        assert_eq!(single_statement(b""), Some(0..0));
    }

    #[test]
    fn utf8_text_splits_at_char_boundaries() {
        let s = "SELECT 'é;ü'; SELECT ñ";
        assert_eq!(split(s), ["SELECT 'é;ü'", "SELECT ñ"]);
    }
}
