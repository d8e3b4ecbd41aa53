//! dbtap: database traffic digests from the wire. Thin glue: command line, pipeline, output.

#![forbid(unsafe_code)]

mod agent;
mod cli;
mod config;
mod diffcmd;
mod fleet;
mod fleetui;
mod fp;
mod parallel;
mod pipeline;
mod replaycmd;
mod rotate;
mod selection;
mod service;
mod storefeed;
mod timeline;
mod timespec;
mod uicmd;

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use aggregate::{AggConfig, Aggregator};
use proto::QueryEvent;
use report::CaptureHealth;

use crate::cli::{Cli, Command, DigestArgs, DigestFormat, EventsArgs, InputArgs};
use crate::fp::Fingerprinter;
use crate::pipeline::{Consumer, Settings};

/// Exit codes: 0 success (possibly with warnings about partial input), 1 unexpected failure,
/// 2 bad input or usage (clap's own code for usage errors), 3 `dbtap diff --fail-on` met.
const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    // The command line, with DBTAP_* variables and the config file (config.rs).
    let cli: Cli = match config::cli() {
        Ok(Some(cli)) => cli,
        Ok(None) => return ExitCode::SUCCESS, // `dbtap completions` / `dbtap man`
        Err(e) => {
            eprintln!("dbtap: error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if let Err(e) = cli.command.grouping().scope() {
        eprintln!("dbtap: error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let result = match cli.command {
        Command::Digest(args) => digest(args),
        Command::Events(args) => events(args),
        Command::Live(args) => agent::live(args),
        Command::Top(args) => agent::top(args),
        Command::Diff(args) => match diffcmd::run(args) {
            Ok(true) => return ExitCode::from(diffcmd::EXIT_FAIL_ON),
            other => other.map(|_| ()),
        },
        Command::Ui(args) => uicmd::run(args),
        Command::Replay(args) => replaycmd::run(args),
        Command::Schema(args) => fleet::schema(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed pipe (`dbtap events f | head`) is not an error worth a message.
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::BrokenPipe
            {
                return ExitCode::SUCCESS;
            }
            // A capture error's message already names the file and the cause in one line.
            if let Some(c) = e.downcast_ref::<capture::CaptureError>() {
                eprintln!("dbtap: error: {c}");
                ExitCode::from(EXIT_BAD_INPUT)
            } else if let Some(l) = e.downcast_ref::<::live::LiveError>() {
                // No privilege, no such interface, a filter that does not compile.
                eprintln!("dbtap: error: {l}");
                ExitCode::from(EXIT_BAD_INPUT)
            } else {
                eprintln!("dbtap: error: {e:#}");
                ExitCode::FAILURE
            }
        }
    }
}

fn settings(input: &InputArgs) -> Settings {
    // A port named on the command line is sniffed, unless it is a default port.
    let mut s = Settings {
        max_connections: input.max_connections,
        ..Settings::new(&input.ports, &input.servers, !input.quiet)
    };
    s.session.text_budget = proto::kit::TextBudget::new(input.text.max_text_total);
    s
}

pub(crate) fn warn(health: &CaptureHealth) {
    for w in &health.warnings {
        eprintln!("dbtap: warning: {w}");
    }
}

/// Fingerprints and aggregates every event (of the requests that started in `window`), and
/// feeds the timeline when there is one.
pub(crate) struct DigestConsumer {
    fp: Fingerprinter,
    agg: Aggregator,
    window: timespec::Window,
    timeline: Option<timeline::Timeline<BufWriter<std::io::Stdout>>>,
    /// `--mergeable` (and the capture sides of `dbtap diff`): the time blocks of the events
    /// counted.
    recorder: Option<diff::blocks::Recorder>,
    /// `--store`: the per-minute bins and the store they go to.
    pub(crate) store: Option<storefeed::StoreSink>,
    /// `--clickhouse`: the per-minute bins and the sink they go to.
    pub(crate) fleet: Option<fleet::DigestFeed>,
}

impl DigestConsumer {
    /// Every event of the capture, no timeline, no time blocks.
    pub(crate) fn new(fp: Fingerprinter, agg: Aggregator) -> Self {
        DigestConsumer {
            fp,
            agg,
            window: timespec::Window::ALL,
            timeline: None,
            recorder: None,
            store: None,
            fleet: None,
        }
    }
}

impl Consumer for DigestConsumer {
    fn event(&mut self, ev: QueryEvent) {
        self.event_ref(&ev);
    }

    const BY_REF: bool = true;

    fn event_ref(&mut self, ev: &QueryEvent) {
        if !self.window.contains(ev.start_ns) {
            return;
        }
        let store = &mut self.store;
        let fleet = &mut self.fleet;
        let admitted = self.fp.add_to_then(&mut self.agg, ev, |mode, c| {
            if let Some(s) = store {
                s.event_in(ev, mode, c);
            }
            if let Some(f) = fleet {
                f.event_in(ev, mode, c);
            }
        });
        if !admitted {
            return; // left out by --where
        }
        if let Some(r) = &mut self.recorder {
            r.record(ev.start_ns, ev.service_ns());
        }
        if let Some(t) = &mut self.timeline {
            t.event(&mut self.fp, ev);
        }
    }

    fn segment(&mut self, src: std::net::SocketAddr, dst: std::net::SocketAddr, len: usize) {
        if let Some(t) = &mut self.timeline {
            t.segment(src, dst, len);
        }
    }

    fn packet(&mut self, ts_ns: u64) {
        if let Some(s) = &mut self.store {
            s.packet(ts_ns);
        }
        if let Some(f) = &mut self.fleet {
            f.packet(ts_ns);
        }
        if let Some(t) = &mut self.timeline {
            t.packet(ts_ns);
        }
    }

    fn close(&mut self, conn: u64, ts_ns: u64) {
        self.agg.close_conn(conn, ts_ns);
    }
}

/// The digest's consumer without timeline, store or sink.
fn plain_consumer(args: &DigestArgs, window: timespec::Window) -> DigestConsumer {
    let mut consumer = DigestConsumer {
        fp: Fingerprinter::from_args(&args.input.grouping),
        agg: Aggregator::new(AggConfig {
            keep_examples: !args.report.no_examples,
            ..AggConfig::default()
        }),
        window,
        timeline: None,
        // --mergeable: also the time blocks `dbtap diff` needs (diffcmd.rs).
        recorder: args.mergeable.then(diff::blocks::Recorder::default),
        store: None,
        fleet: None,
    };
    consumer
        .agg
        .track_transactions(aggregate::txn::TxnConfig::default());
    consumer
}

fn digest(args: DigestArgs) -> anyhow::Result<()> {
    let mut settings = settings(&args.input);
    // Bound values are shown only in examples.
    settings.session.keep_params = !args.report.no_examples;
    let sel = selection::Selection::resolve(args.input.time.range(), &args.input.files)?;
    let window = sel.as_ref().map_or(timespec::Window::ALL, |s| s.window);
    let text = args.report.format == DigestFormat::Text;
    let timeline = args.timeline.timeline.map(|iv| {
        timeline::Timeline::new(
            &args.timeline,
            iv,
            window,
            settings.ports.iter().map(|(p, _)| *p).collect(),
            settings.servers.clone(),
            text.then(|| BufWriter::new(std::io::stdout())),
        )
    });
    let mut consumer = plain_consumer(&args, window);
    consumer.timeline = timeline;
    let examples = !args.report.no_examples;
    consumer.store = args
        .store
        .open(examples)?
        .map(|s| storefeed::StoreSink::new(examples, s));
    consumer.fleet = args.clickhouse.open(1)?.map(fleet::DigestFeed::new);
    let fresh = || plain_consumer(&args, window);
    let (mut consumer, mut health) = parallel::digest(&args, &settings, consumer, fresh)?;
    let series = consumer.timeline.take().map(|t| t.finish()).transpose()?;
    if let Some(sink) = consumer.store.take() {
        sink.finish()?;
    }
    // Delivered before the report; a failure to deliver fails the run after it.
    let fleet = consumer.fleet.take().map(fleet::DigestFeed::finish);
    health.protocol.unanswered = consumer.agg.totals().stats.no_response;
    if let Some(s) = &sel {
        s.clip(&mut health);
    }
    warn(&health);
    let opts = report::ReportOptions {
        selected: sel.as_ref().map(selection::Selection::describe),
        ..args.report.options()
    };
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let agg = &consumer.agg;
    match args.report.format {
        DigestFormat::Text => {
            if series.is_some() {
                writeln!(out)?; // after the timeline's lines
            }
            report::text::render(agg, &health, &opts, &mut out)?
        }
        DigestFormat::Json if sel.is_none() && series.is_none() && !args.mergeable => {
            report::json::render(agg, &health, &opts, &mut out)?
        }
        DigestFormat::Json => {
            let mut report = report::json::build(agg, &health, &opts);
            if args.mergeable {
                let blocks = consumer.recorder.take().and_then(|r| r.blocks);
                report::mergeable::attach(&mut report, agg, &opts, blocks.as_ref().map(Into::into));
            }
            let doc = selection::Doc {
                report: &report,
                time_range: sel.as_ref().map(selection::Selection::json),
                timeline: series,
            };
            serde_json::to_writer_pretty(&mut out, &doc)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    fleet.transpose()?;
    Ok(())
}

/// Query IDs `dbtap events` remembers; past it the memo starts over.
const EVENT_IDS_MAX: usize = 1 << 16;

/// Writes one NDJSON line per event as it comes.
struct EventsConsumer<W: Write> {
    fp: Fingerprinter,
    out: W,
    keep_text: bool,
    /// Query ID of each group, and the text lines name when it is not the fingerprint.
    ids: std::collections::HashMap<aggregate::GroupKey, (String, Option<String>)>,
    error: Option<std::io::Error>,
    window: timespec::Window,
}

impl<W: Write> Consumer for EventsConsumer<W> {
    fn event(&mut self, mut ev: QueryEvent) {
        if self.error.is_some() || !self.window.contains(ev.start_ns) {
            return;
        }
        // Disjoint fields: the group borrows the fingerprinter while the ids and the writer are
        // used, so the fingerprint text is not copied per event.
        let Self {
            fp,
            ids,
            out,
            keep_text,
            ..
        } = self;
        let (mode, dims) = (fp.mode(), fp.dims());
        let Some(c) = fp.classify(&ev) else {
            return;
        };
        if ids.len() >= EVENT_IDS_MAX && !ids.contains_key(&c.key) {
            // Grouped by client host (or another wide dimension): the ids are recomputed.
            ids.clear();
        }
        let (id, label) = ids.entry(c.key).or_insert_with(|| {
            let (text, id, values) = crate::fp::describe(mode, dims, &ev, &c);
            // Grouped without the fingerprint, the line names the group's dimension values.
            (id, values.filter(|_| text != c.text).map(|_| text))
        });
        let (id, text) = (id.as_str(), label.as_deref().unwrap_or(c.text));
        if !*keep_text {
            ev.text = None;
        }
        if let Err(e) = report::events::write_ndjson(&ev, text, id, out) {
            self.error = Some(e);
        }
    }
}

fn events(args: EventsArgs) -> anyhow::Result<()> {
    let mut settings = settings(&args.input);
    // NDJSON events carry no bound values.
    settings.session.keep_params = false;
    let sel = selection::Selection::resolve(args.input.time.range(), &args.input.files)?;
    let stdout = std::io::stdout();
    let consumer = EventsConsumer {
        window: sel.map_or(timespec::Window::ALL, |s| s.window),
        fp: Fingerprinter::from_args(&args.input.grouping),
        out: BufWriter::new(stdout.lock()),
        keep_text: args.text,
        ids: Default::default(),
        error: None,
    };
    let (mut consumer, health) = pipeline::run(&args.input.files, &settings, consumer)?;
    if let Some(e) = consumer.error.take() {
        return Err(e.into());
    }
    consumer.out.flush()?;
    warn(&health);
    Ok(())
}
