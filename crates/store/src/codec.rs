//! The compact binary form of the stored blobs: an exact [`LatencyState`] (raw samples
//! delta-coded, or the non-empty histogram buckets as `(index delta, count)` pairs, varints
//! throughout) and the errors-by-code pairs. Decoding checks every length and sum and never
//! panics; [`aggregate::Latency::from_state`] checks the rest when a state is used.

use aggregate::LatencyState;
use aggregate::latency::{EXACT_CAP, GROUPING_POWER, MAX_VALUE_POWER, decade_index};

/// The first byte of every blob.
pub const VERSION: u8 = 1;
/// Most buckets a histogram has (grouping power 7, max value power 44: 4,864).
const MAX_BUCKETS: u64 = 1 << 16;
/// Most error codes a blob holds (the aggregator keeps 32 per group).
const MAX_CODES: u64 = 4096;

const EXACT: u8 = 1;

/// Why a blob does not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodecError {
    Version(u8),
    Truncated,
    /// A varint longer than its type.
    Overlong,
    /// A count, index or value out of range.
    Range(&'static str),
    /// Bytes after the end.
    Trailing,
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodecError::Version(v) => write!(f, "blob version {v} (expected {VERSION})"),
            CodecError::Truncated => write!(f, "truncated blob"),
            CodecError::Overlong => write!(f, "overlong varint"),
            CodecError::Range(w) => write!(f, "{w} out of range"),
            CodecError::Trailing => write!(f, "trailing bytes"),
        }
    }
}

impl std::error::Error for CodecError {}

fn put(out: &mut Vec<u8>, mut v: u128) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A checked reader over a blob.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8, CodecError> {
        let v = *self.b.get(self.at).ok_or(CodecError::Truncated)?;
        self.at += 1;
        Ok(v)
    }

    fn u128(&mut self) -> Result<u128, CodecError> {
        let mut v = 0u128;
        for shift in (0..128).step_by(7) {
            let b = self.byte()?;
            let part = u128::from(b & 0x7f);
            if shift == 126 && part > 3 {
                return Err(CodecError::Overlong);
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(CodecError::Overlong)
    }

    fn u64(&mut self) -> Result<u64, CodecError> {
        u64::try_from(self.u128()?).map_err(|_| CodecError::Overlong)
    }

    fn end(&self) -> Result<(), CodecError> {
        if self.at == self.b.len() {
            Ok(())
        } else {
            Err(CodecError::Trailing)
        }
    }
}

/// Encodes a distribution. Raw samples (sorted) are delta-coded and their sum, min, max and
/// decade counts left out (derived again on decoding); a histogram is written as its
/// configuration, count, sum, min, max, the non-zero decade counts and the bucket pairs.
pub fn encode_latency(s: &LatencyState) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 3 * s.buckets.len());
    out.push(VERSION);
    match &s.exact {
        Some(v) => {
            out.push(EXACT);
            let mut v = v.clone();
            v.sort_unstable();
            put(&mut out, v.len() as u128);
            let mut prev = 0u64;
            for x in v {
                put(&mut out, u128::from(x - prev));
                prev = x;
            }
        }
        None => {
            out.push(0);
            out.push(s.grouping_power);
            out.push(s.max_value_power);
            put(&mut out, u128::from(s.count));
            put(&mut out, s.sum_ns);
            let (min, max) = (s.min_ns.unwrap_or(0), s.max_ns.unwrap_or(0));
            put(&mut out, u128::from(min));
            put(&mut out, u128::from(max.saturating_sub(min)));
            let mask = s
                .decades
                .iter()
                .enumerate()
                .fold(0u8, |m, (i, &d)| if d > 0 { m | 1 << i } else { m });
            out.push(mask);
            s.decades
                .iter()
                .filter(|&&d| d > 0)
                .for_each(|&d| put(&mut out, u128::from(d)));
            put(&mut out, s.buckets.len() as u128);
            let mut prev = 0u32;
            for &(i, c) in &s.buckets {
                put(&mut out, u128::from(i.wrapping_sub(prev)));
                put(&mut out, u128::from(c));
                prev = i;
            }
        }
    }
    out
}

