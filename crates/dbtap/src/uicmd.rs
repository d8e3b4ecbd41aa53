//! `dbtap ui`: the web UI over a history store (`--store PATH`, read only) or over captures
//! digested into an in-memory store at start; and the store and web options `digest`, `live`
//! and `ui` share (`--store`, retention, size bound, access token).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aggregate::{AggConfig, Aggregator};
use anyhow::{Context, Result};
use clap::Args;

use crate::cli::{GroupingArgs, TextArgs, parse_listen};
use crate::fp::Fingerprinter;
use crate::storefeed::StoreSink;

/// The history store options of `digest` and `live`.
#[derive(Args, Debug, Clone, Default)]
pub struct StoreArgs {
    /// Also write per-minute history (one row per minute per query group and server, client
    /// host, database, user) into this SQLite file, created if missing; browse it with
    /// `dbtap ui --store PATH`. For a service: /var/lib/dbtap/history.db.
    #[arg(long, value_name = "PATH")]
    pub store: Option<PathBuf>,

    /// How long the store keeps minute, hour and day rows: MINUTES,HOURS,DAYS as durations.
    #[arg(
        long = "store-retention",
        value_name = "M,H,D",
        default_value = "7d,90d,730d",
        value_parser = parse_retention
    )]
    pub store_retention: store::Retention,

    /// Bound on the store file's size in MiB (0: unbounded); past it the oldest minute rows go
    /// first, then hours.
    #[arg(long = "store-max-mb", default_value_t = 1024, value_name = "MIB")]
    pub store_max_mb: u64,
}

impl StoreArgs {
    /// The store's configuration; `examples` as for the other outputs.
    pub fn config(&self, examples: bool) -> store::StoreConfig {
        store::StoreConfig {
            retention: self.store_retention,
            max_bytes: (self.store_max_mb > 0).then(|| self.store_max_mb.saturating_mul(1 << 20)),
            examples,
        }
    }

    /// Opens (creating) the `--store` file, if one was given.
    pub fn open(&self, examples: bool) -> Result<Option<store::Store>> {
        match &self.store {
            Some(p) => Ok(Some(open_store(p, self.config(examples))?)),
            None => Ok(None),
        }
    }
}

fn open_store(p: &Path, cfg: store::StoreConfig) -> Result<store::Store> {
    store::Store::open(p, cfg).with_context(|| format!("--store {}", p.display()))
}

/// `7d,90d,730d`: the retention of minute, hour and day rows.
pub fn parse_retention(s: &str) -> Result<store::Retention, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let [m, h, d] = parts.as_slice() else {
        return Err(format!(
            "invalid retention '{s}': expected three durations MINUTES,HOURS,DAYS such as 7d,90d,730d"
        ));
    };
    let one = |v: &str| {
        humantime::parse_duration(v)
            .map_err(|e| format!("invalid retention '{v}': {e}"))
            .and_then(|d| {
                if d.is_zero() {
                    Err(format!("invalid retention '{v}': must be more than 0"))
                } else {
                    Ok(d)
                }
            })
    };
    Ok(store::Retention {
        minutes: one(m)?,
        hours: one(h)?,
        days: one(d)?,
    })
}

/// The web server options of `live` and `ui`.
#[derive(Args, Debug, Clone, Default)]
pub struct WebArgs {
    /// Require this access token (the file's first line) on every page and API call:
    /// `Authorization: Bearer T` or `?token=T`. Also taken from the environment variable
    /// DBTAP_UI_TOKEN.
    #[arg(long = "token-file", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

impl WebArgs {
    pub fn token(&self) -> Result<Option<String>> {
        web::load_token(self.token_file.as_deref()).map_err(anyhow::Error::msg)
    }
}

#[derive(Args, Debug)]
pub struct UiArgs {
    /// Captures to digest into an in-memory store and browse (pcap, pcapng, gzip); or none,
    /// with --store.
    #[arg(
        value_name = "FILE",
        required_unless_present_any = ["store", "clickhouse"],
        conflicts_with_all = ["store", "clickhouse"]
    )]
    pub files: Vec<PathBuf>,

    /// Browse this history store (read only).
    #[arg(long, value_name = "PATH")]
    pub store: Option<PathBuf>,

    /// A second store (read only) the Compare page can set against --store's.
    #[arg(long = "compare-store", value_name = "PATH", requires = "store")]
    pub compare_store: Option<PathBuf>,

    /// Where to serve the UI: HOST:PORT or :PORT (loopback). Give 0.0.0.0:PORT explicitly to
    /// serve other hosts.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7070", value_parser = parse_listen)]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub web: WebArgs,

    #[command(flatten)]
    pub fleet: crate::fleet::FleetUiArgs,

    // The default ports are the registered protocols'.
    #[arg(long = "port", value_name = "N", help = crate::cli::port_help("Repeatable"))]
    pub ports: Vec<u16>,

    /// A server address. Repeatable.
    #[arg(long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<SocketAddr>,

    #[command(flatten)]
    pub grouping: GroupingArgs,

    #[command(flatten)]
    pub text: TextArgs,

    /// Keep no query examples (their text and bound values).
    #[arg(long)]
    pub no_examples: bool,
}

