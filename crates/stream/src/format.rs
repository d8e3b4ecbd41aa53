//! The binary form of a [`Record`] in `--write` files: one record per pcap packet of link
//! type [`LINKTYPE`]. Layout (all integers little-endian) in `docs/stream-format.md`.
//! Decoding untrusted bytes never panics: every read is checked.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;

use crate::{Direction, Endpoint, Process, Record, StreamOpen};

/// LINKTYPE_USER0: one encoded [`Record`] per pcap packet in `--write` files.
pub const LINKTYPE: u32 = 147;

/// First byte of every encoded record.
pub const MAGIC: u8 = 0xDB;
/// The format version this code writes and reads.
pub const VERSION: u8 = 1;

const KIND_OPEN: u8 = 1;
const KIND_DATA: u8 = 2;
const KIND_CLOSE: u8 = 3;

const TAG_V4: u8 = 4;
const TAG_V6: u8 = 6;
const TAG_UNIX: u8 = b'u';

const OPEN_SAW_OPEN: u8 = 1;
const OPEN_PEER: u8 = 2;
const DATA_TLS: u8 = 1;

/// Why bytes are not a record: what was wrong and at which byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub what: &'static str,
    pub at: usize,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream record: {} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for DecodeError {}

/// Appends the encoded `r` to `out`.
pub fn encode(r: &Record<'_>, out: &mut Vec<u8>) {
    out.push(MAGIC);
    out.push(VERSION);
    match r {
        Record::Open(o) => {
            out.push(KIND_OPEN);
            out.extend_from_slice(&o.conn.to_le_bytes());
            out.extend_from_slice(&o.ts_ns.to_le_bytes());
            let mut flags = 0;
            if o.saw_open {
                flags |= OPEN_SAW_OPEN;
            }
            if o.peer.is_some() {
                flags |= OPEN_PEER;
            }
            out.push(flags);
            put_endpoint(&o.client, out);
            put_endpoint(&o.server, out);
            if let Some(p) = &o.peer {
                out.extend_from_slice(&p.pid.to_le_bytes());
                put_str(&p.comm, out);
            }
        }
        Record::Data {
            conn,
            dir,
            ts_ns,
            offset,
            len,
            bytes,
            tls,
        } => {
            out.push(KIND_DATA);
            out.extend_from_slice(&conn.to_le_bytes());
            out.extend_from_slice(&ts_ns.to_le_bytes());
            out.push(match dir {
                Direction::ToServer => 0,
                Direction::ToClient => 1,
            });
            out.push(if *tls { DATA_TLS } else { 0 });
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(*len).max(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        Record::Close { conn, ts_ns } => {
            out.push(KIND_CLOSE);
            out.extend_from_slice(&conn.to_le_bytes());
            out.extend_from_slice(&ts_ns.to_le_bytes());
        }
    }
}

fn put_endpoint(e: &Endpoint, out: &mut Vec<u8>) {
    match e {
        Endpoint::Ip(SocketAddr::V4(a)) => {
            out.push(TAG_V4);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_le_bytes());
        }
        Endpoint::Ip(SocketAddr::V6(a)) => {
            out.push(TAG_V6);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_le_bytes());
            out.extend_from_slice(&a.flowinfo().to_le_bytes());
            out.extend_from_slice(&a.scope_id().to_le_bytes());
        }
        Endpoint::Unix(p) => {
            out.push(TAG_UNIX);
            put_str(p, out);
        }
    }
}

/// A string as a u16 length and its UTF-8 bytes, cut at a char boundary to fit.
fn put_str(s: &str, out: &mut Vec<u8>) {
    let mut n = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..n]);
}

