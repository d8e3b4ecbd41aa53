//! The Redis conversation: the requests in flight (each a [`Pending`] on the kit's
//! [`RequestCore`]), pairing replies with them in order, transactions, pub/sub confirmations,
//! `CLIENT REPLY`, `HELLO`, `RESET`, and what is owed after losses. Everything but the framing
//! (the readers and their sync state, in [`super::RedisSession`]).

use std::collections::VecDeque;
use std::sync::Arc;

use super::super::message::{self, Confirmation, PubKind, ReplyState, Request, Special};
use super::super::wire::{Event, Kept, ReplyReader, Type, Value};
use crate::kit::{Origin, RequestCore, Tags};
use crate::{ConnMeta, DbError, Health, Outcome, Protocol, QueryEvent, SessionConfig, Sink};

#[derive(Debug)]
struct Pending {
    /// Timestamps, bytes, rows, error and text (always set).
    core: RequestCore,
    command: &'static str,
    special: Special,
    /// Replies owed to requests dropped by the in-flight bound just before this one.
    skip_before: u64,
    /// Subscribe family: confirmations seen so far.
    confirmed: u64,
    /// Subscribe family: confirmations still due; `None` before the first one, or when the
    /// number cannot be known (then the batch ends at the first reply that does not continue
    /// it).
    due: Option<u64>,
    /// EXEC: leading elements of its array that belong to commands queued before the capture
    /// began, and the bytes of the elements that went to the queued commands' events.
    exec_offset: u64,
    routed: u64,
}

impl Pending {
    fn new(r: Request, start_ns: u64, bytes_in: u64) -> Self {
        let mut core = RequestCore::new(start_ns, bytes_in);
        core.text = Some(r.text);
        core.text_truncated = r.text_truncated;
        Pending {
            core,
            command: r.command,
            special: r.special,
            skip_before: 0,
            confirmed: 0,
            due: None,
            exec_offset: 0,
            routed: 0,
        }
    }

    fn answered(&mut self, v: &Value) {
        self.core.response(v.start_ts, v.end_ts, v.wire);
        if v.lost > 0 {
            // Bytes of the reply were lost in a gap (the framing held): incomplete.
            self.core.damaged = true;
        }
    }

    fn text_len(&self) -> usize {
        self.core.text.as_ref().map_or(0, |t| t.len())
    }

    fn is_subscription(&self) -> bool {
        matches!(
            self.special,
            Special::Subscribe { .. } | Special::Unsubscribe { .. }
        )
    }

    /// Replies a request expects (for requests dropped by the in-flight bound).
    fn replies(special: &Special) -> u64 {
        match *special {
            Special::Subscribe { channels, .. } | Special::Unsubscribe { channels, .. } => {
                channels.max(1)
            }
            _ => 1,
        }
    }
}

/// Pub/sub subscriptions, as the confirmations count them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Subs {
    /// Channels plus patterns: the count channel and pattern confirmations carry.
    total: u64,
    channels: u64,
    patterns: u64,
    /// The split of `total` between channels and patterns is known (always when the
    /// connection was seen from its start; mid-stream once a count of 0 was seen).
    split_known: bool,
    shard: u64,
    shard_known: bool,
    /// Messages arrived while no subscription was known (picked up mid-stream).
    inferred: bool,
}

impl Subs {
    fn new(known: bool) -> Self {
        Subs {
            total: 0,
            channels: 0,
            patterns: 0,
            split_known: known,
            shard: 0,
            shard_known: known,
            inferred: false,
        }
    }

    /// In RESP2 subscribed mode: published messages arrive as plain arrays.
    fn active(&self) -> bool {
        self.total > 0 || self.shard > 0 || self.inferred
    }

    fn apply(&mut self, c: &Confirmation) {
        self.inferred = false;
        match c.kind {
            PubKind::Shard => {
                self.shard = c.count;
                self.shard_known = true;
            }
            PubKind::Channel | PubKind::Pattern => {
                self.total = c.count;
                if c.count == 0 {
                    self.channels = 0;
                    self.patterns = 0;
                    self.split_known = true;
                } else if self.split_known {
                    if c.kind == PubKind::Channel {
                        self.channels = c.count.saturating_sub(self.patterns);
                    } else {
                        self.patterns = c.count.saturating_sub(self.channels);
                    }
                }
            }
        }
    }

