//! Drawing one screen from a [`View`]. Pure: no IO, works with any ratatui backend.

use aggregate::{DECADE_LABELS, Group, Stats, TopCounter};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Wrap};
use report::fmt;

use crate::SortBy;
use crate::view::{RowData, View};

/// Marks the sort column in the table header.
pub const SORT_MARK: &str = "▼";
/// The fingerprint column keeps at least this many cells before other columns are dropped.
const FP_MIN: u16 = 20;
/// Widest protocol/command column.
const CMD_MAX: u16 = 16;
const HELP: &str = "t/c/p/e/r sort  w window  Up/Down/PgUp/PgDn/Home/End select  Enter detail  \
                    ? help  q quit";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Col {
    Rank,
    Qps,
    Count,
    Errs,
    Total,
    Avg,
    P50,
    P95,
    P99,
    Max,
    /// Average response time.
    Resp,
    Cmd,
    Fp,
}

/// Display order.
const COLS: [Col; 13] = [
    Col::Rank,
    Col::Qps,
    Col::Count,
    Col::Errs,
    Col::Total,
    Col::Avg,
    Col::P50,
    Col::P95,
    Col::P99,
    Col::Max,
    Col::Resp,
    Col::Cmd,
    Col::Fp,
];

/// Columns dropped, first to last, when the screen is too narrow (the sort column never is).
const DROP_ORDER: [Col; 11] = [
    Col::P50,
    Col::P95,
    Col::Max,
    Col::Avg,
    Col::Resp,
    Col::Cmd,
    Col::Errs,
    Col::Qps,
    Col::Total,
    Col::Count,
    Col::P99,
];

impl Col {
    fn title(self) -> &'static str {
        match self {
            Col::Rank => "#",
            Col::Qps => "QPS",
            Col::Count => "Count",
            Col::Errs => "Errs",
            Col::Total => "Total",
            Col::Avg => "Avg",
            Col::P50 => "p50",
            Col::P95 => "p95",
            Col::P99 => "p99",
            Col::Max => "Max",
            Col::Resp => "Resp",
            Col::Cmd => "Cmd",
            Col::Fp => "Fingerprint",
        }
    }

    fn sort(self) -> Option<SortBy> {
        match self {
            Col::Total => Some(SortBy::Total),
            Col::Count => Some(SortBy::Count),
            Col::P99 => Some(SortBy::P99),
            Col::Errs => Some(SortBy::Errors),
            Col::Resp => Some(SortBy::Response),
            _ => None,
        }
    }

    fn right_aligned(self) -> bool {
        !matches!(self, Col::Cmd | Col::Fp)
    }
}

/// The columns that fit in `width` and their widths (the fingerprint takes what is left).
fn columns(width: u16, rows: usize, cmd_w: u16, sort: SortBy) -> Vec<(Col, u16)> {
    let fixed = |c: Col| -> u16 {
        match c {
            Col::Rank => (rows.max(1).ilog10() as u16 + 1).max(2),
            Col::Qps
            | Col::Count
            | Col::Avg
            | Col::P50
            | Col::P95
            | Col::P99
            | Col::Max
            | Col::Resp => 6,
            Col::Errs => 5,
            Col::Total => 11,
            Col::Cmd => cmd_w,
            Col::Fp => 0,
        }
    };
    let mut cols: Vec<(Col, u16)> = COLS.iter().map(|&c| (c, fixed(c))).collect();
    // Fixed columns, each followed by one cell of spacing.
    let used = |cols: &[(Col, u16)]| -> u16 {
        cols.iter()
            .filter(|(c, _)| *c != Col::Fp)
            .map(|(_, w)| w + 1)
            .sum()
    };
    for drop in DROP_ORDER {
        if used(&cols).saturating_add(FP_MIN) <= width {
            break;
        }
        if drop.sort() != Some(sort) {
            cols.retain(|(c, _)| *c != drop);
        }
    }
    let fp_w = width.saturating_sub(used(&cols));
    if fp_w == 0 {
        cols.retain(|(c, _)| *c != Col::Fp);
    } else if let Some(fp) = cols.iter_mut().find(|(c, _)| *c == Col::Fp) {
        fp.1 = fp_w;
    }
    cols
}

fn dur(ns: Option<f64>) -> String {
    ns.map_or_else(|| "-".to_string(), fmt::duration)
}

