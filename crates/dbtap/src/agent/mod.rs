//! `dbtap live` and `dbtap top`: the offline pipeline fed by kernel capture rings.
//!
//! Threads:
//! - one capture worker per ring (`--threads`; the kernel spreads connections across the rings
//!   by flow hash, so both directions of a connection meet in one worker). A worker owns its
//!   [`Engine`](crate::pipeline::Engine) (reassembly, sessions, fingerprints) and a window
//!   [`Aggregator`]; nothing is shared on the packet path.
//! - the main thread ticks the interval: it bumps an epoch, every worker hands over its window
//!   (aggregator, per-server counters, cumulative health and ring statistics), and the main
//!   thread merges them into the interval lines and the snapshot (last window, since-start
//!   aggregate merged in place) that the HTTP endpoint reads; the full-screen view gets copies.
//!
//! Stop (SIGINT, SIGTERM, `--duration`, or `q` in top): workers close their connections (as the
//! end of a capture file does), hand over a last window, and the main thread prints the final
//! digest.
//!
//! With `--source ebpf` or `auto`, one more worker reads the eBPF tracer instead of a ring
//! (`ebpf`): socket streams (Unix sockets, TLS plaintext) through the same engine and window.
//!
//! Modules: [`setup`] turns the arguments into every stage's configuration, [`source`] picks
//! packets, eBPF or both, [`worker`] is the capture loop of one ring, [`merge`] merges the workers' reports and stops them, [`lines`]
//! prints the interval lines and the final digest, [`http`] serves the snapshot.

#[cfg(feature = "ebpf")]
mod ebpf;
mod fleet;
mod history;
mod http;
pub(crate) mod lines;
mod merge;
mod setup;
mod source;
mod webview;
pub(crate) mod worker;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aggregate::Aggregator;
use anyhow::{Context, Result};

use crate::cli::{CaptureArgs, LiveArgs, TopArgs};
use merge::{Interval, Merger, Snapshot};
use setup::Plan;

/// Shared between the main thread, the workers and the HTTP endpoint.
struct Control {
    epoch: AtomicU64,
    stop: Arc<AtomicBool>,
}

impl Control {
    /// True once per epoch bump: a worker's interval ended and its window is due.
    fn interval_ended(&self, seen: &mut u64) -> bool {
        let epoch = self.epoch.load(Ordering::Acquire);
        let ended = epoch != *seen;
        *seen = epoch;
        ended
    }
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the user interface of the run is: interval lines or the full-screen view.
enum Ui {
    Lines {
        args: Box<LiveArgs>,
    },
    Top {
        tx: Sender<top::Frame>,
        thread: std::thread::JoinHandle<std::io::Result<()>>,
    },
}

/// How the run shows itself: interval lines and a final digest, or the full-screen view.
enum Mode {
    Lines(Box<LiveArgs>),
    Top(top::SortBy),
}

pub fn live(args: LiveArgs) -> Result<()> {
    let c = args.capture.clone();
    run(&c, Mode::Lines(Box::new(args)))
}

pub fn top(args: TopArgs) -> Result<()> {
    if !std::io::stdout().is_terminal() {
        anyhow::bail!("dbtap top needs a terminal; use `dbtap live` for lines on a pipe");
    }
    let order = match args.order_by {
        crate::cli::OrderBy::Total => top::SortBy::Total,
        crate::cli::OrderBy::Count => top::SortBy::Count,
        crate::cli::OrderBy::P99 => top::SortBy::P99,
        crate::cli::OrderBy::Errors => top::SortBy::Errors,
        crate::cli::OrderBy::Response => top::SortBy::Response,
    };
    run(&args.capture, Mode::Top(order))
}

fn run(c: &CaptureArgs, mode: Mode) -> Result<()> {
    let (mut plan, rings) = Plan::new(c, &mode)?;
    let (fleet_tx, fleet_thread) = fleet::start(&mode, &mut plan)?;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handler")?;
    }
    let ctl = Arc::new(Control {
        epoch: AtomicU64::new(0),
        stop: Arc::clone(&stop),
    });
    let (tx, rx) = std::sync::mpsc::channel::<worker::WorkerReport>();
    let files = crate::rotate::SharedFiles::default();
    // The tracer first: in `auto` the packet workers then know to leave TLS to it.
    let chosen = source::start(c, &mut plan, rings.len(), &ctl, &tx, &files)?;
    plan.source_label = match (source::wants_packets(c), chosen.handle.is_some()) {
        (true, true) => format!("{} + ebpf", c.interface),
        (true, false) => c.interface.clone(),
        (false, _) => "ebpf".to_string(),
    };
    let mut handles = worker::spawn(c, &plan, rings, &ctl, &tx, &files)?;
    handles.extend(chosen.handle);
    drop(tx);
    let workers = handles.len();

