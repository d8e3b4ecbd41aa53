//! Times and time ranges of a capture as the command line gives them (`--since`, `--until`,
//! `--before 10:00-10:15`): absolute, a time of day on the capture's first day, or relative to
//! the capture's start or end; resolved to nanoseconds once the capture's bounds are known.
//!
//! Forms of one time ([`parse_time`]):
//! - RFC 3339: `2026-11-25T10:00:00Z`, `2026-11-25T10:00:00.5+01:00`;
//! - a time of day, `10:00`, `10:00:05`, `10:00:05.250`, optionally with a zone `Z`, `+02:00`,
//!   `-05:00` (UTC when none): that time on the capture's first day in that zone (the day of
//!   its first packet; for a later day give an RFC 3339 time or a relative one);
//! - `+D`: D after the capture's first packet; `-D`: D before the capture's end (just after its
//!   last packet), so `--since -30s` is the last 30 s. D is `30s`, `2m`, `1m30s`, `1.5s`,
//!   `250ms`, `1h`, or a plain number of seconds.
//!
//! A range ([`parse_range`]) is `A-B` with either side possibly empty (`10:00-10:15`,
//! `+0s-+30s`, `-1m-`); it is half-open: `A` included, `B` excluded.

use std::fmt;

const NS_PER_S: u64 = 1_000_000_000;
const DAY_NS: u64 = 86_400 * NS_PER_S;

/// One time of a capture, as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSpec {
    /// An instant: nanoseconds since the Unix epoch.
    At(u64),
    /// A time of day (nanoseconds since midnight) in a zone `offset_s` seconds east of UTC, on
    /// the capture's first day.
    TimeOfDay { ns: u64, offset_s: i32 },
    /// Nanoseconds after the capture's first packet.
    FromStart(u64),
    /// Nanoseconds before the capture's end.
    FromEnd(u64),
}

/// The first and last packet times of a capture (ns since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub first_ns: u64,
    pub last_ns: u64,
}

/// A range of a capture as given: either end may be open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub since: Option<TimeSpec>,
    pub until: Option<TimeSpec>,
}

/// A resolved range: `[from_ns, to_ns)`, ns since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub from_ns: u64,
    pub to_ns: u64,
}

impl Window {
    /// Everything.
    pub const ALL: Window = Window {
        from_ns: 0,
        to_ns: u64::MAX,
    };

    pub fn contains(&self, ns: u64) -> bool {
        self.from_ns <= ns && ns < self.to_ns
    }
}

impl TimeSpec {
    /// Whether resolving it needs the capture's first packet.
    pub fn needs_start(&self) -> bool {
        matches!(self, TimeSpec::TimeOfDay { .. } | TimeSpec::FromStart(_))
    }

    /// Whether resolving it needs the capture's last packet.
    pub fn needs_end(&self) -> bool {
        matches!(self, TimeSpec::FromEnd(_))
    }

    /// The instant it names in a capture with these bounds.
    pub fn resolve(&self, b: Bounds) -> u64 {
        match *self {
            TimeSpec::At(ns) => ns,
            TimeSpec::FromStart(d) => b.first_ns.saturating_add(d),
            TimeSpec::FromEnd(d) => b.last_ns.saturating_add(1).saturating_sub(d),
            TimeSpec::TimeOfDay { ns, offset_s } => {
                let off = i128::from(offset_s) * i128::from(NS_PER_S);
                let first_local = i128::from(b.first_ns) + off;
                let day = first_local.div_euclid(i128::from(DAY_NS)) * i128::from(DAY_NS);
                let t = day + i128::from(ns) - off;
                u64::try_from(t.max(0)).unwrap_or(u64::MAX)
            }
        }
    }
}

impl TimeRange {
    pub fn is_all(&self) -> bool {
        self.since.is_none() && self.until.is_none()
    }

    fn specs(&self) -> impl Iterator<Item = &TimeSpec> {
        self.since.iter().chain(self.until.iter())
    }

    pub fn needs_start(&self) -> bool {
        self.specs().any(TimeSpec::needs_start)
    }

    pub fn needs_end(&self) -> bool {
        self.specs().any(TimeSpec::needs_end)
    }

    /// The window it selects in a capture with these bounds (open ends are unbounded).
    pub fn resolve(&self, b: Bounds) -> Window {
        Window {
            from_ns: self.since.map_or(0, |s| s.resolve(b)),
            to_ns: self.until.map_or(u64::MAX, |s| s.resolve(b)),
        }
    }
}

