//! The Redis connection state machine: pairs commands with replies in order (pipelining),
//! follows transactions, pub/sub, `CLIENT REPLY`, `HELLO`, `MONITOR`, and copes with captures
//! that start mid-connection or lose bytes.
//!
//! Layers: raw bytes -> RESP framing ([`super::wire`]) -> requests built from streamed
//! arguments and reply classification ([`super::message`]) -> this state machine. The framing
//! half (the readers and their sync state, per direction a kit [`Framing`], in
//! [`RedisSession`]) and the conversation half (`conn::Conn`) are separate structs so the
//! readers' buffers can be borrowed while the conversation is updated.

use super::message::Builder;
use super::wire::{
    PROBE_MAX, Probe as Verdict, ReplyReader, ReqEvent, RequestReader, Type, WholeCommand,
    probe_command,
};
use crate::kit::{Framing, PerDir, Sync};
use crate::{ConnMeta, Direction, Health, Progress, Session, SessionConfig, Sink};

mod conn;

use conn::{Act, Conn};

/// One Redis connection. Build it with [`super::new_session`].
#[derive(Debug)]
pub struct RedisSession {
    conn: Conn,
    req: RequestReader,
    builder: Builder,
    /// Bytes the server ignores (empty lines, `*0`), counted with the next command.
    credit: u64,
    reply: ReplyReader,
    /// Each direction in sync or lost. The client's probe collects the bytes (and their
    /// timestamps) at a possible command boundary while it is lost; the server's stays empty:
    /// a lost server side is `candidate` once a request was sent since, and then its next byte
    /// may start that request's reply.
    framing: PerDir<Framing>,
    stopped: bool,
    /// Bytes or a gap were fed: [`Session::start_tls`] is refused from then on.
    fed: bool,
}

impl RedisSession {
    pub(crate) fn new(meta: ConnMeta, cfg: SessionConfig) -> Self {
        // TLS wraps the whole connection: after it, the stream starts as on a seen open.
        let saw_open = meta.saw_open || meta.after_tls;
        let framing = || {
            if saw_open {
                Framing::synced()
            } else {
                Framing::lost(false)
            }
        };
        RedisSession {
            conn: Conn::new(meta, cfg),
            req: RequestReader::new(),
            builder: Builder::new(),
            credit: 0,
            reply: ReplyReader::new(),
            framing: PerDir::new(framing(), framing()),
            stopped: false,
            fed: false,
        }
    }

    /// Whether the connection speaks RESP3 (after `HELLO 3`, or RESP3 types were seen).
    pub fn resp3(&self) -> bool {
        self.conn.resp3
    }

    /// The user (from AUTH or HELLO ... AUTH) and database (from SELECT) currently known.
    pub fn user(&self) -> Option<&std::sync::Arc<str>> {
        self.conn.user.as_ref()
    }
    pub fn database(&self) -> Option<&std::sync::Arc<str>> {
        self.conn.database.as_ref()
    }

    /// Heap bytes this session holds in buffers and queues, for checking that memory stays
    /// bounded: a few KB of framing state (an inline command up to 64 KB), plus the requests
    /// in flight and queued in a transaction (each at most `max_inflight`).
    pub fn buffered_bytes(&self) -> usize {
        self.req.buffered_bytes()
            + self.builder.buffered_bytes()
            + self.reply.buffered_bytes()
            + self
                .framing
                .iter()
                .map(|f| f.probe.heap_bytes())
                .sum::<usize>()
            + self.conn.buffered_bytes()
    }

    fn apply(&mut self, act: Act) {
        if act.stop {
            self.stopped = true;
        }
        if act.queued {
            // A request now waits for a reply: the server's next bytes may start it.
            self.framing.server.candidate();
        }
    }

    /// The client side lost sync: the command in progress is dropped.
    fn lose_client(&mut self, health: &mut Health) {
        health.unparsed_bytes += self.req.reset() + std::mem::take(&mut self.credit);
        self.framing.client.lose(health);
    }

    /// The server side lost sync: what is in flight is abandoned.
    fn lose_server(&mut self, sink: &mut dyn Sink) {
        self.conn.partial_reply(&self.reply, sink.health());
        self.reply.reset();
        self.conn.abandon_inflight(sink);
        self.framing.server.lose(sink.health());
    }