pub fn run(args: UiArgs) -> Result<()> {
    let token = args.web.token()?;
    let mut store_b = None;
    let fleet = crate::fleet::load_ui(&args.fleet)?;
    let fleet_hosts = fleet
        .as_ref()
        .map(|f| web::FleetView::sources(f.as_ref()).len());
    let (store, mode, sources, examples) = match (&args.store, &fleet) {
        (_, Some(f)) => {
            let sources = web::FleetView::sources(f.as_ref());
            (f.store(), web::Mode::Captures, sources, false)
        }
        (Some(p), None) => {
            let s = store::Store::open_read_only(p)
                .with_context(|| format!("--store {}", p.display()))?;
            let mut sources = Vec::new();
            if let Some(pb) = &args.compare_store {
                let b = store::Store::open_read_only(pb)
                    .with_context(|| format!("--compare-store {}", pb.display()))?;
                sources.push(store_source(p, &s, "a")?);
                sources.push(store_source(pb, &b, "b")?);
                store_b = Some(Arc::new(Mutex::new(b)));
            }
            (Arc::new(Mutex::new(s)), web::Mode::Store, sources, true)
        }
        (None, None) => {
            let (s, sources) = digest_captures(&args)?;
            let s = Arc::new(Mutex::new(s));
            (s, web::Mode::Captures, sources, !args.no_examples)
        }
    };
    let what = match (&args.store, fleet_hosts) {
        (_, Some(n)) => format!("{n} host(s) from ClickHouse"),
        (Some(p), None) => match &args.compare_store {
            Some(pb) => format!("{} and {}", p.display(), pb.display()),
            None => p.display().to_string(),
        },
        (None, None) => format!("{} capture(s)", sources.len()),
    };
    let app = web::App {
        store,
        store_b,
        mode,
        sources,
        examples,
        live: None,
        metrics: None,
        token: token.clone(),
        fleet: fleet.map(|f| f as Arc<dyn web::FleetView>),
    };
    let server = web::serve(args.listen, app)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handler")?;
    }
    eprintln!(
        "dbtap: ui on http://{}/ ({what}{}); Ctrl-C to stop",
        server.local_addr(),
        if token.is_some() {
            ", token required"
        } else {
            ""
        }
    );
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    Ok(())
}

/// A store of `--store A --compare-store B` as a source: its file name and span.
fn store_source(p: &Path, s: &store::Store, which: &'static str) -> Result<web::Source> {
    let span = s
        .span()
        .with_context(|| format!("reading {}", p.display()))?;
    let (from, to) = span.unwrap_or((0, 0));
    Ok(web::Source {
        label: p.display().to_string(),
        from,
        to,
        store: Some(which),
    })
}

/// Every capture through the pipeline into one in-memory store; one source per capture with
/// the minutes its requests started in.
fn digest_captures(args: &UiArgs) -> Result<(store::Store, Vec<web::Source>)> {
    let examples = !args.no_examples;
    let defaults = StoreArgs {
        store: None,
        store_retention: store::Retention::default(),
        store_max_mb: 0,
    };
    let mut store = store::Store::memory(defaults.config(examples))?;
    let mut settings = crate::pipeline::Settings::new(&args.ports, &args.servers, true);
    settings.session.text_budget = proto::kit::TextBudget::new(args.text.max_text_total);
    settings.session.keep_params = examples;
    let mut sources = Vec::new();
    for f in &args.files {
        let mut consumer = crate::DigestConsumer::new(
            Fingerprinter::from_args(&args.grouping),
            Aggregator::new(AggConfig {
                keep_examples: examples,
                ..AggConfig::default()
            }),
        );
        consumer.store = Some(StoreSink::new(examples, store));
        let (mut consumer, health) =
            crate::pipeline::run(std::slice::from_ref(f), &settings, consumer)?;
        crate::warn(&health);
        let sink = consumer.store.take().context("the store went missing")?;
        let (s, _) = sink.finish()?;
        store = s;
        let minute = |ns: Option<u64>| ns.map(crate::storefeed::minute_of);
        let (from, to) = (minute(health.first_ts_ns), minute(health.last_ts_ns));
        sources.push(web::Source {
            label: f.display().to_string(),
            from: from.unwrap_or(0),
            to: to.map_or(0, |t| t + 60),
            store: None,
        });
    }
    Ok((store, sources))
}