fn dur_u(ns: Option<u64>) -> String {
    dur(ns.map(|n| n as f64))
}

fn per_sec(n: u64, secs: f64) -> String {
    if secs > 0.0 && secs.is_finite() {
        fmt::count(n as f64 / secs)
    } else {
        "-".to_string()
    }
}

fn percent(part: u128, whole: u128) -> String {
    if whole == 0 {
        return "-".to_string();
    }
    let p = part as f64 * 100.0 / whole as f64;
    if p > 0.0 && p < 0.5 {
        "<1%".to_string()
    } else {
        format!("{p:.0}%")
    }
}

/// "last 1s" / "since start": the words after "Window: ".
fn window_label(view: &View) -> String {
    if view.since_start {
        return "since start".to_string();
    }
    let s = view.frame().map_or(0.0, |f| f.window_secs);
    if !s.is_finite() || s <= 0.0 {
        "last interval".to_string()
    } else if s >= 0.95 {
        format!("last {s:.0}s")
    } else {
        format!("last {s:.1}s")
    }
}

fn protocol_command(g: &Group) -> String {
    format!("{}/{}", g.key.protocol.name(), g.key.command)
}

fn fingerprint_text(g: &Group) -> String {
    if g.overflow {
        "other (groups past the group limit)".to_string()
    } else {
        // With --group-by, the group's dimension values come first.
        fmt::sanitize(&report::dims::item(g), false)
    }
}

fn cell_text(c: Col, r: &RowData<'_>, rank: usize, secs: f64, total_ns: u128, w: u16) -> String {
    match c {
        Col::Rank => rank.to_string(),
        Col::Qps => per_sec(r.count, secs),
        Col::Count => fmt::count(r.count as f64),
        Col::Errs => fmt::count(r.errors as f64),
        Col::Total => format!(
            "{:>6} {:>4}",
            fmt::duration(r.sum_ns as f64),
            percent(r.sum_ns, total_ns)
        ),
        Col::Avg => dur(r.mean_ns),
        Col::P50 => dur_u(r.q[0]),
        Col::P95 => dur_u(r.q[1]),
        Col::P99 => dur_u(r.q[2]),
        Col::Max => dur_u(r.max_ns),
        Col::Resp => dur(r.resp_mean_ns),
        Col::Cmd => {
            if r.group.overflow {
                "other".to_string()
            } else {
                fmt::shorten(&protocol_command(r.group), usize::from(w))
            }
        }
        Col::Fp => fmt::shorten(&fingerprint_text(r.group), usize::from(w)),
    }
}

/// Draws the whole screen for `view` into `f`.
pub fn draw(f: &mut ratatui::Frame, view: &View) {
    let area = f.area();
    let [header, status, totals, body, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(u16::from(view.help)),
    ])
    .areas(area);

    let frame = view.frame();
    let head = frame.map_or_else(
        || "dbtap top".to_string(),
        |fr| fmt::sanitize(&fr.header, false),
    );
    f.render_widget(
        Paragraph::new(head).style(Style::new().add_modifier(Modifier::BOLD)),
        header,
    );
    let stat = frame.map_or_else(
        || "waiting for the first interval...".to_string(),
        |fr| fmt::sanitize(&fr.status, false),
    );
    f.render_widget(Paragraph::new(stat), status);
    if let Some((agg, secs)) = view.shown() {
        f.render_widget(Paragraph::new(totals_line(agg, secs)), totals);
    }
    if view.help {
        f.render_widget(
            Paragraph::new(HELP).style(Style::new().add_modifier(Modifier::REVERSED)),
            help,
        );
    }

    let title = format!(
        " Window: {} ─ Sorted by: {} ─ ? help ─ times are service times; Resp: avg response time ",
        window_label(view),
        view.sort.label()
    );
    let block = Block::new().borders(Borders::TOP).title(title);
    let inner = block.inner(body);
    f.render_widget(block, body);
    draw_body(f, view, inner);
}

