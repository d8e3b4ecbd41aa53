//! Bind parameters: the values of an extended-protocol execution decoded to PostgreSQL
//! literals (only for a group's example). Text-format values are given as sent, quoted, with a
//! cast when the statement's type is known; binary values are decoded by the type OIDs of the
//! statement (its Parse's, or the server's ParameterDescription when the statement was
//! described). A binary value of an unknown type (0, or an OID not listed in [`type_name`])
//! becomes a marked placeholder.

use std::sync::Arc;

use super::wire::Cursor;
use crate::kit::WireError;
use crate::params::{hex, undecoded};

/// The parameter part of one Bind, undecoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawParams {
    /// The Bind message from the parameter format codes on. (A `Vec`: the session refills
    /// the allocation of a record whose event is gone, see `session/params.rs`.)
    pub body: Vec<u8>,
    /// The parameter types of the statement's Parse (0: unspecified).
    pub oids: Option<Arc<[u32]>>,
}

/// The parameter type OIDs a Parse message names (`body` after the statement text).
pub fn parse_oids(rest: &[u8]) -> Option<Arc<[u32]>> {
    let mut c = Cursor::new(rest);
    let n = c.u16("parameter types").ok()?;
    if n == 0 {
        return None;
    }
    let mut v = Vec::with_capacity(usize::from(n).min(rest.len() / 4));
    for _ in 0..n {
        v.push(c.u32("parameter type").ok()?);
    }
    Some(v.into())
}

impl RawParams {
    /// One literal per parameter of the Bind.
    pub fn literals(&self) -> Vec<String> {
        match self.decode() {
            Ok(v) => v,
            Err(_) => vec![undecoded("parameters cut short")],
        }
    }

    fn decode(&self) -> Result<Vec<String>, WireError> {
        let mut c = Cursor::new(&self.body);
        let nf = usize::from(c.u16("format count")?);
        let formats = c.bytes(nf * 2, "formats")?;
        let n = usize::from(c.u16("parameter count")?);
        let mut out = Vec::with_capacity(n.min(self.body.len()));
        for i in 0..n {
            let fi = if nf == 1 { 0 } else { i };
            let binary = formats.get(fi * 2 + 1).is_some_and(|&f| f == 1) && nf > 0;
            let len = c.u32("value length")? as i32;
            let oid = self
                .oids
                .as_ref()
                .and_then(|o| o.get(i).copied())
                .unwrap_or(0);
            if len < 0 {
                out.push("NULL".to_string());
                continue;
            }
            let v = c.bytes(len as usize, "value")?;
            out.push(if binary {
                binary_literal(v, oid)
            } else {
                text_literal(v, oid)
            });
        }
        Ok(out)
    }
}

/// The SQL name of a type OID dbtap decodes.
pub fn type_name(oid: u32) -> Option<&'static str> {
    Some(match oid {
        16 => "bool",
        17 => "bytea",
        19 => "name",
        20 => "int8",
        21 => "int2",
        23 => "int4",
        25 => "text",
        26 => "oid",
        114 => "json",
        700 => "float4",
        701 => "float8",
        1042 => "bpchar",
        1043 => "varchar",
        1082 => "date",
        1083 => "time",
        1114 => "timestamp",
        1184 => "timestamptz",
        1700 => "numeric",
        2950 => "uuid",
        3802 => "jsonb",
        _ => return None,
    })
}

/// A string literal that reads the same whatever `standard_conforming_strings` is: `E'..'`
/// with backslashes doubled when there are any.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    if s.contains('\\') {
        out.push('E');
    }
    out.push('\'');
    for ch in s.chars() {
        match ch {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            _ => out.push(ch),
        }
    }
    out.push('\'');
    out
}

fn cast(lit: String, oid: u32) -> String {
    match type_name(oid) {
        Some(t) => format!("{lit}::{t}"),
        None => lit,
    }
}

/// A text-format value: quoted, cast to the Parse's type when it named one.
fn text_literal(v: &[u8], oid: u32) -> String {
    match std::str::from_utf8(v) {
        Ok(s) if !s.contains('\0') => cast(quote(s), oid),
        _ => undecoded("text value not UTF-8"),
    }
}

