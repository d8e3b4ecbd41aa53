//! The framing shell of a PostgreSQL session: bytes fed to a direction in sync become messages
//! for the conversation; a direction out of sync skips bytes until a turn of the conversation
//! makes its next byte a candidate, probes the bytes there and, when they start a message,
//! replays them in sync.

use super::super::message::{backend_len_ok, fe, frontend_len_ok};
use super::super::wire::{HEADER_LEN, Header};
use super::{Act, CLIENT, PROBE_LEN, PgSession, Phase, SERVER};
use crate::kit::Sync;
use crate::{Direction, Health, Sink};

impl PgSession {
    /// Marks direction `d` as out of sync.
    pub(super) fn lose(&mut self, d: Direction, health: &mut Health) {
        let dir = &mut self.dirs[d];
        health.unparsed_bytes += dir.drop_partial();
        dir.framing.lose(health);
    }

    #[inline]
    fn apply(&mut self, act: Act, sink: &mut dyn Sink) {
        if act.stop {
            self.stopped = true;
        }
        if act.unsync_server {
            self.conn.server_gap(sink);
            self.lose(SERVER, sink.health());
        }
        if act.server_boundary {
            self.dirs[SERVER].framing.candidate();
        }
        let typed = !matches!(self.conn.phase, Phase::Startup | Phase::EncAnswer);
        let f = &mut self.dirs[CLIENT].framer;
        if f.typed() != typed && f.is_idle() {
            f.set_typed(typed);
        }
    }

    /// Feeds bytes to a direction that is in sync; returns how many were consumed (at most one
    /// message).
    pub(super) fn feed_synced(
        &mut self,
        d: Direction,
        data: &[u8],
        ts: u64,
        sink: &mut dyn Sink,
    ) -> usize {
        let conn = &self.conn;
        let dir = &mut self.dirs[d];
        let typed = dir.framer.typed();
        let policy = |tag: u8, len: u32| conn.keep(d, tag, len, typed);
        let (n, r) = dir.framer.push(data, ts, &policy);
        let act = match r {
            Ok(None) => return n,
            Ok(Some(m)) => match d {
                Direction::ToServer => self.conn.on_client(&m, sink),
                Direction::ToClient => self.conn.on_server(&m, ts, sink),
            },
            Err(_) => {
                self.bad_header(d, typed, sink);
                return n;
            }
        };
        self.apply(act, sink);
        self.dirs[d].framer.release_large();
        if d == CLIENT {
            // A share the message's request did not take (none was made) is given back.
            self.conn.pending_text.take();
        }
        n
    }

    /// A header with an impossible length: the framer consumed all of it (perhaps over several
    /// calls).
    fn bad_header(&mut self, d: Direction, typed: bool, sink: &mut dyn Sink) {
        let header = if typed { HEADER_LEN } else { 4 };
        sink.health().malformed += 1;
        sink.health().unparsed_bytes += header as u64;
        if self.conn.phase == Phase::Startup {
            // The first packet is not a PostgreSQL startup packet.
            self.stopped = true;
            return;
        }
        if d == SERVER {
            self.conn.server_gap(sink);
        } else {
            self.conn.client_gap();
        }
        self.lose(d, sink.health());
    }

    pub(super) fn feed_dir(&mut self, d: Direction, mut data: &[u8], ts: u64, sink: &mut dyn Sink) {
        while !data.is_empty() && !self.stopped {
            if d == SERVER
                && self.conn.phase == Phase::Startup
                && (self.conn.meta.saw_open || self.conn.meta.after_tls)
            {
                // The server speaks before the client's startup packet: not PostgreSQL.
                sink.health().malformed += 1;
                self.stopped = true;
                return;
            }
            match self.dirs[d].framing.sync {
                Sync::Synced => {
                    if d == SERVER && self.conn.phase == Phase::EncAnswer {
                        self.enc_answer(data[0], sink);
                        data = &data[1..];
                        continue;
                    }
                    let n = self.feed_synced(d, data, ts, sink);
                    if n == 0 && self.dirs[d].framing.is_synced() && !self.stopped {
                        // No progress is a framing bug; never spin.
                        sink.health().malformed += 1;
                        self.lose(d, sink.health());
                    }
                    data = &data[n..];
                }
                Sync::Lost { candidate: false } => {
                    sink.health().unparsed_bytes += data.len() as u64;
                    return;
                }
                Sync::Lost { candidate: true } => {
                    let want = if d == CLIENT { PROBE_LEN } else { HEADER_LEN };
                    let probe = &mut self.dirs[d].framing.probe;
                    let n = probe.fill(data, ts, want);
                    data = &data[n..];
                    if probe.len() >= want {
                        self.eval_probe(d, sink);
                    }
                }
            }
        }
    }

