//! The ClickHouse sink's options and glue (`--clickhouse URL`, `dbtap schema clickhouse`):
//! the per-minute bins of the history store (`storefeed::MinuteBins`) turned into rows with
//! the agent's host name and handed to `clickhouse::Sink` (spool, retries, no duplicates).
//! `digest --clickhouse` bins in packet time as `digest --store` does ([`DigestFeed`]);
//! `live --clickhouse` gets every interval's bins in `agent/fleet.rs`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aggregate::{AggConfig, Aggregator};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use proto::QueryEvent;

use crate::cli::FingerprintMode;
use crate::fp::Classified;
use crate::storefeed::{DIGEST_LAG_NS, MinuteBins};

/// The ClickHouse options of `digest` and `live`.
#[derive(Args, Debug, Clone, Default)]
pub struct ClickHouseArgs {
    /// Also send the per-minute rows (as --store keeps them, plus this host's name) to this
    /// ClickHouse server's HTTP interface: http://[USER[:PASSWORD]@]HOST[:PORT][/?database=DB].
    /// Create the tables first: `dbtap schema clickhouse` (docs/clickhouse.md).
    #[arg(long, value_name = "URL")]
    pub clickhouse: Option<String>,

    /// Keep the batches not yet confirmed by ClickHouse in this directory (sent by the next
    /// run if this one stops first); without it they are kept in memory only.
    #[arg(long = "clickhouse-spool", value_name = "DIR", requires = "clickhouse")]
    pub clickhouse_spool: Option<PathBuf>,

    /// Bound on the unsent batches in MiB; past it the oldest batches are dropped (counted).
    #[arg(
        long = "clickhouse-spool-mb",
        default_value_t = 256,
        value_name = "MIB"
    )]
    pub clickhouse_spool_mb: u64,

    /// How long, at the end, dbtap keeps trying to deliver what is unsent.
    #[arg(long = "clickhouse-wait", default_value = "30s", value_name = "DURATION",
          value_parser = crate::cli::parse_duration)]
    pub clickhouse_wait: Duration,

    /// `live`: how often what is held is sent (and at each minute's end). One insert per
    /// agent per interval: for hundreds of agents on one server, 30s or 60s keeps the inserts
    /// (and the parts ClickHouse merges) few.
    #[arg(long = "clickhouse-interval", default_value = "5s", value_name = "DURATION",
          value_parser = crate::cli::parse_duration)]
    pub clickhouse_interval: Duration,

    /// The `host` the rows carry (default: this machine's host name).
    #[arg(long = "host-name", value_name = "NAME")]
    pub host_name: Option<String>,

    #[command(flatten)]
    pub tls: ClickHouseConnArgs,
}

/// Who dbtap is to ClickHouse, and how `https://` URLs are verified.
#[derive(Args, Debug, Clone, Default)]
pub struct ClickHouseConnArgs {
    /// For an https:// ClickHouse URL: trust the certificate authorities of this PEM file
    /// (default: the system's roots).
    #[arg(long = "clickhouse-ca", value_name = "FILE")]
    pub clickhouse_ca: Option<PathBuf>,

    /// The ClickHouse user (instead of the URL's USER).
    #[arg(long = "clickhouse-user", value_name = "NAME")]
    pub clickhouse_user: Option<String>,

    /// The ClickHouse password (instead of the URL's PASSWORD; DBTAP_CLICKHOUSE_PASSWORD or
    /// the config file keep it off the command line).
    #[arg(
        long = "clickhouse-password",
        value_name = "PASSWORD",
        hide_default_value = true
    )]
    pub clickhouse_password: Option<String>,
}

