//! The main thread's side of the workers: merging their interval reports into one interval and
//! the snapshot the endpoint reads, and the stop (every worker's last window merged).

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use aggregate::{AggConfig, Aggregator};
use report::CaptureHealth;

use super::unix_ns;
use super::worker::WorkerReport;
use crate::cli::CaptureArgs;

/// What the HTTP endpoint and the full-screen view read: refreshed every interval.
pub(super) struct Snapshot {
    pub(super) window: Aggregator,
    pub(super) window_secs: f64,
    pub(super) window_end_ns: u64,
    pub(super) total: Aggregator,
    pub(super) health: CaptureHealth,
    pub(super) kernel: live::RingStats,
    /// The packet reader's longest pause during the last interval (any worker), ns.
    pub(super) pause_ns: u64,
}

impl Snapshot {
    /// Empty, as at the start of the run.
    pub(super) fn new(agg_cfg: &AggConfig, started: SystemTime) -> Snapshot {
        Snapshot {
            window: Aggregator::new(agg_cfg.clone()),
            window_secs: 0.0,
            window_end_ns: unix_ns(started),
            total: Aggregator::new(agg_cfg.clone()),
            health: CaptureHealth::default(),
            kernel: live::RingStats::default(),
            pause_ns: 0,
        }
    }
}

/// Merged state of one interval.
pub(super) struct Interval {
    pub(super) window: Aggregator,
    pub(super) servers: super::worker::ServerMap,
    pub(super) health: CaptureHealth,
    pub(super) ring: live::RingStats,
    /// The packet reader's longest pause during the interval (any worker), ns.
    pub(super) pause_ns: u64,
    pub(super) open_connections: usize,
    /// The workers' minute bins of the interval (history store), not yet merged.
    pub(super) minutes: Vec<(i64, Aggregator)>,
}

/// The workers as the main thread sees them: which still run, the latest cumulative health and
/// ring statistics of each, and the errors not yet printed.
pub(super) struct Merger {
    rx: Receiver<WorkerReport>,
    alive: Vec<bool>,
    latest: Vec<Option<(CaptureHealth, live::RingStats)>>,
    errors: Vec<String>,
    agg_cfg: AggConfig,
    /// The history store's writer thread: every interval's minute bins go there.
    store_tx: Option<super::history::MinutesTx>,
    /// `--clickhouse`: the sink's feeder gets them too (`agent/fleet.rs`).
    pub(super) fleet_tx: Option<super::history::MinutesTx>,
}

impl Merger {
    pub(super) fn new(
        rx: Receiver<WorkerReport>,
        threads: usize,
        agg_cfg: AggConfig,
        store_tx: Option<super::history::MinutesTx>,
    ) -> Merger {
        Merger {
            rx,
            alive: vec![true; threads],
            latest: vec![None; threads],
            errors: Vec::new(),
            agg_cfg,
            store_tx,
            fleet_tx: None,
        }
    }

    pub(super) fn any_alive(&self) -> bool {
        self.alive.iter().any(|a| *a)
    }

    /// One report per worker still running, merged.
    /// Their minute bins go to the store's writer.
    pub(super) fn collect(&mut self) -> Interval {
        let mut iv = collect(
            &self.rx,
            &mut self.alive,
            &mut self.latest,
            &self.agg_cfg,
            &mut self.errors,
        );
        if let Some(tx) = &self.fleet_tx
            && !iv.minutes.is_empty()
        {
            let minutes = match self.store_tx {
                Some(_) => iv.minutes.clone(),
                None => std::mem::take(&mut iv.minutes),
            };
            let _ = tx.send(minutes);
        }
        if let Some(tx) = &self.store_tx
            && !iv.minutes.is_empty()
        {
            // A writer that is gone said why already.
            let _ = tx.send(std::mem::take(&mut iv.minutes));
        }
        iv
    }

    pub(super) fn print_errors(&mut self) {
        for e in self.errors.drain(..) {
            eprintln!("dbtap: error: {e}");
        }
    }

    /// After the workers were told to stop: merges every report until each worker has sent
    /// its last (or `give_up` passed), joins the workers, and returns the since-start aggregate
    /// and the run's health.
    pub(super) fn finish(
        mut self,
        snap: &Mutex<Snapshot>,
        handles: Vec<JoinHandle<()>>,
        give_up: Instant,
        c: &CaptureArgs,
    ) -> (Aggregator, CaptureHealth) {
        let fresh = Aggregator::new(self.agg_cfg.clone());
        let mut total = std::mem::replace(&mut lock(snap).total, fresh);
        let mut iv = self.collect();
        total.merge(&iv.window);
        while self.any_alive() && Instant::now() < give_up {
            iv = self.collect();
            total.merge(&iv.window);
        }
        if self.any_alive() {
            self.errors
                .push("a capture thread did not stop in time; its last events are missing".into());
        } else {
            for h in handles {
                let _ = h.join();
            }
        }
        self.print_errors();
        let health = live_health(iv.health, &iv.ring, &total, c);
        (total, health)
    }
}

