//! The full-screen live view behind `dbtap top`: the query groups of the last interval (or since
//! start), refreshed whenever the capture side sends a new [`Frame`], sortable and browsable like
//! `top`.
//!
//! [`run`] owns the terminal (raw mode, alternate screen, restored on every exit path); [`draw`]
//! and [`on_key`] are pure, so the screen and the keys are tested with ratatui's `TestBackend`.
//!
//! Times are service times (without queueing behind earlier requests on the same connection;
//! see ARCHITECTURE.md, "Service time and response time"), except the `Resp` column, the average
//! response time as the client saw it.
//!
//! Keys: `t` total (service) time, `c` count, `p` p99, `e` errors, `r` total response time (sort); `w` toggles the window (last
//! interval / since start); Up/Down/PgUp/PgDn/Home/End move the selection; Enter opens or closes
//! the detail pane of the selected group; `?` shows the key help at the bottom; `q`, Esc or Ctrl-C
//! quit.

#![forbid(unsafe_code)]

mod render;
mod term;
mod view;

pub use render::draw;
pub use term::run;
pub use view::{View, on_key};

/// One refresh of the screen, sent by the capture side (typically once a second).
#[derive(Clone, Debug)]
pub struct Frame {
    /// First screen line, e.g. `dbtap top - lo - up 00:01:23 - 1 in 4 connections sampled`.
    pub header: String,
    /// Second screen line, e.g. `12,345 pkt/s in 9.1 Mbit/s out 40.2 Mbit/s  drops 0  conns 12`.
    pub status: String,
    /// The groups of the last interval.
    pub window: aggregate::Aggregator,
    /// Length of the last interval, seconds.
    pub window_secs: f64,
    /// The groups since start.
    pub total: aggregate::Aggregator,
    /// Time since start, seconds.
    pub total_secs: f64,
}

/// The column the table is sorted by (descending).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SortBy {
    /// Total service time of the group.
    Total,
    /// Number of queries.
    Count,
    /// 99th percentile service time.
    P99,
    /// Number of errors.
    Errors,
    /// Total response time of the group (queueing included).
    Response,
}

impl SortBy {
    /// The words shown after "Sorted by: " on screen.
    pub fn label(self) -> &'static str {
        match self {
            SortBy::Total => "total time",
            SortBy::Count => "count",
            SortBy::P99 => "p99",
            SortBy::Errors => "errors",
            SortBy::Response => "total response time",
        }
    }
}

#[cfg(test)]
mod tests;

/// The width of the terminal on stdout, in columns (None when stdout is not a terminal or its
/// size is unknown). For the text report's `--width` default.
pub fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    crossterm::terminal::size()
        .ok()
        .map(|(w, _)| usize::from(w))
        .filter(|&w| w > 0)
}
