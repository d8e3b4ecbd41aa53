//! The two queues of a PostgreSQL conversation (requests that will become events, responses
//! the server owes), the keep policy of the framing, and emitting events.

use super::super::message::{
    MAX_NAME, backend_len_ok, be, fe, frontend_len_ok, is_backend_tag, is_frontend_tag,
};
use super::super::wire::{Header, MAX_STARTUP_LEN, Message};
use super::state::{CLOSED, Conn, Item, Kind, Unit, Want, name_hash};
use super::{CLIENT, ERROR_KEEP, MAX_PORTALS};
use crate::kit::{Origin, RequestCore, Tags};
use crate::{Direction, Outcome, Protocol, QueryEvent, Sink};

/// Requests in flight a Bind looks back through for the Parse it executes (bounded, so a long
/// pipeline costs O(1) per Bind; a Parse further back keeps its own time).
const PARSE_LOOKBACK: usize = 64;

impl Conn {
    pub(super) fn unit_mut(&mut self, id: Option<u64>) -> Option<&mut Unit> {
        let id = id?;
        let front = self.units.front()?.id;
        let i = usize::try_from(id.checked_sub(front)?).ok()?;
        self.units.get_mut(i)
    }

    /// Keep policy: how many body bytes of a message to keep, or `None` for an impossible
    /// length.
    pub(super) fn keep(&self, d: Direction, tag: u8, len: u32, typed: bool) -> Option<usize> {
        if !typed {
            return (8..=MAX_STARTUP_LEN).contains(&len).then_some(len as usize);
        }
        let name = MAX_NAME as usize + 1;
        if d == CLIENT {
            let known = is_frontend_tag(tag);
            if known && !frontend_len_ok(tag, len) || !known && !Header::len_ok(len) {
                return None;
            }
            Some(match tag {
                fe::QUERY => self.text_keep(len, self.cfg.max_text.saturating_add(1)),
                fe::PARSE => self.text_keep(len, name + self.cfg.max_text.saturating_add(1)),
                fe::BIND => (2 * name + super::params::BIND_PARAMS_KEEP).min(len as usize),
                fe::DESCRIBE | fe::CLOSE | fe::EXECUTE => len as usize,
                fe::FUNCTION_CALL => 4,
                _ => 0,
            })
        } else {
            let known = is_backend_tag(tag);
            if known && !backend_len_ok(tag, len) || !known && !Header::len_ok(len) {
                return None;
            }
            Some(match tag {
                be::ERROR_RESPONSE => ERROR_KEEP,
                be::PARAMETER_DESCRIPTION => super::params::PARAM_DESC_KEEP.min(len as usize),
                be::COMMAND_COMPLETE | be::READY_FOR_QUERY | be::AUTHENTICATION => len as usize,
                _ => 0,
            })
        }
    }

    /// Body bytes to keep of a client message carrying statement text (`len`: its length
    /// field), at most `max`, within the run's text budget: the share taken waits in
    /// `pending_text` for the unit the message becomes.
    fn text_keep(&self, len: u32, max: usize) -> usize {
        let need = (len as usize).saturating_sub(4).min(max);
        let (keep, charge) = self.cfg.text_budget.keep(need);
        *self.pending_text.borrow_mut() = charge;
        keep
    }

    /// The event of a unit, with the outcome its state implies.
    pub(super) fn base_event(&self, u: &Unit) -> QueryEvent {
        self.event_of(u, u.core.clone())
    }

    /// [`Conn::base_event`] of a unit being emitted: its record moves into the event (no
    /// copies of its text, error and parameters to drop right after).
    fn take_event(&self, u: &mut Unit) -> QueryEvent {
        let core = std::mem::replace(&mut u.core, RequestCore::new(0, 0));
        self.event_of(u, core)
    }

    /// The event of unit `u` from its record `core` (`u.core` or what was taken from it).
    fn event_of(&self, u: &Unit, core: RequestCore) -> QueryEvent {
        let origin = Origin {
            protocol: Protocol::Postgres,
            meta: &self.meta,
        };
        let tags = Tags::new(u.kind.name()).user_db(self.user.clone(), self.database.clone());
        let outcome = core.implied_outcome(u.no_reply);
        // A folded Parse that failed is timed after all: the execution it travelled with never
        // ran (the server skipped it), so this event is the only one carrying that round trip.
        let timed = u.timed || core.error.is_some();
        let mut ev = core.into_event(origin, tags, outcome);
        ev.timed = timed;
        ev
    }

