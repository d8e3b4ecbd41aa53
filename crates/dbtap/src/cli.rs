//! Command-line interface: the subcommands, their options, and what they mean.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "dbtap",
    version,
    about = "Which queries load your database, from the wire: no slow log, no profiler, no restart.",
    long_about = "dbtap reads captured database traffic (pcap, pcapng, gzip, or stdin), pairs every \
request with its response, groups queries by fingerprint and reports what loads the server.\n\n\
Capture with:  tcpdump -i any -s 0 -w traffic.pcap 'tcp port 3306'\n\
Then:          dbtap digest traffic.pcap"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Digest captures: the queries that load the server, ranked, with latency distributions.
    Digest(DigestArgs),
    /// One line per request/response pair.
    Events(EventsArgs),
    /// Capture live from a network interface: a line per server every interval, Prometheus
    /// metrics and JSON digests over HTTP, a final digest on exit. Needs CAP_NET_RAW.
    Live(LiveArgs),
    /// Live capture shown full-screen: the query groups of the last second, sortable, like top.
    Top(TopArgs),
    /// Compare two captures, JSON digests or time ranges: which groups regressed (tested, not
    /// eyeballed), which are new or gone, and what moved the load. Exit status 3 when
    /// --fail-on is met.
    Diff(crate::diffcmd::DiffArgs),
    /// Browse query history in a web browser: a store written by `--store`, or captures
    /// digested at start. Serves the pages and the JSON API (docs/api.md) until Ctrl-C.
    Ui(crate::uicmd::UiArgs),
    /// Replay the captured sessions (or, with --live, what a live capture sees) onto a target
    /// server and compare the target's numbers with the capture's.
    Replay(crate::replaycmd::ReplayArgs),
    /// Print (or apply) the schema of an external sink: `dbtap schema clickhouse`.
    Schema(crate::fleet::SchemaArgs),
}

