//! `dbtap live` and `dbtap top`: the offline pipeline fed by kernel capture rings.
//!
//! Threads:
//! - one capture worker per ring (`--threads`; the kernel spreads connections across the rings
//!   by flow hash, so both directions of a connection meet in one worker). A worker owns its
//!   [`Engine`] (reassembly, sessions, fingerprints) and a window [`Aggregator`]; nothing is
//!   shared on the packet path.
//! - the main thread ticks the interval: it bumps an epoch, every worker hands over its window
//!   (aggregator, per-server counters, cumulative health and ring statistics), and the main
//!   thread merges them into the interval lines and the snapshot (last window, since-start
//!   aggregate merged in place) that the HTTP endpoint reads; the full-screen view gets copies.
//!
//! Stop (SIGINT, SIGTERM, `--duration`, or `q` in top): workers close their connections (as the
//! end of a capture file does), hand over a last window, and the main thread prints the final
//! digest.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aggregate::{AggConfig, Aggregator, Latency};
use anyhow::{Context, Result};
use flow::FlowConfig;
use proto::{Outcome, QueryEvent};
use report::{CaptureHealth, ReportOptions};

use crate::cli::{CaptureArgs, DigestFormat, Field, LiveArgs, TopArgs};
use crate::fp::Fingerprinter;
use crate::pipeline::{Consumer, Engine, Settings};
use crate::rotate::{Limits, Rotator, SharedFiles};

/// Link type of the frames the ring hands over: they start at the IP header.
const LINKTYPE_RAW: u32 = 101;
/// Most servers with their own interval line; the rest are summed under `other`.
const MAX_SERVERS: usize = 256;
/// How long a worker waits in the kernel for packets before it looks at the clock and the
/// epoch again.
const POLL: Duration = Duration::from_millis(50);

/// Per-server counters of one interval.
#[derive(Default, Clone)]
struct ServerWindow {
    count: u64,
    errors: u64,
    latency: Latency,
    pkts_in: u64,
    pkts_out: u64,
    bytes_in: u64,
    bytes_out: u64,
}

impl ServerWindow {
    fn merge(&mut self, o: &ServerWindow) {
        self.count += o.count;
        self.errors += o.errors;
        self.latency.merge(&o.latency);
        self.pkts_in += o.pkts_in;
        self.pkts_out += o.pkts_out;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
    }
}

/// The address interval lines sum servers under once [`MAX_SERVERS`] are tracked.
fn other_server() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

/// Which endpoints are servers: by port, or by exact address.
#[derive(Clone)]
struct ServerMatch {
    ports: Vec<u16>,
    addrs: Vec<SocketAddr>,
}

impl ServerMatch {
    fn is_server(&self, a: &SocketAddr) -> bool {
        self.ports.contains(&a.port()) || self.addrs.contains(a)
    }
}

/// A capture worker's consumer: fingerprints and aggregates into the current window.
struct LiveConsumer {
    fp: Fingerprinter,
    agg_cfg: AggConfig,
    window: Aggregator,
    servers: HashMap<SocketAddr, ServerWindow>,
    matcher: ServerMatch,
}

impl LiveConsumer {
    fn server(&mut self, a: SocketAddr) -> &mut ServerWindow {
        let key = if self.servers.len() >= MAX_SERVERS && !self.servers.contains_key(&a) {
            other_server()
        } else {
            a
        };
        self.servers.entry(key).or_default()
    }

    fn take_window(&mut self) -> (Aggregator, HashMap<SocketAddr, ServerWindow>) {
        (
            std::mem::replace(&mut self.window, Aggregator::new(self.agg_cfg.clone())),
            std::mem::take(&mut self.servers),
        )
    }
}

impl Consumer for LiveConsumer {
    fn event(&mut self, ev: QueryEvent) {
        let s = self.server(ev.server);
        s.count += 1;
        if ev.outcome == Outcome::Error || ev.error.is_some() {
            s.errors += 1;
        }
        if let Some(l) = ev.latency_ns() {
            s.latency.record(l);
        }
        self.fp.add_to(&mut self.window, &ev);
    }

