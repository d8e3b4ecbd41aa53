//! Puts bound values into a prepared statement's text: each placeholder (`?` for MySQL, `$n`
//! for PostgreSQL) found by the dialect's lexer, so a `?` or `$1` inside a string, a quoted
//! name or a comment stays as it is, is replaced by its value's literal.

use crate::lex::{Kind, Lexer, MYSQL};

/// `sql` with its `?` placeholders replaced, in order, by `literals`. `None` when the counts
/// differ (the text was cut, or it is not the statement the values were bound to).
pub fn substitute_mysql(sql: &str, literals: &[String]) -> Option<String> {
    let b = sql.as_bytes();
    let mut lx = Lexer::new(b, MYSQL);
    let mut out =
        String::with_capacity(sql.len() + literals.iter().map(String::len).sum::<usize>());
    let mut from = 0;
    let mut next = literals.iter();
    loop {
        let t = lx.next_token();
        match t.kind {
            Kind::End => break,
            Kind::Placeholder => {
                push_literal(&mut out, sql.get(from..t.start)?, next.next()?);
                from = t.end;
            }
            _ => {}
        }
    }
    out.push_str(sql.get(from..)?);
    next.next().is_none().then_some(out)
}

/// Appends the text before a placeholder, then its literal: a space between them when the
/// text ends with `-` and the literal starts with one (`a-$1` with `-5` must not become the
/// comment `a--5`).
pub(crate) fn push_literal(out: &mut String, before: &str, literal: &str) {
    out.push_str(before);
    if literal.starts_with('-') && out.ends_with('-') {
        out.push(' ');
    }
    out.push_str(literal);
}

/// `sql` with each `$n` replaced by `literals[n - 1]`. `None` when a `$n` has no value.
pub fn substitute_postgres(sql: &str, literals: &[String]) -> Option<String> {
    crate::postgres::substitute(sql, literals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn mysql_placeholders_outside_strings_and_comments() {
        assert_eq!(
            substitute_mysql(
                "SELECT '?', `?`, \"?\" /* ? */ FROM t WHERE a=? AND b IN (?,?) -- ?\n#?",
                &l(&["1", "'x'", "NULL"])
            )
            .as_deref(),
            Some("SELECT '?', `?`, \"?\" /* ? */ FROM t WHERE a=1 AND b IN ('x',NULL) -- ?\n#?")
        );
        assert_eq!(substitute_mysql("SELECT ?", &[]), None);
        assert_eq!(substitute_mysql("SELECT 1", &l(&["1"])), None);
        assert_eq!(
            substitute_mysql("SELECT 'it''s', ?", &l(&["2"])).as_deref(),
            Some("SELECT 'it''s', 2")
        );
    }

    #[test]
    fn postgres_parameters_by_number() {
        assert_eq!(
            substitute_postgres(
                "SELECT '$1', $2, \"$1\", $$ $1 $$ /* $1 */ , $1 -- $2",
                &l(&["'a'", "7"])
            )
            .as_deref(),
            Some("SELECT '$1', 7, \"$1\", $$ $1 $$ /* $1 */ , 'a' -- $2")
        );
        assert_eq!(
            substitute_postgres("SELECT 1-$1", &l(&["-1"])).as_deref(),
            Some("SELECT 1- -1")
        );
        assert_eq!(substitute_postgres("SELECT $3", &l(&["1"])), None);
        assert_eq!(substitute_postgres("SELECT $0", &l(&["1"])), None);
    }
}
