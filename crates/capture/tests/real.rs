//! Real captures written by tcpdump and dumpcap (tests/data), read and decoded, against what
//! tshark says of the same files (tests/data/*.tshark.tsv, written by tshark, not by us).
//!
//! - lo_eth.pcap: `tcpdump -i lo -w` (Ethernet, microseconds), curl against a local HTTP server.
//! - any_sll2_nano_snap128.pcap: `tcpdump -i any -s 128 --time-stamp-precision=nano` (SLL2,
//!   nanoseconds, frames cut at 128 bytes).
//! - multi_if.pcapng: `dumpcap -i lo -i any` (two interfaces: Ethernet and SLL, nanoseconds).

use std::net::IpAddr;
use std::path::PathBuf;

use capture::Reader;
use wire::Decoded;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn epoch_ns(s: &str) -> u64 {
    let (sec, frac) = s.split_once('.').unwrap();
    let mut frac = frac.to_string();
    frac.truncate(9);
    while frac.len() < 9 {
        frac.push('0');
    }
    sec.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
}

fn check(file: &str, linktypes: &[u32]) {
    let golden = std::fs::read_to_string(data(&format!("{file}.tshark.tsv"))).unwrap();
    let rows: Vec<Vec<&str>> = golden
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split('\t').collect())
        .collect();
    let mut r = Reader::open(&data(file)).unwrap();
    let mut n = 0;
    while let Some(f) = r.next_frame().unwrap() {
        let row = &rows[n];
        assert!(
            linktypes.contains(&f.linktype),
            "{file} #{n}: linktype {}",
            f.linktype
        );
        assert_eq!(f.ts_ns, epoch_ns(row[0]), "{file} #{n}");
        assert_eq!(
            f.data.len(),
            row[1].parse::<usize>().unwrap(),
            "{file} #{n}"
        );
        assert_eq!(f.orig_len, row[2].parse::<u32>().unwrap(), "{file} #{n}");
        let Decoded::Tcp(t) = wire::decode(f.linktype, f.data) else {
            panic!("{file} #{n}: {:?}", wire::decode(f.linktype, f.data));
        };
        assert_eq!(t.src, row[3].parse::<IpAddr>().unwrap());
        assert_eq!(t.dst, row[4].parse::<IpAddr>().unwrap());
        assert_eq!(t.sport, row[5].parse::<u16>().unwrap());
        assert_eq!(t.dport, row[6].parse::<u16>().unwrap());
        assert_eq!(t.seq, row[7].parse::<u32>().unwrap());
        let flags = u16::from_str_radix(row[9].trim_start_matches("0x"), 16).unwrap();
        assert_eq!(u16::from(t.flags), flags & 0xff);
        if t.flags & wire::ACK != 0 {
            assert_eq!(t.ack, row[8].parse::<u32>().unwrap());
        }
        assert_eq!(
            t.wire_len(),
            row[10].parse::<u64>().unwrap(),
            "{file} #{n}: payload length"
        );
        n += 1;
    }
    assert_eq!(n, rows.len(), "{file}: frame count");
    assert_eq!(r.stats().frames, rows.len() as u64);
    let on_disk = std::fs::metadata(data(file)).unwrap().len();
    assert_eq!(r.input_len(), Some(on_disk));
    assert_eq!(r.input_position(), on_disk);
}

#[test]
fn tcpdump_loopback_ethernet() {
    check("lo_eth.pcap", &[wire::linktype::ETHERNET]);
}

#[test]
fn tcpdump_any_sll2_nanoseconds_snaplen() {
    check("any_sll2_nano_snap128.pcap", &[wire::linktype::LINUX_SLL2]);
    let mut r = Reader::open(&data("any_sll2_nano_snap128.pcap")).unwrap();
    while r.next_frame().unwrap().is_some() {}
    assert!(r.stats().truncated_frames > 0);
}

#[test]
fn dumpcap_two_interfaces_pcapng() {
    check(
        "multi_if.pcapng",
        &[wire::linktype::ETHERNET, wire::linktype::LINUX_SLL],
    );
}

/// The same files, gzip-compressed on the fly, read the same.
#[test]
fn real_files_gzipped() {
    for f in ["lo_eth.pcap", "multi_if.pcapng"] {
        let plain = std::fs::read(data(f)).unwrap();
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut e, &plain).unwrap();
        let gz = e.finish().unwrap();
        let mut a = Reader::open(&data(f)).unwrap();
        let mut b = Reader::from_reader(Box::new(std::io::Cursor::new(gz)), f).unwrap();
        loop {
            let fa = a
                .next_frame()
                .unwrap()
                .map(|x| (x.ts_ns, x.linktype, x.data.to_vec(), x.orig_len));
            let fb = b
                .next_frame()
                .unwrap()
                .map(|x| (x.ts_ns, x.linktype, x.data.to_vec(), x.orig_len));
            assert_eq!(fa, fb);
            if fa.is_none() {
                break;
            }
        }
    }
}
