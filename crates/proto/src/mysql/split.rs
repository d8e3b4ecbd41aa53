//! Splitting a COM_QUERY's text into the statements a server with multi-statements on runs
//! one after the other: top-level `;` separators, with quotes, backticks, comments and
//! versioned comments respected. No `DELIMITER` (a client-side command, never sent).

use std::ops::Range;

/// Most statements one query is split into; past that, the last one runs to the end of the
/// text (its separators included), so a pathological text costs bounded memory.
pub const MAX_STATEMENTS: usize = 4096;

/// One piece of text between separators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Byte range in the text, separators excluded.
    pub range: Range<usize>,
    /// Whether it holds anything besides whitespace and plain comments (a quoted string or a
    /// versioned comment `/*! ... */` is code).
    pub code: bool,
}

/// The pieces of `sql` between top-level `;` separators, in order. Joining their texts with
/// `;` gives back `sql` exactly; there is always at least one piece.
///
/// Inside `'...'` and `"..."` a backslash escapes the next byte (and a doubled quote reads as a
/// string that ends and starts again); `` `...` `` has no escapes. Comments are `# ...` and
/// `-- ...` (two dashes then whitespace or a control character, or the end) to the end of the
/// line, and `/* ... */`; a `;` inside any of them, or inside a versioned `/*! ... */` or
/// `/*M! ... */`, does not separate. An unterminated quote or comment runs to the end.
pub fn pieces(sql: &str) -> Vec<Piece> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut code = false;
    let mut i = 0usize;
    while let Some(&c) = b.get(i) {
        match c {
            b';' => {
                out.push(Piece {
                    range: start..i,
                    code,
                });
                start = i + 1;
                code = false;
                i += 1;
            }
            b'\'' | b'"' => {
                code = true;
                i = quoted_end(b, i + 1, c, true);
            }
            b'`' => {
                code = true;
                i = quoted_end(b, i + 1, c, false);
            }
            b'#' => i = line_end(b, i + 1),
            b'-' if b.get(i + 1) == Some(&b'-')
                && b.get(i + 2).is_none_or(|&n| n <= b' ' || n == 0x7F) =>
            {
                i = line_end(b, i + 2);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let versioned = matches!(b.get(i + 2), Some(b'!'))
                    || (matches!(b.get(i + 2), Some(b'M')) && b.get(i + 3) == Some(&b'!'));
                code |= versioned;
                i = comment_end(b, i + 2);
            }
            _ => {
                code |= !c.is_ascii_whitespace();
                i += 1;
            }
        }
    }
    out.push(Piece {
        range: start..b.len(),
        code,
    });
    out
}

/// The statements of `sql`: the pieces that hold code, trimmed of surrounding whitespace, at
/// most [`MAX_STATEMENTS`]. A text with one statement (`SELECT 1;`, `SELECT 1; -- done`) gives
/// one range; an empty or comment-only text gives none.
pub fn statements(sql: &str) -> Vec<Range<usize>> {
    let b = sql.as_bytes();
    let mut out: Vec<Range<usize>> = Vec::new();
    for p in pieces(sql).into_iter().filter(|p| p.code) {
        let r = trim(b, p.range);
        if out.len() == MAX_STATEMENTS {
            if let Some(last) = out.last_mut() {
                last.end = r.end;
            }
        } else {
            out.push(r);
        }
    }
    out
}

/// Whether a statement is a `CALL` (its procedure may send several result sets, then an OK).
pub fn is_call(stmt: &str) -> bool {
    let s = skip_comments(stmt);
    s.get(..4).is_some_and(|k| k.eq_ignore_ascii_case("call"))
        && s.as_bytes()
            .get(4)
            .is_none_or(|&c| !(c.is_ascii_alphanumeric() || c == b'_' || c == b'$'))
}

/// `stmt` past leading whitespace and plain comments.
fn skip_comments(mut s: &str) -> &str {
    loop {
        let t = s.trim_start();
        let b = t.as_bytes();
        let next = if t.starts_with("/*") && !t.starts_with("/*!") && !t.starts_with("/*M!") {
            comment_end(b, 2)
        } else if t.starts_with('#') {
            line_end(b, 1)
        } else if t.starts_with("--") && b.get(2).is_none_or(|&n| n <= b' ') {
            line_end(b, 2)
        } else {
            return t;
        };
        s = t.get(next..).unwrap_or("");
    }
}

/// The index past the quote `q` that closes a string whose content starts at `i`.
fn quoted_end(b: &[u8], mut i: usize, q: u8, escapes: bool) -> usize {
    while let Some(&c) = b.get(i) {
        if escapes && c == b'\\' {
            i += 2;
        } else if c == q {
            return i + 1;
        } else {
            i += 1;
        }
    }
    b.len()
}

/// The index of the newline ending a line comment (it is whitespace, so left to the caller).
fn line_end(b: &[u8], i: usize) -> usize {
    b.get(i..)
        .and_then(|rest| rest.iter().position(|&c| c == b'\n'))
        .map_or(b.len(), |p| i + p)
}

