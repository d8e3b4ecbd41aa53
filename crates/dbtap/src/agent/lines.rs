//! The interval lines of `dbtap live` (one row per server and interval, the columns `--fields`
//! chooses), the startup line that precedes them, and the final digest that ends them.

use std::io::Write;

use aggregate::Aggregator;
use anyhow::Result;
use proto::Endpoint;
use report::CaptureHealth;

use super::merge::Interval;
use super::setup::Plan;
use super::worker::{ServerWindow, other_server};
use crate::cli::{CaptureArgs, DigestFormat, Field, LiveArgs};

/// Column header and cell of an interval line field.
pub(crate) fn field_header(f: Field, sampled: bool) -> &'static str {
    match f {
        Field::Time => "time",
        Field::Server => "server",
        Field::Count if sampled => "~count",
        Field::Count => "count",
        Field::Qps if sampled => "~qps",
        Field::Qps => "qps",
        Field::Avg => "avg_us",
        Field::P50 => "p50_us",
        Field::P95 => "p95_us",
        Field::P99 => "p99_us",
        Field::Max => "max_us",
        Field::SvcAvg => "svc_avg_us",
        Field::SvcP50 => "svc_p50_us",
        Field::SvcP95 => "svc_p95_us",
        Field::SvcP99 => "svc_p99_us",
        Field::SvcMax => "svc_max_us",
        Field::Errors if sampled => "~errors",
        Field::Errors => "errors",
        Field::PktsIn if sampled => "~pkts_in/s",
        Field::PktsIn => "pkts_in/s",
        Field::PktsOut if sampled => "~pkts_out/s",
        Field::PktsOut => "pkts_out/s",
        Field::MbpsIn if sampled => "~Mbit_in/s",
        Field::MbpsIn => "Mbit_in/s",
        Field::MbpsOut if sampled => "~Mbit_out/s",
        Field::MbpsOut => "Mbit_out/s",
        Field::Drops => "drops",
        Field::Conns => "conns",
        Field::PauseMs => "pause_ms",
    }
}

pub(crate) fn field_width(f: Field) -> usize {
    match f {
        Field::Time => 8,
        Field::Server => 21,
        _ => 10,
    }
}

/// What the cells of one interval's lines share.
pub(crate) struct LineCtx<'a> {
    pub(crate) time: &'a str,
    pub(crate) secs: f64,
    pub(crate) sample: u64,
    pub(crate) drops: u64,
    pub(crate) conns: usize,
    /// The packet reader's longest pause during the interval, ns.
    pub(crate) pause_ns: u64,
    /// No server has been seen yet: the one line shows "-" as its server.
    pub(crate) no_servers: bool,
    /// Lines of a capture file (`digest --timeline`): no kernel drops and no connection count
    /// are known (`-`), and per-group rows have no packet counts (`-`).
    pub(crate) offline: Option<Offline>,
}

/// How the lines of a capture file differ from live's.
#[derive(Clone, Copy)]
pub(crate) struct Offline {
    /// Rows are query groups, not servers.
    pub(crate) per_group: bool,
}

/// How a line names its server.
pub(crate) fn server_name(server: &Endpoint, c: &LineCtx<'_>) -> String {
    if c.no_servers {
        "-".to_string()
    } else if *server == other_server() {
        "other".to_string()
    } else {
        report::fmt::sanitize(&server.to_string(), false)
    }
}

#[cfg(test)]
fn field_cell(f: Field, server: &Endpoint, w: &ServerWindow, c: &LineCtx<'_>) -> String {
    cell(f, &server_name(server, c), w, c)
}

/// The cell of field `f` in the row called `name` (a server, or a query group).
pub(crate) fn cell(f: Field, name: &str, w: &ServerWindow, c: &LineCtx<'_>) -> String {
    let us = |v: Option<u64>| v.map_or("-".to_string(), report::fmt::micros);
    let quantile = |l: &aggregate::Latency, q: f64| us(l.quantile_ns(q));
    // Counts of the sampled connections, scaled to the estimate for all of them.
    let per_s = |v: u64| (v * c.sample) as f64 / c.secs.max(1e-9);
    let no_packets = c.offline.is_some_and(|o| o.per_group);
    match f {
        Field::Time => c.time.to_string(),
        Field::Server => name.to_string(),
        Field::PktsIn | Field::PktsOut | Field::MbpsIn | Field::MbpsOut if no_packets => {
            "-".to_string()
        }
        Field::Drops | Field::Conns | Field::PauseMs if c.offline.is_some() => "-".to_string(),
        Field::Count => (w.count * c.sample).to_string(),
        Field::Qps => format!("{:.1}", per_s(w.count)),
        Field::Avg => us(w.latency.mean_ns().map(|m| m as u64)),
        Field::P50 => quantile(&w.latency, 0.5),
        Field::P95 => quantile(&w.latency, 0.95),
        Field::P99 => quantile(&w.latency, 0.99),
        Field::Max => us(w.latency.max_ns()),
        Field::SvcAvg => us(w.service.mean_ns().map(|m| m as u64)),
        Field::SvcP50 => quantile(&w.service, 0.5),
        Field::SvcP95 => quantile(&w.service, 0.95),
        Field::SvcP99 => quantile(&w.service, 0.99),
        Field::SvcMax => us(w.service.max_ns()),
        Field::Errors => (w.errors * c.sample).to_string(),
        Field::PktsIn => format!("{:.0}", per_s(w.pkts_in)),
        Field::PktsOut => format!("{:.0}", per_s(w.pkts_out)),
        Field::MbpsIn => format!("{:.2}", per_s(w.bytes_in) * 8.0 / 1e6),
        Field::MbpsOut => format!("{:.2}", per_s(w.bytes_out) * 8.0 / 1e6),
        Field::Drops => c.drops.to_string(),
        Field::Conns => c.conns.to_string(),
        Field::PauseMs => (c.pause_ns / 1_000_000).to_string(),
    }
}

