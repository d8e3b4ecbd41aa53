//! `dbtap digest --timeline`: the per-interval lines of `dbtap live` from a capture, in packet
//! time. Intervals are aligned to multiples of their length since the epoch (as live's are to
//! the wall clock); a request counts in the interval in which it started, packets in the
//! interval of their capture time. Every interval from the first to the last packet of the
//! (selected part of the) capture gets its lines, with zeros where nothing happened.
//!
//! Events arrive when their response completes, so an interval is written once packet time is
//! [`LAG_NS`] past its end; a request that completes later than that is counted in no line
//! (`late`, stated). At most `(interval + LAG_NS) / interval` intervals are open at once, each
//! with at most [`MAX_SERVERS`] servers (beyond them: `other`) or [`MAX_GROUPS`] groups.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Write};
use std::net::SocketAddr;

use proto::{Endpoint, Protocol, QueryEvent};
use serde::Serialize;

use crate::agent::lines::{
    LineCtx, Offline, cell, clock, field_width, server_name, write_header, write_row,
};
use crate::agent::worker::{MAX_SERVERS, ServerWindow, other_server};
use crate::cli::{Field, TimelineArgs, TimelineBy};
use crate::fp::Fingerprinter;
use crate::timespec::Window;

/// How long past an interval's end (in packet time) its requests may still complete.
pub const LAG_NS: u64 = 60_000_000_000;
/// Most query groups per interval; the rest are summed as `other`.
pub const MAX_GROUPS: usize = 1_000;
/// Longest run of empty intervals written as zero rows.
pub const MAX_EMPTY_RUN: u64 = 10_000;
/// Widest group label in the text lines.
const LABEL_CHARS: usize = 72;

type GroupKey = (Protocol, u64, &'static str);

#[derive(Default)]
struct Bucket {
    servers: crate::agent::worker::ServerMap,
    groups: HashMap<GroupKey, (String, ServerWindow)>,
}

/// One row of the JSON series.
#[derive(Serialize, Debug, Clone)]
pub struct Row {
    pub start: String,
    pub end: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Per group: the group's Query ID (as in the digest's `queries[].id`) and fingerprint;
    /// `other` sums groups beyond [`MAX_GROUPS`], `-` marks an interval without requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub count: u64,
    pub errors: u64,
    pub qps: f64,
    pub avg_us: Option<f64>,
    pub p50_us: Option<f64>,
    pub p95_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
    pub svc_avg_us: Option<f64>,
    pub svc_p50_us: Option<f64>,
    pub svc_p95_us: Option<f64>,
    pub svc_p99_us: Option<f64>,
    pub svc_max_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pkts_in: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pkts_out: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_in: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_out: Option<u64>,
}

/// The JSON form of the series (`timeline` in the digest).
#[derive(Serialize, Debug, Clone)]
pub struct Series {
    pub interval_s: f64,
    pub by: &'static str,
    /// Requests counted in no row: they completed more than [`LAG_NS`] after their interval.
    pub late: u64,
    pub rows: Vec<Row>,
}

/// The timeline being built: open intervals, and the lines written (text) or rows kept (JSON).
pub struct Timeline<W: Write> {
    interval_ns: u64,
    by: TimelineBy,
    top: usize,
    fields: Vec<Field>,
    window: Window,
    ports: Vec<u16>,
    addrs: Vec<SocketAddr>,
    /// Text lines go here; `None` keeps JSON rows instead.
    out: Option<W>,
    error: Option<io::Error>,
    /// Latest packet time, and the current packet's time and whether it is selected.
    now_ns: u64,
    cur_ns: u64,
    cur_in: bool,
    buckets: BTreeMap<u64, Bucket>,
    /// Start of the first interval not yet written; the last interval with a selected packet.
    next: Option<u64>,
    last: u64,
    known: HashSet<Endpoint>,
    printed_header: bool,
    late: u64,
    rows: Vec<Row>,
}

