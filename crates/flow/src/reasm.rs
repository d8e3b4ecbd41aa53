//! One direction of a TCP connection: in-order delivery, duplicate trimming, the bounded
//! out-of-order buffer and gap declaration.
//!
//! Positions inside the buffer are absolute 64-bit stream offsets (`base` is the offset of the
//! next expected byte), so that ordering never depends on 32-bit wrap-around once a segment is
//! accepted. Every accepted segment lies within [`WINDOW`] of the expected position, and the buffer
//! is far smaller than that, so the mapping from sequence numbers is unambiguous.

use std::collections::BTreeMap;

use crate::seq::{self, WINDOW};
use crate::{Dir, FlowStats, Handler};

/// Bookkeeping charged per buffered piece on top of its bytes, so that floods of tiny segments
/// are bounded in real memory too.
pub const PIECE_OVERHEAD: usize = 64;

/// The handler asked to stop tracking the connection.
#[derive(Debug)]
pub(crate) struct Stop;

/// What the reassembly of one connection reports to and charges against.
pub(crate) struct Ctx<'a, H> {
    pub h: &'a mut H,
    pub stats: &'a mut FlowStats,
    /// Global out-of-order bytes charged, across all connections.
    pub total: &'a mut usize,
    pub max_dir: usize,
    pub max_total: usize,
    pub id: u64,
}

impl<H: Handler> Ctx<'_, H> {
    fn data(&mut self, dir: Dir, data: &[u8], ts: u64) -> Result<(), Stop> {
        if data.is_empty() || self.h.data(self.id, dir, data, ts) {
            Ok(())
        } else {
            Err(Stop)
        }
    }

    fn gap(&mut self, dir: Dir, len: u64, ts: u64) {
        if len == 0 {
            return;
        }
        self.stats.gaps += 1;
        self.stats.gap_bytes += len;
        self.h.gap(self.id, dir, len, ts);
    }

    fn charge(&mut self, n: usize) {
        *self.total = self.total.saturating_add(n);
    }

    /// Records the global buffer level once the caps are enforced again.
    fn note_peak(&mut self) {
        let t = *self.total as u64;
        if t > self.stats.buffered_bytes_peak {
            self.stats.buffered_bytes_peak = t;
        }
    }

    fn uncharge(&mut self, n: usize) {
        *self.total = self.total.saturating_sub(n);
    }
}

/// A held stretch of the stream: captured bytes followed by `missing` bytes known to exist but
/// not captured (snaplen).
struct Piece {
    ts: u64,
    data: Vec<u8>,
    missing: u32,
}

impl Piece {
    fn extent(&self) -> u64 {
        self.data.len() as u64 + u64::from(self.missing)
    }

    fn cost(&self) -> usize {
        self.data.len() + PIECE_OVERHEAD
    }
}

/// The out-of-order buffer; allocated only while something is held.
#[derive(Default)]
struct Ooo {
    charged: usize,
    /// Non-overlapping pieces by absolute offset.
    pieces: BTreeMap<u64, Piece>,
}

/// Stretches of the stream declared lost that are remembered, so that their bytes arriving
/// afterwards are told from duplicates.
const LOST_KEPT: usize = 4;

/// The most recent stretches declared gaps, as absolute offsets `[start, end)`.
#[derive(Default)]
struct Lost {
    ranges: [(u64, u64); LOST_KEPT],
    next: usize,
}

impl Lost {
    fn note(&mut self, start: u64, end: u64) {
        let last = (self.next + LOST_KEPT - 1) % LOST_KEPT;
        if let Some(r) = self.ranges.get_mut(last)
            && r.0 < r.1
            && r.1 == start
        {
            r.1 = end;
            return;
        }
        if let Some(r) = self.ranges.get_mut(self.next) {
            *r = (start, end);
        }
        self.next = (self.next + 1) % LOST_KEPT;
    }

