//! Captures built byte by byte for the binary's tests: classic pcap files of raw IPv4 packets,
//! TCP segments, and the two directions of a connection; and reading fields of the JSON digest.

#![allow(dead_code)] // each test file uses a part

pub const LINKTYPE_RAW: u32 = 101;
pub const CLIENT: [u8; 4] = [10, 0, 0, 2];
pub const SERVER: [u8; 4] = [10, 0, 0, 1];
pub const ACK: u8 = 0x10;
pub const PSH_ACK: u8 = 0x18;
pub const FIN_ACK: u8 = 0x11;
pub const IP_TCP: u8 = 6;
pub const IP_UDP: u8 = 17;

/// A classic pcap file header (microseconds, little-endian) for raw IP packets.
pub fn pcap_header() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
    out
}

/// A pcap record header for a packet of `len` bytes at `ts` us.
pub fn record_header(ts: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((ts / 1_000_000) as u32).to_le_bytes());
    out.extend_from_slice(&((ts % 1_000_000) as u32).to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out
}

/// A classic pcap of raw IP packets: (ts in us, packet).
pub fn pcap(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = pcap_header();
    for (ts, p) in records {
        out.extend_from_slice(&record_header(*ts, p.len()));
        out.extend_from_slice(p);
    }
    out
}

/// An IPv4 header with its checksum, for `payload_len` bytes of protocol `proto`, with
/// datagram id `id`, fragment offset `frag8` (units of 8 bytes) and the more-fragments flag.
pub fn ipv4_header(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    (id, frag8, more): (u16, u16, bool),
    payload_len: usize,
) -> Vec<u8> {
    let total = (20 + payload_len) as u16;
    let flags = frag8 | if more { 0x2000 } else { 0 };
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&flags.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let mut sum = 0u32;
    for w in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h
}

/// An IPv4 packet (protocol TCP) with fragment offset `frag8` and the more-fragments flag.
pub fn ipv4(
    src: [u8; 4],
    dst: [u8; 4],
    id: u16,
    frag8: u16,
    more: bool,
    payload: &[u8],
) -> Vec<u8> {
    let mut p = ipv4_header(src, dst, IP_TCP, (id, frag8, more), payload.len());
    p.extend_from_slice(payload);
    p
}

/// A TCP segment (header without options, checksum not computed).
pub fn tcp(sport: u16, dport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

/// One direction of a connection between CLIENT:`cport` and SERVER:`sport`.
pub struct Side {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
}

impl Side {
    /// Both directions of a connection between CLIENT:`cport` and SERVER:`sport`.
    pub fn pair(cport: u16, sport: u16) -> (Side, Side) {
        let side = |src, dst, sport, dport, seq| Side {
            src,
            dst,
            sport,
            dport,
            seq,
        };
        (
            side(CLIENT, SERVER, cport, sport, 1000),
            side(SERVER, CLIENT, sport, cport, 5000),
        )
    }

    /// The next segment with `payload` (advancing the sequence number).
    pub fn send(&mut self, flags: u8, payload: &[u8]) -> Vec<u8> {
        let t = tcp(self.sport, self.dport, self.seq, 1, flags, payload);
        self.seq = self.seq.wrapping_add(payload.len() as u32);
        ipv4(self.src, self.dst, 1, 0, false, &t)
    }
}

/// The value of a field of the JSON digest's `capture` or `totals` object, as written.
pub fn field(json: &str, name: &str) -> String {
    let key = format!("\n    \"{name}\": ");
    let at = json
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in\n{json}"));
    let rest = &json[at + key.len()..];
    let end = rest.find([',', '\n']).unwrap_or(rest.len());
    rest[..end].to_string()
}

/// [`field`] as a number.
pub fn num(json: &str, name: &str) -> u64 {
    field(json, name)
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}
