//! Reader tests on hand-built captures: formats, byte orders, resolutions, gzip, damage, errors.

mod common;

use std::io::{Cursor, Read};

use capture::{CaptureError, Format, Reader};
use common::*;

/// Every frame as (ts_ns, linktype, data, orig_len), then the final error if any.
type Owned = (u64, u32, Vec<u8>, u32);

fn read_all(r: &mut Reader) -> (Vec<Owned>, Option<CaptureError>) {
    let mut out = Vec::new();
    loop {
        match r.next_frame() {
            Ok(Some(f)) => out.push((f.ts_ns, f.linktype, f.data.to_vec(), f.orig_len)),
            Ok(None) => return (out, None),
            Err(e) => {
                // After an error: a clean end, and it stays ended.
                assert!(matches!(r.next_frame(), Ok(None)));
                assert!(matches!(r.next_frame(), Ok(None)));
                return (out, Some(e));
            }
        }
    }
}

fn reader(bytes: Vec<u8>) -> Result<Reader, CaptureError> {
    Reader::from_reader(Box::new(Cursor::new(bytes)), "mem.pcap")
}

/// A reader that hands out at most `chunk` bytes per read call.
struct Chunky {
    data: Vec<u8>,
    pos: usize,
    chunk: usize,
}

impl Read for Chunky {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.chunk).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn three_record_pcap(big: bool, nanos: bool) -> (Vec<u8>, Vec<Owned>) {
    let w = Pcap {
        big,
        nanos,
        linktype: 1,
        snaplen: 65535,
    };
    let mut f = w.header();
    let mut want = Vec::new();
    let frac_unit = if nanos { 1 } else { 1000 };
    for (i, (len, orig)) in [(60usize, 60u32), (1514, 1514), (96, 1500)]
        .into_iter()
        .enumerate()
    {
        let data = payload(i as u8, len);
        let ts_s = 1_700_000_000 + i as u32;
        let frac = 123_456 + i as u32;
        f.extend_from_slice(&w.record(ts_s, frac, &data, orig));
        want.push((
            u64::from(ts_s) * 1_000_000_000 + u64::from(frac) * frac_unit,
            1,
            data,
            orig,
        ));
    }
    (f, want)
}

#[test]
fn pcap_both_byte_orders_micro_and_nano() {
    for big in [false, true] {
        for nanos in [false, true] {
            let (bytes, want) = three_record_pcap(big, nanos);
            let mut r = reader(bytes.clone()).unwrap();
            assert_eq!(r.format(), Format::Pcap);
            assert!(!r.is_gzip());
            let (got, err) = read_all(&mut r);
            assert!(err.is_none(), "{err:?}");
            assert_eq!(got, want, "big {big} nanos {nanos}");
            let s = r.stats();
            assert_eq!(
                (s.frames, s.bytes, s.truncated_frames),
                (3, 60 + 1514 + 96, 1)
            );
            assert_eq!(r.input_position(), bytes.len() as u64);
            assert_eq!(r.input_len(), None);
            assert_eq!(r.name(), "mem.pcap");
        }
    }
}

#[test]
fn pcap_linktype_fcs_bits_are_masked_and_modified_pcap_reads() {
    let w = Pcap {
        big: false,
        nanos: false,
        linktype: 1 | 0x1000_0000,
        snaplen: 65535,
    };
    let mut f = w.header();
    f.extend_from_slice(&w.record(1, 2, b"abc", 3));
    let (got, _) = read_all(&mut reader(f).unwrap());
    assert_eq!(got[0].1, 1);

    // Kuznetsov's modified pcap: 24-byte record headers (8 extra bytes of ifindex/protocol/type).
    let mut f = w.header();
    f[..4].copy_from_slice(&0xa1b2_cd34u32.to_le_bytes());
    for i in 0..2u32 {
        f.extend_from_slice(&i.to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&4u32.to_le_bytes());
        f.extend_from_slice(&4u32.to_le_bytes());
        f.extend_from_slice(&[9; 8]);
        f.extend_from_slice(b"data");
    }
    let (got, err) = read_all(&mut reader(f).unwrap());
    assert!(err.is_none());
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].0, 1_000_000_000);
    assert_eq!(got[1].2, b"data");
}

