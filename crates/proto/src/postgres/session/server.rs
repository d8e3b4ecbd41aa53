//! Backend messages in the query phase: each is matched against the response at the front of
//! the owed queue (extended protocol, COPY; simple queries are in [`super::query`]), with the
//! skip-until-Sync rule after an error and the handling of responses nobody asked for.

use super::super::message::{Backend, be};
use super::super::wire::Message;
use super::Act;
use super::state::{CLOSED, Conn, Flow, Item, Open, OpenKind, Step, Want, fits, tx_status};
use crate::Sink;

impl Conn {
    pub(super) fn on_server(&mut self, m: &Message<'_>, ts: u64, sink: &mut dyn Sink) -> Act {
        let act = self.on_server_message(m, ts, sink);
        if m.tag == be::READY_FOR_QUERY {
            self.ready_seen(sink);
        }
        act
    }

    fn on_server_message(&mut self, m: &Message<'_>, ts: u64, sink: &mut dyn Sink) -> Act {
        if let Some(act) = self.on_server_outside_queries(m, sink) {
            return act;
        }
        let mut act = Act::default();
        let wire = m.wire_len();
        if Backend::is_async(m.tag) {
            self.on_async(wire);
            return act;
        }
        let parsed = match Backend::parse(m.tag, m.head) {
            Ok(b) => b,
            Err(_) => {
                sink.health().malformed += 1;
                sink.health().unparsed_bytes += wire;
                self.fresh = true;
                return act;
            }
        };
        if let Backend::ReadyForQuery { status } = parsed {
            self.tx = Some(tx_status(status));
        }
        loop {
            self.drain(sink);
            let Some(item) = self.items.front().copied() else {
                return self.orphan(&parsed, wire, sink);
            };
            if item.want == Want::Lost {
                if self.past_lost(m.tag) {
                    continue;
                }
                sink.health().unparsed_bytes += wire;
                return act;
            }
            if !fits(item.want, m.tag) {
                if self.misfit(item, m.tag, wire, sink) {
                    continue;
                }
                return act;
            }
            self.fresh = false;
            self.orphans_expected = false;
            let step = self.step(item, m, &parsed, ts, sink, &mut act);
            match step {
                Step::More => {}
                Step::Done => {
                    self.pop_item();
                }
                Step::Failed => self.skip_to_sync(item.unit),
                Step::Mismatch => {
                    sink.health().malformed += 1;
                    self.fresh = true;
                }
            }
            self.drain(sink);
            return act;
        }
    }

    /// Notices, notifications and parameter changes may come at any time; they are counted
    /// with the response in progress, if any.
    fn on_async(&mut self, wire: u64) {
        let unit = self.items.front().and_then(|i| i.unit);
        if let Some(u) = self.unit_mut(unit) {
            match u.query.as_mut() {
                Some(q) if q.stmt_done => q.pending_async += wire,
                _ => u.core.bytes_out += wire,
            }
        }
    }

    /// A message with lost requests at the front of the queue. Returns true when the place of
    /// the loss is passed (the message fits the next request we saw): match it again.
    fn past_lost(&mut self, tag: u8) -> bool {
        match self.items.get(1) {
            Some(next) if fits(next.want, tag) => {
                self.pop_item();
                return true;
            }
            None if tag == be::READY_FOR_QUERY => {
                // The lost requests' responses may be over; more of them (after more lost
                // Syncs) would come with nothing in flight.
                self.pop_item();
                self.orphans_expected = true;
            }
            _ => {}
        }
        false
    }