    /// Confirmations an unsubscribe-all of `kind` gets: one per subscription, or one when
    /// there is none. `None` when the count is not known.
    fn unsubscribe_all(&self, kind: PubKind) -> Option<u64> {
        let n = match kind {
            PubKind::Shard => self.shard_known.then_some(self.shard)?,
            PubKind::Channel => self.split_known.then_some(self.channels)?,
            PubKind::Pattern => self.split_known.then_some(self.patterns)?,
        };
        Some(n.max(1))
    }
}

/// Side effects the conversation asks of the framing layer.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Act {
    pub(super) stop: bool,
    /// A request now waits for a reply: the server's next bytes may start it.
    pub(super) queued: bool,
}

fn synthetic_error(state: &str, message: &str) -> DbError {
    DbError {
        code: 0,
        state: Some(state.into()),
        message: message.into(),
    }
}

/// The conversation: everything but the framing.
#[derive(Debug)]
pub(super) struct Conn {
    meta: ConnMeta,
    pub(super) cfg: SessionConfig,
    inflight: VecDeque<Pending>,
    /// Replies owed to requests dropped after the last one in flight.
    dropped_tail: u64,
    /// Commands a transaction queued (`+QUEUED`), waiting for EXEC, DISCARD or RESET.
    tx: VecDeque<Pending>,
    /// Queued commands dropped by the bound (always the last ones queued).
    tx_dropped: u64,
    pub(super) resp3: bool,
    subs: Subs,
    replies: ReplyState,
    /// The client sent MULTI and not yet EXEC, DISCARD or RESET.
    client_multi: bool,
    pub(super) user: Option<Arc<str>>,
    pub(super) database: Option<Arc<str>>,
    /// Pairing by order is not trusted (events are marked incomplete) until the in-flight
    /// queue next drains: after a mid-stream pickup, a client-side loss, or a server-side loss
    /// that hit a pipeline, replies to unseen commands may still come.
    taint: bool,
    /// Replies to unseen commands may come: a reply with nothing in flight answers one of them
    /// (unparsed, not a response without request). Cleared when a command is sent with
    /// nothing in flight and pairing trusted.
    orphans_expected: bool,
}