    /// Emits a finished unit. `outcome` overrides the one its state implies.
    pub(super) fn emit(&mut self, mut u: Unit, outcome: Option<Outcome>, sink: &mut dyn Sink) {
        if u.skipped {
            return;
        }
        if u.core.error.is_some()
            && let Some(undo) = &u.undo
            && let Some(ins) = &undo.inserted
            && self.stmts.holds(&undo.name[..], ins)
        {
            match &undo.previous {
                Some(p) => {
                    self.stmts
                        .insert(undo.name.clone(), p.text.clone(), p.truncated);
                }
                None => {
                    self.stmts.remove(&undo.name[..]);
                }
            }
        }
        let mut ev = if u.kind == Kind::Query {
            self.statement_event(&u, true)
        } else {
            self.take_event(&mut u)
        };
        if let Some(o) = outcome {
            ev.outcome = o;
        }
        self.send(&u, ev, sink);
    }

    /// Emits the units at the front that owe nothing and can no longer grow.
    pub(super) fn drain(&mut self, sink: &mut dyn Sink) {
        while let Some(u) = self.units.front() {
            let open = self.open.unit == Some(u.id) || self.skip == Some(Some(u.id));
            if u.items_left > 0 || open {
                break;
            }
            if let Some(u) = self.units.pop_front() {
                self.emit(u, None, sink);
            }
        }
    }

    /// Records that `portal` was executed; false if it already had been since its Bind.
    pub(super) fn mark_executed(&mut self, portal: &[u8]) -> bool {
        let h = name_hash(portal);
        if self.executed.contains(&h) {
            return false;
        }
        if self.executed.len() >= MAX_PORTALS {
            self.executed.pop_front();
        }
        self.executed.push_back(h);
        true
    }

    /// A Bind of `statement` (unit `bind`) was sent: the latest Parse of that statement among
    /// the last [`PARSE_LOOKBACK`] requests in flight, if the server has not answered it all
    /// yet, travels in the same flight as this execution (no client round trip between them).
    /// It is part of that execution: its event becomes count-only, so the round trip the
    /// execution carries is not timed twice. A Parse whose answer came before the Bind was
    /// sent (its own Sync or Flush round trip) keeps its time.
    pub(super) fn fold_parse(&mut self, statement: &[u8], bind: Option<u64>) {
        let h = name_hash(statement);
        let parse = self
            .units
            .iter_mut()
            .rev()
            .filter(|u| Some(u.id) != bind)
            .take(PARSE_LOOKBACK)
            .find(|u| u.kind == Kind::Prepare && u.stmt == Some(h));
        if let Some(u) = parse
            && u.items_left > 0
        {
            u.timed = false;
        }
    }

    pub(super) fn forget_executed(&mut self, portal: &[u8]) {
        let h = name_hash(portal);
        self.executed.retain(|&x| x != h);
    }

    /// Starts a new request: closes the open one and queues a unit (or, beyond `max_inflight`,
    /// nothing: its items are tracked without an event).
    pub(super) fn new_unit(
        &mut self,
        kind: Kind,
        m: &Message<'_>,
        sink: &mut dyn Sink,
    ) -> Option<u64> {
        self.open = CLOSED;
        if self.units.len() >= self.cfg.max_inflight.max(1) {
            sink.health().inflight_overflow += 1;
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut u = Unit::new(id, kind, m.start_ts, m.wire_len());
        u.core.damaged = m.damaged;
        // Bytes of the request were lost while its framing held.
        u.core.text_partial = m.damaged;
        self.units.push_back(u);
        Some(id)
    }

    /// Queues a response owed to `unit`. Returns false when the queue is full (the caller's
    /// request is then dropped and its responses skipped).
    pub(super) fn push_item(&mut self, want: Want, unit: Option<u64>, sink: &mut dyn Sink) -> bool {
        if self.items.len() >= self.max_items {
            sink.health().inflight_overflow += 1;
            if let Some(u) = self.unit_mut(unit) {
                // Its response will be skipped: a new request gives no event, a request
                // joined by this message is incomplete.
                if u.items_left == 0 {
                    u.skipped = true;
                } else {
                    u.core.damaged = true;
                }
            }
            self.lost_requests();
            return false;
        }
        if let Some(u) = self.unit_mut(unit) {
            u.items_left += 1;
        }
        self.items.push_back(Item { want, unit });
        true
    }

    /// Requests were lost (client gap, queue full): mark the place.
    pub(super) fn lost_requests(&mut self) {
        self.orphans_expected = true;
        self.open = CLOSED;
        if self.items.back().map(|i| i.want) != Some(Want::Lost) {
            self.items.push_back(Item {
                want: Want::Lost,
                unit: None,
            });
        }
    }

    pub(super) fn pop_item(&mut self) -> Option<Item> {
        let it = self.items.pop_front()?;
        if let Some(u) = self.unit_mut(it.unit) {
            u.items_left = u.items_left.saturating_sub(1);
        }
        Some(it)
    }

    pub(super) fn add_in(&mut self, unit: Option<u64>, wire: u64, damaged: bool) {
        if let Some(u) = self.unit_mut(unit) {
            u.core.bytes_in += wire;
            u.core.damaged |= damaged;
            u.core.text_partial |= damaged;
        }
    }
}
