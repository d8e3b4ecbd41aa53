//! A packet ring sized from the traffic ([`AutoRing`]): it measures once a second how fast the
//! traffic fills the ring and how full the ring was when the reader came back, and replaces
//! the ring with a larger one, within a bound, without losing or repeating a packet.
//!
//! # The handover
//!
//! 1. A second ring opens on the same interface, on a helper thread and closed to traffic
//!    (allocating and mapping a large ring takes tens of ms, while the reader goes on reading
//!    the old one). Then the reader attaches the filter to it: from that moment every packet
//!    reaches both rings.
//! 2. After a short wait (so that no packet is still between the two sockets' filters), the old
//!    ring's filter is replaced by a reject-all one: from then on packets reach the new ring
//!    only. No packet can miss both: the new ring accepts before the old one stops.
//! 3. The old ring is drained to its end (its last block retires by the timeout), every packet
//!    handed on, and the packets that arrived in the overlap remembered by their content
//!    (length, device, direction and bytes: two copies of one packet are byte-identical, while
//!    their kernel timestamps differ by the nanoseconds between the two sockets).
//! 4. The new ring is read from then on; its packets from the overlap whose content the old
//!    ring already handed are skipped once each, and counted. Then the old ring closes.
//!
//! Rings in a `PACKET_FANOUT` group (`--threads` above 1) keep their size: a socket joining a
//! group changes how the kernel spreads connections over its members.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use crate::LiveError;
use crate::bpf::Insn;
use crate::ring::{Packet, Ring, RingConfig, RingStats, realtime_ns};

/// How an [`AutoRing`] grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// The largest ring it may grow to, bytes. At or below the start size it never grows.
    pub max_bytes: u64,
    /// The ring should hold this long of the busiest second seen (0: grow on a nearly full
    /// ring only).
    pub margin: Duration,
}

/// Where the helper thread hands the ring it opened.
type Opening = Receiver<Result<Ring, LiveError>>;

/// One growth, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Growth {
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// Why, in words ("the busiest second, 52.1 MB/s, would fill it in 0.64 s").
    pub why: String,
}

/// Window of kernel timestamps around the overlap in which packets are compared: generous,
/// since a kernel timestamp may be taken before the packet reaches the sockets.
const OVERLAP_SLACK_NS: u64 = 100_000_000;
/// Most overlap packets remembered (a few ms of traffic are expected).
const OVERLAP_CAP: usize = 1 << 18;
/// Rings grow in steps of this many bytes (whole blocks).
const STEP_BYTES: u64 = 16 << 20;
/// How long after the new ring accepts packets the old one is silenced.
const OVERLAP_WAIT: Duration = Duration::from_millis(2);

/// Bytes of a packet the content key covers: the IP and TCP headers with their options (IP
/// id, sequence and acknowledgement numbers, TCP timestamps), which tell packets apart; two
/// packets alike in these and in length are a retransmission, whose repeat TCP drops anyway.
/// Not the payload: hashing whole 4 KiB packets for the overlap's window cost more CPU than
/// the growth is worth.
const KEY_BYTES: usize = 96;

/// The content key of a packet, the same for its two copies in two rings.
fn packet_key(p: &Packet<'_>) -> u64 {
    let mut h = DefaultHasher::new();
    let head = p.data.get(..KEY_BYTES).unwrap_or(p.data);
    (
        p.wire_len,
        p.data.len(),
        p.ifindex,
        p.pkttype,
        p.protocol,
        head,
    )
        .hash(&mut h);
    h.finish()
}

/// The overlap packets the old ring handed, to skip in the new one.
struct Overlap {
    seen: HashMap<u64, u32>,
    /// New-ring packets stamped after this are past the overlap.
    until_ns: u64,
    skipped: u64,
}