/// The header row of the lines; the server column is called `name_header` when given.
pub(crate) fn write_header(
    out: &mut impl Write,
    fields: &[Field],
    sampled: bool,
    name_header: Option<&str>,
) -> std::io::Result<()> {
    let cells: Vec<(String, usize)> = fields
        .iter()
        .map(|f| match (f, name_header) {
            (Field::Server, Some(h)) => (h.to_string(), field_width(*f)),
            _ => (field_header(*f, sampled).to_string(), field_width(*f)),
        })
        .collect();
    write_row(out, &cells)
}

/// One line: the row called `name` with its counters `w`.
fn write_line(
    out: &mut impl Write,
    fields: &[Field],
    name: &str,
    w: &ServerWindow,
    ctx: &LineCtx<'_>,
) -> std::io::Result<()> {
    let cells: Vec<(String, usize)> = fields
        .iter()
        .map(|f| (cell(*f, name, w, ctx), field_width(*f)))
        .collect();
    write_row(out, &cells)
}

/// A line of cells: the first left-aligned, the others right-aligned to their widths.
pub(crate) fn write_row(out: &mut impl Write, cells: &[(String, usize)]) -> std::io::Result<()> {
    let mut line = String::new();
    for (i, (c, w)) in cells.iter().enumerate() {
        if i > 0 {
            line.push_str("  ");
        }
        if i == 0 {
            line.push_str(&format!("{c:<w$}"));
        } else {
            line.push_str(&format!("{c:>w$}"));
        }
    }
    writeln!(out, "{}", line.trim_end())
}

/// `HH:MM:SS` in `tz` (the system's time zone for the lines) of a time in ns since the epoch.
pub(crate) fn clock(ns: u64, tz: &jiff::tz::TimeZone) -> String {
    match jiff::Timestamp::from_nanosecond(i128::from(ns)) {
        Ok(t) => t.to_zoned(tz.clone()).strftime("%H:%M:%S").to_string(),
        Err(_) => "--:--:--".to_string(),
    }
}

/// How the startup line names the zone of the interval lines' times: `CET, UTC+01:00`.
fn zone_label(tz: &jiff::tz::TimeZone) -> String {
    let now = jiff::Timestamp::now().to_zoned(tz.clone());
    now.strftime("%Z, UTC%:z").to_string()
}

/// The line on stderr that says what is captured, how, and where the metrics are.
pub(super) fn startup(
    c: &CaptureArgs,
    plan: &Plan,
    server: Option<&web::Server>,
    tz: &jiff::tz::TimeZone,
) {
    let matcher = &plan.matcher;
    let threads = plan.threads();
    let mut what: Vec<String> = matcher.ports.iter().map(|p| format!("port {p}")).collect();
    what.extend(matcher.addrs.iter().map(|a| a.to_string()));
    eprintln!(
        "dbtap: capturing on {} ({}{}{}), {} thread{}{}; times are local ({}); Ctrl-C to stop",
        c.interface,
        what.join(", "),
        c.filter
            .as_ref()
            .map(|f| format!(", filter '{f}'"))
            .unwrap_or_default(),
        if c.sample > 1 {
            format!(", 1 connection in {} (counts are estimates)", c.sample)
        } else {
            String::new()
        },
        threads,
        if threads == 1 { "" } else { "s" },
        server
            .map(|s| format!(", metrics on http://{}/metrics", s.local_addr()))
            .unwrap_or_default(),
        zone_label(tz),
    );
}

/// The start line of `--source ebpf`: what is traced, where the metrics are, the time zone.
pub(super) fn startup_ebpf(what: &str, server: Option<&web::Server>, tz: &jiff::tz::TimeZone) {
    eprintln!(
        "dbtap: {what}{}; times are local ({}); Ctrl-C to stop",
        server
            .map(|s| format!(", metrics on http://{}/metrics", s.local_addr()))
            .unwrap_or_default(),
        zone_label(tz),
    );
}

/// The interval lines' state across intervals: the header is printed once, and every server
/// seen keeps its line.
pub(super) struct Lines {
    /// The interval lines print local times (TZ, else /etc/localtime; UTC if neither is known).
    tz: jiff::tz::TimeZone,
    sample: u64,
    known_servers: Vec<Endpoint>,
    printed_header: bool,
}

