//! Simple-protocol Query messages: the text split into statements ([`super::super::statements`]),
//! each statement's response followed to its CommandComplete, EmptyQueryResponse or
//! ErrorResponse and emitted as an event of its own, and the ReadyForQuery that ends them all.

use std::ops::Range;
use std::sync::Arc;

use super::super::message::Backend;
use super::super::statements::{next_statement, single_statement};
use super::super::wire::Message;
use super::Act;
use super::state::{Conn, Flow, Item, Step, Unit, Want};
use crate::kit::cut_text;
use crate::{QueryEvent, Sink};

/// The statements of one simple Query message.
#[derive(Debug)]
pub(super) struct QueryState {
    pub full: Arc<str>,
    /// `full` is the one statement's text.
    pub single: bool,
    /// The message text was cut (at `max_text`, or by a capture gap).
    pub truncated: bool,
    /// Wire bytes of the Query message.
    pub msg_wire: u64,
    /// Message bytes already given to emitted statements.
    pub attributed: u64,
    /// The current statement's text in `full`.
    pub cur: Range<usize>,
    /// Where the current statement's piece of the text begins.
    pub piece_start: usize,
    /// Where the search for the next statement starts.
    pub next: usize,
    /// The current statement got its CommandComplete, EmptyQueryResponse or ErrorResponse.
    pub stmt_done: bool,
    /// An error ended the query: later statements do not run.
    pub aborted: bool,
    /// Notices (and the like) that came after a statement completed: they belong to whatever
    /// comes next.
    pub pending_async: u64,
}

impl QueryState {
    /// Makes the current statement's text run over every statement found from `from` on.
    /// Returns whether there was one.
    pub fn absorb_rest(&mut self, mut from: usize) -> bool {
        let mut found = false;
        while let Some(st) = next_statement(self.full.as_bytes(), from) {
            self.cur.end = st.text.end;
            from = st.end;
            found = true;
        }
        found
    }
}

/// The statements of a Query message's text.
pub(super) fn query_state(sql: &[u8], cut: bool, max: usize, wire: u64) -> QueryState {
    let (text, truncated) = cut_text(sql, cut, max);
    let b = text.as_bytes();
    let (full, single, cur, next): (Arc<str>, bool, Range<usize>, usize) = match single_statement(b)
    {
        Some(r) => {
            let t: Arc<str> = Arc::from(text.get(r).unwrap_or(""));
            let n = t.len();
            (t, true, 0..n, n)
        }
        None => {
            let first = next_statement(b, 0);
            let (cur, next) = first.map_or((0..0, b.len()), |s| (s.text, s.end));
            (Arc::from(text.as_ref()), false, cur, next)
        }
    };
    QueryState {
        full,
        single,
        truncated,
        msg_wire: wire,
        attributed: 0,
        cur,
        piece_start: 0,
        next,
        stmt_done: false,
        aborted: false,
        pending_async: 0,
    }
}

impl Conn {
    /// The current statement of a query unit as an event (`last`: it also gets the rest of
    /// the message bytes).
    pub(super) fn statement_event(&self, u: &Unit, last: bool) -> QueryEvent {
        let mut ev = self.base_event(u);
        if let Some(q) = &u.query {
            let piece = if last {
                q.msg_wire.saturating_sub(q.attributed)
            } else {
                (q.next - q.piece_start) as u64
            };
            ev.bytes_in = u.core.bytes_in + piece;
            if last {
                ev.bytes_out += q.pending_async;
            }
            ev.text = Some(if q.single {
                q.full.clone()
            } else {
                Arc::from(q.full.get(q.cur.clone()).unwrap_or(""))
            });
            ev.text_truncated = q.truncated && q.next >= q.full.len();
        }
        ev
    }

    /// One message of a simple query's response.
    pub(super) fn step_query(
        &mut self,
        item: Item,
        m: &Message<'_>,
        b: &Backend<'_>,
        ts: u64,
        sink: &mut dyn Sink,
        act: &mut Act,
    ) -> Step {
        let Want::Query(flow) = item.want else {
            return Step::Mismatch;
        };
        let is_ready = matches!(b, Backend::ReadyForQuery { .. });
        // The first message of the next statement: the previous one is over.
        if !is_ready && self.unit_mut(item.unit).is_some_and(|u| u.stmt_done()) {
            self.next_statement(item.unit, sink);
        }
        if let Some(u) = self.unit_mut(item.unit) {
            let pending = u
                .query
                .as_mut()
                .map_or(0, |q| std::mem::take(&mut q.pending_async));
            let c = &mut u.core;
            c.bytes_out += m.wire_len() + pending;
            c.first_response_ns.get_or_insert(m.start_ts);
            if !is_ready {
                c.end_ns = Some(ts);
            } else {
                c.end_ns.get_or_insert(ts);
            }
        }
        self.query_message(item.unit, flow, b, act)
    }