/// Collects one report per live worker. Workers that stopped (error) are removed from `alive`.
fn collect(
    rx: &Receiver<WorkerReport>,
    alive: &mut [bool],
    latest: &mut [Option<(CaptureHealth, live::RingStats)>],
    cfg: &AggConfig,
    errors: &mut Vec<String>,
) -> Interval {
    let mut out = Interval {
        window: Aggregator::new(cfg.clone()),
        servers: Default::default(),
        health: CaptureHealth::default(),
        ring: live::RingStats::default(),
        pause_ns: 0,
        open_connections: 0,
        minutes: Vec::new(),
    };
    let mut got = vec![false; alive.len()];
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive.iter().zip(&got).any(|(a, g)| *a && !*g) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => {
                let i = r.worker;
                got[i] = true;
                out.window.merge(&r.window);
                for (k, v) in r.servers {
                    out.servers.entry(k).or_default().merge(&v);
                }
                out.open_connections += r.open_connections;
                out.pause_ns = out.pause_ns.max(r.pause_ns);
                out.minutes.extend(r.minutes);
                latest[i] = Some((r.health, r.ring));
                if let Some(e) = r.error {
                    errors.push(format!("capture thread {i}: {e}"));
                }
                if r.last {
                    alive[i] = false;
                }
            }
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => {
                // Every worker is gone; one that never sent its last report died.
                for (i, a) in alive.iter_mut().enumerate() {
                    if *a {
                        *a = false;
                        errors.push(format!(
                            "capture thread {i} ended unexpectedly; its last events are missing"
                        ));
                    }
                }
                break;
            }
        }
    }
    for (h, r) in latest.iter().flatten() {
        out.health.add(h);
        out.ring.packets += r.packets;
        out.ring.drops += r.drops;
        out.ring.freeze_q += r.freeze_q;
        out.ring.resyncs += r.resyncs;
        out.ring.pause_max_ns = out.ring.pause_max_ns.max(r.pause_max_ns);
        out.ring.long_pauses += r.long_pauses;
        out.ring.ring_bytes += r.ring_bytes;
        out.ring.growths += r.growths;
        out.ring.handover_duplicates += r.handover_duplicates;
    }
    out
}

/// Moves an interval's window into the snapshot and merges it into the since-start aggregate.
/// With `views` (the full-screen view), returns copies of the window and the since-start
/// aggregate scaled by `sample`.
pub(super) fn publish(
    snap: &Mutex<Snapshot>,
    iv: &mut Interval,
    secs: f64,
    end_ns: u64,
    views: bool,
    sample: u64,
    c: &CaptureArgs,
) -> Option<(Aggregator, Aggregator)> {
    // The since-start aggregate lives in the snapshot only: merged in place under the
    // lock, never copied (but for the full-screen view, which runs on its own thread).
    let mut s = lock(snap);
    s.total.merge(&iv.window);
    s.health = live_health(iv.health.clone(), &iv.ring, &s.total, c);
    s.window_secs = secs;
    s.window_end_ns = end_ns;
    s.kernel = iv.ring;
    s.pause_ns = iv.pause_ns;
    let views = views.then(|| {
        let (mut window, mut total) = (iv.window.clone(), s.total.clone());
        window.scale(sample);
        total.scale(sample);
        (window, total)
    });
    // The interval's window moves into the snapshot (the previous one leaves with `iv`).
    std::mem::swap(&mut s.window, &mut iv.window);
    views
}

/// The snapshot, also after a thread panicked while holding it (its data is counters only).
pub(super) fn lock(snap: &Mutex<Snapshot>) -> std::sync::MutexGuard<'_, Snapshot> {
    snap.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The health of a live run: the pipeline's counters plus the kernel's drops, the sampling, and
/// the requests never answered (counted by the since-start aggregate, before any scaling).
fn live_health(
    mut h: CaptureHealth,
    ring: &live::RingStats,
    total: &Aggregator,
    c: &CaptureArgs,
) -> CaptureHealth {
    h.protocol.unanswered = total.totals().stats.no_response;
    // `live:lo`, and `live:ebpf` for the eBPF source's streams.
    h.files = if h.files.is_empty() {
        vec![format!("live:{}", c.interface)]
    } else {
        h.files.iter().map(|f| format!("live:{f}")).collect()
    };
    if ring.resyncs > 0 {
        h.warnings.push(format!(
            "the capture ring lost its place {} time(s) and skipped ahead to the oldest ready \
             block; please report this",
            ring.resyncs
        ));
    }
    h.live = Some(report::LiveHealth {
        kernel_drops: ring.drops,
        sampled_one_in: c.sample.max(1),
        reader_pause_max_ms: ring.pause_max_ns / 1_000_000,
        reader_long_pauses: ring.long_pauses,
        ring_mb: ring.ring_bytes >> 20,
        ring_growths: ring.growths,
    });
    h
}
