//! MongoDB specifics of a replay: the captured client bytes framed into whole messages
//! (OP_MSG and the legacy opcodes; a connection begun before the capture starts at its first
//! plausible message), the captured replies scanned for the cursors they opened (so a getMore
//! can be pointed at the target's cursor), and the rewrite of each request for the target
//! ([`rewrite`]). BSON is edited with the small element walker of [`doc`].

pub mod auth;
pub mod doc;
pub mod rewrite;

use std::collections::BTreeMap;

use proto::mongodb::wire::{
    HEADER_LEN, Header, Inflater, MAX_MESSAGE_LEN, Plausible, op, plausible_start, put_message,
};

use crate::capture::{Batch, Batcher, ChunkView, Request};

/// A captured reply longer than this is not scanned for its cursor (counted).
const MAX_SCANNED_REPLY: usize = 16 << 20;

fn count(m: &mut BTreeMap<String, u64>, why: &str, n: u64) {
    *m.entry(why.into()).or_default() += n;
}

/// An OP_COMPRESSED message (header included) as the message it wraps: its original opcode,
/// its body decompressed (snappy, zlib, zstd or none: `proto`'s inflaters). `None` when it
/// is not one, or its data does not decompress to exactly the size it declares.
pub fn decompress(msg: &[u8]) -> Option<Vec<u8>> {
    let h = Header::parse(msg).filter(|h| h.opcode == op::COMPRESSED)?;
    let body = msg.get(HEADER_LEN..usize::try_from(h.len).ok()?)?;
    let orig = i32::from_le_bytes(body.get(..4)?.try_into().ok()?);
    let size = u32::from_le_bytes(body.get(4..8)?.try_into().ok()?);
    if orig == op::COMPRESSED || size > MAX_MESSAGE_LEN - HEADER_LEN as u32 {
        return None;
    }
    let mut inflater = Inflater::new(*body.get(8)?).ok()?;
    let mut out = Vec::with_capacity((size as usize).min(1 << 20));
    inflater
        .push(body.get(9..)?, true, &mut |piece| {
            if out.len() + piece.len() > size as usize {
                return Err(proto::mongodb::wire::WireError::Decompress(
                    "longer than declared",
                ));
            }
            out.extend_from_slice(piece);
            Ok(())
        })
        .ok()?;
    if out.len() != size as usize {
        return None;
    }
    let mut m = Vec::with_capacity(HEADER_LEN + out.len());
    put_message(&mut m, h.request_id, h.response_to, orig, &out);
    Some(m)
}

/// True when `data` (the start of a server's bytes) looks like a MongoDB reply.
pub fn looks_like_reply(data: &[u8]) -> bool {
    plausible_start(data, false) == Plausible::Yes
}

/// The cursor a reply message (header included) names: OP_MSG's `cursor.id`, OP_REPLY's
/// cursorID or its first document's `cursor.id`. `None` when it names none.
pub fn reply_cursor(msg: &[u8]) -> Option<i64> {
    reply_cursor_opening(msg).map(|c| c.0)
}

/// [`reply_cursor`], and whether the reply opened the cursor (a `firstBatch`; a legacy
/// OP_REPLY's cursorID counts as opening).
pub fn reply_cursor_opening(msg: &[u8]) -> Option<(i64, bool)> {
    let h = Header::parse(msg)?;
    if h.opcode == op::COMPRESSED {
        return decompress(msg).and_then(|m| reply_cursor_opening(&m));
    }
    let body = msg.get(HEADER_LEN..usize::try_from(h.len).ok()?)?;
    let first = match h.opcode {
        op::MSG => {
            // flags, then section kind 0 (the reply's only section).
            (body.get(4) == Some(&0)).then(|| body.get(5..))??
        }
        op::REPLY => {
            let id = i64::from_le_bytes(body.get(4..12)?.try_into().ok()?);
            if id != 0 {
                return Some((id, true));
            }
            body.get(20..)?
        }
        _ => return None,
    };
    let c = doc::get(first, b"cursor")?;
    let c = doc::sub(first, &c)?;
    let opening = doc::get(c, b"firstBatch").is_some();
    Some((doc::int(c, &doc::get(c, b"id")?)?, opening))
}

/// The cursors the captured replies named, kept only for requests that open one (not a
/// getMore, whose reply names the cursor it continues, perhaps opened before the capture).
pub(crate) fn opened(batches: &[Batch], named: Vec<(i32, i64)>) -> Vec<(i32, i64)> {
    let continues: std::collections::HashSet<i32> = batches
        .iter()
        .flat_map(|b| b.requests.iter())
        .filter(|r| is_get_more(&r.bytes))
        .filter_map(|r| Header::parse(&r.bytes).map(|h| h.request_id))
        .collect();
    named
        .into_iter()
        .filter(|(rid, _)| !continues.contains(rid))
        .collect()
}

