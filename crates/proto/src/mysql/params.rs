//! COM_STMT_EXECUTE parameters: where the null bitmap, the types and the values sit in the
//! packet, and the binary values decoded to MySQL literals (only for a group's example).
//!
//! The types are sent with `new_params_bound_flag` = 1, usually on the first execution only:
//! the session remembers them per statement ([`StmtParams`]) and later executions decode
//! with them. Parameters sent with COM_STMT_SEND_LONG_DATA are not in the packet; such an
//! execution cannot be told apart and may decode wrongly (rare; the literals then say so
//! only when a value runs past the packet).

use std::sync::Arc;

use super::wire::{Cursor, LenencRead};
use crate::kit::WireError;
use crate::params::{hex, plain_text, quote, undecoded};

/// `flags` bit of COM_STMT_EXECUTE: a parameter count precedes the null bitmap (with
/// CLIENT_QUERY_ATTRIBUTES).
const PARAMETER_COUNT_AVAILABLE: u8 = 0x08;
/// Second type byte: the integer is unsigned.
const UNSIGNED: u8 = 0x80;

/// What the session remembers of a prepared statement for its executions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StmtParams {
    /// Parameters, from the prepare OK.
    pub count: u16,
    /// Two bytes per parameter (type, flags), from the last execution that sent them.
    pub types: Option<Arc<[u8]>>,
}

/// The parameter part of one COM_STMT_EXECUTE, undecoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawParams {
    pub count: u16,
    pub flags: u8,
    pub query_attrs: bool,
    /// The packet from the byte after the iteration count.
    pub body: Vec<u8>,
    /// The types remembered for the statement, for an execution that does not send them.
    pub types: Option<Arc<[u8]>>,
}

/// Where things are in a parameter body.
struct Layout<'a> {
    n: usize,
    nulls: &'a [u8],
    /// Sent with this execution: two bytes per parameter.
    types: Option<Vec<u8>>,
    values: &'a [u8],
}

fn layout(body: &[u8], count: u16, flags: u8, query_attrs: bool) -> Result<Layout<'_>, WireError> {
    let mut c = Cursor::new(body);
    let n = if query_attrs && flags & PARAMETER_COUNT_AVAILABLE != 0 {
        usize::try_from(c.lenenc("parameter count")?).unwrap_or(usize::MAX)
    } else {
        usize::from(count)
    };
    if n == 0 {
        return Ok(Layout {
            n,
            nulls: &[],
            types: None,
            values: &[],
        });
    }
    let nulls = c.bytes(n.div_ceil(8), "null bitmap")?;
    let types = if c.u8("new params bound")? == 1 {
        let mut t = Vec::with_capacity(n.min(body.len()) * 2);
        for _ in 0..n {
            t.extend_from_slice(c.bytes(2, "parameter type")?);
            if query_attrs {
                c.lenenc_bytes("parameter name")?;
            }
        }
        Some(t)
    } else {
        None
    };
    Ok(Layout {
        n,
        nulls,
        types,
        values: c.rest(),
    })
}

/// The types an execution sends (new-params-bound = 1), to remember for the statement.
pub fn sent_types(body: &[u8], count: u16, flags: u8, query_attrs: bool) -> Option<Vec<u8>> {
    if !(query_attrs && flags & PARAMETER_COUNT_AVAILABLE != 0) {
        // The usual execution sends none: the new-params-bound byte after the null bitmap is
        // not 1 (or no parameter, or the body is cut short), as `layout` would find.
        let n = usize::from(count);
        if n == 0 || body.get(n.div_ceil(8)) != Some(&1) {
            return None;
        }
    }
    layout(body, count, flags, query_attrs).ok()?.types
}

impl RawParams {
    /// One literal per prepared parameter.
    pub fn literals(&self) -> Vec<String> {
        let count = usize::from(self.count);
        let l = match layout(&self.body, self.count, self.flags, self.query_attrs) {
            Ok(l) => l,
            Err(_) => return vec![undecoded("parameters cut short"); count],
        };
        let types: &[u8] = match (&l.types, &self.types) {
            (Some(t), _) => t,
            (None, Some(t)) => t,
            (None, None) => return vec![undecoded("parameter types not seen"); count],
        };
        let mut c = Cursor::new(l.values);
        let mut out = Vec::with_capacity(count);
        let mut broken: Option<&str> = None;
        for i in 0..l.n.min(count) {
            let null = l.nulls.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1);
            let lit = if null {
                "NULL".to_string()
            } else if let Some(why) = broken {
                undecoded(why)
            } else {
                let (t, f) = (
                    types.get(2 * i).copied(),
                    types.get(2 * i + 1).copied().unwrap_or(0),
                );
                match t.map(|t| value(&mut c, t, f & UNSIGNED != 0)) {
                    Some(Ok(Some(v))) => v,
                    Some(Ok(None)) => {
                        broken = Some("parameter of an unknown type before this one");
                        undecoded(&format!("type 0x{:02x} not decoded", t.unwrap_or(0)))
                    }
                    Some(Err(_)) | None => {
                        broken = Some("parameters cut short");
                        undecoded("parameters cut short")
                    }
                }
            };
            out.push(lit);
        }
        out.resize_with(count, || undecoded("parameter missing"));
        out
    }
}