    let snap = Arc::new(Mutex::new(Snapshot::new(&plan.agg_cfg, plan.started)));
    let server = http::serve(c, &snap, &plan)?;
    let writer = match &plan.store {
        Some(s) => Some(history::spawn(Arc::clone(s), plan.sample)?),
        None => None,
    };
    let (store_tx, store_thread) = writer.unzip();

    let ui = match mode {
        Mode::Top(order) => {
            let (ftx, frx) = std::sync::mpsc::channel();
            let stop2 = Arc::clone(&stop);
            let thread = std::thread::Builder::new()
                .name("dbtap-top".into())
                .spawn(move || top::run(frx, stop2, order))
                .context("starting the terminal view")?;
            Ui::Top { tx: ftx, thread }
        }
        Mode::Lines(args) => Ui::Lines { args },
    };

    // The interval lines print local times (TZ, else /etc/localtime; UTC if neither is known).
    let tz = jiff::tz::TimeZone::system();
    if matches!(ui, Ui::Lines { .. }) {
        if source::wants_packets(c) {
            lines::startup(c, &plan, server.as_ref(), &tz);
            // What else the run reads (`auto`), after the start line that scripts read first.
            if let Some(line) = &chosen.line {
                eprintln!("dbtap: {line}");
            }
        } else {
            let line = chosen.line.as_deref().unwrap_or_default();
            lines::startup_ebpf(line, server.as_ref(), &tz);
        }
    }
    let mut merger = Merger::new(rx, workers, plan.agg_cfg.clone(), store_tx);
    merger.fleet_tx = fleet_tx;
    let mut lines = lines::Lines::new(tz, plan.sample);
    intervals(c, &plan, &ctl, &snap, &mut merger, &ui, &mut lines)?;

    // Stop: every worker hands over its last window and closes its connections.
    stop.store(true, Ordering::Release);
    // A worker may still hand over an ordinary window before its last one: merge every report
    // until each worker has sent its last (or a worker hangs for longer than the deadline).
    let give_up = Instant::now() + Duration::from_secs(10);
    // The endpoint goes first: it must not see the since-start aggregate taken out below.
    if let Some(s) = server {
        s.stop();
    }
    let (total, health) = merger.finish(&snap, handles, give_up, c);
    // The merger's sender is gone: the writer writes what is pending and ends.
    if let Some(t) = store_thread {
        let _ = t.join();
    }
    if let Some(t) = fleet_thread {
        let _ = t.join();
    }
    match ui {
        Ui::Top { tx, thread } => {
            drop(tx);
            match thread.join() {
                Ok(r) => r.context("terminal view")?,
                Err(_) => anyhow::bail!("the terminal view failed"),
            }
            Ok(())
        }
        Ui::Lines { args } => {
            let quiet_lines = args.interval.is_zero();
            lines::final_digest(&args, total, &health, quiet_lines, plan.sample)
        }
    }
}

