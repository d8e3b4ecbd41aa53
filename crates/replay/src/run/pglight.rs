//! The light reply reader of a PostgreSQL replay (issue 14). Most replayed batches are one
//! extended-protocol execution of an unnamed statement (Parse "" / Bind "" "" / Describe
//! portal / Execute / Sync) answered without surprise (ParseComplete, BindComplete,
//! RowDescription or NoData, DataRows, CommandComplete, ReadyForQuery). Their two target
//! events (a count-only `prepare`, an `execute`) differ between executions of the same Parse
//! only in their times, byte counts, rows and transaction state, which this module reads from
//! the reply; everything else comes from the events the full PostgreSQL session made of the
//! same Parse earlier on the connection (a template, kept only after this module computed
//! exactly those events from that batch). Any other batch, or a reply that is not exactly that
//! shape, goes to the full session, which is first given the last batch answered here so its
//! state is what it would have been (see `run/pg.rs`).

use proto::postgres::TxStatus;
use proto::postgres::message::{CommandTag, backend_len_ok};
use proto::{Direction, Health, Outcome, QueryEvent, Session, Sink, TxnState};

use crate::postgres::server_message;

/// Longest Parse body answered here: within `proto::kit::TEXT_PREFIX` (a text that short is
/// never charged to the text budget nor cut by it, so the session keeps it whole every time).
const MAX_PARSE_BODY: usize = 4096;

/// Traffic of one batch logged at most: past it, the batch goes to the session as it comes
/// (see [`Light::spill`]).
const MAX_LOG: usize = 256 << 10;

/// Templates kept per connection at most (one per distinct Parse).
const MAX_TEMPLATES: usize = 64;

/// What was sent and received during one batch, in order, with the times the session would
/// have been given: fed to the full session when the light reader does not answer the batch.
#[derive(Default)]
struct Log {
    bytes: Vec<u8>,
    /// (to the server, time, end of the part in `bytes`).
    parts: Vec<(bool, u64, usize)>,
}

impl Log {
    fn clear(&mut self) {
        self.bytes.clear();
        self.parts.clear();
    }

    fn push(&mut self, to_server: bool, ts: u64, b: &[u8]) {
        self.bytes.extend_from_slice(b);
        self.parts.push((to_server, ts, self.bytes.len()));
    }

    /// Each part in order: (direction, bytes, time).
    fn parts(&self) -> impl Iterator<Item = (Direction, &[u8], u64)> {
        let mut start = 0;
        self.parts.iter().map(move |&(to_server, ts, end)| {
            let b = self.bytes.get(start..end).unwrap_or_default();
            start = end;
            let d = if to_server {
                Direction::ToServer
            } else {
                Direction::ToClient
            };
            (d, b, ts)
        })
    }
}

/// A batch the light reader may answer: its Parse message (the template's key) and the wire
/// bytes of the Parse and of the rest (Bind, Describe, Execute, Sync).
struct Shape<'a> {
    parse: &'a [u8],
    rest: u64,
}

/// The batch `out` when it is exactly Parse (unnamed, body within [`MAX_PARSE_BODY`]), Bind
/// (unnamed portal and statement), Describe of the unnamed portal, Execute of it with no row
/// limit, Sync.
fn shape(out: &[u8]) -> Option<Shape<'_>> {
    let (t, body, p) = server_message(out)?;
    if t != b'P' || body.first() != Some(&0) || body.len() > MAX_PARSE_BODY {
        return None;
    }
    let rest = out.get(p..)?;
    let (t, body, b) = server_message(rest)?;
    if t != b'B' || body.get(..2) != Some(&[0, 0][..]) {
        return None;
    }
    const TAIL: &[u8] = b"D\0\0\0\x06P\0E\0\0\0\x09\0\0\0\0\0S\0\0\0\x04";
    if rest.get(b..)? != TAIL {
        return None;
    }
    Some(Shape {
        parse: out.get(..p)?,
        rest: rest.len() as u64,
    })
}

/// What such a batch's reply said.
#[derive(Debug, PartialEq)]
struct Reply {
    /// First and last byte of the ParseComplete.
    parse: (u64, u64),
    /// First byte of the BindComplete, last of the CommandComplete.
    exec: (u64, u64),
    /// Bytes from the BindComplete to the ReadyForQuery.
    bytes_out: u64,
    rows_sent: u64,
    rows_affected: u64,
    status: TxnState,
}