#[derive(Args, Debug, Clone)]
pub struct CaptureArgs {
    /// Interface to capture on: a name (eth0), `lo`, or `any` (all interfaces).
    #[arg(
        short = 'i',
        long = "interface",
        value_name = "IFACE",
        default_value = "any"
    )]
    pub interface: String,

    // The default ports are the registered protocols'.
    #[arg(
        long = "port",
        value_name = "N",
        help = port_help("Repeatable. The kernel filter keeps only TCP to and from these ports and servers")
    )]
    pub ports: Vec<u16>,

    /// A server address. Repeatable.
    #[arg(long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<SocketAddr>,

    /// A tcpdump-style filter expression, ANDed with the ports and servers (e.g.
    /// `host 10.0.0.5`). Compiled by libpcap at run time; link-layer terms are not supported.
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,

    /// Capture threads. Connections are spread across them by the kernel (PACKET_FANOUT by flow
    /// hash), so both directions of a connection meet in one thread.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,

    /// Kernel ring buffer per thread, in MiB. A larger ring rides out longer bursts without drops.
    #[arg(long = "ring-mb", default_value_t = 32, value_name = "MIB")]
    pub ring_mb: u32,

    /// The most the ring may grow to, in MiB. The ring starts at --ring-mb and grows (without
    /// losing or repeating a packet) when the busiest second seen would fill it in less than
    /// --ring-margin, or when the reader comes back to it half full. Not above --ring-mb (the
    /// default, 0): the ring keeps --ring-mb. One capture thread only: with --threads above 1
    /// the rings keep --ring-mb.
    #[arg(long = "ring-max-mb", default_value_t = 0, value_name = "MIB")]
    pub ring_max_mb: u32,

    /// How long of the busiest second's traffic the ring should hold (`0`: grow only when the
    /// reader finds it half full).
    #[arg(long = "ring-margin", default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub ring_margin: std::time::Duration,

    /// The capture threads' scheduling: `normal` (as started), `nice` (nice -10), `fifo`
    /// (real-time SCHED_FIFO priority 1: a thread runs as soon as packets wake it, so a busy
    /// host does not starve it into drops), `auto` (`fifo` where permitted, else `normal`,
    /// silently). `nice` and `fifo` need CAP_SYS_NICE; without it the threads stay normal and
    /// stderr says so.
    #[arg(long = "reader-priority", value_enum, default_value_t = ReaderPriorityArg::Auto, value_name = "HOW")]
    pub reader_priority: ReaderPriorityArg,

    /// Where connections are read. `packet`: network packets (AF_PACKET; plaintext TCP only).
    /// `ebpf`: the server processes' sockets, traced in the kernel (Unix sockets, TCP, and TLS
    /// plaintext from the libssl they map; needs root or CAP_BPF+CAP_PERFMON). `auto`: packets
    /// for plaintext TCP plus eBPF for Unix sockets and TLS, each connection counted once;
    /// packets only where eBPF cannot run (the start line says which was chosen).
    #[arg(long, value_enum, default_value_t = Source::Auto, value_name = "SOURCE")]
    pub source: Source,

    /// eBPF source: trace this server process (and the processes it forks). Repeatable. By
    /// default the processes listening on the server ports and --socket paths are traced.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// eBPF source: trace the processes with this command name (as in /proc/PID/comm, e.g.
    /// mariadbd, postgres, redis-server). Repeatable.
    #[arg(long = "process", value_name = "NAME")]
    pub processes: Vec<String>,

    /// eBPF source: a Unix socket path a server listens on (e.g. /run/mysqld/mysqld.sock). Repeatable.
    #[arg(long = "socket", value_name = "PATH")]
    pub sockets: Vec<PathBuf>,

    /// eBPF source: the kernel ring buffer, in MiB (a power of two; records that do not fit
    /// become exact gaps in their streams, counted in the health block).
    #[arg(long = "ebpf-ring-mb", default_value_t = 8, value_name = "MIB")]
    pub ebpf_ring_mb: u32,

    /// Keep 1 connection in N (chosen in the kernel by a hash of the client port). Counts are multiplied by N
    /// and marked as estimates everywhere.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub sample: u32,

    /// Stop after this long (e.g. 30s, 5m, 1h) and print the final digest.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,

    #[command(flatten)]
    pub grouping: GroupingArgs,

    /// Serve /metrics (Prometheus), /api/digest (JSON) and the web UI with its API (docs/api.md)
    /// on this address, e.g. 127.0.0.1:9187 or :9187 (loopback). Give 0.0.0.0:9187 explicitly
    /// to serve other hosts.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    pub listen: Option<SocketAddr>,

    /// Query groups exported individually in /metrics; the rest are summed as "other".
    #[arg(long = "metrics-top", default_value_t = 100, value_name = "N")]
    pub metrics_top: usize,

    /// Keep a rotating pcap of what was captured in this directory.
    #[arg(long, value_name = "DIR")]
    pub write: Option<PathBuf>,

    /// Start a new pcap file when the current one reaches this many MiB.
    #[arg(long = "write-mb", default_value_t = 100, value_name = "MIB")]
    pub write_mb: u64,

    /// Start a new pcap file after this long, whatever its size (e.g. 10m).
    #[arg(long = "write-every", value_name = "DURATION", value_parser = parse_duration)]
    pub write_every: Option<std::time::Duration>,

    /// Keep at most this many pcap files; the oldest is deleted.
    #[arg(long = "write-files", default_value_t = 10, value_name = "N")]
    pub write_files: usize,

    #[command(flatten)]
    pub text: TextArgs,
}

#[derive(Args, Debug)]
pub struct LiveArgs {
    #[command(flatten)]
    pub capture: CaptureArgs,

    /// Seconds between interval lines (e.g. 1s, 10s); 0 prints none.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_duration)]
    pub interval: std::time::Duration,

    /// Columns of the interval lines, comma separated, from: time, server, count, qps, avg,
    /// p50, p95, p99, max, svc_avg, svc_p50, svc_p95, svc_p99, svc_max, errors, pkts_in,
    /// pkts_out, mbps_in, mbps_out, drops, conns, pause_ms. avg..max are response times as the client saw
    /// them; svc_avg..svc_max are service times (without queueing behind earlier requests on
    /// the same connection, as the digest ranks by).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "time,server,count,avg,p50,p95,p99,max,errors,pkts_in,pkts_out,mbps_in,mbps_out,drops"
    )]
    pub fields: Vec<Field>,

    /// The final digest (printed at the stop) and the JSON of /api/digest.
    #[command(flatten)]
    pub report: ReportArgs,

    #[command(flatten)]
    pub store: crate::uicmd::StoreArgs,

    #[command(flatten)]
    pub web: crate::uicmd::WebArgs,

    #[command(flatten)]
    pub clickhouse: crate::fleet::ClickHouseArgs,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub capture: CaptureArgs,

    /// Initial sort (keys t, c, p, e change it).
    #[arg(long = "order-by", value_enum, default_value_t = OrderBy::Total)]
    pub order_by: OrderBy,
}

