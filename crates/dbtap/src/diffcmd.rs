//! `dbtap diff BEFORE AFTER`: reads each side (captures, `--mergeable` JSON digests, or two time
//! ranges of one capture), compares them with the `diff` crate and prints the result; the exit
//! status tells CI whether `--fail-on` was met.

use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use aggregate::{AggConfig, Aggregator};
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use diff::Side;
use diff::blocks::Recorder;
use proto::QueryEvent;

use crate::cli::{DigestFormat, GroupingArgs, InputArgs, TextArgs, parse_positive};
use crate::fp::Fingerprinter;
use crate::pipeline::{self, Consumer};

/// Exit status when `--fail-on` is met (0: not met; 1: failure; 2: bad input or usage).
pub const EXIT_FAIL_ON: u8 = 3;

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// BEFORE and AFTER. Each: a capture (several joined by commas are read as one capture, as
    /// `digest` reads rotated files), or JSON digests written by `dbtap digest --format json
    /// --mergeable --limit 0` (several joined by commas add up, spans too). With `--before` and
    /// `--after`: the capture(s) both ranges are taken from.
    #[arg(required = true, value_name = "SIDE")]
    pub sides: Vec<String>,

    /// The time range of the capture that is the before side: `HH:MM[:SS]-HH:MM[:SS]` (UTC,
    /// on the capture's first day) or `+10s-+5m` (from the capture's first packet); several
    /// ranges joined by commas make one side. Requests are placed by the time of their first
    /// byte.
    #[arg(long, value_name = "RANGE", requires = "after")]
    pub before: Option<String>,

    /// The time range of the after side (same forms as `--before`).
    #[arg(long, value_name = "RANGE", requires = "before")]
    pub after: Option<String>,

    #[arg(long, value_enum, default_value_t = DigestFormat::Text)]
    pub format: DigestFormat,

    /// Unchanged groups listed in the text report (0 = all); changed groups are always listed.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: usize,

    /// Smallest relative change called a regression (or improvement), however significant:
    /// a percentage (`10%`) or a fraction (`0.1`).
    #[arg(long = "min-change", default_value = "10%", value_parser = parse_fraction)]
    pub min_change: f64,

    /// Significance level of every verdict, after the adjustment for many tests.
    #[arg(long, default_value_t = 0.05, value_parser = parse_alpha)]
    pub alpha: f64,

    /// Multiple-testing adjustment over all groups and metrics: Benjamini-Hochberg (false
    /// discovery rate), Holm (family-wise error rate) or none.
    #[arg(long, value_enum, default_value_t = AdjustArg::Bh)]
    pub adjust: AdjustArg,

    /// Latency tests need this many timed events on each side.
    #[arg(long = "min-samples", default_value_t = 10, value_name = "N")]
    pub min_samples: u64,

    /// Exit with status 3 when a group regressed (`regression`), a group is new (`new`), or
    /// a group regressed, is new or is gone (`any`).
    #[arg(long = "fail-on", value_enum, value_name = "WHAT")]
    pub fail_on: Option<FailOn>,

    /// A server port, besides the protocols' default ports (as `digest --port`). Repeatable.
    #[arg(long = "port", value_name = "N")]
    pub ports: Vec<u16>,

    /// A server address. Repeatable.
    #[arg(long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<SocketAddr>,

    #[command(flatten)]
    pub grouping: GroupingArgs,

    /// Connections tracked at once (see `digest --help`).
    #[arg(long = "max-connections", value_name = "N", default_value_t = flow::DEFAULT_MAX_FLOWS, value_parser = parse_positive)]
    pub max_connections: usize,

    #[command(flatten)]
    pub text: TextArgs,

    /// Never show a progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdjustArg {
    Bh,
    Holm,
    None,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOn {
    Regression,
    New,
    Any,
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let (t, scale) = match s.trim().strip_suffix('%') {
        Some(p) => (p, 100.0),
        None => (s.trim(), 1.0),
    };
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v / scale),
        _ => Err(format!("invalid change '{s}' (expected e.g. 10% or 0.1)")),
    }
}

fn parse_alpha(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!(
            "invalid level '{s}' (expected a number between 0 and 1)"
        )),
    }
}