impl Overlap {
    /// True when `p` was already handed by the old ring (then forgotten: a second identical
    /// packet passes).
    fn repeat(&mut self, p: &Packet<'_>) -> bool {
        if p.ts_ns > self.until_ns || self.seen.is_empty() {
            return false;
        }
        let k = packet_key(p);
        match self.seen.get_mut(&k) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.seen.remove(&k);
                }
                self.skipped += 1;
                true
            }
            None => false,
        }
    }
}

/// A [`Ring`] that grows with the traffic (see the module documentation).
pub struct AutoRing {
    ring: Ring,
    cfg: RingConfig,
    filter: Vec<Insn>,
    sizing: Option<Sizing>,
    /// Counters of the rings replaced.
    base: RingStats,
    /// The interval pause of replaced rings not yet taken.
    carried_pause_ns: u64,
    overlap: Option<Overlap>,
    /// Blocks to grow to at the next poll.
    want: Option<(u32, String)>,
    /// A larger ring being opened on a helper thread (closed to packets), and why.
    opening: Option<(Opening, RingConfig, String)>,
    second_start: Instant,
    /// The busiest second's fill rate, bytes/s.
    peak_rate: u64,
    growths: Vec<Growth>,
    /// Why growing stopped for good (a failed open), once.
    failed: Option<String>,
}

impl AutoRing {
    /// Opens a ring by `cfg` with `filter`; with `sizing` it grows (not in a fanout group).
    pub fn open(
        cfg: &RingConfig,
        filter: &[Insn],
        sizing: Option<Sizing>,
    ) -> Result<AutoRing, LiveError> {
        Ok(AutoRing::wrap(
            Ring::open(cfg, filter)?,
            cfg,
            filter,
            sizing,
        ))
    }

    /// Wraps an open ring opened by `cfg` with `filter`.
    pub fn wrap(ring: Ring, cfg: &RingConfig, filter: &[Insn], sizing: Option<Sizing>) -> Self {
        let sizing = sizing.filter(|_| cfg.fanout_group.is_none());
        AutoRing {
            ring,
            cfg: cfg.clone(),
            filter: filter.to_vec(),
            sizing,
            base: RingStats::default(),
            carried_pause_ns: 0,
            overlap: None,
            want: None,
            opening: None,
            second_start: Instant::now(),
            peak_rate: 0,
            growths: Vec::new(),
            failed: None,
        }
    }