    /// Bytes of `[start, end)` inside a remembered lost stretch.
    fn overlap(&self, start: u64, end: u64) -> u64 {
        self.ranges
            .iter()
            .map(|&(a, b)| b.min(end).saturating_sub(a.max(start)))
            .sum()
    }
}

const INIT: u8 = 1;
const HAS_FIN: u8 = 2;
const HAS_ISN: u8 = 4;

/// One direction of a connection.
#[derive(Default)]
pub(crate) struct Half {
    /// Next expected sequence number (valid once INIT).
    next: u32,
    /// Sequence number of the FIN (the position after the last byte), once seen.
    fin: u32,
    /// Sequence number of the SYN, once seen.
    isn: u32,
    bits: u8,
    /// Absolute stream offset of `next`.
    base: u64,
    ooo: Option<Box<Ooo>>,
    /// Allocated at the first gap.
    lost: Option<Box<Lost>>,
}

impl Half {
    pub fn is_init(&self) -> bool {
        self.bits & INIT != 0
    }

    pub fn init_at(&mut self, seq: u32) {
        self.next = seq;
        self.bits |= INIT;
    }

    /// A SYN with sequence number `seq`: the stream starts after it.
    pub fn syn(&mut self, seq: u32) {
        if !self.is_init() {
            self.init_at(seq.wrapping_add(1));
        }
        if self.bits & HAS_ISN == 0 {
            self.isn = seq;
            self.bits |= HAS_ISN;
        }
    }

    /// The peer's SYN+ACK acknowledged this direction's SYN: the stream starts at `ack`.
    pub fn syn_acked(&mut self, ack: u32) {
        if !self.is_init() {
            self.init_at(ack);
        }
        if self.bits & HAS_ISN == 0 {
            self.isn = ack.wrapping_sub(1);
            self.bits |= HAS_ISN;
        }
    }

    pub fn isn(&self) -> Option<u32> {
        (self.bits & HAS_ISN != 0).then_some(self.isn)
    }

    /// Records a FIN at sequence number `at` (the first one seen wins).
    pub fn mark_fin(&mut self, at: u32) {
        if self.bits & HAS_FIN == 0 {
            self.fin = at;
            self.bits |= HAS_FIN;
        }
    }

    pub fn has_fin(&self) -> bool {
        self.bits & HAS_FIN != 0
    }

    /// Every byte before the FIN has been delivered or declared a gap.
    pub fn fin_reached(&self) -> bool {
        self.has_fin() && seq::diff(self.next, self.fin) >= 0
    }