    /// A message that does not fit the response at the front. Returns true when the queue
    /// was advanced to a later ReadyForQuery it fits: match it again.
    fn misfit(&mut self, item: Item, tag: u8, wire: u64, sink: &mut dyn Sink) -> bool {
        if self.fresh {
            sink.health().unparsed_bytes += wire;
            return false;
        }
        if tag == be::READY_FOR_QUERY
            && let Some(k) = self
                .items
                .iter()
                .skip(1)
                .position(|i| matches!(i.want, Want::Ready | Want::Query(_) | Want::Function))
        {
            let k = k + 1;
            // The server reached a Sync we expected later: what lies before it was not
            // answered as we thought.
            for _ in 0..k {
                if let Some(it) = self.pop_item()
                    && let Some(u) = self.unit_mut(it.unit)
                {
                    u.core.damaged = true;
                }
            }
            sink.health().malformed += 1;
            return true;
        }
        sink.health().malformed += 1;
        sink.health().unparsed_bytes += wire;
        if let Some(u) = self.unit_mut(item.unit) {
            u.core.damaged = true;
        }
        self.fresh = true;
        false
    }

    /// A response with nothing in flight.
    fn orphan(&mut self, b: &Backend<'_>, wire: u64, sink: &mut dyn Sink) -> Act {
        let fatal = matches!(b, Backend::ErrorResponse(f) if f.is_fatal());
        if !fatal {
            sink.health().unparsed_bytes += wire;
            if !self.orphans_expected && !self.fresh {
                sink.health().responses_without_request += 1;
            }
            // The rest of this response is skipped without counting it again.
            self.fresh = true;
        }
        Act::default()
    }

    /// An error ended the extended-protocol request at the front: the server discards every
    /// message up to the next Sync. Requests skipped that way produce no response and no event;
    /// their bytes are counted with the failed request.
    fn skip_to_sync(&mut self, failed: Option<u64>) {
        self.pop_item();
        loop {
            match self.items.front().copied() {
                Some(Item {
                    want: Want::Ready, ..
                }) => {
                    // The Sync's ReadyForQuery now belongs to the failed request.
                    let it = self.pop_item();
                    self.skip_unit(it.and_then(|i| i.unit), failed);
                    if let Some(u) = self.unit_mut(failed) {
                        u.items_left += 1;
                    }
                    self.items.push_front(Item {
                        want: Want::Ready,
                        unit: failed,
                    });
                    return;
                }
                Some(it) => {
                    self.pop_item();
                    self.skip_unit(it.unit, failed);
                }
                None => break,
            }
        }
        // The Sync is still to come: everything the client sends until then is skipped.
        self.skip = Some(failed);
        self.open = CLOSED;
        self.copy_in = None;
    }

    /// Marks `unit` (not the failed one) as skipped and moves its request bytes.
    fn skip_unit(&mut self, unit: Option<u64>, failed: Option<u64>) {
        if unit.is_none() || unit == failed {
            return;
        }
        let mut moved = 0;
        if let Some(u) = self.unit_mut(unit)
            && !u.skipped
        {
            u.skipped = true;
            moved = std::mem::take(&mut u.core.bytes_in);
        }
        if self.open.unit == unit {
            self.open = CLOSED;
        }
        self.add_in(failed, moved, false);
    }

    /// Advances the item at the front by one server message.
    fn step(
        &mut self,
        item: Item,
        m: &Message<'_>,
        b: &Backend<'_>,
        ts: u64,
        sink: &mut dyn Sink,
        act: &mut Act,
    ) -> Step {
        let wire = m.wire_len();
        let tag = m.tag;
        let is_query = matches!(item.want, Want::Query(_));
        if is_query {
            return self.step_query(item, m, b, ts, sink, act);
        }
        if tag == be::PARAMETER_DESCRIPTION {
            self.described_types(item.unit, m);
        }
        let Some(u) = self.unit_mut(item.unit) else {
            // Tracked without an event: only the state matters.
            return self.step_state(item.want, tag, b, None, act);
        };
        let c = &mut u.core;
        c.bytes_out += wire;
        c.first_response_ns.get_or_insert(m.start_ts);
        if item.want == Want::Ready {
            c.end_ns.get_or_insert(ts);
            u.synced |= tag == be::READY_FOR_QUERY;
        } else if !(item.want == Want::Function && tag == be::READY_FOR_QUERY) {
            c.end_ns = Some(ts);
        }
        self.step_state(item.want, tag, b, item.unit, act)
    }