#[test]
fn same_frames_whatever_the_read_chunking() {
    let (bytes, want) = three_record_pcap(false, false);
    for chunk in [1, 2, 3, 7, 16, 17, 1000] {
        let src = Chunky {
            data: bytes.clone(),
            pos: 0,
            chunk,
        };
        let mut r = Reader::from_reader(Box::new(src), "chunky").unwrap();
        let (got, err) = read_all(&mut r);
        assert!(err.is_none());
        assert_eq!(got, want, "chunk {chunk}");
    }
}

fn two_interface_pcapng(big: bool) -> (Vec<u8>, Vec<Owned>) {
    let mut f = shb(big);
    // Interface 0: Ethernet, default microseconds. Interface 1: SLL2, nanoseconds, 1000 s offset.
    // Interface 2: raw IP, 2^-20 s units.
    f.extend_from_slice(&idb(big, 1, 65535, None, None));
    f.extend_from_slice(&idb(big, 276, 262144, Some(9), Some(1000)));
    f.extend_from_slice(&idb(big, 101, 0, Some(0x80 | 20), None));
    let mut want = Vec::new();
    let d0 = payload(1, 61);
    f.extend_from_slice(&epb(big, 0, 1_700_000_000_123_456, &d0, 61));
    want.push((1_700_000_000_123_456_000, 1, d0, 61));
    let d1 = payload(2, 80);
    f.extend_from_slice(&epb(big, 1, 1_700_000_000_987_654_321, &d1, 200));
    want.push((1_700_000_000_987_654_321 + 1_000_000_000_000, 276, d1, 200));
    // A name resolution block and an interface statistics block: skipped.
    f.extend_from_slice(&block(big, 4, &[0; 4]));
    f.extend_from_slice(&block(big, 5, &[0; 12]));
    let d2 = payload(3, 40);
    f.extend_from_slice(&epb(big, 2, 3 << 19, &d2, 40));
    want.push((1_500_000_000, 101, d2, 40));
    // A packet on an interface never described: skipped and counted.
    f.extend_from_slice(&epb(big, 7, 0, b"lost", 4));
    // Obsolete packet block on interface 1; simple packet block (interface 0, previous timestamp).
    let d3 = payload(4, 33);
    f.extend_from_slice(&obsolete_pb(big, 1, 5_000_000_000, &d3, 33));
    want.push((5_000_000_000 + 1_000_000_000_000, 276, d3.clone(), 33));
    f.extend_from_slice(&spb(big, &d3, 33));
    want.push((5_000_000_000 + 1_000_000_000_000, 1, d3, 33));
    (f, want)
}

#[test]
fn pcapng_interfaces_resolutions_and_block_kinds() {
    for big in [false, true] {
        let (bytes, want) = two_interface_pcapng(big);
        let mut r = reader(bytes).unwrap();
        assert_eq!(r.format(), Format::PcapNg);
        let (got, err) = read_all(&mut r);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got, want, "big {big}");
        let s = r.stats();
        assert_eq!(s.frames, 5);
        assert_eq!(s.unknown_interface_frames, 1);
        assert_eq!(s.skipped_blocks, 2);
        assert_eq!(s.truncated_frames, 1);
        assert_eq!(s.sections, 1);
    }
}

#[test]
fn pcapng_several_sections_with_different_byte_orders() {
    let (mut bytes, mut want) = two_interface_pcapng(false);
    let (b2, w2) = two_interface_pcapng(true);
    bytes.extend_from_slice(&b2);
    want.extend(w2);
    // A third section whose interface 0 is raw IPv4: interface ids start over.
    bytes.extend_from_slice(&shb(false));
    bytes.extend_from_slice(&idb(false, 228, 0, Some(9), None));
    bytes.extend_from_slice(&epb(false, 0, 42, b"v4", 2));
    want.push((42, 228, b"v4".to_vec(), 2));
    // Interface 1 of the first section does not exist here any more.
    bytes.extend_from_slice(&epb(false, 1, 43, b"gone", 4));
    let mut r = reader(bytes).unwrap();
    let (got, err) = read_all(&mut r);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got, want);
    assert_eq!(r.stats().sections, 3);
    assert_eq!(r.stats().unknown_interface_frames, 3);
}

