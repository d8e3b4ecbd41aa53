//! pcapng framing: section and interface blocks, packet blocks, and timestamp resolution.

use crate::pcap::{u16_at, u32_at};

pub(crate) const SHB: u32 = 0x0a0d_0d0a;
pub(crate) const IDB: u32 = 0x0000_0001;
pub(crate) const PB_OBSOLETE: u32 = 0x0000_0002;
pub(crate) const SPB: u32 = 0x0000_0003;
pub(crate) const EPB: u32 = 0x0000_0006;
pub(crate) const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// Largest block accepted (libpcap's limit is 16 MiB too); larger is corrupt.
pub(crate) const MAX_BLOCK: u32 = 16 << 20;

const OPT_END: u16 = 0;
const OPT_IF_TSRESOL: u16 = 9;
const OPT_IF_TSOFFSET: u16 = 14;

/// One interface of the current section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Iface {
    pub linktype: u32,
    pub snaplen: u32,
    pub ts: TsScale,
    /// `if_tsoffset`: seconds added to every timestamp.
    pub offset_s: i64,
}

/// How to turn timestamp units into nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TsScale {
    /// Units of 10^-e seconds, e <= 9: multiply by 10^(9-e).
    Mul(u64),
    /// Units of 10^-e seconds, e > 9: divide by 10^(e-9) (0 divides to nothing: always 0).
    Div(u128),
    /// Units of 2^-k seconds.
    Pow2(u32),
}

impl TsScale {
    /// From the raw `if_tsresol` byte (default 6: microseconds).
    pub(crate) fn from_tsresol(r: u8) -> TsScale {
        if r & 0x80 != 0 {
            TsScale::Pow2(u32::from(r & 0x7f))
        } else if r <= 9 {
            TsScale::Mul(10u64.pow(9 - u32::from(r)))
        } else {
            TsScale::Div(10u128.checked_pow(u32::from(r) - 9).unwrap_or(0))
        }
    }

    pub(crate) fn to_ns(self, units: u64, offset_s: i64) -> u64 {
        let ns: u64 = match self {
            TsScale::Mul(m) => units.saturating_mul(m),
            TsScale::Div(0) => 0,
            TsScale::Div(d) => (u128::from(units) / d) as u64,
            TsScale::Pow2(k) => {
                let v = (u128::from(units) * 1_000_000_000) >> k.min(127);
                u64::try_from(v).unwrap_or(u64::MAX)
            }
        };
        if offset_s == 0 {
            ns
        } else {
            let v = i128::from(ns) + i128::from(offset_s) * 1_000_000_000;
            v.clamp(0, i128::from(u64::MAX)) as u64
        }
    }
}

/// Parse an Interface Description Block body (after type and length, before the trailer).
pub(crate) fn parse_idb(body: &[u8], big: bool) -> Option<Iface> {
    let linktype = u32::from(u16_at(body, 0, big)?);
    let snaplen = u32_at(body, 4, big)?;
    let mut iface = Iface {
        linktype,
        snaplen,
        ts: TsScale::from_tsresol(6),
        offset_s: 0,
    };
    for (code, val) in options(body.get(8..).unwrap_or_default(), big) {
        match (code, val) {
            (OPT_IF_TSRESOL, [r, ..]) => iface.ts = TsScale::from_tsresol(*r),
            (OPT_IF_TSOFFSET, v) if v.len() >= 8 => {
                if let Some(b) = v.first_chunk::<8>() {
                    iface.offset_s = if big {
                        i64::from_be_bytes(*b)
                    } else {
                        i64::from_le_bytes(*b)
                    };
                }
            }
            _ => {}
        }
    }
    Some(iface)
}

/// The (code, value) pairs of an options area; stops at opt_endofopt or at the first option
/// that does not fit (options are informative: a bad one does not make the block corrupt).
pub(crate) fn options(mut b: &[u8], big: bool) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let code = u16_at(b, 0, big)?;
        let len = usize::from(u16_at(b, 2, big)?);
        if code == OPT_END {
            return None;
        }
        let val = b.get(4..4 + len)?;
        let padded = (4 + len + 3) & !3;
        b = b.get(padded..).unwrap_or_default();
        Some((code, val))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_resolutions() {
        assert_eq!(TsScale::from_tsresol(6).to_ns(1_500_000, 0), 1_500_000_000);
        assert_eq!(TsScale::from_tsresol(9).to_ns(7, 0), 7);
        assert_eq!(TsScale::from_tsresol(3).to_ns(2, 0), 2_000_000);
        assert_eq!(TsScale::from_tsresol(0).to_ns(3, 0), 3_000_000_000);
        assert_eq!(TsScale::from_tsresol(12).to_ns(5_000, 0), 5);
        assert_eq!(TsScale::from_tsresol(127).to_ns(u64::MAX, 0), 0);
        // 2^-10 s units: 1024 units = 1 s; 2^-0x7f never overflows.
        assert_eq!(
            TsScale::from_tsresol(0x80 | 10).to_ns(1024, 0),
            1_000_000_000
        );
        assert_eq!(
            TsScale::from_tsresol(0x80 | 20).to_ns(1 << 19, 0),
            500_000_000
        );
        assert_eq!(TsScale::from_tsresol(0xff).to_ns(u64::MAX, 0), 0);
        assert_eq!(TsScale::from_tsresol(0x80).to_ns(u64::MAX, 0), u64::MAX);
        // if_tsoffset in seconds, clamped at 0.
        assert_eq!(TsScale::from_tsresol(6).to_ns(0, 10), 10_000_000_000);
        assert_eq!(TsScale::from_tsresol(6).to_ns(1, -10), 0);
    }

    #[test]
    fn idb_options() {
        // linktype 276, snaplen 65535, if_name "lo", if_tsresol 9, if_tsoffset 100, end.
        let mut b = vec![0x14, 0x01, 0, 0];
        b.extend_from_slice(&65535u32.to_le_bytes());
        b.extend_from_slice(&[2, 0, 2, 0, b'l', b'o', 0, 0]);
        b.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0]);
        b.extend_from_slice(&[14, 0, 8, 0]);
        b.extend_from_slice(&100i64.to_le_bytes());
        b.extend_from_slice(&[0, 0, 0, 0]);
        let i = parse_idb(&b, false).unwrap();
        assert_eq!(
            (i.linktype, i.snaplen, i.ts, i.offset_s),
            (276, 65535, TsScale::Mul(1), 100)
        );
        // An option running past the block is ignored, not fatal.
        let mut c = b[..8].to_vec();
        c.extend_from_slice(&[9, 0, 200, 0, 9]);
        assert_eq!(parse_idb(&c, false).unwrap().ts, TsScale::Mul(1000));
        assert_eq!(parse_idb(&b[..6], false), None);
    }
}