/// A binary-format value decoded by its type.
fn binary_literal(v: &[u8], oid: u32) -> String {
    match binary_value(v, oid) {
        Ok(Some(s)) => s,
        Ok(None) => undecoded(&format!("binary value of type OID {oid}")),
        Err(_) => undecoded(&format!("binary value of type OID {oid} malformed")),
    }
}

fn whole<T>(c: &Cursor<'_>, v: T) -> Result<T, WireError> {
    if c.remaining() == 0 {
        Ok(v)
    } else {
        Err(WireError::Short {
            what: "value length",
            at: 0,
            need: 0,
            have: c.remaining(),
        })
    }
}

fn binary_value(v: &[u8], oid: u32) -> Result<Option<String>, WireError> {
    let mut c = Cursor::new(v);
    let s = match oid {
        16 => cast(quote(if c.u8("bool")? != 0 { "t" } else { "f" }), oid),
        21 => (c.u16("int2")? as i16).to_string(),
        23 => (c.u32("int4")? as i32).to_string(),
        20 => cast((c.u64("int8")? as i64).to_string(), oid),
        26 => cast(c.u32("oid")?.to_string(), oid),
        700 => cast(
            quote(&format!("{:?}", f32::from_bits(c.u32("float4")?))),
            oid,
        ),
        701 => cast(
            quote(&format!("{:?}", f64::from_bits(c.u64("float8")?))),
            oid,
        ),
        17 => return Ok(Some(format!("E'\\\\x{}'::bytea", hex(v)))),
        19 | 25 | 114 | 1042 | 1043 => return Ok(Some(text_literal(v, oid))),
        3802 => {
            if c.u8("jsonb version")? != 1 {
                return Ok(None);
            }
            return Ok(Some(text_literal(c.rest(), oid)));
        }
        2950 => {
            let b = c.bytes(16, "uuid")?;
            let h = hex(b);
            let u = format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            );
            cast(quote(&u), oid)
        }
        1082 => cast(quote(&date(c.u32("date")? as i32)), oid),
        1083 => cast(quote(&clock(c.u64("time")? as i64)), oid),
        1114 | 1184 => {
            let us = c.u64("timestamp")? as i64;
            let t = match us {
                i64::MAX => "infinity".to_string(),
                i64::MIN => "-infinity".to_string(),
                _ => {
                    let (d, r) = (us.div_euclid(86_400_000_000), us.rem_euclid(86_400_000_000));
                    let z = if oid == 1184 { "+00" } else { "" };
                    format!("{} {}{z}", date(d as i32), clock(r))
                }
            };
            cast(quote(&t), oid)
        }
        1700 => match numeric(&mut c)? {
            Some(n) => cast(quote(&n), oid),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    whole(&c, Some(s))
}

/// Days since 2000-01-01 as `YYYY-MM-DD` (proleptic Gregorian; `BC` before year 1).
fn date(days: i32) -> String {
    match days {
        i32::MAX => return "infinity".to_string(),
        i32::MIN => return "-infinity".to_string(),
        _ => {}
    }
    // Days since 1970-01-01, then Howard Hinnant's civil_from_days.
    let z = i64::from(days) + 10_957 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    if y <= 0 {
        format!("{:04}-{m:02}-{d:02} BC", 1 - y)
    } else {
        format!("{y:04}-{m:02}-{d:02}")
    }
}

/// Microseconds since midnight as `HH:MM:SS[.ffffff]`.
fn clock(us: i64) -> String {
    let us = us.max(0);
    let (s, frac) = (us / 1_000_000, us % 1_000_000);
    let mut out = format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
    if frac > 0 {
        out.push_str(&format!(".{frac:06}"));
    }
    out
}

/// NUMERIC's binary form: digit count, weight, sign, display scale, base-10000 digits.
fn numeric(c: &mut Cursor<'_>) -> Result<Option<String>, WireError> {
    let nd = c.u16("ndigits")? as i16;
    let weight = i32::from(c.u16("weight")? as i16);
    let sign = c.u16("sign")?;
    let dscale = usize::from(c.u16("dscale")?);
    match sign {
        0xC000 => return Ok(Some("NaN".to_string())),
        0xD000 => return Ok(Some("Infinity".to_string())),
        0xF000 => return Ok(Some("-Infinity".to_string())),
        0 | 0x4000 => {}
        _ => return Ok(None),
    }
    if !(0..=1000).contains(&nd) || !(-1000..=1000).contains(&weight) || dscale > 1000 {
        return Ok(None);
    }
    let mut digits = Vec::with_capacity(nd as usize);
    for _ in 0..nd {
        digits.push(c.u16("digit")?);
    }
    let digit = |i: i32| -> u16 {
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i))
            .copied()
            .unwrap_or(0)
    };
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    if weight < 0 {
        s.push('0');
    } else {
        for i in 0..=weight {
            let d = digit(i);
            if i == 0 {
                s.push_str(&d.to_string());
            } else {
                s.push_str(&format!("{d:04}"));
            }
        }
    }
    if dscale > 0 {
        s.push('.');
        let mut frac = String::new();
        let mut i = weight + 1;
        while frac.len() < dscale {
            frac.push_str(&format!("{:04}", digit(i)));
            i += 1;
        }
        frac.truncate(dscale);
        s.push_str(&frac);
    }
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(formats: &[u16], values: &[Option<&[u8]>]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(formats.len() as u16).to_be_bytes());
        for f in formats {
            b.extend_from_slice(&f.to_be_bytes());
        }
        b.extend_from_slice(&(values.len() as u16).to_be_bytes());
        for v in values {
            match v {
                Some(v) => {
                    b.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    b.extend_from_slice(v);
                }
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        b.extend_from_slice(&[0, 0]);
        b
    }

    #[test]
    fn text_values_are_quoted_and_cast() {
        let b = bind(&[], &[Some(b"12"), None, Some(b"it's \\")]);
        let r = RawParams {
            body: b,
            oids: Some(Arc::from(&[23u32, 0, 25][..])),
        };
        assert_eq!(r.literals(), ["'12'::int4", "NULL", "E'it''s \\\\'::text"]);
    }

    #[test]
    fn binary_values_by_type() {
        let num = [0u8, 2, 0, 0, 0x40, 0, 0, 2, 0, 12, 0x0d, 0x80]; // -12.34
        let vals: [&[u8]; 9] = [
            &[0, 0, 0, 7],
            &(-5i64).to_be_bytes(),
            &[1],
            &[0xde, 0xad, 0x5c],
            &[0x12; 16],
            &(-1i32).to_be_bytes(),
            &(86_400_000_001i64).to_be_bytes(),
            &num,
            &1.5f64.to_be_bytes(),
        ];
        let b = bind(&[1], &vals.map(Some));
        let r = RawParams {
            body: b,
            oids: Some(Arc::from(
                &[23u32, 20, 16, 17, 2950, 1082, 1114, 1700, 701][..],
            )),
        };
        assert_eq!(
            r.literals(),
            [
                "7",
                "-5::int8",
                "'t'::bool",
                "E'\\\\xdead5c'::bytea",
                "'12121212-1212-1212-1212-121212121212'::uuid",
                "'1999-12-31'::date",
                "'2000-01-02 00:00:00.000001'::timestamp",
                "'-12.34'::numeric",
                "'1.5'::float8",
            ]
        );
        let unknown = bind(&[1], &[Some(b"xx")]);
        let r = RawParams {
            body: unknown,
            oids: None,
        };
        assert!(r.literals()[0].contains("OID 0"));
        assert_eq!(date(-730_119), "0001-01-01");
        assert_eq!(date(-730_120), "0001-12-31 BC");
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for len in 0..300usize {
            let mut b = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.push(if x.is_multiple_of(5) { 0 } else { x as u8 });
            }
            for oid in [
                16u32, 17, 20, 21, 23, 700, 701, 1082, 1083, 1114, 1700, 2950, 3802, 9,
            ] {
                let _ = binary_literal(&b, oid);
            }
            let r = RawParams {
                body: b.clone(),
                oids: Some(Arc::from(&[1700u32, 1114, 17][..])),
            };
            let _ = r.literals();
            let _ = parse_oids(&b);
        }
    }
}
