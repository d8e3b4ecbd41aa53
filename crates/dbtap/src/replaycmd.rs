//! `dbtap replay CAPTURE... --target HOST:PORT`: reads the captures through the pipeline (the
//! capture side of the report, and each connection's client bytes), replays the sessions
//! onto the target with the `replay` crate, and prints both sides compared as `dbtap diff`
//! compares, with the replay's fidelity.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use aggregate::{AggConfig, Aggregator};
use anyhow::{Result, bail};
use clap::Args;
use diff::Side;
use proto::{ConnMeta, QueryEvent};
use replay::run::EventSink;
use replay::{Collector, Fidelity, Options, Target, Timing};
use serde::Serialize;

use crate::cli::{
    DigestFormat, GroupingArgs, InputArgs, TextArgs, parse_duration, parse_positive, parse_size,
};
use crate::fp::Fingerprinter;
use crate::pipeline::{self, Consumer};
use crate::service::ServiceClock;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Capture files (pcap, pcapng, gzip), read in order as one capture.
    #[arg(required_unless_present = "live", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Mirror what a live capture on `-i IFACE` sees onto the target as it happens, until
    /// Ctrl-C / SIGTERM or `--duration`.
    #[arg(long, requires = "interface", conflicts_with_all = ["files", "rate", "max", "skip_idle", "speed"])]
    pub live: bool,
    /// `--live`: the interface to capture on (`lo`, `eth0`, `any`).
    #[arg(long, short = 'i', value_name = "IFACE")]
    pub interface: Option<String>,
    /// `--live`: stop after this long (e.g. `30s`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// The target server: HOST:PORT, or the path of a Unix socket.
    #[arg(long, value_name = "HOST:PORT|PATH")]
    pub target: String,
    /// The user to log in as (Redis: `AUTH user password`; MySQL: default `root`;
    /// PostgreSQL: default the captured user).
    #[arg(long)]
    pub user: Option<String>,
    /// The password to log in with; a captured AUTH is replaced by it (dropped without it).
    #[arg(long)]
    pub password: Option<String>,
    /// Replay at this multiple of the captured speed (any positive number; default 1).
    #[arg(long, value_parser = parse_factor, conflicts_with_all = ["rate", "max"])]
    pub speed: Option<f64>,
    /// Send this many requests per second over all sessions, in captured order.
    #[arg(long, value_parser = parse_factor, conflicts_with = "max")]
    pub rate: Option<f64>,
    /// As fast as each session's replies allow.
    #[arg(long)]
    pub max: bool,
    /// Shorten every stretch with no request longer than this to this (e.g. `1s`).
    #[arg(long = "skip-idle", value_name = "DURATION", value_parser = parse_duration)]
    pub skip_idle: Option<std::time::Duration>,
    /// Run N copies of every session, each on its own connection.
    #[arg(long, default_value_t = 1, value_parser = parse_scale)]
    pub scale: u32,
    /// Replay this percentage of the sessions, chosen deterministically (e.g. `25%`).
    #[arg(long, default_value = "100%", value_parser = parse_pct)]
    pub sessions: f64,
    /// Target connections open at once; a session beyond it waits for a free one.
    #[arg(long = "max-connections", default_value_t = 1000, value_parser = parse_positive)]
    pub max_connections: usize,
    /// Captured client bytes held for the replay (e.g. 1G); beyond it, skipped and counted.
    #[arg(long = "read-ahead", default_value = "1G", value_parser = parse_size)]
    pub read_ahead: usize,
    /// Longest wait for the replies of a batch before the session goes on (counted).
    #[arg(long = "reply-timeout", default_value = "10s", value_parser = parse_duration)]
    pub reply_timeout: std::time::Duration,
    /// Longest wait for a blocking command's reply (BLPOP, XREAD BLOCK, WAIT): then its
    /// connection is replaced, logged in and re-selected (counted).
    #[arg(long = "block-wait", default_value = "1s", value_parser = parse_duration)]
    pub block_wait: std::time::Duration,
    #[arg(long, value_enum, default_value_t = DigestFormat::Text)]
    pub format: DigestFormat,
    /// Unchanged groups listed in the text report (0 = all).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: usize,
    /// A server port, besides the protocols' default ports. Repeatable.
    #[arg(long = "port", value_name = "N")]
    pub ports: Vec<u16>,
    /// A server address. Repeatable.
    #[arg(long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<SocketAddr>,
    #[command(flatten)]
    pub grouping: GroupingArgs,
    #[command(flatten)]
    pub text: TextArgs,
    /// Never show a progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Replay only requests that cannot write (SELECT, SHOW, Redis reads, ...); transaction
    /// and session-state commands are kept; what is left out is counted (`read_only`).
    #[arg(long = "read-only")]
    pub read_only: bool,
    #[command(flatten)]
    pub time: crate::cli::TimeArgs,
    /// The captured users' passwords, one `user:password` a line: each session logs in as
    /// its captured user; a user not in the file logs in with --user/--password.
    #[arg(long, value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// Connect to the target over TLS (Redis from the first byte, MySQL and PostgreSQL after
    /// their SSLRequest), verifying its certificate against --target-ca or the system's roots.
    #[arg(long = "target-tls")]
    pub target_tls: bool,
    /// PEM file of the certificate authorities the target's certificate must chain to.
    #[arg(long = "target-ca", value_name = "FILE", requires = "target_tls")]
    pub target_ca: Option<PathBuf>,
    /// Do not verify the target's certificate (its handshake signatures still are).
    #[arg(
        long = "target-insecure",
        requires = "target_tls",
        conflicts_with = "target_ca"
    )]
    pub target_insecure: bool,
    /// The name the target's certificate must hold (default: the host of --target).
    #[arg(
        long = "target-server-name",
        value_name = "NAME",
        requires = "target_tls"
    )]
    pub target_server_name: Option<String>,
    /// PEM file of dbtap's client certificate (chain) for targets that require one (MariaDB
    /// `REQUIRE X509`, PostgreSQL `clientcert`, Redis `tls-auth-clients`); with --target-key.
    #[arg(
        long = "target-cert",
        value_name = "FILE",
        requires_all = ["target_tls", "target_key"]
    )]
    pub target_cert: Option<PathBuf>,
    /// PEM file of the private key of --target-cert.
    #[arg(
        long = "target-key",
        value_name = "FILE",
        requires_all = ["target_tls", "target_cert"]
    )]
    pub target_key: Option<PathBuf>,
}