#[test]
fn gzip_pcap_and_pcapng_and_multi_member() {
    let (pcap, want_pcap) = three_record_pcap(true, true);
    let (ng, want_ng) = two_interface_pcapng(false);
    for (plain, want) in [(&pcap, &want_pcap), (&ng, &want_ng)] {
        let gz = gzip(plain);
        let mut r = reader(gz.clone()).unwrap();
        assert!(r.is_gzip());
        let (got, err) = read_all(&mut r);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(&got, want);
        assert_eq!(r.input_position(), gz.len() as u64);
        assert_eq!(r.stream_position(), plain.len() as u64);
        // Two gzip members, split in the middle of a record.
        let cut = plain.len() / 2 + 3;
        let mut two = gzip(&plain[..cut]);
        two.extend_from_slice(&gzip(&plain[cut..]));
        let (got, err) = read_all(&mut reader(two).unwrap());
        assert!(err.is_none(), "{err:?}");
        assert_eq!(&got, want);
    }
}

#[test]
fn gzip_cut_short_reports_after_the_frames_before() {
    let w = Pcap {
        big: false,
        nanos: false,
        linktype: 1,
        snaplen: 65535,
    };
    let mut plain = w.header();
    for i in 0..200u32 {
        plain.extend_from_slice(&w.record(i, 0, &payload(i as u8, 300), 300));
    }
    let gz = gzip(&plain);
    let mut r = reader(gz[..gz.len() * 2 / 3].to_vec()).unwrap();
    let (got, err) = read_all(&mut r);
    assert!(!got.is_empty() && got.len() < 200);
    let err = err.expect("an error");
    assert!(
        matches!(
            err,
            CaptureError::Truncated { .. } | CaptureError::Io { .. }
        ),
        "{err}"
    );
    assert!(err.to_string().starts_with("mem.pcap: "), "{err}");
}

#[test]
fn cut_mid_record_gives_truncated_at_its_offset() {
    let (bytes, want) = three_record_pcap(false, false);
    let third = 24 + (16 + 60) + (16 + 1514);
    // Cut inside the third record's data, then inside its header.
    for cut in [third + 16 + 10, third + 5] {
        let mut r = reader(bytes[..cut].to_vec()).unwrap();
        let (got, err) = read_all(&mut r);
        assert_eq!(got, want[..2]);
        match err {
            Some(CaptureError::Truncated {
                offset, ref name, ..
            }) => {
                assert_eq!(offset, third as u64);
                assert_eq!(name, "mem.pcap");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.stats().frames, 2);
    }
    // A cut exactly between records is a clean end.
    let (got, err) = read_all(&mut reader(bytes[..third].to_vec()).unwrap());
    assert_eq!((got.len(), err.is_none()), (2, true));
    // Header only: no frames, clean end.
    let (got, err) = read_all(&mut reader(bytes[..24].to_vec()).unwrap());
    assert_eq!((got.len(), err.is_none()), (0, true));
}

#[test]
fn pcapng_cut_mid_block() {
    let (bytes, want) = two_interface_pcapng(false);
    // Cut in the middle of the last block (the SPB).
    let last_len = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap()) as usize;
    let last = bytes.len() - last_len;
    let mut r = reader(bytes[..bytes.len() - 6].to_vec()).unwrap();
    let (got, err) = read_all(&mut r);
    assert_eq!(got, want[..want.len() - 1]);
    assert!(
        matches!(err, Some(CaptureError::Truncated { offset, .. }) if offset == last as u64),
        "{err:?}"
    );
}