    fn segment(&mut self, src: SocketAddr, dst: SocketAddr, frame_len: usize) {
        if self.matcher.is_server(&dst) {
            let s = self.server(dst);
            s.pkts_in += 1;
            s.bytes_in += frame_len as u64;
        } else if self.matcher.is_server(&src) {
            let s = self.server(src);
            s.pkts_out += 1;
            s.bytes_out += frame_len as u64;
        }
    }
}

/// What a worker hands over at the end of an interval (and a last time when it stops).
struct WorkerReport {
    worker: usize,
    window: Aggregator,
    servers: HashMap<SocketAddr, ServerWindow>,
    /// Cumulative since start.
    health: CaptureHealth,
    /// Cumulative since start.
    ring: live::RingStats,
    open_connections: usize,
    error: Option<String>,
    last: bool,
}

/// Shared between the main thread, the workers and the HTTP endpoint.
struct Control {
    epoch: AtomicU64,
    stop: Arc<AtomicBool>,
}

/// What the HTTP endpoint and the full-screen view read: refreshed every interval.
struct Snapshot {
    window: Aggregator,
    window_secs: f64,
    window_end_ns: u64,
    total: Aggregator,
    health: CaptureHealth,
    kernel: live::RingStats,
}

struct LiveSetup {
    sample: u32,
    threads: usize,
    started: SystemTime,
    report_opts: ReportOptions,
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn settings(c: &CaptureArgs) -> Settings {
    Settings::new(&c.ports, &c.servers, false)
}

/// The kernel filter: TCP to and from the server ports and addresses, 1 connection in
/// `--sample`, loopback packets once, ANDed with `--filter`.
fn kernel_filter(c: &CaptureArgs, s: &Settings) -> Result<Vec<live::bpf::Insn>> {
    let spec = live::bpf::FilterSpec {
        ports: s.ports.iter().map(|(p, _)| *p).collect(),
        servers: c.servers.clone(),
        sample: c.sample.max(1),
        loopback_ifindex: live::interface_index("lo").ok(),
    };
    let base = live::bpf::servers_filter(&spec);
    match &c.filter {
        None => Ok(base),
        Some(expr) => {
            let user = live::bpf::compile_expr(expr)?;
            Ok(live::bpf::and(&base, &user)?)
        }
    }
}

/// Opens the rings; the most common failure (no CAP_NET_RAW) is a one-line error.
fn open_rings(c: &CaptureArgs, filter: &[live::bpf::Insn]) -> Result<Vec<live::Ring>> {
    let threads = c.threads.clamp(1, 64);
    let block_size: u32 = 1 << 20;
    let cfg = live::RingConfig {
        interface: c.interface.clone(),
        block_size,
        block_count: (c.ring_mb.max(2) * (1 << 20) / block_size).max(2),
        retire_ms: 20,
        fanout_group: (threads > 1).then(|| (std::process::id() & 0xffff) as u16),
    };
    Ok(live::open_group(&cfg, filter, threads)?)
}

/// The `--write` file set of a worker, which stops writing (and says why, once) at the first
/// error rather than failing the capture.
struct Writer {
    rotator: Option<Rotator>,
    error: Option<String>,
}

impl Writer {
    fn write(&mut self, p: &live::Packet<'_>) {
        if let Some(w) = &mut self.rotator
            && let Err(e) = w.write(p.ts_ns, p.data, p.wire_len)
        {
            self.error = Some(format!("--write stopped: {e}"));
            self.rotator = None;
        }
    }

