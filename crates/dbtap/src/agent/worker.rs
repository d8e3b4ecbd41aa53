//! The capture workers: one thread per ring, each running ring → engine → window aggregator
//! with nothing shared on the packet path, and handing its window over every interval.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use aggregate::{AggConfig, Aggregator, Latency};
use anyhow::{Context, Result};
use proto::{Endpoint, Outcome, QueryEvent};
use report::CaptureHealth;

use super::setup::{Plan, write_limits};
use super::{Control, unix_ns};
use crate::cli::CaptureArgs;
use crate::fp::Fingerprinter;
use crate::pipeline::{Consumer, Engine};
use crate::rotate::{Rotator, SharedFiles};

/// Link type of the frames the ring hands over: they start at the IP header.
const LINKTYPE_RAW: u32 = 101;
/// Most servers with their own interval line; the rest are summed under `other`.
pub(crate) const MAX_SERVERS: usize = 256;
/// How long a worker waits in the kernel for packets before it looks at the clock and the
/// epoch again.
const POLL: Duration = Duration::from_millis(50);

/// Per-server counters of an interval by server endpoint (one lookup per event: foldhash).
pub(crate) type ServerMap = HashMap<Endpoint, ServerWindow, foldhash::fast::RandomState>;

/// Per-server counters of one interval.
#[derive(Default, Clone)]
pub(crate) struct ServerWindow {
    pub(crate) count: u64,
    pub(crate) errors: u64,
    /// Response times.
    pub(crate) latency: Latency,
    /// Service times.
    pub(crate) service: Latency,
    pub(crate) pkts_in: u64,
    pub(crate) pkts_out: u64,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
}

impl ServerWindow {
    /// Counts one request: its outcome, response time and service time.
    pub(crate) fn record(&mut self, ev: &QueryEvent) {
        self.count += 1;
        if ev.outcome == Outcome::Error || ev.error.is_some() {
            self.errors += 1;
        }
        if let Some(l) = ev.latency_ns() {
            self.latency.record(l);
        }
        if let Some(l) = ev.service_ns() {
            self.service.record(l);
        }
    }

    pub(crate) fn merge(&mut self, o: &ServerWindow) {
        self.count += o.count;
        self.errors += o.errors;
        self.latency.merge(&o.latency);
        self.service.merge(&o.service);
        self.pkts_in += o.pkts_in;
        self.pkts_out += o.pkts_out;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
    }
}

/// The key interval lines sum servers under once [`MAX_SERVERS`] are tracked (never a
/// server's own endpoint: shown as "other").
pub(crate) fn other_server() -> Endpoint {
    Endpoint::Ip(SocketAddr::from(([0, 0, 0, 0], 0)))
}

/// Which endpoints are servers: by port, or by exact address.
#[derive(Clone)]
pub(super) struct ServerMatch {
    pub(super) ports: Vec<u16>,
    pub(super) addrs: Vec<SocketAddr>,
}

impl ServerMatch {
    fn is_server(&self, a: &SocketAddr) -> bool {
        self.ports.contains(&a.port()) || self.addrs.contains(a)
    }
}

/// A capture worker's consumer: fingerprints and aggregates into the current window.
pub(super) struct LiveConsumer {
    fp: Fingerprinter,
    agg_cfg: AggConfig,
    window: Aggregator,
    servers: ServerMap,
    matcher: ServerMatch,
    /// `--store` or `--listen`: the events binned per minute for the history store.
    bins: Option<crate::storefeed::MinuteBins>,
    /// Stream bytes (in, out) of the last server a stream record came to, not yet in `servers`:
    /// a stream source counts every record's bytes, and a map lookup by a Unix socket's path
    /// hashes the path. Added at the next record of another server and by `take_window`.
    pending_bytes: Option<(Endpoint, u64, u64)>,
}

impl LiveConsumer {
    fn server(&mut self, a: Endpoint) -> &mut ServerWindow {
        let key = if self.servers.len() >= MAX_SERVERS && !self.servers.contains_key(&a) {
            other_server()
        } else {
            a
        };
        self.servers.entry(key).or_default()
    }

