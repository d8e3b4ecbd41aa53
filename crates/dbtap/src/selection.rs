//! `--since`/`--until` applied to capture files: the capture's bounds when a time is relative
//! to them (a first pass over the packet records' headers, no decoding), the window of
//! request start times that is kept, and how reports state it.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use report::CaptureHealth;

use crate::timespec::{Bounds, TimeRange, Window};

/// The range given and the window it resolved to.
#[derive(Clone, Debug)]
pub struct Selection {
    pub range: TimeRange,
    pub window: Window,
}

impl Selection {
    /// Resolves `range` for `files`: reads the first packet of the capture when a time is a
    /// time of day or relative to the start, and every packet record's header when one is
    /// relative to the end. `None` when no range is given.
    pub fn resolve(range: TimeRange, files: &[PathBuf]) -> Result<Option<Selection>> {
        if range.is_all() {
            return Ok(None);
        }
        let bounds = if range.needs_start() || range.needs_end() {
            if files.iter().any(|f| f.as_path() == Path::new("-")) {
                bail!(
                    "--since/--until {range}: a time of day or a time relative to the capture's \
                     start or end needs the capture's bounds, which standard input cannot be \
                     read twice for; give RFC 3339 times (2026-11-25T10:00:00Z)"
                );
            }
            capture_bounds(files, range.needs_end())?
        } else {
            None
        };
        // An empty capture: any relative time resolves against nothing; keep nothing.
        let window = match bounds {
            Some(b) => range.resolve(b),
            None if range.needs_start() || range.needs_end() => Window {
                from_ns: 0,
                to_ns: 0,
            },
            None => range.resolve(Bounds {
                first_ns: 0,
                last_ns: 0,
            }),
        };
        Ok(Some(Selection { range, window }))
    }

    /// The header line's statement: `requests that started in [A, B) (--since X --until Y)`
    /// (`at or after A`, `before B` for an open end).
    pub fn describe(&self) -> String {
        let (from, to) = (
            report::fmt::rfc3339(self.window.from_ns),
            report::fmt::rfc3339(self.window.to_ns),
        );
        let mut given = Vec::new();
        if let Some(s) = self.range.since {
            given.push(format!("--since {s}"));
        }
        if let Some(u) = self.range.until {
            given.push(format!("--until {u}"));
        }
        let which = match (self.range.since.is_some(), self.range.until.is_some()) {
            (true, true) => format!("in [{from}, {to})"),
            (true, false) => format!("at or after {from}"),
            _ => format!("before {to}"),
        };
        format!("requests that started {which} ({})", given.join(" "))
    }

    /// The capture's first and last times become those of the window, so that rates and the
    /// header's time range are the selected part's.
    pub fn clip(&self, health: &mut CaptureHealth) {
        let w = self.window;
        if let (Some(a), Some(b)) = (health.first_ts_ns, health.last_ts_ns) {
            let (a, b) = (a.max(w.from_ns), b.min(w.to_ns.saturating_sub(1)));
            if a <= b {
                health.first_ts_ns = Some(a);
                health.last_ts_ns = Some(b);
            } else {
                health.first_ts_ns = None;
                health.last_ts_ns = None;
            }
        }
    }
}

/// The first packet's time (of the first file that has one) and, when `to_end`, the latest
/// packet time of all files; `None` for a capture without packets. Reads records only (the
/// frames are not decoded); a read error ends a file as it does in the pipeline.
pub fn capture_bounds(files: &[PathBuf], to_end: bool) -> Result<Option<Bounds>> {
    let mut first: Option<u64> = None;
    let mut last: Option<u64> = None;
    for f in files {
        let mut reader = capture::Input::check(f)?.open()?;
        while let Ok(Some(frame)) = reader.next_frame() {
            let ts = frame.ts_ns;
            first.get_or_insert(ts);
            last = Some(last.map_or(ts, |l| l.max(ts)));
            if !to_end {
                break;
            }
        }
        if first.is_some() && !to_end {
            break;
        }
    }
    Ok(first.map(|first_ns| Bounds {
        first_ns,
        last_ns: last.unwrap_or(first_ns),
    }))
}

