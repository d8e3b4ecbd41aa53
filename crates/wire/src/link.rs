//! Link-layer decoders: Ethernet (with VLAN/QinQ, PPPoE, MPLS), Linux SLL/SLL2, BSD NULL/LOOP, raw IP.

use crate::ip;
use crate::{Decoded, linktype};

/// Most 802.1Q/802.1ad tags or MPLS labels accepted before the frame is called malformed.
const MAX_STACKED: usize = 8;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const ETH_VLAN: u16 = 0x8100;
const ETH_QINQ: u16 = 0x88a8;
const ETH_QINQ_OLD1: u16 = 0x9100;
const ETH_QINQ_OLD2: u16 = 0x9200;
const ETH_QINQ_OLD3: u16 = 0x9300;
const ETH_PPPOE_SESSION: u16 = 0x8864;
const ETH_MPLS_UC: u16 = 0x8847;
const ETH_MPLS_MC: u16 = 0x8848;

/// ARPHRD_NETLINK: SLL frames of netlink monitor devices carry no IP.
const ARPHRD_NETLINK: u16 = 824;

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> Option<u16> {
    match b.get(at..at.checked_add(2)?) {
        Some(&[x, y]) => Some(u16::from_be_bytes([x, y])),
        _ => None,
    }
}

#[inline]
pub(crate) fn decode(lt: u32, f: &[u8]) -> Decoded<'_> {
    match lt {
        linktype::ETHERNET => ethernet(f),
        linktype::LINUX_SLL2 => sll2(f),
        linktype::LINUX_SLL => sll(f),
        linktype::RAW | linktype::RAW_12 | linktype::RAW_14 => ip::decode_ip(f),
        linktype::NULL | linktype::LOOP => null_loop(f),
        linktype::IPV4 => match f.first() {
            None => Decoded::Truncated,
            Some(b) if b >> 4 == 4 => ip::ipv4(f),
            Some(_) => Decoded::Malformed,
        },
        linktype::IPV6 => match f.first() {
            None => Decoded::Truncated,
            Some(b) if b >> 4 == 6 => ip::ipv6(f),
            Some(_) => Decoded::Malformed,
        },
        other => Decoded::UnsupportedLink(other),
    }
}

#[inline]
fn ethernet(f: &[u8]) -> Decoded<'_> {
    match be16(f, 12) {
        Some(et) => ethertype(et, f, 14),
        None => Decoded::Truncated,
    }
}

/// Dispatch on an ethertype whose payload starts at `f[off..]`.
#[inline]
fn ethertype(mut et: u16, f: &[u8], mut off: usize) -> Decoded<'_> {
    let mut stacked = 0;
    loop {
        match et {
            ETH_IPV4 => {
                return match f.get(off..) {
                    Some(p) => ip::ipv4(p),
                    None => Decoded::Truncated,
                };
            }
            ETH_IPV6 => {
                return match f.get(off..) {
                    Some(p) => ip::ipv6(p),
                    None => Decoded::Truncated,
                };
            }
            ETH_VLAN | ETH_QINQ | ETH_QINQ_OLD1 | ETH_QINQ_OLD2 | ETH_QINQ_OLD3 => {
                stacked += 1;
                if stacked > MAX_STACKED {
                    return Decoded::Malformed;
                }
                // 2 bytes TCI, then the inner ethertype.
                let Some(next) = be16(f, off + 2) else {
                    return Decoded::Truncated;
                };
                et = next;
                off += 4;
            }
            ETH_PPPOE_SESSION => return pppoe(f, off),
            ETH_MPLS_UC | ETH_MPLS_MC => return mpls(f, off),
            _ => return Decoded::NotTcp,
        }
    }
}

/// PPPoE session stage: 6-byte PPPoE header, then the 2-byte PPP protocol.
fn pppoe(f: &[u8], off: usize) -> Decoded<'_> {
    let (Some(&vt), Some(proto)) = (f.get(off), be16(f, off + 6)) else {
        return Decoded::Truncated;
    };
    if vt != 0x11 {
        return Decoded::Malformed;
    }
    let Some(p) = f.get(off + 8..) else {
        return Decoded::Truncated;
    };
    match proto {
        0x0021 => ip::ipv4(p),
        0x0057 => ip::ipv6(p),
        _ => Decoded::NotTcp,
    }
}

/// MPLS label stack; after the bottom label the payload is taken as IP by its version nibble.
fn mpls(f: &[u8], mut off: usize) -> Decoded<'_> {
    for _ in 0..MAX_STACKED {
        let Some(&b2) = f.get(off + 2) else {
            return Decoded::Truncated;
        };
        let Some(_) = f.get(off + 3) else {
            return Decoded::Truncated;
        };
        off += 4;
        if b2 & 0x01 != 0 {
            let Some(p) = f.get(off..) else {
                return Decoded::Truncated;
            };
            return match p.first().map(|b| b >> 4) {
                None => Decoded::Truncated,
                Some(4) => ip::ipv4(p),
                Some(6) => ip::ipv6(p),
                Some(_) => Decoded::NotTcp,
            };
        }
    }
    Decoded::Malformed
}

/// Linux cooked capture v1: 16-byte header, protocol at offset 14.
fn sll(f: &[u8]) -> Decoded<'_> {
    let (Some(hatype), Some(proto)) = (be16(f, 2), be16(f, 14)) else {
        return Decoded::Truncated;
    };
    if hatype == ARPHRD_NETLINK {
        return Decoded::NotTcp;
    }
    ethertype(proto, f, 16)
}

/// Linux cooked capture v2: 20-byte header, protocol at offset 0.
fn sll2(f: &[u8]) -> Decoded<'_> {
    if f.len() < 20 {
        return Decoded::Truncated;
    }
    let (Some(proto), Some(hatype)) = (be16(f, 0), be16(f, 8)) else {
        return Decoded::Truncated;
    };
    if hatype == ARPHRD_NETLINK {
        return Decoded::NotTcp;
    }
    ethertype(proto, f, 20)
}

/// BSD NULL (family in the writer's byte order) and LOOP (network byte order; both accepted).
fn null_loop(f: &[u8]) -> Decoded<'_> {
    let Some(&[a, b, c, d]) = f.get(..4) else {
        return Decoded::Truncated;
    };
    let le = u32::from_le_bytes([a, b, c, d]);
    let be = u32::from_be_bytes([a, b, c, d]);
    let fam = if le < 256 { le } else { be };
    let p = f.get(4..).unwrap_or_default();
    match fam {
        // AF_INET everywhere.
        2 => ip::ipv4(p),
        // AF_INET6: Linux 10, NetBSD/OpenBSD/BSD/OS 24, FreeBSD/DragonFly 28, macOS 30.
        10 | 24 | 28 | 30 => ip::ipv6(p),
        _ => Decoded::NotTcp,
    }
}
