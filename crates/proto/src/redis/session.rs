//! The Redis connection state machine: pairs commands with replies in order (pipelining),
//! follows transactions, pub/sub, `CLIENT REPLY`, `HELLO`, `MONITOR`, and copes with captures
//! that start mid-connection or lose bytes.
//!
//! Layers: raw bytes -> RESP framing ([`super::wire`]) -> requests built from streamed
//! arguments and reply classification ([`super::message`]) -> this state machine. The framing
//! half (the readers and their sync state, in [`RedisSession`]) and the conversation half
//! (`Conn`) are separate structs so the readers' buffers can be borrowed while the
//! conversation is updated.

use std::collections::VecDeque;
use std::sync::Arc;

use super::message::{self, Builder, Confirmation, PubKind, ReplyMode, Request, Special};
use super::wire::{
    Event, Kept, PROBE_MAX, Probe, ReplyReader, ReqEvent, RequestReader, Type, Value, probe_command,
};
use crate::{
    ConnMeta, DbError, Direction, Health, Outcome, Progress, Protocol, QueryEvent, Session,
    SessionConfig, Sink,
};

#[derive(Debug)]
struct Pending {
    command: &'static str,
    text: Arc<str>,
    text_truncated: bool,
    special: Special,
    start_ns: u64,
    first_response_ns: Option<u64>,
    end_ns: Option<u64>,
    bytes_in: u64,
    bytes_out: u64,
    rows_sent: u64,
    error: Option<DbError>,
    damaged: bool,
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
        Pending {
            command: r.command,
            text: r.text,
            text_truncated: r.text_truncated,
            special: r.special,
            start_ns,
            first_response_ns: None,
            end_ns: None,
            bytes_in,
            bytes_out: 0,
            rows_sent: 0,
            error: None,
            damaged: false,
            skip_before: 0,
            confirmed: 0,
            due: None,
            exec_offset: 0,
            routed: 0,
        }
    }

    fn answered(&mut self, v: &Value) {
        self.first_response_ns.get_or_insert(v.start_ts);
        self.end_ns = Some(v.end_ts);
        self.bytes_out += v.wire;
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
struct Act {
    stop: bool,
    /// A request now waits for a reply: the server's next bytes may start it.
    queued: bool,
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
struct Conn {
    meta: ConnMeta,
    cfg: SessionConfig,
    inflight: VecDeque<Pending>,
    /// Replies owed to requests dropped after the last one in flight.
    dropped_tail: u64,
    /// Commands a transaction queued (`+QUEUED`), waiting for EXEC, DISCARD or RESET.
    tx: VecDeque<Pending>,
    /// Queued commands dropped by the bound (always the last ones queued).
    tx_dropped: u64,
    resp3: bool,
    subs: Subs,
    reply_off: bool,
    skip_next: bool,
    /// The client sent MULTI and not yet EXEC, DISCARD or RESET.
    client_multi: bool,
    user: Option<Arc<str>>,
    database: Option<Arc<str>>,
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
    fn event(&self, p: Pending, outcome: Outcome) -> QueryEvent {
        QueryEvent {
            protocol: Protocol::Redis,
            conn: self.meta.id,
            client: self.meta.client,
            server: self.meta.server,
            start_ns: p.start_ns,
            first_response_ns: p.first_response_ns,
            end_ns: p.end_ns,
            user: self.user.clone(),
            database: self.database.clone(),
            command: p.command,
            text: Some(p.text),
            text_truncated: p.text_truncated,
            statement_id: None,
            bytes_in: p.bytes_in,
            bytes_out: p.bytes_out,
            rows_sent: p.rows_sent,
            rows_affected: 0,
            warnings: 0,
            outcome: if p.damaged && outcome != Outcome::NoReplyExpected {
                Outcome::Incomplete
            } else {
                outcome
            },
            error: p.error,
        }
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

    fn on_request(&mut self, r: Request, wire: u64, start_ns: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        let mut p = Pending::new(r, start_ns, wire);
        let skipped = std::mem::take(&mut self.skip_next);
        let in_multi = self.client_multi;
        let silenced = if self.reply_off {
            !matches!(
                p.special,
                Special::ClientReply(ReplyMode::On) | Special::Reset
            )
        } else {
            skipped
        };
        let self_silent = !in_multi
            && matches!(
                p.special,
                Special::ClientReply(ReplyMode::Off | ReplyMode::Skip)
            );
        match p.special {
            Special::ClientReply(ReplyMode::On) if !in_multi => {
                self.reply_off = false;
            }
            Special::ClientReply(ReplyMode::Off) if !in_multi => self.reply_off = true,
            Special::ClientReply(ReplyMode::Skip) if !in_multi && !self.reply_off => {
                self.skip_next = true;
            }
            Special::Reset => {
                self.reply_off = false;
                self.skip_next = false;
                self.client_multi = false;
            }
            Special::Multi => self.client_multi = true,
            Special::Exec | Special::Discard => self.client_multi = false,
            _ => {}
        }
        if p.special == Special::Sync {
            // A replication stream follows: no reply to pair, nothing else will be asked.
            self.emit(p, Outcome::NoReplyExpected, sink);
            act.stop = true;
            return act;
        }
        if silenced || self_silent {
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
        p.damaged = self.taint;
        p.skip_before = std::mem::take(&mut self.dropped_tail);
        self.inflight.push_back(p);
        act.queued = true;
        act
    }

    fn on_reply(&mut self, ev: Event, reader: &ReplyReader, sink: &mut dyn Sink) -> Act {
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
        q.bytes_out += elem.wire;
        q.rows_sent = message::rows(elem);
        let outcome = if elem.ty.is_error() {
            q.error = Some(message::db_error(head));
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
        let conf = message::confirmation(v, firsts);
        let awaited = conf.filter(|c| self.head_awaits(c));
        if awaited.is_none() {
            self.finish_open_batch(sink);
        }
        if let Some(c) = awaited {
            self.confirm(&c, v, sink);
            return Act::default();
        }
        let message = message::is_message(v, firsts);
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
            p.error = Some(message::db_error(head));
        }
        p.rows_sent = message::rows(v);
        match &p.special {
            Special::Exec => {
                p.bytes_out = p.bytes_out.saturating_sub(p.routed);
                if let Some(e) = &p.error {
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
        let special = std::mem::take(&mut p.special);
        self.emit(p, if is_err { Outcome::Error } else { Outcome::Ok }, sink);
        if !ok {
            return act;
        }
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
            Special::Monitor => act.stop = true,
            _ => {}
        }
        act
    }

    /// The transaction ended: the queued commands not yet emitted are emitted with `err`
    /// (they did not run), or as incomplete when EXEC's reply did not account for them.
    fn end_tx(&mut self, err: Option<DbError>, sink: &mut dyn Sink) {
        while let Some(mut q) = self.tx.pop_front() {
            match &err {
                Some(e) => {
                    q.error = Some(e.clone());
                    self.emit(q, Outcome::Error, sink);
                }
                None => self.emit(q, Outcome::Incomplete, sink),
            }
        }
        self.tx_dropped = 0;
    }

    /// The reply being read was cut short (gap, malformed bytes, end of capture): its bytes
    /// go to the request at the head of the queue, unless it was a push.
    fn partial_reply(&mut self, reader: &ReplyReader, health: &mut Health) {
        let Some((ty, wire, start)) = reader.partial() else {
            return;
        };
        match self.inflight.front_mut() {
            Some(h) if h.skip_before == 0 && ty != Some(Type::Push) => {
                h.first_response_ns.get_or_insert(start);
                h.bytes_out += wire;
            }
            _ => health.unparsed_bytes += wire,
        }
    }

    /// Replies were lost: what is in flight can no longer be paired.
    fn abandon_inflight(&mut self, sink: &mut dyn Sink) {
        if self.inflight.len() >= 2 {
            // A pipeline was hit: the replies still to come may be shifted.
            self.taint = true;
            self.orphans_expected = true;
        }
        while let Some(mut p) = self.inflight.pop_front() {
            if p.special == Special::Exec {
                self.end_tx(None, sink);
            }
            p.damaged = true;
            self.emit(p, Outcome::Incomplete, sink);
        }
        self.dropped_tail = 0;
    }

    /// Requests were lost: their replies (if any: they may have been `CLIENT REPLY` commands)
    /// are still to come, so pairing is not trusted until the queue drains.
    fn client_gap(&mut self) {
        self.taint = true;
        self.orphans_expected = true;
    }

    fn close(&mut self, sink: &mut dyn Sink) {
        while let Some(p) = self.inflight.pop_front() {
            let outcome = if p.is_subscription() && p.due.is_none() && p.confirmed > 0 {
                Outcome::Ok
            } else if p.first_response_ns.is_some() || p.damaged {
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ServerSync {
    Synced,
    /// Skipping bytes. `candidate`: a request was sent since, so the next byte may start
    /// its reply.
    Lost {
        candidate: bool,
    },
}

/// One Redis connection. Build it with [`super::new_session`].
#[derive(Debug)]
pub struct RedisSession {
    conn: Conn,
    req: RequestReader,
    builder: Builder,
    /// Bytes the server ignores (empty lines, `*0`), counted with the next command.
    credit: u64,
    client_lost: bool,
    /// Bytes (and their timestamps) collected at a possible command boundary while the
    /// client side is lost.
    probe: Vec<u8>,
    probe_ts: Vec<u64>,
    reply: ReplyReader,
    server: ServerSync,
    stopped: bool,
}

impl RedisSession {
    pub(crate) fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        let saw_open = meta.saw_open;
        RedisSession {
            conn: Conn {
                meta,
                cfg,
                inflight: VecDeque::new(),
                dropped_tail: 0,
                tx: VecDeque::new(),
                tx_dropped: 0,
                resp3: false,
                subs: Subs::new(saw_open),
                reply_off: false,
                skip_next: false,
                client_multi: false,
                user: None,
                database: saw_open.then(|| Arc::from("0")),
                taint: !saw_open,
                orphans_expected: !saw_open,
            },
            req: RequestReader::new(),
            builder: Builder::new(),
            credit: 0,
            client_lost: !saw_open,
            probe: Vec::new(),
            probe_ts: Vec::new(),
            reply: ReplyReader::new(),
            server: if saw_open {
                ServerSync::Synced
            } else {
                ServerSync::Lost { candidate: false }
            },
            stopped: false,
        }
    }

    /// Whether the connection speaks RESP3 (after `HELLO 3`, or RESP3 types were seen).
    pub fn resp3(&self) -> bool {
        self.conn.resp3
    }

    /// The user (from AUTH or HELLO ... AUTH) and database (from SELECT) currently known.
    pub fn user(&self) -> Option<&Arc<str>> {
        self.conn.user.as_ref()
    }
    pub fn database(&self) -> Option<&Arc<str>> {
        self.conn.database.as_ref()
    }

    /// Heap bytes this session holds in buffers and queues, for checking that memory stays
    /// bounded: a few KB of framing state (an inline command up to 64 KB), plus the requests
    /// in flight and queued in a transaction (each at most `max_inflight`).
    pub fn buffered_bytes(&self) -> usize {
        let pending = |q: &VecDeque<Pending>| -> usize {
            q.capacity() * std::mem::size_of::<Pending>()
                + q.iter().map(|p| p.text.len()).sum::<usize>()
        };
        self.req.buffered_bytes()
            + self.builder.buffered_bytes()
            + self.reply.buffered_bytes()
            + self.probe.capacity()
            + self.probe_ts.capacity() * 8
            + pending(&self.conn.inflight)
            + pending(&self.conn.tx)
    }

    fn apply(&mut self, act: Act) {
        if act.stop {
            self.stopped = true;
        }
        if act.queued && matches!(self.server, ServerSync::Lost { .. }) {
            self.server = ServerSync::Lost { candidate: true };
        }
    }

    /// The client side lost sync: the command in progress is dropped.
    fn lose_client(&mut self, health: &mut Health) {
        health.unparsed_bytes +=
            self.req.reset() + std::mem::take(&mut self.credit) + self.probe.len() as u64;
        self.probe.clear();
        self.probe_ts.clear();
        if !self.client_lost {
            health.resyncs += 1;
        }
        self.client_lost = true;
    }

    /// The server side lost sync: what is in flight is abandoned.
    fn lose_server(&mut self, sink: &mut dyn Sink) {
        self.conn.partial_reply(&self.reply, sink.health());
        self.reply.reset();
        self.conn.abandon_inflight(sink);
        let health = sink.health();
        if self.server == ServerSync::Synced {
            health.resyncs += 1;
        }
        self.server = ServerSync::Lost { candidate: false };
    }

    fn on_req_event(&mut self, ev: ReqEvent, sink: &mut dyn Sink) {
        match ev {
            ReqEvent::Begin { argc } => self.builder.begin(argc),
            ReqEvent::Arg { index, len } => self.builder.arg(index, self.req.arg_head(), len),
            ReqEvent::Empty { wire } => self.credit += wire,
            ReqEvent::End { wire, start_ts, .. } => {
                let r = self.builder.finish(self.conn.cfg.max_text);
                let wire = wire + std::mem::take(&mut self.credit);
                let act = self.conn.on_request(r, wire, start_ts, sink);
                self.apply(act);
            }
        }
    }

    fn feed_client(&mut self, mut data: &[u8], ts: u64, sink: &mut dyn Sink) {
        loop {
            if self.stopped {
                return;
            }
            if self.client_lost {
                if data.is_empty() {
                    return;
                }
                data = self.hunt(data, ts, sink);
                continue;
            }
            let builder = &self.builder;
            let keep = |i: u64| builder.keep(i);
            let (n, r) = self.req.push(data, ts, &keep);
            data = data.get(n..).unwrap_or(&[]);
            match r {
                Ok(Some(ev)) => self.on_req_event(ev, sink),
                Ok(None) if data.is_empty() => return,
                Ok(None) if n > 0 => {}
                Ok(None) | Err(_) => {
                    // A protocol error (the server would close the connection), or no
                    // progress (a framing bug: never spin).
                    sink.health().malformed += 1;
                    self.lose_client(sink.health());
                }
            }
        }
    }

    /// While the client side is lost: looks for `*<n>\r\n$<len>\r\n<name>\r\n`. On a match
    /// the collected bytes are replayed in sync. Returns the input not yet used.
    fn hunt<'a>(&mut self, mut data: &'a [u8], ts: u64, sink: &mut dyn Sink) -> &'a [u8] {
        while !data.is_empty() {
            if self.probe.is_empty() {
                match data.iter().position(|&b| b == b'*') {
                    None => {
                        sink.health().unparsed_bytes += data.len() as u64;
                        return &[];
                    }
                    Some(i) => {
                        sink.health().unparsed_bytes += i as u64;
                        data = data.get(i..).unwrap_or(&[]);
                    }
                }
            }
            let n = PROBE_MAX.saturating_sub(self.probe.len()).min(data.len());
            self.probe.extend_from_slice(data.get(..n).unwrap_or(&[]));
            self.probe_ts.extend(std::iter::repeat_n(ts, n));
            data = data.get(n..).unwrap_or(&[]);
            loop {
                match probe_command(&self.probe) {
                    Probe::NeedMore if self.probe.len() < PROBE_MAX => break,
                    Probe::Match => {
                        let probe = std::mem::take(&mut self.probe);
                        let stamps = std::mem::take(&mut self.probe_ts);
                        self.client_lost = false;
                        let mut i = 0;
                        while i < probe.len() {
                            let t = stamps.get(i).copied().unwrap_or(ts);
                            let j = stamps
                                .get(i..)
                                .and_then(|s| s.iter().position(|&x| x != t))
                                .map_or(probe.len(), |k| i + k);
                            self.feed_client(probe.get(i..j).unwrap_or(&[]), t, sink);
                            i = j;
                        }
                        return data;
                    }
                    Probe::NeedMore | Probe::NoMatch => {
                        let next = self
                            .probe
                            .iter()
                            .skip(1)
                            .position(|&b| b == b'*')
                            .map_or(self.probe.len(), |k| k + 1);
                        sink.health().unparsed_bytes += next as u64;
                        self.probe.drain(..next);
                        self.probe_ts.drain(..next);
                        if self.probe.is_empty() {
                            break;
                        }
                    }
                }
            }
        }
        data
    }

    fn feed_server(&mut self, mut data: &[u8], ts: u64, sink: &mut dyn Sink) {
        loop {
            if self.stopped {
                return;
            }
            match self.server {
                ServerSync::Lost { candidate: false } => {
                    // These bytes may hold the replies of what is in flight: those can no
                    // longer be paired.
                    self.conn.abandon_inflight(sink);
                    sink.health().unparsed_bytes += data.len() as u64;
                    return;
                }
                ServerSync::Lost { candidate: true } => {
                    let Some(&b) = data.first() else {
                        return;
                    };
                    // The first server byte after a request: the start of its reply, if it
                    // can start a value.
                    self.server = if Type::from_byte(b).is_some() {
                        self.reply.reset();
                        ServerSync::Synced
                    } else {
                        ServerSync::Lost { candidate: false }
                    };
                }
                ServerSync::Synced => {
                    let (n, r) = self.reply.push(data, ts);
                    data = data.get(n..).unwrap_or(&[]);
                    match r {
                        Ok(Some(ev)) => {
                            let act = self.conn.on_reply(ev, &self.reply, sink);
                            self.apply(act);
                        }
                        Ok(None) if data.is_empty() => return,
                        Ok(None) if n > 0 => {}
                        Ok(None) | Err(_) => {
                            sink.health().malformed += 1;
                            self.lose_server(sink);
                        }
                    }
                }
            }
        }
    }
}

impl Session for RedisSession {
    fn feed(&mut self, dir: Direction, data: &[u8], ts_ns: u64, sink: &mut dyn Sink) -> Progress {
        if !self.stopped && !data.is_empty() {
            match dir {
                Direction::ToServer => self.feed_client(data, ts_ns, sink),
                Direction::ToClient => self.feed_server(data, ts_ns, sink),
            }
        }
        if self.stopped {
            Progress::Stop
        } else {
            Progress::Continue
        }
    }

    fn gap(&mut self, dir: Direction, _len: u64, _ts_ns: u64, sink: &mut dyn Sink) {
        if self.stopped {
            return;
        }
        match dir {
            Direction::ToServer => {
                self.conn.client_gap();
                self.lose_client(sink.health());
            }
            Direction::ToClient => self.lose_server(sink),
        }
    }

    fn close(&mut self, _ts_ns: u64, sink: &mut dyn Sink) {
        self.conn.partial_reply(&self.reply, sink.health());
        self.reply.reset();
        let health = sink.health();
        health.unparsed_bytes +=
            self.probe.len() as u64 + self.req.reset() + std::mem::take(&mut self.credit);
        self.probe.clear();
        self.probe_ts.clear();
        self.conn.close(sink);
        self.stopped = true;
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
