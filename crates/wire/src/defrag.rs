//! IPv4 and IPv6 fragment reassembly with bounded memory, timed out on capture time.
//!
//! Fragments are keyed by (source, destination, identification, protocol). Overlapping fragments
//! whose overlapping bytes differ drop the whole datagram (RFC 5722; the classic IDS-evasion and
//! teardrop shapes); identical overlaps (retransmitted or re-fragmented pieces) are accepted.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::Fragment;
use crate::ip::MAX_DATAGRAM;

/// Most disjoint pieces one datagram may be held in; more is an attack, not a network.
const MAX_PIECES: usize = 256;

/// Bounds on what a [`Defragmenter`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefragLimits {
    /// Datagrams in progress at once; past this the oldest is dropped.
    pub max_datagrams: usize,
    /// Bytes held for datagrams in progress; past this the oldest are dropped.
    pub max_bytes: usize,
    /// A datagram not complete this long (capture time) after its first fragment is dropped.
    pub timeout_ns: u64,
}

impl Default for DefragLimits {
    /// 1024 datagrams, 8 MiB, 30 s (Linux's `ipfrag_time`).
    fn default() -> Self {
        DefragLimits {
            max_datagrams: 1024,
            max_bytes: 8 << 20,
            timeout_ns: 30_000_000_000,
        }
    }
}

/// Counters of what a [`Defragmenter`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DefragStats {
    /// Fragments pushed.
    pub fragments: u64,
    /// Whole datagrams returned.
    pub reassembled: u64,
    /// Datagrams dropped incomplete after the timeout.
    pub dropped_timeout: u64,
    /// Datagrams dropped to stay within the datagram or byte limit.
    pub dropped_overflow: u64,
    /// Datagrams dropped because fragments overlapped with different bytes.
    pub dropped_overlap: u64,
    /// Datagrams dropped for inconsistent fragments (two different ends, data past the end).
    pub dropped_invalid: u64,
    /// Datagrams still in progress.
    pub in_progress: u64,
}

impl DefragStats {
    /// All datagrams dropped, for whatever reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_timeout + self.dropped_overflow + self.dropped_overlap + self.dropped_invalid
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    src: IpAddr,
    dst: IpAddr,
    id: u32,
    protocol: u8,
}

#[derive(Debug)]
struct Pending {
    first_ts: u64,
    /// Header of the offset-0 fragment, once it arrived.
    header: Option<Vec<u8>>,
    next_header_at: usize,
    data: Vec<u8>,
    /// Received byte ranges of `data`, sorted, disjoint and not adjacent (merged).
    ranges: Vec<(usize, usize)>,
    /// Payload length, known once the last fragment arrived.
    total: Option<usize>,
}

impl Pending {
    fn held(&self) -> usize {
        self.data.len() + self.header.as_ref().map_or(0, Vec::len)
    }

    fn complete(&self) -> bool {
        self.header.is_some()
            && matches!((self.total, self.ranges.as_slice()), (Some(t), [(0, e)]) if *e == t)
    }

    /// Whether `new` at `[s, e)` agrees with every byte already received there.
    fn agrees(&self, s: usize, new: &[u8]) -> bool {
        let e = s + new.len();
        self.ranges.iter().all(|&(rs, re)| {
            let (a, b) = (rs.max(s), re.min(e));
            a >= b || self.data.get(a..b) == new.get(a - s..b - s)
        })
    }

    fn insert(&mut self, s: usize, new: &[u8]) {
        let e = s + new.len();
        if self.data.len() < e {
            self.data.resize(e, 0);
        }
        if let Some(dst) = self.data.get_mut(s..e) {
            dst.copy_from_slice(new);
        }
        let (mut ns, mut ne) = (s, e);
        self.ranges.retain(|&(rs, re)| {
            if re < ns || rs > ne {
                true
            } else {
                ns = ns.min(rs);
                ne = ne.max(re);
                false
            }
        });
        let at = self.ranges.partition_point(|&(rs, _)| rs < ns);
        self.ranges.insert(at, (ns, ne));
    }
}