/// Parses a duration: `30s`, `1m30s`, `1.5s`, `250ms`, `2h`, `1d`, or a plain number of
/// seconds, into nanoseconds (exact: at most 9 decimals per number).
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let err = || format!("invalid duration '{s}' (expected e.g. 30s, 2m, 1m30s, 1.5s, 250ms)");
    if s.is_empty() {
        return Err(err());
    }
    let mut total: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ns: u64 = match unit {
            "" if num_len == s.len() => NS_PER_S,
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => NS_PER_S,
            "m" => 60 * NS_PER_S,
            "h" => 3_600 * NS_PER_S,
            "d" => DAY_NS,
            _ => return Err(err()),
        };
        let v = decimal_times(num, unit_ns).ok_or_else(err)?;
        total = total.checked_add(v).ok_or_else(err)?;
        rest = tail;
    }
    Ok(total)
}

/// `num` (digits, optionally `.` and up to 9 more digits) times `unit_ns`, exactly when the
/// fraction allows, else rounded down to the nanosecond.
fn decimal_times(num: &str, unit_ns: u64) -> Option<u64> {
    let (whole, frac) = match num.split_once('.') {
        Some((w, f)) => (w, f),
        None => (num, ""),
    };
    if whole.is_empty() && frac.is_empty()
        || frac.len() > 9
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let w: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut f: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..9 {
        f *= 10;
    }
    let frac_ns = f * u128::from(unit_ns) / u128::from(NS_PER_S);
    w.checked_mul(unit_ns)?
        .checked_add(u64::try_from(frac_ns).ok()?)
}

/// Parses a zone suffix: `Z`, `+HH:MM`, `-HH:MM`, `+HHMM`, `+HH`; seconds east of UTC.
fn parse_offset(z: &str) -> Option<i32> {
    if z == "Z" || z == "z" {
        return Some(0);
    }
    let sign = match z.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let body = z.get(1..)?;
    let digits: String = body.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) || body.matches(':').count() > 1 {
        return None;
    }
    let (h, m) = match digits.len() {
        2 => (digits.parse::<i32>().ok()?, 0),
        4 => (
            digits.get(..2)?.parse::<i32>().ok()?,
            digits.get(2..)?.parse::<i32>().ok()?,
        ),
        _ => return None,
    };
    (h <= 23 && m <= 59).then_some(sign * (h * 3600 + m * 60))
}

/// Parses `HH:MM`, `HH:MM:SS` or `HH:MM:SS.fff` (up to 9 decimals) with an optional zone.
fn parse_time_of_day(s: &str) -> Option<TimeSpec> {
    let zone_at = s.find(['Z', 'z', '+', '-']).unwrap_or(s.len());
    let (clock, zone) = s.split_at(zone_at);
    let offset_s = if zone.is_empty() {
        0
    } else {
        parse_offset(zone)?
    };
    let mut parts = clock.split(':');
    let h = two_digits(parts.next()?)?;
    let m = two_digits(parts.next()?)?;
    let sec_ns = match parts.next() {
        None => 0,
        Some(sec) => {
            let whole = sec.split('.').next()?;
            if whole.len() != 2 || two_digits(whole)? > 59 {
                return None;
            }
            decimal_times(sec, NS_PER_S)?
        }
    };
    if parts.next().is_some() || h > 23 || m > 59 {
        return None;
    }
    Some(TimeSpec::TimeOfDay {
        ns: (h * 3600 + m * 60) * NS_PER_S + sec_ns,
        offset_s,
    })
}