/// Decodes [`encode_latency`]'s form. Any bytes: a state or an error, never a panic.
pub fn decode_latency(b: &[u8]) -> Result<LatencyState, CodecError> {
    let mut c = Cursor { b, at: 0 };
    let v = c.byte()?;
    if v != VERSION {
        return Err(CodecError::Version(v));
    }
    let s = match c.byte()? {
        EXACT => exact_state(&mut c)?,
        0 => histogram_state(&mut c)?,
        _ => return Err(CodecError::Range("kind")),
    };
    c.end()?;
    Ok(s)
}

fn exact_state(c: &mut Cursor) -> Result<LatencyState, CodecError> {
    let n = c.u64()?;
    if n > EXACT_CAP as u64 {
        return Err(CodecError::Range("sample count"));
    }
    let mut v = Vec::with_capacity(n as usize);
    let mut prev = 0u64;
    let mut s = LatencyState {
        count: n,
        grouping_power: GROUPING_POWER,
        max_value_power: MAX_VALUE_POWER,
        ..LatencyState::default()
    };
    for _ in 0..n {
        let x = prev
            .checked_add(c.u64()?)
            .ok_or(CodecError::Range("sample"))?;
        v.push(x);
        s.sum_ns += u128::from(x);
        s.decades[decade_index(x)] += 1;
        prev = x;
    }
    s.min_ns = v.first().copied();
    s.max_ns = v.last().copied();
    s.exact = Some(v);
    Ok(s)
}

fn histogram_state(c: &mut Cursor) -> Result<LatencyState, CodecError> {
    let grouping_power = c.byte()?;
    let max_value_power = c.byte()?;
    let count = c.u64()?;
    let sum_ns = c.u128()?;
    let min = c.u64()?;
    let max = min.checked_add(c.u64()?).ok_or(CodecError::Range("max"))?;
    let mask = c.byte()?;
    let mut decades = [0u64; 8];
    for (i, d) in decades.iter_mut().enumerate() {
        if mask & (1 << i) != 0 {
            *d = c.u64()?;
        }
    }
    let n = c.u64()?;
    if n > MAX_BUCKETS || n > count {
        return Err(CodecError::Range("bucket count"));
    }
    let mut buckets = Vec::with_capacity(n as usize);
    let mut prev = 0u32;
    for k in 0..n {
        let d = u32::try_from(c.u64()?).map_err(|_| CodecError::Range("bucket index"))?;
        if k > 0 && d == 0 {
            return Err(CodecError::Range("bucket order"));
        }
        let i = prev
            .checked_add(d)
            .ok_or(CodecError::Range("bucket index"))?;
        buckets.push((i, c.u64()?));
        prev = i;
    }
    let some = count > 0;
    Ok(LatencyState {
        count,
        sum_ns,
        min_ns: some.then_some(min),
        max_ns: some.then_some(max),
        decades,
        exact: None,
        grouping_power,
        max_value_power,
        buckets,
    })
}

/// Encodes `(code, count)` pairs (sorted by code, distinct).
pub fn encode_errors(pairs: &[(u32, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 4 * pairs.len());
    out.push(VERSION);
    put(&mut out, pairs.len() as u128);
    let mut prev = 0u32;
    for &(code, n) in pairs {
        put(&mut out, u128::from(code.wrapping_sub(prev)));
        put(&mut out, u128::from(n));
        prev = code;
    }
    out
}

/// Decodes [`encode_errors`]'s form: codes strictly increasing. Never panics.
pub fn decode_errors(b: &[u8]) -> Result<Vec<(u32, u64)>, CodecError> {
    let mut c = Cursor { b, at: 0 };
    let v = c.byte()?;
    if v != VERSION {
        return Err(CodecError::Version(v));
    }
    let n = c.u64()?;
    if n > MAX_CODES {
        return Err(CodecError::Range("error code count"));
    }
    let mut out = Vec::with_capacity(n as usize);
    let mut prev = 0u32;
    for k in 0..n {
        let d = u32::try_from(c.u64()?).map_err(|_| CodecError::Range("error code"))?;
        if k > 0 && d == 0 {
            return Err(CodecError::Range("error code order"));
        }
        let code = prev.checked_add(d).ok_or(CodecError::Range("error code"))?;
        out.push((code, c.u64()?));
        prev = code;
    }
    c.end()?;
    Ok(out)
}
