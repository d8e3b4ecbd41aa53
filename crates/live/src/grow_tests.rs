//! Tests of the growing ring: the sizing rule, the overlap's bookkeeping, and a handover on a
//! real socket under traffic that must hand every byte of a TCP stream exactly once.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::{FilterSpec, servers_filter};

const MIB: u64 = 1 << 20;

#[test]
fn the_rate_rule_asks_for_the_margin_in_steps_within_the_bound() {
    let s = Sizing {
        max_bytes: 128 * MIB,
        margin: Duration::from_secs(2),
    };
    // 30 MB/s for 2 s is 60 MB: 64 MiB (four 16 MiB steps).
    let (to, why) = decide(&s, 32 * MIB, 32, 30_000_000, 1).expect("grows");
    assert_eq!(to, 64 * MIB);
    assert!(why.starts_with("the busiest second, 30.0 MB/s"), "{why}");
    // The ring already holds the margin: no growth.
    assert_eq!(decide(&s, 64 * MIB, 64, 30_000_000, 1), None);
    // The bound caps it; at the bound it stays.
    assert_eq!(
        decide(&s, 32 * MIB, 32, 500_000_000, 1).map(|g| g.0),
        Some(128 * MIB)
    );
    assert_eq!(decide(&s, 128 * MIB, 128, 500_000_000, 1), None);
}

#[test]
fn the_fill_rule_doubles_a_ring_found_half_full() {
    let s = Sizing {
        max_bytes: 128 * MIB,
        margin: Duration::ZERO,
    };
    let (to, why) = decide(&s, 40 * MIB, 40, 2_000_000, 27).expect("grows");
    assert_eq!(to, 80 * MIB);
    assert_eq!(why, "the reader came back to 27 of 40 blocks full");
    // A reader that keeps up finds one block at a time, however small the ring.
    assert_eq!(decide(&s, 2 * MIB, 2, 2_000_000, 1), None);
    assert_eq!(decide(&s, 40 * MIB, 40, 2_000_000, 19), None);
}

proptest! {
    #[test]
    fn a_growth_is_always_larger_and_within_the_bound(
        ring_mb in 2u64..512, blocks in 0usize..1024, max_mb in 0u64..1024,
        rate in any::<u64>(), ready in any::<u64>(), margin_ms in 0u64..100_000,
    ) {
        let s = Sizing { max_bytes: max_mb * MIB, margin: Duration::from_millis(margin_ms) };
        if let Some((to, _)) = decide(&s, ring_mb * MIB, blocks, rate, ready) {
            prop_assert!(to > ring_mb * MIB);
            prop_assert!(to <= s.max_bytes);
            prop_assert!(to % MIB == 0);
        }
    }
}

fn pkt(data: &[u8], ts_ns: u64) -> Packet<'_> {
    Packet {
        ts_ns,
        data,
        wire_len: data.len() as u32,
        ifindex: 1,
        pkttype: 0,
        protocol: 0x0800,
    }
}

#[test]
fn the_overlap_skips_each_repeat_once_and_only_inside_its_window() {
    let (a, b) = (b"packet a".as_slice(), b"packet b".as_slice());
    let mut seen = HashMap::new();
    *seen.entry(packet_key(&pkt(a, 1))).or_insert(0) += 2;
    let mut o = Overlap {
        seen,
        until_ns: 1000,
        skipped: 0,
    };
    // Another timestamp, same content: a repeat (the copies' stamps differ).
    assert!(o.repeat(&pkt(a, 900)));
    assert!(!o.repeat(&pkt(b, 900)));
    // Past the window nothing is a repeat.
    assert!(!o.repeat(&pkt(a, 1001)));
    assert!(o.repeat(&pkt(a, 950)));
    // Each remembered copy is skipped once.
    assert!(!o.repeat(&pkt(a, 960)));
    assert_eq!(o.skipped, 2);
    assert!(o.seen.is_empty());
}

