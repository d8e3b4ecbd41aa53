//! Small formatting helpers shared by the renderers: timestamps, durations, sizes, safe text.
//!
//! One policy for time, used by the digest and by `dbtap live` (see [`TIME_POLICY`]): a
//! duration is rounded to the nearest unit shown, never truncated; text gives it in the
//! largest unit that keeps it at or above 1 (ns, us, ms, s) with 3 significant digits
//! ([`duration`]); a column headed `_us` gives whole microseconds ([`micros`]).

use std::fmt;

/// A timestamp in nanoseconds since the Unix epoch, displayed as RFC 3339 in UTC with
/// microseconds: `2024-01-01T00:00:39.123456Z`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rfc3339(pub u64);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1_000_000_000;
        let micros = (self.0 % 1_000_000_000) / 1_000;
        let days = secs / 86_400;
        let rem = secs % 86_400;
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60
        )
    }
}

/// RFC 3339 text of a timestamp in ns (UTC, microseconds).
pub fn rfc3339(ns: u64) -> String {
    Rfc3339(ns).to_string()
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// The time policy, said once in the digest's header.
pub const TIME_POLICY: &str = "durations rounded to 3 significant digits in ns, us, ms or s, \
                               the same rounding as dbtap live's _us columns (whole microseconds); \
                               timestamps in UTC";

/// A duration given in nanoseconds as whole microseconds, rounded to the nearest (half up):
/// `1499` ns is `1`, `1500` ns is `2`. The `_us` columns of `dbtap live`.
pub fn micros(ns: u64) -> String {
    (ns / 1000 + u64::from(ns % 1000 >= 500)).to_string()
}

/// Three significant digits (fewer decimals as the value grows).
fn sig3(v: f64) -> String {
    if v < 9.995 {
        format!("{v:.2}")
    } else if v < 99.95 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A duration given in nanoseconds, in the largest unit that keeps it above 1:
/// `850ns`, `14.2us`, `887ms`, `4.01s`, `1234s`.
pub fn duration(ns: f64) -> String {
    if !ns.is_finite() || ns < 0.0 {
        return "-".to_string();
    }
    if ns < 999.5 {
        format!("{ns:.0}ns")
    } else if ns < 999_500.0 {
        format!("{}us", sig3(ns / 1e3))
    } else if ns < 999_500_000.0 {
        format!("{}ms", sig3(ns / 1e6))
    } else {
        format!("{}s", sig3(ns / 1e9))
    }
}

/// A byte count with binary multiples as pt-query-digest prints them: `980`, `1.57k`, `12.3M`.
pub fn bytes(v: f64) -> String {
    scaled(v, 1024.0)
}

/// A count, shortened past 9999 with decimal multiples: `9999`, `12.3k`, `4.56M`.
pub fn count(v: f64) -> String {
    scaled(v, 1000.0)
}

fn scaled(v: f64, base: f64) -> String {
    if !v.is_finite() || v < 0.0 {
        return "-".to_string();
    }
    if v < 10_000.0 {
        return if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            sig3(v)
        };
    }
    let mut v = v / base;
    for unit in ["k", "M", "G", "T", "P"] {
        if v < 999.5 {
            return format!("{}{unit}", sig3(v));
        }
        v /= base;
    }
    format!("{}E", sig3(v))
}

/// An integer with thousands separators: `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Text from the wire made safe for a terminal: control characters (other than newline and tab
/// when `multiline`) become `\xNN` / `\u{..}` escapes, so query text cannot move the cursor or
/// change colours.
pub fn sanitize(s: &str, multiline: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\t' if multiline => out.push(c),
            '\n' | '\t' | '\r' if !multiline => out.push(' '),
            c if c.is_control() => {
                let n = c as u32;
                if n < 0x100 {
                    out.push_str(&format!("\\x{n:02X}"));
                } else {
                    out.push_str(&format!("\\u{{{n:X}}}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Cuts `s` to at most `max` characters, ending with `...` when cut.
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(3);
    let mut out: String = s.chars().take(keep).collect();
    out.push_str("...");
    out
}

/// Nanoseconds to microseconds, rounded to the nanosecond (3 decimals).
pub fn us(ns: f64) -> f64 {
    ns.round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339(1_704_067_239_123_456_789),
            "2024-01-01T00:00:39.123456Z"
        );
        assert_eq!(
            rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
        assert_eq!(
            rfc3339(4_102_444_799_999_999_999),
            "2099-12-31T23:59:59.999999Z"
        );
        // u64::MAX ns is in 2554: must not panic.
        assert_eq!(rfc3339(u64::MAX), "2554-07-21T23:34:33.709551Z");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(0.0), "0ns");
        assert_eq!(duration(999.0), "999ns");
        assert_eq!(duration(14_000.0), "14.0us");
        assert_eq!(duration(1_500.0), "1.50us");
        assert_eq!(duration(887_000_000.0), "887ms");
        assert_eq!(duration(999_700_000.0), "1.00s");
        assert_eq!(duration(4_012_000_000.0), "4.01s");
        assert_eq!(duration(1_234e9), "1234s");
    }

    #[test]
    fn whole_micros_round() {
        assert_eq!(micros(0), "0");
        assert_eq!(micros(499), "0");
        assert_eq!(micros(500), "1");
        assert_eq!(micros(1_499), "1");
        assert_eq!(micros(1_500), "2");
        assert_eq!(micros(u64::MAX), "18446744073709552");
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(980.0), "980");
        assert_eq!(bytes(1_607.0 * 1.0), "1607");
        assert_eq!(bytes(16_070.0), "15.7k");
        assert_eq!(count(12_345.0), "12.3k");
        assert_eq!(count(2.5), "2.50");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }

    #[test]
    fn safe_text() {
        assert_eq!(sanitize("a\x1b[31mb\nc", false), "a\\x1B[31mb c");
        assert_eq!(sanitize("a\nb", true), "a\nb");
        assert_eq!(shorten("abcdefgh", 6), "abc...");
        assert_eq!(shorten("ééé", 3), "ééé");
    }
}
