//! Losing sync and finding it again: dropping a direction's partial messages after a gap or
//! a malformed message, probing the client's next bytes for a command start, and resuming the
//! server at the first byte after a recognised request.

use super::super::message::Command;
use super::super::wire::{Codec, CompressedHeader, PacketHeader};
use super::{CLIENT, MysqlSession, Phase, SERVER};
use crate::kit::Sync;
use crate::{Direction, Health, Sink};

/// Bytes looked at before trusting a possible command start when resynchronizing.
const PROBE_LEN: usize = 12;

impl MysqlSession {
    /// Marks direction `d` as out of sync. The compressed frame in progress, if its framing
    /// is still trusted (`frame_ok`), is skipped to its end without counting it twice.
    pub(super) fn lose_keeping_frame(&mut self, d: Direction, health: &mut Health) {
        let left = if self.dirs[d].compressed {
            self.dirs[d].deframer.frame_left()
        } else {
            0
        };
        self.lose(d, health);
        self.dirs[d].skip_frame = u64::from(left);
    }

    /// A gap of `len` bytes at `ts` in direction `d`: when it falls inside the payload of the
    /// packet in progress (after the command was identified, uncompressed, past the login), the
    /// bytes are skipped and the framing holds; the message is marked as having lost bytes and
    /// delivered if the gap ended it. Returns whether the gap was absorbed so.
    pub(super) fn skip_inside(
        &mut self,
        d: Direction,
        len: u64,
        ts: u64,
        sink: &mut dyn Sink,
    ) -> bool {
        let dir = &mut self.dirs[d];
        if self.conn.phase != Phase::Command || dir.compressed || !dir.framing.is_synced() {
            return false;
        }
        if let Some(r) = dir.cut_row {
            // Inside a row the skim consumed in part: skipped as the packet layer would.
            if !r.absorbs(len) {
                return false;
            }
            self.conn
                .cut_row_bytes(len, ts, true, &mut dir.credit, &mut dir.cut_row);
            return true;
        }
        let Some(done) = dir.asm.skip(len) else {
            return false;
        };
        dir.credit += len;
        if let Some(m) = done {
            let wire = std::mem::take(&mut dir.credit);
            let act = self.conn.on_message(d, &m, wire, ts, sink);
            self.apply(act, sink);
        }
        true
    }

    /// Marks direction `d` as out of sync.
    pub(super) fn lose(&mut self, d: Direction, health: &mut Health) {
        self.dirs[d].lose(health);
    }

    /// A malformed frame: what was in flight in that direction is lost.
    pub(super) fn abandon(&mut self, d: Direction, sink: &mut dyn Sink) {
        if d == SERVER {
            self.conn.server_gap(sink);
        } else {
            self.conn.client_gap();
        }
        self.lose(d, sink.health());
    }

    /// The first server byte after a request: the start of its response.
    pub(super) fn server_resume(&mut self) {
        self.dirs[SERVER].reset();
        self.dirs[SERVER].framing.sync = Sync::Synced;
        self.conn.orphans_expected = false;
    }

    /// Collects client bytes at a possible command start; returns how many were taken. Once
    /// enough are held, they are judged.
    pub(super) fn probe_more(&mut self, data: &[u8], ts: u64, sink: &mut dyn Sink) -> usize {
        let probe = &mut self.dirs[CLIENT].framing.probe;
        let n = probe.fill(data, ts, PROBE_LEN);
        if probe.len() >= PROBE_LEN {
            self.eval_probe(sink);
        }
        n
    }

    /// Decides whether the bytes collected at a possible command boundary start a command;
    /// if so, replays them in sync.
    pub(super) fn eval_probe(&mut self, sink: &mut dyn Sink) {
        let framing = &self.dirs[CLIENT].framing;
        if framing.probe.is_empty() {
            return;
        }
        let known = self.framing_known.then_some(self.dirs[CLIENT].compressed);
        let Some(compressed) = probe_verdict(framing.probe.bytes(), known) else {
            self.dirs[CLIENT].framing.reject_probe(sink.health());
            return;
        };
        if !self.framing_known {
            self.framing_known = true;
            for dir in self.dirs.iter_mut() {
                dir.compressed = compressed;
            }
        }
        let dir = &mut self.dirs[CLIENT];
        dir.asm.reset();
        dir.deframer.reset();
        dir.credit = 0;
        let probe = dir.framing.accept_probe();
        for (run, ts) in probe.runs() {
            self.feed_dir(CLIENT, probe.bytes().get(run).unwrap_or(&[]), ts, sink);
        }
    }

    /// Server bytes are arriving: the client's turn ended. A pending probe is decided now, and
    /// a client that lost sync may find a command at its next byte.
    pub(super) fn client_turn(&mut self, sink: &mut dyn Sink) {
        if !self.dirs[CLIENT].framing.probe.is_empty() {
            self.eval_probe(sink);
        }
        self.dirs[CLIENT].framing.candidate();
    }

    /// A gap during the handshake: continue as if picked up mid-stream.
    pub(super) fn degrade_to_midstream(&mut self, sink: &mut dyn Sink) {
        self.conn.phase = Phase::Command;
        self.conn.caps = None;
        self.conn.deprecate_eof = None;
        self.framing_known = false;
        self.lose(CLIENT, sink.health());
        self.lose(SERVER, sink.health());
        self.dirs[CLIENT].framing.candidate();
    }
}

/// Checks whether `b` (the first bytes seen at a possible command boundary) starts a command.
/// Returns whether the stream is compressed, or `None` when it does not look like a command.
fn probe_verdict(b: &[u8], compressed: Option<bool>) -> Option<bool> {
    let plain_ok = |b: &[u8], room: Option<u32>| -> bool {
        let (Some(h), Some(&c)) = (PacketHeader::parse(b), b.get(4)) else {
            return false;
        };
        h.seq == 0
            && h.len >= 1
            && room.is_none_or(|r| h.len.saturating_add(4) <= r)
            && Command(c).plausible_len(h.len)
    };
    let compressed_ok = || -> bool {
        let Some(h) = CompressedHeader::parse(b) else {
            return false;
        };
        if h.seq != 0 || h.compressed_len == 0 {
            return false;
        }
        let payload = b.get(7..).unwrap_or(&[]);
        if h.uncompressed_len == 0 {
            plain_ok(payload, Some(h.compressed_len))
        } else {
            Codec::sniff(payload).is_some()
        }
    };
    match compressed {
        Some(false) => plain_ok(b, None).then_some(false),
        Some(true) => compressed_ok().then_some(true),
        None => {
            if compressed_ok() {
                Some(true)
            } else if plain_ok(b, None) {
                Some(false)
            } else {
                None
            }
        }
    }
}
