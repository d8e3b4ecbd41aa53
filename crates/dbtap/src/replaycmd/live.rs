//! `dbtap replay --live -i IFACE --target ...`: one capture ring on the interface (the same
//! kernel filter as `dbtap live`: the server ports and addresses, loopback packets once) feeds
//! the pipeline's engine; its connection hooks feed the live mirror of the `replay` crate
//! ([`replay::run::live::Live`]) and its events the capture side of the report. Runs until
//! Ctrl-C / SIGTERM or `--duration`, then prints the same report as a file replay.

use std::collections::HashSet;
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aggregate::Aggregator;
use anyhow::{Context, Result};
use proto::{ConnMeta, Endpoint, QueryEvent};
use replay::Target;
use replay::run::live::Live;

use super::{ReplayArgs, TargetSink, new_aggregator};
use crate::fp::Fingerprinter;
use crate::pipeline::{Consumer, Engine};
use crate::service::ServiceClock;

/// Link type of the frames the ring hands over: they start at the IP header.
const LINKTYPE_RAW: u32 = 101;
/// The kernel ring, in 1 MiB blocks: the mirror frames and dispatches on the capture
/// thread, so the ring rides out its bursts (a drop is reported).
const RING_MB: u32 = 64;
/// How long one poll of the ring waits for packets.
const POLL: Duration = Duration::from_millis(50);

/// The capture side of a live mirror: the report's aggregate, and the mirror itself.
struct LiveSide {
    fp: Fingerprinter,
    agg: Aggregator,
    live: Live<TargetSink>,
    /// The target's own address: its connections (the mirror's) are never mirrored.
    target: Option<Endpoint>,
    ignored: HashSet<u64>,
    /// The filters (`None`: none given; every event is kept).
    judge: Option<super::judge::Judge>,
}

impl Consumer for LiveSide {
    fn event(&mut self, ev: QueryEvent) {
        if self.ignored.contains(&ev.conn) {
            return;
        }
        self.live.event(&ev);
        let Some(judge) = &self.judge else {
            self.fp.add_to(&mut self.agg, &ev);
            return;
        };
        // The capture side counts what the filters let through, as the target should.
        let v = judge.verdict(&mut self.fp, &ev);
        self.live.verdict(ev.conn, ev.start_ns, ev.command, v);
        match v {
            replay::filter::Verdict::Keep => {
                self.fp.add_to(&mut self.agg, &ev);
            }
            _ => self.agg.filtered_out(),
        }
    }
    fn close(&mut self, conn: u64, ts_ns: u64) {
        if self.ignored.remove(&conn) {
            return;
        }
        self.live.close(conn);
        self.agg.close_conn(conn, ts_ns);
    }
    fn conn_open(&mut self, meta: &ConnMeta) {
        if self.target.as_ref() == Some(&meta.server) {
            self.ignored.insert(meta.id);
            return;
        }
        self.live.open(meta.id, meta.saw_open);
    }
    fn conn_bytes(&mut self, conn: u64, to_server: bool, ts_ns: u64, bytes: &[u8]) {
        if !self.ignored.contains(&conn) {
            self.live.bytes(conn, to_server, ts_ns, bytes);
        }
    }
    fn conn_gap(&mut self, conn: u64, to_server: bool, len: u64) {
        if !self.ignored.contains(&conn) {
            self.live.gap(conn, to_server, len);
        }
    }
}

