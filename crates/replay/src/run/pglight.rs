//! The light reply reader of a PostgreSQL replay (issue 14). Most replayed batches are one
//! extended-protocol execution, either of an unnamed statement (Parse "" / Bind "" "" /
//! Describe portal / Execute / Sync: libpq's PQexecParams, pgbench `-M extended`) or of a
//! named statement prepared earlier (Bind "" "S" / Describe portal / Execute / Sync:
//! PQexecPrepared, pgbench `-M prepared`, JDBC after its threshold), answered without surprise
//! ([ParseComplete,] BindComplete, RowDescription or NoData, DataRows, CommandComplete,
//! ReadyForQuery). Their target events (a count-only `prepare` for the Parse, an `execute`)
//! differ between executions of the same Parse, or of the same named statement, only in their
//! times, byte counts, rows and transaction state, which this module reads from the reply;
//! everything else comes from the events the full PostgreSQL session made of the same batch
//! shape earlier on the connection (a template, kept only after this module computed exactly
//! those events from that batch). Any other batch, or a reply that is not exactly that shape,
//! goes to the full session, which is first given the last batch answered here so its state is
//! what it would have been (see `run/pg.rs`). A named statement's templates are dropped by any
//! other batch: only those can define, close or deallocate a statement (Parse, Close,
//! `PREPARE`, `DEALLOCATE`, `DISCARD`).

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

/// Templates kept per connection at most, of each kind (one per distinct Parse, one per named
/// statement).
const MAX_TEMPLATES: usize = 64;

/// Longest statement name answered here (PostgreSQL's own limit is 63 bytes).
const MAX_NAME: usize = 64;

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

/// A batch the light reader may answer: the template's key and the wire bytes of the Parse
/// (none for a named statement) and of the rest (Bind, Describe, Execute, Sync).
struct Shape<'a> {
    /// The Parse message (an unnamed statement's batch) or the statement's name (a named
    /// one's).
    key: &'a [u8],
    /// The batch begins with a Parse (its events: `prepare`, `execute`); else it executes a
    /// named statement (`execute` only).
    parse: bool,
    rest: u64,
}