/// Where `dbtap live` and `dbtap top` read connections.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Network packets (AF_PACKET rings).
    Packet,
    /// The server processes' sockets, traced with eBPF.
    Ebpf,
    /// Packets for plaintext TCP, eBPF for Unix sockets and TLS (packets only where eBPF
    /// cannot run).
    Auto,
}

/// `--reader-priority`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReaderPriorityArg {
    Auto,
    Normal,
    Nice,
    Fifo,
}

/// Interval line columns.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum Field {
    Time,
    Server,
    Count,
    Qps,
    Avg,
    P50,
    P95,
    P99,
    Max,
    SvcAvg,
    SvcP50,
    SvcP95,
    SvcP99,
    SvcMax,
    Errors,
    PktsIn,
    PktsOut,
    MbpsIn,
    MbpsOut,
    Drops,
    Conns,
    /// The packet reader's longest pause in the interval, ms (how long the capture ring went
    /// unread while packets waited; long pauses before drops mean a starved agent).
    PauseMs,
}

/// Parses `500ms`, `10s`, `5m`, `1h`, `1h30m`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(std::time::Duration::from_secs_f64(secs));
        }
        return Err(format!("invalid duration '{s}'"));
    }
    humantime::parse_duration(s).map_err(|e| format!("invalid duration '{s}': {e}"))
}

/// The help of `--port`: the registered protocols' default ports, then `rest`.
pub(crate) fn port_help(rest: &str) -> String {
    let ports: Vec<String> = proto::registry::default_ports()
        .map(|(port, _)| port.to_string())
        .collect();
    format!(
        "A server port, in addition to the protocols' default ports ({}). {rest}",
        ports.join(", ")
    )
}

/// Parses a count of at least 1.
pub fn parse_positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "invalid count '{s}' (expected a whole number of at least 1)"
        )),
    }
}

/// Parses a size in bytes: a whole number with an optional binary suffix (`K`, `M`, `G`,
/// also `KiB`, `MiB`, `GiB`, any case), e.g. `64M`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        _ => {
            return Err(format!(
                "invalid size '{s}' (expected e.g. 64M, 1G, 1048576)"
            ));
        }
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .ok_or_else(|| format!("invalid size '{s}' (expected e.g. 64M, 1G, 1048576)"))
}

/// Parses a listen address; `:PORT` and a bare port mean loopback.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let t = s.strip_prefix(':').unwrap_or(s);
    if let Ok(port) = t.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse()
        .map_err(|_| format!("invalid listen address '{s}' (expected HOST:PORT or :PORT)"))
}

#[derive(Args, Debug, Clone)]
pub struct InputArgs {
    /// Capture files (pcap, pcapng, optionally gzip-compressed); `-` reads standard input.
    /// Several files are read in order as one capture (e.g. rotated files).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    // The default ports are the registered protocols'.
    #[arg(long = "port", value_name = "N", help = port_help("Repeatable"))]
    pub ports: Vec<u16>,

    /// A server address. Repeatable.
    #[arg(long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<SocketAddr>,

    #[command(flatten)]
    pub grouping: GroupingArgs,

    /// Connections tracked at once (open ones, and closed ones remembered a few seconds for
    /// their late segments). Beyond it the least recently active connection is closed early
    /// (its unanswered requests are reported as such) and counted in the capture health as
    /// `connections_evicted`. Each costs about 3 KB.
    #[arg(
        long = "max-connections",
        value_name = "N",
        default_value_t = flow::DEFAULT_MAX_FLOWS,
        value_parser = parse_positive
    )]
    pub max_connections: usize,

    #[command(flatten)]
    pub text: TextArgs,

    /// Never show a progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    #[command(flatten)]
    pub time: TimeArgs,
}