    /// The stream bytes held back in `pending_bytes`, into their server's window.
    fn flush_bytes(&mut self) {
        if let Some((server, bytes_in, bytes_out)) = self.pending_bytes.take() {
            let s = self.server(server);
            s.bytes_in += bytes_in;
            s.bytes_out += bytes_out;
        }
    }

    pub(super) fn take_window(&mut self) -> (Aggregator, ServerMap) {
        self.flush_bytes();
        (
            std::mem::replace(&mut self.window, Aggregator::new(self.agg_cfg.clone())),
            std::mem::take(&mut self.servers),
        )
    }

    /// The minutes binned since the last call (none without a store).
    pub(super) fn take_minutes(&mut self) -> Vec<(i64, Aggregator)> {
        self.bins
            .as_mut()
            .map(crate::storefeed::MinuteBins::take_all)
            .unwrap_or_default()
    }
}

impl Consumer for LiveConsumer {
    fn event(&mut self, ev: QueryEvent) {
        self.event_ref(&ev);
    }

    const BY_REF: bool = true;

    fn event_ref(&mut self, ev: &QueryEvent) {
        let bins = &mut self.bins;
        let admitted = self.fp.add_to_then(&mut self.window, ev, |mode, c| {
            if let Some(b) = bins {
                b.event_in(ev, mode, c);
            }
        });
        if !admitted {
            return;
        }
        let s = match self.servers.get_mut(&ev.server) {
            Some(s) => s,
            None => self.server(ev.server.clone()),
        };
        s.record(ev);
    }

    fn stream_bytes(&mut self, server: &Endpoint, to_server: bool, len: usize) {
        let len = len as u64;
        let (add_in, add_out) = if to_server { (len, 0) } else { (0, len) };
        // Comparing the path (the same `Arc` first: one per connection) costs less than a
        // lookup; the servers' sums are the same.
        match &mut self.pending_bytes {
            Some((s, bytes_in, bytes_out)) if s == server => {
                *bytes_in += add_in;
                *bytes_out += add_out;
            }
            _ => {
                self.flush_bytes();
                self.pending_bytes = Some((server.clone(), add_in, add_out));
            }
        }
    }

    fn segment(&mut self, src: SocketAddr, dst: SocketAddr, frame_len: usize) {
        if self.matcher.is_server(&dst) {
            let s = self.server(dst.into());
            s.pkts_in += 1;
            s.bytes_in += frame_len as u64;
        } else if self.matcher.is_server(&src) {
            let s = self.server(src.into());
            s.pkts_out += 1;
            s.bytes_out += frame_len as u64;
        }
    }
}

/// What a worker hands over at the end of an interval (and a last time when it stops).
pub(super) struct WorkerReport {
    pub(super) worker: usize,
    pub(super) window: Aggregator,
    pub(super) servers: ServerMap,
    /// The window's events binned per minute of their request start (history store).
    pub(super) minutes: Vec<(i64, Aggregator)>,
    /// Cumulative since start.
    pub(super) health: CaptureHealth,
    /// Cumulative since start.
    pub(super) ring: live::RingStats,
    /// The packet reader's longest pause during the interval, ns.
    pub(super) pause_ns: u64,
    pub(super) open_connections: usize,
    pub(super) error: Option<String>,
    pub(super) last: bool,
}

/// A worker's consumer: the run's grouping, an empty window.
pub(super) fn consumer(c: &CaptureArgs, plan: &Plan) -> LiveConsumer {
    let mut fp = Fingerprinter::from_args(&c.grouping);
    if c.listen.is_some() {
        // /metrics labels each group series with its server: one series per server.
        fp.group_by_server();
    }
    LiveConsumer {
        fp,
        agg_cfg: plan.agg_cfg.clone(),
        window: Aggregator::new(plan.agg_cfg.clone()),
        servers: ServerMap::default(),
        matcher: plan.matcher.clone(),
        bins: (plan.store.is_some() || plan.fleet.is_some())
            .then(|| crate::storefeed::MinuteBins::new(plan.agg_cfg.clone(), 0)),
        pending_bytes: None,
    }
}