/// The main thread until stop: every tick, bumps the epoch, merges the workers' windows into
/// the snapshot, and shows the interval (lines, or a frame of the full-screen view).
fn intervals(
    c: &CaptureArgs,
    plan: &Plan,
    ctl: &Control,
    snap: &Mutex<Snapshot>,
    merger: &mut Merger,
    ui: &Ui,
    lines: &mut lines::Lines,
) -> Result<()> {
    let stop = &ctl.stop;
    let (tick, sample) = (plan.tick, plan.sample);
    let quiet_lines = matches!(ui, Ui::Lines { args } if args.interval.is_zero());
    let stdout = std::io::stdout();
    let mut last_tick = Instant::now();
    let mut last_drops = 0u64;
    let mut next_tick = plan.start_instant + tick;
    let deadline = c.duration.map(|d| plan.start_instant + d);

    loop {
        let now = Instant::now();
        let stopping = stop.load(Ordering::Acquire)
            || deadline.is_some_and(|d| now >= d)
            || !merger.any_alive();
        if stopping {
            break;
        }
        if now < next_tick {
            let wake = deadline.map_or(next_tick, |d| d.min(next_tick));
            std::thread::sleep(
                wake.saturating_duration_since(now)
                    .min(Duration::from_millis(100)),
            );
            continue;
        }
        next_tick += tick;
        if next_tick < now {
            next_tick = now + tick;
        }
        ctl.epoch.fetch_add(1, Ordering::AcqRel);
        let mut iv = merger.collect();
        let secs = last_tick.elapsed().as_secs_f64();
        last_tick = Instant::now();
        let end_ns = unix_ns(SystemTime::now());
        if let Some(v) = &plan.live_view {
            v.update(&iv, secs, end_ns, iv.ring.drops.saturating_sub(last_drops));
        }
        let views = matches!(ui, Ui::Top { .. });
        let top_views = merge::publish(snap, &mut iv, secs, end_ns, views, sample, c);
        merger.print_errors();
        match ui {
            Ui::Lines { args } if !quiet_lines => {
                let drops = iv.ring.drops.saturating_sub(last_drops);
                lines.print(&mut stdout.lock(), args, &iv, drops, secs, end_ns)?;
            }
            Ui::Top { tx, .. } => {
                let Some(views) = top_views else {
                    continue;
                };
                let frame = top_frame(plan, &iv, secs, sample, views);
                if tx.send(frame).is_err() {
                    stop.store(true, Ordering::Release);
                }
            }
            _ => {}
        }
        last_drops = iv.ring.drops;
    }
    Ok(())
}

/// A frame of the full-screen view: the interval's window and the since-start aggregate (both
/// already scaled), with the header and the status line.
fn top_frame(
    plan: &Plan,
    iv: &Interval,
    secs: f64,
    sample: u64,
    (window, tot): (Aggregator, Aggregator),
) -> top::Frame {
    // Scaled like every count when sampling (the header says estimates).
    let pkts: u64 = sample
        * iv.servers
            .values()
            .map(|s| s.pkts_in + s.pkts_out)
            .sum::<u64>();
    let b_in: u64 = sample * iv.servers.values().map(|s| s.bytes_in).sum::<u64>();
    let b_out: u64 = sample * iv.servers.values().map(|s| s.bytes_out).sum::<u64>();
    let up = plan.start_instant.elapsed().as_secs();
    top::Frame {
        header: format!(
            "dbtap top - {} - up {:02}:{:02}:{:02}{}",
            plan.source_label,
            up / 3600,
            (up / 60) % 60,
            up % 60,
            if sample > 1 {
                format!(" - 1 in {sample} connections sampled (estimates)")
            } else {
                String::new()
            }
        ),
        status: format!(
            "{:.0} pkt/s  in {:.2} Mbit/s  out {:.2} Mbit/s  drops {}  conns {}",
            pkts as f64 / secs.max(1e-9),
            b_in as f64 * 8.0 / 1e6 / secs.max(1e-9),
            b_out as f64 * 8.0 / 1e6 / secs.max(1e-9),
            iv.ring.drops,
            iv.open_connections
        ),
        window,
        window_secs: secs,
        total: tot,
        total_secs: plan.start_instant.elapsed().as_secs_f64(),
    }
}