    /// Decides whether the bytes collected at a possible message boundary start a message; if
    /// so, replays them in sync.
    pub(super) fn eval_probe(&mut self, d: Direction, sink: &mut dyn Sink) {
        let bytes = self.dirs[d].framing.probe.bytes();
        if bytes.is_empty() {
            return;
        }
        let ok = if d == CLIENT {
            client_probe_ok(bytes)
        } else {
            Header::parse(bytes).is_some_and(|h| backend_len_ok(h.tag, h.len))
        };
        let dir = &mut self.dirs[d];
        if !ok {
            dir.framing.reject_probe(sink.health());
            return;
        }
        dir.framer.reset();
        dir.framer.set_typed(true);
        let probe = dir.framing.accept_probe();
        if d == SERVER {
            self.conn.fresh = true;
        }
        for (run, ts) in probe.runs() {
            self.feed_dir(d, &probe.bytes()[run], ts, sink);
        }
    }

    /// Server bytes are arriving: the client's turn ended. A pending probe is decided now, and
    /// a client that lost sync may find a message at its next byte.
    pub(super) fn client_turn(&mut self, sink: &mut dyn Sink) {
        if !self.dirs[CLIENT].framing.probe.is_empty() {
            self.eval_probe(CLIENT, sink);
        }
        self.dirs[CLIENT].framing.candidate();
    }

    /// A gap before the conversation reached the query phase: continue as if picked up
    /// mid-stream.
    pub(super) fn degrade_to_midstream(&mut self, sink: &mut dyn Sink) {
        self.conn.phase = Phase::Ready;
        self.lose(CLIENT, sink.health());
        self.lose(SERVER, sink.health());
        self.dirs[CLIENT].framing.candidate();
        self.conn.fresh = true;
        self.conn.orphans_expected = true;
    }
}

/// Whether the bytes collected at a possible client message boundary start messages: every
/// header in them is a frontend message with a possible length, and the first body looks like
/// what its type carries.
fn client_probe_ok(b: &[u8]) -> bool {
    let Some(h) = Header::parse(b) else {
        return false;
    };
    if h.tag == fe::PASSWORD || !frontend_len_ok(h.tag, h.len) {
        return false;
    }
    let end = (1 + h.len as usize).min(b.len());
    let body = b.get(HEADER_LEN..end).unwrap_or(&[]);
    if !client_body_ok(h, body) {
        return false;
    }
    // The next header, if the probe holds it, must be plausible too.
    let whole = b.len() > h.len as usize;
    match b.get(1 + h.len as usize..) {
        Some(rest) if whole && rest.len() >= HEADER_LEN => client_probe_ok(rest),
        _ => true,
    }
}

/// Whether the start of a frontend message's body looks like what its type carries.
fn client_body_ok(h: Header, body: &[u8]) -> bool {
    let texty = |s: &[u8]| {
        s.iter()
            .all(|&c| c >= 0x20 || matches!(c, b'\t' | b'\n' | b'\r'))
    };
    let name_then = |s: &[u8]| -> bool {
        match s.iter().position(|&c| c == 0) {
            Some(i) => texty(&s[..i]),
            None => texty(s),
        }
    };
    match h.tag {
        fe::QUERY => {
            let (text, nul) = match body.iter().position(|&c| c == 0) {
                Some(i) => (&body[..i], true),
                None => (body, false),
            };
            // The NUL may only be the last byte; the text starts like SQL.
            texty(text)
                && (!nul || HEADER_LEN + text.len() + 1 == 1 + h.len as usize)
                && text
                    .first()
                    .is_none_or(|&c| c.is_ascii_alphabetic() || b" \t\r\n(/-".contains(&c))
        }
        fe::PARSE | fe::BIND => name_then(body),
        fe::DESCRIBE | fe::CLOSE => {
            body.first().is_none_or(|&c| c == b'S' || c == b'P')
                && name_then(body.get(1..).unwrap_or(&[]))
        }
        fe::EXECUTE => name_then(body),
        _ => true,
    }
}
