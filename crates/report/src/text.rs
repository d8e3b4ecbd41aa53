//! The text report, laid out like pt-query-digest's (overall summary, profile, one block per
//! query) with percentiles, errors, and a capture-health block that says when numbers are
//! incomplete. All wire text is sanitized so a query cannot send escape sequences to a terminal.

use std::io::{self, Write};
use std::sync::Arc;

use aggregate::{Aggregator, DECADE_LABELS, DIM_SHOW, Example, Group, Latency, Stats, TopCounter};

use crate::fmt::{bytes, count, duration, rfc3339, sanitize, shorten, thousands};
use crate::health::{COUNTERS, Kind, Unit, advice, counter, note_names};
use crate::{CaptureHealth, Histogram, ReportOptions, concurrency, ranked, rate, span_ns};

const BAR_WIDTH: u64 = 64;
const ATTR_WIDTH: usize = 13;
/// What the report's times are, said once in the header.
const TIMES_NOTE: &str = "# Exec = service time (excludes queueing behind earlier requests on the \
                          same connection); Resp = response time as the client saw it";

struct Painter {
    color: bool,
}

impl Painter {
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
    fn red(&self, s: &str) -> String {
        self.paint("1;31", s)
    }
    fn yellow(&self, s: &str) -> String {
        self.paint("33", s)
    }
    fn green(&self, s: &str) -> String {
        self.paint("32", s)
    }
}

/// Writes the text report.
pub fn render(
    agg: &Aggregator,
    health: &CaptureHealth,
    opts: &ReportOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    let p = Painter { color: opts.color };
    let span = span_ns(agg, health);
    let ranked = ranked(agg, opts.order_by);
    let totals = agg.totals();
    let t = &totals.stats;

    // Overall.
    writeln!(out, "{}", p.bold("# dbtap query digest"))?;
    let (first, last) = match (health.first_ts_ns, health.last_ts_ns) {
        (Some(a), Some(b)) => (Some(a), Some(b)),
        _ => (t.first_seen_ns, t.last_seen_ns),
    };
    let selected = opts.selected.as_ref().map(|s| format!("# Selected: {s}"));
    if let (None, Some(sel)) = (first.zip(last), &selected) {
        writeln!(out, "{sel}")?; // no time range to follow
    }
    if !health.files.is_empty() {
        let files: Vec<String> = health.files.iter().map(|f| sanitize(f, false)).collect();
        writeln!(out, "# Files: {}", files.join(", "))?;
    }
    crate::dims::scope_lines(out, agg)?;
    let mut overall = format!(
        "# Overall: {} queries, {} unique, {} {}",
        thousands(t.count),
        thousands(totals.unique_groups),
        thousands(t.errors),
        if t.errors == 1 { "error" } else { "errors" }
    );
    if let Some(qps) = rate(t.count, span) {
        overall.push_str(&format!(", {qps:.2} QPS"));
    }
    if let Some(c) = concurrency(t.service.sum_ns(), span) {
        overall.push_str(&format!(", {c:.2}x concurrency"));
    }
    writeln!(out, "{overall}")?;
    writeln!(out, "{TIMES_NOTE}")?;
    writeln!(out, "# Times: {}", crate::fmt::TIME_POLICY)?;
    if let (Some(a), Some(b)) = (first, last) {
        writeln!(
            out,
            "# Time range: {} to {} ({})",
            rfc3339(a),
            rfc3339(b),
            duration(b.saturating_sub(a) as f64)
        )?;
        if let Some(sel) = &selected {
            writeln!(out, "{sel}")?;
        }
    }
    attribute_table(out, t, None)?;
    writeln!(out, "{}", outcomes(t))?;
    crate::dims::panel(out, agg)?;
    crate::errors::text(out, &ranked, t.errors)?;
    writeln!(out)?;

    health_block(out, &p, health, agg)?;
    writeln!(out)?;

    profile(out, agg, &ranked, opts, span)?;
    crate::txn::text(out, agg)?;

    for (i, g) in ranked.iter().take(opts.limit).enumerate() {
        writeln!(out)?;
        details(out, &p, agg, g, i + 1, span, opts.histogram)?;
    }
    Ok(())
}

