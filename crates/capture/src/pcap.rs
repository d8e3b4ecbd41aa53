//! Classic pcap framing: the 24-byte file header and the 16-byte record header.

/// Records larger than this are called corrupt unless the file header's snaplen allows more
/// (libpcap's `MAXIMUM_SNAPLEN`).
pub(crate) const DEFAULT_MAX_CAPLEN: u32 = 262_144;
/// Hard ceiling on one record, whatever the header says.
pub(crate) const HARD_MAX_CAPLEN: u32 = 16 << 20;

/// What the file header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PcapHeader {
    pub big_endian: bool,
    pub nanos: bool,
    /// Bytes of record header: 16, or 24 for Alexey Kuznetsov's "modified" pcap.
    pub record_header: usize,
    pub snaplen: u32,
    pub linktype: u32,
    pub max_caplen: u32,
}

pub(crate) const MAGIC_MICRO: u32 = 0xa1b2_c3d4;
pub(crate) const MAGIC_NANO: u32 = 0xa1b2_3c4d;
pub(crate) const MAGIC_MODIFIED: u32 = 0xa1b2_cd34;

/// Whether these first four bytes are a pcap magic number in either byte order.
pub(crate) fn is_magic(m: [u8; 4]) -> bool {
    let le = u32::from_le_bytes(m);
    let be = u32::from_be_bytes(m);
    [MAGIC_MICRO, MAGIC_NANO, MAGIC_MODIFIED]
        .iter()
        .any(|&x| x == le || x == be)
}

pub(crate) fn u32_at(b: &[u8], at: usize, big: bool) -> Option<u32> {
    let s: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if big {
        u32::from_be_bytes(s)
    } else {
        u32::from_le_bytes(s)
    })
}

pub(crate) fn u16_at(b: &[u8], at: usize, big: bool) -> Option<u16> {
    let s: [u8; 2] = b.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(if big {
        u16::from_be_bytes(s)
    } else {
        u16::from_le_bytes(s)
    })
}

/// Parse the 24-byte file header. `Err` holds what is wrong with it.
pub(crate) fn parse_header(h: &[u8]) -> Result<PcapHeader, &'static str> {
    let m = u32_at(h, 0, false).ok_or("file header cut short")?;
    let (big_endian, magic) = match (m, m.swap_bytes()) {
        (x, _) if [MAGIC_MICRO, MAGIC_NANO, MAGIC_MODIFIED].contains(&x) => (false, x),
        (_, x) if [MAGIC_MICRO, MAGIC_NANO, MAGIC_MODIFIED].contains(&x) => (true, x),
        _ => return Err("bad pcap magic"),
    };
    let (Some(major), Some(snaplen), Some(network)) = (
        u16_at(h, 4, big_endian),
        u32_at(h, 16, big_endian),
        u32_at(h, 20, big_endian),
    ) else {
        return Err("file header cut short");
    };
    if major != 2 {
        return Err("unsupported pcap version");
    }
    Ok(PcapHeader {
        big_endian,
        nanos: magic == MAGIC_NANO,
        record_header: if magic == MAGIC_MODIFIED { 24 } else { 16 },
        snaplen,
        // Low 26 bits: the link type; the high bits carry FCS information (libpcap's LT_LINKTYPE).
        linktype: network & 0x03ff_ffff,
        max_caplen: snaplen.clamp(DEFAULT_MAX_CAPLEN, HARD_MAX_CAPLEN),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_variants() {
        let mut h = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        h.extend_from_slice(&65535u32.to_le_bytes());
        h.extend_from_slice(&(1u32 | 0x1000_0000).to_le_bytes());
        let p = parse_header(&h).unwrap();
        assert!(!p.big_endian && !p.nanos);
        assert_eq!(
            (p.linktype, p.snaplen, p.max_caplen, p.record_header),
            (1, 65535, 262_144, 16)
        );
        assert_eq!(parse_header(&h[..20]), Err("file header cut short"));
        let mut bad = h.clone();
        bad[4] = 3;
        assert_eq!(parse_header(&bad), Err("unsupported pcap version"));
        let mut be = vec![0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        be.extend_from_slice(&u32::MAX.to_be_bytes());
        be.extend_from_slice(&276u32.to_be_bytes());
        let p = parse_header(&be).unwrap();
        assert!(p.big_endian && p.nanos);
        assert_eq!((p.linktype, p.max_caplen), (276, HARD_MAX_CAPLEN));
    }
}