/// How queries are grouped (digest, events, live, top).
#[derive(Args, Debug, Clone)]
pub struct GroupingArgs {
    /// Fingerprint rules: `dbtap` (pt-query-digest's rules without its known bugs) or `pt`
    /// (exactly pt-query-digest 3.2.1's, so Query IDs join with its reports).
    #[arg(long, value_enum, default_value_t = FingerprintMode::Dbtap)]
    pub fingerprint: FingerprintMode,

    /// Redis: group by key shape too (`SET user:?:profile`), not only by command.
    #[arg(long)]
    pub key_patterns: bool,

    /// MongoDB: keep the key order of filters and documents as sent (for users whose indexes
    /// depend on it); by default keys are sorted so the same query in another order is one group.
    #[arg(long)]
    pub keep_key_order: bool,

    /// Group by these dimensions, comma separated: fingerprint (default), server, db, user,
    /// client (host IP, `local` for a Unix socket), process (the client's command name, where
    /// the eBPF source knows it), protocol, command; e.g. `server,fingerprint` or `db,user`.
    #[arg(long = "group-by", value_name = "LIST")]
    pub group_by: Option<String>,

    /// Count only events where EXPR holds (repeatable: all must hold). FIELD OP VALUE with
    /// fields server, db, user, client, process, protocol, command, fingerprint and ops = != ~
    /// (regex) !~; e.g. `db=shop`, `user!=monitor`, `server=10.0.0.5:3306` (or `10.0.0.5`,
    /// `:3306`, a Unix socket path), `client=local`, `process=php-fpm`, `fingerprint~^select`.
    /// `db=` (empty) matches an unknown database.
    #[arg(long = "where", value_name = "EXPR")]
    pub where_: Vec<String>,
}

impl GroupingArgs {
    /// The `--group-by` dimensions and the `--where` filter, or a one-line error.
    pub fn scope(&self) -> Result<(aggregate::DimSet, aggregate::Filter), String> {
        let dims = match &self.group_by {
            Some(l) => aggregate::DimSet::parse_list(l).map_err(|e| format!("--group-by: {e}"))?,
            None => aggregate::DimSet::default(),
        };
        Ok((dims, aggregate::Filter::parse(&self.where_)?))
    }
}

impl Command {
    /// The grouping options of the command.
    pub fn grouping(&self) -> &GroupingArgs {
        match self {
            Command::Digest(a) => &a.input.grouping,
            Command::Events(a) => &a.input.grouping,
            Command::Live(a) => &a.capture.grouping,
            Command::Top(a) => &a.capture.grouping,
            Command::Diff(a) => &a.grouping,
            Command::Ui(a) => &a.grouping,
            Command::Replay(a) => &a.grouping,
            Command::Schema(_) => &crate::fleet::NO_GROUPING,
        }
    }
}

/// The digest report's options (digest, and live's final digest).
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// The digest's format.
    #[arg(long, value_enum, default_value_t = DigestFormat::Text)]
    pub format: DigestFormat,

    /// How many query groups to show in detail (0 = all).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: usize,

    #[arg(long = "order-by", value_enum, default_value_t = OrderBy::Total)]
    pub order_by: OrderBy,

    /// Leave the slowest example's raw text out of the report (it may hold personal data).
    #[arg(long)]
    pub no_examples: bool,

    /// Each group's latency distribution: `decade` (a row per power of ten) or `fine` (at most
    /// 48 log-linear rows a few percent wide between the group's min and max, with bars; JSON
    /// `service_fine`), where two modes show as two humps.
    #[arg(long, value_enum, default_value_t = HistogramArg::Decade, value_name = "KIND")]
    pub histogram: HistogramArg,

    /// Line width of the text report (the profile's fingerprint column fills it; 0: never cut).
    /// Default: the terminal's width when stdout is a terminal, else 140.
    #[arg(long, value_name = "N")]
    pub width: Option<usize>,
}

/// `--histogram`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramArg {
    Decade,
    Fine,
}

impl ReportArgs {
    pub fn options(&self) -> report::ReportOptions {
        report::ReportOptions {
            limit: if self.limit == 0 {
                usize::MAX
            } else {
                self.limit
            },
            order_by: self.order_by.into(),
            histogram: match self.histogram {
                HistogramArg::Decade => report::Histogram::Decade,
                HistogramArg::Fine => report::Histogram::Fine,
            },
            width: self
                .width
                .or_else(top::terminal_width)
                .unwrap_or(report::ReportOptions::default().width),
            ..report::ReportOptions::default()
        }
    }
}