impl DiffArgs {
    fn input(&self, files: Vec<PathBuf>) -> InputArgs {
        InputArgs {
            files,
            ports: self.ports.clone(),
            servers: self.servers.clone(),
            grouping: self.grouping.clone(),
            max_connections: self.max_connections,
            text: self.text.clone(),
            quiet: self.quiet,
            time: Default::default(),
        }
    }

    fn settings(&self) -> diff::Settings {
        diff::Settings {
            alpha: self.alpha,
            adjust: match self.adjust {
                AdjustArg::Bh => diff::stats::Adjust::Bh,
                AdjustArg::Holm => diff::stats::Adjust::Holm,
                AdjustArg::None => diff::stats::Adjust::None,
            },
            min_change: self.min_change,
            min_samples: self.min_samples,
        }
    }
}

fn new_aggregator() -> Aggregator {
    Aggregator::new(AggConfig {
        keep_examples: false,
        ..AggConfig::default()
    })
}

/// True when the file starts (after white space) with `{`: a JSON digest, not a capture.
fn is_json(path: &Path) -> Result<bool> {
    use std::io::Read;
    if path == Path::new("-") {
        return Ok(false);
    }
    let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut buf = [0u8; 64];
    let n = f.read(&mut buf)?;
    Ok(buf
        .get(..n)
        .unwrap_or_default()
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        == Some(&b'{'))
}

/// One side given as a comma-separated list of captures or of JSON digests.
fn load_side(args: &DiffArgs, spec: &str) -> Result<Side> {
    let paths: Vec<PathBuf> = spec.split(',').map(PathBuf::from).collect();
    let json: Vec<bool> = paths.iter().map(|p| is_json(p)).collect::<Result<_>>()?;
    if json.iter().all(|&j| j) {
        let mut side: Option<Side> = None;
        for p in &paths {
            let text = std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?;
            let s = Side::from_json(&p.display().to_string(), &text)
                .with_context(|| format!("{}", p.display()))?;
            match &mut side {
                Some(acc) => acc.merge(&s),
                None => side = Some(s),
            }
        }
        return side.context("empty side");
    }
    if json.iter().any(|&j| j) {
        bail!("{spec}: a side is either captures or JSON digests, not both");
    }
    let mut consumer =
        crate::DigestConsumer::new(Fingerprinter::from_args(&args.grouping), new_aggregator());
    consumer.recorder = Some(Recorder::default());
    let (consumer, health) = pipeline::run(
        &paths,
        &crate::settings(&args.input(paths.clone())),
        consumer,
    )?;
    crate::warn(&health);
    let blocks = consumer.recorder.and_then(|r| r.blocks).unwrap_or_default();
    let agg = &consumer.agg;
    let span = report::span_ns(agg, &health);
    Ok(Side::from_aggregator(
        spec,
        agg,
        span,
        health.is_complete(),
        blocks,
    ))
}

/// Routes each event to the side one of whose ranges holds its start.
struct SplitConsumer {
    fp: Fingerprinter,
    ranges: [Vec<(u64, u64)>; 2],
    aggs: [Aggregator; 2],
    blocks: [Recorder; 2],
}

impl Consumer for SplitConsumer {
    fn event(&mut self, ev: QueryEvent) {
        let sides = self.ranges.iter().zip(self.aggs.iter_mut());
        for ((r, agg), b) in sides.zip(self.blocks.iter_mut()) {
            if r.iter().any(|r| ev.start_ns >= r.0 && ev.start_ns < r.1) && self.fp.add_to(agg, &ev)
            {
                b.record(ev.start_ns, ev.service_ns());
            }
        }
    }
}

