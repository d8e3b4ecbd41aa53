//! A receive ring that grows with the traffic: when the rate the ring fills at means it would
//! last less than [`Growth::seconds`], a bigger ring is opened beside it and swapped in.
//!
//! # Why two rings
//!
//! A TPACKET_V3 ring cannot be resized in place (the kernel refuses `PACKET_RX_RING` while the
//! socket has one mapped). So a second socket with the bigger ring and the same filter is opened
//! on a helper thread (allocating hundreds of MiB of ring takes time the reader must not lose).
//! From the moment its filter is attached, both sockets receive every packet; the kernel gives
//! both copies of a packet the same timestamp. The switch is cut by time: with `cut` a little
//! after the new ring opened, the old ring delivers the packets stamped at or before `cut`, the
//! new one those after it. The old ring is read until it shows a packet stamped well after the
//! cut (everything before it was then delivered: both rings receive in the same order), or until
//! it has been idle for a second past the cut; then it is closed.
//!
//! Only a ring outside a fanout group grows (`--threads 1`): a second member would change how
//! the kernel spreads connections over the group.

use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::time::{Duration, Instant};

use crate::LiveError;
use crate::bpf::Insn;
use crate::ring::{Packet, Ring, RingConfig, RingStats, realtime_ns};

/// How far after the new ring opened the switch is cut (ns): any packet stamped later was
/// delivered after the new ring's filter was attached.
const CUT_AFTER_NS: u64 = 5_000_000;
/// The old ring is done once it shows a packet stamped this long after the cut (ns).
const DONE_AFTER_NS: u64 = 100_000_000;
/// ... or once it has nothing ready this long after the cut (ns).
const IDLE_DONE_NS: u64 = 1_000_000_000;
/// How often the fill rate is measured.
const RATE_WINDOW: Duration = Duration::from_millis(250);

/// When and how far a ring grows.
#[derive(Clone, Debug, PartialEq)]
pub struct Growth {
    /// Grow when the ring would last less than this at the observed rate.
    pub seconds: f64,
    /// Never beyond this many bytes.
    pub max_bytes: u64,
}

/// What growing did, for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrowthEvent {
    /// The ring was replaced by a bigger one.
    Grown {
        from_bytes: u64,
        to_bytes: u64,
        /// The fill rate that asked for it, bytes per second.
        rate: u64,
    },
    /// The bigger ring could not be opened; the ring stays as it is.
    Failed { to_bytes: u64, error: String },
}

/// The bigger ring being opened on its own thread.
struct Opening {
    rx: Receiver<Result<Ring, LiveError>>,
    /// The fill rate that asked for it, bytes/s.
    rate: u64,
    /// Its size, bytes.
    to_bytes: u64,
}

/// The switch from the old ring to the new one.
struct Handover {
    new: Ring,
    cut_ns: u64,
    /// The latest timestamp the old ring showed after the cut.
    seen_after_ns: u64,
    from_bytes: u64,
    rate: u64,
}

/// A ring that can grow ([`Growth`]); reads like [`Ring`].
pub struct GrowingRing {
    ring: Ring,
    cfg: RingConfig,
    filter: Vec<Insn>,
    growth: Option<Growth>,
    /// Counters of the rings closed so far.
    closed: RingStats,
    /// Packets stamped at or before this are skipped (they came from the previous ring).
    skip_le_ns: u64,
    opening: Option<Opening>,
    handover: Option<Handover>,
    window_start: Instant,
    window_blocks: u64,
    /// The latest packet time read when the window started.
    window_ts_ns: u64,
    events: Vec<GrowthEvent>,
}

impl GrowingRing {
    /// Wraps `ring`, opened with `cfg` and `filter`; without `growth` (or in a fanout group) it
    /// never grows.
    pub fn new(
        ring: Ring,
        cfg: RingConfig,
        filter: Vec<Insn>,
        growth: Option<Growth>,
    ) -> GrowingRing {
        let growth = growth.filter(|_| cfg.fanout_group.is_none());
        GrowingRing {
            window_blocks: ring.blocks_read,
            ring,
            cfg,
            filter,
            growth,
            closed: RingStats::default(),
            skip_le_ns: 0,
            opening: None,
            handover: None,
            window_start: Instant::now(),
            window_ts_ns: 0,
            events: Vec::new(),
        }
    }