impl Conn {
    pub(super) fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        let saw_open = meta.saw_open || meta.after_tls;
        Conn {
            meta,
            cfg,
            inflight: VecDeque::new(),
            dropped_tail: 0,
            tx: VecDeque::new(),
            tx_dropped: 0,
            resp3: false,
            subs: Subs::new(saw_open),
            replies: ReplyState::default(),
            client_multi: false,
            user: None,
            database: saw_open.then(|| Arc::from("0")),
            taint: !saw_open,
            orphans_expected: !saw_open,
        }
    }

    /// Heap bytes of the requests in flight and queued in a transaction.
    pub(super) fn buffered_bytes(&self) -> usize {
        let pending = |q: &VecDeque<Pending>| -> usize {
            q.capacity() * std::mem::size_of::<Pending>()
                + q.iter().map(Pending::text_len).sum::<usize>()
        };
        pending(&self.inflight) + pending(&self.tx)
    }

    fn event(&self, p: Pending, outcome: Outcome) -> QueryEvent {
        let origin = Origin {
            protocol: Protocol::Redis,
            meta: &self.meta,
        };
        let tags = Tags::new(p.command).user_db(self.user.clone(), self.database.clone());
        let outcome = p.core.settle(outcome);
        p.core.into_event(origin, tags, outcome)
    }

    fn emit(&self, p: Pending, outcome: Outcome, sink: &mut dyn Sink) {
        sink.event(self.event(p, outcome));
    }

    /// The head of the queue was answered: pairing is trusted again once the queue drains.
    fn popped(&mut self) {
        if self.inflight.is_empty() {
            self.taint = false;
        }
    }

    pub(super) fn on_request(
        &mut self,
        r: Request,
        wire: u64,
        start_ns: u64,
        lost: bool,
        sink: &mut dyn Sink,
    ) -> Act {
        let mut act = Act::default();
        let mut p = Pending::new(r, start_ns, wire);
        // Bytes of an argument were lost in a gap: the text is from what was seen.
        p.core.text_partial = lost;
        let answered = self.replies.answered(&p.special, self.client_multi);
        match p.special {
            Special::Reset => self.client_multi = false,
            Special::Multi => self.client_multi = true,
            Special::Exec | Special::Discard => self.client_multi = false,
            _ => {}
        }
        if matches!(p.special, Special::Sync) {
            // A replication stream follows: no reply to pair, nothing else will be asked.
            self.emit(p, Outcome::NoReplyExpected, sink);
            act.stop = true;
            return act;
        }
        if !answered {
            self.emit(p, Outcome::NoReplyExpected, sink);
            return act;
        }
        if self.inflight.len() >= self.cfg.max_inflight {
            sink.health().inflight_overflow += 1;
            self.dropped_tail += Pending::replies(&p.special);
            return act;
        }
        if self.inflight.is_empty() && !self.taint {
            self.orphans_expected = false;
        }
        p.core.damaged = self.taint;
        p.skip_before = std::mem::take(&mut self.dropped_tail);
        self.inflight.push_back(p);
        act.queued = true;
        act
    }

    pub(super) fn on_reply(&mut self, ev: Event, reader: &ReplyReader, sink: &mut dyn Sink) -> Act {
        match ev {
            Event::Element {
                elem,
                top,
                top_len,
                index,
            } => {
                self.on_element(&elem, top, top_len, index, reader.elem_head(), sink);
                Act::default()
            }
            Event::Value(v) => self.on_value(&v, reader.head(), reader.first_elements(), sink),
        }
    }

    /// An element of a top-level array: inside EXEC's reply, the result of a queued command.
    fn on_element(
        &mut self,
        elem: &Value,
        top: Type,
        top_len: u64,
        index: u64,
        head: &[u8],
        sink: &mut dyn Sink,
    ) {
        if top != Type::Array {
            return;
        }
        let known = self.tx.len() as u64 + self.tx_dropped;
        let Some(h) = self.inflight.front_mut() else {
            return;
        };
        if h.skip_before > 0 || h.special != Special::Exec {
            return;
        }
        if index == 0 {
            h.exec_offset = top_len.saturating_sub(known);
        }
        if index < h.exec_offset {
            return;
        }
        let Some(mut q) = self.tx.pop_front() else {
            return;
        };
        h.routed += elem.wire;
        q.core.bytes_out += elem.wire;
        q.core.rows_sent = message::rows(elem);
        let outcome = if elem.ty.is_error() {
            q.core.error = Some(message::db_error(head));
            Outcome::Error
        } else {
            Outcome::Ok
        };
        self.emit(q, outcome, sink);
    }

    /// Whether the request at the head of the queue is waiting for confirmation `c`.
    fn head_awaits(&self, c: &Confirmation) -> bool {
        let Some(h) = self.inflight.front() else {
            return false;
        };
        let kind_matches = match h.special {
            Special::Subscribe { kind, .. } => c.subscribe && c.kind == kind,
            Special::Unsubscribe { kind, .. } => !c.subscribe && c.kind == kind,
            _ => false,
        };
        // A null channel answers an unsubscribe-all with nothing to unsubscribe: it starts
        // (and ends) a batch, it never continues one.
        kind_matches
            && h.skip_before == 0
            && h.due != Some(0)
            && !(c.null_channel && h.confirmed > 0)
    }

    /// A batch of confirmations of unknown length ended: the request is answered.
    fn finish_open_batch(&mut self, sink: &mut dyn Sink) {
        let open = self
            .inflight
            .front()
            .is_some_and(|h| h.is_subscription() && h.due.is_none() && h.confirmed > 0);
        if open && let Some(p) = self.inflight.pop_front() {
            self.emit(p, Outcome::Ok, sink);
            self.popped();
        }
    }

    fn confirm(&mut self, c: &Confirmation, v: &Value, sink: &mut dyn Sink) {
        let all = self.subs.unsubscribe_all(c.kind);
        self.subs.apply(c);
        let Some(h) = self.inflight.front_mut() else {
            return;
        };
        h.answered(v);
        if h.confirmed == 0 {
            h.due = match h.special {
                Special::Subscribe { channels, .. } | Special::Unsubscribe { channels, .. }
                    if channels > 0 =>
                {
                    Some(channels)
                }
                _ if c.null_channel => Some(1),
                _ => all,
            };
        }
        h.confirmed += 1;
        if let Some(d) = h.due.as_mut() {
            *d = d.saturating_sub(1);
            if *d == 0
                && let Some(p) = self.inflight.pop_front()
            {
                self.emit(p, Outcome::Ok, sink);
                self.popped();
            }
        }
    }

    fn on_value(&mut self, v: &Value, head: &[u8], firsts: &[Kept], sink: &mut dyn Sink) -> Act {
        if v.ty.is_resp3() {
            // Only a RESP3 connection gets these types.
            self.resp3 = true;
        }
        // Only an array or a push can be a confirmation or a published message.
        let aggregate = matches!(v.ty, Type::Array | Type::Push);
        let conf = if aggregate {
            message::confirmation(v, firsts)
        } else {
            None
        };
        let awaited = conf.filter(|c| self.head_awaits(c));
        if awaited.is_none() {
            self.finish_open_batch(sink);
        }
        if let Some(c) = awaited {
            self.confirm(&c, v, sink);
            return Act::default();
        }
        let message = aggregate && message::is_message(v, firsts);
        let push = v.ty == Type::Push
            || (!self.resp3 && message && (self.subs.active() || self.inflight.is_empty()));
        if let Some(c) = conf.filter(|_| !push) {
            // A confirmation no command waits for (its command was lost or not seen, or the
            // server unsubscribed on its own): never the reply to another command.
            self.subs.apply(&c);
            sink.health().unparsed_bytes += v.wire;
            return Act::default();
        }
        if push {
            if let Some(c) = conf {
                self.subs.apply(&c);
            }
            if message && !self.subs.active() {
                self.subs.inferred = true;
            }
            let h = sink.health();
            h.server_pushes += 1;
            h.server_push_bytes += v.wire;
            return Act::default();
        }
        self.pair(v, head, sink)
    }

    /// A reply to the request at the head of the queue.
    fn pair(&mut self, v: &Value, head: &[u8], sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        let Some(h) = self.inflight.front_mut() else {
            let health = sink.health();
            health.unparsed_bytes += v.wire;
            if self.dropped_tail > 0 {
                self.dropped_tail -= 1;
            } else if !self.orphans_expected {
                health.responses_without_request += 1;
            }
            return act;
        };
        if h.skip_before > 0 {
            h.skip_before -= 1;
            sink.health().unparsed_bytes += v.wire;
            return act;
        }
        h.answered(v);
        let queued = v.ty == Type::SimpleString
            && head == b"QUEUED"
            && !matches!(h.special, Special::Multi | Special::Exec | Special::Discard);
        let Some(mut p) = self.inflight.pop_front() else {
            return act;
        };
        self.popped();
        if queued {
            if self.tx.len() < self.cfg.max_inflight {
                self.tx.push_back(p);
            } else {
                sink.health().inflight_overflow += 1;
                self.tx_dropped += 1;
            }
            return act;
        }
        let is_err = v.ty.is_error();
        let ok = !is_err;
        if is_err {
            p.core.error = Some(message::db_error(head));
        }
        p.core.rows_sent = message::rows(v);
        self.tx_reply(&mut p, v, ok, sink);
        let special = std::mem::take(&mut p.special);
        self.emit(p, if is_err { Outcome::Error } else { Outcome::Ok }, sink);
        if !ok {
            return act;
        }
        act.stop = self.took_effect(special, v);
        act
    }

    /// A reply to a command that ends a transaction: the queued commands are emitted.
    fn tx_reply(&mut self, p: &mut Pending, v: &Value, ok: bool, sink: &mut dyn Sink) {
        match &p.special {
            Special::Exec => {
                p.core.bytes_out = p.core.bytes_out.saturating_sub(p.routed);
                if let Some(e) = &p.core.error {
                    let e = e.clone();
                    self.end_tx(Some(e), sink);
                } else if v.null {
                    self.end_tx(
                        Some(synthetic_error(
                            "ABORTED",
                            "transaction aborted: a watched key changed (EXEC returned null); \
                             not executed",
                        )),
                        sink,
                    );
                } else {
                    self.end_tx(None, sink);
                }
            }
            Special::Discard | Special::Reset if ok => self.end_tx(
                Some(synthetic_error(
                    "DISCARDED",
                    "transaction discarded; not executed",
                )),
                sink,
            ),
            Special::Multi if ok => self.end_tx(None, sink),
            _ => {}
        }
    }

    /// A command that changes the connection succeeded (`v` is its reply). Returns whether
    /// the session stops following the connection (`MONITOR`).
    fn took_effect(&mut self, special: Special, v: &Value) -> bool {
        match special {
            Special::Reset => {
                self.resp3 = false;
                self.subs = Subs::new(true);
                self.database = Some(Arc::from("0"));
            }
            Special::Hello { version, user } => {
                self.resp3 = match v.ty {
                    Type::Map => true,
                    Type::Array => false,
                    _ => version.map_or(self.resp3, |x| x == 3),
                };
                if user.is_some() {
                    self.user = user;
                }
            }
            Special::Auth { user } => self.user = Some(user),
            Special::Select { db } => self.database = Some(db),
            Special::Monitor => return true,
            _ => {}
        }
        false
    }

    /// The transaction ended: the queued commands not yet emitted are emitted with `err`
    /// (they did not run), or as incomplete when EXEC's reply did not account for them.
    fn end_tx(&mut self, err: Option<DbError>, sink: &mut dyn Sink) {
        while let Some(mut q) = self.tx.pop_front() {
            match &err {
                Some(e) => {
                    q.core.error = Some(e.clone());
                    self.emit(q, Outcome::Error, sink);
                }
                None => self.emit(q, Outcome::Incomplete, sink),
            }
        }
        self.tx_dropped = 0;
    }

    /// The reply being read was cut short (gap, malformed bytes, end of capture): its bytes
    /// go to the request at the head of the queue, unless it was a push.
    pub(super) fn partial_reply(&mut self, reader: &ReplyReader, health: &mut Health) {
        let Some((ty, wire, start)) = reader.partial() else {
            return;
        };
        match self.inflight.front_mut() {
            Some(h) if h.skip_before == 0 && ty != Some(Type::Push) => {
                h.core.first_response_ns.get_or_insert(start);
                h.core.bytes_out += wire;
            }
            // Bytes lost in gaps were never captured: not unparsed.
            _ => health.unparsed_bytes += wire.saturating_sub(reader.partial_lost()),
        }
    }

    /// Replies were lost: what is in flight can no longer be paired.
    pub(super) fn abandon_inflight(&mut self, sink: &mut dyn Sink) {
        if self.inflight.len() >= 2 {
            // A pipeline was hit: the replies still to come may be shifted.
            self.taint = true;
            self.orphans_expected = true;
        }
        while let Some(mut p) = self.inflight.pop_front() {
            if p.special == Special::Exec {
                self.end_tx(None, sink);
            }
            p.core.damaged = true;
            self.emit(p, Outcome::Incomplete, sink);
        }
        self.dropped_tail = 0;
    }

    /// Requests were lost: their replies (if any: they may have been `CLIENT REPLY` commands)
    /// are still to come, so pairing is not trusted until the queue drains.
    pub(super) fn client_gap(&mut self) {
        self.taint = true;
        self.orphans_expected = true;
    }

    pub(super) fn close(&mut self, sink: &mut dyn Sink) {
        while let Some(p) = self.inflight.pop_front() {
            let outcome = if p.is_subscription() && p.due.is_none() && p.confirmed > 0 {
                Outcome::Ok
            } else if p.core.first_response_ns.is_some() || p.core.damaged {
                Outcome::Incomplete
            } else {
                Outcome::NoResponse
            };
            if p.special == Special::Exec {
                self.end_tx(None, sink);
            }
            self.emit(p, outcome, sink);
        }
        self.end_tx(None, sink);
    }
}
