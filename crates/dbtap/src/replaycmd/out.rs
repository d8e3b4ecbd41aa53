//! The replay report's own sections: fidelity, and per group the capture beside the target
//! (count, errors with the target's new error messages, rows, service-time quantiles).

use std::collections::BTreeMap;
use std::io::{self, Write};

use aggregate::{Aggregator, Stats};
use replay::Fidelity;
use serde::Serialize;

/// One side of one group.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SideRow {
    pub count: u64,
    pub errors: u64,
    pub rows_sent: u64,
    pub rows_affected: u64,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// A group, capture beside target.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GroupRow {
    pub protocol: String,
    pub fingerprint: String,
    pub capture: SideRow,
    pub target: SideRow,
    /// Rows returned or affected per request differ between the sides ([`rows_differ`]).
    pub rows_mismatch: bool,
    /// Error messages the target gave that the capture's group never had.
    pub new_errors: Vec<String>,
}

fn side_row(s: &Stats) -> SideRow {
    let q = s.service.quantiles_ns([0.5, 0.95, 0.99]);
    let ms = |v: Option<u64>| v.map(|ns| ns as f64 / 1e6);
    SideRow {
        count: s.count,
        errors: s.errors,
        rows_sent: s.rows_sent.sum as u64,
        rows_affected: s.rows_affected.sum as u64,
        p50_ms: ms(q[0]),
        p95_ms: ms(q[1]),
        p99_ms: ms(q[2]),
    }
}

fn messages(s: &Stats) -> Vec<String> {
    s.errors_by_code
        .sorted()
        .iter()
        .map(|e| match &e.state {
            Some(st) => format!("{st} {}", e.message),
            None => e.message.to_string(),
        })
        .collect()
}

/// Every group of either side, by id.
pub fn group_rows(capture: &Aggregator, target: &Aggregator) -> BTreeMap<String, GroupRow> {
    let mut rows: BTreeMap<String, GroupRow> = BTreeMap::new();
    let mut cap_msgs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for g in capture.groups() {
        let r = rows.entry(g.id.clone()).or_default();
        r.protocol = g.key.protocol.name().to_string();
        r.fingerprint = g.fingerprint.clone();
        r.capture = side_row(&g.stats);
        cap_msgs.insert(g.id.clone(), messages(&g.stats));
    }
    for g in target.groups() {
        let r = rows.entry(g.id.clone()).or_default();
        r.protocol = g.key.protocol.name().to_string();
        r.fingerprint = g.fingerprint.clone();
        r.target = side_row(&g.stats);
        let known = cap_msgs.get(&g.id).cloned().unwrap_or_default();
        r.new_errors = messages(&g.stats)
            .into_iter()
            .filter(|m| !known.contains(m))
            .collect();
    }
    for r in rows.values_mut() {
        r.rows_mismatch = rows_differ(&r.capture, &r.target);
    }
    rows
}

/// Whether the sides' rows returned or affected per request differ. Per request, not in
/// total: `--scale`, `--sessions` and the filters change how many requests the target runs,
/// not what each answers. A group one side never ran has nothing to compare.
fn rows_differ(c: &SideRow, t: &SideRow) -> bool {
    if c.count == 0 || t.count == 0 {
        return false;
    }
    // a / c.count != b / t.count, without division
    let differ =
        |a: u64, b: u64| u128::from(a) * u128::from(t.count) != u128::from(b) * u128::from(c.count);
    differ(c.rows_sent, t.rows_sent) || differ(c.rows_affected, t.rows_affected)
}

/// The fidelity section.
pub fn fidelity_text(f: &Fidelity, w: &mut impl Write) -> io::Result<()> {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    writeln!(w, "# Replay fidelity")?;
    if let Some(fl) = &f.filters {
        writeln!(w, "# filters: {fl}")?;
    }
    writeln!(
        w,
        "# requests: captured {}, framed {}, planned {}, sent {} (in {} batches), replies {}",
        f.requests_captured,
        f.requests_framed,
        f.requests_planned,
        f.requests_sent,
        f.batches_sent,
        f.replies_received
    )?;
    writeln!(
        w,
        "# sessions: captured {}, replayed {}; target connections {}",
        f.sessions_captured, f.sessions_replayed, f.target_connections
    )?;
    for (k, v) in &f.skipped_requests {
        writeln!(w, "# skipped requests: {k} {v}")?;
    }
    for (k, v) in &f.skipped_bytes {
        writeln!(w, "# skipped bytes: {k} {v}")?;
    }
    writeln!(
        w,
        "# schedule lag ms: p50 {} p99 {} max {}",
        ms(f.lag_p50_ms),
        ms(f.lag_p99_ms),
        ms(f.lag_max_ms)
    )?;
    writeln!(
        w,
        "# wall time {:.3} s (capture span {:.3} s)",
        f.wall_s, f.capture_span_s
    )?;
    writeln!(w)
}

/// Per group: capture beside target.
pub fn groups_text(rows: &BTreeMap<String, GroupRow>, w: &mut impl Write) -> io::Result<()> {
    writeln!(
        w,
        "# Groups: capture | target (count, errors, rows, service p50/p95/p99 ms)"
    )?;
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let side = |s: &SideRow| {
        format!(
            "{} {} {} {}/{}/{}",
            s.count,
            s.errors,
            s.rows_sent + s.rows_affected,
            ms(s.p50_ms),
            ms(s.p95_ms),
            ms(s.p99_ms)
        )
    };
    for (id, r) in rows {
        let flag = if r.rows_mismatch { " ROWS DIFFER" } else { "" };
        writeln!(
            w,
            "{id} {} {}: {} | {}{flag}",
            r.protocol,
            r.fingerprint,
            side(&r.capture),
            side(&r.target)
        )?;
        for e in &r.new_errors {
            writeln!(w, "    new error on target: {e}")?;
        }
    }
    writeln!(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(count: u64, rows_sent: u64, rows_affected: u64) -> SideRow {
        SideRow {
            count,
            rows_sent,
            rows_affected,
            ..SideRow::default()
        }
    }

    #[test]
    fn rows_are_compared_per_request() {
        // the same answers, each request run twice (--scale 2) or half of them (--sessions)
        assert!(!rows_differ(&side(10, 40, 5), &side(20, 80, 10)));
        assert!(!rows_differ(&side(10, 40, 0), &side(5, 20, 0)));
        // other answers: returned, affected
        assert!(rows_differ(&side(10, 40, 0), &side(10, 39, 0)));
        assert!(rows_differ(&side(10, 40, 5), &side(20, 80, 11)));
        // a group one side never ran (--read-only's writes)
        assert!(!rows_differ(&side(3, 0, 3), &side(0, 0, 0)));
        // no overflow at the extremes
        assert!(rows_differ(
            &side(u64::MAX, u64::MAX, 0),
            &side(u64::MAX, u64::MAX - 1, 0)
        ));
    }
}
