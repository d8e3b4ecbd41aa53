//! The conversation half of a MySQL session: what is known about the connection, the requests
//! in flight, the prepared statements, and turning a finished request into an event.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

use super::super::message::{Command, caps, status};
use super::super::wire::Message;
use super::multi::Rest;
use super::result::{Prep, Resp, Rs};
use super::{Act, CLIENT, Phase};
use crate::kit::{Charge, NameCache, Origin, RequestCore, Tags};
use crate::{ConnMeta, Direction, Outcome, Protocol, QueryEvent, SessionConfig, Sink, TxnState};

/// Prepared statements remembered per connection, and the text bytes they may hold.
const MAX_STMTS: usize = 4096;
const MAX_STMT_BYTES: usize = 32 << 20;
/// Emptied request records kept for the next requests: a request is boxed so that queueing
/// and emitting it moves a pointer, not the record, and its box is reused.
const MAX_SPARE: usize = 8;

/// What a successful request changes on the connection.
#[derive(Clone, Debug, Default)]
pub(super) enum Effect {
    #[default]
    None,
    SetDb(Arc<str>),
    ChangeUser {
        user: Arc<str>,
        db: Option<Arc<str>>,
    },
    ClearStatements,
    /// COM_SET_OPTION turned multi-statements on or off.
    MultiStatements(bool),
}

/// A request in flight, from its command to the end of its response: the kit's request core
/// and what MySQL adds to it.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) command: Command,
    pub(super) core: RequestCore,
    pub(super) stmt: Option<u32>,
    /// The statement's text is looked up when the event is emitted (id -1, or a statement
    /// whose prepare response had not arrived when this was sent).
    pub(super) resolve_stmt: bool,
    pub(super) resp: Resp,
    pub(super) effect: Effect,
    /// Schema reported by session-state tracking in an OK packet.
    pub(super) new_schema: Option<Arc<str>>,
    /// Set by a prepare OK.
    pub(super) prepared: Option<u32>,
    /// Parameters the prepare OK announced.
    pub(super) prepared_params: u16,
    /// An execution's parameter bytes waiting for its statement to be known.
    pub(super) deferred_params: Option<Box<super::params::Deferred>>,
    /// A multi-statement query's statements after this one.
    pub(super) rest: Option<Box<Rest>>,
    /// The share of the run's text budget this request's text holds (given back with it).
    pub(super) text_charge: Charge,
    /// The transaction state from the status flags of the OK/EOF that ended the response.
    pub(super) txn: Option<TxnState>,
}

impl Pending {
    /// A request sent at `start_ns` in `bytes_in` wire bytes, awaiting one OK/ERR/EOF.
    pub(super) fn new(command: Command, start_ns: u64, bytes_in: u64) -> Self {
        Pending {
            command,
            core: RequestCore::new(start_ns, bytes_in),
            stmt: None,
            resolve_stmt: false,
            resp: Resp::Single,
            effect: Effect::None,
            new_schema: None,
            prepared: None,
            prepared_params: 0,
            deferred_params: None,
            rest: None,
            text_charge: Charge::default(),
            txn: None,
        }
    }

    /// Gives back what the record holds (its text share, parameters, statements), so that its
    /// box can wait empty for the next request ([`Pending::restart`] makes it new).
    fn clear(&mut self) {
        self.core = RequestCore::default();
        self.effect = Effect::None;
        self.new_schema = None;
        self.deferred_params = None;
        self.rest = None;
        self.text_charge = Charge::default();
    }

    /// The record as [`Pending::new`] makes it, in place (in a reused box).
    fn restart(&mut self, command: Command, start_ns: u64, bytes_in: u64) {
        *self = Pending::new(command, start_ns, bytes_in);
    }

    /// Heap bytes held for the request's text (and a multi-statement query's).
    pub(super) fn text_bytes(&self) -> usize {
        self.core.text.as_ref().map_or(0, |t| t.len())
            + self.rest.as_ref().map_or(0, |r| r.heap_bytes())
    }

    /// Adds the warning count of a packet that ends a result set.
    pub(super) fn warned(&mut self, n: u16) {
        self.core.warned(u64::from(n));
    }

    /// Records the transaction state of an OK/EOF's status flags (`SERVER_STATUS_IN_TRANS`).
    pub(super) fn txn_status(&mut self, flags: u16) {
        self.txn = Some(if flags & status::IN_TRANS != 0 {
            TxnState::InTransaction
        } else {
            TxnState::Idle
        });
    }
}

