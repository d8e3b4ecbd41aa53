//! The TPACKET_V3 receive ring: opening, polling, block walking, statistics.

use std::io;
use std::time::{Duration, Instant};

use crate::LiveError;
use crate::bpf::{BPF_MAXINSNS, BPF_RET, Insn};
use crate::sys::{self, Mapping, Socket};

/// How to open a ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// "lo", "eth0", ... or "any" (every interface).
    pub interface: String,
    /// Bytes per block: a multiple of the page size, at least 64 KiB plus headers (the
    /// loopback MTU is 65536 and GRO packets reach 64 KiB; a packet bigger than a block is cut).
    pub block_size: u32,
    /// Blocks per ring (the ring holds `block_size * block_count` bytes).
    pub block_count: u32,
    /// `tp_retire_blk_tov`: a block holding packets is handed over after this many ms even
    /// when not full.
    pub retire_ms: u32,
    /// Join the PACKET_FANOUT group with this id (hash mode, defragmenting).
    pub fanout_group: Option<u16>,
}

impl RingConfig {
    /// Defaults (1 MiB x 16 blocks, 20 ms retire timeout, no fanout) on `interface`.
    pub fn new(interface: &str) -> RingConfig {
        RingConfig {
            interface: interface.to_string(),
            ..RingConfig::default()
        }
    }
}

impl Default for RingConfig {
    fn default() -> RingConfig {
        RingConfig {
            interface: "any".into(),
            block_size: 1 << 20,
            block_count: 16,
            retire_ms: 20,
            fanout_group: None,
        }
    }
}

/// One captured packet, borrowed from the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Kernel timestamp, nanoseconds since the epoch.
    pub ts_ns: u64,
    /// The packet from its network header (IPv4/IPv6), as captured (caplen-limited).
    pub data: &'a [u8],
    /// Length on the wire from the network header.
    pub wire_len: u32,
    pub ifindex: i32,
    /// `PACKET_HOST`, `PACKET_OUTGOING`, ...
    pub pkttype: u8,
    /// Ethertype (host order).
    pub protocol: u16,
}

/// Counters since the ring was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Packets that passed the filter, as the kernel counts them (delivered plus dropped).
    pub packets: u64,
    /// Packets the kernel dropped because the ring was full.
    pub drops: u64,
    /// Times the ring was frozen full (`tp_freeze_q_cnt`).
    pub freeze_q: u64,
    /// Times the reader found its current block still the kernel's while a later block was
    /// ready, and skipped ahead to the oldest ready block (see [`Ring::poll`]). The kernel
    /// fills blocks in order, so this should stay 0; it is counted so that it would show.
    pub resyncs: u64,
    /// The reader's longest pause: the longest a retired block (packets waiting) stayed in
    /// the ring before the reader read it, in nanoseconds, measured from the block's last
    /// packet. A stopped, starved or busy reader shows here; the kernel drops packets once a
    /// pause lasts longer than the ring holds at the traffic's rate.
    pub pause_max_ns: u64,
    /// Reads that came after a pause of at least [`LONG_PAUSE_NS`] (one per return of the
    /// reader to a ring with blocks that waited that long).
    pub long_pauses: u64,
    /// The ring's size in bytes (blocks times block size).
    pub ring_bytes: u64,
    /// Times the ring was replaced by a larger one ([`crate::AutoRing`]).
    pub growths: u64,
    /// Packets seen twice while a ring was replaced (both rings held them) and handed once.
    pub handover_duplicates: u64,
}

/// How much of the ring the traffic used since [`Ring::take_fill`] was last called: the
/// input of the ring's sizing ([`crate::AutoRing`]). Counting costs one read per block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fill {
    /// Bytes the kernel wrote into the blocks read (packets and their headers).
    pub bytes: u64,
    /// The most blocks found ready at once when the reader came back: how full the ring was.
    pub ready_max: u64,
}

/// A reader pause at least this long (100 ms) is counted in [`RingStats::long_pauses`].
pub const LONG_PAUSE_NS: u64 = 100_000_000;

/// A TPACKET_V3 receive ring on one AF_PACKET socket.
pub struct Ring {
    // Field order: the mapping is unmapped before the socket closes.
    pub(crate) map: Mapping,
    sock: Socket,
    pub(crate) block_size: usize,
    block_count: usize,
    /// The block the reader waits on next (crate-visible for the tests).
    pub(crate) cur: usize,
    stats: RingStats,
    /// The longest block wait since [`Ring::take_interval_pause`] was last called, ns.
    interval_pause_ns: u64,
    ifindex: i32,
    fill: Fill,
}

