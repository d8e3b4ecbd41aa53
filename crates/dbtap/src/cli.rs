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
}

#[derive(Args, Debug, Clone)]
pub struct InputArgs {
    /// Capture files (pcap, pcapng, optionally gzip-compressed); `-` reads standard input.
    /// Several files are read in order as one capture (e.g. rotated files).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// A server port, in addition to the protocols' default ports (MySQL 3306). Repeatable.
    #[arg(long = "port", value_name = "N")]
    pub ports: Vec<u16>,

    /// A server address. Repeatable.
    #[arg(long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<SocketAddr>,

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

    /// Never show a progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct DigestArgs {
    #[command(flatten)]
    pub input: InputArgs,

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
    Total,
    Count,
    P99,
    Errors,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FingerprintMode {
    Dbtap,
    Pt,
}