    /// As [`Ring::poll`]; also watches the fill rate, and switches rings when a bigger one is
    /// ready.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&Packet<'_>),
    ) -> Result<usize, LiveError> {
        self.check_opening();
        if let Some(h) = &mut self.handover {
            let cut = h.cut_ns;
            let seen = &mut h.seen_after_ns;
            let skip = self.skip_le_ns;
            let n = self.ring.poll(timeout, |p| {
                if p.ts_ns <= skip {
                } else if p.ts_ns <= cut {
                    f(p)
                } else {
                    *seen = (*seen).max(p.ts_ns);
                }
            })?;
            let done = h.seen_after_ns > cut + DONE_AFTER_NS
                || (n == 0 && realtime_ns() > cut + IDLE_DONE_NS);
            if done {
                self.switch();
            }
            return Ok(n);
        }
        let skip = self.skip_le_ns;
        let n = self.ring.poll(timeout, |p| {
            if p.ts_ns > skip {
                f(p)
            }
        })?;
        self.watch_rate();
        Ok(n)
    }

    /// Measures the fill rate over the last window and starts opening a bigger ring when the
    /// current one would last less than asked.
    fn watch_rate(&mut self) {
        if self.window_start.elapsed() < RATE_WINDOW {
            return;
        }
        let blocks = self.ring.blocks_read - self.window_blocks;
        let (t0, t1) = (self.window_ts_ns, self.ring.last_block_ts_ns);
        self.window_start = Instant::now();
        self.window_blocks = self.ring.blocks_read;
        self.window_ts_ns = t1;
        let Some(g) = &self.growth else { return };
        // The rate in the kernel's time (the packets' stamps), not in the reader's: blocks
        // read in a burst after a pause filled over the whole pause.
        if self.opening.is_some() || self.handover.is_some() || t0 == 0 || t1 <= t0 || blocks < 2 {
            return;
        }
        let span = (t1 - t0) as f64 / 1e9;
        let rate = (blocks * u64::from(self.cfg.block_size)) as f64 / span.max(0.02);
        let size = self.ring.size_bytes() as u64;
        if size as f64 / rate >= g.seconds {
            return;
        }
        let Some(want) = grown_size(size, rate, g, u64::from(self.cfg.block_size)) else {
            return;
        };
        let mut cfg = self.cfg.clone();
        cfg.block_count = (want / u64::from(cfg.block_size)) as u32;
        let filter = self.filter.clone();
        let (tx, rx) = channel();
        let spawned = std::thread::Builder::new()
            .name("dbtap-ring-grow".into())
            .spawn(move || {
                let _ = tx.send(Ring::open(&cfg, &filter));
            });
        if spawned.is_ok() {
            self.opening = Some(Opening {
                rx,
                rate: rate as u64,
                to_bytes: want,
            });
        }
    }

    /// Takes the bigger ring when its thread has opened it.
    fn check_opening(&mut self) {
        let Some(o) = &self.opening else {
            return;
        };
        let (rate, to_bytes) = (o.rate, o.to_bytes);
        let opened = match o.rx.try_recv() {
            Err(TryRecvError::Empty) => return,
            Ok(r) => r,
            Err(TryRecvError::Disconnected) => {
                Err(LiveError::Config("the ring thread died".into()))
            }
        };
        self.opening = None;
        match opened {
            Ok(new) => {
                self.handover = Some(Handover {
                    cut_ns: realtime_ns() + CUT_AFTER_NS,
                    seen_after_ns: 0,
                    from_bytes: self.ring.size_bytes() as u64,
                    rate,
                    new,
                });
            }
            Err(e) => {
                self.events.push(GrowthEvent::Failed {
                    to_bytes,
                    error: e.to_string(),
                });
                // Do not try again.
                self.growth = None;
            }
        }
    }

    /// The old ring has delivered everything up to the cut: the new one takes over.
    fn switch(&mut self) {
        let Some(h) = self.handover.take() else {
            return;
        };
        let old_stats = self.ring.stats().unwrap_or_default();
        self.closed = add_stats(&self.closed, &old_stats);
        let old = std::mem::replace(&mut self.ring, h.new);
        drop(old);
        self.skip_le_ns = h.cut_ns;
        self.window_start = Instant::now();
        self.window_blocks = self.ring.blocks_read;
        self.window_ts_ns = 0;
        self.cfg.block_count = (self.ring.size_bytes() / self.cfg.block_size as usize) as u32;
        self.events.push(GrowthEvent::Grown {
            from_bytes: h.from_bytes,
            to_bytes: self.ring.size_bytes() as u64,
            rate: h.rate,
        });
    }

    /// What growing did since the last call.
    pub fn take_events(&mut self) -> Vec<GrowthEvent> {
        std::mem::take(&mut self.events)
    }

    /// As [`Ring::take_interval_pause`].
    pub fn take_interval_pause(&mut self) -> u64 {
        let mut p = self.ring.take_interval_pause();
        if let Some(h) = &mut self.handover {
            p = p.max(h.new.take_interval_pause());
        }
        p
    }

    /// Counters since the first ring opened: the closed rings' plus the current one's (the
    /// size is the current ring's).
    pub fn stats(&mut self) -> Result<RingStats, LiveError> {
        let cur = self.ring.stats()?;
        Ok(add_stats(&self.closed, &cur))
    }
}