/// A checked reader over the encoded bytes.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: &'static str) -> DecodeError {
        DecodeError { what, at: self.at }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let Some(end) = end else {
            return Err(self.err(what));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn str(&mut self, what: &'static str) -> Result<Arc<str>, DecodeError> {
        let n = self.u16(what)?;
        let at = self.at;
        let s = self.take(usize::from(n), what)?;
        std::str::from_utf8(s)
            .map(Arc::from)
            .map_err(|_| DecodeError {
                what: "invalid UTF-8",
                at,
            })
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = self.b.get(self.at..).unwrap_or_default();
        self.at = self.b.len();
        s
    }
    fn end(&self) -> Result<(), DecodeError> {
        if self.at == self.b.len() {
            Ok(())
        } else {
            Err(self.err("trailing bytes"))
        }
    }
    fn endpoint(&mut self) -> Result<Endpoint, DecodeError> {
        match self.u8("endpoint tag")? {
            TAG_V4 => {
                let ip = Ipv4Addr::from(self.array::<4>("IPv4 address")?);
                let port = self.u16("port")?;
                Ok(Endpoint::Ip(SocketAddrV4::new(ip, port).into()))
            }
            TAG_V6 => {
                let ip = Ipv6Addr::from(self.array::<16>("IPv6 address")?);
                let port = self.u16("port")?;
                let flow = self.u32("IPv6 flow info")?;
                let scope = self.u32("IPv6 scope id")?;
                Ok(Endpoint::Ip(
                    SocketAddrV6::new(ip, port, flow, scope).into(),
                ))
            }
            TAG_UNIX => Ok(Endpoint::Unix(self.str("Unix socket path")?)),
            _ => Err(DecodeError {
                what: "unknown endpoint tag",
                at: self.at - 1,
            }),
        }
    }
}

/// Reads one encoded record (the whole of `b`).
pub fn decode(b: &[u8]) -> Result<Record<'_>, DecodeError> {
    let mut c = Cursor { b, at: 0 };
    if c.u8("magic")? != MAGIC {
        return Err(DecodeError {
            what: "bad magic",
            at: 0,
        });
    }
    if c.u8("version")? != VERSION {
        return Err(DecodeError {
            what: "unsupported version",
            at: 1,
        });
    }
    let r = match c.u8("record kind")? {
        KIND_OPEN => Record::Open(open(&mut c)?),
        KIND_DATA => data(&mut c)?,
        KIND_CLOSE => Record::Close {
            conn: c.u64("connection id")?,
            ts_ns: c.u64("timestamp")?,
        },
        _ => {
            return Err(DecodeError {
                what: "unknown record kind",
                at: 2,
            });
        }
    };
    c.end()?;
    Ok(r)
}

fn open(c: &mut Cursor<'_>) -> Result<StreamOpen, DecodeError> {
    let conn = c.u64("connection id")?;
    let ts_ns = c.u64("timestamp")?;
    let flags = c.u8("open flags")?;
    if flags & !(OPEN_SAW_OPEN | OPEN_PEER) != 0 {
        return Err(DecodeError {
            what: "unknown open flags",
            at: c.at - 1,
        });
    }
    let client = c.endpoint()?;
    let server = c.endpoint()?;
    let peer = if flags & OPEN_PEER != 0 {
        let pid = c.u32("peer pid")?;
        let comm = c.str("peer command")?;
        Some(Arc::new(Process { pid, comm }))
    } else {
        None
    };
    Ok(StreamOpen {
        conn,
        ts_ns,
        client,
        server,
        peer,
        saw_open: flags & OPEN_SAW_OPEN != 0,
    })
}

fn data<'a>(c: &mut Cursor<'a>) -> Result<Record<'a>, DecodeError> {
    let conn = c.u64("connection id")?;
    let ts_ns = c.u64("timestamp")?;
    let dir = match c.u8("direction")? {
        0 => Direction::ToServer,
        1 => Direction::ToClient,
        _ => {
            return Err(DecodeError {
                what: "unknown direction",
                at: c.at - 1,
            });
        }
    };
    let flags = c.u8("data flags")?;
    if flags & !DATA_TLS != 0 {
        return Err(DecodeError {
            what: "unknown data flags",
            at: c.at - 1,
        });
    }
    let offset = c.u64("offset")?;
    let len_at = c.at;
    let len = c.u64("length")?;
    let bytes = c.rest();
    if len < bytes.len() as u64 {
        return Err(DecodeError {
            what: "length shorter than the bytes",
            at: len_at,
        });
    }
    Ok(Record::Data {
        conn,
        dir,
        ts_ns,
        offset,
        len,
        bytes,
        tls: flags & DATA_TLS != 0,
    })
}