impl Lines {
    pub(super) fn new(tz: jiff::tz::TimeZone, sample: u64) -> Lines {
        Lines {
            tz,
            sample,
            known_servers: Vec::new(),
            printed_header: false,
        }
    }

    /// One line per server known so far (or one line, when none is), then a flush. `drops`:
    /// the kernel's drops during the interval.
    pub(super) fn print(
        &mut self,
        out: &mut impl Write,
        args: &LiveArgs,
        iv: &Interval,
        drops: u64,
        secs: f64,
        end_ns: u64,
    ) -> std::io::Result<()> {
        let sample = self.sample;
        let sampled = sample > 1;
        if !self.printed_header {
            self.printed_header = true;
            if sampled {
                writeln!(
                    out,
                    "# 1 connection in {sample} is captured: ~ columns are estimates (x{sample})"
                )?;
            }
            write_header(out, &args.fields, sampled, None)?;
        }
        for s in iv.servers.keys() {
            if !self.known_servers.contains(s) {
                self.known_servers.push(s.clone());
            }
        }
        self.known_servers.sort();
        let time = clock(end_ns, &self.tz);
        let ctx = LineCtx {
            time: &time,
            secs,
            sample,
            drops,
            conns: iv.open_connections,
            pause_ns: iv.pause_ns,
            no_servers: self.known_servers.is_empty(),
            offline: None,
        };
        let empty = ServerWindow::default();
        let rows: Vec<Endpoint> = if self.known_servers.is_empty() {
            vec![other_server()]
        } else {
            self.known_servers.clone()
        };
        for s in &rows {
            let w = iv.servers.get(s).unwrap_or(&empty);
            write_line(out, &args.fields, &server_name(s, &ctx), w, &ctx)?;
        }
        out.flush()
    }
}

/// The warnings and the digest of the whole run (counts scaled by `sample`) that end
/// `dbtap live`.
pub(super) fn final_digest(
    args: &LiveArgs,
    mut total: Aggregator,
    health: &CaptureHealth,
    quiet_lines: bool,
    sample: u64,
) -> Result<()> {
    for w in &health.warnings {
        eprintln!("dbtap: warning: {w}");
    }
    total.scale(sample);
    let opts = args.report.options();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match args.report.format {
        DigestFormat::Text => {
            if !quiet_lines {
                writeln!(out)?;
            }
            report::text::render(&total, health, &opts, &mut out)?
        }
        DigestFormat::Json => report::json::render(&total, health, &opts, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_lines_scale_counts_and_say_so() {
        let mut w = ServerWindow {
            count: 7,
            errors: 1,
            pkts_in: 20,
            ..ServerWindow::default()
        };
        for us in [100u64, 200, 300] {
            w.latency.record(us * 1000);
            // Pipelined: a tenth of each response time is the request's own service.
            w.service.record(us * 100);
        }
        let ctx = LineCtx {
            time: "12:00:00",
            secs: 2.0,
            sample: 4,
            drops: 0,
            conns: 3,
            pause_ns: 0,
            no_servers: false,
            offline: None,
        };
        let srv: Endpoint = "127.0.0.1:3306".parse().expect("addr");
        assert_eq!(field_cell(Field::Count, &srv, &w, &ctx), "28");
        assert_eq!(field_cell(Field::Errors, &srv, &w, &ctx), "4");
        assert_eq!(field_cell(Field::Qps, &srv, &w, &ctx), "14.0");
        // Latencies are the sample's own, in µs; rates are per second, scaled.
        assert_eq!(field_cell(Field::P50, &srv, &w, &ctx), "200");
        assert_eq!(field_cell(Field::Max, &srv, &w, &ctx), "300");
        assert_eq!(field_cell(Field::SvcP50, &srv, &w, &ctx), "20");
        assert_eq!(field_cell(Field::SvcAvg, &srv, &w, &ctx), "20");
        assert_eq!(field_cell(Field::SvcMax, &srv, &w, &ctx), "30");
        assert_eq!(field_header(Field::SvcP99, false), "svc_p99_us");
        assert_eq!(field_header(Field::P99, false), "p99_us");
        assert_eq!(field_cell(Field::PktsIn, &srv, &w, &ctx), "40");
        assert_eq!(field_header(Field::PktsIn, true), "~pkts_in/s");
        assert_eq!(field_header(Field::Count, true), "~count");
        assert_eq!(field_header(Field::Count, false), "count");
        let utc = jiff::tz::TimeZone::UTC;
        assert_eq!(clock(3_600_000_000_000 + 61_000_000_000, &utc), "01:01:01");
        let plus_2 = jiff::tz::TimeZone::fixed(jiff::tz::offset(2));
        assert_eq!(
            clock(3_600_000_000_000 + 61_000_000_000, &plus_2),
            "03:01:01"
        );
        assert_eq!(zone_label(&plus_2), "+02, UTC+02:00");
        assert_eq!(zone_label(&utc), "UTC, UTC+00:00");
    }
}
