//! The filters of `replay --live` (`--read-only`, `--where`, `--since`/`--until`), per live
//! connection: framed batches wait here until the capture's events for their requests came
//! (an event comes with its reply, after the batch was framed), are judged by the same
//! pairing as a capture file's ([`crate::filter::judge`]), and what is kept goes on to the
//! sessions. A capture file's whole-session rules hold as far as the future need not be
//! known: state setters before the session's first kept request are held and sent just
//! before it (a session with none kept never starts, and they are counted), a time-range
//! state setter after a kept request is left out, the end of a session with nothing kept
//! is left out with it.

use std::collections::BTreeMap;

use proto::Protocol;

use crate::capture::Batch;
use crate::filter::{self, Judged, Skips, Verdict, Why};

/// Batches waiting for their events at most (then the oldest is left out, counted as
/// `live_unjudged`: the filters could not judge it).
const MAX_PENDING: usize = 4096;
/// State-setting batches held before a session's first kept request at most (then the
/// oldest is left out, counted by its filter).
const MAX_HELD: usize = 256;
/// Verdicts held per connection at most (a connection whose requests are not framed).
const MAX_VERDICTS: usize = 65_536;

/// One live connection's filter state (see the module doc).
#[derive(Default)]
pub(super) struct Gate {
    verdicts: Vec<Judged>,
    pending: Vec<Batch>,
    held: Vec<(Batch, Why)>,
    kept_any: bool,
    /// The first filter that left a request of the session out.
    first_why: Option<Why>,
    /// The verdict of the last batch judged.
    last: Option<Verdict>,
}

impl Gate {
    /// The filters' verdict on an event of the connection.
    pub(super) fn verdict(&mut self, j: Judged, skipped: &mut Skips) {
        if self.verdicts.len() >= MAX_VERDICTS {
            self.verdicts.remove(0);
            *skipped.entry("live_unjudged".into()).or_default() += 1;
        }
        self.verdicts.push(j);
    }

    /// A framed batch, waiting for its events.
    pub(super) fn push(&mut self, b: Batch, skipped: &mut Skips) {
        if self.pending.len() >= MAX_PENDING {
            let old = self.pending.remove(0);
            *skipped.entry("live_unjudged".into()).or_default() += old.requests.len() as u64;
        }
        self.pending.push(b);
    }

    /// The batches that can be judged now (all at `end`), judged: what is kept, in order.
    pub(super) fn settle(&mut self, p: Protocol, end: bool, skipped: &mut Skips) -> Vec<Batch> {
        let ready = if end {
            self.pending.len()
        } else {
            self.ready(p)
        };
        if ready == 0 {
            if end {
                self.drop_held(skipped);
            }
            return Vec::new();
        }
        let batches: Vec<Batch> = self.pending.drain(..ready).collect();
        let judged = filter::judge(p, &batches, &self.verdicts, self.last);
        self.last = judged.last().and_then(|v| v.first().copied()).or(self.last);
        // Verdicts before what still waits are no longer needed.
        let keep_from = self
            .pending
            .first()
            .and_then(|b| b.requests.first())
            .map_or(u64::MAX, |r| r.ts_ns);
        let done = batches.last().map_or(0, |b| b.ts_ns);
        self.verdicts
            .retain(|j| j.start_ns >= keep_from || j.start_ns > done);
        let mut out = Vec::new();
        for (b, vs) in batches.into_iter().zip(judged) {
            self.one(b, vs, skipped, &mut out);
        }
        if end {
            self.drop_held(skipped);
        }
        out
    }

    /// How many pending batches have their events: those up to the last one whose every
    /// request time has as many events as it needs, or one with a later event (the capture's
    /// session emits events in order; a request without an event does not hold the rest).
    fn ready(&self, p: Protocol) -> usize {
        let latest = self.verdicts.iter().map(|j| j.start_ns).max();
        let Some(latest) = latest else {
            return 0;
        };
        let mut ready = 0;
        for (i, b) in self.pending.iter().enumerate() {
            let last_ts = b.requests.last().map_or(b.ts_ns, |r| r.ts_ns);
            if latest > last_ts || self.answered(p, b) {
                ready = i + 1;
            }
        }
        ready
    }