/// `time_range` in the JSON digest.
#[derive(serde::Serialize, Debug)]
pub struct RangeJson {
    /// As given (normalised).
    pub since: Option<String>,
    pub until: Option<String>,
    /// The window applied, RFC 3339; `null` for an open end.
    pub from: Option<String>,
    pub to: Option<String>,
    /// Which time of a request decides: its start.
    pub by: &'static str,
}

/// The JSON digest with the time axis: the report's fields, then `time_range` and `timeline`
/// when given.
#[derive(serde::Serialize)]
pub struct Doc<'a> {
    #[serde(flatten)]
    pub report: &'a report::json::Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_range: Option<RangeJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<crate::timeline::Series>,
}

impl Selection {
    pub fn json(&self) -> RangeJson {
        RangeJson {
            since: self.range.since.map(|s| s.to_string()),
            until: self.range.until.map(|s| s.to_string()),
            from: self
                .range
                .since
                .map(|_| report::fmt::rfc3339(self.window.from_ns)),
            to: self
                .range
                .until
                .map(|_| report::fmt::rfc3339(self.window.to_ns)),
            by: "request_start",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timespec::TimeSpec;

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_795_600_800 * S; // 2026-11-25T10:00:00Z

    fn sel(since: Option<TimeSpec>, until: Option<TimeSpec>, b: Bounds) -> Selection {
        let range = TimeRange { since, until };
        Selection {
            range,
            window: range.resolve(b),
        }
    }

    #[test]
    fn the_header_says_what_was_selected_and_the_span_is_clipped() {
        let b = Bounds {
            first_ns: T0,
            last_ns: T0 + 60 * S,
        };
        let s = sel(
            Some(TimeSpec::FromStart(10 * S)),
            Some(TimeSpec::FromEnd(20 * S)),
            b,
        );
        assert_eq!(
            s.describe(),
            "requests that started in [2026-11-25T10:00:10.000000Z, 2026-11-25T10:00:40.000000Z) \
             (--since +10s --until -20s)"
        );
        let mut h = CaptureHealth {
            first_ts_ns: Some(b.first_ns),
            last_ts_ns: Some(b.last_ns),
            ..CaptureHealth::default()
        };
        s.clip(&mut h);
        assert_eq!(
            (h.first_ts_ns, h.last_ts_ns),
            (Some(T0 + 10 * S), Some(T0 + 40 * S))
        );
        let open = sel(Some(TimeSpec::At(T0 + 5 * S)), None, b);
        assert_eq!(
            open.describe(),
            "requests that started at or after 2026-11-25T10:00:05.000000Z (--since 2026-11-25T10:00:05Z)"
        );
        // A window outside the capture: no span.
        let none = sel(Some(TimeSpec::At(T0 + 100 * S)), None, b);
        let mut h = CaptureHealth {
            first_ts_ns: Some(b.first_ns),
            last_ts_ns: Some(b.last_ns),
            ..CaptureHealth::default()
        };
        none.clip(&mut h);
        assert_eq!((h.first_ts_ns, h.last_ts_ns), (None, None));
    }

    #[test]
    fn relative_times_are_refused_on_standard_input() {
        let range = TimeRange {
            since: Some(TimeSpec::FromEnd(S)),
            until: None,
        };
        let err = Selection::resolve(range, &[PathBuf::from("-")]).expect_err("stdin");
        assert!(err.to_string().contains("standard input"), "{err}");
        let abs = TimeRange {
            since: Some(TimeSpec::At(T0)),
            until: None,
        };
        let ok = Selection::resolve(abs, &[PathBuf::from("-")]).expect("absolute");
        assert_eq!(ok.map(|s| s.window.from_ns), Some(T0));
        assert!(
            Selection::resolve(TimeRange::default(), &[])
                .expect("all")
                .is_none()
        );
    }
}