fn two_digits(s: &str) -> Option<u64> {
    (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Parses one time (see the module documentation for the forms).
pub fn parse_time(s: &str) -> Result<TimeSpec, String> {
    let t = s.trim();
    if let Some(d) = t.strip_prefix('+') {
        return parse_duration_ns(d).map(TimeSpec::FromStart);
    }
    if let Some(d) = t.strip_prefix('-') {
        return parse_duration_ns(d).map(TimeSpec::FromEnd);
    }
    if let Some(tod) = parse_time_of_day(t) {
        return Ok(tod);
    }
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return u64::try_from(ts.as_nanosecond())
            .map(TimeSpec::At)
            .map_err(|_| format!("time '{s}' is before 1970"));
    }
    Err(format!(
        "invalid time '{s}' (expected 2026-11-25T10:00:00Z, 10:00, 10:00:05, +30s from the \
         capture's start, or -30s from its end)"
    ))
}

/// Parses a range `A-B` (either side may be empty, not both): the first split at a `-` where
/// both sides parse. (For `dbtap diff --before/--after`; `digest` takes the ends apart.)
pub fn parse_range(s: &str) -> Result<TimeRange, String> {
    let t = s.trim();
    let side = |x: &str| -> Result<Option<TimeSpec>, String> {
        if x.trim().is_empty() {
            Ok(None)
        } else {
            parse_time(x).map(Some)
        }
    };
    for (i, _) in t.match_indices('-') {
        let (Some(a), Some(b)) = (t.get(..i), t.get(i + 1..)) else {
            continue;
        };
        if let (Ok(since), Ok(until)) = (side(a), side(b))
            && (since.is_some() || until.is_some())
        {
            return Ok(TimeRange { since, until });
        }
    }
    Err(format!(
        "invalid time range '{s}' (expected A-B, e.g. 10:00-10:15, +0s-+30s, -1m-)"
    ))
}

/// A duration in the form [`parse_duration_ns`] reads back: `90s`, `1.5s`.
fn fmt_duration(ns: u64) -> String {
    let (s, frac) = (ns / NS_PER_S, ns % NS_PER_S);
    if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:09}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    }
}

impl fmt::Display for TimeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TimeSpec::At(ns) => match jiff::Timestamp::from_nanosecond(i128::from(ns)) {
                Ok(t) => write!(f, "{t}"),
                Err(_) => write!(f, "@{ns}ns"),
            },
            TimeSpec::FromStart(d) => write!(f, "+{}", fmt_duration(d)),
            TimeSpec::FromEnd(d) => write!(f, "-{}", fmt_duration(d)),
            TimeSpec::TimeOfDay { ns, offset_s } => {
                let (s, frac) = (ns / NS_PER_S, ns % NS_PER_S);
                write!(f, "{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)?;
                if frac != 0 {
                    write!(f, ".{}", format!("{frac:09}").trim_end_matches('0'))?;
                }
                if offset_s == 0 {
                    write!(f, "Z")
                } else {
                    let sign = if offset_s < 0 { '-' } else { '+' };
                    let a = offset_s.unsigned_abs();
                    write!(f, "{sign}{:02}:{:02}", a / 3600, a / 60 % 60)
                }
            }
        }
    }
}