#[test]
fn corrupt_record_lengths() {
    let (mut bytes, want) = three_record_pcap(false, false);
    let second = 24 + 16 + 60;
    bytes[second + 8..second + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let (got, err) = read_all(&mut reader(bytes).unwrap());
    assert_eq!(got, want[..1]);
    let err = err.unwrap();
    assert!(
        matches!(err, CaptureError::Corrupt { offset, .. } if offset == second as u64),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "mem.pcap: corrupt capture at byte 100: record length 2147483647 is larger than the maximum 262144"
    );

    // pcapng: a block length that is not a multiple of 4, a trailer that disagrees, a
    // captured length past the block.
    let (bytes, _) = two_interface_pcapng(false);
    let mut first_epb = 0;
    while u32::from_le_bytes(bytes[first_epb..first_epb + 4].try_into().unwrap()) != 6 {
        first_epb +=
            u32::from_le_bytes(bytes[first_epb + 4..first_epb + 8].try_into().unwrap()) as usize;
    }
    for (at, val) in [(first_epb + 4, 101u32), (first_epb + 20, 10_000)] {
        let mut b = bytes.clone();
        b[at..at + 4].copy_from_slice(&val.to_le_bytes());
        let (got, err) = read_all(&mut reader(b).unwrap());
        assert!(got.is_empty());
        assert!(
            matches!(err, Some(CaptureError::Corrupt { offset, .. }) if offset == first_epb as u64),
            "{err:?}"
        );
    }
    let mut b = bytes.clone();
    let epb_len = u32::from_le_bytes(b[first_epb + 4..first_epb + 8].try_into().unwrap()) as usize;
    b[first_epb + epb_len - 4] ^= 0x40;
    let (_, err) = read_all(&mut reader(b).unwrap());
    assert!(matches!(err, Some(CaptureError::Corrupt { .. })), "{err:?}");
}

#[test]
fn open_errors_are_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.pcap");
    let e = Reader::open(&missing).unwrap_err();
    assert!(matches!(e, CaptureError::Open { .. }));
    let msg = e.to_string();
    assert!(msg.contains("nope.pcap") && !msg.contains('\n'), "{msg}");

    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let e = Reader::open(&empty).unwrap_err();
    assert!(matches!(e, CaptureError::Empty { .. }));
    assert_eq!(e.to_string(), format!("{}: empty file", empty.display()));

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"hello, this is not a capture\n").unwrap();
    let e = Reader::open(&text).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: not a pcap or pcapng capture (starts with 68 65 6c 6c)",
            text.display()
        )
    );

    let e = Reader::open(dir.path()).unwrap_err();
    assert!(matches!(e, CaptureError::Open { .. }), "{e}");

    // Gzip of nothing and gzip of text.
    assert!(matches!(reader(gzip(b"")), Err(CaptureError::Empty { .. })));
    assert!(matches!(
        reader(gzip(b"plain text")),
        Err(CaptureError::NotCapture { .. })
    ));
    // Too short to hold a magic number; a pcap header cut short.
    assert!(matches!(
        reader(vec![0xd4, 0xc3]),
        Err(CaptureError::NotCapture { .. })
    ));
    let (bytes, _) = three_record_pcap(false, false);
    assert!(matches!(
        reader(bytes[..10].to_vec()),
        Err(CaptureError::Truncated { offset: 0, .. })
    ));
    // pcap version 3 is refused as corrupt, a stray pcapng magic without byte-order magic is not a capture.
    let mut v3 = bytes.clone();
    v3[4] = 3;
    assert!(matches!(reader(v3), Err(CaptureError::Corrupt { .. })));
    assert!(matches!(
        reader(vec![0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 1, 2, 3, 4]),
        Err(CaptureError::NotCapture { .. })
    ));
}

#[test]
fn open_file_reports_size_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, want) = three_record_pcap(false, true);
    let p = dir.path().join("x.pcap.gz");
    let gz = gzip(&bytes);
    std::fs::write(&p, &gz).unwrap();
    let mut r = Reader::open(&p).unwrap();
    assert_eq!(r.input_len(), Some(gz.len() as u64));
    let (got, _) = read_all(&mut r);
    assert_eq!(got, want);
    assert_eq!(r.input_position(), gz.len() as u64);
    assert!(r.name().ends_with("x.pcap.gz"));
}