    /// Flushes the current file (so a reader sees the interval's packets) and adds the reason
    /// writing stopped, if it did, to the health.
    fn annotate(&mut self, mut health: CaptureHealth) -> CaptureHealth {
        if let Some(w) = &mut self.rotator {
            let _ = w.flush();
        }
        if let Some(e) = &self.error {
            health.warnings.push(e.clone());
        }
        health
    }
}

/// One packet off the ring: into the pcap files (if any), then into the pipeline.
fn take_packet(
    p: &live::Packet<'_>,
    engine: &mut Engine<LiveConsumer>,
    w: &mut Writer,
    name: &str,
) {
    w.write(p);
    engine.frame(LINKTYPE_RAW, p.data, p.ts_ns, name);
}

/// One capture worker: ring → engine → window, until stopped.
fn worker(
    idx: usize,
    mut ring: live::Ring,
    mut engine: Engine<LiveConsumer>,
    rotator: Option<Rotator>,
    ctl: Arc<Control>,
    tx: Sender<WorkerReport>,
    name: String,
) {
    let mut seen_epoch = ctl.epoch.load(Ordering::Acquire);
    let mut idle_since = Instant::now();
    let mut writer = Writer {
        rotator,
        error: None,
    };
    let error = loop {
        let stop = ctl.stop.load(Ordering::Acquire);
        let polled = ring.poll(POLL, |p| take_packet(p, &mut engine, &mut writer, &name));
        let error = match polled {
            Ok(0) => {
                // No traffic: close connections idle for too long by the wall clock.
                if idle_since.elapsed() > Duration::from_secs(1) {
                    engine.expire(unix_ns(SystemTime::now()));
                    idle_since = Instant::now();
                }
                None
            }
            Ok(_) => {
                idle_since = Instant::now();
                None
            }
            Err(e) => Some(e.to_string()),
        };
        if stop || error.is_some() {
            break error;
        }
        let epoch = ctl.epoch.load(Ordering::Acquire);
        if epoch == seen_epoch {
            continue;
        }
        seen_epoch = epoch;
        let (window, servers) = engine.consumer_mut().take_window();
        let health = engine.health(vec![name.clone()], 0);
        let report = WorkerReport {
            worker: idx,
            window,
            servers,
            health: writer.annotate(health),
            ring: ring.stats().unwrap_or_default(),
            open_connections: engine.open_connections(),
            error: None,
            last: false,
        };
        if tx.send(report).is_err() {
            return;
        }
    };
    // Drain what the kernel still holds, then close every connection: their events join the
    // last window.
    let ring_stats = ring.stats().unwrap_or_default();
    let _ = ring.poll(Duration::ZERO, |p| {
        take_packet(p, &mut engine, &mut writer, &name)
    });
    let (mut consumer, health) = engine.finish(vec![name.clone()], 0);
    let (window, servers) = consumer.take_window();
    let health = writer.annotate(health);
    if let Some(w) = writer.rotator.take() {
        let _ = w.close();
    }
    let _ = tx.send(WorkerReport {
        worker: idx,
        window,
        servers,
        health,
        ring: ring_stats,
        open_connections: 0,
        error,
        last: true,
    });
}

/// Merged state of one interval.
struct Interval {
    window: Aggregator,
    servers: HashMap<SocketAddr, ServerWindow>,
    health: CaptureHealth,
    ring: live::RingStats,
    open_connections: usize,
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
        servers: HashMap::new(),
        health: CaptureHealth::default(),
        ring: live::RingStats::default(),
        open_connections: 0,
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
    }
    out
}

/// Column header and cell of an interval line field.
fn field_header(f: Field, sampled: bool) -> &'static str {
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
    }
}

fn field_width(f: Field) -> usize {
    match f {
        Field::Time => 8,
        Field::Server => 21,
        _ => 10,
    }
}

struct LineCtx<'a> {
    time: &'a str,
    secs: f64,
    sample: u64,
    drops: u64,
    conns: usize,
    /// No server has been seen yet: the one line shows "-" as its server.
    no_servers: bool,
}

fn field_cell(f: Field, server: &SocketAddr, w: &ServerWindow, c: &LineCtx<'_>) -> String {
    let us = |v: Option<u64>| v.map_or("-".to_string(), |ns| format!("{}", ns / 1000));
    let [p50, p95, p99] = w.latency.quantiles_ns([0.5, 0.95, 0.99]);
    // Counts of the sampled connections, scaled to the estimate for all of them.
    let per_s = |v: u64| (v * c.sample) as f64 / c.secs.max(1e-9);
    match f {
        Field::Time => c.time.to_string(),
        Field::Server if c.no_servers => "-".to_string(),
        Field::Server if *server == other_server() => "other".to_string(),
        Field::Server => server.to_string(),
        Field::Count => (w.count * c.sample).to_string(),
        Field::Qps => format!("{:.1}", per_s(w.count)),
        Field::Avg => us(w.latency.mean_ns().map(|m| m as u64)),
        Field::P50 => us(p50),
        Field::P95 => us(p95),
        Field::P99 => us(p99),
        Field::Max => us(w.latency.max_ns()),
        Field::Errors => (w.errors * c.sample).to_string(),
        Field::PktsIn => format!("{:.0}", per_s(w.pkts_in)),
        Field::PktsOut => format!("{:.0}", per_s(w.pkts_out)),
        Field::MbpsIn => format!("{:.2}", per_s(w.bytes_in) * 8.0 / 1e6),
        Field::MbpsOut => format!("{:.2}", per_s(w.bytes_out) * 8.0 / 1e6),
        Field::Drops => c.drops.to_string(),
        Field::Conns => c.conns.to_string(),
    }
}

