//! Decoding of the kernel's ring-buffer records (layouts of `src/bpf/dbtap.bpf.c`: `struct hdr`,
//! `struct open_rec`); pure, checked: arbitrary bytes give `None`, never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::Addr;

/// Size of `struct hdr`.
pub const HDR: usize = 48;
/// Size of `struct open_rec`.
pub const OPEN: usize = 320;

const K_DATA: u8 = 1;
const K_OPEN: u8 = 2;
const K_CLOSE: u8 = 3;
const K_EXIT: u8 = 4;
const F_INBOUND: u8 = 1;
const F_TLS: u8 = 2;
const F_ACCEPTED: u8 = 4;
const F_PEER_PID: u8 = 8;
const F_OUTGOING: u8 = 16;
const AF_UNIX: u16 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// One record as the kernel wrote it (`ts` is CLOCK_MONOTONIC ns).
#[derive(Debug, PartialEq, Eq)]
pub enum Raw<'a> {
    Open {
        sock: u64,
        ts: u64,
        pid: u32,
        local: Addr,
        peer: Addr,
        peer_pid: Option<u32>,
        accepted: bool,
        /// Connected by the traced process (it is the client).
        outgoing: bool,
    },
    Data {
        sock: u64,
        ts: u64,
        pid: u32,
        inbound: bool,
        offset: u64,
        len: u64,
        bytes: &'a [u8],
        tls: bool,
    },
    /// `ends`: the stream offsets at close, [outbound, inbound] (bytes the kernel counted).
    Close {
        sock: u64,
        ts: u64,
        pid: u32,
        ends: [u64; 2],
    },
    /// The last thread of a traced process exited.
    Exit { ts: u64, pid: u32 },
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A Unix socket path as the kernel keeps it: "@name" for an abstract name, "" when unbound.
pub fn unix_path(raw: &[u8]) -> String {
    match raw.split_first() {
        None => String::new(),
        Some((0, rest)) => format!("@{}", String::from_utf8_lossy(rest)),
        Some(_) => {
            let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
            String::from_utf8_lossy(raw.get(..end).unwrap_or(raw)).into_owned()
        }
    }
}

fn addr(
    b: &[u8],
    fam_at: usize,
    port_at: usize,
    ip_at: usize,
    path: Option<(usize, usize)>,
) -> Option<Addr> {
    let fam = u16_at(b, fam_at)?;
    let port = u16_at(b, port_at)?;
    let ip = b.get(ip_at..ip_at + 16)?;
    Some(match fam {
        AF_INET => {
            let v: [u8; 4] = ip.get(..4)?.try_into().ok()?;
            Addr::Ip(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(v)), port))
        }
        AF_INET6 => {
            let v: [u8; 16] = ip.try_into().ok()?;
            let v6 = Ipv6Addr::from(v);
            let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
            Addr::Ip(SocketAddr::new(ip, port))
        }
        AF_UNIX => {
            let (len_at, path_at) = path?;
            let len = usize::from(u16_at(b, len_at)?).min(108);
            Addr::Unix(unix_path(b.get(path_at..path_at + len)?))
        }
        _ => return None,
    })
}

