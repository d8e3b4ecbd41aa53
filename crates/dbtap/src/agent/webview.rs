//! `/api/live` of the web UI: the per-server lines of the last interval, as the terminal prints
//! them (the same cells, `lines.rs`), and the top groups of that interval's window. The main
//! thread refreshes it every interval; the web server's threads read it.

use std::sync::Mutex;

use aggregate::{Aggregator, Group};
use proto::Endpoint;
use serde_json::{Value, json};

use super::lines::{LineCtx, cell, clock, field_header, server_name};
use super::merge::Interval;
use super::worker::{ServerWindow, other_server};
use crate::cli::Field;

/// Most groups in `top`.
const TOP_ROWS: usize = 100;

/// The live view the web server reads.
pub(super) struct LiveLines {
    interval_s: f64,
    fields: Vec<Field>,
    sample: u64,
    tz: jiff::tz::TimeZone,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Servers seen so far (each keeps its line).
    known: Vec<Endpoint>,
    json: Option<Value>,
}

impl LiveLines {
    pub(super) fn new(interval_s: f64, fields: Vec<Field>, sample: u64) -> LiveLines {
        LiveLines {
            interval_s,
            fields,
            sample,
            tz: jiff::tz::TimeZone::system(),
            state: Mutex::new(State::default()),
        }
    }

    /// The interval `iv` just merged (before its window moves to the snapshot): `secs` long,
    /// ending at `end_ns`, with `drops` kernel drops.
    pub(super) fn update(&self, iv: &Interval, secs: f64, end_ns: u64, drops: u64) {
        let mut st = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for s in iv.servers.keys() {
            if !st.known.contains(s) {
                st.known.push(s.clone());
            }
        }
        st.known.sort();
        let time = clock(end_ns, &self.tz);
        let ctx = LineCtx {
            time: &time,
            secs,
            sample: self.sample,
            drops,
            conns: iv.open_connections,
            pause_ns: iv.pause_ns,
            no_servers: st.known.is_empty(),
            offline: None,
        };
        let rows: Vec<Endpoint> = if st.known.is_empty() {
            vec![other_server()]
        } else {
            st.known.clone()
        };
        let empty = ServerWindow::default();
        let lines: Vec<Vec<String>> = rows
            .iter()
            .map(|s| {
                let w = iv.servers.get(s).unwrap_or(&empty);
                let name = server_name(s, &ctx);
                self.fields
                    .iter()
                    .map(|f| cell(*f, &name, w, &ctx))
                    .collect()
            })
            .collect();
        let header: Vec<&str> = self
            .fields
            .iter()
            .map(|f| field_header(*f, self.sample > 1))
            .collect();
        st.json = Some(json!({
            "ts": end_ns / 1_000_000_000,
            "interval_s": self.interval_s,
            "header": header,
            "lines": lines,
            "top": top_rows(&iv.window, secs, self.sample),
        }));
    }
}

impl web::LiveView for LiveLines {
    fn interval_s(&self) -> f64 {
        self.interval_s
    }

    fn live_json(&self) -> Value {
        let st = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        st.json.clone().unwrap_or_else(|| {
            json!({"ts": null, "interval_s": self.interval_s, "header": [], "lines": [], "top": []})
        })
    }
}

/// The window's groups as `/api/top` rows (no sparkline), by service time, scaled by `sample`.
fn top_rows(window: &Aggregator, secs: f64, sample: u64) -> Vec<Value> {
    let total_ns = window.totals().stats.service.sum_ns() as f64;
    let mut groups: Vec<&Group> = window.groups().collect();
    groups.sort_by(|a, b| {
        b.stats
            .service
            .sum_ns()
            .cmp(&a.stats.service.sum_ns())
            .then(b.stats.count.cmp(&a.stats.count))
            .then(a.id.cmp(&b.id))
    });
    let us = |v: Option<u64>| v.map(|ns| ns as f64 / 1e3);
    let n = sample as f64;
    groups
        .into_iter()
        .take(TOP_ROWS)
        .map(|g| {
            let s = &g.stats;
            let svc = s.service.sum_ns() as f64;
            json!({
                "protocol": g.key.protocol.name(),
                "command": g.key.command,
                "id": g.id,
                "fingerprint": g.fingerprint,
                "count": s.count * sample,
                "errors": s.errors * sample,
                "service_sum_us": svc * n / 1e3,
                "load": svc * n / 1e9 / secs.max(1e-9),
                "share": if total_ns > 0.0 { svc / total_ns } else { 0.0 },
                "p50_us": us(s.service.quantile_ns(0.5)),
                "p95_us": us(s.service.quantile_ns(0.95)),
                "p99_us": us(s.service.quantile_ns(0.99)),
                "max_us": us(s.service.max_ns()),
                "bytes_in": s.bytes_in.sum as u64 * sample,
                "bytes_out": s.bytes_out.sum as u64 * sample,
                "rows": (s.rows_sent.sum + s.rows_affected.sum) as u64 * sample,
                "spark": [],
            })
        })
        .collect()
}

/// The lines' columns of `dbtap top --listen` (live's default `--fields`).
pub(super) fn default_fields() -> Vec<Field> {
    use Field::*;
    vec![
        Time, Server, Count, Avg, P50, P95, P99, Max, Errors, PktsIn, PktsOut, MbpsIn, MbpsOut,
        Drops,
    ]
}