impl From<OrderBy> for report::OrderBy {
    fn from(o: OrderBy) -> Self {
        match o {
            OrderBy::Total => report::OrderBy::Total,
            OrderBy::Count => report::OrderBy::Count,
            OrderBy::P99 => report::OrderBy::P99,
            OrderBy::Errors => report::OrderBy::Errors,
            OrderBy::Response => report::OrderBy::Response,
        }
    }
}

#[derive(Args, Debug)]
pub struct DigestArgs {
    #[command(flatten)]
    pub input: InputArgs,

    #[command(flatten)]
    pub report: ReportArgs,
    #[command(flatten)]
    pub timeline: TimelineArgs,

    /// With --format json: add each group's and the totals' exact, mergeable latency
    /// distributions (`mergeable`), which `dbtap diff` reads. Use with --limit 0 for a diff.
    #[arg(long)]
    pub mergeable: bool,

    #[command(flatten)]
    pub store: crate::uicmd::StoreArgs,

    #[command(flatten)]
    pub clickhouse: crate::fleet::ClickHouseArgs,

    /// Threads that read the connections (default: the cores available, at most 16; 0 is
    /// refused). The report is the same for any count; with --timeline, --store, --clickhouse
    /// or standard input, and on captures where that cannot be shown (IP fragments, a bound
    /// reached), one thread does the work.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: Option<u64>,
}

#[derive(Args, Debug)]
pub struct EventsArgs {
    #[command(flatten)]
    pub input: InputArgs,

    #[arg(long, value_enum, default_value_t = EventsFormat::Ndjson)]
    pub format: EventsFormat,

    /// Include each request's raw text (it may hold personal data).
    #[arg(long)]
    pub text: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestFormat {
    Text,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventsFormat {
    Ndjson,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderBy {
    /// Total service time (the load on the server).
    Total,
    Count,
    /// 99th percentile service time.
    P99,
    Errors,
    /// Total response time as the client saw it, queueing included.
    Response,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FingerprintMode {
    Dbtap,
    Pt,
}

/// The global request-text budget, shared by `digest`, `events`, `live` and `top`.
#[derive(Args, Debug, Clone)]
pub struct TextArgs {
    /// Request text kept at once across all connections (e.g. 64M, 1G). Beyond it a request
    /// keeps only a prefix of its text (enough to group it; marked truncated), and is still
    /// counted and timed; the capture health counts such requests (`text_cut_by_budget`).
    #[arg(
        long = "max-text-total",
        value_name = "SIZE",
        default_value = "64M",
        value_parser = parse_size
    )]
    pub max_text_total: usize,
}

/// The part of a capture read (`digest`, `events`): requests that started in `[since, until)`.
#[derive(Args, Debug, Clone, Default)]
pub struct TimeArgs {
    /// Only requests that started at or after T: an RFC 3339 time (2026-11-25T10:00:00Z), a
    /// time of day on the capture's first day (10:00, 10:00:05; UTC unless a zone is given:
    /// 10:00+01:00), +D after the capture's start (+30s, +2m) or -D before its end (-30s: the
    /// last 30 s).
    #[arg(long, value_name = "T", allow_hyphen_values = true, value_parser = crate::timespec::parse_time)]
    pub since: Option<crate::timespec::TimeSpec>,

    /// Only requests that started before T (same forms as --since).
    #[arg(long, value_name = "T", allow_hyphen_values = true, value_parser = crate::timespec::parse_time)]
    pub until: Option<crate::timespec::TimeSpec>,
}

impl TimeArgs {
    pub fn range(&self) -> crate::timespec::TimeRange {
        crate::timespec::TimeRange {
            since: self.since,
            until: self.until,
        }
    }
}

/// `digest --timeline`: the per-interval lines of `dbtap live`, from a capture.
#[derive(Args, Debug, Clone)]
pub struct TimelineArgs {
    /// Print a line per server (or group) for every interval of this length (1s, 10s, 1m) of
    /// packet time, aligned to multiples of it like `dbtap live`, before the digest (JSON:
    /// `timeline`, see docs/json-format.md).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeline_interval)]
    pub timeline: Option<std::time::Duration>,

    /// The rows of each interval: one per server, or the top query groups (`--timeline-top`).
    #[arg(long = "timeline-by", value_enum, default_value_t = TimelineBy::Server)]
    pub timeline_by: TimelineBy,

    /// With `--timeline-by group`: the groups shown per interval (by total service time).
    #[arg(long = "timeline-top", default_value_t = 5, value_name = "N", value_parser = parse_positive)]
    pub timeline_top: usize,

    /// Columns of the timeline lines (as `dbtap live --fields`; drops and conns are `-` in a
    /// capture).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "time,server,count,avg,p50,p95,p99,max,errors,pkts_in,pkts_out,mbps_in,mbps_out"
    )]
    pub fields: Vec<Field>,
}