    /// Every request time of `b` has at least as many events as requests that make one.
    fn answered(&self, p: Protocol, b: &Batch) -> bool {
        let mut need: BTreeMap<u64, usize> = BTreeMap::new();
        for r in &b.requests {
            let counts = p != Protocol::Postgres || matches!(r.bytes.first(), Some(b'E' | b'Q'));
            *need.entry(r.ts_ns).or_default() += usize::from(counts);
        }
        need.iter().all(|(&ts, &n)| {
            let got = self.verdicts.iter().filter(|j| j.start_ns == ts).count();
            got >= n.max(1)
        })
    }

    /// Applies one batch's verdicts: what is kept goes to `out`.
    fn one(&mut self, mut b: Batch, vs: Vec<Verdict>, skipped: &mut Skips, out: &mut Vec<Batch>) {
        let keeps = vs.contains(&Verdict::Keep);
        let mut reqs = Vec::with_capacity(b.requests.len());
        let mut state_why = None;
        for (r, v) in std::mem::take(&mut b.requests).into_iter().zip(vs) {
            match v {
                Verdict::Keep => reqs.push(r),
                Verdict::End if self.kept_any || keeps => reqs.push(r),
                Verdict::End => {
                    if let Some(w) = self.first_why {
                        filter::skip(skipped, w, 1);
                    }
                }
                Verdict::State(Why::TimeRange) if self.kept_any => {
                    filter::skip(skipped, Why::TimeRange, 1)
                }
                Verdict::State(w) => {
                    self.first_why.get_or_insert(w);
                    state_why.get_or_insert(w);
                    reqs.push(r);
                }
                Verdict::Drop(w) => {
                    self.first_why.get_or_insert(w);
                    filter::skip(skipped, w, 1);
                }
            }
        }
        if reqs.is_empty() {
            return;
        }
        b.requests = reqs;
        if keeps || self.kept_any {
            if !self.kept_any {
                self.kept_any = true;
                // The state setters held go just before the first kept request.
                for (mut h, _) in self.held.drain(..) {
                    h.ts_ns = h.ts_ns.max(b.ts_ns);
                    for r in &mut h.requests {
                        r.ts_ns = r.ts_ns.max(b.ts_ns);
                    }
                    out.push(h);
                }
            }
            out.push(b);
            return;
        }
        if self.held.len() >= MAX_HELD {
            let (old, w) = self.held.remove(0);
            filter::skip(skipped, w, old.requests.len() as u64);
        }
        self.held
            .push((b, state_why.or(self.first_why).unwrap_or(Why::Where)));
    }