/// One binary value of type `t` as a literal; `Ok(None)` for a type not known.
fn value(c: &mut Cursor<'_>, t: u8, unsigned: bool) -> Result<Option<String>, WireError> {
    Ok(Some(match t {
        0x01 => int(u64::from(c.u8("tiny")?), 8, unsigned),
        0x02 | 0x0d => int(u64::from(c.u16("short")?), 16, unsigned),
        0x03 | 0x09 => int(u64::from(c.u32("long")?), 32, unsigned),
        0x08 => int(c.u64("longlong")?, 64, unsigned),
        0x04 => float(f64::from(f32::from_bits(c.u32("float")?)), true),
        0x05 => float(f64::from_bits(c.u64("double")?), false),
        0x06 => "NULL".to_string(),
        0x07 | 0x0a | 0x0c => datetime(c, t == 0x0a)?,
        0x0b => time(c)?,
        0x00 | 0xf6 => decimal(c.lenenc_bytes("decimal")?),
        0xf9..=0xfc | 0x10 | 0xff => string(c.lenenc_bytes("blob")?, true),
        0x0f | 0xf5 | 0xf7 | 0xf8 | 0xfd | 0xfe => string(c.lenenc_bytes("string")?, false),
        _ => return Ok(None),
    }))
}

/// An integer of `bits` bits, sign-extended unless `unsigned`.
fn int(v: u64, bits: u32, unsigned: bool) -> String {
    if unsigned || bits == 0 {
        return v.to_string();
    }
    let shift = 64 - bits;
    (((v << shift) as i64) >> shift).to_string()
}

/// A float or double; `single`: print the shortest form that reads back as the same f32.
pub(crate) fn float(v: f64, single: bool) -> String {
    if !v.is_finite() {
        return undecoded(&format!("{v} has no SQL literal"));
    }
    // `1e300` reads as a double in MySQL; `1.0` as a decimal, which compares the same.
    if single {
        format!("{:?}", v as f32)
    } else {
        format!("{v:?}")
    }
}

/// A DECIMAL sent as text: as it is when it looks like a number, else quoted.
fn decimal(b: &[u8]) -> String {
    let ok = !b.is_empty()
        && b.iter()
            .all(|&x| x.is_ascii_digit() || matches!(x, b'-' | b'+' | b'.' | b'e' | b'E'));
    match (ok, std::str::from_utf8(b)) {
        (true, Ok(s)) => s.to_string(),
        _ => string(b, false),
    }
}

/// A string or blob: quoted when it is plain text, else a hex literal (with a `_utf8mb4`
/// introducer for a string that is UTF-8, so that it stays a character string).
fn string(b: &[u8], blob: bool) -> String {
    match plain_text(b) {
        Some(s) => quote(s),
        None if !blob && std::str::from_utf8(b).is_ok() => format!("_utf8mb4 X'{}'", hex(b)),
        None => format!("X'{}'", hex(b)),
    }
}

/// DATE, DATETIME or TIMESTAMP: a length (0, 4, 7 or 11), then the parts present.
fn datetime(c: &mut Cursor<'_>, date_only: bool) -> Result<String, WireError> {
    let len = c.u8("datetime length")?;
    let mut p = Cursor::new(c.bytes(usize::from(len), "datetime")?);
    let (mut y, mut mo, mut d, mut h, mut mi, mut s, mut us) =
        (0u16, 0u8, 0u8, 0u8, 0u8, 0u8, 0u32);
    if len >= 4 {
        y = p.u16("year")?;
        mo = p.u8("month")?;
        d = p.u8("day")?;
    }
    if len >= 7 {
        h = p.u8("hour")?;
        mi = p.u8("minute")?;
        s = p.u8("second")?;
    }
    if len >= 11 {
        us = p.u32("microsecond")?;
    }
    let typed = if date_only && len < 7 {
        "DATE"
    } else {
        "TIMESTAMP"
    };
    let mut out = format!("{typed}'{y:04}-{mo:02}-{d:02}");
    if !date_only || len >= 7 {
        out.push_str(&format!(" {h:02}:{mi:02}:{s:02}"));
        if us > 0 {
            out.push_str(&format!(".{us:06}"));
        }
    }
    out.push('\'');
    Ok(out)
}