/// The conversation: everything but the framing.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) meta: ConnMeta,
    pub(super) cfg: SessionConfig,
    pub(super) phase: Phase,
    pub(super) server_caps: u64,
    /// Negotiated capabilities, when the handshake was seen.
    pub(super) caps: Option<u64>,
    /// Learnt from the handshake, or from the shape of the first result set.
    pub(super) deprecate_eof: Option<bool>,
    pub(super) user: Option<Arc<str>>,
    pub(super) database: Option<Arc<str>>,
    /// Prepared statement texts by id.
    pub(super) stmts: NameCache<u32>,
    pub(super) last_prepared: Option<u32>,
    pub(super) inflight: VecDeque<Box<Pending>>,
    /// Emptied boxes of emitted requests, reused by [`Conn::fresh`] (at most [`MAX_SPARE`]).
    /// Boxes, not records: a box taken from here goes into `inflight` as it is.
    #[allow(clippy::vec_box)]
    pub(super) spare: Vec<Box<Pending>>,
    /// A request was lost (gap or overflow): a response arriving with nothing in flight is
    /// its answer, not a stray.
    pub(super) orphans_expected: bool,
    /// The login in progress (from the handshake response to the server's OK or ERR).
    pub(super) login: Option<RequestCore>,
    /// Multi-statements as last set by COM_SET_OPTION (else the capabilities say).
    pub(super) multi_statements: Option<bool>,
    /// The text-budget share taken for the client message being read (by the keep policy),
    /// moved to its request when the message completes.
    pub(super) pending_text: RefCell<Charge>,
    /// Parameter counts and types of prepared statements (for bound values).
    pub(super) params: super::params::ParamFacts,
    /// The client asked for TLS (SSL request): the session stopped, counted encrypted.
    pub(super) tls_requested: bool,
    /// The bytes are decrypted TLS plaintext: a handshake response with CLIENT_SSL is the
    /// login, not a request for TLS.
    pub(super) in_tls: bool,
}

impl Conn {
    /// One whole message from direction `d`, `wire` bytes on the wire, ending at `ts`.
    pub(super) fn on_message(
        &mut self,
        d: Direction,
        m: &Message<'_>,
        wire: u64,
        ts: u64,
        sink: &mut dyn Sink,
    ) -> Act {
        if d == CLIENT {
            self.on_client(m, wire, sink)
        } else {
            if m.lost > 0
                && self.phase == Phase::Command
                && let Some(h) = self.inflight.front_mut()
            {
                // Part of the response was lost: paired and timed, but incomplete.
                h.core.damaged = true;
            }
            self.on_server(m, wire, ts, sink)
        }
    }

    pub(super) fn session_track(&self) -> bool {
        self.caps
            .is_some_and(|c| c & caps::CLIENT_SESSION_TRACK != 0)
    }

    /// The statement cache a new connection starts with.
    pub(super) fn statement_cache() -> NameCache<u32> {
        NameCache::new(MAX_STMTS, MAX_STMT_BYTES)
    }