impl<W: Write> Timeline<W> {
    /// `out`: where text lines go (`None`: JSON rows are kept for [`Timeline::finish`]).
    /// `ports`/`addrs` say which endpoints are servers (for the packet columns).
    pub fn new(
        args: &TimelineArgs,
        interval: std::time::Duration,
        window: Window,
        ports: Vec<u16>,
        addrs: Vec<SocketAddr>,
        out: Option<W>,
    ) -> Self {
        Timeline {
            interval_ns: u64::try_from(interval.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            by: args.timeline_by,
            top: args.timeline_top,
            fields: args.fields.clone(),
            window,
            ports,
            addrs,
            out,
            error: None,
            now_ns: 0,
            cur_ns: 0,
            cur_in: false,
            buckets: BTreeMap::new(),
            next: None,
            last: 0,
            known: HashSet::new(),
            printed_header: false,
            late: 0,
            rows: Vec::new(),
        }
    }

    fn floor(&self, ns: u64) -> u64 {
        ns - ns % self.interval_ns
    }

    /// The packet clock: writes the intervals that can no longer change.
    pub fn packet(&mut self, ts_ns: u64) {
        self.cur_ns = ts_ns;
        self.cur_in = self.window.contains(ts_ns);
        if self.cur_in {
            let b = self.floor(ts_ns);
            self.next.get_or_insert(b);
            self.last = self.last.max(b);
        }
        if ts_ns > self.now_ns {
            self.now_ns = ts_ns;
            // Intervals that ended LAG_NS ago or earlier are complete.
            if let Some(done) = ts_ns.checked_sub(self.interval_ns.saturating_add(LAG_NS)) {
                self.emit_through(done.min(self.last));
            }
        }
    }

    /// Writes every interval that starts at or before `upto`. A run of more than
    /// [`MAX_EMPTY_RUN`] empty intervals (a long silence, or a bogus timestamp far ahead) is
    /// one comment line in the text and no rows in JSON.
    fn emit_through(&mut self, upto: u64) {
        while let Some(next) = self.next {
            if next > upto {
                break;
            }
            if !self.buckets.contains_key(&next) {
                let after = upto.saturating_add(self.interval_ns);
                let run_end = self
                    .buckets
                    .keys()
                    .next()
                    .map_or(after, |k| (*k).min(after));
                let n = (run_end - next) / self.interval_ns;
                if n > MAX_EMPTY_RUN {
                    self.skip(next, run_end, n);
                    continue;
                }
            }
            self.emit(next);
            if self.next <= Some(next) {
                break; // the end of time: no interval follows
            }
        }
    }

    /// Passes over the `n` empty intervals from `from` to `to`, saying so in the text.
    fn skip(&mut self, from: u64, to: u64, n: u64) {
        self.next = Some(to);
        if let Some(out) = self.out.as_mut() {
            let line = format!(
                "# {n} empty intervals from {} to {}",
                report::fmt::rfc3339(from),
                report::fmt::rfc3339(to)
            );
            if let Err(e) = writeln!(out, "{line}") {
                self.error.get_or_insert(e);
            }
        }
    }

    /// The open interval that starts at `b`, if it is still open.
    fn bucket(&mut self, ns: u64) -> Option<&mut Bucket> {
        let b = self.floor(ns);
        if self.next.is_none_or(|n| b < n) {
            return None;
        }
        Some(self.buckets.entry(b).or_default())
    }

    fn server_key(&mut self, a: Endpoint) -> Endpoint {
        if self.known.contains(&a) || self.known.len() < MAX_SERVERS {
            self.known.insert(a.clone());
            a
        } else {
            self.known.insert(other_server());
            other_server()
        }
    }

    pub fn segment(&mut self, src: SocketAddr, dst: SocketAddr, frame_len: usize) {
        if !self.cur_in || self.by == TimelineBy::Group {
            return;
        }
        // A server by port or address, or one that answered requests already.
        let is_server = |a: &SocketAddr| {
            self.ports.contains(&a.port())
                || self.addrs.contains(a)
                || self.known.contains(&Endpoint::Ip(*a))
        };
        let (server, inbound) = if is_server(&dst) {
            (dst, true)
        } else if is_server(&src) {
            (src, false)
        } else {
            return;
        };
        let key = self.server_key(server.into());
        let ts = self.cur_ns;
        if let Some(bk) = self.bucket(ts) {
            let w = bk.servers.entry(key).or_default();
            if inbound {
                w.pkts_in += 1;
                w.bytes_in += frame_len as u64;
            } else {
                w.pkts_out += 1;
                w.bytes_out += frame_len as u64;
            }
        }
    }

    /// Counts a selected request in the interval it started in.
    pub fn event(&mut self, fp: &mut Fingerprinter, ev: &QueryEvent) {
        let start = ev.start_ns;
        match self.by {
            TimelineBy::Server => {
                let key = self.server_key(ev.server.clone());
                match self.bucket(start) {
                    Some(bk) => bk.servers.entry(key).or_default().record(ev),
                    None => self.late += 1,
                }
            }
            TimelineBy::Group => {
                let Some(bk) = self.bucket(start) else {
                    self.late += 1;
                    return;
                };
                let (mode, dims) = (fp.mode(), fp.dims());
                let Some(g) = fp.classify(ev) else {
                    return; // left out by --where (the caller filters first)
                };
                let mut key = (ev.protocol, g.key.fingerprint_hash, g.key.command);
                if !bk.groups.contains_key(&key) && bk.groups.len() >= MAX_GROUPS {
                    key = (ev.protocol, 0, "other");
                }
                let (_, w) = bk.groups.entry(key).or_insert_with(|| {
                    let label = if key.2 == "other" && key.1 == 0 {
                        "other".to_string()
                    } else {
                        let (text, id, _) = crate::fp::describe(mode, dims, ev, &g);
                        format!("{id} {}", report::fmt::sanitize(&text, false))
                    };
                    (label, ServerWindow::default())
                });
                w.record(ev);
            }
        }
    }

    /// The rows of interval `b`: (name, counters), zero rows for the servers known so far.
    fn rows_of(&self, bk: &Bucket) -> Vec<(String, ServerWindow)> {
        match self.by {
            TimelineBy::Server => {
                let mut known: Vec<Endpoint> = self.known.iter().cloned().collect();
                known.sort();
                if known.is_empty() {
                    return vec![("-".to_string(), ServerWindow::default())];
                }
                let ctx = ctx("", 1.0, false, self.by);
                known
                    .iter()
                    .map(|s| {
                        let w = bk.servers.get(s).cloned().unwrap_or_default();
                        (server_name(s, &ctx), w)
                    })
                    .collect()
            }
            TimelineBy::Group => {
                let mut g: Vec<&(String, ServerWindow)> = bk.groups.values().collect();
                g.sort_by(|a, b| {
                    b.1.service
                        .sum_ns()
                        .cmp(&a.1.service.sum_ns())
                        .then(b.1.count.cmp(&a.1.count))
                        .then(a.0.cmp(&b.0))
                });
                if g.is_empty() {
                    return vec![("-".to_string(), ServerWindow::default())];
                }
                g.into_iter()
                    .take(self.top)
                    .map(|(l, w)| (l.clone(), w.clone()))
                    .collect()
            }
        }
    }

    /// Writes interval `b` and closes it.
    fn emit(&mut self, b: u64) {
        let bk = self.buckets.remove(&b).unwrap_or_default();
        self.next = Some(b.saturating_add(self.interval_ns));
        let rows = self.rows_of(&bk);
        let end = b.saturating_add(self.interval_ns);
        let secs = self.interval_ns as f64 / 1e9;
        if self.out.is_none() {
            for (name, w) in rows {
                let row = json_row(b, end, secs, &name, &w, self.by);
                self.rows.push(row);
            }
            return;
        }
        if let Err(e) = self.write_text(end, secs, &rows) {
            self.error.get_or_insert(e);
        }
    }

    fn write_text(
        &mut self,
        end: u64,
        secs: f64,
        rows: &[(String, ServerWindow)],
    ) -> io::Result<()> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let group = self.by == TimelineBy::Group;
        // Per group, the group's label ends the line instead of standing in the server column.
        let fields: Vec<Field> = self
            .fields
            .iter()
            .copied()
            .filter(|f| !(group && *f == Field::Server))
            .collect();
        if !self.printed_header {
            self.printed_header = true;
            writeln!(
                out,
                "# timeline: {} intervals of packet time (UTC), a line's time is its interval's \
                 end; a request counts in the interval it started in{}",
                humantime::format_duration(std::time::Duration::from_nanos(self.interval_ns)),
                if group {
                    format!("; the top {} groups by service time", self.top)
                } else {
                    String::new()
                }
            )?;
            let mut header = Vec::new();
            write_header(&mut header, &fields, false, None)?;
            let mut h = String::from_utf8_lossy(&header).trim_end().to_string();
            if group {
                h.push_str("  group");
            }
            writeln!(out, "{h}")?;
        }
        let time = clock(end, &jiff::tz::TimeZone::UTC);
        let c = ctx(&time, secs, false, self.by);
        for (name, w) in rows {
            let mut cells: Vec<(String, usize)> = fields
                .iter()
                .map(|f| (cell(*f, name, w, &c), field_width(*f)))
                .collect();
            if group {
                let label: String = name.chars().take(LABEL_CHARS).collect();
                cells.push((label, 0));
            }
            write_row(out, &cells)?;
        }
        Ok(())
    }

