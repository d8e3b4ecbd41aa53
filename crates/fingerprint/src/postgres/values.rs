//! `$n` parameters of a PostgreSQL statement replaced by literals, found by the PostgreSQL
//! lexer (see [`crate::values`]).

use super::lex::{Lex, Tk};
use crate::values::push_literal;

/// `sql` with each `$n` replaced by `literals[n - 1]`; `None` when one has no value.
pub(crate) fn substitute(sql: &str, literals: &[String]) -> Option<String> {
    let mut lx = Lex {
        s: sql.as_bytes(),
        pos: 0,
    };
    let mut out =
        String::with_capacity(sql.len() + literals.iter().map(String::len).sum::<usize>());
    let mut from = 0;
    loop {
        let t = lx.next();
        match t.kind {
            Tk::End => break,
            Tk::Param => {
                let n: usize = sql.get(t.start + 1..t.end)?.parse().ok()?;
                push_literal(
                    &mut out,
                    sql.get(from..t.start)?,
                    literals.get(n.checked_sub(1)?)?,
                );
                from = t.end;
            }
            _ => {}
        }
    }
    out.push_str(sql.get(from..)?);
    Some(out)
}