    /// Bytes charged for held pieces.
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        self.ooo.as_ref().map_or(0, |o| o.charged)
    }

    /// Drops held pieces without delivering them, giving their charge back.
    pub fn discard(&mut self, total: &mut usize) {
        if let Some(o) = self.ooo.take() {
            *total = total.saturating_sub(o.charged);
        }
    }

    fn advance(&mut self, n: u64) {
        self.next = self.next.wrapping_add(n as u32);
        self.base += n;
    }

    /// The next `n` bytes are lost: skips them and reports a gap.
    fn lose<H: Handler>(&mut self, dir: Dir, n: u64, ts: u64, cx: &mut Ctx<'_, H>) {
        if n == 0 {
            return;
        }
        let start = self.base;
        self.advance(n);
        self.lost
            .get_or_insert_with(Box::default)
            .note(start, start + n);
        cx.gap(dir, n, ts);
    }

    /// Counts `len` payload bytes that start `back` bytes before the expected position: those in
    /// a stretch already declared lost arrived too late, the others are seen again.
    fn count_behind<H>(&self, back: u64, len: u64, cx: &mut Ctx<'_, H>) -> u64 {
        let start = self.base.saturating_sub(back);
        let late = self
            .lost
            .as_ref()
            .map_or(0, |l| l.overlap(start, start + len))
            .min(len);
        if late > 0 {
            cx.stats.out_of_order_too_late += 1;
        }
        cx.stats.retransmitted_bytes += len - late;
        late
    }

    /// Forward distance to the FIN, when it is ahead within a window.
    fn fin_ahead(&self) -> Option<u64> {
        if !self.has_fin() {
            return None;
        }
        let f = seq::ahead(self.fin, self.next);
        (f <= WINDOW).then_some(u64::from(f))
    }

    /// A segment's stream bytes: `payload` then `missing` uncaptured bytes starting at `seq` (the
    /// SYN, if any, already skipped), and whether a FIN follows them.
    #[allow(clippy::too_many_arguments)]
    pub fn segment<H: Handler>(
        &mut self,
        dir: Dir,
        seq: u32,
        payload: &[u8],
        missing: u32,
        fin: bool,
        ts: u64,
        cx: &mut Ctx<'_, H>,
    ) -> Result<(), Stop> {
        // Keep a segment's extent within a window so that sequence arithmetic stays meaningful.
        let payload = payload
            .get(..payload.len().min(WINDOW as usize))
            .unwrap_or(&[]);
        let len = payload.len() as u64;
        let missing = u64::from(missing).min(u64::from(WINDOW) - len);
        if len + missing == 0 && !fin {
            return Ok(());
        }
        if !self.is_init() {
            self.init_at(seq);
        }
        if fin {
            self.mark_fin(seq.wrapping_add((len + missing) as u32));
        }
        if len + missing == 0 {
            return Ok(());
        }
        let w = i64::from(WINDOW);
        let mut off = seq::diff(seq, self.next);
        if !(-w..w).contains(&off) {
            // Far outside any window: the stream jumped (the capture lost a lot, or garbage).
            // Release what is held, then report the forward distance as lost.
            self.flush(dir, ts, cx)?;
            off = seq::diff(seq, self.next);
            if !(-w..w).contains(&off) {
                let jump = u64::from(seq::ahead(seq, self.next));
                self.lose(dir, jump, ts, cx);
                off = 0;
            }
        }
        let end = off + (len + missing) as i64;
        if end <= 0 {
            if len > 0 && self.count_behind(off.unsigned_abs(), len, cx) == 0 {
                cx.stats.duplicates += 1;
            }
            return Ok(());
        }
        let (mut payload, mut missing) = (payload, missing);
        if off < 0 {
            let skip = off.unsigned_abs();
            let ds = skip.min(len);
            payload = payload.get(ds as usize..).unwrap_or(&[]);
            missing -= skip - ds;
            self.count_behind(skip, ds, cx);
            off = 0;
        }
        if off == 0 {
            self.advance(payload.len() as u64);
            cx.data(dir, payload, ts)?;
            self.lose(dir, missing, ts, cx);
            if self.ooo.is_some() {
                self.drain(dir, self.base, ts, cx)?;
            }
            return Ok(());
        }
        self.insert(off as u64, payload, missing, ts, cx);
        let r = self.enforce_caps(dir, ts, cx);
        cx.note_peak();
        r
    }

    /// The peer acknowledged everything before `ack`: bytes of this direction the capture did not
    /// show before it will not come again, so holes before it become gaps.
    pub fn ack<H: Handler>(
        &mut self,
        dir: Dir,
        ack: u32,
        ts: u64,
        cx: &mut Ctx<'_, H>,
    ) -> Result<(), Stop> {
        if !self.is_init() {
            return Ok(());
        }
        let r = seq::ahead(ack, self.next);
        if r == 0 || r > WINDOW {
            return Ok(());
        }
        let mut target = u64::from(r);
        // The FIN takes a sequence number but is not a byte.
        if let Some(f) = self.fin_ahead() {
            target = target.min(f);
        }
        if target == 0 {
            return Ok(());
        }
        self.drain(dir, self.base + target, ts, cx)
    }

    /// Delivers everything held, declaring every hole (up to the FIN when known) a gap.
    pub fn flush<H: Handler>(
        &mut self,
        dir: Dir,
        ts: u64,
        cx: &mut Ctx<'_, H>,
    ) -> Result<(), Stop> {
        if !self.is_init() {
            return Ok(());
        }
        let mut until = self.base;
        if let Some((&k, p)) = self.ooo.as_ref().and_then(|o| o.pieces.last_key_value()) {
            until = until.max(k + p.extent());
        }
        if let Some(f) = self.fin_ahead() {
            until = until.max(self.base + f);
        }
        self.drain(dir, until, ts, cx)
    }

    /// Holds the part of `[base+off, +len+missing)` not already held.
    fn insert<H: Handler>(
        &mut self,
        off: u64,
        payload: &[u8],
        missing: u64,
        ts: u64,
        cx: &mut Ctx<'_, H>,
    ) {
        let len = payload.len() as u64;
        let s = self.base + off;
        let data_end = s + len;
        let e = data_end + missing;
        let ooo = self.ooo.get_or_insert_with(Box::default);
        // Sub-ranges of [s, e) no held piece covers (the first copy wins).
        let mut fresh: Vec<(u64, u64)> = Vec::new();
        let mut cur = s;
        if let Some((&k, p)) = ooo.pieces.range(..s).next_back() {
            cur = cur.max((k + p.extent()).min(e));
        }
        for (&k, p) in ooo.pieces.range(s..e) {
            if k > cur {
                fresh.push((cur, k));
            }
            cur = cur.max((k + p.extent()).min(e));
        }
        if cur < e {
            fresh.push((cur, e));
        }
        if fresh.is_empty() {
            if len > 0 {
                cx.stats.duplicates += 1;
                cx.stats.retransmitted_bytes += len;
            }
            return;
        }
        cx.stats.out_of_order += 1;
        let mut new_data = 0u64;
        for (a, b) in fresh {
            let (d_lo, d_hi) = (a.min(data_end), b.min(data_end));
            let data = payload
                .get((d_lo - s) as usize..(d_hi - s) as usize)
                .unwrap_or(&[])
                .to_vec();
            new_data += data.len() as u64;
            let piece = Piece {
                ts,
                missing: (b - a - data.len() as u64) as u32,
                data,
            };
            let cost = piece.cost();
            ooo.charged += cost;
            cx.charge(cost);
            ooo.pieces.insert(a, piece);
        }
        cx.stats.retransmitted_bytes += len - new_data;
    }

    /// While a cap is exceeded, declares the first hole a gap and releases what follows it.
    fn enforce_caps<H: Handler>(
        &mut self,
        dir: Dir,
        ts: u64,
        cx: &mut Ctx<'_, H>,
    ) -> Result<(), Stop> {
        let mut counted = false;
        while let Some(o) = self.ooo.as_ref() {
            if o.charged <= cx.max_dir && *cx.total <= cx.max_total {
                break;
            }
            let Some((&k, _)) = o.pieces.first_key_value() else {
                break;
            };
            if !counted {
                cx.stats.buffer_overflows += 1;
                counted = true;
            }
            self.drain(dir, k, ts, cx)?;
        }
        Ok(())
    }

    /// Releases held pieces that start at or before the expected position; holes before `until`
    /// (absolute) are declared gaps on the way.
    fn drain<H: Handler>(
        &mut self,
        dir: Dir,
        until: u64,
        ts: u64,
        cx: &mut Ctx<'_, H>,
    ) -> Result<(), Stop> {
        loop {
            let base = self.base;
            let head = self
                .ooo
                .as_ref()
                .and_then(|o| o.pieces.first_key_value())
                .map(|(&k, _)| k);
            match head {
                Some(k) if k <= base => {
                    let Some((_, p)) = self.ooo.as_mut().and_then(|o| {
                        let kp = o.pieces.pop_first();
                        if let Some((_, p)) = &kp {
                            o.charged = o.charged.saturating_sub(p.cost());
                        }
                        kp
                    }) else {
                        break;
                    };
                    cx.uncharge(p.cost());
                    let skip = base - k;
                    let dl = p.data.len() as u64;
                    if skip >= p.extent() {
                        cx.stats.retransmitted_bytes += dl;
                        continue;
                    }
                    let ds = skip.min(dl);
                    cx.stats.retransmitted_bytes += ds;
                    let miss = u64::from(p.missing) - (skip - ds);
                    let data = p.data.get(ds as usize..).unwrap_or(&[]);
                    self.advance(data.len() as u64);
                    cx.data(dir, data, p.ts)?;
                    self.lose(dir, miss, p.ts, cx);
                }
                Some(k) if base < until => {
                    let n = k.min(until) - base;
                    self.lose(dir, n, ts, cx);
                }
                None if base < until => {
                    let n = until - base;
                    self.lose(dir, n, ts, cx);
                }
                _ => break,
            }
        }
        if self.ooo.as_ref().is_some_and(|o| o.pieces.is_empty()) {
            self.ooo = None;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[derive(Default)]
    struct Rec {
        out: Vec<u8>,
        gaps: Vec<u64>,
    }

    impl Handler for Rec {
        fn open(&mut self, _: u64, _: SocketAddr, _: SocketAddr, _: bool, _: u64) -> bool {
            true
        }
        fn data(&mut self, _: u64, _: Dir, data: &[u8], _: u64) -> bool {
            self.out.extend_from_slice(data);
            true
        }
        fn gap(&mut self, _: u64, _: Dir, len: u64, _: u64) {
            self.gaps.push(len);
            self.out.extend(std::iter::repeat_n(b'_', len as usize));
        }
        fn close(&mut self, _: u64, _: u64) {}
    }

    fn run(segs: &[(u32, &[u8])], max_dir: usize) -> (Rec, FlowStats, usize) {
        let mut rec = Rec::default();
        let mut stats = FlowStats::default();
        let mut total = 0;
        let mut half = Half::default();
        half.syn(99);
        for &(seq, p) in segs {
            let mut cx = Ctx {
                h: &mut rec,
                stats: &mut stats,
                total: &mut total,
                max_dir,
                max_total: usize::MAX,
                id: 1,
            };
            half.segment(Dir::ToServer, seq, p, 0, false, 0, &mut cx)
                .unwrap();
        }
        let left = half.buffered();
        let mut cx = Ctx {
            h: &mut rec,
            stats: &mut stats,
            total: &mut total,
            max_dir,
            max_total: usize::MAX,
            id: 1,
        };
        half.flush(Dir::ToServer, 0, &mut cx).unwrap();
        assert_eq!(total, 0);
        (rec, stats, left)
    }

    #[test]
    fn overlapping_out_of_order_pieces() {
        // 100..=109 "abcdefghij": pieces arrive 104..107, 102..109 (overlapping), then 100..102.
        let (rec, st, _) = run(
            &[(104, b"efg"), (102, b"cdefghij"), (100, b"ab")],
            usize::MAX,
        );
        assert_eq!(rec.out, b"abcdefghij");
        assert_eq!(st.retransmitted_bytes, 3);
        assert_eq!(st.out_of_order, 2);
    }

    #[test]
    fn cap_declares_first_hole() {
        let cap = PIECE_OVERHEAD + 4;
        let (rec, st, left) = run(&[(102, b"cd"), (106, b"gh"), (100, b"ab")], cap);
        assert_eq!(rec.out, b"__cd__gh");
        assert_eq!(rec.gaps, vec![2, 2]);
        assert_eq!(st.buffer_overflows, 1);
        // 100..102 arrives after its hole was declared a gap: too late, not a duplicate, and
        // its bytes are not "retransmitted" (they were never delivered).
        assert_eq!(st.duplicates, 0);
        assert_eq!(st.out_of_order_too_late, 1);
        assert_eq!(st.retransmitted_bytes, 0);
        assert_eq!(st.gap_bytes, 4);
        assert_eq!(left, PIECE_OVERHEAD + 2);
    }
}