    /// Writes the intervals still open (up to the last selected packet's) and returns the JSON
    /// series (empty rows for text), or the first write error.
    pub fn finish(mut self) -> io::Result<Series> {
        self.emit_through(self.last);
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let (late, by) = (self.late, self.by);
        if let Some(out) = self.out.as_mut() {
            if late > 0 {
                writeln!(
                    out,
                    "# {late} request(s) completed more than {}s after their interval ended: they \
                     are in the digest but in no line",
                    LAG_NS / 1_000_000_000
                )?;
            }
            out.flush()?;
        }
        Ok(Series {
            interval_s: self.interval_ns as f64 / 1e9,
            by: match by {
                TimelineBy::Server => "server",
                TimelineBy::Group => "group",
            },
            late,
            rows: std::mem::take(&mut self.rows),
        })
    }
}

fn ctx(time: &str, secs: f64, no_servers: bool, by: TimelineBy) -> LineCtx<'_> {
    LineCtx {
        time,
        secs,
        sample: 1,
        drops: 0,
        conns: 0,
        pause_ns: 0,
        no_servers,
        offline: Some(Offline {
            per_group: by == TimelineBy::Group,
        }),
    }
}

fn json_row(start: u64, end: u64, secs: f64, name: &str, w: &ServerWindow, by: TimelineBy) -> Row {
    // Microseconds with nanosecond precision, as everywhere in the JSON.
    let us = |v: Option<f64>| v.map(|ns| (ns).round() / 1000.0);
    let q = |l: &aggregate::Latency, p: f64| us(l.quantile_ns(p).map(|ns| ns as f64));
    let per_server = by == TimelineBy::Server;
    let packets = |v: u64| per_server.then_some(v);
    // A group's label is `ID fingerprint` (`other` and `-` have no ID).
    let (id, group) = match name.split_once(' ') {
        Some((id, fp)) if !per_server => (Some(id.to_string()), Some(fp.to_string())),
        _ => (None, (!per_server).then(|| name.to_string())),
    };
    Row {
        start: report::fmt::rfc3339(start),
        end: report::fmt::rfc3339(end),
        server: per_server.then(|| name.to_string()),
        id,
        group,
        count: w.count,
        errors: w.errors,
        qps: (w.count as f64 / secs.max(1e-9) * 1000.0).round() / 1000.0,
        avg_us: us(w.latency.mean_ns()),
        p50_us: q(&w.latency, 0.5),
        p95_us: q(&w.latency, 0.95),
        p99_us: q(&w.latency, 0.99),
        max_us: us(w.latency.max_ns().map(|ns| ns as f64)),
        svc_avg_us: us(w.service.mean_ns()),
        svc_p50_us: q(&w.service, 0.5),
        svc_p95_us: q(&w.service, 0.95),
        svc_p99_us: q(&w.service, 0.99),
        svc_max_us: us(w.service.max_ns().map(|ns| ns as f64)),
        pkts_in: packets(w.pkts_in),
        pkts_out: packets(w.pkts_out),
        bytes_in: packets(w.bytes_in),
        bytes_out: packets(w.bytes_out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_795_600_800 * S;

    fn ev(start: u64, latency: u64, server: u16) -> QueryEvent {
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        QueryEvent {
            client: addr(50_000).into(),
            server: addr(server).into(),
            ..proto::testing::event(Protocol::Redis, "get", start, Some(start + latency))
        }
    }

    /// A writer the test can read after the timeline is gone.
    #[derive(Clone, Default)]
    struct Shared(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.borrow()).into_owned()
        }
    }

    fn timeline(interval: u64, window: Window, text: Option<Shared>) -> Timeline<Shared> {
        let args = TimelineArgs {
            timeline: None,
            timeline_by: TimelineBy::Server,
            timeline_top: 5,
            fields: vec![Field::Time, Field::Server, Field::Count, Field::PktsIn],
        };
        let iv = std::time::Duration::from_nanos(interval);
        Timeline::new(&args, iv, window, vec![6379], vec![], text)
    }

    /// Drives a request as the pipeline does: its packets, then the event at its end.
    fn request(t: &mut Timeline<Shared>, fp: &mut Fingerprinter, e: &QueryEvent) {
        let ip = |a: &Endpoint| a.socket_addr().expect("an IP endpoint");
        let (c, s) = (ip(&e.client), ip(&e.server));
        t.packet(e.start_ns);
        t.segment(c, s, 60);
        let end = e.end_ns.unwrap_or(e.start_ns);
        t.packet(end);
        t.segment(s, c, 80);
        t.event(fp, e);
    }

    fn counts(series: &Series) -> Vec<(u64, u64)> {
        series
            .rows
            .iter()
            .map(|r| {
                let t = r.start.parse::<jiff::Timestamp>().expect("time");
                (t.as_second() as u64 - T0 / S, r.count)
            })
            .collect()
    }

    #[test]
    fn requests_count_in_the_aligned_interval_they_started_in() {
        let mut fp = Fingerprinter::new(crate::cli::FingerprintMode::Dbtap, false, false);
        let mut t = timeline(S, Window::ALL, None);
        // Starts at 0.5 s: the first interval is [0 s, 1 s), aligned to the second.
        for start in [T0 + S / 2, T0 + S / 2 + 1, T0 + 2 * S - 1, T0 + 4 * S] {
            // Completes in the next interval: still counted where it started.
            request(&mut t, &mut fp, &ev(start, S / 2 + 7, 6379));
        }
        let series = t.finish().expect("finish");
        // Second 3 is empty but inside the capture: a zero row. Second 4's packets of the
        // response reach into second 4 (4.5 s): the last interval is second 4.
        assert_eq!(
            counts(&series),
            vec![(0, 2), (1, 1), (2, 0), (3, 0), (4, 1)]
        );
        let r0 = &series.rows[0];
        assert_eq!((r0.pkts_in, r0.pkts_out), (Some(2), Some(0)));
        assert_eq!(series.rows[2].pkts_out, Some(1));
        assert_eq!(series.rows[3].p50_us, None);
        assert_eq!(series.late, 0);
        assert_eq!(r0.server.as_deref(), Some("127.0.0.1:6379"));
    }

    #[test]
    fn intervals_are_written_as_packet_time_passes_and_late_requests_are_counted() {
        let mut fp = Fingerprinter::new(crate::cli::FingerprintMode::Dbtap, false, false);
        let out = Shared::default();
        let mut t = timeline(10 * S, Window::ALL, Some(out.clone()));
        request(&mut t, &mut fp, &ev(T0 + S, 1000, 6379));
        // A request that started in the first interval and runs 2 minutes.
        let slow = ev(T0 + 2 * S, 120 * S, 6379);
        t.packet(slow.start_ns);
        for k in 1..20u64 {
            t.packet(T0 + k * 5 * S);
        }
        // 95 s in: the first interval ([0, 10 s)) ended 85 s ago, so it is written; the open
        // ones are those that ended less than LAG_NS ago.
        assert!(t.buckets.len() as u64 <= LAG_NS / (10 * S) + 2);
        let lines = out.text();
        let lines: Vec<&str> = lines.lines().collect();
        assert!(
            lines[0].starts_with("# timeline: 10s intervals"),
            "{lines:?}"
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["time", "server", "count", "pkts_in/s"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["10:00:10", "127.0.0.1:6379", "1", "0"]
        );
        assert_eq!(lines.len(), 2 + 3, "{lines:?}");
        t.packet(slow.end_ns.unwrap_or_default());
        t.event(&mut fp, &slow);
        let series = t.finish().expect("finish");
        assert_eq!(series.late, 1);
        assert!(series.rows.is_empty(), "text lines, no JSON rows");
        let text = out.text();
        assert!(
            text.contains("\n# 1 request(s) completed more than 60s"),
            "{text}"
        );
        // Every interval to the last packet's (at 122 s) has its line.
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 1 + 13);
    }

    #[test]
    fn a_long_silence_is_one_line_and_the_window_bounds_the_intervals() {
        let mut fp = Fingerprinter::new(crate::cli::FingerprintMode::Dbtap, false, false);
        let window = Window {
            from_ns: T0 + 2 * S,
            to_ns: u64::MAX,
        };
        let mut t = timeline(S, window, None);
        // Before the window: neither counted nor an interval.
        request(&mut t, &mut fp, &ev(T0, 1000, 6379));
        request(&mut t, &mut fp, &ev(T0 + 3 * S, 1000, 6379));
        // A bogus timestamp a century later does not write billions of zero rows.
        let far = T0 + 100 * 365 * 86_400 * S;
        request(&mut t, &mut fp, &ev(far, 1000, 6379));
        let series = t.finish().expect("finish");
        let c = counts(&series);
        assert_eq!(c.first(), Some(&(3, 1)));
        assert_eq!(c.last(), Some(&((far - T0) / S, 1)));
        assert!(series.rows.len() < 100, "{}", series.rows.len());
    }

    #[test]
    fn servers_beyond_the_bound_are_summed_as_other() {
        let mut fp = Fingerprinter::new(crate::cli::FingerprintMode::Dbtap, false, false);
        let mut t = timeline(S, Window::ALL, None);
        for p in 0..(MAX_SERVERS as u16 + 5) {
            t.packet(T0);
            t.event(&mut fp, &ev(T0, 10, 1000 + p));
        }
        let series = t.finish().expect("finish");
        assert_eq!(series.rows.len(), MAX_SERVERS + 1);
        let other = series
            .rows
            .iter()
            .find(|r| r.server.as_deref() == Some("other"));
        assert_eq!(other.map(|r| r.count), Some(5));
    }
}