fn parse_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("invalid value '{s}' (expected a positive number)")),
    }
}

fn parse_scale(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(n),
        _ => Err(format!("invalid scale '{s}' (expected 1 to 1000)")),
    }
}

fn parse_pct(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!("invalid percentage '{s}' (expected e.g. 25%)")),
    }
}

/// The capture side: the digest's aggregate, and the client bytes for the replay.
struct CaptureConsumer {
    fp: Fingerprinter,
    agg: Aggregator,
    collector: Collector,
    judge: judge::Judge,
}

impl Consumer for CaptureConsumer {
    fn event(&mut self, ev: QueryEvent) {
        self.collector.event(&ev);
        if !self.judge.active {
            self.fp.add_to(&mut self.agg, &ev);
            return;
        }
        // The capture side counts what the filters let through, as the target should.
        let v = self.judge.verdict(&mut self.fp, &ev);
        self.collector.verdict(ev.conn, ev.start_ns, ev.command, v);
        match v {
            replay::filter::Verdict::Keep => {
                self.fp.add_to(&mut self.agg, &ev);
            }
            _ => self.agg.filtered_out(),
        }
    }
    fn close(&mut self, conn: u64, ts_ns: u64) {
        self.collector.close(conn, ts_ns);
        self.agg.close_conn(conn, ts_ns);
    }
    fn conn_open(&mut self, meta: &ConnMeta) {
        self.collector.open(meta.id, meta.saw_open);
    }
    fn conn_bytes(&mut self, conn: u64, to_server: bool, ts_ns: u64, bytes: &[u8]) {
        self.collector.bytes(conn, to_server, ts_ns, bytes);
    }
    fn conn_gap(&mut self, conn: u64, to_server: bool, len: u64) {
        self.collector.gap(conn, to_server, len);
    }
}

/// The target side: the same fingerprinting, aggregation and service clock as a capture.
struct TargetSink {
    fp: Fingerprinter,
    agg: Aggregator,
    clock: ServiceClock,
}