/// Reassembles IPv4 fragments and IPv6 Fragment-header packets into whole datagrams.
#[derive(Debug)]
pub struct Defragmenter {
    limits: DefragLimits,
    pending: HashMap<Key, Pending>,
    held: usize,
    last_sweep: u64,
    stats: DefragStats,
}

impl Default for Defragmenter {
    fn default() -> Self {
        Self::new()
    }
}

enum Drop {
    Timeout,
    Overflow,
    Overlap,
    Invalid,
}

impl Defragmenter {
    /// A defragmenter with [`DefragLimits::default`].
    pub fn new() -> Self {
        Self::with_limits(DefragLimits::default())
    }

    pub fn with_limits(limits: DefragLimits) -> Self {
        Defragmenter {
            limits,
            pending: HashMap::new(),
            held: 0,
            last_sweep: 0,
            stats: DefragStats::default(),
        }
    }

    pub fn stats(&self) -> DefragStats {
        DefragStats {
            in_progress: self.pending.len() as u64,
            ..self.stats
        }
    }

    /// Bytes currently held for datagrams in progress.
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    fn drop_key(&mut self, key: &Key, why: Drop) {
        if let Some(p) = self.pending.remove(key) {
            self.held -= p.held();
            let c = match why {
                Drop::Timeout => &mut self.stats.dropped_timeout,
                Drop::Overflow => &mut self.stats.dropped_overflow,
                Drop::Overlap => &mut self.stats.dropped_overlap,
                Drop::Invalid => &mut self.stats.dropped_invalid,
            };
            *c += 1;
        }
    }

    fn oldest_except(&self, keep: Option<&Key>) -> Option<Key> {
        self.pending
            .iter()
            .filter(|(k, _)| Some(*k) != keep)
            .min_by_key(|(_, p)| p.first_ts)
            .map(|(k, _)| *k)
    }

    /// Drop datagrams past the timeout, at most once per second of capture time.
    fn sweep(&mut self, ts_ns: u64) {
        if ts_ns < self.last_sweep.saturating_add(1_000_000_000) {
            return;
        }
        self.last_sweep = ts_ns;
        let timeout = self.limits.timeout_ns;
        let expired: Vec<Key> = self
            .pending
            .iter()
            .filter(|(_, p)| ts_ns.saturating_sub(p.first_ts) > timeout)
            .map(|(k, _)| *k)
            .collect();
        for k in &expired {
            self.drop_key(k, Drop::Timeout);
        }
    }

    /// Add one fragment (`ts_ns` is its capture time). Returns the whole IP datagram when the last
    /// missing piece arrives (decode it with [`decode_ip`](crate::decode_ip)).
    pub fn push(&mut self, frag: &Fragment<'_>, ts_ns: u64) -> Option<Vec<u8>> {
        self.stats.fragments += 1;
        self.sweep(ts_ns);
        let key = Key {
            src: frag.src,
            dst: frag.dst,
            id: frag.id,
            protocol: frag.protocol,
        };
        let start = frag.offset as usize;
        let end = start + frag.data.len();
        let ext = if frag.is_ipv6() {
            frag.header.len().saturating_sub(40)
        } else {
            frag.header.len()
        };
        if ext + end > MAX_DATAGRAM {
            // decode() never yields such a fragment; a hand-made one is refused.
            self.drop_key(&key, Drop::Invalid);
            return None;
        }
        self.open(&key, ts_ns);
        if let Some(why) = self.verdict(&key, frag, start, end) {
            self.drop_key(&key, why);
            return None;
        }
        if !self.make_room(&key, frag, start, end) {
            return None;
        }
        self.add(&key, frag, start, end)
    }

    /// The datagram of `key` in progress: a timed-out one is dropped, and a new one started
    /// (dropping the oldest when at the datagram limit).
    fn open(&mut self, key: &Key, ts_ns: u64) {
        if let Some(p) = self.pending.get(key)
            && ts_ns.saturating_sub(p.first_ts) > self.limits.timeout_ns
        {
            self.drop_key(key, Drop::Timeout);
        }
        if self.pending.contains_key(key) {
            return;
        }
        if self.pending.len() >= self.limits.max_datagrams.max(1)
            && let Some(old) = self.oldest_except(None)
        {
            self.drop_key(&old, Drop::Overflow);
        }
        self.pending.insert(
            *key,
            Pending {
                first_ts: ts_ns,
                header: None,
                next_header_at: 0,
                data: Vec::new(),
                ranges: Vec::new(),
                total: None,
            },
        );
    }