/// Both sides from time ranges of one capture.
fn load_ranges(args: &DiffArgs, before: &str, after: &str) -> Result<(Side, Side)> {
    let paths: Vec<PathBuf> = args
        .sides
        .iter()
        .flat_map(|s| s.split(','))
        .map(PathBuf::from)
        .collect();
    let first = paths.first().context("no capture given")?;
    if first == Path::new("-") {
        bail!("--before/--after need a capture file, not standard input");
    }
    let parse = |list: &str| -> Result<Vec<crate::timespec::TimeRange>> {
        list.split(',')
            .map(|r| crate::timespec::parse_range(r).map_err(anyhow::Error::msg))
            .collect()
    };
    let given = [parse(before)?, parse(after)?];
    let to_end = given.iter().flatten().any(|r| r.needs_end());
    let bounds =
        crate::selection::capture_bounds(&paths, to_end)?.context("the capture holds no packet")?;
    let start = bounds.first_ns;
    let ranges = given.map(|side| {
        side.iter()
            .map(|r| {
                let w = r.resolve(bounds);
                (w.from_ns, w.to_ns)
            })
            .collect::<Vec<_>>()
    });
    let consumer = SplitConsumer {
        fp: Fingerprinter::from_args(&args.grouping),
        ranges: ranges.clone(),
        aggs: [new_aggregator(), new_aggregator()],
        blocks: Default::default(),
    };
    let (consumer, health) = pipeline::run(
        &paths,
        &crate::settings(&args.input(paths.clone())),
        consumer,
    )?;
    crate::warn(&health);
    let (first_ts, last_ts) = (
        health.first_ts_ns.unwrap_or(start),
        health.last_ts_ns.unwrap_or(start),
    );
    let [ab, aa] = consumer.aggs;
    let [bb, ba] = consumer.blocks.map(|r| r.blocks.unwrap_or_default());
    let side = |agg: &Aggregator, r: &[(u64, u64)], text: &str, blocks| {
        let span = r
            .iter()
            .map(|r| r.1.min(last_ts).saturating_sub(r.0.max(first_ts)))
            .sum();
        Side::from_aggregator(text, agg, Some(span), health.is_complete(), blocks)
    };
    Ok((
        side(&ab, &ranges[0], before, bb),
        side(&aa, &ranges[1], after, ba),
    ))
}

/// Runs `dbtap diff`; true when `--fail-on` is met.
pub fn run(args: DiffArgs) -> Result<bool> {
    let (before, after) = match (&args.before, &args.after) {
        (Some(b), Some(a)) => load_ranges(&args, b, a)?,
        _ => {
            let [b, a] = args.sides.as_slice() else {
                bail!(
                    "dbtap diff needs two sides, BEFORE and AFTER (or --before and --after ranges of one capture)"
                );
            };
            (load_side(&args, b)?, load_side(&args, a)?)
        }
    };
    let d = diff::compare(&before, &after, &args.settings());
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match args.format {
        DigestFormat::Text => {
            let limit = if args.limit == 0 {
                usize::MAX
            } else {
                args.limit
            };
            diff::render::text(&d, limit, &mut out)?
        }
        DigestFormat::Json => diff::render::json(&d, &mut out)?,
    }
    out.flush()?;
    let s = &d.summary;
    Ok(match args.fail_on {
        None => false,
        Some(FailOn::Regression) => s.regressed > 0,
        Some(FailOn::New) => s.new > 0,
        Some(FailOn::Any) => s.regressed + s.new + s.gone > 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(a: &[&str]) -> Result<DiffArgs, clap::Error> {
        Cli::try_parse_from([&["dbtap", "diff"][..], a].concat()).map(|c| match c.command {
            Command::Diff(d) => d,
            _ => unreachable!("dbtap diff parses as Diff"),
        })
    }

    #[test]
    fn diff_options() {
        let d = args(&["a.pcap", "b.json"]).unwrap();
        assert_eq!(d.sides, ["a.pcap", "b.json"]);
        assert_eq!((d.min_change, d.alpha, d.fail_on), (0.1, 0.05, None));
        let d = args(&["a", "b", "--min-change", "25%", "--fail-on", "new"]).unwrap();
        assert_eq!((d.min_change, d.fail_on), (0.25, Some(FailOn::New)));
        assert_eq!(
            args(&["a", "b", "--min-change", "0.2"]).unwrap().min_change,
            0.2
        );
        assert!(args(&["a", "b", "--min-change", "lots"]).is_err());
        assert!(args(&["a", "b", "--alpha", "1.5"]).is_err());
        assert!(
            args(&["a", "--before", "+0-+1"]).is_err(),
            "--before needs --after"
        );
        assert!(args(&["a", "--before", "+0-+1", "--after", "+1-+2"]).is_ok());
    }
}