/// Starts one capture thread per ring (workers 0..); their reports arrive on `tx`'s channel.
pub(super) fn spawn(
    c: &CaptureArgs,
    plan: &Plan,
    rings: Vec<live::AutoRing>,
    ctl: &Arc<Control>,
    tx: &Sender<WorkerReport>,
    pcap_files: &SharedFiles,
) -> Result<Vec<JoinHandle<()>>> {
    let mut handles = Vec::new();
    let start_s = unix_ns(plan.started) / 1_000_000_000;
    for (i, ring) in rings.into_iter().enumerate() {
        let consumer = consumer(c, plan);
        // Sessions are not Send: each worker builds its engine on its own thread.
        let (settings, flow_cfg) = (plan.settings.clone(), plan.flow_cfg.clone());
        let writer = match &c.write {
            Some(dir) => Some(Rotator::new(
                dir,
                i,
                start_s,
                write_limits(c),
                Arc::clone(pcap_files),
            )?),
            None => None,
        };
        let (ctl, tx) = (Arc::clone(ctl), tx.clone());
        let name = c.interface.clone();
        let (prio, c_prio) = (reader_priority(c.reader_priority), c.reader_priority);
        handles.push(
            std::thread::Builder::new()
                .name(format!("dbtap-capture-{i}"))
                .spawn(move || {
                    let set = live::set_reader_priority(prio);
                    if let Err(e) = &set
                        && c_prio != crate::cli::ReaderPriorityArg::Auto
                    {
                        eprintln!("dbtap: capture thread {i} keeps its priority ({e})");
                    }
                    let fifo = set.is_ok() && matches!(prio, live::ReaderPriority::Fifo(_));
                    let guard = live::FifoGuard::new(fifo, live::FIFO_CPU_LIMIT);
                    let engine = Engine::new(&settings, flow_cfg, consumer);
                    worker(
                        ring,
                        engine,
                        writer,
                        ctl,
                        tx,
                        Thread {
                            idx: i,
                            name,
                            guard,
                        },
                    )
                })
                .context("starting a capture thread")?,
        );
    }
    Ok(handles)
}

/// How the ring grows (`--ring-mb` the start, `--ring-max-mb` the bound, `--ring-margin`);
/// None when the bound does not exceed the start.
pub(super) fn sizing(c: &CaptureArgs) -> Option<live::Sizing> {
    let max_bytes = u64::from(c.ring_max_mb) << 20;
    (c.ring_max_mb > c.ring_mb.max(2)).then_some(live::Sizing {
        max_bytes,
        margin: c.ring_margin,
    })
}

/// Says on stderr how the ring of thread `idx` grew, or why it stopped growing.
fn log_growths(ring: &mut live::AutoRing, idx: usize) {
    let (growths, failed) = ring.take_growths();
    for g in growths {
        eprintln!(
            "dbtap: capture ring of thread {idx} grown from {} MiB to {} MiB: {}",
            g.from_bytes >> 20,
            g.to_bytes >> 20,
            g.why
        );
    }
    if let Some(e) = failed {
        eprintln!("dbtap: thread {idx}: {e}");
    }
}

/// After the last drain: its wait counts among the pauses (the drops stay those counted
/// before it, in `stats`); says on stderr how the ring grew. Returns the interval's pause, ns.
fn finish_ring(ring: &mut live::AutoRing, stats: &mut live::RingStats, idx: usize) -> u64 {
    let pause_ns = ring.take_interval_pause();
    if let Ok(s) = ring.stats() {
        (stats.pause_max_ns, stats.long_pauses) = (s.pause_max_ns, s.long_pauses);
        stats.handover_duplicates = s.handover_duplicates;
    }
    log_growths(ring, idx);
    if stats.growths > 0 {
        eprintln!(
            "dbtap: capture ring of thread {idx}: {} MiB after {} growth(s); {} packet(s) seen by both rings during a handover were handed once",
            stats.ring_bytes >> 20,
            stats.growths,
            stats.handover_duplicates
        );
    }
    pause_ns
}

