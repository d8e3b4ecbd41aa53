//! Setup of a live run: the arguments of `dbtap live` / `dbtap top` turned, in one place, into
//! the configuration of every stage (kernel filter and rings, flow table, aggregator, `--write`
//! rotation, reports).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aggregate::AggConfig;
use anyhow::Result;
use flow::FlowConfig;
use report::ReportOptions;

use super::Mode;
use super::worker::ServerMatch;
use crate::cli::CaptureArgs;
use crate::pipeline::Settings;
use crate::rotate::Limits;

/// What the HTTP endpoint needs to know of the run.
pub(super) struct LiveSetup {
    pub(super) sample: u32,
    pub(super) threads: usize,
    pub(super) started: SystemTime,
    pub(super) report_opts: ReportOptions,
}

/// Every stage's configuration, derived from the arguments.
pub(super) struct Plan {
    pub(super) settings: Settings,
    /// How often the main thread merges the workers' windows.
    pub(super) tick: Duration,
    pub(super) agg_cfg: AggConfig,
    pub(super) flow_cfg: FlowConfig,
    pub(super) matcher: ServerMatch,
    /// `--sample` (at least 1): every count a human reads is multiplied by it.
    pub(super) sample: u64,
    pub(super) setup: Arc<LiveSetup>,
    pub(super) started: SystemTime,
    pub(super) start_instant: Instant,
    /// What the run reads, for `dbtap top`'s header: `lo`, `lo + ebpf` or `ebpf`.
    pub(super) source_label: String,
    /// The history store (`--store`, or in memory under `--listen`).
    pub(super) store: Option<super::history::SharedStore>,
    /// The web UI's access token (`--token-file`, DBTAP_UI_TOKEN).
    pub(super) token: Option<String>,
    /// `/api/live` (under `--listen`).
    pub(super) live_view: Option<Arc<super::webview::LiveLines>>,
    /// `--clickhouse`: the sink's counters (set by `run` once the sink started).
    pub(super) fleet: Option<Arc<clickhouse::SinkStats>>,
}

impl Plan {
    /// Checks the arguments, opens the rings (one per thread) and derives every configuration.
    pub(super) fn new(c: &CaptureArgs, mode: &Mode) -> Result<(Plan, Vec<live::AutoRing>)> {
        if c.sample == 0 {
            anyhow::bail!("--sample must be 1 or more");
        }
        let mut settings = settings(c);
        // Bound values are shown only in examples (`live` with --no-examples, and `top`, show none).
        settings.session.keep_params = matches!(mode, Mode::Lines(a) if !a.report.no_examples);
        let filter = kernel_filter(c, &settings)?;
        let rings = if super::source::wants_packets(c) {
            open_rings(c, &filter)?
        } else {
            Vec::new()
        };
        let threads = rings.len();
        let started = SystemTime::now();
        let start_instant = Instant::now();
        let (interval, lines_args) = match mode {
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
        let (store, token, live_view) =
            web_parts(c, mode, keep_examples, tick, u64::from(c.sample.max(1)))?;
        let plan = Plan {
            settings,
            tick,
            agg_cfg,
            flow_cfg,
            matcher,
            sample: u64::from(c.sample.max(1)),
            setup,
            started,
            start_instant,
            source_label: c.interface.clone(),
            store,
            token,
            live_view,
            fleet: None,
        };
        Ok((plan, rings))
    }

    /// Capture threads (one per ring).
    pub(super) fn threads(&self) -> usize {
        self.setup.threads
    }
}

type WebParts = (
    Option<super::history::SharedStore>,
    Option<String>,
    Option<Arc<super::webview::LiveLines>>,
);

/// The history store, the UI's access token and the live view of a run.
fn web_parts(
    c: &CaptureArgs,
    mode: &Mode,
    examples: bool,
    tick: Duration,
    sample: u64,
) -> Result<WebParts> {
    let listen = c.listen.is_some();
    let (store_args, web_args, fields) = match mode {
        Mode::Lines(a) => (Some(&a.store), Some(&a.web), a.fields.clone()),
        Mode::Top(_) => (None, None, super::webview::default_fields()),
    };
    let store = super::history::open(store_args, listen, examples)?;
    let token = match web_args {
        Some(w) if listen => w.token()?,
        _ => None,
    };
    let view = listen.then(|| {
        Arc::new(super::webview::LiveLines::new(
            tick.as_secs_f64(),
            fields,
            sample,
        ))
    });
    Ok((store, token, view))
}

/// The rotation of a worker's `--write` file set.
pub(super) fn write_limits(c: &CaptureArgs) -> Limits {
    Limits {
        max_bytes: c.write_mb.max(1) << 20,
        max_age_ns: c.write_every.map(|d| d.as_nanos() as u64),
        keep: c.write_files.max(1),
    }
}

fn settings(c: &CaptureArgs) -> Settings {
    let mut s = Settings::new(&c.ports, &c.servers, false);
    // One budget for every capture thread (the settings are cloned into each).
    s.session.text_budget = proto::kit::TextBudget::new(c.text.max_text_total);
    s
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
fn open_rings(c: &CaptureArgs, filter: &[live::bpf::Insn]) -> Result<Vec<live::AutoRing>> {
    let threads = c.threads.clamp(1, 64);
    let block_size: u32 = 1 << 20;
    let cfg = live::RingConfig {
        interface: c.interface.clone(),
        block_size,
        block_count: (c.ring_mb.max(2) * (1 << 20) / block_size).max(2),
        retire_ms: 20,
        fanout_group: (threads > 1).then(|| (std::process::id() & 0xffff) as u16),
    };
    let sizing = super::worker::sizing(c);
    Ok(live::open_group(&cfg, filter, threads)?
        .into_iter()
        .map(|r| live::AutoRing::wrap(r, &cfg, filter, sizing))
        .collect())
}