fn write_row(out: &mut impl Write, cells: &[(String, usize)]) -> std::io::Result<()> {
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
fn clock(ns: u64, tz: &jiff::tz::TimeZone) -> String {
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

/// The HTTP endpoint's view of the snapshot.
struct HttpProvider {
    snap: Arc<Mutex<Snapshot>>,
    exporter: Mutex<metrics::prom::Exporter>,
    setup: Arc<LiveSetup>,
}

impl HttpProvider {
    fn json(&self, agg: &Aggregator, health: &CaptureHealth) -> Vec<u8> {
        let mut out = Vec::new();
        let sample = u64::from(self.setup.sample.max(1));
        let res = if sample > 1 {
            let mut scaled = agg.clone();
            scaled.scale(sample);
            report::json::render(&scaled, health, &self.setup.report_opts, &mut out)
        } else {
            report::json::render(agg, health, &self.setup.report_opts, &mut out)
        };
        if let Err(e) = res {
            out = format!("{{\"error\":\"{e}\"}}\n").into_bytes();
        }
        out
    }
}

impl metrics::http::Provider for HttpProvider {
    fn metrics(&self) -> String {
        let mut out = String::new();
        let (agent_start, threads) = (
            unix_ns(self.setup.started) as f64 / 1e9,
            self.setup.threads as u32,
        );
        let agent = metrics::prom::AgentInfo::read_self(agent_start, threads);
        if let (Ok(snap), Ok(mut exp)) = (self.snap.lock(), self.exporter.lock()) {
            let kernel = metrics::prom::KernelStats {
                packets: snap.kernel.packets,
                drops: snap.kernel.drops,
            };
            exp.render(
                &snap.total,
                &snap.health,
                kernel,
                &agent,
                self.setup.sample.max(1),
                &mut out,
            );
        }
        out
    }

    fn digest_json(&self, window: metrics::http::Window) -> Vec<u8> {
        let Ok(snap) = self.snap.lock() else {
            return b"{\"error\":\"snapshot unavailable\"}\n".to_vec();
        };
        match window {
            metrics::http::Window::Total => self.json(&snap.total, &snap.health),
            metrics::http::Window::Current => {
                // The window's own span, so rates are per second of that window.
                let mut h = snap.health.clone();
                let secs = (snap.window_secs * 1e9) as u64;
                h.first_ts_ns = Some(snap.window_end_ns.saturating_sub(secs));
                h.last_ts_ns = Some(snap.window_end_ns);
                self.json(&snap.window, &h)
            }
        }
    }
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
    };
    run(&args.capture, Mode::Top(order))
}

fn run(c: &CaptureArgs, mode: Mode) -> Result<()> {
    if c.sample == 0 {
        anyhow::bail!("--sample must be 1 or more");
    }
    let settings = settings(c);
    let filter = kernel_filter(c, &settings)?;
    let rings = open_rings(c, &filter)?;
    let threads = rings.len();
    let started = SystemTime::now();
    let start_instant = Instant::now();
    let (interval, lines_args) = match &mode {
        Mode::Lines(args) => (args.interval, Some(args)),
        Mode::Top(_) => (Duration::from_secs(1), None),
    };
    let tick = if interval.is_zero() {
        Duration::from_secs(1)
    } else {
        interval
    };
    let keep_examples = lines_args.is_none_or(|a| !a.report.no_examples);
    let agg_cfg = AggConfig {
        keep_examples,
        ..AggConfig::default()
    };
    let report_opts = lines_args.map_or_else(ReportOptions::default, |a| a.report.options());
    let setup = Arc::new(LiveSetup {
        sample: c.sample.max(1),
        threads,
        started,
        report_opts,
    });

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handler")?;
    }
    let ctl = Arc::new(Control {
        epoch: AtomicU64::new(0),
        stop: Arc::clone(&stop),
    });

    // Live capture keeps fewer connections and less out-of-order data than a file digest: it
    // runs for days on a busy host and must stay small whatever the traffic.
    let flow_cfg = FlowConfig {
        max_flows: 200_000 / threads.max(1),
        max_buffer_total: (256 << 20) / threads.max(1),
        ..FlowConfig::default()
    };
    let matcher = ServerMatch {
        ports: settings.ports.iter().map(|(p, _)| *p).collect(),
        addrs: settings.servers.clone(),
    };
    let (tx, rx) = std::sync::mpsc::channel::<WorkerReport>();
    let mut handles = Vec::new();
    let start_s = unix_ns(started) / 1_000_000_000;
    let pcap_files = SharedFiles::default();
    for (i, ring) in rings.into_iter().enumerate() {
        let consumer = LiveConsumer {
            fp: Fingerprinter::from_args(&c.grouping),
            agg_cfg: agg_cfg.clone(),
            window: Aggregator::new(agg_cfg.clone()),
            servers: HashMap::new(),
            matcher: matcher.clone(),
        };
        // Sessions are not Send: each worker builds its engine on its own thread.
        let (settings, flow_cfg) = (settings.clone(), flow_cfg.clone());
        let writer = match &c.write {
            Some(dir) => Some(Rotator::new(
                dir,
                i,
                start_s,
                Limits {
                    max_bytes: c.write_mb.max(1) << 20,
                    max_age_ns: c.write_every.map(|d| d.as_nanos() as u64),
                    keep: c.write_files.max(1),
                },
                Arc::clone(&pcap_files),
            )?),
            None => None,
        };
        let (ctl, tx) = (Arc::clone(&ctl), tx.clone());
        let name = c.interface.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("dbtap-capture-{i}"))
                .spawn(move || {
                    let engine = Engine::new(&settings, flow_cfg, consumer);
                    worker(i, ring, engine, writer, ctl, tx, name)
                })
                .context("starting a capture thread")?,
        );
    }
    drop(tx);

    let snap = Arc::new(Mutex::new(Snapshot {
        window: Aggregator::new(agg_cfg.clone()),
        window_secs: 0.0,
        window_end_ns: unix_ns(started),
        total: Aggregator::new(agg_cfg.clone()),
        health: CaptureHealth::default(),
        kernel: live::RingStats::default(),
    }));
    let server = match c.listen {
        Some(addr) => {
            let provider = Arc::new(HttpProvider {
                snap: Arc::clone(&snap),
                exporter: Mutex::new(metrics::prom::Exporter::new(c.metrics_top)),
                setup: Arc::clone(&setup),
            });
            Some(metrics::http::serve(addr, provider)?)
        }
        None => None,
    };

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
    let quiet_lines = matches!(&ui, Ui::Lines { args } if args.interval.is_zero());
    if matches!(ui, Ui::Lines { .. }) {
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
                .as_ref()
                .map(|s| format!(", metrics on http://{}/metrics", s.local_addr()))
                .unwrap_or_default(),
            zone_label(&tz),
        );
    }

    let stdout = std::io::stdout();
    let mut alive = vec![true; threads];
    let mut latest: Vec<Option<(CaptureHealth, live::RingStats)>> = vec![None; threads];
    let mut errors = Vec::new();
    let mut known_servers: Vec<SocketAddr> = Vec::new();
    let mut printed_header = false;
    let mut last_tick = Instant::now();
    let mut last_drops = 0u64;
    let mut next_tick = start_instant + tick;
    let deadline = c.duration.map(|d| start_instant + d);
    let sample = u64::from(c.sample.max(1));

    loop {
        let now = Instant::now();
        let stopping = stop.load(Ordering::Acquire)
            || deadline.is_some_and(|d| now >= d)
            || !alive.iter().any(|a| *a);
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
        let iv = collect(&rx, &mut alive, &mut latest, &agg_cfg, &mut errors);
        let secs = last_tick.elapsed().as_secs_f64();
        last_tick = Instant::now();
        let end_ns = unix_ns(SystemTime::now());
        // The since-start aggregate lives in the snapshot only: merged in place under the
        // lock, never copied (but for the full-screen view, which runs on its own thread).
        let top_views = {
            let mut s = lock(&snap);
            s.total.merge(&iv.window);
            s.health = live_health(iv.health.clone(), &iv.ring, &s.total, c);
            s.window_secs = secs;
            s.window_end_ns = end_ns;
            s.kernel = iv.ring;
            let views = matches!(ui, Ui::Top { .. }).then(|| {
                let (mut window, mut total) = (iv.window.clone(), s.total.clone());
                window.scale(sample);
                total.scale(sample);
                (window, total)
            });
            s.window = iv.window;
            views
        };
        for e in errors.drain(..) {
            eprintln!("dbtap: error: {e}");
        }
        match &ui {
            Ui::Lines { args } if !quiet_lines => {
                let mut out = stdout.lock();
                let sampled = sample > 1;
                if !printed_header {
                    printed_header = true;
                    if sampled {
                        writeln!(
                            out,
                            "# 1 connection in {sample} is captured: ~ columns are estimates (x{sample})"
                        )?;
                    }
                    let cells: Vec<(String, usize)> = args
                        .fields
                        .iter()
                        .map(|f| (field_header(*f, sampled).to_string(), field_width(*f)))
                        .collect();
                    write_row(&mut out, &cells)?;
                }
                for s in iv.servers.keys() {
                    if !known_servers.contains(s) {
                        known_servers.push(*s);
                    }
                }
                known_servers.sort();
                let time = clock(end_ns, &tz);
                let ctx = LineCtx {
                    time: &time,
                    secs,
                    sample,
                    drops: iv.ring.drops.saturating_sub(last_drops),
                    conns: iv.open_connections,
                    no_servers: known_servers.is_empty(),
                };
                let empty = ServerWindow::default();
                let rows: Vec<SocketAddr> = if known_servers.is_empty() {
                    vec![other_server()]
                } else {
                    known_servers.clone()
                };
                for s in &rows {
                    let w = iv.servers.get(s).unwrap_or(&empty);
                    let cells: Vec<(String, usize)> = args
                        .fields
                        .iter()
                        .map(|f| (field_cell(*f, s, w, &ctx), field_width(*f)))
                        .collect();
                    write_row(&mut out, &cells)?;
                }
                out.flush()?;
            }
            Ui::Top { tx, .. } => {
                let Some((window, tot)) = top_views else {
                    continue;
                };
                // Scaled like every count when sampling (the header says estimates).
                let pkts: u64 = sample
                    * iv.servers
                        .values()
                        .map(|s| s.pkts_in + s.pkts_out)
                        .sum::<u64>();
                let b_in: u64 = sample * iv.servers.values().map(|s| s.bytes_in).sum::<u64>();
                let b_out: u64 = sample * iv.servers.values().map(|s| s.bytes_out).sum::<u64>();
                let up = start_instant.elapsed().as_secs();
                let frame = top::Frame {
                    header: format!(
                        "dbtap top - {} - up {:02}:{:02}:{:02}{}",
                        c.interface,
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
                    total_secs: start_instant.elapsed().as_secs_f64(),
                };
                if tx.send(frame).is_err() {
                    stop.store(true, Ordering::Release);
                }
            }
            _ => {}
        }
        last_drops = iv.ring.drops;
    }

    // Stop: every worker hands over its last window and closes its connections.
    stop.store(true, Ordering::Release);
    // A worker may still hand over an ordinary window before its last one: merge every report
    // until each worker has sent its last (or a worker hangs for longer than the deadline).
    let give_up = Instant::now() + Duration::from_secs(10);
    // The endpoint goes first: it must not see the since-start aggregate taken out below.
    if let Some(s) = server {
        s.stop();
    }
    let mut total = std::mem::replace(&mut lock(&snap).total, Aggregator::new(agg_cfg.clone()));
    let mut iv = collect(&rx, &mut alive, &mut latest, &agg_cfg, &mut errors);
    total.merge(&iv.window);
    while alive.iter().any(|a| *a) && Instant::now() < give_up {
        iv = collect(&rx, &mut alive, &mut latest, &agg_cfg, &mut errors);
        total.merge(&iv.window);
    }
    if alive.iter().any(|a| *a) {
        errors.push("a capture thread did not stop in time; its last events are missing".into());
    } else {
        for h in handles {
            let _ = h.join();
        }
    }
    for e in errors.drain(..) {
        eprintln!("dbtap: error: {e}");
    }
    let health = live_health(iv.health, &iv.ring, &total, c);
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
            for w in &health.warnings {
                eprintln!("dbtap: warning: {w}");
            }
            total.scale(sample);
            let opts = args.report.options();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match args.report.format {
                DigestFormat::Text => {
                    if !quiet_lines {
                        writeln!(out)?;
                    }
                    report::text::render(&total, &health, &opts, &mut out)?
                }
                DigestFormat::Json => report::json::render(&total, &health, &opts, &mut out)?,
            }
            out.flush()?;
            Ok(())
        }
    }
}