impl ClickHouseConnArgs {
    /// The URL parsed, with the CA file (checked now: a bad file is an error at start) and
    /// the user and password options.
    pub fn url(&self, s: &str) -> Result<clickhouse::Url> {
        let mut url = clickhouse::Url::parse(s)?;
        if self.clickhouse_ca.is_some() && !url.tls {
            anyhow::bail!("--clickhouse-ca is for https:// URLs");
        }
        url.ca.clone_from(&self.clickhouse_ca);
        if let Some(u) = &self.clickhouse_user {
            url.user = Some(u.clone());
        }
        if let Some(p) = &self.clickhouse_password {
            url.password = Some(p.clone());
        }
        if url.tls {
            clickhouse::tls::config(url.ca.as_deref()).map_err(anyhow::Error::msg)?;
        }
        Ok(url)
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else "unknown").
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// A started sink with who it sends as.
pub struct Fleet {
    sink: clickhouse::Sink,
    id: clickhouse::Identity,
    wait: Duration,
    /// `live`: how often what is held is sent.
    pub interval: Duration,
    /// Counts are multiplied by it (`live --sample`).
    sample: u64,
    spooled_to: Option<PathBuf>,
}

impl ClickHouseArgs {
    /// The sink, started (its spool opened), when `--clickhouse` is given.
    pub fn open(&self, sample: u64) -> Result<Option<Fleet>> {
        let Some(url) = &self.clickhouse else {
            return Ok(None);
        };
        let url = self.tls.url(url)?;
        let mut cfg = clickhouse::SinkConfig::new(url);
        cfg.spool_dir = self.clickhouse_spool.clone();
        cfg.spool_max_bytes = self.clickhouse_spool_mb.max(1).saturating_mul(1 << 20);
        let (sink, warnings) = clickhouse::Sink::start(cfg).with_context(|| {
            format!(
                "opening the ClickHouse spool {}",
                self.clickhouse_spool
                    .as_deref()
                    .unwrap_or("-".as_ref())
                    .display()
            )
        })?;
        for w in warnings {
            eprintln!("dbtap: warning: clickhouse: {w}");
        }
        let host = self.host_name.clone().unwrap_or_else(hostname);
        Ok(Some(Fleet {
            sink,
            id: clickhouse::Identity { host },
            wait: self.clickhouse_wait,
            interval: self.clickhouse_interval.max(Duration::from_secs(1)),
            sample,
            spooled_to: self.clickhouse_spool.clone(),
        }))
    }
}

impl Fleet {
    pub fn stats(&self) -> std::sync::Arc<clickhouse::SinkStats> {
        self.sink.stats()
    }

    /// Queues the rows of these minutes (counts scaled by the sample rate).
    pub fn send(&mut self, minutes: Vec<(i64, Aggregator)>) {
        let mut rows = Vec::new();
        for (m, mut agg) in minutes {
            agg.scale(self.sample);
            rows.extend(clickhouse::rows_of(m, &agg, &self.id));
        }
        if rows.is_empty() {
            return;
        }
        if let Err(e) = self.sink.submit(rows) {
            eprintln!("dbtap: error: clickhouse spool: {e}; those rows are dropped");
        }
    }

    /// Delivers what is queued (for at most `--clickhouse-wait`), then says what is left and
    /// prints the sink's counters (one line). Returns false when rows were not delivered.
    pub fn finish(self) -> bool {
        let s = self.sink.finish(Instant::now() + self.wait);
        let mut ok = true;
        if s.spooled_batches > 0 {
            ok = false;
            let whereto = match &self.spooled_to {
                Some(d) => format!("kept in {} for the next run", d.display()),
                None => "lost (no --clickhouse-spool)".to_string(),
            };
            eprintln!(
                "dbtap: error: clickhouse: {} batches not delivered within {}, {whereto}; last error: {}",
                s.spooled_batches,
                humantime::format_duration(self.wait),
                s.last_error.as_deref().unwrap_or("-")
            );
        }
        if s.dropped_batches > 0 || s.partial > 0 {
            ok = false;
            eprintln!(
                "dbtap: warning: clickhouse: {} batches ({} rows) dropped (spool full), {} stored only in part",
                s.dropped_batches, s.dropped_rows, s.partial
            );
        }
        eprintln!(
            "dbtap: clickhouse: {} rows in {} batches delivered; {} failed attempts, {} batches found already stored, {} corrupt spool files",
            s.rows_sent, s.batches_sent, s.retries, s.already_stored, s.corrupt
        );
        ok
    }
}

/// `digest --clickhouse`: minutes handed out in packet time, as `digest --store` does.
pub struct DigestFeed {
    bins: MinuteBins,
    fleet: Fleet,
}

impl DigestFeed {
    pub fn new(fleet: Fleet) -> Self {
        DigestFeed {
            bins: MinuteBins::new(
                AggConfig {
                    keep_examples: false,
                    ..AggConfig::default()
                },
                DIGEST_LAG_NS,
            ),
            fleet,
        }
    }

    /// See `MinuteBins::event_in`.
    pub fn event_in(&mut self, ev: &QueryEvent, mode: FingerprintMode, c: &Classified<'_>) {
        self.bins.event_in(ev, mode, c);
    }

    /// The packet clock: sends the minutes that are complete.
    pub fn packet(&mut self, ts_ns: u64) {
        self.bins.packet(ts_ns);
        let ready = self.bins.ready();
        if !ready.is_empty() {
            self.fleet.send(ready);
        }
    }

    /// Sends the rest and waits for delivery; an error when rows were not delivered.
    pub fn finish(mut self) -> Result<()> {
        let rest = self.bins.take_all();
        self.fleet.send(rest);
        if !self.fleet.finish() {
            anyhow::bail!("not every row reached ClickHouse");
        }
        Ok(())
    }
}

/// `dbtap schema` groups nothing.
pub static NO_GROUPING: crate::cli::GroupingArgs = crate::cli::GroupingArgs {
    fingerprint: FingerprintMode::Dbtap,
    key_patterns: false,
    keep_key_order: false,
    group_by: None,
    where_: Vec::new(),
};

/// What `dbtap schema` prints.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaTarget {
    /// The ClickHouse tables of `--clickhouse` (ClickHouse 18.16 and later).
    Clickhouse,
}

