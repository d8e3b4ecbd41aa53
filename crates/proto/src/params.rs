//! Bound values of a prepared statement's execution: kept raw on the event (one copy of the
//! parameter bytes, bounded) and decoded to SQL literals only when asked, for the example a
//! group keeps, so that the example can be run through `EXPLAIN`.

use std::sync::Arc;

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
    /// Bytes the raw body's buffer holds.
    pub(crate) fn body_capacity(&self) -> usize {
        match self {
            BoundParams::Mysql(r) => r.body.capacity(),
            BoundParams::Postgres(r) => r.body.capacity(),
        }
    }

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

/// Parameter records handed out lately, kept to be refilled: an execution's parameters must be
/// copied (the event outlives the message), but once its event was consumed and not kept as a
/// group's example, the session holds the only reference left and copies the next
/// execution's parameters into the same allocations instead of new ones. Bounded:
/// [`PARAM_RECORDS`] records of at most about the bytes the protocol keeps of one execution's
/// parameters each.
#[derive(Debug, Default)]
pub(crate) struct ParamRecords {
    records: Vec<Arc<BoundParams>>,
    /// The record replaced next when none is free.
    next: usize,
}

/// Records kept per connection: one per request a pipeline holds in flight, within reason.
pub(crate) const PARAM_RECORDS: usize = 4;

impl ParamRecords {
    /// A record of a `len`-byte body: a free one that `refill` takes (it says whether the
    /// record is of its kind), or `make`'s (then kept).
    pub(crate) fn fill(
        &mut self,
        len: usize,
        refill: impl Fn(&mut BoundParams) -> bool,
        make: impl FnOnce() -> BoundParams,
    ) -> Arc<BoundParams> {
        for r in &mut self.records {
            // Unique: its event is gone. Refilled only when its buffer is not much larger
            // than the body, so an example keeps about what it holds.
            if let Some(p) = Arc::get_mut(r)
                && p.body_capacity() <= 2 * len + 64
                && refill(p)
            {
                return Arc::clone(r);
            }
        }
        let fresh = Arc::new(make());
        if self.records.len() < PARAM_RECORDS {
            self.records.push(Arc::clone(&fresh));
        } else if let Some(r) = self.records.get_mut(self.next) {
            *r = Arc::clone(&fresh);
            self.next = (self.next + 1) % PARAM_RECORDS;
        }
        fresh
    }

    /// Heap bytes held (records shared with events are counted here too).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.records.iter().map(|r| r.body_capacity() + 64).sum()
    }
}
