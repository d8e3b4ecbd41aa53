//! The transaction state of extended-protocol events. PostgreSQL reports it only in the
//! ReadyForQuery that answers a Sync, after the batch's executions were answered: their events
//! wait here (in order, bounded) until that ReadyForQuery, whose status they then carry.
//!
//! Within one batch only the state at its end is known. In a transaction (`T`) or a failed one
//! (`E`) at the end: every event of the batch carries it (the transaction, if it began in the
//! batch, began at the latest with the batch's first request). Idle (`I`) at the end: only the
//! request that received the ReadyForQuery (the one the Sync joined, or the one that failed)
//! carries it, the earlier ones carry nothing (a transaction that was open before the batch
//! ended at the latest with its last request). Events are only delayed, never reordered:
//! timestamps and every other field stay what they were.

use super::TxStatus;
use super::state::{Conn, Kind, Unit};
use crate::{Outcome, QueryEvent, Sink, TxnState};

impl Conn {
    /// Sends the event of unit `u` (already built), setting its transaction state: held when it
    /// is an extended-protocol request answered before its batch's ReadyForQuery.
    pub(super) fn send(&mut self, u: &Unit, mut ev: QueryEvent, sink: &mut dyn Sink) {
        let extended = matches!(
            u.kind,
            Kind::Prepare | Kind::Bind | Kind::Execute | Kind::Fetch | Kind::Describe | Kind::Close
        );
        if extended && !u.synced {
            self.hold(ev, sink);
            return;
        }
        // A simple query or function call is emitted after its ReadyForQuery, an
        // extended-protocol request that received its Sync's (`synced`) too: the state it
        // reported is this request's.
        let answered = matches!(ev.outcome, Outcome::Ok | Outcome::Error);
        if answered && (extended || matches!(u.kind, Kind::Query | Kind::FunctionCall)) {
            ev.txn = self.tx.map(TxStatus::event_state);
        }
        self.release(ev.txn, sink);
        sink.event(ev);
    }

    /// Sends an event that has no transaction state of its own, after the held ones (which
    /// then carry none either: their batch's end was not seen).
    pub(super) fn send_plain(&mut self, ev: QueryEvent, sink: &mut dyn Sink) {
        self.release(None, sink);
        sink.event(ev);
    }

    /// A ReadyForQuery was processed: whatever is still held was answered before it.
    pub(super) fn ready_seen(&mut self, sink: &mut dyn Sink) {
        if !self.held.is_empty() {
            self.release(self.tx.map(TxStatus::event_state), sink);
        }
    }

    /// Holds `ev` until its batch's ReadyForQuery. Beyond `max_inflight` held events (a client
    /// that keeps sending without a Sync) the oldest is sent without a state.
    fn hold(&mut self, ev: QueryEvent, sink: &mut dyn Sink) {
        if self.held.len() >= self.cfg.max_inflight.max(1)
            && let Some(old) = self.held.pop_front()
        {
            sink.event(old);
        }
        self.held.push_back(ev);
    }

    /// Sends the held events; they carry `end` only when it says the batch ended inside a
    /// transaction (see the module documentation).
    pub(super) fn release(&mut self, end: Option<TxnState>, sink: &mut dyn Sink) {
        let txn = end.filter(|s| s.in_transaction());
        while let Some(mut ev) = self.held.pop_front() {
            ev.txn = txn;
            sink.event(ev);
        }
    }
}