    /// As [`Ring::poll`]; a growth decided earlier happens first (its packets handed too).
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&Packet<'_>),
    ) -> Result<usize, LiveError> {
        let mut handed = 0;
        if let Some((blocks, why)) = self.want.take() {
            self.start_opening(blocks, why);
        }
        let opened = match &self.opening {
            Some((rx, _, _)) => match rx.try_recv() {
                Ok(r) => Some(r),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => Some(Err(LiveError::Config(
                    "the thread opening the larger ring ended".into(),
                ))),
            },
            None => None,
        };
        if let Some(r) = opened
            && let Some((_, cfg, why)) = self.opening.take()
        {
            match r.and_then(|new| self.grow(new, cfg, why, &mut f)) {
                Ok(n) => handed += n,
                Err(e) => {
                    self.failed = Some(format!("the capture ring stops growing: {e}"));
                    self.sizing = None;
                }
            }
        }
        handed += match &mut self.overlap {
            None => self.ring.poll(timeout, &mut f)?,
            Some(o) => {
                let n = self.ring.poll(timeout, |p| {
                    if !o.repeat(p) {
                        f(p)
                    }
                })?;
                if o.seen.is_empty() {
                    self.end_overlap();
                }
                n
            }
        };
        if self.sizing.is_some() {
            self.measure();
        }
        Ok(handed)
    }

    fn end_overlap(&mut self) {
        if let Some(o) = self.overlap.take() {
            self.base.handover_duplicates += o.skipped;
        }
    }

    /// Once a second: the fill rate and the fullest moment decide whether to grow.
    fn measure(&mut self) {
        let elapsed = self.second_start.elapsed();
        if elapsed < Duration::from_secs(1) {
            return;
        }
        self.second_start = Instant::now();
        if let Some(o) = &self.overlap
            && realtime_ns() > o.until_ns.saturating_add(OVERLAP_SLACK_NS)
        {
            self.end_overlap();
        }
        let fill = self.ring.take_fill();
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX).max(1);
        let rate = u64::try_from(u128::from(fill.bytes) * 1_000_000_000 / u128::from(ns))
            .unwrap_or(u64::MAX);
        self.peak_rate = self.peak_rate.max(rate);
        let Some(s) = self.sizing else { return };
        let ring_bytes = self.ring_bytes();
        if let Some((target, why)) = decide(
            &s,
            ring_bytes,
            self.ring.block_count(),
            self.peak_rate,
            fill.ready_max,
        ) {
            let blocks = target / u64::from(self.cfg.block_size);
            if let Ok(b) = u32::try_from(blocks)
                && target > ring_bytes
            {
                self.want = Some((b, why));
            }
        }
    }

    fn ring_bytes(&self) -> u64 {
        u64::from(self.cfg.block_size) * self.ring.block_count() as u64
    }

    /// Opens a ring of `blocks` blocks, closed to packets, on a helper thread: allocating and
    /// mapping a large ring takes long enough (tens of ms) for the current ring to overflow at
    /// a high rate if its reader waited.
    fn start_opening(&mut self, blocks: u32, why: String) {
        if self.opening.is_some() {
            return;
        }
        let mut cfg = self.cfg.clone();
        cfg.block_count = blocks;
        let (tx, rx) = std::sync::mpsc::channel();
        let c = cfg.clone();
        let spawned = std::thread::Builder::new()
            .name("dbtap-ring-open".into())
            .spawn(move || {
                let _ = tx.send(Ring::open_closed(&c));
            });
        match spawned {
            Ok(_) => self.opening = Some((rx, cfg, why)),
            Err(e) => {
                self.failed = Some(format!("the capture ring stops growing: {e}"));
                self.sizing = None;
            }
        }
    }

    /// Replaces the ring by `new`, opened closed by `cfg` (see the module documentation);
    /// returns the packets handed from the old ring's drain.
    fn grow(
        &mut self,
        new: Ring,
        cfg: RingConfig,
        why: String,
        f: &mut impl FnMut(&Packet<'_>),
    ) -> Result<usize, LiveError> {
        self.end_overlap();
        let from_ns = realtime_ns().saturating_sub(OVERLAP_SLACK_NS);
        new.accept(&self.filter)?;
        std::thread::sleep(OVERLAP_WAIT);
        self.ring.silence()?;
        let until_ns = realtime_ns().saturating_add(OVERLAP_SLACK_NS);
        let mut seen: HashMap<u64, u32> = HashMap::new();
        let mut handed = 0;
        let wait = Duration::from_millis(u64::from(self.cfg.retire_ms) * 2 + 10);
        // The old ring receives nothing more: a bounded number of passes empties it. From here
        // on the new ring is kept whatever fails: the old one is silenced.
        for _ in 0..=self.ring.block_count() {
            let polled = self.ring.poll(wait, |p| {
                if p.ts_ns >= from_ns && seen.len() < OVERLAP_CAP {
                    *seen.entry(packet_key(p)).or_insert(0) += 1;
                }
                f(p)
            });
            match polled {
                Ok(0) | Err(_) => break,
                Ok(n) => handed += n,
            }
        }
        let old_stats = self.ring.stats().unwrap_or_else(|_| self.ring.last_stats());
        self.carried_pause_ns = self.carried_pause_ns.max(self.ring.take_interval_pause());
        let old = std::mem::replace(&mut self.ring, new);
        drop(old);
        add_stats(&mut self.base, &old_stats);
        let from_bytes = u64::from(self.cfg.block_size) * u64::from(self.cfg.block_count);
        self.cfg = cfg;
        self.base.growths += 1;
        self.growths.push(Growth {
            from_bytes,
            to_bytes: self.ring_bytes(),
            why,
        });
        self.overlap = Some(Overlap {
            seen,
            until_ns,
            skipped: 0,
        });
        self.second_start = Instant::now();
        Ok(handed)
    }

    /// Makes the next poll grow the ring to `blocks` blocks (tests).
    #[cfg(test)]
    pub(crate) fn request_growth(&mut self, blocks: u32) {
        self.want = Some((blocks, "asked by a test".into()));
    }

    /// Growths since the last call, and why growing stopped if it did.
    pub fn take_growths(&mut self) -> (Vec<Growth>, Option<String>) {
        (std::mem::take(&mut self.growths), self.failed.take())
    }

    /// As [`Ring::take_interval_pause`], over the rings replaced in the interval too.
    pub fn take_interval_pause(&mut self) -> u64 {
        self.ring
            .take_interval_pause()
            .max(std::mem::take(&mut self.carried_pause_ns))
    }

    /// As [`Ring::stats`], summed over every ring this one has been; `ring_bytes` is the
    /// current ring's, `packets` counts the overlap's repeated packets once.
    pub fn stats(&mut self) -> Result<RingStats, LiveError> {
        let mut s = self.base;
        let cur = self.ring.stats()?;
        add_stats(&mut s, &cur);
        s.ring_bytes = cur.ring_bytes;
        if let Some(o) = &self.overlap {
            s.handover_duplicates += o.skipped;
        }
        s.packets = s.packets.saturating_sub(s.handover_duplicates);
        Ok(s)
    }

    /// The busiest second's fill rate so far, bytes/s (0 without sizing).
    pub fn peak_rate(&self) -> u64 {
        self.peak_rate
    }
}