    /// Who the events come from.
    pub(super) fn origin(&self) -> Origin<'_> {
        Origin {
            protocol: Protocol::Mysql,
            meta: &self.meta,
        }
    }

    /// An event's tags: the command, and the user and schema in force now.
    pub(super) fn tags(&self, command: &'static str) -> Tags {
        Tags::new(command).user_db(self.user.clone(), self.database.clone())
    }

    /// A new request record (in a spare box when there is one).
    pub(super) fn fresh(&mut self, command: Command, start_ns: u64, bytes_in: u64) -> Box<Pending> {
        match self.spare.pop() {
            Some(mut b) => {
                b.restart(command, start_ns, bytes_in);
                b
            }
            None => Box::new(Pending::new(command, start_ns, bytes_in)),
        }
    }

    /// Keeps an emitted request's box, emptied, for the next request.
    pub(super) fn recycle(&mut self, mut p: Box<Pending>) {
        if self.spare.len() < MAX_SPARE {
            p.clear();
            self.spare.push(p);
        }
    }

    /// The event of request `p`, whose core and statements it takes.
    pub(super) fn event(&self, p: &mut Pending, outcome: Outcome) -> QueryEvent {
        let command = p.command;
        let mut core = std::mem::take(&mut p.core);
        let mut stmt = p.stmt;
        if let Some(r) = p.rest.take() {
            // Statements the response never reached: their bytes stay with this one.
            core.bytes_in = core.bytes_in.saturating_add(r.unreached_bytes());
        }
        if p.resolve_stmt {
            let id = match stmt {
                Some(u32::MAX) | None => self.last_prepared,
                s => s,
            };
            if let Some(id) = id {
                stmt = Some(id);
                if let Some(named) = self.stmts.get(&id) {
                    core.text = Some(named.text);
                    core.text_truncated = named.truncated;
                }
            }
        }
        let outcome = core.settle(outcome);
        let mut ev = core.into_event(
            self.origin(),
            self.tags(command.name()).statement(stmt),
            outcome,
        );
        ev.txn = p.txn;
        ev
    }

    /// Emits the event (with the user and schema in force when the command was sent), then
    /// applies what the command changed.
    pub(super) fn emit(&mut self, mut p: Box<Pending>, outcome: Outcome, sink: &mut dyn Sink) {
        self.resolve_params(&mut p);
        let apply = matches!(outcome, Outcome::Ok) && !p.core.damaged;
        let prepared_params = p.prepared.map(|id| (id, p.prepared_params));
        let prepared = p
            .prepared
            .zip(p.core.text.clone())
            .map(|(id, t)| (id, t, p.core.text_truncated));
        // A prepared statement's text stays in the cache: the cache takes over its share.
        let charge = std::mem::take(&mut p.text_charge);
        let effect = std::mem::take(&mut p.effect);
        let new_schema = p.new_schema.take();
        let ev = self.event(&mut p, outcome);
        sink.event(ev);
        self.recycle(p);
        if apply {
            if let Some((id, t, tr)) = prepared {
                self.stmts.insert_charged(id, t, tr, charge);
                self.last_prepared = Some(id);
            }
            if let Some((id, n)) = prepared_params {
                self.params.prepared(id, n);
            }
            self.apply_effect(effect);
            if let Some(s) = new_schema {
                self.database = Some(s);
            }
        }
    }

    fn apply_effect(&mut self, effect: Effect) {
        match effect {
            Effect::None => {}
            Effect::SetDb(db) => self.database = Some(db),
            Effect::ChangeUser { user, db } => {
                self.user = Some(user);
                self.database = db;
                self.stmts.clear();
                self.params.clear();
            }
            Effect::ClearStatements => {
                self.stmts.clear();
                self.params.clear();
            }
            Effect::MultiStatements(on) => self.multi_statements = Some(on),
        }
    }

    /// Emits every request in flight as incomplete (their responses can no longer be read).
    pub(super) fn abandon_inflight(&mut self, sink: &mut dyn Sink) {
        while let Some(mut p) = self.inflight.pop_front() {
            p.core.damaged = true;
            self.emit(p, Outcome::Incomplete, sink);
        }
    }

    /// A prepare response whose final EOF was uncertain is complete once the client moves on.
    pub(super) fn finish_maybe_done(&mut self, sink: &mut dyn Sink) {
        if let Some(h) = self.inflight.front()
            && h.resp == Resp::Prepare(Prep::WaitEof { certain: false })
            && let Some(p) = self.inflight.pop_front()
        {
            self.emit(p, Outcome::Ok, sink);
        }
    }

    /// The server direction lost bytes: what was in flight cannot be completed.
    pub(super) fn server_gap(&mut self, sink: &mut dyn Sink) {
        self.abandon_inflight(sink);
    }

    /// The client direction lost bytes.
    pub(super) fn client_gap(&mut self) {
        match self.inflight.front_mut() {
            Some(h) if h.resp == Resp::Infile => {
                h.core.damaged = true;
                h.resp = Resp::Results(Rs::Start);
            }
            Some(h) if h.resp == Resp::Auth => h.core.damaged = true,
            _ => self.orphans_expected = true,
        }
    }

    pub(super) fn close(&mut self, sink: &mut dyn Sink) {
        while let Some(p) = self.inflight.pop_front() {
            let outcome = if matches!(p.resp, Resp::Prepare(Prep::WaitEof { .. })) {
                Outcome::Ok
            } else if p.core.first_response_ns.is_some() || p.core.damaged {
                Outcome::Incomplete
            } else {
                Outcome::NoResponse
            };
            self.emit(p, outcome, sink);
        }
    }
}

#[cfg(test)]
mod recycle_tests {
    use super::*;
    use crate::kit::TextBudget;

    /// A used record, emptied and restarted, is exactly a new one, and gave back its text.
    #[test]
    fn restarted_record_is_new() {
        let budget = TextBudget::new(1000);
        let charge = budget.charge(100);
        let mut p = Pending::new(Command(3), 5, 7);
        p.core.text = Some("select 1".into());
        p.core.rows_sent = 9;
        p.core.damaged = true;
        p.stmt = Some(4);
        p.resolve_stmt = true;
        p.resp = Resp::Rows;
        p.effect = Effect::ClearStatements;
        p.new_schema = Some("db".into());
        p.prepared = Some(2);
        p.prepared_params = 3;
        p.text_charge = charge;
        p.txn = Some(TxnState::Idle);
        assert_eq!(budget.used(), 100);
        p.clear();
        assert_eq!(budget.used(), 0);
        p.restart(Command(23), 11, 13);
        let want = Pending::new(Command(23), 11, 13);
        assert_eq!(format!("{p:?}"), format!("{want:?}"));
    }
}