impl fmt::Display for TimeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |s: &Option<TimeSpec>| s.map(|t| t.to_string()).unwrap_or_default();
        write!(f, "{}-{}", side(&self.since), side(&self.until))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: u64 = 1_795_600_800 * NS_PER_S; // 2026-11-25T10:00:00Z

    #[test]
    fn forms_of_one_time() {
        assert_eq!(parse_time("2026-11-25T10:00:00Z"), Ok(TimeSpec::At(T0)));
        assert_eq!(
            parse_time("2026-11-25T11:00:00.5+01:00"),
            Ok(TimeSpec::At(T0 + NS_PER_S / 2))
        );
        let tod = |ns, offset_s| Ok(TimeSpec::TimeOfDay { ns, offset_s });
        assert_eq!(parse_time("10:00"), tod(36_000 * NS_PER_S, 0));
        assert_eq!(parse_time("10:00:05"), tod(36_005 * NS_PER_S, 0));
        assert_eq!(
            parse_time("10:00:05.25Z"),
            tod(36_005 * NS_PER_S + 250_000_000, 0)
        );
        assert_eq!(parse_time("10:00+02:00"), tod(36_000 * NS_PER_S, 7200));
        assert_eq!(parse_time("10:00-0530"), tod(36_000 * NS_PER_S, -19_800));
        assert_eq!(parse_time("+30s"), Ok(TimeSpec::FromStart(30 * NS_PER_S)));
        assert_eq!(parse_time("+2m"), Ok(TimeSpec::FromStart(120 * NS_PER_S)));
        assert_eq!(parse_time("+1m30s"), Ok(TimeSpec::FromStart(90 * NS_PER_S)));
        assert_eq!(parse_time("+1.5"), Ok(TimeSpec::FromStart(1_500_000_000)));
        assert_eq!(parse_time("-250ms"), Ok(TimeSpec::FromEnd(250_000_000)));
        for bad in [
            "",
            "10",
            "30s",
            "25:00",
            "10:60",
            "10:00:61",
            "1:00",
            "10:00:00:00",
            "+",
            "-",
            "+s",
            "+1x",
            "+1.2.3s",
            "+1.0000000001s",
            "10:00+24:00",
            "yesterday",
            "+99999999999999999999s",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn resolving_against_a_capture() {
        let b = Bounds {
            first_ns: T0 + 5 * NS_PER_S,
            last_ns: T0 + 65 * NS_PER_S,
        };
        let r = |s| parse_time(s).map(|t| t.resolve(b));
        assert_eq!(r("10:00:30"), Ok(T0 + 30 * NS_PER_S));
        assert_eq!(r("11:00:30+01:00"), Ok(T0 + 30 * NS_PER_S));
        assert_eq!(r("+10s"), Ok(T0 + 15 * NS_PER_S));
        // The end is just after the last packet: `-0s` includes it.
        assert_eq!(r("-30s"), Ok(T0 + 35 * NS_PER_S + 1));
        let w = parse_range("+0s--0s").expect("range").resolve(b);
        assert!(w.contains(b.first_ns) && w.contains(b.last_ns) && !w.contains(b.last_ns + 1));
        // The first day is the first packet's day in the zone given.
        let night = Bounds {
            first_ns: T0 + 14 * 3600 * NS_PER_S - 30 * NS_PER_S, // 23:59:30Z
            last_ns: T0 + 14 * 3600 * NS_PER_S + 60 * NS_PER_S,
        };
        let midnight = T0 + 14 * 3600 * NS_PER_S;
        assert_eq!(
            parse_time("23:59:40").map(|t| t.resolve(night)),
            Ok(midnight - 20 * NS_PER_S)
        );
        assert_eq!(
            parse_time("00:00:10").map(|t| t.resolve(night)),
            Ok(midnight + 10 * NS_PER_S - DAY_NS)
        );
        // 01:00:10+01:00 is 00:00:10Z, but in that zone the capture starts on the next day.
        assert_eq!(
            parse_time("01:00:10+01:00").map(|t| t.resolve(night)),
            Ok(midnight + 10 * NS_PER_S)
        );
    }

    #[test]
    fn ranges() {
        let r = parse_range("10:00-10:15").expect("range");
        assert_eq!(r.since, parse_time("10:00").ok());
        assert_eq!(r.until, parse_time("10:15").ok());
        let r = parse_range("2026-11-25T10:00:00Z-2026-11-25T10:15:00Z").expect("range");
        assert_eq!(r.since, Some(TimeSpec::At(T0)));
        assert_eq!(r.until, Some(TimeSpec::At(T0 + 900 * NS_PER_S)));
        let r = parse_range("-1m--30s").expect("range");
        assert_eq!(r.since, Some(TimeSpec::FromEnd(60 * NS_PER_S)));
        assert_eq!(r.until, Some(TimeSpec::FromEnd(30 * NS_PER_S)));
        let r = parse_range("+10s-").expect("range");
        assert_eq!(
            (r.since, r.until),
            (Some(TimeSpec::FromStart(10 * NS_PER_S)), None)
        );
        assert!(parse_range("-").is_err() && parse_range("10:00").is_err());
        assert!(parse_range("").is_err() && parse_range("30s-40s").is_err());
    }

    fn spec() -> impl Strategy<Value = TimeSpec> {
        prop_oneof![
            (0u64..4_000_000_000 * NS_PER_S).prop_map(TimeSpec::At),
            (0u64..DAY_NS, -23i32 * 60..=23 * 60).prop_map(|(ns, m)| TimeSpec::TimeOfDay {
                ns,
                offset_s: m * 60
            }),
            (0u64..u64::MAX / 2).prop_map(TimeSpec::FromStart),
            (0u64..u64::MAX / 2).prop_map(TimeSpec::FromEnd),
        ]
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = parse_time(&s);
            let _ = parse_range(&s);
            let _ = parse_duration_ns(&s);
        }

        #[test]
        fn never_panics_on_near_misses(s in "[-+0-9:.TZzsmhdu ]{0,30}") {
            let _ = parse_time(&s);
            let _ = parse_range(&s);
        }

        #[test]
        fn times_round_trip(t in spec()) {
            prop_assert_eq!(parse_time(&t.to_string()), Ok(t));
        }

        #[test]
        fn ranges_round_trip(a in proptest::option::of(spec()), b in spec()) {
            let r = TimeRange { since: a, until: Some(b) };
            prop_assert_eq!(parse_range(&r.to_string()), Ok(r));
        }

        #[test]
        fn windows_are_within_reason(t in spec(), first in 0u64..u64::MAX / 4, len in 0u64..DAY_NS * 3) {
            let b = Bounds { first_ns: first, last_ns: first + len };
            let _ = t.resolve(b);
        }
    }
}