/// TIME: a length (0, 8 or 12), sign, days, hours, minutes, seconds, microseconds.
fn time(c: &mut Cursor<'_>) -> Result<String, WireError> {
    let len = c.u8("time length")?;
    let mut p = Cursor::new(c.bytes(usize::from(len), "time")?);
    if len < 8 {
        return Ok("TIME'00:00:00'".to_string());
    }
    let neg = p.u8("sign")? == 1;
    let days = u64::from(p.u32("days")?);
    let (h, m, s) = (p.u8("hour")?, p.u8("minute")?, p.u8("second")?);
    let us = if len >= 12 { p.u32("microsecond")? } else { 0 };
    let hours = days * 24 + u64::from(h);
    let mut out = format!(
        "TIME'{}{hours:02}:{m:02}:{s:02}",
        if neg { "-" } else { "" }
    );
    if us > 0 {
        out.push_str(&format!(".{us:06}"));
    }
    out.push('\'');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(body: &[u8], count: u16, types: Option<&[u8]>) -> RawParams {
        RawParams {
            count,
            flags: 0,
            query_attrs: false,
            body: body.into(),
            types: types.map(Arc::from),
        }
    }

    #[test]
    fn decodes_every_kind() {
        // 6 params: tiny -1, unsigned long 7, string "a'b", null, double 1.5, date.
        let mut b = vec![0b0000_1000, 1];
        b.extend_from_slice(&[0x01, 0, 0x03, 0x80, 0xfe, 0, 0x08, 0, 0x05, 0, 0x0a, 0]);
        b.push(0xff);
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&[3, b'a', b'\'', b'b']);
        b.extend_from_slice(&1.5f64.to_le_bytes());
        b.extend_from_slice(&[4, 0xe8, 0x07, 2, 29]);
        let r = raw(&b, 6, None);
        assert_eq!(
            r.literals(),
            ["-1", "7", "'a''b'", "NULL", "1.5", "DATE'2024-02-29'"]
        );
        assert_eq!(sent_types(&b, 6, 0, false).map(|t| t.len()), Some(12));
        // A later execution without types uses the remembered ones.
        let mut b2 = vec![0, 0, 1, 0];
        b2.extend_from_slice(&[0, 0, 0, 0]);
        let r2 = raw(&b2, 2, Some(&[0x02, 0, 0x03, 0]));
        assert_eq!(r2.literals(), ["1", "0"]);
        assert!(raw(&b2, 2, None).literals()[0].contains("types not seen"));
    }

    #[test]
    fn times_blobs_and_unknown_types() {
        let mut b = vec![0, 1, 0x0b, 0, 0xfc, 0, 0x0c, 0, 0x42, 0];
        b.extend_from_slice(&[8, 1, 1, 0, 0, 0, 2, 3, 4]);
        b.extend_from_slice(&[2, 0x00, 0x5c]);
        b.extend_from_slice(&[11, 0xd0, 0x07, 1, 2, 3, 4, 5, 6, 0, 0, 0]);
        let l = raw(&b, 4, None).literals();
        assert_eq!(
            &l[..3],
            [
                "TIME'-26:03:04'",
                "X'005c'",
                "TIMESTAMP'2000-01-02 03:04:05.000006'"
            ]
        );
        assert!(l[3].contains("0x42"), "{l:?}");
        assert_eq!(int(0xff, 8, false), "-1");
        assert_eq!(int(u64::MAX, 64, true), u64::MAX.to_string());
        assert_eq!(float(0.1f32 as f64, true), "0.1");
        assert!(float(f64::NAN, false).starts_with("NULL"));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..400usize {
            let mut b = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.push(x as u8);
            }
            for count in [0u16, 1, 3, 17, 300] {
                for attrs in [false, true] {
                    let mut r = raw(&b, count, Some(&b));
                    r.query_attrs = attrs;
                    r.flags = b.first().copied().unwrap_or(0);
                    assert_eq!(r.literals().len(), usize::from(count));
                }
            }
        }
    }
}