fn outcomes(s: &Stats) -> String {
    let mut line = format!(
        "# Outcomes: {} ok, {} error, {} no response, {} incomplete, {} no reply expected",
        thousands(s.ok),
        thousands(s.errors),
        thousands(s.no_response),
        thousands(s.incomplete),
        thousands(s.no_reply_expected)
    );
    if s.partial > 0 {
        // Said only where there are some, so that clean captures read as before.
        line.push_str(&format!(
            "; {} partial (requests that lost bytes in capture gaps: counted and timed, text as seen)",
            thousands(s.partial)
        ));
    }
    line
}

fn pct_of(part: u128, whole: u128) -> String {
    part.saturating_mul(100)
        .checked_div(whole)
        .map_or(String::new(), |v| v.to_string())
}

/// The attribute table. With `whole` (the totals), a `pct` column gives this group's share.
fn attribute_table(out: &mut impl Write, s: &Stats, whole: Option<&Stats>) -> io::Result<()> {
    let with_pct = whole.is_some();
    attribute_header(out, with_pct)?;
    if let Some(w) = whole {
        attribute_row(
            out,
            with_pct,
            "Count",
            Some(pct_of(s.count.into(), w.count.into())),
            &[count(s.count as f64)],
        )?;
    }
    time_rows(out, s, whole)?;
    sum_rows(out, s, whole)?;
    if let Some(w) = whole {
        attribute_row(
            out,
            with_pct,
            "Errors",
            Some(pct_of(s.errors.into(), w.errors.into())),
            &[count(s.errors as f64)],
        )?;
    }
    Ok(())
}

/// The attribute table's column names and their underline.
fn attribute_header(out: &mut impl Write, with_pct: bool) -> io::Result<()> {
    let head = ["total", "min", "max", "avg", "p50", "p95", "p99"];
    let mut h = format!("# {:<ATTR_WIDTH$}", "Attribute");
    let mut u = format!("# {}", "=".repeat(ATTR_WIDTH));
    if with_pct {
        h.push_str(" pct");
        u.push_str(" ===");
    }
    for c in head {
        h.push_str(&format!(" {c:>7}"));
        u.push_str(" =======");
    }
    writeln!(out, "{h}")?;
    writeln!(out, "{u}")
}

/// One row of the attribute table (the `pct` column only `with_pct`).
fn attribute_row(
    out: &mut dyn Write,
    with_pct: bool,
    name: &str,
    pct: Option<String>,
    cols: &[String],
) -> io::Result<()> {
    let mut line = format!("# {name:<ATTR_WIDTH$}");
    if with_pct {
        line.push_str(&format!(" {:>3}", pct.unwrap_or_default()));
    }
    for c in cols {
        line.push_str(&format!(" {c:>7}"));
    }
    writeln!(out, "{}", line.trim_end())
}

/// A duration, or `-`.
fn d(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |n| duration(n as f64))
}

/// One row of a time histogram: total, min, max, avg, p50, p95, p99 (`pct` of `whole`).
fn latency_row(
    out: &mut impl Write,
    name: &str,
    l: &Latency,
    whole: Option<&Latency>,
) -> io::Result<()> {
    let [p50, p95, p99] = l.quantiles_ns([0.5, 0.95, 0.99]);
    attribute_row(
        out,
        whole.is_some(),
        name,
        whole.map(|w| pct_of(l.sum_ns(), w.sum_ns())),
        &[
            duration(l.sum_ns() as f64),
            d(l.min_ns()),
            d(l.max_ns()),
            l.mean_ns().map_or("-".to_string(), duration),
            d(p50),
            d(p95),
            d(p99),
        ],
    )
}

/// The rows of durations: service time ("Exec"), response time ("Resp"), both with
/// percentiles, and time to the first byte.
fn time_rows(out: &mut impl Write, s: &Stats, whole: Option<&Stats>) -> io::Result<()> {
    let with_pct = whole.is_some();
    latency_row(out, "Exec time", &s.service, whole.map(|w| &w.service))?;
    latency_row(out, "Resp time", &s.latency, whole.map(|w| &w.latency))?;
    let f = &s.ttfb;
    attribute_row(
        out,
        with_pct,
        "Time to 1st B",
        whole.map(|w| pct_of(f.sum, w.ttfb.sum)),
        &[
            duration(f.sum as f64),
            d(f.min()),
            d(f.max()),
            f.mean().map_or("-".to_string(), duration),
        ],
    )
}

