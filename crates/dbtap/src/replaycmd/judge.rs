//! The replay's filters on the capture side: `--read-only`, `--where` (the digest's filter, as
//! the fingerprinter applies it) and `--since`/`--until` (the digest's time range) judge each
//! captured event into a [`Verdict`] for the replay's collector.

use proto::QueryEvent;
use replay::filter::{Verdict, Why, sets_state, writes};

use crate::fp::Fingerprinter;
use crate::timespec::Window;

/// The filters of one replay.
#[derive(Clone, Debug)]
pub struct Judge {
    pub read_only: bool,
    pub window: Window,
    /// Some filter is on (else every event is kept and no verdict is recorded).
    pub active: bool,
}

impl Judge {
    /// The verdict on `ev`: left out by the time range, then `--where`, then `--read-only`;
    /// a request left out that sets the connection's state (and does not write under
    /// `--read-only`) is kept for its session.
    pub fn verdict(&self, fp: &mut Fingerprinter, ev: &QueryEvent) -> Verdict {
        let text = ev.text.as_deref();
        let is_write = self.read_only && writes(ev.protocol, ev.command, text);
        let why = if !self.window.contains(ev.start_ns) {
            Some(Why::TimeRange)
        } else if fp.classify(ev).is_none() {
            Some(Why::Where)
        } else if is_write {
            Some(Why::ReadOnly)
        } else {
            None
        };
        match why {
            None if matches!(ev.command, "terminate" | "quit") => Verdict::End,
            None => Verdict::Keep,
            Some(w) if !is_write && sets_state(ev.protocol, ev.command, text) => Verdict::State(w),
            Some(w) => Verdict::Drop(w),
        }
    }

    /// The filters in words, for the report (`None` when none is on).
    pub fn describe(&self, where_: &str, range: Option<String>) -> Option<String> {
        let mut parts = Vec::new();
        if self.read_only {
            parts.push("read-only".to_string());
        }
        if !where_.is_empty() {
            parts.push(format!("where {where_}"));
        }
        parts.extend(range);
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// The capture consumer with the filters of `args`, and the filters in words.
pub(super) fn consumer(
    args: &super::ReplayArgs,
) -> anyhow::Result<(super::CaptureConsumer, Option<String>)> {
    let sel = crate::selection::Selection::resolve(args.time.range(), &args.files)?;
    let judge = Judge {
        read_only: args.read_only,
        window: sel.as_ref().map_or(Window::ALL, |s| s.window),
        active: args.read_only || !args.grouping.where_.is_empty() || sel.is_some(),
    };
    let mut collector = replay::Collector::new(replay::Limits {
        max_bytes: args.read_ahead,
    });
    if judge.active {
        collector.filter();
    }
    let filters = judge.describe(
        &args.grouping.where_.join(" AND "),
        sel.as_ref().map(crate::selection::Selection::describe),
    );
    let consumer = super::CaptureConsumer {
        fp: Fingerprinter::from_args(&args.grouping),
        agg: super::new_aggregator(),
        collector,
        judge,
    };
    Ok((consumer, filters))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::GroupingArgs;
    use clap::Parser;
    use proto::Protocol;

    #[derive(Parser)]
    struct G {
        #[command(flatten)]
        g: GroupingArgs,
    }

    fn fp(args: &[&str]) -> Fingerprinter {
        let g = G::try_parse_from([&["x"][..], args].concat()).unwrap().g;
        Fingerprinter::from_args(&g)
    }

    fn ev(p: Protocol, command: &'static str, text: &str, db: &str, ts: u64) -> QueryEvent {
        let mut e = proto::testing::event(p, command, ts, Some(1));
        e.text = Some(text.into());
        e.database = Some(db.into());
        e.start_ns = ts;
        e
    }

    #[test]
    fn verdicts() {
        let j = Judge {
            read_only: true,
            window: Window {
                from_ns: 10,
                to_ns: 20,
            },
            active: true,
        };
        let mut f = fp(&["--where", "db=shop"]);
        let m = Protocol::Mysql;
        assert_eq!(
            j.verdict(&mut f, &ev(m, "query", "SELECT 1", "shop", 12)),
            Verdict::Keep
        );
        assert_eq!(
            j.verdict(&mut f, &ev(m, "query", "UPDATE t SET a=1", "shop", 12)),
            Verdict::Drop(Why::ReadOnly)
        );
        assert_eq!(
            j.verdict(&mut f, &ev(m, "query", "SELECT 1", "other", 12)),
            Verdict::Drop(Why::Where)
        );
        assert_eq!(
            j.verdict(&mut f, &ev(m, "query", "USE shop", "other", 12)),
            Verdict::State(Why::Where)
        );
        assert_eq!(
            j.verdict(&mut f, &ev(m, "query", "SELECT 1", "shop", 25)),
            Verdict::Drop(Why::TimeRange)
        );
        assert_eq!(
            j.verdict(&mut f, &ev(m, "init_db", "shop", "shop", 5)),
            Verdict::State(Why::TimeRange)
        );
        // A write that sets state is never kept under --read-only.
        let r = Protocol::Redis;
        assert_eq!(
            j.verdict(&mut f, &ev(r, "client", "CLIENT KILL", "other", 12)),
            Verdict::Drop(Why::Where)
        );
        assert_eq!(
            j.verdict(&mut f, &ev(r, "select", "SELECT", "other", 12)),
            Verdict::State(Why::Where)
        );
    }
}
