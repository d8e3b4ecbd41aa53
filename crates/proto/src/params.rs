//! Bound values of a prepared statement's execution: kept raw on the event (one copy of the
//! parameter bytes, bounded) and decoded to SQL literals only when asked, for the example a
//! group keeps, so that the example can be run through `EXPLAIN`.

use crate::{mysql, postgres};

/// The most parameter bytes kept for one execution (and never more than the session's
/// `max_text`); an execution with more keeps none.
pub const MAX_PARAM_BYTES: usize = 64 << 10;

/// How a statement's text marks its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placeholders {
    /// `?`, in order (MySQL).
    Question,
    /// `$1`, `$2`, ... (PostgreSQL).
    Dollar,
}

/// The raw parameter bytes of one execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BoundParams {
    /// MySQL COM_STMT_EXECUTE.
    Mysql(mysql::params::RawParams),
    /// PostgreSQL Bind.
    Postgres(postgres::params::RawParams),
}

impl BoundParams {
    /// One SQL literal per parameter, in order. A value that cannot be decoded becomes a
    /// marked placeholder: `NULL /* dbtap: ... */`.
    pub fn literals(&self) -> Vec<String> {
        match self {
            BoundParams::Mysql(r) => r.literals(),
            BoundParams::Postgres(r) => r.literals(),
        }
    }

    pub fn placeholders(&self) -> Placeholders {
        match self {
            BoundParams::Mysql(_) => Placeholders::Question,
            BoundParams::Postgres(_) => Placeholders::Dollar,
        }
    }
}

/// The literal for a value that could not be decoded, saying why.
pub fn undecoded(why: &str) -> String {
    format!("NULL /* dbtap: {why} */")
}

/// Bytes as hex digits.
pub fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(char::from(D[usize::from(x >> 4)]));
        s.push(char::from(D[usize::from(x & 15)]));
    }
    s
}

/// Text that can go between single quotes with only `'` doubled, whatever the server's
/// escaping mode: valid UTF-8 without backslashes or control characters.
pub fn plain_text(b: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(b).ok()?;
    (!s.chars().any(|c| c == '\\' || c.is_control())).then_some(s)
}

/// `'s'` with `'` doubled.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push('\'');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(hex(b"\x00\xffA"), "00ff41");
        assert_eq!(quote("it's"), "'it''s'");
        assert_eq!(plain_text(b"abc"), Some("abc"));
        assert_eq!(plain_text(b"a\\b"), None);
        assert_eq!(plain_text(b"a\nb"), None);
        assert_eq!(plain_text(b"\xff"), None);
        assert!(undecoded("x").starts_with("NULL /*"));
    }
}
