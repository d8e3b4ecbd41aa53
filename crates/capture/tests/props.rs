//! Property tests: random and mutated captures never panic and end in at most one error;
//! random valid captures read the same as pcap-parser reads them.

mod common;

use std::io::Cursor;

use capture::{CaptureError, Reader};
use common::*;
use pcap_parser::{Block, PcapBlockOwned, PcapError};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Rec {
    iface: usize,
    ts: u64,
    data: Vec<u8>,
    extra: u32,
}

#[derive(Debug, Clone)]
struct FileSpec {
    ng: bool,
    big: bool,
    nanos: bool,
    ifaces: Vec<u16>,
    recs: Vec<Rec>,
}

fn file_spec() -> impl Strategy<Value = FileSpec> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(
            prop_oneof![Just(1u16), Just(101), Just(113), Just(276)],
            1..4,
        ),
        proptest::collection::vec(
            (
                0usize..3,
                any::<u32>(),
                proptest::collection::vec(any::<u8>(), 0..300),
                0u32..100,
            ),
            0..40,
        ),
    )
        .prop_map(|(ng, big, nanos, ifaces, recs)| {
            let n = ifaces.len();
            FileSpec {
                ng,
                big,
                nanos,
                recs: recs
                    .into_iter()
                    .map(|(i, ts, data, extra)| Rec {
                        iface: i % n,
                        ts: u64::from(ts) * 1000 + 7,
                        data,
                        extra,
                    })
                    .collect(),
                ifaces,
            }
        })
}

fn build(s: &FileSpec) -> Vec<u8> {
    if s.ng {
        let mut f = shb(s.big);
        for &lt in &s.ifaces {
            f.extend_from_slice(&idb(
                s.big,
                lt,
                0,
                if s.nanos { Some(9) } else { None },
                None,
            ));
        }
        for r in &s.recs {
            f.extend_from_slice(&epb(
                s.big,
                r.iface as u32,
                r.ts,
                &r.data,
                r.data.len() as u32 + r.extra,
            ));
        }
        f
    } else {
        let w = Pcap {
            big: s.big,
            nanos: s.nanos,
            linktype: u32::from(s.ifaces[0]),
            snaplen: 65535,
        };
        let mut f = w.header();
        for r in &s.recs {
            let (sec, frac) = if s.nanos {
                (r.ts / 1_000_000_000, r.ts % 1_000_000_000)
            } else {
                (r.ts / 1_000_000, r.ts % 1_000_000)
            };
            f.extend_from_slice(&w.record(
                sec as u32,
                frac as u32,
                &r.data,
                r.data.len() as u32 + r.extra,
            ));
        }
        f
    }
}

/// Read everything, checking the error contract; returns the frames.
type Owned = (u64, u32, Vec<u8>, u32);

fn drain(bytes: Vec<u8>) -> (Vec<Owned>, Option<CaptureError>) {
    let mut out = Vec::new();
    let Ok(mut r) = Reader::from_reader(Box::new(Cursor::new(bytes)), "prop") else {
        return (out, None);
    };
    loop {
        match r.next_frame() {
            Ok(Some(f)) => out.push((f.ts_ns, f.linktype, f.data.to_vec(), f.orig_len)),
            Ok(None) => return (out, None),
            Err(e) => {
                assert!(e.offset().is_some(), "{e}");
                assert!(!e.to_string().contains('\n'));
                assert!(matches!(r.next_frame(), Ok(None)));
                return (out, Some(e));
            }
        }
    }
}

