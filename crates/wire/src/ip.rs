//! IPv4 (with options) and IPv6 (with extension headers) decoding down to the TCP header.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::ControlFlow;

use crate::{Decoded, Fragment, TcpSegment};

pub(crate) const PROTO_TCP: u8 = 6;

const NH_HOP_BY_HOP: u8 = 0;
const NH_ROUTING: u8 = 43;
const NH_FRAGMENT: u8 = 44;
const NH_AH: u8 = 51;
const NH_DEST_OPTS: u8 = 60;
const NH_MOBILITY: u8 = 135;
const NH_HIP: u8 = 139;
const NH_SHIM6: u8 = 140;

/// Largest IP datagram the 16-bit length fields allow (fragment data may not reach past it).
pub(crate) const MAX_DATAGRAM: usize = 65535;

/// Decode a bare IP datagram, version taken from the first nibble.
#[inline]
pub(crate) fn decode_ip(p: &[u8]) -> Decoded<'_> {
    match p.first() {
        None => Decoded::Truncated,
        Some(b) => match b >> 4 {
            4 => ipv4(p),
            6 => ipv6(p),
            _ => Decoded::Malformed,
        },
    }
}

#[inline]
pub(crate) fn ipv4(p: &[u8]) -> Decoded<'_> {
    let Some(h) = p.first_chunk::<20>() else {
        return match p.first() {
            Some(b) if b >> 4 != 4 => Decoded::Malformed,
            _ => Decoded::Truncated,
        };
    };
    if h[0] >> 4 != 4 {
        return Decoded::Malformed;
    }
    let ihl = usize::from(h[0] & 0x0f) * 4;
    if ihl < 20 {
        return Decoded::Malformed;
    }
    let mut total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    if total == 0 {
        // Captured on a host doing TCP segmentation offload: the length is filled in later.
        total = p.len().max(ihl);
    }
    if total < ihl {
        return Decoded::Malformed;
    }
    let end = total.min(p.len());
    let Some(body) = p.get(ihl..end) else {
        return Decoded::Truncated;
    };
    let missing = total - end;
    let src = IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19]));
    let proto = h[9];
    let frag = u16::from_be_bytes([h[6], h[7]]);
    if frag & 0x3fff != 0 {
        // More-fragments set or a nonzero offset.
        if proto != PROTO_TCP {
            return Decoded::NotTcp;
        }
        if missing > 0 {
            return Decoded::Truncated;
        }
        let offset = usize::from(frag & 0x1fff) * 8;
        let more = frag & 0x2000 != 0;
        if (more && !body.len().is_multiple_of(8)) || ihl + offset + body.len() > MAX_DATAGRAM {
            return Decoded::Malformed;
        }
        let Some(header) = p.get(..ihl) else {
            return Decoded::Truncated;
        };
        return Decoded::Fragment(Fragment {
            src,
            dst,
            id: u32::from(u16::from_be_bytes([h[4], h[5]])),
            protocol: proto,
            offset: offset as u32,
            more,
            header,
            data: body,
            next_header_at: 0,
        });
    }
    if proto != PROTO_TCP {
        return Decoded::NotTcp;
    }
    tcp(src, dst, body, missing)
}

#[inline]
pub(crate) fn ipv6(p: &[u8]) -> Decoded<'_> {
    let Some(h) = p.first_chunk::<40>() else {
        return match p.first() {
            Some(b) if b >> 4 != 6 => Decoded::Malformed,
            _ => Decoded::Truncated,
        };
    };
    if h[0] >> 4 != 6 {
        return Decoded::Malformed;
    }
    let plen = usize::from(u16::from_be_bytes([h[4], h[5]]));
    // Payload length 0: a jumbogram or a TSO capture; take what was captured.
    let total = if plen == 0 { p.len() } else { 40 + plen };
    let end = total.min(p.len());
    let missing = total - end;
    let Some(buf) = p.get(..end) else {
        return Decoded::Truncated;
    };
    let mut s = [0u8; 16];
    s.copy_from_slice(&h[8..24]);
    let mut d = [0u8; 16];
    d.copy_from_slice(&h[24..40]);
    let src = IpAddr::V6(Ipv6Addr::from(s));
    let dst = IpAddr::V6(Ipv6Addr::from(d));

    let v6 = V6 {
        buf,
        src,
        dst,
        total,
        end,
        missing,
    };
    let mut nh = h[6];
    let mut nh_at = 6usize;
    let mut off = 40usize;
    loop {
        let step = match nh {
            PROTO_TCP => {
                let Some(body) = buf.get(off..) else {
                    return Decoded::Truncated;
                };
                return tcp(src, dst, body, missing);
            }
            NH_HOP_BY_HOP | NH_ROUTING | NH_DEST_OPTS | NH_MOBILITY | NH_HIP | NH_SHIM6 | NH_AH => {
                v6.extension(nh, off)
            }
            NH_FRAGMENT => v6.fragment(off, nh_at),
            // ESP (50), No Next Header (59), UDP, ICMPv6, ...
            _ => return Decoded::NotTcp,
        };
        match step {
            ControlFlow::Continue((next, len)) => {
                nh_at = off;
                nh = next;
                off += len;
            }
            ControlFlow::Break(d) => return d,
        }
    }
}