/// A record larger than the 1 MiB buffer (allowed by a big snaplen) and many records that
/// straddle buffer refills.
#[test]
fn large_records_and_long_streams() {
    let w = Pcap {
        big: false,
        nanos: false,
        linktype: 1,
        snaplen: 4 << 20,
    };
    let mut f = w.header();
    let big = payload(7, 3 << 20);
    f.extend_from_slice(&w.record(1, 0, &big, big.len() as u32));
    let n = 20_000u32;
    for i in 0..n {
        f.extend_from_slice(&w.record(i, 0, &payload(i as u8, 150 + (i as usize % 300)), 1500));
    }
    let mut r = reader(f).unwrap();
    let first = r.next_frame().unwrap().unwrap();
    assert_eq!(first.data, &big[..]);
    let mut count = 0u32;
    while let Some(fr) = r.next_frame().unwrap() {
        assert_eq!(fr.data.len(), 150 + (count as usize % 300));
        assert_eq!(fr.data[0], count as u8);
        count += 1;
    }
    assert_eq!(count, n);
    assert_eq!(r.stats().truncated_frames, u64::from(n));
}

/// Streaming: a 64 MB capture generated on the fly is read without holding it.
#[test]
fn streams_without_reading_everything() {
    struct Gen {
        header: Vec<u8>,
        rec: Vec<u8>,
        left: usize,
        pos: usize,
        hpos: usize,
    }
    impl Read for Gen {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let mut n = 0;
            while n < buf.len() {
                if self.hpos < self.header.len() {
                    buf[n] = self.header[self.hpos];
                    self.hpos += 1;
                } else if self.left == 0 {
                    break;
                } else {
                    let k = (self.rec.len() - self.pos).min(buf.len() - n);
                    buf[n..n + k].copy_from_slice(&self.rec[self.pos..self.pos + k]);
                    self.pos += k;
                    n += k;
                    if self.pos == self.rec.len() {
                        self.pos = 0;
                        self.left -= 1;
                    }
                    continue;
                }
                n += 1;
            }
            Ok(n)
        }
    }
    let w = Pcap {
        big: false,
        nanos: false,
        linktype: 1,
        snaplen: 65535,
    };
    let rec = w.record(1, 1, &payload(0, 1000), 1000);
    let frames = 64_000;
    let g = Gen {
        header: w.header(),
        rec,
        left: frames,
        pos: 0,
        hpos: 0,
    };
    let mut r = Reader::from_reader(Box::new(g), "gen").unwrap();
    let mut n = 0;
    while r.next_frame().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, frames);
    assert_eq!(r.stats().bytes, frames as u64 * 1000);
}

#[test]
fn garbage_after_gzip_names_its_file_offset_after_the_frames() {
    let (plain, want) = three_record_pcap(false, false);
    let gz = gzip(&plain);
    let mut bytes = gz.clone();
    bytes.extend_from_slice(b"this is not gzip at all");
    let mut r = reader(bytes).unwrap();
    let (got, err) = read_all(&mut r);
    assert_eq!(got, want, "every frame before the garbage is read");
    let err = err.expect("an error");
    assert!(
        matches!(
            err,
            CaptureError::GarbageAfterGzip { file_offset, offset, .. }
                if file_offset == gz.len() as u64 && offset == plain.len() as u64
        ),
        "{err:?}"
    );
    assert!(err.is_mid_stream());
    let msg = err.to_string();
    assert_eq!(
        msg,
        format!(
            "mem.pcap: the gzip stream ends at byte {} of the file and what follows is not gzip \
             (not read); the capture inside ends at byte {}",
            gz.len(),
            plain.len()
        )
    );
    // A second member after the first is still read (multi-member gzip, as zcat does).
    let mut two = gz.clone();
    two.extend_from_slice(&gzip(&plain[24..]));
    let (got, err) = read_all(&mut reader(two).unwrap());
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got.len(), 2 * want.len());
}