/// Reads the reply of a [`Shape`] batch in `log` (the batch sent first, then only reads):
/// `None` unless it is exactly ParseComplete, BindComplete, RowDescription or NoData,
/// DataRows, a CommandComplete (not COPY's), ReadyForQuery, with nothing after.
fn reply(log: &Log) -> Option<Reply> {
    let (&(true, _, sent), reads) = log.parts.split_first()? else {
        return None;
    };
    if reads.iter().any(|p| p.0) {
        return None;
    }
    let data = log.bytes.get(sent..)?;
    // The time of the read holding byte `off` of the reply.
    let at = |off: usize| reads.iter().find(|p| p.2 > sent + off).map_or(0, |p| p.1);
    let mut pos = 0;
    let mut step = 0;
    let (mut parse, mut first_exec, mut rows) = ((0, 0), 0, 0u64);
    while let Some((t, body, len)) = server_message(data.get(pos..)?) {
        let (start, end) = (pos, pos + len);
        if !backend_len_ok(t, (len - 1) as u32) {
            return None;
        }
        pos = end;
        match (step, t) {
            (0, b'1') => parse = (at(start), at(end - 1)),
            (1, b'2') => first_exec = at(start),
            (2, b'T' | b'n') => {}
            (3, b'D') => {
                rows += 1;
                continue;
            }
            (3, b'C') => {
                if body.last() != Some(&0) {
                    return None;
                }
                let tag = CommandTag::parse(body);
                if tag.verb == b"COPY" {
                    return None;
                }
                let (sent_rows, affected) = tag.counts(false, rows, 0);
                let (b'Z', &[s], zlen) = server_message(data.get(pos..)?)? else {
                    return None;
                };
                if pos + zlen != data.len() {
                    return None;
                }
                let status = TxStatus::from_byte(s)?.event_state();
                return Some(Reply {
                    parse,
                    exec: (first_exec, at(end - 1)),
                    bytes_out: (data.len() - 5) as u64,
                    rows_sent: sent_rows,
                    rows_affected: affected,
                    status,
                });
            }
            _ => return None,
        }
        step += 1;
    }
    None
}

/// The two events of a [`Shape`] batch sent at `sent` and answered by `r`, from the
/// templates of its Parse.
fn events(tpl: &(QueryEvent, QueryEvent), s: &Shape<'_>, sent: u64, r: &Reply) -> [QueryEvent; 2] {
    let mut p = tpl.0.clone();
    p.start_ns = sent;
    p.first_response_ns = Some(r.parse.0);
    p.end_ns = Some(r.parse.1);
    p.bytes_in = s.parse.len() as u64;
    p.bytes_out = 5;
    p.rows_sent = 0;
    p.rows_affected = 0;
    // Answered before its batch's ReadyForQuery: it carries the state only inside a
    // transaction (`postgres/session/batch.rs`).
    p.txn = Some(r.status).filter(|s| s.in_transaction());
    let mut e = tpl.1.clone();
    e.start_ns = sent;
    e.first_response_ns = Some(r.exec.0);
    e.end_ns = Some(r.exec.1);
    e.bytes_in = s.rest;
    e.bytes_out = r.bytes_out;
    e.rows_sent = r.rows_sent;
    e.rows_affected = r.rows_affected;
    e.txn = Some(r.status);
    [p, e]
}

/// The fields [`events`] sets, and those a template must have, compared.
fn same(a: &QueryEvent, b: &QueryEvent) -> bool {
    (
        a.start_ns,
        a.first_response_ns,
        a.end_ns,
        a.bytes_in,
        a.bytes_out,
    ) == (
        b.start_ns,
        b.first_response_ns,
        b.end_ns,
        b.bytes_in,
        b.bytes_out,
    ) && (a.rows_sent, a.rows_affected, a.txn, a.timed, a.outcome)
        == (b.rows_sent, b.rows_affected, b.txn, b.timed, b.outcome)
        && a.error.is_none()
        && b.error.is_none()
        && a.service_start_ns.is_none()
        && a.params.is_none()
}

/// A connection's templates, by Parse message.
#[derive(Default)]
struct Templates {
    by_parse: Vec<(Vec<u8>, (QueryEvent, QueryEvent))>,
}

impl Templates {
    fn get(&self, parse: &[u8]) -> Option<&(QueryEvent, QueryEvent)> {
        self.by_parse
            .iter()
            .find(|(k, _)| k.as_slice() == parse)
            .map(|(_, t)| t)
    }

    /// The events of batch `s` logged in `log` (sent first, at its first part's time), when
    /// a template of its Parse is known and the reply is the expected one.
    fn answer(&self, s: &Shape<'_>, log: &Log) -> Option<[QueryEvent; 2]> {
        let tpl = self.get(s.parse)?;
        let r = reply(log)?;
        Some(events(tpl, s, log.parts.first()?.1, &r))
    }

    /// The full session made `got` of batch `s` logged in `log`: kept as the template of its
    /// Parse when they are a `prepare` and an `execute` that [`events`] computes exactly from
    /// them and the log.
    fn learn(&mut self, s: &Shape<'_>, log: &Log, got: &[QueryEvent]) {
        if self.by_parse.len() >= MAX_TEMPLATES || self.get(s.parse).is_some() {
            return;
        }
        let ([p, e], Some(r), Some(&(_, sent, _))) = (got, reply(log), log.parts.first()) else {
            return;
        };
        let tpl = (p.clone(), e.clone());
        let [p2, e2] = events(&tpl, s, sent, &r);
        let ok = p.command == "prepare"
            && e.command == "execute"
            && p.outcome == Outcome::Ok
            && e.outcome == Outcome::Ok
            && !p.timed
            && e.timed
            && same(p, &p2)
            && same(e, &e2);
        if ok {
            self.by_parse.push((s.parse.to_vec(), tpl));
        }
    }
}