    /// The state transition of a non-query item; `unit` gets rows, errors and flags.
    fn step_state(
        &mut self,
        want: Want,
        tag: u8,
        b: &Backend<'_>,
        unit: Option<u64>,
        act: &mut Act,
    ) -> Step {
        if let Backend::ErrorResponse(f) = b {
            if let Some(u) = self.unit_mut(unit) {
                u.set_error(f);
            }
            return match want {
                // The Sync's implicit COMMIT failed: ReadyForQuery still follows.
                Want::Ready | Want::Function => Step::More,
                Want::Unknown => Step::Done,
                _ => Step::Failed,
            };
        }
        match want {
            Want::ParseComplete | Want::BindComplete | Want::CloseComplete | Want::Ready => {
                Step::Done
            }
            Want::DescribeStatement { params_seen: false } => {
                self.set_front(Want::DescribeStatement { params_seen: true })
            }
            Want::DescribeStatement { params_seen: true } | Want::DescribePortal => Step::Done,
            Want::Function => {
                if tag == be::READY_FOR_QUERY {
                    Step::Done
                } else {
                    Step::More
                }
            }
            Want::Unknown => Step::Done,
            Want::Execute(flow) => self.step_execute(flow, b, unit, act),
            Want::Query(_) | Want::Lost => Step::Mismatch,
        }
    }

    /// One message of an Execute's result.
    fn step_execute(
        &mut self,
        flow: Flow,
        b: &Backend<'_>,
        unit: Option<u64>,
        act: &mut Act,
    ) -> Step {
        match b {
            Backend::DataRow => {
                if let Some(u) = self.unit_mut(unit) {
                    u.core.rows_sent += 1;
                }
                if flow == Flow::Start {
                    self.set_front(Want::Execute(Flow::Rows))
                } else {
                    Step::More
                }
            }
            Backend::RowDescription => Step::More,
            Backend::CommandComplete(t) => {
                if let Some(u) = self.unit_mut(unit) {
                    u.apply_tag(*t);
                }
                Step::Done
            }
            Backend::EmptyQueryResponse | Backend::PortalSuspended => Step::Done,
            Backend::CopyInResponse => {
                self.start_copy_in(unit, true);
                self.set_front(Want::Execute(Flow::CopyIn))
            }
            Backend::CopyOutResponse => {
                if let Some(u) = self.unit_mut(unit) {
                    u.copy_out = true;
                }
                self.set_front(Want::Execute(Flow::CopyOut))
            }
            Backend::CopyData | Backend::CopyDone => Step::More,
            Backend::CopyBothResponse => {
                // Replication streaming: nothing more to pair on this connection (the Syncs
                // sent after it will not be answered).
                act.stop = true;
                self.drop_following_ready();
                Step::Done
            }
            _ => Step::Mismatch,
        }
    }

    /// The response at the front goes on in state `w`.
    fn set_front(&mut self, w: Want) -> Step {
        if let Some(i) = self.items.front_mut() {
            i.want = w;
        }
        Step::More
    }

    /// COPY FROM STDIN began. In the extended protocol, the Syncs the client sent after the
    /// Execute are read and ignored by the server while it copies (libpq sends another Sync
    /// after CopyDone): they owe nothing.
    pub(super) fn start_copy_in(&mut self, unit: Option<u64>, extended: bool) {
        self.copy_in = Some(unit);
        if !extended {
            return;
        }
        let swallowed = self.drop_following_ready();
        if swallowed && self.items.len() == 1 && self.skip.is_none() {
            // The next Sync completes this request.
            self.open = Open {
                kind: OpenKind::SyncOnly,
                name: 0,
                unit,
            };
        }
    }

    /// Removes the ReadyForQuery items right after the front item (Syncs the server will read
    /// and ignore). Returns whether there were any.
    pub(super) fn drop_following_ready(&mut self) -> bool {
        let mut dropped = false;
        while self.items.get(1).is_some_and(|i| i.want == Want::Ready) {
            if let Some(it) = self.items.remove(1)
                && let Some(u) = self.unit_mut(it.unit)
            {
                u.items_left = u.items_left.saturating_sub(1);
            }
            dropped = true;
        }
        dropped
    }
}
