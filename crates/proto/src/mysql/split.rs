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
    while i < b.len() {
        let (tok, end) = token(b, i);
        match tok {
            Tok::Sep => {
                out.push(Piece {
                    range: start..i,
                    code,
                });
                start = end;
                code = false;
            }
            Tok::Comment { versioned } => code |= versioned,
            Tok::Space => {}
            Tok::Str | Tok::Word | Tok::Other => code = true,
        }
        i = end;
    }
    out.push(Piece {
        range: start..b.len(),
        code,
    });
    out
}

/// Whether `sql` may hold more than one statement: only a `;` separates, so a text without one
/// is a single piece (checked with `memchr` before the full walk of [`statements`], which costs
/// more than the statement's fingerprint).
pub fn may_split(sql: &str) -> bool {
    sql.as_bytes().contains(&b';')
}

/// The statements of `sql`: the pieces that hold code, trimmed of surrounding whitespace, at
/// most [`MAX_STATEMENTS`]. A text with one statement (`SELECT 1;`, `SELECT 1; -- done`) gives
/// one range; an empty or comment-only text gives none.
///
/// A compound statement holds its own `;`: a `CREATE PROCEDURE`, `FUNCTION`, `TRIGGER`,
/// `EVENT` or `PACKAGE` whose body is a `BEGIN ... END` block, or a MariaDB `BEGIN NOT ATOMIC`
/// block, runs to the `END` that closes its outer block (blocks counted by `BEGIN` and `CASE`
/// against `END`, where `END IF`, `END LOOP`, `END WHILE`, `END REPEAT` and `END FOR` close
/// nothing counted). Other compound statements outside a block (MariaDB's top-level `IF`,
/// `WHILE`, ...) are split at their `;`.
pub fn statements(sql: &str) -> Vec<Range<usize>> {
    let b = sql.as_bytes();
    let mut out: Vec<Range<usize>> = Vec::new();
    // A compound statement in progress: where it starts, where its last piece ends, its depth.
    let mut open: Option<(usize, usize, i64)> = None;
    for p in pieces(sql).into_iter().filter(|p| p.code) {
        let words = code_words(sql, p.range.clone());
        let r = match open {
            Some((start, _, depth)) => {
                let depth = depth + depth_change(&words);
                if depth > 0 {
                    open = Some((start, p.range.end, depth));
                    continue;
                }
                open = None;
                start..p.range.end
            }
            None if opens_block(&words) => {
                let depth = depth_change(&words);
                if depth > 0 {
                    open = Some((p.range.start, p.range.end, depth));
                    continue;
                }
                p.range
            }
            None => p.range,
        };
        push_statement(&mut out, trim(b, r));
    }
    if let Some((start, end, _)) = open {
        push_statement(&mut out, trim(b, start..end));
    }
    out
}

/// Adds a statement, the last one growing to cover the rest past [`MAX_STATEMENTS`].
fn push_statement(out: &mut Vec<Range<usize>>, r: Range<usize>) {
    if out.len() == MAX_STATEMENTS {
        if let Some(last) = out.last_mut() {
            last.end = r.end;
        }
    } else {
        out.push(r);
    }
}

/// Whether a statement's words start a compound statement whose body may hold `;`.
fn opens_block(words: &[&str]) -> bool {
    let is = |i: usize, k: &str| words.get(i).is_some_and(|w| w.eq_ignore_ascii_case(k));
    if is(0, "BEGIN") {
        return is(1, "NOT") && is(2, "ATOMIC");
    }
    if !is(0, "CREATE") {
        return false;
    }
    // CREATE [OR REPLACE] [DEFINER = ...] [AGGREGATE] [SQL SECURITY ...] PROCEDURE ...: the
    // first object keyword decides.
    for w in words.iter().skip(1).take(16) {
        let w = w.to_ascii_uppercase();
        match w.as_str() {
            "PROCEDURE" | "FUNCTION" | "TRIGGER" | "EVENT" | "PACKAGE" => return true,
            "TABLE" | "VIEW" | "INDEX" | "DATABASE" | "SCHEMA" | "USER" | "ROLE" | "SERVER"
            | "TABLESPACE" | "SEQUENCE" | "TEMPORARY" | "UNIQUE" | "FULLTEXT" | "SPATIAL"
            | "LOGFILE" | "RESOURCE" | "SPATIAL_REFERENCE" => return false,
            _ => {}
        }
    }
    false
}

/// How a piece changes the block depth: `BEGIN` and `CASE` open, `END` closes (`END CASE`
/// closes the `CASE`; `END IF`, `END LOOP`, ... close what was not counted).
fn depth_change(words: &[&str]) -> i64 {
    let mut d = 0i64;
    let mut i = 0usize;
    while let Some(w) = words.get(i) {
        if w.eq_ignore_ascii_case("BEGIN") || w.eq_ignore_ascii_case("CASE") {
            d += 1;
        } else if w.eq_ignore_ascii_case("END") {
            let next = words.get(i + 1).map(|n| n.to_ascii_uppercase());
            match next.as_deref() {
                Some("IF" | "LOOP" | "WHILE" | "REPEAT" | "FOR") => i += 1,
                Some("CASE") => {
                    d -= 1;
                    i += 1;
                }
                _ => d -= 1,
            }
        }
        i += 1;
    }
    d
}