/// The batch `out` when it is exactly [Parse (unnamed, body within [`MAX_PARSE_BODY`]),] Bind
/// (unnamed portal; the unnamed statement after that Parse, else a named one), Describe of
/// the unnamed portal, Execute of it with no row limit, Sync.
fn shape(out: &[u8]) -> Option<Shape<'_>> {
    let (t, body, p) = server_message(out)?;
    let (parse, rest) = match t {
        b'P' if body.first() == Some(&0) && body.len() <= MAX_PARSE_BODY => (true, out.get(p..)?),
        b'B' => (false, out),
        _ => return None,
    };
    let (t, body, b) = server_message(rest)?;
    if t != b'B' || body.first() != Some(&0) {
        return None;
    }
    let key = if parse {
        if body.get(1) != Some(&0) {
            return None;
        }
        out.get(..p)?
    } else {
        let name = body.get(1..)?;
        let end = name.iter().take(MAX_NAME + 1).position(|&c| c == 0)?;
        if end == 0 {
            return None;
        }
        name.get(..end)?
    };
    const TAIL: &[u8] = b"D\0\0\0\x06P\0E\0\0\0\x09\0\0\0\0\0S\0\0\0\x04";
    if rest.get(b..)? != TAIL {
        return None;
    }
    Some(Shape {
        key,
        parse,
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
/// `None` unless it is exactly ParseComplete (when `parse`), BindComplete, RowDescription or
/// NoData, DataRows, a CommandComplete (not COPY's), ReadyForQuery, with nothing after.
fn reply(log: &Log, parse: bool) -> Option<Reply> {
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
    // The ParseComplete's bytes are the `prepare`'s, not the `execute`'s.
    let parse_len = if parse { 5 } else { 0 };
    let mut step = if parse { 0 } else { 1 };
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
                    bytes_out: data.len().saturating_sub(parse_len) as u64,
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

/// A batch's events as the session made them: the Parse's `prepare` (none for a named
/// statement's batch) and the `execute`.
type Template = (Option<QueryEvent>, QueryEvent);

/// The `prepare` of a [`Shape`] batch with a Parse, sent at `sent` and answered by `r`, from
/// its template `p`. (Built in place and handed on: an event is a few hundred bytes, and each
/// move of it is a copy.)
fn prepare_event(p: &QueryEvent, s: &Shape<'_>, sent: u64, r: &Reply) -> QueryEvent {
    let mut p = p.clone();
    p.start_ns = sent;
    p.first_response_ns = Some(r.parse.0);
    p.end_ns = Some(r.parse.1);
    p.bytes_in = s.key.len() as u64;
    p.bytes_out = 5;
    p.rows_sent = 0;
    p.rows_affected = 0;
    // Answered before its batch's ReadyForQuery: it carries the state only inside a
    // transaction (`postgres/session/batch.rs`).
    p.txn = Some(r.status).filter(|s| s.in_transaction());
    p
}

/// The `execute` of a [`Shape`] batch sent at `sent` and answered by `r`, from its template
/// `e`.
fn execute_event(e: &QueryEvent, s: &Shape<'_>, sent: u64, r: &Reply) -> QueryEvent {
    let mut e = e.clone();
    e.start_ns = sent;
    e.first_response_ns = Some(r.exec.0);
    e.end_ns = Some(r.exec.1);
    e.bytes_in = s.rest;
    e.bytes_out = r.bytes_out;
    e.rows_sent = r.rows_sent;
    e.rows_affected = r.rows_affected;
    e.txn = Some(r.status);
    e
}

/// The fields [`prepare_event`] and [`execute_event`] set, and those a template must have,
/// compared.
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

/// A connection's templates: by Parse message, and by statement name.
#[derive(Default)]
struct Templates {
    by_parse: Vec<(Vec<u8>, Template)>,
    /// Valid while only light-shaped batches were sent since they were made (see
    /// [`Light::begin`]).
    by_name: Vec<(Vec<u8>, Template)>,
}

impl Templates {
    fn kind(&self, s: &Shape<'_>) -> &Vec<(Vec<u8>, Template)> {
        if s.parse {
            &self.by_parse
        } else {
            &self.by_name
        }
    }

    fn get(&self, s: &Shape<'_>) -> Option<&Template> {
        self.kind(s)
            .iter()
            .find(|(k, _)| k.as_slice() == s.key)
            .map(|(_, t)| t)
    }

    /// Gives `sink` the events of batch `s` logged in `log` (sent first, at its first part's
    /// time) when a template of its key is known and the reply is the expected one; false
    /// (nothing given) otherwise.
    fn answer(&self, s: &Shape<'_>, log: &Log, sink: &mut dyn Sink) -> bool {
        let (Some(tpl), Some(&(_, sent, _))) = (self.get(s), log.parts.first()) else {
            return false;
        };
        let Some(r) = reply(log, s.parse) else {
            return false;
        };
        if let Some(p) = &tpl.0 {
            sink.event(prepare_event(p, s, sent, &r));
        }
        sink.event(execute_event(&tpl.1, s, sent, &r));
        true
    }

    /// The full session made `got` of batch `s` logged in `log`: kept as the template of its
    /// key when they are a `prepare` (with a Parse only) and an `execute` that
    /// [`prepare_event`] and [`execute_event`] compute exactly from them and the log, and the
    /// text is one the session keeps whole every time.
    fn learn(&mut self, s: &Shape<'_>, log: &Log, got: &[QueryEvent]) {
        if self.kind(s).len() >= MAX_TEMPLATES || self.get(s).is_some() {
            return;
        }
        let (Some(r), Some(&(_, sent, _))) = (reply(log, s.parse), log.parts.first()) else {
            return;
        };
        let tpl = match (s.parse, got) {
            (true, [p, e]) => (Some(p.clone()), e.clone()),
            (false, [e]) => (None, e.clone()),
            _ => return,
        };
        let prepare_ok = tpl.0.as_ref().is_none_or(|p| {
            p.command == "prepare"
                && p.outcome == Outcome::Ok
                && !p.timed
                && same(p, &prepare_event(p, s, sent, &r))
        });
        let e = &tpl.1;
        let ok = prepare_ok
            && e.command == "execute"
            && e.outcome == Outcome::Ok
            && e.timed
            && !e.text_truncated
            && !e.text_partial
            && e.text.as_ref().is_some_and(|t| t.len() <= MAX_PARSE_BODY)
            && same(e, &execute_event(e, s, sent, &r));
        if ok {
            let key = s.key.to_vec();
            if s.parse {
                self.by_parse.push((key, tpl));
            } else {
                self.by_name.push((key, tpl));
            }
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
    /// Any other batch may define, close or deallocate a named statement, so the named
    /// statements' templates go.
    pub(super) fn begin(&mut self, out: &[u8]) {
        let shaped = shape(out).is_some();
        if !shaped {
            self.templates.by_name.clear();
        }
        self.logging = self.quiet && shaped;
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
        if clean && self.templates.answer(&s, &self.log, sink) {
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