const TPACKET_V3: i32 = 2;
const PACKET_FANOUT_HASH: u32 = libc::PACKET_FANOUT_HASH;
const FANOUT_FLAGS: u32 = libc::PACKET_FANOUT_FLAG_DEFRAG;
const FANOUT_UNIQUEID: u32 = libc::PACKET_FANOUT_FLAG_UNIQUEID;
/// Offset of the `sockaddr_ll` after a `tpacket3_hdr` (TPACKET_ALIGN(48)).
const SLL_OFF: usize = 48;
/// `tpacket3_hdr` plus the fields of `sockaddr_ll` we read.
const PKT_HDR_MIN: usize = SLL_OFF + 12;

#[derive(Clone, Copy)]
enum Fanout {
    None,
    Join(u16),
    NewUnique,
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> LiveError {
    move |source| LiveError::Io { what, source }
}

/// Swaps in the capture filter (an empty one accepts everything): the socket takes packets.
fn accept(sock: &Socket, filter: &[Insn]) -> Result<(), LiveError> {
    if filter.is_empty() {
        sock.detach_filter()
            .map_err(io_err("setsockopt(SO_DETACH_FILTER)"))
    } else {
        sock.attach_filter(filter)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EINVAL) => LiveError::Filter(
                    "the kernel refused the capture filter program (EINVAL)".into(),
                ),
                _ => LiveError::Io {
                    what: "setsockopt(SO_ATTACH_FILTER)",
                    source: e,
                },
            })
    }
}

/// The ifindex of `name`; "any" is 0 (every interface).
pub fn interface_index(name: &str) -> Result<i32, LiveError> {
    if name == "any" {
        return Ok(0);
    }
    match sys::if_nametoindex(name) {
        0 => Err(LiveError::NoSuchInterface(name.to_string())),
        i => i32::try_from(i).map_err(|_| LiveError::NoSuchInterface(name.to_string())),
    }
}

/// The loopback device's ifindex, for `FilterSpec::loopback_ifindex`.
pub fn loopback_index() -> Option<i32> {
    interface_index("lo").ok()
}

fn check_config(cfg: &RingConfig, filter: &[Insn]) -> Result<(), LiveError> {
    let page = sys::page_size();
    let bs = cfg.block_size as usize;
    if !bs.is_multiple_of(page) || bs < 65536 + page {
        return Err(LiveError::Config(format!(
            "block size {bs} must be a multiple of the page size ({page}) and at least {}",
            65536 + page
        )));
    }
    if cfg.block_count == 0
        || bs
            .checked_mul(cfg.block_count as usize)
            .is_none_or(|t| t > (1 << 40))
    {
        return Err(LiveError::Config(format!(
            "block count {} is out of range",
            cfg.block_count
        )));
    }
    if filter.len() > BPF_MAXINSNS {
        return Err(LiveError::Filter(format!(
            "filter has {} instructions, over the kernel's limit of {BPF_MAXINSNS}",
            filter.len()
        )));
    }
    Ok(())
}

impl Ring {
    /// Opens a ring on `cfg.interface` that delivers the packets `filter` accepts (an empty
    /// filter accepts everything).
    ///
    /// Order: the socket is created with protocol 0 (it receives nothing yet), a reject-all
    /// filter is attached, the ring set up and mapped, the socket bound (and joined to the
    /// fanout group), and only then is the real filter swapped in, so no unfiltered packet and
    /// no packet meant for another fanout member ever reaches the ring.
    pub fn open(cfg: &RingConfig, filter: &[Insn]) -> Result<Ring, LiveError> {
        let fanout = cfg.fanout_group.map_or(Fanout::None, Fanout::Join);
        Ring::open_with(cfg, filter, fanout)
    }