/// The light reply reader of one target connection: how its batches go to the session.
#[derive(Default)]
pub(super) struct Light {
    templates: Templates,
    /// The current batch's traffic, kept instead of fed to the session while `logging`.
    log: Log,
    logging: bool,
    /// The last batch answered here, not yet fed to the session (while `stale`).
    last: Log,
    stale: bool,
    /// The session owes nothing: the last exchange got all its ReadyForQuery, ended with a
    /// Sync or a Query and left no byte unread. Only then may a batch be answered here.
    quiet: bool,
    /// Batches answered here (for the tests).
    answered: u64,
}

impl Light {
    /// Whether the traffic goes to [`Light::log`] rather than the session.
    pub(super) fn logging(&self) -> bool {
        self.logging
    }

    /// Keeps traffic of the current batch (sent when `to_server`) that arrived at `ts`;
    /// true when the log is full and must be spilled.
    pub(super) fn log(&mut self, to_server: bool, ts: u64, b: &[u8]) -> bool {
        self.log.push(to_server, ts, b);
        self.log.bytes.len() > MAX_LOG
    }

    /// Gives up on the current batch (its log is full): what was logged goes to `session`
    /// (after the last batch answered here), and the rest of the batch's traffic too.
    pub(super) fn spill(&mut self, session: &mut dyn Session, sink: &mut dyn Sink) {
        self.prime(session);
        for (dir, b, ts) in self.log.parts() {
            session.feed(dir, b, ts, sink);
        }
        self.log.clear();
        self.logging = false;
    }

    /// After the login: whether the session owes nothing.
    pub(super) fn set_quiet(&mut self, quiet: bool) {
        self.quiet = quiet;
    }

    /// A batch `out` is about to be sent: its traffic is logged when it may be answered here.
    pub(super) fn begin(&mut self, out: &[u8]) {
        self.logging = self.quiet && shape(out).is_some();
        self.log.clear();
    }

    /// Feeds `session` the last batch answered here (its events thrown away: they were made
    /// here), so its state is what it would be had it seen every batch. Called before the
    /// session is fed anything else.
    pub(super) fn prime(&mut self, session: &mut dyn Session) {
        if !std::mem::take(&mut self.stale) {
            return;
        }
        let mut d = Tee::default();
        for (dir, b, ts) in self.last.parts() {
            session.feed(dir, b, ts, &mut d);
        }
    }

    /// The batch `out` is over (`clean`: every reply came and no byte is left; `synced`: it
    /// ended with a Sync or a Query). A logged batch gets its events here when its Parse has
    /// a template and its reply is the expected one; else its traffic goes to `session` as
    /// it came (whose events, when they are those of such a batch, become the template).
    pub(super) fn settle(
        &mut self,
        out: &[u8],
        clean: bool,
        synced: bool,
        session: &mut dyn Session,
        sink: &mut dyn Sink,
    ) {
        let logged = std::mem::take(&mut self.logging);
        self.quiet = clean && synced;
        let Some(s) = logged.then(|| shape(out)).flatten() else {
            return;
        };
        if let Some(evs) = clean
            .then(|| self.templates.answer(&s, &self.log))
            .flatten()
        {
            evs.into_iter().for_each(|ev| sink.event(ev));
            std::mem::swap(&mut self.last, &mut self.log);
            self.stale = true;
            self.answered += 1;
            return;
        }
        self.prime(session);
        let mut tee = Tee {
            inner: Some(sink),
            ..Tee::default()
        };
        for (dir, b, ts) in self.log.parts() {
            session.feed(dir, b, ts, &mut tee);
        }
        if clean {
            self.templates.learn(&s, &self.log, &tee.got);
        }
    }
}

/// A sink passing events on (or dropping them when it has none), keeping copies of the first
/// three.
#[derive(Default)]
struct Tee<'a> {
    inner: Option<&'a mut dyn Sink>,
    got: Vec<QueryEvent>,
    health: Health,
}

impl Sink for Tee<'_> {
    fn event(&mut self, ev: QueryEvent) {
        if self.got.len() < 3 {
            self.got.push(ev.clone());
        }
        if let Some(s) = self.inner.as_mut() {
            s.event(ev);
        }
    }
    fn health(&mut self) -> &mut Health {
        match self.inner.as_mut() {
            Some(s) => s.health(),
            None => &mut self.health,
        }
    }
}

#[cfg(test)]
#[path = "pglight_tests.rs"]
mod tests;