#[derive(Args, Debug)]
pub struct SchemaArgs {
    pub target: SchemaTarget,

    /// Run the statements on this ClickHouse server (http:// or https://) instead of
    /// printing them.
    #[arg(long, value_name = "URL")]
    pub apply: Option<String>,

    #[command(flatten)]
    pub tls: ClickHouseConnArgs,
}

/// `dbtap schema clickhouse [--apply URL]`.
pub fn schema(args: &SchemaArgs) -> Result<()> {
    let SchemaTarget::Clickhouse = args.target;
    let ddl = clickhouse::schema::ddl();
    let Some(url) = &args.apply else {
        for s in ddl {
            println!("{s};\n");
        }
        return Ok(());
    };
    let url = args.tls.url(url)?;
    for s in ddl {
        clickhouse::http::post(&url, &[], s.as_bytes(), clickhouse::Timeouts::default())
            .with_context(|| format!("ClickHouse {}", url.display()))?;
    }
    Ok(())
}

/// `dbtap ui --clickhouse URL`: the web UI over the fleet's rows.
#[derive(Args, Debug, Clone, Default)]
pub struct FleetUiArgs {
    /// Browse the rows the agents sent to this ClickHouse (`--clickhouse` of digest and live),
    /// read into memory and followed (new rows read every --clickhouse-refresh): the hosts'
    /// rows merged, or one host's with the UI's host filter; the server, database, user and
    /// client filters work as on one host.
    #[arg(long, value_name = "URL", conflicts_with = "store")]
    pub clickhouse: Option<String>,

    /// Only these agents' rows (the `host` column). Repeatable.
    #[arg(long = "clickhouse-host", value_name = "NAME", requires = "clickhouse")]
    pub clickhouse_host: Vec<String>,

    /// The window: how far back from the newest row to read (it moves with the newest row).
    #[arg(long = "clickhouse-range", default_value = "7d", value_name = "DURATION",
          value_parser = crate::cli::parse_duration)]
    pub clickhouse_range: Duration,

    /// How often to read the rows inserted since the last read (0s: only at start and on
    /// GET /api/refresh).
    #[arg(long = "clickhouse-refresh", default_value = "10s", value_name = "DURATION",
          value_parser = crate::cli::parse_duration)]
    pub clickhouse_refresh: Duration,

    /// Most rows held in memory; past it the oldest minutes are left out (counted in
    /// /api/meta's `fleet`).
    #[arg(
        long = "clickhouse-max-rows",
        default_value_t = 2_000_000,
        value_name = "N"
    )]
    pub clickhouse_max_rows: u64,

    #[command(flatten)]
    pub tls: ClickHouseConnArgs,
}

/// The fleet's rows in memory (all hosts merged, and one store per host), followed.
pub fn load_ui(args: &FleetUiArgs) -> Result<Option<std::sync::Arc<crate::fleetui::FleetUi>>> {
    let Some(url) = &args.clickhouse else {
        return Ok(None);
    };
    let url = args.tls.url(url)?;
    let ui = crate::fleetui::FleetUi::start(url, args)?;
    Ok(Some(ui))
}

/// Rows ordered by minute into the store, a minute at a time.
pub fn import(st: &mut store::Store, rows: &[&clickhouse::Row]) -> Result<()> {
    for minute in rows.chunk_by(|a, b| a.ts == b.ts) {
        let Some(first) = minute.first() else {
            continue;
        };
        let m: Vec<store::ImportRow> = minute.iter().map(|r| import_row(r)).collect();
        st.import_minute(i64::from(first.ts) / 60 * 60, &m)?;
    }
    Ok(())
}

fn import_row(r: &clickhouse::Row) -> store::ImportRow {
    store::ImportRow {
        protocol: r.protocol.clone(),
        command: r.command.clone(),
        qid: r.query_id.clone(),
        fingerprint: r.fingerprint.clone(),
        server: r.server.clone(),
        client: r.client.clone(),
        db: r.db.clone(),
        user: r.user.clone(),
        count: r.count,
        ok: r.ok,
        errors: r.errors,
        no_response: r.no_response,
        incomplete: r.incomplete,
        bytes_in: r.bytes_in,
        bytes_out: r.bytes_out,
        rows_sent: r.rows_sent,
        rows_affected: r.rows_affected,
        service: r.service.state(),
        latency: r.latency.state(),
        errors_by_code: r
            .error_codes
            .iter()
            .copied()
            .zip(r.error_counts.iter().copied())
            .collect(),
    }
}