/// Decodes one ring record; `None` for anything malformed or unknown.
pub fn decode(b: &[u8]) -> Option<Raw<'_>> {
    let kind = *b.first()?;
    let flags = *b.get(1)?;
    let pid = u32_at(b, 4)?;
    let ts = u64_at(b, 8)?;
    let sock = u64_at(b, 16)?;
    match kind {
        K_DATA => {
            let n = usize::try_from(u32_at(b, 40)?).ok()?;
            let len = u64_at(b, 32)?;
            let bytes = b.get(HDR..HDR.checked_add(n)?)?;
            if len < n as u64 {
                return None;
            }
            Some(Raw::Data {
                sock,
                ts,
                pid,
                inbound: flags & F_INBOUND != 0,
                offset: u64_at(b, 24)?,
                len,
                bytes,
                tls: flags & F_TLS != 0,
            })
        }
        K_OPEN => {
            if b.len() < OPEN {
                return None;
            }
            Some(Raw::Open {
                sock,
                ts,
                pid,
                local: addr(b, 48, 50, 56, Some((92, 96)))?,
                peer: addr(b, 52, 54, 72, Some((94, 208)))?,
                peer_pid: (flags & F_PEER_PID != 0)
                    .then_some(u32_at(b, 88)?)
                    .filter(|&p| p != 0),
                accepted: flags & F_ACCEPTED != 0,
                outgoing: flags & F_OUTGOING != 0,
            })
        }
        K_CLOSE if b.len() >= HDR => Some(Raw::Close {
            sock,
            ts,
            pid,
            ends: [u64_at(b, 24)?, u64_at(b, 32)?],
        }),
        K_EXIT if b.len() >= HDR => Some(Raw::Exit { ts, pid }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[allow(clippy::too_many_arguments)]
    fn hdr(
        kind: u8,
        flags: u8,
        pid: u32,
        ts: u64,
        sock: u64,
        off: u64,
        len: u64,
        n: u32,
    ) -> Vec<u8> {
        let mut v = vec![kind, flags, 0, 0];
        v.extend_from_slice(&pid.to_le_bytes());
        for x in [ts, sock, off, len] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&n.to_le_bytes());
        v.extend_from_slice(&[0; 4]);
        v
    }

    #[test]
    fn data_record() {
        let mut b = hdr(K_DATA, F_INBOUND | F_TLS, 7, 100, 42, 10, 5, 3);
        b.extend_from_slice(b"abc");
        let r = decode(&b).unwrap();
        assert_eq!(
            r,
            Raw::Data {
                sock: 42,
                ts: 100,
                pid: 7,
                inbound: true,
                offset: 10,
                len: 5,
                bytes: b"abc",
                tls: true
            }
        );
        // nbytes beyond the record, or len < nbytes: refused.
        let mut short = hdr(K_DATA, 0, 7, 100, 42, 10, 5, 4);
        short.extend_from_slice(b"abc");
        assert_eq!(decode(&short), None);
        let mut bad = hdr(K_DATA, 0, 7, 100, 42, 10, 2, 3);
        bad.extend_from_slice(b"abc");
        assert_eq!(decode(&bad), None);
    }

    fn open_rec(
        lfam: u16,
        lport: u16,
        rfam: u16,
        rport: u16,
        lpath: &[u8],
        rpath: &[u8],
    ) -> Vec<u8> {
        let mut b = hdr(K_OPEN, F_ACCEPTED | F_PEER_PID, 9, 5, 77, 0, 0, 0);
        b.resize(OPEN, 0);
        b[48..50].copy_from_slice(&lfam.to_le_bytes());
        b[50..52].copy_from_slice(&lport.to_le_bytes());
        b[52..54].copy_from_slice(&rfam.to_le_bytes());
        b[54..56].copy_from_slice(&rport.to_le_bytes());
        b[56..60].copy_from_slice(&[127, 0, 0, 1]);
        b[72..76].copy_from_slice(&[10, 0, 0, 2]);
        b[88..92].copy_from_slice(&1234u32.to_le_bytes());
        b[92..94].copy_from_slice(&(lpath.len() as u16).to_le_bytes());
        b[94..96].copy_from_slice(&(rpath.len() as u16).to_le_bytes());
        b[96..96 + lpath.len()].copy_from_slice(lpath);
        b[208..208 + rpath.len()].copy_from_slice(rpath);
        b
    }

    #[test]
    fn open_records() {
        let b = open_rec(AF_UNIX, 0, AF_UNIX, 0, b"/run/redis.sock\0", b"");
        let Some(Raw::Open {
            local,
            peer,
            peer_pid,
            accepted,
            sock,
            pid,
            ..
        }) = decode(&b)
        else {
            panic!("not an open")
        };
        assert_eq!(
            (local, peer),
            (
                Addr::Unix("/run/redis.sock".into()),
                Addr::Unix(String::new())
            )
        );
        assert_eq!((peer_pid, accepted, sock, pid), (Some(1234), true, 77, 9));
        assert!(matches!(
            decode(&b),
            Some(Raw::Open {
                outgoing: false,
                ..
            })
        ));
        let mut b = b;
        b[1] |= F_OUTGOING;
        assert!(matches!(
            decode(&b),
            Some(Raw::Open {
                outgoing: true,
                accepted: true,
                ..
            })
        ));
        let b = open_rec(AF_UNIX, 0, AF_UNIX, 0, b"\0abstract", b"");
        assert!(
            matches!(decode(&b), Some(Raw::Open { local: Addr::Unix(p), .. }) if p == "@abstract")
        );
        let b = open_rec(AF_INET, 6379, AF_INET, 40000, b"", b"");
        let Some(Raw::Open { local, peer, .. }) = decode(&b) else {
            panic!("not an open")
        };
        assert_eq!(local, Addr::Ip("127.0.0.1:6379".parse().unwrap()));
        assert_eq!(peer, Addr::Ip("10.0.0.2:40000".parse().unwrap()));
        assert_eq!(decode(&b[..OPEN - 1]), None);
    }

    #[test]
    fn close_and_exit() {
        assert_eq!(
            decode(&hdr(K_CLOSE, 0, 3, 8, 99, 10, 20, 0)),
            Some(Raw::Close {
                sock: 99,
                ts: 8,
                pid: 3,
                ends: [10, 20]
            })
        );
        assert_eq!(
            decode(&hdr(K_EXIT, 0, 3, 8, 0, 0, 0, 0)),
            Some(Raw::Exit { ts: 8, pid: 3 })
        );
        assert_eq!(decode(&hdr(9, 0, 3, 8, 0, 0, 0, 0)), None);
        assert_eq!(decode(&[]), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = decode(&b);
        }

        #[test]
        fn arbitrary_headers_never_panic(kind in 0u8..6, flags: u8, n: u32, len: u64, tail in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut b = hdr(kind, flags, 1, 2, 3, 4, len, n);
            b.extend_from_slice(&tail);
            if let Some(Raw::Data { bytes, len, .. }) = decode(&b) {
                prop_assert!(bytes.len() as u64 <= len);
            }
        }
    }
}
