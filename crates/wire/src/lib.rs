//! Checked, zero-copy views of captured L2-L4 headers: link layer, IPv4/IPv6, TCP, and IP defragmentation.
//!
//! [`decode`] turns one captured frame into a [`Decoded`] value: a [`TcpSegment`] borrowing the
//! frame's bytes, an IP [`Fragment`] to feed to a [`Defragmenter`], or a reason the frame carries
//! no TCP segment. Every read is bounds-checked; no input makes this crate panic. There is no IO and
//! no clock here: the defragmenter's timeout runs on the capture timestamps it is given.
//!
//! Checksums are not verified: captures taken on the sending host carry wrong checksums because
//! of offloading.

#![forbid(unsafe_code)]

mod defrag;
mod ip;
mod link;

use std::net::IpAddr;

pub use defrag::{DefragLimits, DefragStats, Defragmenter};

/// TCP flag bit: no more data from sender.
pub const FIN: u8 = 0x01;
/// TCP flag bit: synchronize sequence numbers.
pub const SYN: u8 = 0x02;
/// TCP flag bit: reset the connection.
pub const RST: u8 = 0x04;
/// TCP flag bit: push function.
pub const PSH: u8 = 0x08;
/// TCP flag bit: acknowledgment field significant.
pub const ACK: u8 = 0x10;
/// TCP flag bit: urgent pointer field significant.
pub const URG: u8 = 0x20;
/// TCP flag bit: ECN echo.
pub const ECE: u8 = 0x40;
/// TCP flag bit: congestion window reduced.
pub const CWR: u8 = 0x80;

/// The pcap `LINKTYPE_*` numbers this crate decodes (see tcpdump.org/linktypes.html).
pub mod linktype {
    /// BSD loopback: 4-byte address family in the writer's byte order.
    pub const NULL: u32 = 0;
    /// Ethernet II / 802.3, with 802.1Q/802.1ad tags.
    pub const ETHERNET: u32 = 1;
    /// `DLT_RAW` as written by some systems (raw IPv4/IPv6).
    pub const RAW_12: u32 = 12;
    /// `DLT_RAW` as written by OpenBSD (raw IPv4/IPv6).
    pub const RAW_14: u32 = 14;
    /// Raw IPv4/IPv6, version taken from the first nibble.
    pub const RAW: u32 = 101;
    /// OpenBSD loopback: 4-byte address family in network byte order.
    pub const LOOP: u32 = 108;
    /// Linux cooked capture v1 (`tcpdump -i any` before libpcap 1.10).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4 only.
    pub const IPV4: u32 = 228;
    /// Raw IPv6 only.
    pub const IPV6: u32 = 229;
    /// Linux cooked capture v2 (`tcpdump -i any` with libpcap 1.10+).
    pub const LINUX_SLL2: u32 = 276;
}

/// What one captured frame (or bare IP datagram) turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A TCP segment, its payload borrowed from the frame.
    Tcp(TcpSegment<'a>),
    /// An IPv4 fragment or IPv6 Fragment-header packet: feed it to a Defragmenter.
    Fragment(Fragment<'a>),
    /// A well-formed frame that carries no TCP: ARP, UDP, ICMP, ESP, LLC, ...
    NotTcp,
    /// Headers cut by the snapshot length before the TCP header ended.
    Truncated,
    /// Bad lengths, versions or header fields.
    Malformed,
    /// A pcap link type this crate does not decode.
    UnsupportedLink(u32),
}

/// One TCP segment's addressing, sequence numbers, flags and the captured part of its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    /// TCP flag bits: see [`FIN`], [`SYN`], [`RST`], [`PSH`], [`ACK`].
    pub flags: u8,
    /// The captured TCP payload. Link-layer trailer padding is never included.
    pub payload: &'a [u8],
    /// TCP payload bytes the IP total length claims but the capture (snaplen) cut off; 0 normally.
    pub missing: u32,
}

impl TcpSegment<'_> {
    pub const FIN: u8 = FIN;
    pub const SYN: u8 = SYN;
    pub const RST: u8 = RST;
    pub const PSH: u8 = PSH;
    pub const ACK: u8 = ACK;

    /// Whether all bits of `mask` are set in [`flags`](Self::flags).
    #[inline]
    pub fn has(&self, mask: u8) -> bool {
        self.flags & mask == mask
    }

    /// Payload length as the IP header reports it: captured plus missing bytes.
    #[inline]
    pub fn wire_len(&self) -> u64 {
        self.payload.len() as u64 + u64::from(self.missing)
    }
}

/// One fragment of an IPv4 datagram or an IPv6 packet with a Fragment header.
///
/// Only fragments that may carry TCP are reported as fragments: IPv4 fragments of other
/// protocols, and IPv6 fragments whose next header is neither TCP nor an extension header,
/// decode as [`Decoded::NotTcp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 identification (16 bits) or IPv6 fragment identification (32 bits).
    pub id: u32,
    /// IPv4 protocol, or the IPv6 Fragment header's next header.
    pub protocol: u8,
    /// Byte offset of [`data`](Self::data) within the original (unfragmented) payload.
    pub offset: u32,
    /// More fragments follow this one.
    pub more: bool,
    /// The header that goes in front of the reassembled payload: the IPv4 header (with options),
    /// or the IPv6 header with the extension headers before the Fragment header.
    pub header: &'a [u8],
    /// This fragment's share of the payload.
    pub data: &'a [u8],
    /// For IPv6: index in `header` of the next-header byte that names the Fragment header.
    pub(crate) next_header_at: usize,
}

impl Fragment<'_> {
    /// True for an IPv6 fragment, false for IPv4.
    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6()
    }
}

/// Decode one captured frame. `linktype` is the pcap LINKTYPE_* number.
#[inline]
pub fn decode(linktype: u32, frame: &[u8]) -> Decoded<'_> {
    link::decode(linktype, frame)
}

/// Decode a bare IPv4/IPv6 datagram (used for reassembled fragments and raw-IP link types).
#[inline]
pub fn decode_ip(packet: &[u8]) -> Decoded<'_> {
    ip::decode_ip(packet)
}

#[cfg(test)]
fn defrag_checksum_for_tests(h: &[u8]) -> u16 {
    defrag::ipv4_checksum(h)
}

#[cfg(test)]
mod tests;
