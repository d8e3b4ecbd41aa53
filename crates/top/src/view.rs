//! The state of the screen and what the keys do to it.

use std::cell::Cell;
use std::cmp::Ordering;

use aggregate::{Aggregator, Group, GroupKey};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::{Frame, SortBy};

/// Identifies a row across refreshes: the overflow group has a key of its own kind.
pub(crate) type RowKey = (GroupKey, bool);

/// Everything the screen shows: the newest [`Frame`], the sort order, which window, the selection
/// and the scroll position.
#[derive(Debug)]
pub struct View {
    frame: Option<Frame>,
    /// Sort column.
    pub sort: SortBy,
    /// Show the groups since start instead of the last interval.
    pub since_start: bool,
    /// Show the detail pane of the selected group.
    pub detail: bool,
    /// Show the key help line at the bottom.
    pub help: bool,
    /// Index of the selected row in the sorted table.
    selected: usize,
    /// The selected group, so that the selection follows it when the order changes.
    selected_key: Option<RowKey>,
    /// First row shown; `draw` moves it to keep the selection visible.
    pub(crate) offset: Cell<usize>,
    /// Table rows that fit on screen at the last draw (for PgUp/PgDn).
    pub(crate) page: Cell<usize>,
}

impl View {
    pub fn new(sort: SortBy) -> Self {
        View {
            frame: None,
            sort,
            since_start: false,
            detail: false,
            help: false,
            selected: 0,
            selected_key: None,
            offset: Cell::new(0),
            page: Cell::new(10),
        }
    }

    /// Shows a new frame; the selection stays on the same group if it is still there.
    pub fn set_frame(&mut self, frame: Frame) {
        self.frame = Some(frame);
        self.resync();
    }

    pub fn frame(&self) -> Option<&Frame> {
        self.frame.as_ref()
    }

    /// Index of the selected row (0 = first row of the table).
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// The aggregator and its length in seconds for the window shown.
    pub(crate) fn shown(&self) -> Option<(&Aggregator, f64)> {
        let f = self.frame.as_ref()?;
        Some(if self.since_start {
            (&f.total, f.total_secs)
        } else {
            (&f.window, f.window_secs)
        })
    }

    /// The rows of the shown window, sorted.
    pub(crate) fn rows(&self) -> Vec<RowData<'_>> {
        let Some((agg, _)) = self.shown() else {
            return Vec::new();
        };
        let mut rows: Vec<RowData<'_>> = agg.groups().map(RowData::new).collect();
        let sort = self.sort;
        rows.sort_by(|a, b| a.cmp_by(b, sort));
        rows
    }

    /// After the rows changed (new frame, sort, window): find the selected group again, or keep
    /// the position when it is gone.
    fn resync(&mut self) {
        let rows = self.rows();
        let found = self
            .selected_key
            .and_then(|k| rows.iter().position(|r| r.key == k));
        let idx = found.unwrap_or(self.selected.min(rows.len().saturating_sub(1)));
        let key = rows.get(idx).map(|r| r.key);
        self.selected = idx;
        self.selected_key = key;
    }

    fn select(&mut self, idx: usize) {
        let rows = self.rows();
        let idx = idx.min(rows.len().saturating_sub(1));
        let key = rows.get(idx).map(|r| r.key);
        self.selected = idx;
        self.selected_key = key;
    }
}

/// One table row with the numbers it is sorted and drawn by.
#[derive(Debug)]
pub(crate) struct RowData<'a> {
    pub group: &'a Group,
    pub key: RowKey,
    pub count: u64,
    pub errors: u64,
    /// Service time: total, mean, p50/p95/p99, max.
    pub sum_ns: u128,
    pub mean_ns: Option<f64>,
    /// p50, p95, p99.
    pub q: [Option<u64>; 3],
    pub max_ns: Option<u64>,
    /// Response time: total and mean.
    pub resp_sum_ns: u128,
    pub resp_mean_ns: Option<f64>,
}

impl<'a> RowData<'a> {
    fn new(g: &'a Group) -> Self {
        let lat = &g.stats.service;
        RowData {
            group: g,
            key: (g.key, g.overflow),
            count: g.stats.count,
            errors: g.stats.errors,
            sum_ns: lat.sum_ns(),
            mean_ns: lat.mean_ns(),
            q: lat.quantiles_ns([0.50, 0.95, 0.99]),
            max_ns: lat.max_ns(),
            resp_sum_ns: g.stats.latency.sum_ns(),
            resp_mean_ns: g.stats.latency.mean_ns(),
        }
    }

    /// Descending by the sort column, then by total time and count, then by text: a total
    /// order, so equal rows never swap between refreshes.
    pub(crate) fn cmp_by(&self, o: &Self, sort: SortBy) -> Ordering {
        let primary = match sort {
            SortBy::Total => o.sum_ns.cmp(&self.sum_ns),
            SortBy::Count => o.count.cmp(&self.count),
            SortBy::P99 => o.q[2].cmp(&self.q[2]),
            SortBy::Errors => o.errors.cmp(&self.errors),
            SortBy::Response => o.resp_sum_ns.cmp(&self.resp_sum_ns),
        };
        primary
            .then(o.sum_ns.cmp(&self.sum_ns))
            .then(o.count.cmp(&self.count))
            .then_with(|| self.group.fingerprint.cmp(&o.group.fingerprint))
            .then(self.key.cmp(&o.key))
    }
}

/// Applies one key to the view. Returns true when the user asked to quit (`q`, Esc, Ctrl-C).
pub fn on_key(view: &mut View, key: KeyEvent) -> bool {
    if key.kind == KeyEventKind::Release {
        return false;
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return matches!(key.code, KeyCode::Char('c' | 'C'));
    }
    let page = view.page.get().max(1);
    match key.code {
        KeyCode::Char('q') | KeyCode::Esc => return true,
        KeyCode::Char('t') => set_sort(view, SortBy::Total),
        KeyCode::Char('c') => set_sort(view, SortBy::Count),
        KeyCode::Char('p') => set_sort(view, SortBy::P99),
        KeyCode::Char('e') => set_sort(view, SortBy::Errors),
        KeyCode::Char('r') => set_sort(view, SortBy::Response),
        KeyCode::Char('w') => {
            view.since_start = !view.since_start;
            view.resync();
        }
        KeyCode::Char('?') => view.help = !view.help,
        KeyCode::Enter => view.detail = !view.detail,
        KeyCode::Up => view.select(view.selected.saturating_sub(1)),
        KeyCode::Down => view.select(view.selected.saturating_add(1)),
        KeyCode::PageUp => view.select(view.selected.saturating_sub(page)),
        KeyCode::PageDown => view.select(view.selected.saturating_add(page)),
        KeyCode::Home => view.select(0),
        KeyCode::End => view.select(usize::MAX),
        _ => {}
    }
    false
}

fn set_sort(view: &mut View, sort: SortBy) {
    view.sort = sort;
    view.resync();
}
