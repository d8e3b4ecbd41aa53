//! Replay filters (`--read-only`, `--where`, `--since`/`--until`): the caller judges each
//! captured event (the pipeline's classified command and text) into a [`Verdict`]; the
//! verdicts are matched to the framed requests of their connection by the time of the packet
//! that carried the request's first byte, and the requests they drop are taken out of the
//! plan and counted by reason. What can write is decided per protocol in [`classify`].

use std::collections::BTreeMap;

use proto::Protocol;

use crate::capture::{Batch, Request};

pub mod classify;

pub use classify::{sets_state, writes};

/// Why a request is left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Why {
    /// `--read-only`: the statement can write.
    ReadOnly,
    /// `--where` does not hold.
    Where,
    /// Started outside `--since`/`--until`.
    TimeRange,
}

impl Why {
    /// The fidelity skip reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::ReadOnly => "read_only",
            Why::Where => "where",
            Why::TimeRange => "time_range",
        }
    }
}

/// What becomes of one captured event's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Replayed.
    Keep,
    /// Left out by a filter, but it sets the connection's state (database, session variables,
    /// transaction): replayed while the session has requests that are kept.
    State(Why),
    /// Left out.
    Drop(Why),
    /// The end of the connection (PostgreSQL Terminate, MySQL COM_QUIT, Redis QUIT): kept
    /// when the session has requests that are kept, else left out with them.
    End,
}

/// One judged event: when its request started (packet time) and its command kind.
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    pub start_ns: u64,
    pub command: &'static str,
    pub verdict: Verdict,
}

/// Requests left out, by reason.
pub type Skips = BTreeMap<String, u64>;

pub(crate) fn skip(s: &mut Skips, why: Why, n: u64) {
    if n > 0 {
        *s.entry(why.as_str().to_string()).or_default() += n;
    }
}

/// The verdict of the requests that started at one packet time, when events and requests
/// cannot be paired one to one: any drop drops them all (a write is never sent by mistake).
fn combined(vs: &[Judged]) -> Verdict {
    // Drop over Keep over State over End.
    let rank = |v: &Verdict| match v {
        Verdict::Drop(_) => 3,
        Verdict::Keep => 2,
        Verdict::State(_) => 1,
        Verdict::End => 0,
    };
    vs.iter()
        .map(|j| j.verdict)
        .max_by_key(rank)
        .unwrap_or(Verdict::Keep)
}

/// The command kind a request's bytes name, where it can be told cheaply (to check that
/// requests and events pair one to one); `None` when unknown.
fn request_command(p: Protocol, r: &Request) -> Option<String> {
    match p {
        Protocol::Redis => r
            .args()
            .next()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase()),
        Protocol::Mysql => {
            let c = proto::mysql::message::Command(r.bytes.get(4).copied()?);
            c.is_known().then(|| c.name().to_string())
        }
        _ => None,
    }
}

/// The verdict of each request of `reqs` (all started at one packet time) from the events
/// `vs` of that time.
fn pair(p: Protocol, reqs: &[&Request], vs: &[Judged]) -> Vec<Verdict> {
    if vs.is_empty() {
        return vec![Verdict::Keep; reqs.len()];
    }
    let one_to_one = p != Protocol::Postgres
        && reqs.len() == vs.len()
        && reqs.iter().zip(vs).all(|(r, j)| {
            j.command == "unknown" || request_command(p, r).is_none_or(|c| c == j.command)
        });
    if one_to_one {
        vs.iter().map(|j| j.verdict).collect()
    } else {
        vec![combined(vs); reqs.len()]
    }
}

/// Applies `verdicts` (in event order) to `batches` of one connection: returns the batches
/// kept, with the requests left out counted in `skipped`. A PostgreSQL batch (up to its
/// Sync or Query) is kept or left out whole. A session with no request kept but state
/// setters is left out whole. State setters before the first kept request of a session left
/// out by the time range go at that request's time; requests after the last kept one are
/// not waited for.
pub fn apply(
    p: Protocol,
    batches: Vec<Batch>,
    verdicts: &[Judged],
    skipped: &mut Skips,
) -> Vec<Batch> {
    let judged = judge(p, &batches, verdicts, None);
    keep_judged(batches, judged, skipped)
}