#[test]
fn gzip_inside_gzip_says_so() {
    let (plain, _) = three_record_pcap(false, false);
    let e = reader(gzip(&gzip(&plain))).unwrap_err();
    assert!(matches!(e, CaptureError::GzipInGzip { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("mem.pcap: gzip inside gzip: the file was compressed twice")
            && !msg.contains('\n'),
        "{msg}"
    );
}

#[test]
fn pcapng_with_a_bad_byte_order_magic_says_so() {
    let (mut ng, _) = two_interface_pcapng(false);
    ng[8..12].copy_from_slice(&[0x12, 0x34, 0x56, 0x78]);
    let e = reader(ng.clone()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "mem.pcap: not a pcap or pcapng capture (starts with 0a 0d 0d 0a, a pcapng section header, \
         but its byte-order magic is 12 34 56 78, not 1a 2b 3c 4d or 4d 3c 2b 1a)"
    );
    // A later section with a bad byte-order magic: corrupt at its offset, naming the magic.
    let (good, want) = two_interface_pcapng(false);
    let mut two = good.clone();
    let mut bad = shb(false);
    bad[8..12].copy_from_slice(&[0x12, 0x34, 0x56, 0x78]);
    two.extend_from_slice(&bad);
    let (got, err) = read_all(&mut reader(two).unwrap());
    assert_eq!(got, want);
    let err = err.expect("an error");
    assert!(
        matches!(err, CaptureError::Corrupt { offset, .. } if offset == good.len() as u64),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("byte-order magic 78563412"),
        "{err}"
    );
}

#[test]
fn stdin_named_twice_is_refused_before_reading() {
    use std::path::PathBuf;
    let e = capture::check_inputs(&[PathBuf::from("-"), PathBuf::from("-")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "standard input (-) is named 2 times; it can be read only once"
    );
    assert!(capture::check_inputs(&[PathBuf::from("-"), PathBuf::from("a.pcap")]).is_ok());
    assert!(capture::check_inputs(&[PathBuf::from("./-")]).is_ok());
}

#[test]
fn inputs_are_checked_like_open_then_opened_when_their_turn_comes() {
    use capture::Input;
    let dir = tempfile::tempdir().unwrap();
    let (plain, want) = three_record_pcap(false, false);
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    // Whatever makes a file unreadable, the check says exactly what opening it says.
    let mut v3 = plain.clone();
    v3[4] = 3;
    let bad = [
        dir.path().join("missing.pcap"),
        dir.path().to_path_buf(),
        write("empty.pcap", b""),
        write("notes.txt", b"hello, this is not a capture\n"),
        write("double.pcap.gz", &gzip(&gzip(&plain))),
        write("short.pcap", &plain[..10]),
        write("v3.pcap", &v3),
        write("text.gz", &gzip(b"plain text")),
    ];
    for p in &bad {
        let checked = Input::check(p).unwrap_err().to_string();
        assert_eq!(checked, Reader::open(p).unwrap_err().to_string());
        assert!(!checked.contains('\n') && checked.contains(&*p.to_string_lossy()));
    }
    // A damaged record after the header is found when the file is read, not at the check.
    let mut cut = plain.clone();
    cut.truncate(plain.len() - 5);
    let p = write("cut.pcap", &cut);
    let (got, err) = read_all(&mut Input::check(&p).unwrap().open().unwrap());
    assert_eq!(got, want[..2]);
    assert!(
        matches!(err, Some(CaptureError::Truncated { .. })),
        "{err:?}"
    );

    // A good file is closed after the check: what is read is the file as it is at its turn.
    for (name, bytes) in [("a.pcap", plain.clone()), ("a.pcap.gz", gzip(&plain))] {
        let p = write(name, &bytes);
        let input = Input::check(&p).unwrap();
        assert!(matches!(input, Input::Later { .. }), "{input:?}");
        assert_eq!(input.input_len(), Some(bytes.len() as u64));
        let (twice, _) = three_record_pcap(true, true);
        std::fs::write(&p, &twice).unwrap();
        let mut r = input.open().unwrap();
        assert_eq!(r.input_len(), Some(twice.len() as u64));
        assert_eq!(read_all(&mut r).0.len(), 3);
        // Removed since its check: the same error as a missing file.
        let input = Input::check(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert!(matches!(input.open(), Err(CaptureError::Open { .. })));
    }
    assert_eq!(
        Reader::probe(&write("b.pcap", &plain)).unwrap(),
        Some(plain.len() as u64)
    );
}