    fn open_with(cfg: &RingConfig, filter: &[Insn], fanout: Fanout) -> Result<Ring, LiveError> {
        check_config(cfg, filter)?;
        let ifindex = interface_index(&cfg.interface)?;
        let sock = Socket::packet().map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => LiveError::NoPrivilege,
            _ => LiveError::Io {
                what: "socket(AF_PACKET)",
                source: e,
            },
        })?;
        sock.attach_filter(&[Insn::stmt(BPF_RET, 0)])
            .map_err(io_err("setsockopt(SO_ATTACH_FILTER)"))?;
        sock.set_int(libc::SOL_PACKET, libc::PACKET_VERSION, TPACKET_V3)
            .map_err(io_err("setsockopt(PACKET_VERSION, TPACKET_V3)"))?;
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_count,
            tp_frame_size: cfg.block_size,
            tp_frame_nr: cfg.block_count,
            tp_retire_blk_tov: cfg.retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        sock.set_rx_ring(&req)
            .map_err(io_err("setsockopt(PACKET_RX_RING)"))?;
        let block_size = cfg.block_size as usize;
        let block_count = cfg.block_count as usize;
        let map = sock
            .map(block_size * block_count)
            .map_err(io_err("mmap of the packet ring"))?;
        sock.bind_all(ifindex).map_err(|e| match e.raw_os_error() {
            Some(libc::ENODEV | libc::ENXIO) => LiveError::NoSuchInterface(cfg.interface.clone()),
            _ => LiveError::Io {
                what: "bind(AF_PACKET)",
                source: e,
            },
        })?;
        let mode = (PACKET_FANOUT_HASH | FANOUT_FLAGS) << 16;
        match fanout {
            Fanout::None => {}
            Fanout::Join(id) => sock
                .set_int(
                    libc::SOL_PACKET,
                    libc::PACKET_FANOUT,
                    (u32::from(id) | mode) as i32,
                )
                .map_err(io_err("setsockopt(PACKET_FANOUT)"))?,
            Fanout::NewUnique => sock
                .set_int(
                    libc::SOL_PACKET,
                    libc::PACKET_FANOUT,
                    (mode | FANOUT_UNIQUEID << 16) as i32,
                )
                .map_err(io_err("setsockopt(PACKET_FANOUT, unique id)"))?,
        }
        accept(&sock, filter)?;
        Ok(Ring {
            map,
            sock,
            block_size,
            block_count,
            cur: 0,
            stats: RingStats {
                ring_bytes: (block_size * block_count) as u64,
                ..RingStats::default()
            },
            interval_pause_ns: 0,
            ifindex,
            fill: Fill::default(),
        })
    }

    /// The ifindex the ring is bound to (0 = every interface).
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The fanout group id this ring belongs to, if any.
    pub fn fanout_group(&self) -> Result<Option<u16>, LiveError> {
        let v = self
            .sock
            .fanout()
            .map_err(io_err("getsockopt(PACKET_FANOUT)"))?;
        // Without fanout the kernel returns 0; group 0 with mode HASH also reads as 0 but
        // then the flags bits (DEFRAG) are set.
        Ok(if v == 0 {
            None
        } else {
            Some((v & 0xffff) as u16)
        })
    }

    /// Waits up to `timeout` for a retired block, hands every packet in it (and in any
    /// further ready blocks, at most one pass over the ring) to `f`, and returns how many
    /// packets it handed. Returns 0 when the timeout passed first. Never blocks longer than
    /// `timeout`.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&Packet<'_>),
    ) -> Result<usize, LiveError> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(n) = self.drain(&mut f) {
                return Ok(n);
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                // Nothing in the current block for a whole poll: if a later block is ready,
                // reader and kernel disagree on the current block, and waiting would stall
                // the capture for good (the kernel drops everything once the ring is full).
                if self.resync() {
                    continue;
                }
                return Ok(0);
            }
            let revents = self
                .sock
                .wait(left)
                .map_err(io_err("ppoll on the packet socket"))?;
            if revents & libc::POLLERR != 0 {
                let e = self
                    .sock
                    .so_error()
                    .map_err(io_err("getsockopt(SO_ERROR)"))?;
                if e != 0 {
                    return Err(LiveError::Io {
                        what: "packet socket",
                        source: io::Error::from_raw_os_error(e),
                    });
                }
            }
        }
    }

    /// Moves `cur` to the oldest user-owned block after it, if any (counted in
    /// [`RingStats::resyncs`]). True when it moved.
    fn resync(&mut self) -> bool {
        for step in 1..self.block_count {
            let i = (self.cur + step) % self.block_count;
            if self.map.block_status(i * self.block_size) & libc::TP_STATUS_USER != 0 {
                self.cur = i;
                self.stats.resyncs += 1;
                return true;
            }
        }
        false
    }

    /// Walks the ready blocks from the current one; None when the current block is not ready.
    fn drain(&mut self, f: &mut impl FnMut(&Packet<'_>)) -> Option<usize> {
        let mut blocks = 0;
        let mut handed = 0;
        let mut longest = 0;
        while blocks < self.block_count {
            let off = self.cur * self.block_size;
            if self.map.block_status(off) & libc::TP_STATUS_USER == 0 {
                break;
            }
            let block = self.map.block(off, self.block_size);
            // One clock read per block (1 MiB by default), before the block is walked: the
            // wait is how long the block sat retired, not how long the walk took.
            longest = longest.max(block_wait_ns(block, realtime_ns()));
            self.fill.bytes += u64::from(u32_at(block, 20).unwrap_or(0));
            handed += walk_block(block, &mut *f);
            self.map.release(off);
            self.cur = (self.cur + 1) % self.block_count;
            blocks += 1;
        }
        if blocks > 0 {
            self.note_pause(longest);
            self.fill.ready_max = self.fill.ready_max.max(blocks as u64);
        }
        (blocks > 0).then_some(handed)
    }

    fn note_pause(&mut self, ns: u64) {
        self.stats.pause_max_ns = self.stats.pause_max_ns.max(ns);
        self.interval_pause_ns = self.interval_pause_ns.max(ns);
        if ns >= LONG_PAUSE_NS {
            self.stats.long_pauses += 1;
        }
    }

    /// The ring's use since the last call (or since the ring opened); the next period starts
    /// empty.
    pub fn take_fill(&mut self) -> Fill {
        std::mem::take(&mut self.fill)
    }

    /// Blocks in the ring.
    pub fn block_count(&self) -> usize {
        self.block_count
    }

    /// Opens a ring that takes no packet until [`Ring::accept`] (not in a fanout group): the
    /// slow part of a growth (allocating and mapping the blocks), done off the reader's thread.
    pub(crate) fn open_closed(cfg: &RingConfig) -> Result<Ring, LiveError> {
        Ring::open_with(cfg, &[Insn::stmt(BPF_RET, 0)], Fanout::None)
    }

    /// Starts taking the packets `filter` accepts (a ring from [`Ring::open_closed`]).
    pub(crate) fn accept(&self, filter: &[Insn]) -> Result<(), LiveError> {
        accept(&self.sock, filter)
    }

    /// Stops the ring's intake: a reject-all filter replaces the capture filter atomically, so
    /// the ring receives nothing more and what it holds can be drained.
    pub(crate) fn silence(&self) -> Result<(), LiveError> {
        self.sock
            .attach_filter(&[Insn::stmt(BPF_RET, 0)])
            .map_err(io_err("setsockopt(SO_ATTACH_FILTER), reject all"))
    }

    /// The reader's longest pause since the last call (or since the ring opened), ns; the
    /// next period starts at 0.
    pub fn take_interval_pause(&mut self) -> u64 {
        std::mem::take(&mut self.interval_pause_ns)
    }

    /// The counters as last read, without asking the kernel.
    pub(crate) fn last_stats(&self) -> RingStats {
        self.stats
    }

    /// Kernel counters accumulated since the ring was opened (the kernel resets its own on
    /// each read).
    pub fn stats(&mut self) -> Result<RingStats, LiveError> {
        let s = self
            .sock
            .stats()
            .map_err(io_err("getsockopt(PACKET_STATISTICS)"))?;
        self.stats.packets += u64::from(s.tp_packets);
        self.stats.drops += u64::from(s.tp_drops);
        self.stats.freeze_q += u64::from(s.tp_freeze_q_cnt);
        Ok(self.stats)
    }
}