/// Counters summed, pauses by maximum, the size of `b`.
fn add_stats(a: &RingStats, b: &RingStats) -> RingStats {
    RingStats {
        packets: a.packets + b.packets,
        drops: a.drops + b.drops,
        freeze_q: a.freeze_q + b.freeze_q,
        resyncs: a.resyncs + b.resyncs,
        pause_max_ns: a.pause_max_ns.max(b.pause_max_ns),
        ring_bytes: b.ring_bytes,
    }
}

/// The size that holds `g.seconds` of `rate` bytes/s: a multiple of `size`, at least twice
/// `size`, at most `g.max_bytes` (in whole `block`s); None when that is not bigger than `size`.
pub fn grown_size(size: u64, rate: f64, g: &Growth, block: u64) -> Option<u64> {
    let size = size.max(block.max(1));
    let need = (rate * g.seconds).clamp(0.0, g.max_bytes as f64) as u64;
    let want = need.div_ceil(size).max(2).saturating_mul(size);
    let cap = g.max_bytes / block.max(1) * block;
    let want = want.min(cap);
    (want > size).then_some(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn g(max_mb: u64) -> Growth {
        Growth {
            seconds: 2.0,
            max_bytes: max_mb * MIB,
        }
    }

    #[test]
    fn grows_to_hold_two_seconds_in_multiples_of_the_ring() {
        // 66 MB/s (530 Mbit/s) on a 32 MiB ring: 132 MB (126 MiB) needed, 128 MiB given.
        assert_eq!(
            grown_size(32 * MIB, 66e6, &g(256), MIB / 4),
            Some(128 * MIB)
        );
        // A little short: at least twice.
        assert_eq!(grown_size(32 * MIB, 17e6, &g(256), MIB / 4), Some(64 * MIB));
        // Bounded.
        assert_eq!(grown_size(32 * MIB, 1e9, &g(256), MIB / 4), Some(256 * MIB));
        assert_eq!(grown_size(256 * MIB, 1e9, &g(256), MIB / 4), None);
        assert_eq!(grown_size(32 * MIB, 1e9, &g(20), MIB / 4), None);
    }

    proptest::proptest! {
        #[test]
        fn grown_size_stays_within_the_bound(
            size_mb in 1u64..512, rate in 0.0f64..1e10, max_mb in 1u64..1024
        ) {
            let size = size_mb * MIB;
            if let Some(w) = grown_size(size, rate, &g(max_mb), MIB / 4) {
                proptest::prop_assert!(w > size && w <= max_mb * MIB);
                proptest::prop_assert_eq!(w % (MIB / 4), 0);
            }
        }
    }
}
