//! Loss and the end of a PostgreSQL connection on the conversation side: a gap the framing
//! cannot step over empties or marks the queues, and at close every request still in flight is
//! emitted with what was seen of it.

use super::super::statements::next_statement;
use super::state::{CLOSED, Conn, Kind, Unit};
use crate::{Outcome, Sink};

impl Conn {
    /// The server stream lost bytes we cannot step over: what was in flight cannot be
    /// completed; it is emitted now as incomplete.
    pub(super) fn server_gap(&mut self, sink: &mut dyn Sink) {
        self.items.clear();
        while let Some(mut u) = self.units.pop_front() {
            let pending = u.items_left > 0;
            u.items_left = 0;
            if pending {
                u.core.damaged = true;
            }
            let outcome = (pending && u.core.error.is_none()).then_some(Outcome::Incomplete);
            if u.kind == Kind::Query
                && let Some(q) = u.query.as_mut()
                && !q.single
                && !q.aborted
            {
                // What was not answered of the query goes with this last event.
                q.absorb_rest(q.next);
                q.next = q.full.len();
            }
            self.emit(u, outcome, sink);
        }
        // What is still held will not see its batch's ReadyForQuery.
        self.release(None, sink);
        self.open = CLOSED;
        self.skip = None;
        self.copy_in = None;
        self.orphans_expected = true;
        self.fresh = true;
    }

    /// The client stream lost bytes we cannot step over: requests may have been lost.
    pub(super) fn client_gap(&mut self) {
        if let Some(owner) = self.copy_in {
            // Lost copy data: the COPY's byte count is short.
            if let Some(u) = self.unit_mut(owner) {
                u.core.damaged = true;
            }
            return;
        }
        if let Some(u) = self.unit_mut(self.open.unit) {
            u.core.damaged = true;
        }
        if let Some(owner) = self.skip {
            if let Some(u) = self.unit_mut(owner) {
                u.core.damaged = true;
            }
            return;
        }
        self.lost_requests();
    }

    /// The connection ended: every request is emitted.
    pub(super) fn close(&mut self, sink: &mut dyn Sink) {
        self.open = CLOSED;
        self.skip = None;
        self.items.clear();
        while let Some(u) = self.units.pop_front() {
            if !self.close_unit(u, sink) {
                break;
            }
        }
        // The batch's ReadyForQuery will not come.
        self.release(None, sink);
    }

    /// Emits a request at the end of the connection. Returns false if the queue was lost on
    /// the way (it cannot be).
    fn close_unit(&mut self, mut u: Unit, sink: &mut dyn Sink) -> bool {
        if u.items_left == 0 {
            self.emit(u, None, sink);
            return true;
        }
        u.items_left = 0;
        let answered = u.core.first_response_ns.is_some();
        if u.kind == Kind::Query
            && let Some(q) = u.query.as_mut()
            && !q.single
        {
            if q.stmt_done {
                return self.close_after_statement(u, sink);
            }
            q.absorb_rest(q.next);
            q.next = q.full.len();
        }
        let outcome = if u.core.error.is_some() {
            Outcome::Error
        } else if answered || u.core.damaged {
            Outcome::Incomplete
        } else {
            Outcome::NoResponse
        };
        self.emit(u, Some(outcome), sink);
        true
    }

    /// A query whose statement in progress finished at close: that statement is emitted as
    /// answered, and the statements after it, never answered, as one more event.
    fn close_after_statement(&mut self, u: Unit, sink: &mut dyn Sink) -> bool {
        let rest = u
            .query
            .as_ref()
            .filter(|q| !q.aborted)
            .and_then(|q| next_statement(q.full.as_bytes(), q.next));
        let Some(st) = rest else {
            self.emit(u, None, sink);
            return true;
        };
        let id = Some(u.id);
        self.units.push_front(u);
        self.next_statement(id, sink);
        let Some(mut u) = self.units.pop_front() else {
            return false;
        };
        if let Some(q) = u.query.as_mut() {
            q.absorb_rest(st.end);
            q.next = q.full.len();
        }
        self.emit(u, Some(Outcome::NoResponse), sink);
        true
    }
}