/// The rows of summed quantities: bytes, rows, and warnings where there are some.
fn sum_rows(out: &mut impl Write, s: &Stats, whole: Option<&Stats>) -> io::Result<()> {
    let with_pct = whole.is_some();
    let warnings = (
        "Warnings",
        &s.warnings,
        whole.map(|w| &w.warnings),
        count as fn(f64) -> String,
    );
    let sums = [
        (
            "Bytes in",
            &s.bytes_in,
            whole.map(|w| &w.bytes_in),
            bytes as fn(f64) -> String,
        ),
        (
            "Bytes out",
            &s.bytes_out,
            whole.map(|w| &w.bytes_out),
            bytes,
        ),
        (
            "Rows sent",
            &s.rows_sent,
            whole.map(|w| &w.rows_sent),
            count,
        ),
        (
            "Rows affected",
            &s.rows_affected,
            whole.map(|w| &w.rows_affected),
            count,
        ),
    ];
    // Warnings only where there are some (MySQL/MariaDB), not a row of zeros in every group.
    let warned = (s.warnings.sum > 0).then_some(warnings);
    for (name, v, w, f) in sums.into_iter().chain(warned) {
        let o = |x: Option<u64>| x.map_or("-".to_string(), |n| f(n as f64));
        attribute_row(
            out,
            with_pct,
            name,
            w.map(|w| pct_of(v.sum, w.sum)),
            &[
                f(v.sum as f64),
                o(v.min()),
                o(v.max()),
                v.mean().map_or("-".to_string(), f),
            ],
        )?;
    }
    Ok(())
}

/// The packet reader's pauses, for a live capture that dropped packets or paused for long: a
/// starved or stopped agent (long pauses) told from bursts beyond the ring (short ones).
fn reader_pause_note(l: &crate::health::LiveHealth) -> String {
    let why = if l.reader_long_pauses > 0 {
        "dbtap did not read the ring for that long (a starved or stopped agent)"
    } else {
        "the reader kept up: bursts beyond the ring, or the kernel"
    };
    format!(
        "capture reader: longest pause {} ms, {} pause{} of 100 ms or more, ring {} MiB: {why}",
        thousands(l.reader_pause_max_ms),
        thousands(l.reader_long_pauses),
        if l.reader_long_pauses == 1 { "" } else { "s" },
        l.ring_mb
    )
}

fn health_block(
    out: &mut impl Write,
    p: &Painter,
    h: &CaptureHealth,
    agg: &Aggregator,
) -> io::Result<()> {
    let problems = h.problems();
    if problems.is_empty() {
        writeln!(
            out,
            "# Capture health: {}",
            p.green("complete (nothing lost or skipped)")
        )?;
    } else {
        writeln!(
            out,
            "# Capture health: {}",
            p.red("INCOMPLETE: some traffic was lost or not understood; the numbers undercount")
        )?;
    }
    if h.sampled_one_in() > 1 {
        let line = format!(
            "#   ESTIMATES: 1 connection in {} was captured (--sample); every count is multiplied by {}",
            h.sampled_one_in(),
            h.sampled_one_in()
        );
        writeln!(out, "{}", p.yellow(&line))?;
    }
    if let Some(l) = h.live.as_ref().filter(|l| l.ring_mb > 0)
        && (l.kernel_drops > 0 || l.reader_long_pauses > 0)
    {
        writeln!(out, "#   {}", reader_pause_note(l))?;
    }
    if let Some(l) = h.live.as_ref().filter(|l| l.ring_growths > 0) {
        writeln!(
            out,
            "#   capture ring grew {} time{} with the traffic, to {} MiB (--ring-max-mb)",
            l.ring_growths,
            if l.ring_growths == 1 { "" } else { "s" },
            l.ring_mb
        )?;
    }
    for c in COUNTERS {
        let Some(note) = c.note else { continue };
        let shown = match c.kind {
            // A section's count line is shown when the section is (streams only when read).
            Kind::Count => c.get(h).is_some(),
            Kind::Info => note_names(note).any(|n| value(h, n) > 0),
            Kind::Loss => false,
        };
        if shown {
            writeln!(out, "#   {}", fill_note(note, h))?;
        }
    }
    let w = problems.iter().map(|x| x.0.len()).max().unwrap_or(0);
    let n = problems
        .iter()
        .map(|x| thousands(x.1).len())
        .max()
        .unwrap_or(0);
    for (name, v, what) in &problems {
        let line = format!("#   !! {name:<w$} {:>n$}  {what}", thousands(*v));
        writeln!(out, "{}", p.yellow(&line))?;
        if let Some(a) = advice(name) {
            writeln!(out, "{}", p.yellow(&format!("#      advice: {a}")))?;
        }
    }
    let t = agg.totals();
    if t.overflow_events > 0 {
        let line = format!(
            "#   !! {} queries of groups beyond the {}-group bound are counted in \"other\"",
            thousands(t.overflow_events),
            thousands(agg.config().max_groups as u64)
        );
        writeln!(out, "{}", p.yellow(&line))?;
    }
    for warning in &h.warnings {
        writeln!(
            out,
            "{}",
            p.yellow(&format!("#   warning: {}", sanitize(warning, false)))
        )?;
    }
    Ok(())
}

