//! dbtap: database traffic digests from the wire. Thin glue: command line, pipeline, output.

#![forbid(unsafe_code)]

mod agent;
mod cli;
mod diffcmd;
mod fp;
mod pipeline;
mod rotate;
mod service;

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use aggregate::{AggConfig, Aggregator};
use clap::Parser;
use proto::QueryEvent;
use report::CaptureHealth;

use crate::cli::{Cli, Command, DigestArgs, DigestFormat, EventsArgs, InputArgs};
use crate::fp::Fingerprinter;
use crate::pipeline::{Consumer, Settings};

/// Exit codes: 0 success (possibly with warnings about partial input), 1 unexpected failure,
/// 2 bad input or usage (clap's own code for usage errors), 3 `dbtap diff --fail-on` met.
const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Digest(args) => digest(args),
        Command::Events(args) => events(args),
        Command::Live(args) => agent::live(args),
        Command::Top(args) => agent::top(args),
        Command::Diff(args) => match diffcmd::run(args) {
            Ok(true) => return ExitCode::from(diffcmd::EXIT_FAIL_ON),
            other => other.map(|_| ()),
        },
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

fn warn(health: &CaptureHealth) {
    for w in &health.warnings {
        eprintln!("dbtap: warning: {w}");
    }
}

/// Fingerprints and aggregates every event.
struct DigestConsumer {
    fp: Fingerprinter,
    agg: Aggregator,
}

impl Consumer for DigestConsumer {
    fn event(&mut self, ev: QueryEvent) {
        self.fp.add_to(&mut self.agg, &ev);
    }
}

fn digest(args: DigestArgs) -> anyhow::Result<()> {
    let settings = settings(&args.input);
    let consumer = DigestConsumer {
        fp: Fingerprinter::from_args(&args.input.grouping),
        agg: Aggregator::new(AggConfig {
            keep_examples: !args.report.no_examples,
            ..AggConfig::default()
        }),
    };
    // --mergeable: also the time blocks `dbtap diff` needs (diffcmd.rs).
    let recorder = args.mergeable.then(diff::blocks::Recorder::default);
    let consumer = diffcmd::Blocked {
        inner: consumer,
        recorder,
    };
    let (blocked, mut health) = pipeline::run(&args.input.files, &settings, consumer)?;
    let consumer = blocked.inner;
    health.protocol.unanswered = consumer.agg.totals().stats.no_response;
    warn(&health);
    let opts = args.report.options();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match args.report.format {
        DigestFormat::Text => report::text::render(&consumer.agg, &health, &opts, &mut out)?,
        DigestFormat::Json if args.mergeable => {
            let mut doc = report::json::build(&consumer.agg, &health, &opts);
            let blocks = blocked.recorder.and_then(|r| r.blocks);
            report::mergeable::attach(
                &mut doc,
                &consumer.agg,
                &opts,
                blocks.as_ref().map(Into::into),
            );
            serde_json::to_writer_pretty(&mut out, &doc)?;
            out.write_all(b"\n")?;
        }
        DigestFormat::Json => report::json::render(&consumer.agg, &health, &opts, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

/// Writes one NDJSON line per event as it comes.
struct EventsConsumer<W: Write> {
    fp: Fingerprinter,
    out: W,
    keep_text: bool,
    ids: std::collections::HashMap<(proto::Protocol, u64, &'static str), String>,
    error: Option<std::io::Error>,
}

impl<W: Write> Consumer for EventsConsumer<W> {
    fn event(&mut self, mut ev: QueryEvent) {
        if self.error.is_some() {
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
        let mode = fp.mode();
        let group = fp.group(&ev);
        let id = ids
            .entry((ev.protocol, group.hash, group.command))
            .or_insert_with(|| {
                crate::fp::query_id(mode, ev.protocol, group.command, group.text, group.hash)
            });
        if !*keep_text {
            ev.text = None;
        }
        if let Err(e) = report::events::write_ndjson(&ev, group.text, id, out) {
            self.error = Some(e);
        }
    }
}

fn events(args: EventsArgs) -> anyhow::Result<()> {
    let settings = settings(&args.input);
    let stdout = std::io::stdout();
    let consumer = EventsConsumer {
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