fn add_stats(to: &mut RingStats, s: &RingStats) {
    to.packets += s.packets;
    to.drops += s.drops;
    to.freeze_q += s.freeze_q;
    to.resyncs += s.resyncs;
    to.pause_max_ns = to.pause_max_ns.max(s.pause_max_ns);
    to.long_pauses += s.long_pauses;
}

/// The size a ring of `ring_bytes` in `blocks` blocks should grow to, and why, or None: enough
/// for `margin` of `peak_rate` (bytes/s), and twice the size when the reader came back to a
/// ring at least half full (`ready_max` blocks ready at once). Rounded up to [`STEP_BYTES`],
/// at most `max_bytes`.
pub fn decide(
    s: &Sizing,
    ring_bytes: u64,
    blocks: usize,
    peak_rate: u64,
    ready_max: u64,
) -> Option<(u64, String)> {
    let by_rate = u64::try_from(u128::from(peak_rate) * s.margin.as_nanos() / 1_000_000_000)
        .unwrap_or(u64::MAX);
    // A reader that keeps up finds one block at a time.
    let nearly_full = ready_max >= 2 && ready_max.saturating_mul(2) >= blocks as u64;
    let by_fill = if nearly_full {
        ring_bytes.saturating_mul(2)
    } else {
        0
    };
    let (need, why) = if by_fill > by_rate {
        (
            by_fill,
            format!("the reader came back to {ready_max} of {blocks} blocks full"),
        )
    } else {
        let secs = ring_bytes as f64 / peak_rate.max(1) as f64;
        (
            by_rate,
            format!(
                "the busiest second, {:.1} MB/s, would fill it in {secs:.2} s (margin {:.2} s)",
                peak_rate as f64 / 1e6,
                s.margin.as_secs_f64()
            ),
        )
    };
    let target = need
        .div_ceil(STEP_BYTES)
        .saturating_mul(STEP_BYTES)
        .min(s.max_bytes);
    (need > ring_bytes && target > ring_bytes).then_some((target, why))
}

#[cfg(test)]
#[path = "grow_tests.rs"]
mod tests;