    fn on_req_event(&mut self, ev: ReqEvent, sink: &mut dyn Sink) {
        match ev {
            ReqEvent::Begin { argc } => self.builder.begin(argc),
            ReqEvent::Arg { index, len } => self.builder.arg(index, self.req.arg_head(), len),
            ReqEvent::Empty { wire } => self.credit += wire,
            ReqEvent::End {
                wire,
                start_ts,
                lost,
                ..
            } => {
                let r = self.builder.finish(self.conn.cfg.max_text);
                let wire = wire + std::mem::take(&mut self.credit);
                let act = self.conn.on_request(r, wire, start_ts, lost, sink);
                self.apply(act);
            }
        }
    }

    /// A whole command found in one pass: the builder gets its arguments (each cut as it
    /// asks), then the conversation gets the request, exactly as the events would have done.
    fn on_whole(&mut self, cmd: &WholeCommand, data: &[u8], ts: u64, sink: &mut dyn Sink) {
        let spans = cmd.spans();
        let arg = |i: usize| {
            spans
                .get(i)
                .and_then(|s| data.get(s.start..s.start + s.len))
                .unwrap_or(&[])
        };
        let r = self.builder.whole(cmd.argc, arg, self.conn.cfg.max_text);
        let wire = cmd.wire as u64 + std::mem::take(&mut self.credit);
        let act = self.conn.on_request(r, wire, ts, false, sink);
        self.apply(act);
    }

    fn feed_client(&mut self, mut data: &[u8], ts: u64, sink: &mut dyn Sink) {
        let mut cmd = WholeCommand::default();
        loop {
            if self.stopped {
                return;
            }
            if !self.framing.client.is_synced() {
                if data.is_empty() {
                    return;
                }
                data = self.hunt(data, ts, sink);
                continue;
            }
            if self.req.whole_command(data, ts, &mut cmd) {
                self.on_whole(&cmd, data, ts, sink);
                data = data.get(cmd.wire..).unwrap_or(&[]);
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
            let probe = &mut self.framing.client.probe;
            if probe.is_empty() {
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
            let n = probe.fill(data, ts, PROBE_MAX);
            data = data.get(n..).unwrap_or(&[]);
            loop {
                let probe = &mut self.framing.client.probe;
                match probe_command(probe.bytes()) {
                    Verdict::NeedMore if probe.len() < PROBE_MAX => break,
                    Verdict::Match => {
                        let probe = self.framing.client.accept_probe();
                        for (run, t) in probe.runs() {
                            self.feed_client(probe.bytes().get(run).unwrap_or(&[]), t, sink);
                        }
                        return data;
                    }
                    Verdict::NeedMore | Verdict::NoMatch => {
                        // Slide to the next `*`.
                        let bytes = probe.bytes();
                        let next = bytes
                            .iter()
                            .skip(1)
                            .position(|&b| b == b'*')
                            .map_or(bytes.len(), |k| k + 1);
                        sink.health().unparsed_bytes += next as u64;
                        probe.drop_front(next);
                        if probe.is_empty() {
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
            match self.framing.server.sync {
                Sync::Lost { candidate: false } => {
                    // These bytes may hold the replies of what is in flight: those can no
                    // longer be paired.
                    self.conn.abandon_inflight(sink);
                    sink.health().unparsed_bytes += data.len() as u64;
                    return;
                }
                Sync::Lost { candidate: true } => {
                    let Some(&b) = data.first() else {
                        return;
                    };
                    // The first server byte after a request: the start of its reply, if it
                    // can start a value.
                    self.framing.server.sync = if Type::from_byte(b).is_some() {
                        self.reply.reset();
                        Sync::Synced
                    } else {
                        Sync::Lost { candidate: false }
                    };
                }
                Sync::Synced => {
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
            self.fed = true;
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

    fn gap(&mut self, dir: Direction, len: u64, _ts_ns: u64, sink: &mut dyn Sink) {
        self.fed = true;
        if self.stopped {
            return;
        }
        // A gap inside the announced length of a bulk string keeps the framing.
        let held = match dir {
            Direction::ToServer => self.framing.client.is_synced() && self.req.gap(len),
            Direction::ToClient => self.framing.server.is_synced() && self.reply.gap(len),
        };
        if held {
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
            self.framing.client.probe.clear() + self.req.reset() + std::mem::take(&mut self.credit);
        self.conn.close(sink);
        self.stopped = true;
    }

    /// Redis has no in-protocol switch to TLS: TLS wraps the whole connection. Told so before
    /// any byte, the session reads the decrypted stream as it would have read the plaintext
    /// (true); after bytes were fed, those bytes were the TLS handshake, not Redis, and the
    /// session cannot tell what it made of them (false: the caller may start a new session
    /// with [`crate::ConnMeta::after_tls`]).
    fn start_tls(&mut self) -> bool {
        !self.fed && !self.stopped
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