    /// Consistency and overlap checks of the fragment at `[start, end)` against what is
    /// already held: why the datagram must be dropped, if it must.
    fn verdict(&self, key: &Key, frag: &Fragment<'_>, start: usize, end: usize) -> Option<Drop> {
        let p = self.pending.get(key)?;
        let past_end = match p.total {
            Some(t) => end > t || (!frag.more && end != t),
            None => !frag.more && p.ranges.last().is_some_and(|&(_, e)| e > end),
        };
        if past_end {
            Some(Drop::Invalid)
        } else if p.ranges.len() >= MAX_PIECES {
            Some(Drop::Overflow)
        } else if !p.agrees(start, frag.data) {
            Some(Drop::Overlap)
        } else {
            None
        }
    }

    /// Memory bound: makes room for the fragment by dropping the oldest other datagrams.
    /// False when even that is not enough (the datagram itself is dropped), or when it is
    /// not held.
    fn make_room(&mut self, key: &Key, frag: &Fragment<'_>, start: usize, end: usize) -> bool {
        let Some(p) = self.pending.get(key) else {
            return false;
        };
        let hdr = if start == 0 && p.header.is_none() {
            frag.header.len()
        } else {
            0
        };
        let grow = end.saturating_sub(p.data.len()) + hdr;
        while self.held + grow > self.limits.max_bytes {
            match self.oldest_except(Some(key)) {
                Some(old) => self.drop_key(&old, Drop::Overflow),
                None => {
                    self.drop_key(key, Drop::Overflow);
                    return false;
                }
            }
        }
        true
    }

    /// Stores the fragment; the whole datagram when it was the last missing piece.
    fn add(&mut self, key: &Key, frag: &Fragment<'_>, start: usize, end: usize) -> Option<Vec<u8>> {
        let p = self.pending.get_mut(key)?;
        let before = p.held();
        p.insert(start, frag.data);
        if start == 0 && p.header.is_none() {
            p.header = Some(frag.header.to_vec());
            p.next_header_at = frag.next_header_at;
        }
        if !frag.more {
            p.total = Some(end);
        }
        let after = p.held();
        self.held = self.held + after - before;
        if !p.complete() {
            return None;
        }
        let p = self.pending.remove(key)?;
        self.held -= p.held();
        self.stats.reassembled += 1;
        Some(assemble(p, frag.is_ipv6(), frag.protocol))
    }
}

/// The whole datagram: the first fragment's header, patched, then the payload.
fn assemble(p: Pending, v6: bool, protocol: u8) -> Vec<u8> {
    let header = p.header.unwrap_or_default();
    let total = p.total.unwrap_or(p.data.len());
    let mut out = Vec::with_capacity(header.len() + total);
    out.extend_from_slice(&header);
    out.extend_from_slice(p.data.get(..total).unwrap_or(&p.data));
    if v6 {
        let plen = (header.len().saturating_sub(40) + total).min(0xffff) as u16;
        if let Some(b) = out.get_mut(4..6) {
            b.copy_from_slice(&plen.to_be_bytes());
        }
        if let Some(b) = out.get_mut(p.next_header_at) {
            *b = protocol;
        }
    } else {
        let tl = (header.len() + total).min(0xffff) as u16;
        if let Some(b) = out.get_mut(2..4) {
            b.copy_from_slice(&tl.to_be_bytes());
        }
        if let Some(b) = out.get_mut(6..8) {
            b.copy_from_slice(&[0, 0]);
        }
        if let Some(b) = out.get_mut(10..12) {
            b.copy_from_slice(&[0, 0]);
        }
        let sum = ipv4_checksum(out.get(..header.len()).unwrap_or_default());
        if let Some(b) = out.get_mut(10..12) {
            b.copy_from_slice(&sum.to_be_bytes());
        }
    }
    out
}

pub(crate) fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| match c {
            [a, b] => u32::from(u16::from_be_bytes([*a, *b])),
            [a] => u32::from(*a) << 8,
            _ => 0,
        })
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
