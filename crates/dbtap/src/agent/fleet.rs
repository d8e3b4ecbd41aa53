//! `live --clickhouse`: the sink's feeder thread. The merger sends it every interval's minute
//! bins (as it sends them to the history store's writer); it merges them per minute
//! (`storefeed::Pending`) and hands what it holds to the sink as soon as it holds a minute
//! that has ended, and every `--clickhouse-interval` (5 s) otherwise (the current minute
//! included, so a minute may reach ClickHouse in parts: every query sums rows). The sink
//! spools and sends on its own thread; at stop the rest is delivered within
//! `--clickhouse-wait` or left in the spool.

use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;

use aggregate::Aggregator;
use anyhow::{Context, Result};

use super::history::MinutesTx;
use crate::fleet::{ClickHouseArgs, Fleet};
use crate::storefeed::feed_minutes;

/// The running feeder.
struct FleetThread {
    tx: MinutesTx,
    handle: JoinHandle<()>,
    stats: Arc<clickhouse::SinkStats>,
}

/// `live --clickhouse`: starts the sink and its feeder, and gives the plan its counters.
pub(super) fn start(
    mode: &super::Mode,
    plan: &mut super::setup::Plan,
) -> Result<(Option<MinutesTx>, Option<JoinHandle<()>>)> {
    let fleet = match mode {
        super::Mode::Lines(a) => spawn(&a.clickhouse, plan.sample)?,
        super::Mode::Top(_) => None,
    };
    plan.fleet = fleet.as_ref().map(|f| Arc::clone(&f.stats));
    Ok(fleet.map(|f| (f.tx, f.handle)).unzip())
}

/// Starts the sink and its feeder when `--clickhouse` is given; the feeder ends (delivering
/// what is pending) when every sender is gone.
fn spawn(args: &ClickHouseArgs, sample: u64) -> Result<Option<FleetThread>> {
    let Some(fleet) = args.open(sample)? else {
        return Ok(None);
    };
    let stats = fleet.stats();
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("dbtap-fleet".into())
        .spawn(move || feeder(&rx, fleet))
        .context("starting the ClickHouse feeder")?;
    Ok(Some(FleetThread { tx, handle, stats }))
}

fn feeder(rx: &Receiver<Vec<(i64, Aggregator)>>, mut fleet: Fleet) {
    let every = fleet.interval;
    feed_minutes(rx, every, |minutes| fleet.send(minutes));
    fleet.finish();
}

/// The sink's counters in the Prometheus text format (appended to `/metrics`).
pub(super) fn metrics(s: &clickhouse::SinkStats, out: &mut String) {
    use std::fmt::Write;
    let s = s.snapshot();
    let counters = [
        ("rows_sent", s.rows_sent, "Rows ClickHouse confirmed."),
        (
            "batches_sent",
            s.batches_sent,
            "Batches ClickHouse confirmed.",
        ),
        (
            "retries",
            s.retries,
            "Failed attempts, each followed by a backoff.",
        ),
        (
            "already_stored",
            s.already_stored,
            "Batches found stored after an unknown outcome (not sent again).",
        ),
        (
            "partial",
            s.partial,
            "Batches the server held only in part (not sent again).",
        ),
        (
            "dropped_batches",
            s.dropped_batches,
            "Batches dropped because the spool was full.",
        ),
        (
            "dropped_rows",
            s.dropped_rows,
            "Rows of the dropped batches.",
        ),
        (
            "corrupt_spool_files",
            s.corrupt,
            "Spool files that did not read back (removed).",
        ),
    ];
    for (name, v, help) in counters {
        let _ = writeln!(
            out,
            "# HELP dbtap_clickhouse_{name}_total {help}\n# TYPE dbtap_clickhouse_{name}_total counter\ndbtap_clickhouse_{name}_total {v}"
        );
    }
    for (name, v, help) in [
        (
            "spooled_batches",
            s.spooled_batches,
            "Batches waiting in the spool.",
        ),
        (
            "spooled_bytes",
            s.spooled_bytes,
            "Bytes waiting in the spool.",
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP dbtap_clickhouse_{name} {help}\n# TYPE dbtap_clickhouse_{name} gauge\ndbtap_clickhouse_{name} {v}"
        );
    }
}