/// Each request's verdict in `batches` of one connection from `verdicts` (see [`apply`]);
/// `prev`: the verdict of the batch before them (PostgreSQL COPY data goes with its COPY).
pub fn judge(
    p: Protocol,
    batches: &[Batch],
    verdicts: &[Judged],
    prev: Option<Verdict>,
) -> Vec<Vec<Verdict>> {
    let mut by_ts: BTreeMap<u64, Vec<Judged>> = BTreeMap::new();
    for j in verdicts {
        by_ts.entry(j.start_ns).or_default().push(*j);
    }
    // Each request's verdict.
    let mut judged: Vec<Vec<Verdict>> = Vec::with_capacity(batches.len());
    if p == Protocol::Postgres {
        for b in batches {
            let mut vs: Vec<Judged> = Vec::new();
            let mut last = None;
            for r in &b.requests {
                if last != Some(r.ts_ns) {
                    vs.extend(by_ts.get(&r.ts_ns).into_iter().flatten());
                    last = Some(r.ts_ns);
                }
            }
            // COPY data goes with the COPY before it.
            let copy_data = b
                .requests
                .first()
                .is_some_and(|r| matches!(r.bytes.first(), Some(b'd' | b'c' | b'f')));
            let before = judged
                .last()
                .and_then(|p: &Vec<Verdict>| p.first().copied());
            let v = match before.or(prev) {
                Some(prev) if copy_data => prev,
                _ => combined(&vs),
            };
            judged.push(vec![v; b.requests.len()]);
        }
    } else {
        // Requests grouped by packet time, across batches (a pipeline's requests share one).
        let flat: Vec<&Request> = batches.iter().flat_map(|b| b.requests.iter()).collect();
        let mut out: Vec<Verdict> = Vec::with_capacity(flat.len());
        let mut i = 0;
        while let Some(r) = flat.get(i) {
            let ts = r.ts_ns;
            let n = flat
                .get(i..)
                .unwrap_or_default()
                .iter()
                .take_while(|q| q.ts_ns == ts)
                .count();
            let group = flat.get(i..i + n).unwrap_or_default();
            out.extend(pair(p, group, by_ts.get(&ts).map_or(&[][..], |v| v)));
            i += n;
        }
        let mut it = out.into_iter();
        for b in batches {
            judged.push(it.by_ref().take(b.requests.len()).collect());
        }
    }
    judged
}

/// Takes out of `batches` what `judged` leaves out (see [`apply`]).
fn keep_judged(batches: Vec<Batch>, judged: Vec<Vec<Verdict>>, skipped: &mut Skips) -> Vec<Batch> {
    let kept_any = judged.iter().flatten().any(|v| *v == Verdict::Keep);
    if !kept_any {
        let first_why = judged.iter().flatten().find_map(|v| match v {
            Verdict::State(w) | Verdict::Drop(w) => Some(*w),
            _ => None,
        });
        for v in judged.iter().flatten() {
            match (*v, first_why) {
                (Verdict::State(w) | Verdict::Drop(w), _) | (Verdict::End, Some(w)) => {
                    skip(skipped, w, 1)
                }
                _ => {}
            }
        }
        return Vec::new();
    }
    let first_keep = judged
        .iter()
        .position(|vs| vs.contains(&Verdict::Keep))
        .unwrap_or(0);
    let last_keep = judged
        .iter()
        .rposition(|vs| vs.contains(&Verdict::Keep))
        .unwrap_or(0);
    let first_ts = batches.get(first_keep).map_or(0, |b| b.ts_ns);
    let mut out = Vec::with_capacity(batches.len());
    for (i, (mut b, vs)) in batches.into_iter().zip(judged).enumerate() {
        let mut reqs = Vec::with_capacity(b.requests.len());
        for (r, v) in b.requests.into_iter().zip(vs) {
            match v {
                Verdict::Keep | Verdict::End => reqs.push(r),
                Verdict::State(Why::TimeRange) if i > last_keep => skip(skipped, Why::TimeRange, 1),
                Verdict::State(_) => reqs.push(r),
                Verdict::Drop(w) => skip(skipped, w, 1),
            }
        }
        if reqs.is_empty() {
            continue;
        }
        if i < first_keep && reqs.iter().all(|r| r.ts_ns < first_ts) {
            // A state setter before the session's first kept request: sent just before it
            // (a time range does not wait out the stretch before it).
            b.ts_ns = b.ts_ns.max(first_ts);
            for r in &mut reqs {
                r.ts_ns = r.ts_ns.max(first_ts);
            }
        }
        b.requests = reqs;
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests;