/// (relative sequence number, payload length) of the client's data segments, and the
/// client's initial sequence number when its SYN was seen.
fn client_segment(data: &[u8], port: u16) -> Option<(bool, u32, usize)> {
    let ihl = usize::from(data.first()? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*data.get(2)?, *data.get(3)?]));
    let tcp = data.get(ihl..)?;
    let dport = u16::from_be_bytes([*tcp.get(2)?, *tcp.get(3)?]);
    if dport != port {
        return None;
    }
    let seq = u32::from_be_bytes(tcp.get(4..8)?.try_into().ok()?);
    let syn = tcp.get(13)? & 0x02 != 0;
    let off = usize::from(tcp.get(12)? >> 4) * 4;
    Some((syn, seq, total.checked_sub(ihl + off)?))
}

#[test]
fn a_handover_under_traffic_hands_every_byte_once() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let spec = FilterSpec {
        ports: vec![port],
        loopback_ifindex: crate::loopback_index(),
        ..FilterSpec::default()
    };
    let cfg = RingConfig {
        interface: "lo".into(),
        block_size: 128 << 10,
        block_count: 8,
        retire_ms: 10,
        fanout_group: None,
    };
    let filter = servers_filter(&spec);
    let sizing = Some(Sizing {
        max_bytes: 64 * MIB,
        margin: Duration::ZERO,
    });
    let mut ring = match AutoRing::open(&cfg, &filter, sizing) {
        Ok(r) => r,
        Err(LiveError::NoPrivilege) if std::env::var_os("DBTAP_REQUIRE_CAPTURE").is_none() => {
            eprintln!("skipped: needs CAP_NET_RAW");
            return;
        }
        Err(e) => panic!("opening a ring on lo: {e}"),
    };
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0usize;
        while let Ok(k) = s.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    });
    let client = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_nodelay(true).unwrap();
        let start = Instant::now();
        let mut sent = 0usize;
        while start.elapsed() < Duration::from_millis(600) {
            c.write_all(&[0x5a; 100]).unwrap();
            sent += 100;
            std::thread::sleep(Duration::from_micros(50));
        }
        sent
    });
    let (mut isn, mut segs) = (None, Vec::new());
    let start = Instant::now();
    let mut asked = false;
    let mut idle = 0;
    while idle < 3 {
        if !asked && start.elapsed() > Duration::from_millis(250) {
            ring.request_growth(32);
            asked = true;
        }
        let n = ring
            .poll(Duration::from_millis(100), |p| {
                if let Some((syn, seq, len)) = client_segment(p.data, port) {
                    if syn {
                        isn = Some(seq);
                    } else if len > 0 {
                        segs.push((seq, len));
                    }
                }
            })
            .unwrap();
        idle = if n == 0 && client.is_finished() {
            idle + 1
        } else {
            0
        };
    }
    let sent = client.join().unwrap();
    assert_eq!(server.join().unwrap(), sent);
    let isn = isn.expect("the SYN was captured");
    let mut rel: Vec<(u32, usize)> = segs
        .iter()
        .map(|&(s, l)| (s.wrapping_sub(isn.wrapping_add(1)), l))
        .collect();
    rel.sort_unstable();
    // Contiguous from 0 to `sent`, each segment once: nothing lost, nothing repeated.
    let mut at = 0usize;
    for (s, l) in &rel {
        assert_eq!(*s as usize, at, "a gap or a repeat at byte {at}");
        at += l;
    }
    assert_eq!(at, sent);
    let st = ring.stats().unwrap();
    assert_eq!(
        (st.growths, st.ring_bytes, st.drops),
        (1, 32 * (128 << 10), 0)
    );
    assert!(
        st.handover_duplicates > 0,
        "no packet in the overlap: {st:?}"
    );
    let (growths, failed) = ring.take_growths();
    assert_eq!(growths.len(), 1);
    assert_eq!(failed, None);
}
