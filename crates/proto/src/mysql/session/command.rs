//! Client commands once logged in: each request becomes a [`Pending`] record (its text, its
//! statement, what it will change on the connection) queued for its response, or an event
//! right away when no reply is expected.

use super::super::message::{Command, Reply, Request, cmd};
use super::super::wire::Message;
use super::Act;
use super::conn::{Conn, Effect, Pending};
use super::multi;
use super::result::{Prep, Resp, Rs};
use super::text::{make_text, sql_total};
use crate::kit::lossy_arc;
use crate::{Outcome, Sink};

impl Conn {
    /// A whole client message after login.
    pub(super) fn client_command(
        &mut self,
        m: &Message<'_>,
        wire: u64,
        sink: &mut dyn Sink,
    ) -> Act {
        if self.continues_exchange(m, wire) {
            return Act::default();
        }
        self.finish_maybe_done(sink);
        if m.seq != 0 {
            // Not a command: a packet of an exchange we did not follow.
            sink.health().unparsed_bytes += wire;
            return Act::default();
        }
        if m.len == 0 {
            sink.health().malformed += 1;
            sink.health().unparsed_bytes += wire;
            return Act::default();
        }
        let command = Command(m.head.first().copied().unwrap_or(0));
        let mut p = self.fresh(command, m.start_ts, wire);
        p.core.text_partial = m.lost > 0;
        let parsed = Request::parse(m.head, self.caps);
        if let Ok(Request::Execute { stmt_id, flags }) = parsed {
            self.bind_params(&mut p, m, stmt_id, flags);
        }
        match parsed {
            Ok(Request::Query { sql }) => self.query(&mut p, m, sql),
            Ok(Request::Prepare { sql }) => self.prepare(&mut p, m, sql),
            Ok(
                Request::Execute { stmt_id, .. }
                | Request::BulkExecute { stmt_id, .. }
                | Request::Fetch { stmt_id, .. }
                | Request::Close { stmt_id }
                | Request::Reset { stmt_id }
                | Request::SendLongData { stmt_id, .. },
            ) => {
                self.statement(&mut p, stmt_id);
                if command.0 == cmd::STMT_CLOSE {
                    self.close_statement(p, stmt_id, sink);
                    return Act::default();
                }
            }
            Ok(Request::InitDb { schema }) => {
                if !schema.is_empty() {
                    p.effect = Effect::SetDb(lossy_arc(schema));
                }
            }
            Ok(Request::ChangeUser { user, schema }) => {
                p.effect = Effect::ChangeUser {
                    user: lossy_arc(user),
                    db: schema.filter(|s| !s.is_empty()).map(lossy_arc),
                };
            }
            Ok(Request::SetOption { option }) => p.effect = multi::set_option(option),
            Ok(Request::Other(c)) if c.0 == cmd::RESET_CONNECTION => {
                p.effect = Effect::ClearStatements;
            }
            Ok(_) => {}
            // A head cut by a capture gap may stop inside a field.
            Err(_) if m.lost > 0 => {}
            Err(_) => sink.health().malformed += 1,
        }
        self.send(p, sink)
    }

    /// Client packets that belong to the response in progress (LOCAL INFILE data, or the auth
    /// exchange of COM_CHANGE_USER) rather than starting a command.
    fn continues_exchange(&mut self, m: &Message<'_>, wire: u64) -> bool {
        let Some(h) = self.inflight.front_mut() else {
            return false;
        };
        match h.resp {
            Resp::Infile => {
                h.core.bytes_in += wire;
                if m.len == 0 {
                    h.resp = Resp::Results(Rs::Start);
                }
                true
            }
            Resp::Auth => {
                h.core.bytes_in += wire;
                true
            }
            _ => false,
        }
    }

    /// COM_QUERY: its text, and the schema a `USE` selects.
    /// Several statements become one request each, the first one's now (see [`multi`]).
    fn query(&self, p: &mut Pending, m: &Message<'_>, sql: &[u8]) {
        p.text_charge = self.pending_text.take();
        let (t, tr) = make_text(sql, m.tail, sql_total(m, sql), self.cfg.max_text);
        // Statements cannot be told apart in a text with a hole: it stays one request.
        multi::query_text(p, t, tr, self.splits_statements() && m.lost == 0);
    }

    /// COM_STMT_PREPARE: its text (remembered under the id its OK assigns).
    fn prepare(&self, p: &mut Pending, m: &Message<'_>, sql: &[u8]) {
        p.text_charge = self.pending_text.take();
        let (t, tr) = make_text(sql, m.tail, sql_total(m, sql), self.cfg.max_text);
        p.core.text = Some(t);
        p.core.text_truncated = tr;
    }

    /// A command on a prepared statement: its text now if known, else when emitted.
    fn statement(&self, p: &mut Pending, stmt_id: u32) {
        p.stmt = Some(stmt_id);
        match self.stmts.get(&stmt_id) {
            Some(named) if stmt_id != u32::MAX => {
                p.core.text = Some(named.text);
                p.core.text_truncated = named.truncated;
            }
            _ => p.resolve_stmt = true,
        }
    }

    /// COM_STMT_CLOSE: no reply; the statement is forgotten after its event.
    fn close_statement(&mut self, mut p: Box<Pending>, stmt_id: u32, sink: &mut dyn Sink) {
        self.params.forget(stmt_id);
        if p.resolve_stmt {
            let ev = self.event(&mut p, Outcome::NoReplyExpected);
            self.recycle(p);
            self.stmts.remove(&ev.statement_id.unwrap_or(stmt_id));
            sink.event(ev);
        } else {
            self.stmts.remove(&stmt_id);
            self.emit(p, Outcome::NoReplyExpected, sink);
        }
    }

    /// A parsed request: emitted now when no reply is expected, else queued for its response.
    #[inline]
    fn send(&mut self, mut p: Box<Pending>, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        p.resp = match p.command.reply() {
            Reply::None => {
                self.emit(p, Outcome::NoReplyExpected, sink);
                return act;
            }
            Reply::Stream => {
                // A replication stream follows: there is no reply to pair, and nothing else
                // will be asked on this connection.
                self.emit(p, Outcome::NoReplyExpected, sink);
                act.stop = true;
                return act;
            }
            Reply::Single => Resp::Single,
            Reply::Results => Resp::Results(Rs::Start),
            Reply::Prepare => Resp::Prepare(Prep::Start),
            Reply::Rows => Resp::Rows,
            Reply::Columns => Resp::Columns,
            Reply::Text => Resp::Text,
            Reply::Auth => Resp::Auth,
        };
        if self.inflight.len() >= self.cfg.max_inflight {
            sink.health().inflight_overflow += 1;
            self.orphans_expected = true;
            self.recycle(p);
            return act;
        }
        self.inflight.push_back(p);
        act.server_boundary = true;
        act
    }
}