/// A getMore: OP_GET_MORE, or an OP_MSG whose command is `getMore`.
fn is_get_more(msg: &[u8]) -> bool {
    match Header::parse(msg).map(|h| h.opcode) {
        Some(op::GET_MORE) => true,
        Some(op::COMPRESSED) => decompress(msg).is_some_and(|m| is_get_more(&m)),
        Some(op::MSG) => msg
            .get(HEADER_LEN + 5..)
            .and_then(doc::elements)
            .and_then(|e| e.first().map(|f| f.key.eq_ignore_ascii_case(b"getMore")))
            .unwrap_or(false),
        _ => false,
    }
}

/// Follows one connection's captured replies and notes the cursor each one names, by the
/// request id it answers.
#[derive(Debug, Default)]
pub struct ReplyScan {
    buf: Vec<u8>,
    synced: bool,
    /// Bytes of an over-long reply still to pass over.
    skip: usize,
    /// (captured request id, cursor id) of every reply naming a cursor (not `live`).
    pub cursors: Vec<(i32, i64)>,
    /// `--live`: only the replies that opened a cursor are noted, in `opening`, taken as
    /// they come.
    pub live: bool,
    pub opening: Vec<(i32, i64)>,
    /// Replies too long to scan.
    pub oversized: u64,
}

impl ReplyScan {
    /// A scan for a live mirror (see `live`).
    pub fn live() -> ReplyScan {
        ReplyScan {
            live: true,
            ..ReplyScan::default()
        }
    }

    /// Server bytes, in order.
    pub fn feed(&mut self, mut data: &[u8]) {
        if self.skip > 0 {
            let n = self.skip.min(data.len());
            self.skip -= n;
            data = data.get(n..).unwrap_or_default();
        }
        self.buf.extend_from_slice(data);
        loop {
            if !self.synced {
                match plausible_start(&self.buf, false) {
                    Plausible::Yes => self.synced = true,
                    Plausible::NeedMore => return,
                    Plausible::No => {
                        self.buf.clear();
                        return;
                    }
                }
            }
            let Some(h) = Header::parse(&self.buf) else {
                return;
            };
            let len = h.len as usize;
            if !h.len_ok() {
                self.buf.clear();
                self.synced = false;
                return;
            }
            if len > MAX_SCANNED_REPLY {
                self.oversized += 1;
                self.skip = len.saturating_sub(self.buf.len());
                self.buf.drain(..len.min(self.buf.len()));
                if self.skip > 0 {
                    return;
                }
                continue;
            }
            if self.buf.len() < len {
                return;
            }
            if let Some((id, opening)) =
                reply_cursor_opening(self.buf.get(..len).unwrap_or_default())
                && id != 0
            {
                if !self.live {
                    self.cursors.push((h.response_to, id));
                } else if opening {
                    self.opening.push((h.response_to, id));
                }
            }
            self.buf.drain(..len);
        }
    }
}

/// Frames one connection's chunks into batches of whole messages (requests sent back to back
/// before any reply go together).
pub(crate) fn frame_conn<'a>(
    saw_open: bool,
    chunks: impl Iterator<Item = ChunkView<'a>>,
    skipped_bytes: &mut BTreeMap<String, u64>,
) -> Vec<Batch> {
    let mut f = Framer {
        synced: saw_open,
        ..Framer::default()
    };
    for c in chunks {
        match c {
            ChunkView::Client(ts, data) => f.client(ts, data, skipped_bytes),
            ChunkView::Reply(_) => f.out.reply(),
            ChunkView::Gap => {
                f.pend.clear();
                f.synced = false;
            }
        }
    }
    if !f.pend.is_empty() {
        count(skipped_bytes, "incomplete_at_end", f.pend.len() as u64);
    }
    f.out.finish()
}

#[derive(Default)]
struct Framer {
    pend: Vec<u8>,
    pend_ts: u64,
    synced: bool,
    out: Batcher,
}

impl Framer {
    fn client(&mut self, ts: u64, data: &[u8], skipped: &mut BTreeMap<String, u64>) {
        if self.pend.is_empty() {
            self.pend_ts = ts;
        }
        self.pend.extend_from_slice(data);
        loop {
            if !self.synced {
                match plausible_start(&self.pend, true) {
                    Plausible::Yes => self.synced = true,
                    Plausible::NeedMore => return,
                    Plausible::No => {
                        count(skipped, "midstream_prefix", self.pend.len() as u64);
                        self.pend.clear();
                        return;
                    }
                }
            }
            let Some(h) = Header::parse(&self.pend) else {
                return;
            };
            if !h.len_ok() {
                count(skipped, "unframed", self.pend.len() as u64);
                self.pend.clear();
                self.synced = false;
                return;
            }
            let len = h.len as usize;
            if self.pend.len() < len {
                return;
            }
            let bytes: Vec<u8> = self.pend.drain(..len).collect();
            self.out.push(Request {
                ts_ns: self.pend_ts,
                bytes,
                args: Vec::new(),
                prepared_id: None,
            });
            self.pend_ts = ts;
            if self.pend.is_empty() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