/// Opens `n` rings on `cfg.interface`, joined in one PACKET_FANOUT group in hash mode with
/// defragmentation: the kernel's flow hash is symmetric, so both directions of a TCP
/// connection reach the same ring. The group id is `cfg.fanout_group`, or a fresh one the
/// kernel picks. `n == 1` opens a plain ring (in `cfg.fanout_group` if set).
pub fn open_group(cfg: &RingConfig, filter: &[Insn], n: usize) -> Result<Vec<Ring>, LiveError> {
    if n == 0 {
        return Err(LiveError::Config(
            "a ring group needs at least one ring".into(),
        ));
    }
    if n == 1 {
        return Ok(vec![Ring::open(cfg, filter)?]);
    }
    let first = Ring::open_with(
        cfg,
        filter,
        cfg.fanout_group.map_or(Fanout::NewUnique, Fanout::Join),
    )?;
    let id = match cfg.fanout_group {
        Some(id) => id,
        None => first
            .sock
            .fanout()
            .map(|v| (v & 0xffff) as u16)
            .map_err(io_err("getsockopt(PACKET_FANOUT)"))?,
    };
    let mut rings = vec![first];
    for _ in 1..n {
        rings.push(Ring::open_with(cfg, filter, Fanout::Join(id))?);
    }
    Ok(rings)
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(
        b.get(off..off.checked_add(2)?)?.try_into().ok()?,
    ))
}
pub(crate) fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The wall clock, ns since the epoch (the clock of the kernel's packet timestamps).
pub(crate) fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// How long a retired block has waited to be read at `now_ns` (wall clock, ns since the
/// epoch): from `ts_last_pkt` of its `tpacket_hdr_v1` (at 40: seconds, then nanoseconds at 44),
/// which is when the kernel closed a full block. A block retired by the timeout also counts
/// up to `retire_ms` before it was handed over. 0 for an empty or short block, or a clock that
/// went back.
pub fn block_wait_ns(block: &[u8], now_ns: u64) -> u64 {
    let (Some(num), Some(sec), Some(nsec)) =
        (u32_at(block, 12), u32_at(block, 40), u32_at(block, 44))
    else {
        return 0;
    };
    if num == 0 {
        return 0;
    }
    now_ns.saturating_sub(u64::from(sec) * 1_000_000_000 + u64::from(nsec))
}

/// Hands every packet of one TPACKET_V3 block to `f`; returns how many it handed.
///
/// Every offset and length read from the block is checked against the block: a corrupt
/// block ends the walk (or skips the packet whose header is inconsistent) and never panics or
/// reads outside `block`.
///
/// Layout (linux/if_packet.h): `tpacket_block_desc { version, offset_to_priv, hdr.bh1 {
/// block_status @8, num_pkts @12, offset_to_first_pkt @16, blk_len @20, ... } }`; each packet
/// is a `tpacket3_hdr { tp_next_offset @0, tp_sec @4, tp_nsec @8, tp_snaplen @12, tp_len @16,
/// tp_status @20, tp_mac @24 (u16), tp_net @26 (u16), ... }` followed at 48 by a `sockaddr_ll
/// { family, protocol (big endian) @2, ifindex @4, hatype @8, pkttype @10, ... }`;
/// `tp_mac`/`tp_net` count from the packet header, `tp_snaplen` from the link header.
pub fn walk_block(block: &[u8], mut f: impl FnMut(&Packet<'_>)) -> usize {
    let (Some(num), Some(first)) = (u32_at(block, 12), u32_at(block, 16)) else {
        return 0;
    };
    let mut off = first as usize;
    let mut handed = 0;
    for i in 0..num {
        let Some(hdr) = off
            .checked_add(PKT_HDR_MIN)
            .and_then(|end| block.get(off..end))
        else {
            break;
        };
        let (Some(next), Some(sec), Some(nsec), Some(snap), Some(len), Some(mac), Some(netoff)) = (
            u32_at(hdr, 0),
            u32_at(hdr, 4),
            u32_at(hdr, 8),
            u32_at(hdr, 12),
            u32_at(hdr, 16),
            u16_at(hdr, 24),
            u16_at(hdr, 26),
        ) else {
            break;
        };
        let proto = u16_at(hdr, SLL_OFF + 2).map_or(0, u16::from_be);
        let ifindex = u32_at(hdr, SLL_OFF + 4).map_or(0, |v| v as i32);
        let pkttype = hdr[SLL_OFF + 10];
        let (mac, netoff) = (usize::from(mac), usize::from(netoff));
        if netoff >= mac {
            let ll = netoff - mac;
            let start = off + netoff;
            let caplen = (snap as usize).saturating_sub(ll);
            if let Some(data) = start
                .checked_add(caplen)
                .and_then(|end| block.get(start..end))
            {
                f(&Packet {
                    ts_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
                    data,
                    wire_len: len.saturating_sub(ll as u32),
                    ifindex,
                    pkttype,
                    protocol: proto,
                });
                handed += 1;
            }
        }
        if i + 1 == num {
            break;
        }
        // Packets follow one another; a next offset shorter than a header is corrupt (and
        // the minimum keeps the walk within block.len() / PKT_HDR_MIN steps).
        if (next as usize) < PKT_HDR_MIN {
            break;
        }
        match off.checked_add(next as usize) {
            Some(o) => off = o,
            None => break,
        }
    }
    handed
}