impl EventSink for TargetSink {
    fn event(&mut self, mut ev: QueryEvent) {
        self.clock.stamp(&mut ev);
        self.fp.add_to(&mut self.agg, &ev);
    }
    fn close(&mut self, conn: u64, ts_ns: u64) {
        self.clock.close(conn);
        self.agg.close_conn(conn, ts_ns);
    }
}

fn new_aggregator() -> Aggregator {
    Aggregator::new(AggConfig {
        keep_examples: false,
        ..AggConfig::default()
    })
}

impl ReplayArgs {
    fn input(&self) -> InputArgs {
        InputArgs {
            files: self.files.clone(),
            ports: self.ports.clone(),
            servers: self.servers.clone(),
            grouping: self.grouping.clone(),
            max_connections: flow::DEFAULT_MAX_FLOWS,
            text: self.text.clone(),
            quiet: self.quiet,
            time: Default::default(),
        }
    }

    fn options(&self) -> Options {
        let timing = match (self.max, self.rate, self.speed) {
            (true, _, _) => Timing::Max,
            (_, Some(r), _) => Timing::Rate(r),
            (_, _, s) => Timing::Speed(s.unwrap_or(1.0)),
        };
        Options {
            timing,
            skip_idle_ns: self.skip_idle.map(|d| d.as_nanos() as u64),
            scale: self.scale,
            sessions_pct: self.sessions,
            max_connections: self.max_connections,
            creds: replay::redis::Credentials {
                user: self.user.clone(),
                password: self.password.clone(),
                users: Default::default(),
            },
            reply_timeout: self.reply_timeout,
            block_wait: self.block_wait,
            // The target side keeps no examples (`new_aggregator`), the only use of bound
            // values: its sessions need not copy every execution's parameters.
            session: proto::SessionConfig {
                keep_params: false,
                ..proto::SessionConfig::default()
            },
            tls: None,
        }
    }

    /// The TLS client of `--target-tls` (`None` without it).
    fn tls(&self) -> Result<Option<replay::tls::Tls>> {
        if !self.target_tls {
            return Ok(None);
        }
        let host = match self.target.rsplit_once(':') {
            Some((h, _)) if !self.target.starts_with('/') => h,
            _ => bail!("--target-tls needs a HOST:PORT target, not a Unix socket"),
        };
        let o = replay::tls::TlsOptions {
            ca: self.target_ca.clone(),
            insecure: self.target_insecure,
            server_name: self.target_server_name.clone(),
            client_cert: self.target_cert.clone().zip(self.target_key.clone()),
        };
        Ok(Some(
            replay::tls::Tls::new(&o, host).map_err(anyhow::Error::msg)?,
        ))
    }

    fn target(&self) -> Result<Target> {
        let t = &self.target;
        if t.starts_with('/') || t.starts_with('.') {
            return Ok(Target::Unix(PathBuf::from(t)));
        }
        if !t.contains(':') {
            bail!("--target {t}: expected HOST:PORT or the path of a Unix socket");
        }
        Ok(Target::Tcp(t.clone()))
    }
}

mod credfile;
mod judge;
mod live;
mod out;

/// Runs `dbtap replay`.
pub fn run(args: ReplayArgs) -> Result<()> {
    let target = args.target()?;
    let mut opts = args.options();
    if let Some(f) = &args.credentials {
        opts.creds.users = std::sync::Arc::new(credfile::read(f)?);
    }
    opts.tls = args.tls()?;
    if args.live {
        return live::run(&args, &target, &opts);
    }
    let (consumer, filters) = judge::consumer(&args)?;
    let (consumer, health) = pipeline::run(&args.files, &crate::settings(&args.input()), consumer)?;
    crate::warn(&health);
    let (plans, skipped, skipped_bytes) = consumer.collector.finish();
    let sink = TargetSink {
        fp: Fingerprinter::from_args(&args.grouping),
        agg: new_aggregator(),
        clock: ServiceClock::default(),
    };
    if args.credentials.is_some() {
        credfile::note_missing(&opts.creds, &plans);
    }
    let (sink, mut fid) = replay::run::replay(plans, &opts, &target, sink);
    fid.filters = filters;
    for (k, v) in skipped {
        *fid.skipped_requests.entry(k).or_default() += v;
    }
    fid.skipped_bytes = skipped_bytes;
    report(&args, &consumer.agg, &health, &sink.agg, fid)
}

