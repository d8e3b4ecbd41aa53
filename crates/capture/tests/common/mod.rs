//! Hand-built capture bytes for the tests: pcap (either byte order, micro/nano) and pcapng blocks.
#![allow(dead_code)]

use std::io::Write;

pub struct Pcap {
    pub big: bool,
    pub nanos: bool,
    pub linktype: u32,
    pub snaplen: u32,
}

fn u16b(v: u16, big: bool) -> [u8; 2] {
    if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

fn u32b(v: u32, big: bool) -> [u8; 4] {
    if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

impl Pcap {
    pub fn header(&self) -> Vec<u8> {
        let magic: u32 = if self.nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        let mut h = Vec::new();
        h.extend_from_slice(&u32b(magic, self.big));
        h.extend_from_slice(&u16b(2, self.big));
        h.extend_from_slice(&u16b(4, self.big));
        h.extend_from_slice(&[0; 8]);
        h.extend_from_slice(&u32b(self.snaplen, self.big));
        h.extend_from_slice(&u32b(self.linktype, self.big));
        h
    }

    pub fn record(&self, ts_s: u32, frac: u32, data: &[u8], orig_len: u32) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&u32b(ts_s, self.big));
        r.extend_from_slice(&u32b(frac, self.big));
        r.extend_from_slice(&u32b(data.len() as u32, self.big));
        r.extend_from_slice(&u32b(orig_len, self.big));
        r.extend_from_slice(data);
        r
    }
}

/// A pcapng block with `body` padded to 4 bytes.
pub fn block(big: bool, btype: u32, body: &[u8]) -> Vec<u8> {
    let padded = (body.len() + 3) & !3;
    let len = (12 + padded) as u32;
    let mut b = Vec::new();
    b.extend_from_slice(&u32b(btype, big));
    b.extend_from_slice(&u32b(len, big));
    b.extend_from_slice(body);
    b.resize(8 + padded, 0);
    b.extend_from_slice(&u32b(len, big));
    b
}

pub fn shb(big: bool) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&u32b(0x1a2b_3c4d, big));
    body.extend_from_slice(&u16b(1, big));
    body.extend_from_slice(&u16b(0, big));
    body.extend_from_slice(&[0xff; 8]); // section length unknown
    // shb_userappl option, then end of options.
    body.extend_from_slice(&u16b(4, big));
    body.extend_from_slice(&u16b(5, big));
    body.extend_from_slice(b"test\0\0\0\0");
    body.extend_from_slice(&[0; 4]);
    block(big, 0x0a0d_0d0a, &body)
}

pub fn idb(
    big: bool,
    linktype: u16,
    snaplen: u32,
    tsresol: Option<u8>,
    tsoffset: Option<i64>,
) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&u16b(linktype, big));
    body.extend_from_slice(&[0, 0]);
    body.extend_from_slice(&u32b(snaplen, big));
    body.extend_from_slice(&u16b(2, big)); // if_name
    body.extend_from_slice(&u16b(3, big));
    body.extend_from_slice(b"eth\0");
    if let Some(r) = tsresol {
        body.extend_from_slice(&u16b(9, big));
        body.extend_from_slice(&u16b(1, big));
        body.extend_from_slice(&[r, 0, 0, 0]);
    }
    if let Some(o) = tsoffset {
        body.extend_from_slice(&u16b(14, big));
        body.extend_from_slice(&u16b(8, big));
        body.extend_from_slice(&if big {
            o.to_be_bytes()
        } else {
            o.to_le_bytes()
        });
    }
    body.extend_from_slice(&[0; 4]);
    block(big, 1, &body)
}

pub fn epb(big: bool, iface: u32, units: u64, data: &[u8], orig_len: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&u32b(iface, big));
    body.extend_from_slice(&u32b((units >> 32) as u32, big));
    body.extend_from_slice(&u32b(units as u32, big));
    body.extend_from_slice(&u32b(data.len() as u32, big));
    body.extend_from_slice(&u32b(orig_len, big));
    body.extend_from_slice(data);
    // epb_flags option after the padded data.
    body.resize((body.len() + 3) & !3, 0);
    body.extend_from_slice(&u16b(2, big));
    body.extend_from_slice(&u16b(4, big));
    body.extend_from_slice(&u32b(1, big));
    body.extend_from_slice(&[0; 4]);
    block(big, 6, &body)
}

pub fn spb(big: bool, data: &[u8], orig_len: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&u32b(orig_len, big));
    body.extend_from_slice(data);
    block(big, 3, &body)
}

pub fn obsolete_pb(big: bool, iface: u16, units: u64, data: &[u8], orig_len: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&u16b(iface, big));
    body.extend_from_slice(&u16b(0, big));
    body.extend_from_slice(&u32b((units >> 32) as u32, big));
    body.extend_from_slice(&u32b(units as u32, big));
    body.extend_from_slice(&u32b(data.len() as u32, big));
    body.extend_from_slice(&u32b(orig_len, big));
    body.extend_from_slice(data);
    block(big, 2, &body)
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A frame body of `n` bytes with a recognizable pattern.
pub fn payload(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add(i as u8)).collect()
}