/// What `--reader-priority` asks for.
fn reader_priority(p: crate::cli::ReaderPriorityArg) -> live::ReaderPriority {
    use crate::cli::ReaderPriorityArg as A;
    match p {
        A::Normal => live::ReaderPriority::Normal,
        A::Nice => live::ReaderPriority::Nice(-10),
        A::Fifo | A::Auto => live::ReaderPriority::Fifo(1),
    }
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

/// Who a capture worker is: its index, its interface, its priority guard.
struct Thread {
    idx: usize,
    name: String,
    guard: live::FifoGuard,
}

/// One capture worker: ring → engine → window, until stopped.
fn worker(
    mut ring: live::AutoRing,
    mut engine: Engine<LiveConsumer>,
    rotator: Option<Rotator>,
    ctl: Arc<Control>,
    tx: Sender<WorkerReport>,
    thread: Thread,
) {
    let Thread {
        idx,
        name,
        mut guard,
    } = thread;
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
        if let Some(share) = guard.check() {
            eprintln!(
                "dbtap: capture thread {idx} used {:.0} % of a CPU at real-time priority: back to normal priority, so the database keeps its CPU (drops may follow under load)",
                share * 100.0
            );
        }
        log_growths(&mut ring, idx);
        if stop || error.is_some() {
            break error;
        }
        if !ctl.interval_ended(&mut seen_epoch) {
            continue;
        }
        let (window, servers) = engine.consumer_mut().take_window();
        let minutes = engine.consumer_mut().take_minutes();
        let health = engine.health(vec![name.clone()], 0);
        let report = WorkerReport {
            worker: idx,
            window,
            servers,
            minutes,
            health: writer.annotate(health),
            ring: ring.stats().unwrap_or_default(),
            pause_ns: ring.take_interval_pause(),
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
    let mut ring_stats = ring.stats().unwrap_or_default();
    let _ = ring.poll(Duration::ZERO, |p| {
        take_packet(p, &mut engine, &mut writer, &name)
    });
    let pause_ns = finish_ring(&mut ring, &mut ring_stats, idx);
    let (mut consumer, health) = engine.finish(vec![name.clone()], 0);
    let (window, servers) = consumer.take_window();
    let minutes = consumer.take_minutes();
    let health = writer.annotate(health);
    if let Some(w) = writer.rotator.take() {
        let _ = w.close();
    }
    let _ = tx.send(WorkerReport {
        worker: idx,
        window,
        servers,
        minutes,
        health,
        ring: ring_stats,
        pause_ns,
        open_connections: 0,
        error,
        last: true,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer() -> LiveConsumer {
        LiveConsumer {
            fp: Fingerprinter::new(crate::cli::FingerprintMode::Dbtap, false, false),
            agg_cfg: AggConfig::default(),
            window: Aggregator::new(AggConfig::default()),
            servers: ServerMap::default(),
            matcher: ServerMatch {
                ports: vec![3306],
                addrs: vec!["10.0.0.9:7000".parse().expect("addr")],
            },
            bins: None,
            pending_bytes: None,
        }
    }

    #[test]
    fn stream_bytes_count_per_server_and_direction() {
        let mut c = consumer();
        let (a, b) = (Endpoint::unix("/run/a.sock"), Endpoint::unix("/run/b.sock"));
        // Another connection's endpoint of the same path: the same server.
        let a2 = Endpoint::unix("/run/a.sock");
        c.stream_bytes(&a, true, 10);
        c.stream_bytes(&a2, false, 300);
        c.stream_bytes(&b, true, 7);
        c.stream_bytes(&a, true, 5);
        let (_, servers) = c.take_window();
        assert_eq!((servers[&a].bytes_in, servers[&a].bytes_out), (15, 300));
        assert_eq!((servers[&b].bytes_in, servers[&b].bytes_out), (7, 0));
        assert_eq!(servers.len(), 2);
        // Nothing held back past the handover.
        c.stream_bytes(&b, false, 1);
        let (_, servers) = c.take_window();
        assert_eq!((servers[&b].bytes_in, servers[&b].bytes_out), (0, 1));
        assert_eq!(servers.len(), 1);
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
        let s = &servers[&Endpoint::from(srv)];
        assert_eq!(
            (s.pkts_in, s.bytes_in, s.pkts_out, s.bytes_out),
            (2, 160, 1, 1500)
        );
        assert_eq!(servers[&Endpoint::from(other_srv)].bytes_in, 70);
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
}
