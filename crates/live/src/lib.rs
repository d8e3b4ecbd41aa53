//! Linux live capture for `dbtap live`: TCP packets off an interface at almost no CPU, handed
//! to a callback from their NETWORK header (IPv4/IPv6) whatever the device's link type.
//!
//! # How
//!
//! An `AF_PACKET` socket with a `TPACKET_V3` receive ring ([`Ring`]): the kernel writes
//! packets into mmapped blocks and hands a block over when it is full or `retire_ms` after its
//! first packet, so user space wakes once per block instead of once per packet and copies
//! nothing. A classic BPF socket filter ([`bpf`]) runs in the kernel and keeps only the
//! database traffic. Several rings can share the work in one `PACKET_FANOUT` group
//! ([`open_group`]); the kernel's flow hash is symmetric, so a connection's two directions
//! always reach the same ring.
//!
//! # Why hand-written on `libc`
//!
//! None of the crates looked at offers TPACKET_V3, fanout and a kernel filter together: pnet
//! reads one packet per syscall, the afpacket crates lack fanout or V3 or the filter, and
//! libpcap's live handle (TPACKET_V3 inside, but one buffer and no fanout through its API) lost
//! about 8% of packets on the development machine until its buffer was raised. The ring is
//! ~100 lines of system calls (`sys.rs`, the only `unsafe` in the crate, each block with a
//! SAFETY note); the block walk ([`walk_block`]) is safe code over a byte slice that
//! bounds-checks every offset the kernel wrote, and is property-tested on corrupt blocks.
//!
//! # Why network-relative filters
//!
//! A ring on "any" sees every device, each with a different link header (14-byte Ethernet on
//! `lo` and `eth0`, none on a tun, ...). Every filter here loads packet bytes at
//! `SKF_NET_OFF + k` (byte `k` of the network header) and reads the ethertype, packet type
//! and device through the ancillary loads, so one program is right on every device.
//!
//! # Why libpcap is dlopened
//!
//! `--filter` takes a tcpdump expression, and only libpcap compiles those. It is loaded at run
//! time ([`compile_expr`], `libloading`) for raw IP and relocated to network-relative loads,
//! so the dbtap binary does not link libpcap: reading capture files never needs it, and live
//! capture without `--filter` does not either.
//!
//! # Loopback
//!
//! On `lo` (and on "any", for `lo`'s packets) the kernel shows every packet twice, once
//! outgoing and once incoming. The generated filters drop the outgoing copy of the loopback
//! device in the kernel ([`FilterSpec::loopback_ifindex`], [`bpf::drop_outgoing`]), so each
//! loopback packet is seen once, as `tcpdump -i lo` shows it.
//!
//! The packets handed over start at the IP header: decode them as LINKTYPE_RAW (101).

#![deny(unsafe_code)]

pub mod bpf;
mod grow;
mod prio;
mod ring;
mod sys;

pub use bpf::{FilterSpec, Insn, and, compile_expr, sample_keeps, servers_filter};
pub use grow::{AutoRing, Growth, Sizing, decide};
pub use prio::{FIFO_CPU_LIMIT, FifoGuard, ReaderPriority, set_reader_priority};
pub use ring::{
    Fill, LONG_PAUSE_NS, Packet, Ring, RingConfig, RingStats, block_wait_ns, interface_index,
    loopback_index, open_group, walk_block,
};

/// The link type of [`Packet::data`]: raw IP (LINKTYPE_RAW), whatever the device.
pub const LINKTYPE_RAW: u32 = 101;

/// Errors of live capture; each displays as one line naming what failed.
#[derive(thiserror::Error, Debug)]
pub enum LiveError {
    #[error(
        "live capture needs the CAP_NET_RAW capability: run as root, or grant it with 'setcap cap_net_raw,cap_net_admin+eip /path/to/dbtap'"
    )]
    NoPrivilege,
    #[error("no such network interface: {0}")]
    NoSuchInterface(String),
    /// A capture filter could not be built, compiled or attached.
    #[error("{0}")]
    Filter(String),
    /// A ring configuration the kernel would refuse.
    #[error("live capture configuration: {0}")]
    Config(String),
    #[error("live capture: {what} failed: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests;