/// An IPv6 packet whose header chain is being walked.
struct V6<'a> {
    /// The packet as captured, up to its end.
    buf: &'a [u8],
    src: IpAddr,
    dst: IpAddr,
    /// Where the packet ends by its payload length, and where the capture of it ends.
    total: usize,
    end: usize,
    /// Bytes the capture cut.
    missing: usize,
}

impl<'a> V6<'a> {
    /// An extension header at `off`: its next header and length, or what the packet is.
    #[inline]
    fn extension(&self, nh: u8, off: usize) -> ControlFlow<Decoded<'a>, (u8, usize)> {
        if off + 2 > self.total {
            return ControlFlow::Break(Decoded::Malformed);
        }
        let (Some(&next), Some(&l)) = (self.buf.get(off), self.buf.get(off + 1)) else {
            return ControlFlow::Break(Decoded::Truncated);
        };
        let len = if nh == NH_AH {
            (usize::from(l) + 2) * 4
        } else {
            (usize::from(l) + 1) * 8
        };
        if off + len > self.total {
            return ControlFlow::Break(Decoded::Malformed);
        }
        if off + len > self.end {
            return ControlFlow::Break(Decoded::Truncated);
        }
        ControlFlow::Continue((next, len))
    }

    /// A Fragment header at `off` (`nh_at`: where the next-header field naming it is). An
    /// atomic fragment goes on to its next header; a real one is a [`Decoded::Fragment`].
    #[inline]
    fn fragment(&self, off: usize, nh_at: usize) -> ControlFlow<Decoded<'a>, (u8, usize)> {
        if off + 8 > self.total {
            return ControlFlow::Break(Decoded::Malformed);
        }
        let Some(fh) = self.buf.get(off..).and_then(|b| b.first_chunk::<8>()) else {
            return ControlFlow::Break(Decoded::Truncated);
        };
        let next = fh[0];
        let fo = u16::from_be_bytes([fh[2], fh[3]]);
        let offset = usize::from(fo >> 3) * 8;
        let more = fo & 1 != 0;
        if offset == 0 && !more {
            // An atomic fragment (RFC 6946): a whole packet; go on past the header.
            return ControlFlow::Continue((next, 8));
        }
        if !may_carry_tcp(next) {
            return ControlFlow::Break(Decoded::NotTcp);
        }
        if self.missing > 0 {
            return ControlFlow::Break(Decoded::Truncated);
        }
        let (Some(header), Some(data)) = (self.buf.get(..off), self.buf.get(off + 8..)) else {
            return ControlFlow::Break(Decoded::Truncated);
        };
        let unfrag_ext = off - 40;
        if (more && !data.len().is_multiple_of(8))
            || unfrag_ext + offset + data.len() > MAX_DATAGRAM
        {
            return ControlFlow::Break(Decoded::Malformed);
        }
        ControlFlow::Break(Decoded::Fragment(Fragment {
            src: self.src,
            dst: self.dst,
            id: u32::from_be_bytes([fh[4], fh[5], fh[6], fh[7]]),
            protocol: next,
            offset: offset as u32,
            more,
            header,
            data,
            next_header_at: nh_at,
        }))
    }
}

/// Whether an IPv6 fragment whose fragmentable part starts with next header `nh` may hold TCP.
fn may_carry_tcp(nh: u8) -> bool {
    matches!(
        nh,
        PROTO_TCP
            | NH_HOP_BY_HOP
            | NH_ROUTING
            | NH_DEST_OPTS
            | NH_MOBILITY
            | NH_HIP
            | NH_SHIM6
            | NH_AH
            | NH_FRAGMENT
    )
}

/// The TCP header at the start of `body` (the captured IP payload; `missing` bytes were cut off).
#[inline]
fn tcp<'a>(src: IpAddr, dst: IpAddr, body: &'a [u8], missing: usize) -> Decoded<'a> {
    let declared = body.len() + missing;
    let Some(t) = body.first_chunk::<20>() else {
        return if declared < 20 {
            Decoded::Malformed
        } else {
            Decoded::Truncated
        };
    };
    let doff = usize::from(t[12] >> 4) * 4;
    if doff < 20 || doff > declared {
        return Decoded::Malformed;
    }
    let Some(payload) = body.get(doff..) else {
        return Decoded::Truncated;
    };
    Decoded::Tcp(TcpSegment {
        src,
        dst,
        sport: u16::from_be_bytes([t[0], t[1]]),
        dport: u16::from_be_bytes([t[2], t[3]]),
        seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
        ack: u32::from_be_bytes([t[8], t[9], t[10], t[11]]),
        flags: t[13],
        payload,
        missing: u32::try_from(missing).unwrap_or(u32::MAX),
    })
}