/// The index past the `*/` closing a block comment whose content starts at `i`.
fn comment_end(b: &[u8], i: usize) -> usize {
    b.get(i..)
        .and_then(|rest| rest.windows(2).position(|w| w == b"*/"))
        .map_or(b.len(), |p| i + p + 2)
}

/// `r` without the ASCII whitespace at either end (ASCII bytes are never inside a UTF-8
/// sequence, so the ends stay on character boundaries).
fn trim(b: &[u8], r: Range<usize>) -> Range<usize> {
    let s = b.get(r.clone()).unwrap_or(&[]);
    let lead = s.iter().take_while(|c| c.is_ascii_whitespace()).count();
    let trail = s[lead..]
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_whitespace())
        .count();
    r.start + lead..r.end - trail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmts(sql: &str) -> Vec<&str> {
        statements(sql).into_iter().map(|r| &sql[r]).collect()
    }

    #[test]
    fn plain_separators() {
        assert_eq!(stmts("SELECT 1; SELECT 2"), ["SELECT 1", "SELECT 2"]);
        assert_eq!(stmts("SELECT 1;SELECT 2;\n"), ["SELECT 1", "SELECT 2"]);
        assert_eq!(stmts("SELECT 1;"), ["SELECT 1"]);
        assert_eq!(stmts("SELECT 1"), ["SELECT 1"]);
        assert_eq!(stmts("  ;; \n; "), Vec::<&str>::new());
        assert_eq!(stmts(""), Vec::<&str>::new());
    }

    #[test]
    fn quotes_and_escapes_hide_separators() {
        assert_eq!(
            stmts(r"SELECT 'a;b', 'it''s;', 'x\';y'; SELECT 2"),
            [r"SELECT 'a;b', 'it''s;', 'x\';y'", "SELECT 2"]
        );
        assert_eq!(
            stmts(r#"SELECT "a;\"b"; SELECT `we;ird``;`"#),
            [r#"SELECT "a;\"b""#, "SELECT `we;ird``;`"]
        );
        // A backslash does not escape in backticks.
        assert_eq!(
            stmts(r"SELECT `a\`; SELECT 2"),
            [r"SELECT `a\`", "SELECT 2"]
        );
        // Unterminated: the rest is one statement.
        assert_eq!(stmts("SELECT 'a; SELECT 2"), ["SELECT 'a; SELECT 2"]);
    }

    #[test]
    fn comments_hide_separators_and_are_not_statements() {
        assert_eq!(
            stmts("SELECT 1 -- a;b\n; SELECT 2 # c;d\n; /* e;f */ SELECT 3"),
            ["SELECT 1 -- a;b", "SELECT 2 # c;d", "/* e;f */ SELECT 3"]
        );
        // `--` without whitespace after it is two minus signs.
        assert_eq!(stmts("SELECT 1--1; SELECT 2"), ["SELECT 1--1", "SELECT 2"]);
        assert_eq!(stmts("SELECT 1; -- done"), ["SELECT 1"]);
        assert_eq!(stmts("SELECT 1; /* x */ ; # y"), ["SELECT 1"]);
        assert_eq!(stmts("SELECT 1 --"), ["SELECT 1 --"]);
        // Versioned comments are code.
        assert_eq!(
            stmts("/*!40101 SET NAMES utf8 */; /*M!100100 SET a=1 */; /*!50000 x;y */"),
            [
                "/*!40101 SET NAMES utf8 */",
                "/*M!100100 SET a=1 */",
                "/*!50000 x;y */"
            ]
        );
        assert_eq!(
            stmts("SELECT 1 /* open; SELECT 2"),
            ["SELECT 1 /* open; SELECT 2"]
        );
    }

    #[test]
    fn pieces_rejoin() {
        let sql = " a;'b;';`c` -- ;\n;#;\n;/*;*/;d;";
        let p = pieces(sql);
        let joined: Vec<&str> = p.iter().map(|p| &sql[p.range.clone()]).collect();
        assert_eq!(joined.join(";"), sql);
        assert_eq!(
            p.iter().map(|p| p.code).collect::<Vec<_>>(),
            [true, true, true, false, false, true, false]
        );
    }

    #[test]
    fn statement_count_is_capped() {
        let sql = "x;".repeat(MAX_STATEMENTS + 10);
        let s = statements(&sql);
        assert_eq!(s.len(), MAX_STATEMENTS);
        assert_eq!(s.last().unwrap().end, sql.len() - 1);
    }

    #[test]
    fn call() {
        assert!(is_call("CALL p()"));
        assert!(is_call("/* app */ call\tp"));
        assert!(is_call("CALL"));
        assert!(!is_call("CALLER()"));
        assert!(!is_call("SELECT 1"));
        assert!(!is_call("/*!50000 CALL p() */"));
    }
}