/// The snapshot, also after a thread panicked while holding it (its data is counters only).
fn lock(snap: &Mutex<Snapshot>) -> std::sync::MutexGuard<'_, Snapshot> {
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
    h.files = vec![format!("live:{}", c.interface)];
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
    });
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer() -> LiveConsumer {
        LiveConsumer {
            fp: Fingerprinter::new(crate::cli::FingerprintMode::Dbtap, false, false),
            agg_cfg: AggConfig::default(),
            window: Aggregator::new(AggConfig::default()),
            servers: HashMap::new(),
            matcher: ServerMatch {
                ports: vec![3306],
                addrs: vec!["10.0.0.9:7000".parse().expect("addr")],
            },
        }
    }

    #[test]
    fn segments_count_per_server_and_direction() {
        let mut c = consumer();
        let (cli, srv) = (
            "10.0.0.1:50000".parse().expect("addr"),
            "10.0.0.2:3306".parse().expect("addr"),
        );
        let other_srv: SocketAddr = "10.0.0.9:7000".parse().expect("addr");
        c.segment(cli, srv, 100);
        c.segment(cli, srv, 60);
        c.segment(srv, cli, 1500);
        c.segment(cli, other_srv, 70);
        // Neither end a server: not counted anywhere.
        c.segment(cli, "10.0.0.3:80".parse().expect("addr"), 999);
        let (_, servers) = c.take_window();
        let s = &servers[&srv];
        assert_eq!(
            (s.pkts_in, s.bytes_in, s.pkts_out, s.bytes_out),
            (2, 160, 1, 1500)
        );
        assert_eq!(servers[&other_srv].bytes_in, 70);
        assert_eq!(servers.len(), 2);
        // The window was handed over: the consumer starts empty.
        assert!(c.servers.is_empty());
    }

    #[test]
    fn servers_beyond_the_bound_are_summed_as_other() {
        let mut c = consumer();
        let cli: SocketAddr = "10.0.0.1:50000".parse().expect("addr");
        for i in 0..(MAX_SERVERS as u32 + 10) {
            let srv = SocketAddr::from((std::net::Ipv4Addr::from(0x0a01_0000 + i), 3306));
            c.segment(cli, srv, 1);
        }
        assert_eq!(c.servers.len(), MAX_SERVERS + 1);
        assert_eq!(c.servers[&other_server()].pkts_in, 10);
    }

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
        }
        let ctx = LineCtx {
            time: "12:00:00",
            secs: 2.0,
            sample: 4,
            drops: 0,
            conns: 3,
            no_servers: false,
        };
        let srv: SocketAddr = "127.0.0.1:3306".parse().expect("addr");
        assert_eq!(field_cell(Field::Count, &srv, &w, &ctx), "28");
        assert_eq!(field_cell(Field::Errors, &srv, &w, &ctx), "4");
        assert_eq!(field_cell(Field::Qps, &srv, &w, &ctx), "14.0");
        // Latencies are the sample's own, in µs; rates are per second, scaled.
        assert_eq!(field_cell(Field::P50, &srv, &w, &ctx), "200");
        assert_eq!(field_cell(Field::Max, &srv, &w, &ctx), "300");
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