    /// The session ended with state setters held and nothing kept: they are left out.
    fn drop_held(&mut self, skipped: &mut Skips) {
        for (b, w) in self.held.drain(..) {
            filter::skip(skipped, w, b.requests.len() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Request;

    fn batch(ts: u64, cmds: &[&[u8]]) -> Batch {
        Batch {
            ts_ns: ts,
            requests: cmds
                .iter()
                .map(|c| Request {
                    ts_ns: ts,
                    bytes: crate::resp::encode(&[c]),
                    args: Vec::new(),
                    prepared_id: None,
                })
                .collect(),
        }
    }

    fn j(ts: u64, command: &'static str, verdict: Verdict) -> Judged {
        Judged {
            start_ns: ts,
            command,
            verdict,
        }
    }

    /// A batch waits for its event; a dropped write is counted; state setters before the
    /// first kept request are held and go just before it; a session's later time-range
    /// state setter is left out.
    #[test]
    fn batches_wait_for_their_verdicts() {
        let mut g = Gate::default();
        let mut sk = Skips::new();
        let p = Protocol::Redis;
        g.push(batch(10, &[b"SELECT"]), &mut sk);
        assert!(g.settle(p, false, &mut sk).is_empty(), "no event yet");
        g.verdict(j(10, "select", Verdict::State(Why::Where)), &mut sk);
        assert!(g.settle(p, false, &mut sk).is_empty(), "held");
        g.push(batch(20, &[b"SET"]), &mut sk);
        g.verdict(j(20, "set", Verdict::Drop(Why::ReadOnly)), &mut sk);
        assert!(g.settle(p, false, &mut sk).is_empty());
        assert_eq!(sk.get("read_only"), Some(&1));
        g.push(batch(30, &[b"GET"]), &mut sk);
        g.verdict(j(30, "get", Verdict::Keep), &mut sk);
        let out = g.settle(p, false, &mut sk);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0].ts_ns, 30,
            "the held SELECT goes at the first kept time"
        );
        assert_eq!(out[1].requests.len(), 1);
        g.push(batch(40, &[b"SELECT"]), &mut sk);
        g.verdict(j(40, "select", Verdict::State(Why::TimeRange)), &mut sk);
        assert!(g.settle(p, false, &mut sk).is_empty());
        assert_eq!(sk.get("time_range"), Some(&1));
        assert!(
            g.verdicts.is_empty(),
            "verdicts of settled batches are let go"
        );
    }

    fn verdict_of(k: u8) -> Verdict {
        match k % 6 {
            0 | 1 => Verdict::Keep,
            2 => Verdict::State(Why::Where),
            3 => Verdict::State(Why::TimeRange),
            4 => Verdict::Drop(Why::ReadOnly),
            _ => Verdict::Drop(Why::Where),
        }
    }

    proptest::proptest! {
        /// Whatever the batches, verdicts (some never come) and settle points, every request
        /// is sent once or counted as left out by the end, and what is sent keeps its order.
        #[test]
        fn every_request_sent_or_counted(
            steps in proptest::collection::vec((1usize..4, proptest::bits::u8::ANY, proptest::bool::ANY, proptest::bool::ANY), 0..40)
        ) {
            let mut g = Gate::default();
            let mut sk = Skips::new();
            let (mut total, mut sent) = (0u64, Vec::new());
            for (i, (n, k, judged, settle)) in steps.into_iter().enumerate() {
                let ts = 10 * (i as u64 + 1);
                let cmds: Vec<&[u8]> = vec![b"GET"; n];
                g.push(batch(ts, &cmds), &mut sk);
                total += n as u64;
                if judged {
                    for _ in 0..n {
                        g.verdict(j(ts, "get", verdict_of(k)), &mut sk);
                    }
                }
                if settle {
                    sent.extend(g.settle(Protocol::Redis, false, &mut sk));
                }
            }
            sent.extend(g.settle(Protocol::Redis, true, &mut sk));
            let n_sent: u64 = sent.iter().map(|b| b.requests.len() as u64).sum();
            let n_skipped: u64 = sk.values().sum();
            proptest::prop_assert_eq!(n_sent + n_skipped, total, "{:?}", sk);
            let times: Vec<u64> = sent.iter().map(|b| b.ts_ns).collect();
            proptest::prop_assert!(times.windows(2).all(|w| w[0] <= w[1]), "{:?}", times);
        }
    }

    /// A request that makes no event is released by a later one, or at the end; a session
    /// with only state setters is left out whole at its end.
    #[test]
    fn released_by_later_events_and_at_end() {
        let mut g = Gate::default();
        let mut sk = Skips::new();
        let p = Protocol::Redis;
        g.push(batch(10, &[b"GET"]), &mut sk);
        g.push(batch(20, &[b"GET"]), &mut sk);
        g.verdict(j(20, "get", Verdict::Keep), &mut sk);
        assert_eq!(g.settle(p, false, &mut sk).len(), 2);
        let mut h = Gate::default();
        h.push(batch(10, &[b"SELECT"]), &mut sk);
        h.verdict(j(10, "select", Verdict::State(Why::Where)), &mut sk);
        h.push(batch(20, &[b"QUIT"]), &mut sk);
        h.verdict(j(20, "quit", Verdict::End), &mut sk);
        assert!(h.settle(p, true, &mut sk).is_empty());
        assert_eq!(sk.get("where"), Some(&2), "{sk:?}");
    }
}