fn totals_line(agg: &aggregate::Aggregator, secs: f64) -> String {
    let t = agg.totals();
    let s = &t.stats;
    let [p99] = s.service.quantiles_ns([0.99]);
    let [resp_p99] = s.latency.quantiles_ns([0.99]);
    let err_pct = if s.count > 0 {
        format!(" ({:.1}%)", s.errors as f64 * 100.0 / s.count as f64)
    } else {
        String::new()
    };
    let other = if t.overflow_events > 0 {
        " + other"
    } else {
        ""
    };
    format!(
        "Queries/s {}  errors {}{}  avg {}  p99 {}  groups {}{}  response avg {}  p99 {}",
        per_sec(s.count, secs),
        fmt::thousands(s.errors),
        err_pct,
        dur(s.service.mean_ns()),
        dur_u(p99),
        fmt::thousands(t.unique_groups),
        other,
        dur(s.latency.mean_ns()),
        dur_u(resp_p99),
    )
}

fn draw_body(f: &mut ratatui::Frame, view: &View, area: Rect) {
    let Some((agg, secs)) = view.shown() else {
        view.page.set(usize::from(area.height.saturating_sub(1)));
        return;
    };
    let rows = view.rows();
    if rows.is_empty() {
        view.page.set(usize::from(area.height.saturating_sub(1)));
        let msg = if view.since_start {
            "no queries since start"
        } else {
            "no queries in this interval"
        };
        f.render_widget(Paragraph::new(msg), area);
        return;
    }
    let selected = view.selected().min(rows.len() - 1);
    let (table_area, detail_area) = if view.detail {
        // The table keeps about 40% of the height (and at least its header and 3 rows when
        // the screen is tall enough); the detail pane gets the rest.
        let want = (area.height * 2 / 5)
            .max(4)
            .min(rows.len() as u16 + 1)
            .min(area.height);
        let [t, d] = Layout::vertical([Constraint::Length(want), Constraint::Min(0)]).areas(area);
        (t, Some(d))
    } else {
        (area, None)
    };

    let page = usize::from(table_area.height.saturating_sub(1));
    view.page.set(page.max(1));
    // Keep the selection on screen.
    let mut offset = view.offset.get().min(rows.len().saturating_sub(1));
    if selected < offset {
        offset = selected;
    } else if page > 0 && selected >= offset + page {
        offset = selected + 1 - page;
    }
    offset = offset.min(rows.len().saturating_sub(page.max(1)));
    view.offset.set(offset);

    let cmd_w = rows
        .iter()
        .map(|r| protocol_command(r.group).chars().count() as u16)
        .max()
        .unwrap_or(0)
        .clamp(3, CMD_MAX);
    let cols = columns(table_area.width, rows.len(), cmd_w, view.sort);
    let total_ns = agg.totals().stats.service.sum_ns();
    let header = Row::new(cols.iter().map(|&(c, _)| {
        let mut t = c.title().to_string();
        if c.sort() == Some(view.sort) {
            t.push_str(SORT_MARK);
        }
        align(c, t)
    }))
    .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let body = rows
        .iter()
        .enumerate()
        .skip(offset)
        .take(page)
        .map(|(i, r)| {
            let row = Row::new(
                cols.iter()
                    .map(|&(c, w)| align(c, cell_text(c, r, i + 1, secs, total_ns, w))),
            );
            if i == selected {
                row.style(Style::new().add_modifier(Modifier::REVERSED))
            } else if r.group.overflow {
                row.style(Style::new().add_modifier(Modifier::ITALIC))
            } else {
                row
            }
        });
    let table = Table::new(body, cols.iter().map(|&(_, w)| Constraint::Length(w)))
        .header(header)
        .column_spacing(1);
    f.render_widget(table, table_area);

    if let Some(d) = detail_area {
        draw_detail(f, &rows[selected], secs, total_ns, d);
    }
}

fn align(c: Col, s: String) -> Cell<'static> {
    let line = Line::from(s);
    Cell::from(if c.right_aligned() {
        line.right_aligned()
    } else {
        line
    })
}

fn top3<K: std::hash::Hash + Eq + Clone + Ord>(
    t: &TopCounter<K>,
    show: impl Fn(&K) -> String,
) -> String {
    let (top, rest) = t.top(3);
    if top.is_empty() && rest == 0 {
        return "-".to_string();
    }
    let mut parts: Vec<String> = top
        .iter()
        .map(|(k, n)| format!("{} {}", fmt::sanitize(&show(k), false), fmt::thousands(*n)))
        .collect();
    if rest > 0 {
        parts.push(format!("others {}", fmt::thousands(rest)));
    }
    parts.join(", ")
}

fn opt_name(k: &Option<std::sync::Arc<str>>) -> String {
    k.as_deref().unwrap_or("(unknown)").to_string()
}