/// Runs the live mirror (see the module doc).
pub(super) fn run(args: &ReplayArgs, target: &Target, opts: &replay::Options) -> Result<()> {
    let iface = args.interface.clone().context("--live needs -i IFACE")?;
    let (judge, filters) = filters(args)?;
    let settings = crate::settings(&args.input());
    let spec = live::bpf::FilterSpec {
        ports: settings.ports.iter().map(|(p, _)| *p).collect(),
        servers: args.servers.clone(),
        sample: 1,
        loopback_ifindex: live::interface_index("lo").ok(),
    };
    let filter = live::bpf::servers_filter(&spec);
    let cfg = live::RingConfig {
        block_count: RING_MB,
        ..live::RingConfig::new(&iface)
    };
    let mut ring = live::Ring::open(&cfg, &filter)
        .with_context(|| format!("opening a capture on {iface} (needs CAP_NET_RAW)"))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handler")?;
    }
    let side = live_side(args, target, opts, judge);
    let filtering = side.judge.is_some();
    let flow = flow::FlowConfig {
        max_flows: flow::DEFAULT_MAX_FLOWS,
        ..flow::FlowConfig::default()
    };
    let mut engine = Engine::new(&settings, flow, side);
    let deadline = args.duration.map(|d| Instant::now() + d);
    if !args.quiet {
        eprintln!(
            "dbtap: replay: mirroring {iface} onto {} (Ctrl-C to stop)",
            args.target
        );
    }
    // The capture thread at real-time priority where permitted, as `dbtap live`'s: a reader
    // that waits for a CPU behind the database and its clients lets the ring overflow, and the
    // mirror misses what the kernel dropped. The guard gives the CPU back if it gets busy.
    let fifo = live::set_reader_priority(live::ReaderPriority::Fifo(1)).is_ok();
    let mut guard = live::FifoGuard::new(fifo, live::FIFO_CPU_LIMIT);
    let mut error = None;
    // Frames the ring cut short (a snap length under the packet's): their missing bytes
    // are reassembly gaps without a kernel drop; counted into the health.
    let mut cut = 0u64;
    while !stop.load(Ordering::Acquire) && deadline.is_none_or(|d| Instant::now() < d) {
        if let Some(share) = guard.check() {
            eprintln!(
                "dbtap: replay: the capture used {:.0} % of a CPU at real-time priority: back to normal priority",
                share * 100.0
            );
        }
        match ring.poll(POLL, |p| {
            cut += u64::from((p.data.len() as u64) < u64::from(p.wire_len));
            engine.frame(LINKTYPE_RAW, p.data, p.ts_ns, &iface);
            if filtering {
                // The packet's events came: what they judged goes on.
                engine.consumer_mut().live.settle();
            }
        }) {
            Ok(0) => {
                engine.expire(unix_now());
                engine.consumer_mut().live.settle();
            }
            Ok(_) => {}
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let stats = ring.stats().unwrap_or_default();
    let (side, mut health) = engine.finish(vec![iface.clone()], cut);
    if let Some(e) = error {
        health
            .warnings
            .push(format!("the capture on {iface} failed: {e}"));
    }
    if stats.drops > 0 {
        health.warnings.push(format!(
            "the kernel dropped {} packet(s) on {iface}: the mirror missed their requests",
            stats.drops
        ));
    }
    crate::warn(&health);
    let (sink, mut fid) = side.live.finish();
    warn_missed(args, &fid, &stats, cut);
    fid.filters = filters;
    super::report(args, &side.agg, &health, &sink.agg, fid)
}

/// One warning line for each way the mirror missed requests: bytes the capture never saw, and
/// requests dropped because the sessions fell behind by more than `--read-ahead`.
fn warn_missed(args: &ReplayArgs, fid: &replay::Fidelity, stats: &live::RingStats, cut: u64) {
    if let Some(b) = fid.skipped_bytes.get("capture_gap") {
        // Seen without kernel drops on a loaded machine: said whatever the ring's count.
        eprintln!(
            "dbtap: warning: the capture missed {b} byte(s) of client traffic (reassembly gaps; kernel drops: {}; frames cut short: {cut}; ring resyncs: {}; longest reader pause: {} ms): the requests in them were neither seen nor mirrored",
            stats.drops,
            stats.resyncs,
            stats.pause_max_ns / 1_000_000
        );
    }
    if let Some(n) = fid.skipped_requests.get("live_queue_full") {
        eprintln!(
            "dbtap: warning: {n} request(s) not mirrored (live_queue_full): the sessions fell behind the capture by more than --read-ahead ({} bytes queued)",
            args.read_ahead
        );
    }
}

/// The capture side of the mirror onto `target`, with its filters.
fn live_side(
    args: &ReplayArgs,
    target: &Target,
    opts: &replay::Options,
    judge: Option<super::judge::Judge>,
) -> LiveSide {
    let target_ep = match target {
        Target::Tcp(a) => a
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(Endpoint::from),
        Target::Unix(_) => None,
    };
    let mut side = LiveSide {
        fp: Fingerprinter::from_args(&args.grouping),
        agg: new_aggregator(),
        live: Live::new(
            opts,
            target,
            TargetSink {
                fp: Fingerprinter::from_args(&args.grouping),
                agg: new_aggregator(),
                clock: ServiceClock::default(),
            },
        ),
        target: target_ep,
        ignored: HashSet::new(),
        judge,
    };
    if side.judge.is_some() {
        side.live.filter();
    }
    side.live.read_ahead(args.read_ahead);
    side
}

/// The filters of a live mirror and their description: `--since`/`--until` are wall-clock
/// times (a time of day is today's; `+D` is after the mirror's start; `-D` before its end,
/// which only `--duration` sets).
fn filters(args: &ReplayArgs) -> Result<(Option<super::judge::Judge>, Option<String>)> {
    let range = args.time.range();
    let now = unix_now();
    let end = args
        .duration
        .map(|d| now.saturating_add(d.as_nanos() as u64));
    if range.needs_end() && end.is_none() {
        anyhow::bail!(
            "--live: --since/--until -D (before the end) needs --duration (the mirror's end)"
        );
    }
    let sel = (!range.is_all()).then(|| crate::selection::Selection {
        range,
        window: range.resolve(crate::timespec::Bounds {
            first_ns: now,
            last_ns: end.unwrap_or(now),
        }),
    });
    let active = args.read_only || !args.grouping.where_.is_empty() || sel.is_some();
    let judge = super::judge::Judge {
        read_only: args.read_only,
        window: sel
            .as_ref()
            .map_or(crate::timespec::Window::ALL, |s| s.window),
        active,
    };
    let described = judge.describe(
        &args.grouping.where_.join(" AND "),
        sel.as_ref().map(crate::selection::Selection::describe),
    );
    Ok((active.then_some(judge), described))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