/// The value of the counter `name` (0 when absent or unknown).
fn value(h: &CaptureHealth, name: &str) -> u64 {
    counter(name).and_then(|c| c.get(h)).unwrap_or(0)
}

/// A ledger note with each `{name}` replaced by that counter's value.
fn fill_note(note: &str, h: &CaptureHealth) -> String {
    let mut out = String::with_capacity(note.len() + 16);
    let mut rest = note;
    while let Some((before, after)) = rest.split_once('{') {
        out.push_str(before);
        let Some((name, tail)) = after.split_once('}') else {
            out.push('{');
            rest = after;
            continue;
        };
        let v = value(h, name);
        match counter(name).map(|c| c.unit) {
            Some(Unit::Bytes) => out.push_str(&bytes(v as f64)),
            _ => out.push_str(&thousands(v)),
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

fn profile(
    out: &mut impl Write,
    agg: &Aggregator,
    ranked: &[&Group],
    opts: &ReportOptions,
    span: Option<u64>,
) -> io::Result<()> {
    let total = agg.totals().stats.service.sum_ns();
    // Load: average active sessions (the group's service time / the capture span).
    let load = |sum: u128| concurrency(sum, span).map_or("-".to_string(), |c| format!("{c:.2}"));
    let shown = &ranked[..ranked.len().min(opts.limit)];
    let rest = &ranked[shown.len()..];
    let cmd = |g: &Group| format!("{} {}", g.key.protocol.name(), g.key.command);
    let id_w = shown
        .iter()
        .map(|g| sanitize(&g.id, false).chars().count())
        .max()
        .unwrap_or(0)
        .max(8);
    let cmd_w = shown.iter().map(|g| cmd(g).len()).max().unwrap_or(0).max(7);
    let calls_w = ranked
        .iter()
        .map(|g| thousands(g.stats.count).len())
        .max()
        .unwrap_or(0)
        .max(5);
    let rt = |sum: u128| {
        let pct = if total > 0 {
            sum as f64 * 100.0 / total as f64
        } else {
            0.0
        };
        format!("{:>7} {:>5.1}%", duration(sum as f64), pct)
    };
    writeln!(out, "# Profile")?;
    let prefix_len = profile_head(out, id_w, calls_w, cmd_w)?;
    let fp_w = if opts.width == 0 {
        usize::MAX
    } else {
        opts.width.saturating_sub(prefix_len).max(20)
    };
    for (i, g) in shown.iter().enumerate() {
        let s = &g.stats;
        let e_call = s.service.mean_ns().map_or("-".to_string(), duration);
        let r_call = s.latency.mean_ns().map_or("-".to_string(), duration);
        let p99 = d(s.service.quantile_ns(0.99));
        let line = format!(
            "# {:>4} {:<id_w$} {} {:>6} {:>calls_w$} {:>9} {:>7} {:>9} {:>6} {:<cmd_w$} {}",
            i + 1,
            sanitize(&g.id, false),
            rt(s.service.sum_ns()),
            load(s.service.sum_ns()),
            thousands(s.count),
            e_call,
            p99,
            r_call,
            thousands(s.errors),
            cmd(g),
            shorten(&sanitize(&crate::dims::item(g), false), fp_w)
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    if !rest.is_empty() {
        let mut misc = Stats::default();
        for g in rest {
            misc.merge(&g.stats);
        }
        let e_call = misc.service.mean_ns().map_or("-".to_string(), duration);
        let r_call = misc.latency.mean_ns().map_or("-".to_string(), duration);
        writeln!(
            out,
            "# MISC {:<id_w$} {} {:>6} {:>calls_w$} {:>9} {:>7} {:>9} {:>6} {:<cmd_w$} <{} ITEMS>",
            "MISC",
            rt(misc.service.sum_ns()),
            load(misc.service.sum_ns()),
            thousands(misc.count),
            e_call,
            "-",
            r_call,
            thousands(misc.errors),
            "",
            rest.len()
        )?;
    }
    Ok(())
}

/// The profile's column names and their underline; returns the width before `Fingerprint`.
fn profile_head(
    out: &mut impl Write,
    id_w: usize,
    calls_w: usize,
    cmd_w: usize,
) -> io::Result<usize> {
    let head = format!(
        "# Rank {:<id_w$} {:<14} {:>6} {:>calls_w$} {:>9} {:>7} {:>9} {:>6} {:<cmd_w$} Fingerprint",
        "Query ID",
        "Exec time",
        "Load",
        "Calls",
        "Exec/Call",
        "p99",
        "Resp/Call",
        "Errors",
        "Command"
    );
    writeln!(out, "{head}")?;
    writeln!(
        out,
        "# ==== {} {} ====== {} ========= ======= ========= ====== {} ===========",
        "=".repeat(id_w),
        "=".repeat(14),
        "=".repeat(calls_w),
        "=".repeat(cmd_w)
    )?;
    Ok(head.chars().count() - "Fingerprint".len())
}

fn dim_line<K: std::hash::Hash + Eq + Clone + Ord>(
    name: &str,
    c: &TopCounter<K>,
    total: u64,
    show: impl Fn(&K) -> String,
) -> Option<String> {
    let (top, other) = c.top(DIM_SHOW);
    if top.is_empty() && other == 0 {
        return None;
    }
    let pct = |n: u64| {
        if total > 0 {
            (n as f64 * 100.0 / total as f64).round() as u64
        } else {
            0
        }
    };
    let mut parts: Vec<String> = Vec::new();
    if top.len() == 1 && other == 0 {
        parts.push(sanitize(&show(top[0].0), false));
    } else {
        for (k, n) in &top {
            parts.push(format!(
                "{} ({}/{}%)",
                sanitize(&show(k), false),
                thousands(*n),
                pct(*n)
            ));
        }
        if other > 0 {
            parts.push(format!("other ({}/{}%)", thousands(other), pct(other)));
        }
    }
    Some(format!("# {name:<ATTR_WIDTH$} {}", parts.join(", ")))
}

fn name_or_unknown(k: &Option<Arc<str>>) -> String {
    k.as_deref().unwrap_or("(unknown)").to_string()
}

/// The detail block of one group: its heading, attribute table, outcomes, errors,
/// dimensions, latency distribution, fingerprint and slowest example.
fn details(
    out: &mut impl Write,
    p: &Painter,
    agg: &Aggregator,
    g: &Group,
    rank: usize,
    span: Option<u64>,
    hist: Histogram,
) -> io::Result<()> {
    let s = &g.stats;
    details_heading(out, p, agg, g, rank, span)?;
    attribute_table(out, s, Some(&agg.totals().stats))?;
    writeln!(out, "{}", outcomes(s))?;
    errors_by_code(out, p, s)?;
    crate::dba::write_index_line(out, s)?;
    for line in [
        dim_line("Databases", &s.databases, s.count, name_or_unknown),
        dim_line("Users", &s.users, s.count, name_or_unknown),
        dim_line("Clients", &s.clients, s.count, |ip| ip.to_string()),
    ]
    .into_iter()
    .flatten()
    {
        writeln!(out, "{line}")?;
    }
    match hist {
        Histogram::Decade => exec_time_distribution(out, s)?,
        Histogram::Fine => crate::fine::text(out, &s.service)?,
    }
    writeln!(out, "# Fingerprint")?;
    writeln!(out, "#    {}", sanitize(&g.fingerprint, false))?;
    if let Some(ex) = &s.example {
        slowest_example(out, ex)?;
        crate::dba::write_with_values(out, ex)?;
    }
    Ok(())
}

/// `# Query <rank>: <rates>, ID <id>`, what the group is, and its time range.
fn details_heading(
    out: &mut impl Write,
    p: &Painter,
    agg: &Aggregator,
    g: &Group,
    rank: usize,
    span: Option<u64>,
) -> io::Result<()> {
    let s = &g.stats;
    let mut head = format!("# Query {rank}:");
    let mut rates = Vec::new();
    if let Some(q) = rate(s.count, span) {
        rates.push(format!("{q:.2} QPS"));
    }
    if let Some(c) = concurrency(s.service.sum_ns(), span) {
        rates.push(format!("{c:.2}x concurrency"));
    }
    if !rates.is_empty() {
        head.push(' ');
        head.push_str(&rates.join(", "));
        head.push(',');
    }
    head.push_str(&format!(" ID {}", sanitize(&g.id, false)));
    writeln!(out, "{}", p.bold(&head))?;
    if g.overflow {
        writeln!(
            out,
            "# Queries of groups beyond the {}-group bound, all fingerprints mixed",
            thousands(agg.config().max_groups as u64)
        )?;
    } else {
        writeln!(
            out,
            "# Protocol {}, command {}",
            g.key.protocol.name(),
            g.key.command
        )?;
    }
    crate::dims::group_line(out, g)?;
    if let (Some(a), Some(b)) = (s.first_seen_ns, s.last_seen_ns) {
        writeln!(out, "# Time range: {} to {}", rfc3339(a), rfc3339(b))?;
    }
    Ok(())
}

/// `# Errors by code`, when the group has errors.
fn errors_by_code(out: &mut impl Write, p: &Painter, s: &Stats) -> io::Result<()> {
    let errs = s.errors_by_code.sorted();
    if errs.is_empty() && s.errors_by_code.other() == 0 {
        return Ok(());
    }
    writeln!(out, "# Errors by code")?;
    for e in errs {
        let code = match &e.state {
            Some(st) => format!("{} ({})", e.code, sanitize(st, false)),
            None => e.code.to_string(),
        };
        let line = format!(
            "#   {code} x{}: {}",
            thousands(e.count),
            sanitize(&e.message, false)
        );
        writeln!(out, "{}", p.yellow(&line))?;
    }
    if s.errors_by_code.other() > 0 {
        writeln!(
            out,
            "#   other codes x{}",
            thousands(s.errors_by_code.other())
        )?;
    }
    Ok(())
}

/// `# Exec time distribution`: a bar per decade of service time.
fn exec_time_distribution(out: &mut impl Write, s: &Stats) -> io::Result<()> {
    writeln!(out, "# Exec time distribution")?;
    let dec = s.service.decades();
    let max = dec.iter().copied().max().unwrap_or(0);
    for (label, &n) in DECADE_LABELS.iter().zip(dec) {
        let bar = if n == 0 || max == 0 {
            0
        } else {
            (n * BAR_WIDTH).div_ceil(max)
        };
        let line = format!("# {label:>5}  {}", "#".repeat(bar as usize));
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// `# Slowest: ...` and the slowest query's text.
fn slowest_example(out: &mut impl Write, ex: &Example) -> io::Result<()> {
    let mut what = vec![
        format!("at {}", rfc3339(ex.start_ns)),
        format!(
            "client {} -> {}",
            sanitize(&ex.client.to_string(), false),
            sanitize(&ex.server.to_string(), false)
        ),
    ];
    if let Some(p) = &ex.peer {
        what.push(format!("process {}", sanitize(&p.to_string(), false)));
    }
    if let Some(db) = &ex.database {
        what.push(format!("database {}", sanitize(db, false)));
    }
    if let Some(u) = &ex.user {
        what.push(format!("user {}", sanitize(u, false)));
    }
    if let Some(id) = ex.statement_id {
        what.push(format!("statement {id}"));
    }
    let lat = match (ex.latency_ns, ex.service_ns) {
        (Some(l), Some(e)) => format!("{} (exec {})", duration(l as f64), duration(e as f64)),
        (Some(l), None) => duration(l as f64),
        (None, _) => "no response".to_string(),
    };
    writeln!(out, "# Slowest: {lat} {}", what.join(", "))?;
    match &ex.text {
        Some(text) => {
            if ex.text_truncated {
                writeln!(out, "# (text truncated)")?;
            }
            let clean = sanitize(text, true);
            writeln!(out, "{}", clean.trim_end_matches('\n'))
        }
        None => writeln!(out, "# (no text captured)"),
    }
}