/// A bold label of the detail pane.
fn label(l: &'static str) -> Span<'static> {
    Span::styled(l, Style::new().add_modifier(Modifier::BOLD))
}

/// The detail pane's line of warnings (where there are some) and the top error codes.
fn errors_line(s: &Stats) -> Line<'static> {
    let errs = s.errors_by_code.sorted();
    let mut err_text: Vec<String> = errs
        .iter()
        .take(3)
        .map(|e| {
            let state = e
                .state
                .as_deref()
                .map(|st| format!("/{st}"))
                .unwrap_or_default();
            format!(
                "{}{state} x{} {}",
                e.code,
                fmt::thousands(e.count),
                fmt::shorten(&fmt::sanitize(&e.message, false), 60)
            )
        })
        .collect();
    let more: u64 = errs.iter().skip(3).map(|e| e.count).sum::<u64>() + s.errors_by_code.other();
    if more > 0 {
        err_text.push(format!("others x{}", fmt::thousands(more)));
    }
    let mut spans = Vec::new();
    if s.warnings.sum > 0 {
        // MySQL/MariaDB warnings, before the error codes (only where there are some).
        let n = u64::try_from(s.warnings.sum).unwrap_or(u64::MAX);
        spans.push(label("Warnings "));
        spans.push(Span::raw(format!("{}  ", fmt::thousands(n))));
    }
    spans.push(label("Error codes "));
    spans.push(Span::raw(if err_text.is_empty() {
        "-".to_string()
    } else {
        err_text.join("; ")
    }));
    Line::from(spans)
}

fn draw_detail(f: &mut ratatui::Frame, r: &RowData<'_>, secs: f64, total_ns: u128, area: Rect) {
    let g = r.group;
    let s = &g.stats;
    let lat = &s.service;
    let resp = &s.latency;
    let mut lines: Vec<Line<'static>> = Vec::new();
    lines.push(Line::from(vec![
        label("Id "),
        Span::raw(fmt::sanitize(&g.id, false)),
        Span::raw(format!(
            "  {}  count {} ({}/s)  errors {}  total {} ({})",
            protocol_command(g),
            fmt::thousands(r.count),
            per_sec(r.count, secs),
            fmt::thousands(r.errors),
            fmt::duration(r.sum_ns as f64),
            percent(r.sum_ns, total_ns)
        )),
    ]));
    lines.push(Line::from(vec![
        label("Service "),
        Span::raw(format!(
            "min {}  avg {}  p50 {}  p95 {}  p99 {}  max {}",
            dur_u(lat.min_ns()),
            dur(r.mean_ns),
            dur_u(r.q[0]),
            dur_u(r.q[1]),
            dur_u(r.q[2]),
            dur_u(r.max_ns)
        )),
    ]));
    // Service time decades.
    let decades: Vec<String> = DECADE_LABELS
        .iter()
        .zip(lat.decades())
        .map(|(l, n)| format!("{l} {}", fmt::count(*n as f64)))
        .collect();
    lines.push(Line::from(vec![
        label("Decades "),
        Span::raw(decades.join("  ")),
    ]));
    lines.push(Line::from(vec![
        label("Users "),
        Span::raw(top3(&s.users, opt_name)),
    ]));
    lines.push(Line::from(vec![
        label("Databases "),
        Span::raw(top3(&s.databases, opt_name)),
    ]));
    lines.push(Line::from(vec![
        label("Clients "),
        Span::raw(top3(&s.clients, |ip| ip.to_string())),
    ]));
    lines.push(errors_line(s));
    lines.push(Line::from(vec![
        label("Fingerprint "),
        Span::raw(fingerprint_text(g)),
    ]));
    // The response time goes in the title, so the pane keeps its height.
    let [rp50, rp99] = resp.quantiles_ns([0.50, 0.99]);
    let title = format!(
        " Detail (Enter closes) ─ Response: avg {}  p50 {}  p99 {}  max {}  total {} ",
        dur(r.resp_mean_ns),
        dur_u(rp50),
        dur_u(rp99),
        dur_u(resp.max_ns()),
        fmt::duration(r.resp_sum_ns as f64)
    );
    let block = Block::new().borders(Borders::TOP).title(title);
    f.render_widget(
        Paragraph::new(Text::from(lines))
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}