/// What the rows of a timeline interval are.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineBy {
    Server,
    Group,
}

/// A timeline interval: at least 100 ms.
fn parse_timeline_interval(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d < std::time::Duration::from_millis(100) {
        return Err(format!("timeline interval '{s}' is shorter than 100ms"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err_and(|e| e.contains("'soon'")));
    }

    #[test]
    fn sizes_and_the_text_budget_flag() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("2KiB"), Ok(2048));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("").is_err() && parse_size("M").is_err() && parse_size("5T").is_err());
        assert!(parse_size("-1").is_err() && parse_size("99999999999999999999G").is_err());
        let total = |args: &[&str]| {
            Cli::try_parse_from(args).map(|c| match c.command {
                Command::Digest(a) => a.input.text.max_text_total,
                Command::Events(a) => a.input.text.max_text_total,
                Command::Live(a) => a.capture.text.max_text_total,
                Command::Top(a) => a.capture.text.max_text_total,
                #[allow(unreachable_patterns)]
                _ => 0,
            })
        };
        assert_eq!(total(&["dbtap", "digest", "f.pcap"]).ok(), Some(64 << 20));
        let set = ["--max-text-total", "1M"];
        for cmd in [
            &["dbtap", "digest", "f"][..],
            &["dbtap", "events", "f"],
            &["dbtap", "live"],
            &["dbtap", "top"],
        ] {
            assert_eq!(
                total(&[cmd, &set[..]].concat()).ok(),
                Some(1 << 20),
                "{cmd:?}"
            );
        }
        assert!(total(&["dbtap", "digest", "f", "--max-text-total", "lots"]).is_err());
    }

    #[test]
    fn max_connections_is_a_positive_count() {
        let parse = |v: &str| {
            Cli::try_parse_from(["dbtap", "digest", "f.pcap", "--max-connections", v]).map(|c| {
                match c.command {
                    Command::Digest(a) => a.input.max_connections,
                    _ => 0,
                }
            })
        };
        assert_eq!(parse("100").ok(), Some(100));
        assert!(parse("0").is_err() && parse("-1").is_err() && parse("x").is_err());
        let default = Cli::try_parse_from(["dbtap", "events", "f.pcap"]).map(|c| match c.command {
            Command::Events(a) => a.input.max_connections,
            _ => 0,
        });
        assert_eq!(default.ok(), Some(flow::DEFAULT_MAX_FLOWS));
    }

    #[test]
    fn listen_addresses_default_to_loopback() {
        let lo = |p| Ok(SocketAddr::from(([127, 0, 0, 1], p)));
        assert_eq!(parse_listen(":9187"), lo(9187));
        assert_eq!(parse_listen("9187"), lo(9187));
        assert_eq!(
            parse_listen("0.0.0.0:80"),
            Ok(SocketAddr::from(([0, 0, 0, 0], 80)))
        );
        assert!(parse_listen("[::1]:9187").is_ok());
        assert!(parse_listen("localhost").is_err());
    }

    #[test]
    fn live_fields_parse_in_snake_case() {
        let cli = Cli::try_parse_from([
            "dbtap",
            "live",
            "-i",
            "lo",
            "--fields",
            "time,pkts_in,mbps_out",
        ]);
        match cli.map(|c| c.command) {
            Ok(Command::Live(a)) => {
                assert_eq!(a.fields, vec![Field::Time, Field::PktsIn, Field::MbpsOut])
            }
            other => panic!("unexpected: {other:?}"),
        }
    }
}