/// (data, orig_len) of each packet as pcap-parser sees it.
fn pcap_parser_frames(bytes: &[u8]) -> Vec<(Vec<u8>, u32)> {
    let mut rdr = pcap_parser::create_reader(1 << 16, Cursor::new(bytes.to_vec())).unwrap();
    let mut out = Vec::new();
    loop {
        match rdr.next() {
            Ok((off, block)) => {
                match block {
                    PcapBlockOwned::Legacy(b) => {
                        out.push((b.data[..b.caplen as usize].to_vec(), b.origlen))
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(e)) => {
                        out.push((e.data[..e.caplen as usize].to_vec(), e.origlen))
                    }
                    _ => {}
                }
                rdr.consume(off);
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::Incomplete(_)) => rdr.refill().unwrap(),
            Err(e) => panic!("pcap-parser: {e:?}"),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn valid_files_read_like_the_spec_and_like_pcap_parser(s in file_spec()) {
        let bytes = build(&s);
        let (got, err) = drain(bytes.clone());
        prop_assert!(err.is_none(), "{:?}", err);
        prop_assert_eq!(got.len(), s.recs.len());
        for (g, r) in got.iter().zip(&s.recs) {
            let ts = if s.nanos { r.ts } else { r.ts * 1000 };
            prop_assert_eq!(g.0, ts);
            prop_assert_eq!(g.1, u32::from(if s.ng { s.ifaces[r.iface] } else { s.ifaces[0] }));
            prop_assert_eq!(&g.2, &r.data);
            prop_assert_eq!(g.3, r.data.len() as u32 + r.extra);
        }
        let theirs = pcap_parser_frames(&bytes);
        let ours: Vec<(Vec<u8>, u32)> = got.into_iter().map(|g| (g.2, g.3)).collect();
        prop_assert_eq!(ours, theirs);
    }

    #[test]
    fn gzip_reads_the_same(s in file_spec()) {
        let bytes = build(&s);
        let (plain, _) = drain(bytes.clone());
        let (gz, err) = drain(gzip(&bytes));
        prop_assert!(err.is_none());
        prop_assert_eq!(plain, gz);
    }

    #[test]
    fn cut_anywhere_keeps_the_frames_before(s in file_spec(), cut in any::<prop::sample::Index>()) {
        let bytes = build(&s);
        let n = cut.index(bytes.len() + 1);
        let (all, _) = drain(bytes.clone());
        let (got, err) = drain(bytes[..n].to_vec());
        prop_assert!(got.len() <= all.len());
        prop_assert_eq!(&got[..], &all[..got.len()]);
        if let Some(e) = err {
            prop_assert!(matches!(e, CaptureError::Truncated { .. }), "{}", e);
            prop_assert!(e.offset().unwrap() < n as u64);
        }
    }

    #[test]
    fn mutated_files_never_panic(s in file_spec(),
                                 muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = build(&s);
        for (i, b) in &muts {
            let at = i.index(bytes.len());
            bytes[at] = *b;
        }
        drain(bytes.clone());
        drain(gzip(&bytes));
    }

    #[test]
    fn random_bytes_never_panic(magic in prop_oneof![
                                    Just(vec![]),
                                    Just(vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0]),
                                    Just(vec![0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4]),
                                    Just(vec![0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a]),
                                    Just(vec![0x1f, 0x8b])],
                                tail in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut bytes = magic;
        bytes.extend_from_slice(&tail);
        drain(bytes);
    }
}

/// What [`Reader::next_bulk`] gives, read with spare buffers of `spare` bytes, as [`drain`]
/// gives it; also the counters.
fn drain_bulk(bytes: Vec<u8>, spare: usize) -> (Vec<Owned>, Option<String>, u64) {
    let mut out = Vec::new();
    let Ok(mut r) = Reader::from_reader(Box::new(Cursor::new(bytes)), "prop") else {
        return (out, None, 0);
    };
    let mut frames = Vec::new();
    let mut next = vec![0u8; spare];
    loop {
        match r.next_bulk(next, &mut frames) {
            Ok(Some(buf)) => {
                assert!(!frames.is_empty());
                for f in &frames {
                    out.push((
                        f.ts_ns,
                        f.linktype,
                        buf[f.start..f.end].to_vec(),
                        f.orig_len,
                    ));
                }
                // The buffer handed out comes back as the next spare, as the digest's does.
                next = buf;
            }
            Ok(None) => return (out, None, r.stats().truncated_frames),
            Err(e) => {
                assert!(frames.is_empty());
                assert!(matches!(r.next_bulk(Vec::new(), &mut frames), Ok(None)));
                return (out, Some(e.to_string()), r.stats().truncated_frames);
            }
        }
    }
}

/// The file `s` describes with `muts` bytes overwritten, cut at `cut` (to at least half), and
/// gzipped when `gz`: what the reading properties feed every reader alike.
fn damaged(
    s: &FileSpec,
    muts: &[(prop::sample::Index, u8)],
    cut: prop::sample::Index,
    gz: bool,
) -> Vec<u8> {
    let mut bytes = build(s);
    for (i, b) in muts {
        let at = i.index(bytes.len());
        bytes[at] = *b;
    }
    bytes.truncate(cut.index(bytes.len() + 1).max(bytes.len() / 2));
    if gz {
        bytes = gzip(&bytes);
    }
    bytes
}

/// Frames, error text and truncated-frame count through `next_frame`.
fn drain_frames(bytes: Vec<u8>) -> (Vec<Owned>, Option<String>, u64) {
    let mut r = match Reader::from_reader(Box::new(Cursor::new(bytes.clone())), "prop") {
        Ok(r) => r,
        Err(_) => return (Vec::new(), None, 0),
    };
    let (got, err) = drain(bytes);
    while let Ok(Some(_)) = r.next_frame() {}
    (got, err.map(|e| e.to_string()), r.stats().truncated_frames)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn bulk_reads_like_next_frame(s in file_spec(), spare in 0usize..300,
                                  muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
                                  cut in any::<prop::sample::Index>(), gz in any::<bool>()) {
        let bytes = damaged(&s, &muts, cut, gz);
        let want = drain_frames(bytes.clone());
        prop_assert_eq!(drain_bulk(bytes.clone(), spare), want.clone());
        prop_assert_eq!(drain_bulk(bytes, 1 << 16), want);
    }
}