    /// The state transition of a query's response on one message.
    fn query_message(
        &mut self,
        unit: Option<u64>,
        flow: Flow,
        b: &Backend<'_>,
        act: &mut Act,
    ) -> Step {
        match b {
            Backend::ReadyForQuery { .. } => {
                self.finish_query(unit);
                return Step::Done;
            }
            Backend::RowDescription => self.set_query_flow(Flow::Rows),
            Backend::DataRow => {
                if let Some(u) = self.unit_mut(unit) {
                    u.core.rows_sent += 1;
                }
                self.set_query_flow(Flow::Rows);
            }
            Backend::CommandComplete(t) => {
                if let Some(u) = self.unit_mut(unit) {
                    u.apply_tag(*t);
                }
                self.set_query_flow(Flow::Start);
                self.statement_done(unit, false);
            }
            Backend::EmptyQueryResponse => {
                self.set_query_flow(Flow::Start);
                self.statement_done(unit, false);
            }
            Backend::ErrorResponse(f) => {
                if let Some(u) = self.unit_mut(unit) {
                    u.set_error(f);
                }
                self.set_query_flow(Flow::Start);
                self.statement_done(unit, true);
            }
            Backend::CopyInResponse => {
                self.start_copy_in(unit, false);
                self.set_query_flow(Flow::CopyIn);
            }
            Backend::CopyOutResponse => {
                if let Some(u) = self.unit_mut(unit) {
                    u.copy_out = true;
                }
                self.set_query_flow(Flow::CopyOut);
            }
            Backend::CopyData | Backend::CopyDone if flow == Flow::CopyOut => {}
            Backend::CopyBothResponse => {
                // Replication streaming: the statement is answered, nothing more will be.
                act.stop = true;
                self.statement_done(unit, false);
                self.finish_query(unit);
                return Step::Done;
            }
            _ => return Step::Mismatch,
        }
        Step::More
    }

    fn set_query_flow(&mut self, f: Flow) {
        if let Some(i) = self.items.front_mut() {
            i.want = Want::Query(f);
        }
    }

    /// The current statement got its answer (`aborted`: an error, later ones do not run).
    fn statement_done(&mut self, unit: Option<u64>, aborted: bool) {
        if let Some(u) = self.unit_mut(unit)
            && let Some(q) = u.query.as_mut()
        {
            q.stmt_done = true;
            q.aborted |= aborted;
        }
    }

    /// The current statement of a query unit is over and another one answers: emit it and
    /// move on (or, when the text holds no further statement, keep counting into it).
    pub(super) fn next_statement(&mut self, unit: Option<u64>, sink: &mut dyn Sink) {
        let Some(u) = self.unit_mut(unit) else { return };
        let Some(q) = u.query.as_mut() else { return };
        q.stmt_done = false;
        if q.single || q.aborted {
            return;
        }
        let Some(st) = next_statement(q.full.as_bytes(), q.next) else {
            return;
        };
        let Some(u) = self.units.iter().find(|x| Some(x.id) == unit) else {
            return;
        };
        let ev = self.statement_event(u, false);
        self.send_plain(ev, sink);
        let Some(u) = self.unit_mut(unit) else { return };
        let Some(q) = u.query.as_mut() else { return };
        q.attributed += (q.next - q.piece_start) as u64;
        q.piece_start = q.next;
        q.cur = st.text;
        q.next = st.end;
        let c = &mut u.core;
        c.start_ns = c.end_ns.unwrap_or(c.start_ns);
        c.first_response_ns = None;
        c.end_ns = None;
        c.bytes_in = 0;
        c.bytes_out = 0;
        c.rows_sent = 0;
        c.rows_affected = 0;
        c.error = None;
        u.copy_out = false;
    }

    /// ReadyForQuery ended a simple query. If statements the splitter found were never
    /// answered and no error explains it, the text held fewer statements than we thought: the
    /// last event covers the rest of it.
    fn finish_query(&mut self, unit: Option<u64>) {
        let Some(u) = self.unit_mut(unit) else { return };
        let Some(q) = u.query.as_mut() else { return };
        if q.single || q.aborted {
            return;
        }
        if q.absorb_rest(q.next) {
            q.next = q.full.len();
        }
    }
}
