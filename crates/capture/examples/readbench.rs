//! Read a capture with dbtap's Reader and with pcap-parser side by side, printing frames and MB/s.
//!
//! ```text
//! cargo run --release -p dbtap-capture --example readbench -- FILE [--decode] [--rounds N]
//! cargo run --release -p dbtap-capture --example readbench -- --synthesize FILE PACKETS
//! ```
//! `--synthesize` writes an Ethernet/IPv4/TCP pcap with mixed frame sizes to measure on.
//! `--decode` also decodes every frame with the wire crate (dbtap's path only).

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use capture::Reader;
use pcap_parser::{Block, PcapBlockOwned, PcapError};

fn synthesize(path: &Path, packets: u64) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut hdr = Vec::new();
    hdr.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    hdr.extend_from_slice(&2u16.to_le_bytes());
    hdr.extend_from_slice(&4u16.to_le_bytes());
    hdr.extend_from_slice(&[0; 8]);
    hdr.extend_from_slice(&262_144u32.to_le_bytes());
    hdr.extend_from_slice(&1u32.to_le_bytes());
    w.write_all(&hdr)?;
    let sizes = [66usize, 66, 120, 250, 583, 1514, 66, 90];
    let mut frame = vec![0u8; 1514];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..packets {
        // Payload: text-like pseudo-random bytes, so that gzip has realistic work to do.
        for b in frame.iter_mut().skip(54) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = b"SELECT id, name FROM t WHERE k = 0123456789 "[(x % 44) as usize];
        }
        let len = sizes[(i % sizes.len() as u64) as usize];
        frame[12] = 0x08;
        frame[13] = 0x00;
        frame[14] = 0x45;
        let ip_len = (len - 14) as u16;
        frame[16..18].copy_from_slice(&ip_len.to_be_bytes());
        frame[23] = 6;
        frame[26..30].copy_from_slice(&[10, 0, 0, 1]);
        frame[30..34].copy_from_slice(&[10, 0, 0, 2]);
        frame[34..36].copy_from_slice(&((40000 + i % 1000) as u16).to_be_bytes());
        frame[36..38].copy_from_slice(&3306u16.to_be_bytes());
        frame[38..42].copy_from_slice(&(i as u32).to_be_bytes());
        frame[46] = 0x50;
        frame[47] = 0x18;
        let ts = 1_700_000_000_000_000u64 + i * 10;
        let mut rec = Vec::with_capacity(16);
        rec.extend_from_slice(&((ts / 1_000_000) as u32).to_le_bytes());
        rec.extend_from_slice(&((ts % 1_000_000) as u32).to_le_bytes());
        rec.extend_from_slice(&(len as u32).to_le_bytes());
        rec.extend_from_slice(&(len as u32).to_le_bytes());
        w.write_all(&rec)?;
        w.write_all(&frame[..len])?;
    }
    w.flush()
}

/// (frames, captured bytes, TCP segments, decompressed stream bytes)
fn run_dbtap(path: &Path, decode: bool) -> Result<(u64, u64, u64, u64), String> {
    let mut r = Reader::open(path).map_err(|e| e.to_string())?;
    let (mut frames, mut bytes, mut tcp) = (0u64, 0u64, 0u64);
    while let Some(f) = r.next_frame().map_err(|e| e.to_string())? {
        frames += 1;
        bytes += f.data.len() as u64;
        if decode && let wire::Decoded::Tcp(t) = wire::decode(f.linktype, f.data) {
            tcp += 1;
            std::hint::black_box(t.payload.len());
        }
    }
    Ok((frames, bytes, tcp, r.stream_position()))
}

fn run_pcap_parser(path: &Path) -> Result<(u64, u64), String> {
    let mut file = File::open(path).map_err(|e| e.to_string())?;
    let mut magic = [0u8; 2];
    file.read_exact(&mut magic).map_err(|e| e.to_string())?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    // Gzip goes through the same decoder dbtap uses, so the comparison is of the record loops.
    let src: Box<dyn Read + Send> = if magic == [0x1f, 0x8b] {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut rdr = pcap_parser::create_reader(1 << 20, src).map_err(|e| format!("{e:?}"))?;
    let (mut frames, mut bytes) = (0u64, 0u64);
    loop {
        match rdr.next() {
            Ok((off, block)) => {
                match block {
                    PcapBlockOwned::Legacy(b) => {
                        frames += 1;
                        bytes += u64::from(b.caplen);
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(e)) => {
                        frames += 1;
                        bytes += u64::from(e.caplen);
                    }
                    _ => {}
                }
                rdr.consume(off);
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::Incomplete(_)) => rdr.refill().map_err(|e| format!("{e:?}"))?,
            Err(e) => return Err(format!("{e:?}")),
        }
    }
    Ok((frames, bytes))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--synthesize") {
        let (Some(p), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse().ok())) else {
            eprintln!("usage: readbench --synthesize FILE PACKETS");
            std::process::exit(2);
        };
        synthesize(Path::new(p), n).expect("write");
        return;
    }
    let Some(path) = args.first().map(Path::new) else {
        eprintln!("usage: readbench FILE [--decode] [--rounds N] | --synthesize FILE PACKETS");
        std::process::exit(2);
    };
    let decode = args.iter().any(|a| a == "--decode");
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let mut best = (f64::MAX, f64::MAX);
    for round in 0..rounds {
        let t = Instant::now();
        let (frames, bytes, tcp, stream) = match run_dbtap(path, decode) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        };
        let a = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let pp = run_pcap_parser(path);
        let b = t.elapsed().as_secs_f64();
        best = (best.0.min(a), best.1.min(b));
        println!(
            "round {round}: dbtap {frames} frames {:.1} MB captured{} in {:.1} ms | pcap-parser {} in {:.1} ms",
            bytes as f64 / 1e6,
            if decode {
                format!(", {tcp} TCP")
            } else {
                String::new()
            },
            a * 1e3,
            match &pp {
                Ok((f, _)) => format!("{f} frames"),
                Err(e) => format!("error {e}"),
            },
            b * 1e3
        );
        if let Ok((f, _)) = pp
            && f != frames
        {
            println!("  frame counts differ: dbtap {frames}, pcap-parser {f}");
        }
        if round + 1 == rounds {
            let size = stream as f64;
            println!(
                "best (MB/s of the decompressed stream): dbtap {:.0} MB/s ({:.2} Mpps{}) | pcap-parser {:.0} MB/s ({:.2} Mpps) | ratio pcap-parser/dbtap time {:.2}",
                size / best.0 / 1e6,
                frames as f64 / best.0 / 1e6,
                if decode { " incl. decode" } else { "" },
                size / best.1 / 1e6,
                frames as f64 / best.1 / 1e6,
                best.1 / best.0
            );
        }
    }
}