/// Prints the report: the capture's side beside the target's, with the replay's fidelity.
fn report(
    args: &ReplayArgs,
    capture: &Aggregator,
    health: &report::CaptureHealth,
    target: &Aggregator,
    mut fid: Fidelity,
) -> Result<()> {
    fid.requests_captured = capture.totals().stats.count;
    if fid.requests_framed == 0 {
        eprintln!(
            "dbtap: warning: the capture holds no request of a protocol replay supports \
             (Redis, MySQL, PostgreSQL, MongoDB); see the skipped counts"
        );
    }
    let span = report::span_ns(capture, health);
    let before = Side::from_aggregator(
        "capture",
        capture,
        span,
        health.is_complete(),
        Default::default(),
    );
    let wall = (fid.wall_s * 1e9) as u64;
    let after = Side::from_aggregator(&args.target, target, Some(wall), true, Default::default());
    let d = diff::compare(&before, &after, &diff::Settings::default());
    let groups = out::group_rows(capture, target);
    let stdout = std::io::stdout();
    let mut w = BufWriter::new(stdout.lock());
    match args.format {
        DigestFormat::Text => {
            out::fidelity_text(&fid, &mut w)?;
            out::groups_text(&groups, &mut w)?;
            let limit = if args.limit == 0 {
                usize::MAX
            } else {
                args.limit
            };
            diff::render::text(&d, limit, &mut w)?;
        }
        DigestFormat::Json => {
            let doc = ReplayJson {
                version: 1,
                fidelity: &fid,
                groups: &groups,
                diff: &d,
            };
            serde_json::to_writer_pretty(&mut w, &doc)?;
            writeln!(w)?;
        }
    }
    w.flush()?;
    nothing_sent(&fid, &args.target)
}

/// A replay that planned requests but sent none (every connection or login refused) is a
/// failure: the report is printed, then one line and a non-zero exit, so a script notices.
fn nothing_sent(fid: &Fidelity, target: &str) -> Result<()> {
    if fid.requests_planned == 0 || fid.requests_sent > 0 {
        return Ok(());
    }
    let why = if fid.target_connections == 0 {
        "no connection could be opened and logged in"
    } else {
        "no request was sent"
    };
    anyhow::bail!("nothing was replayed: {why} to {target} (see the report's skipped requests)")
}

#[derive(Serialize)]
struct ReplayJson<'a> {
    version: u32,
    fidelity: &'a Fidelity,
    groups: &'a BTreeMap<String, out::GroupRow>,
    diff: &'a diff::Diff,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(a: &[&str]) -> Result<ReplayArgs, clap::Error> {
        let base = ["dbtap", "replay", "c.pcap", "--target", "127.0.0.1:6379"];
        Cli::try_parse_from([&base[..], a].concat()).map(|c| match c.command {
            Command::Replay(r) => r,
            _ => unreachable!("dbtap replay parses as Replay"),
        })
    }

    #[test]
    fn replay_options() {
        let o = args(&[]).unwrap().options();
        assert_eq!(
            (o.timing, o.scale, o.sessions_pct),
            (Timing::Speed(1.0), 1, 100.0)
        );
        assert_eq!(
            args(&["--speed", "2.5"]).unwrap().options().timing,
            Timing::Speed(2.5)
        );
        assert_eq!(
            args(&["--rate", "150.5"]).unwrap().options().timing,
            Timing::Rate(150.5)
        );
        assert_eq!(args(&["--max"]).unwrap().options().timing, Timing::Max);
        assert!(args(&["--max", "--speed", "2"]).is_err());
        assert!(args(&["--speed", "0"]).is_err());
        assert!(args(&["--speed", "-1"]).is_err());
        assert_eq!(args(&["--sessions", "25%"]).unwrap().sessions, 25.0);
        assert!(args(&["--sessions", "0%"]).is_err());
        assert!(args(&["--scale", "0"]).is_err());
        let u = args(&[]).unwrap();
        assert!(matches!(u.target(), Ok(Target::Tcp(_))));
        let mut u = u;
        u.target = "/run/redis.sock".into();
        assert!(matches!(u.target(), Ok(Target::Unix(_))));
        u.target = "nohost".into();
        assert!(u.target().is_err());
    }
}