/// The words of code in `sql[range]` (outside quotes and comments).
fn code_words(sql: &str, range: Range<usize>) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = range.start;
    while i < range.end {
        let (tok, end) = token(b, i);
        let end = end.min(range.end);
        if tok == Tok::Word
            && let Some(w) = sql.get(i..end)
        {
            out.push(w);
        }
        i = end.max(i + 1);
    }
    out
}

/// What the lexer sees at a position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Sep,
    Str,
    Comment { versioned: bool },
    Space,
    Word,
    Other,
}

/// The token starting at `i` (which is in bounds) and the index past it.
fn token(b: &[u8], i: usize) -> (Tok, usize) {
    let c = b.get(i).copied().unwrap_or(b' ');
    match c {
        b';' => (Tok::Sep, i + 1),
        b'\'' | b'"' => (Tok::Str, quoted_end(b, i + 1, c, true)),
        b'`' => (Tok::Str, quoted_end(b, i + 1, c, false)),
        b'#' => (Tok::Comment { versioned: false }, line_end(b, i + 1)),
        b'-' if b.get(i + 1) == Some(&b'-')
            && b.get(i + 2).is_none_or(|&n| n <= b' ' || n == 0x7F) =>
        {
            (Tok::Comment { versioned: false }, line_end(b, i + 2))
        }
        b'/' if b.get(i + 1) == Some(&b'*') => {
            let versioned = matches!(b.get(i + 2), Some(b'!'))
                || (matches!(b.get(i + 2), Some(b'M')) && b.get(i + 3) == Some(&b'!'));
            (Tok::Comment { versioned }, comment_end(b, i + 2))
        }
        _ if c.is_ascii_whitespace() => (Tok::Space, i + 1),
        _ if is_word_byte(c) => {
            let n = b
                .get(i..)
                .map_or(1, |r| r.iter().take_while(|&&x| is_word_byte(x)).count());
            (Tok::Word, i + n)
        }
        _ => (Tok::Other, i + 1),
    }
}

/// A byte of an unquoted identifier or keyword (any byte of a multi-byte character counts).
fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
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
    fn compound_statements_hold_their_separators() {
        let proc = "CREATE DEFINER=`root`@`%` PROCEDURE p(IN a INT)\nBEGIN\n  DECLARE x INT;\n  \
                    IF a > 0 THEN SELECT CASE WHEN a THEN 1 ELSE 2 END; END IF;\n  \
                    lbl: BEGIN SELECT 'END;'; END lbl;\n  CASE a WHEN 1 THEN SELECT 1; END CASE;\n\
                    END";
        let sql = format!("{proc};\nCALL p(1); SELECT 2;");
        assert_eq!(stmts(&sql), [proc, "CALL p(1)", "SELECT 2"]);
        let trig = "CREATE OR REPLACE TRIGGER t BEFORE INSERT ON x FOR EACH ROW BEGIN \
                    SET NEW.a = 1; WHILE 0 DO SET @b = 1; END WHILE; END";
        let sql = format!("{trig}; SELECT 3");
        assert_eq!(stmts(&sql), [trig, "SELECT 3"]);
        // A body without a block ends at its separator.
        assert_eq!(
            stmts("CREATE TRIGGER t BEFORE INSERT ON x FOR EACH ROW SET NEW.a = 1; SELECT 1"),
            [
                "CREATE TRIGGER t BEFORE INSERT ON x FOR EACH ROW SET NEW.a = 1",
                "SELECT 1"
            ]
        );
        assert_eq!(
            stmts("CREATE FUNCTION f() RETURNS INT RETURN CASE WHEN 1 THEN 2 END; SELECT f()"),
            [
                "CREATE FUNCTION f() RETURNS INT RETURN CASE WHEN 1 THEN 2 END",
                "SELECT f()"
            ]
        );
        assert_eq!(
            stmts("BEGIN NOT ATOMIC SELECT 1; SELECT 2; END; SELECT 3"),
            ["BEGIN NOT ATOMIC SELECT 1; SELECT 2; END", "SELECT 3"]
        );
        // Not compound: a transaction's BEGIN, a table, columns named begin and end.
        assert_eq!(
            stmts("BEGIN; SELECT 1; COMMIT"),
            ["BEGIN", "SELECT 1", "COMMIT"]
        );
        assert_eq!(
            stmts("CREATE TABLE procedure_t (begin INT); SELECT begin, end FROM t"),
            [
                "CREATE TABLE procedure_t (begin INT)",
                "SELECT begin, end FROM t"
            ]
        );
        // Unclosed: the block runs to the end.
        assert_eq!(
            stmts("CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2"),
            ["CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2"]
        );
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
