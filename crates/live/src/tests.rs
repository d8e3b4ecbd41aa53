//! Unit and property tests of block walking and of the filters (through the interpreter).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use crate::bpf::*;
use crate::{Packet, walk_block};

// ---------------------------------------------------------------- block layout

#[test]
fn layout_matches_the_kernel_structs() {
    use std::mem::{offset_of, size_of};
    assert_eq!(size_of::<libc::tpacket3_hdr>(), 48);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_snaplen), 12);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_len), 16);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_mac), 24);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_net), 26);
    assert_eq!(offset_of!(libc::tpacket_block_desc, hdr), 8);
    assert_eq!(offset_of!(libc::tpacket_hdr_v1, num_pkts), 4);
    assert_eq!(offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt), 8);
    assert_eq!(offset_of!(libc::sockaddr_ll, sll_protocol), 2);
    assert_eq!(offset_of!(libc::sockaddr_ll, sll_ifindex), 4);
    assert_eq!(offset_of!(libc::sockaddr_ll, sll_pkttype), 10);
    assert_eq!(size_of::<Insn>(), size_of::<libc::sock_filter>());
}

struct TestPkt {
    sec: u32,
    nsec: u32,
    ll: usize,
    frame: Vec<u8>,
    wire: u32,
    ifindex: i32,
    pkttype: u8,
    protocol: u16,
}

/// Builds a TPACKET_V3 block the way the kernel lays it out.
fn build_block(pkts: &[TestPkt], size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    let put32 = |b: &mut Vec<u8>, o: usize, v: u32| b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
    put32(&mut b, 0, 1);
    put32(&mut b, 8, libc::TP_STATUS_USER);
    put32(&mut b, 12, pkts.len() as u32);
    put32(&mut b, 16, 48);
    let mut off = 48;
    for (i, p) in pkts.iter().enumerate() {
        let mac = 80usize;
        let next = (mac + p.frame.len()).next_multiple_of(16);
        put32(
            &mut b,
            off,
            if i + 1 == pkts.len() { 0 } else { next as u32 },
        );
        put32(&mut b, off + 4, p.sec);
        put32(&mut b, off + 8, p.nsec);
        put32(&mut b, off + 12, p.frame.len() as u32);
        put32(&mut b, off + 16, p.wire);
        b[off + 24..off + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
        b[off + 26..off + 28].copy_from_slice(&((mac + p.ll) as u16).to_ne_bytes());
        b[off + 50..off + 52].copy_from_slice(&p.protocol.to_be_bytes());
        b[off + 52..off + 56].copy_from_slice(&p.ifindex.to_ne_bytes());
        b[off + 58] = p.pkttype;
        b[off + mac..off + mac + p.frame.len()].copy_from_slice(&p.frame);
        off += next;
    }
    put32(&mut b, 20, off as u32);
    b
}

fn sample_pkts() -> Vec<TestPkt> {
    (0..5)
        .map(|i| TestPkt {
            sec: 1_700_000_000 + i,
            nsec: 999_999_999 - i,
            ll: [14, 0, 16, 14, 4][i as usize],
            frame: (0..(60 + 37 * i as usize)).map(|b| b as u8).collect(),
            wire: 1000 + i,
            ifindex: i as i32 + 1,
            pkttype: [0, 4, 0, 1, 3][i as usize],
            protocol: if i % 2 == 0 { 0x0800 } else { 0x86dd },
        })
        .collect()
}

#[test]
fn walk_block_hands_every_packet_from_the_network_header() {
    let pkts = sample_pkts();
    let block = build_block(&pkts, 4096);
    let mut got = Vec::new();
    let n = walk_block(&block, |p: &Packet<'_>| {
        got.push((
            p.ts_ns,
            p.data.to_vec(),
            p.wire_len,
            p.ifindex,
            p.pkttype,
            p.protocol,
        ))
    });
    assert_eq!(n, pkts.len());
    for (p, g) in pkts.iter().zip(&got) {
        assert_eq!(g.0, u64::from(p.sec) * 1_000_000_000 + u64::from(p.nsec));
        assert_eq!(g.1, p.frame[p.ll..]);
        assert_eq!(g.2, p.wire - p.ll as u32);
        assert_eq!((g.3, g.4, g.5), (p.ifindex, p.pkttype, p.protocol));
    }
}

#[test]
fn walk_block_stops_at_corruption() {
    let pkts = sample_pkts();
    let good = build_block(&pkts, 4096);
    // A claimed packet count beyond what the chain holds.
    let mut b = good.clone();
    b[12..16].copy_from_slice(&1000u32.to_ne_bytes());
    assert_eq!(walk_block(&b, |_| ()), 5);
    // First packet offset outside the block.
    let mut b = good.clone();
    b[16..20].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert_eq!(walk_block(&b, |_| ()), 0);
    // Snap length past the end of the block: that packet is skipped, the walk goes on.
    let mut b = good.clone();
    b[48 + 12..48 + 16].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert_eq!(walk_block(&b, |_| ()), 4);
    // tp_net before tp_mac.
    let mut b = good.clone();
    b[48 + 26..48 + 28].copy_from_slice(&1u16.to_ne_bytes());
    assert_eq!(walk_block(&b, |_| ()), 4);
    // Truncated blocks.
    for cut in 0..good.len() {
        assert!(walk_block(&good[..cut], |_| ()) <= 5);
    }
}

proptest! {
    #[test]
    fn walk_block_never_panics_on_random_bytes(block in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut seen = 0;
        let n = walk_block(&block, |p| { seen += 1; assert!(p.data.len() <= block.len()); });
        prop_assert_eq!(n, seen);
    }

    #[test]
    fn walk_block_never_panics_on_mutated_blocks(
        muts in proptest::collection::vec((0usize..4096, any::<u8>()), 1..24),
        cut in 0usize..4096,
    ) {
        let mut b = build_block(&sample_pkts(), 4096);
        for (at, v) in muts {
            if at < b.len() { b[at] = v; }
        }
        b.truncate(cut.max(1));
        let n = walk_block(&b, |p| assert!(p.data.len() <= b.len()));
        prop_assert!(n <= b.len() / 60 + 1);
    }
}

// ---------------------------------------------------------------- hand-built packets

const TCP: u8 = 6;
const UDP: u8 = 17;

fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    ihl: u8,
    frag: u16,
    sport: u16,
    dport: u16,
) -> Vec<u8> {
    let hl = usize::from(ihl) * 4;
    let mut p = vec![0u8; hl.max(20) + 20];
    p[0] = 0x40 | ihl;
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    p[hl..hl + 2].copy_from_slice(&sport.to_be_bytes());
    p[hl + 2..hl + 4].copy_from_slice(&dport.to_be_bytes());
    p
}

fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, sport: u16, dport: u16) -> Vec<u8> {
    let mut p = vec![0u8; 60];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&20u16.to_be_bytes());
    p[6] = next;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p[40..42].copy_from_slice(&sport.to_be_bytes());
    p[42..44].copy_from_slice(&dport.to_be_bytes());
    p
}

const LO: i32 = 1;
const ETH: i32 = 2;
const HOST: u8 = 0;

fn ad4(pkttype: u8, ifindex: i32) -> Ancillary {
    Ancillary {
        protocol: 0x0800,
        pkttype,
        ifindex,
    }
}
fn ad6(pkttype: u8, ifindex: i32) -> Ancillary {
    Ancillary {
        protocol: 0x86dd,
        pkttype,
        ifindex,
    }
}

fn a4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

#[test]
fn ports_filter_on_hand_built_packets() {
    let f = servers_filter(&FilterSpec {
        ports: vec![3306, 5432],
        servers: vec![],
        sample: 1,
        loopback_ifindex: Some(LO),
    });
    let (c, s) = (a4("10.0.0.1"), a4("10.0.0.2"));
    let run4 = |p: &[u8], ad| run(&f, p, &ad);
    assert_eq!(
        run4(&ipv4(c, s, TCP, 5, 0, 40000, 3306), ad4(HOST, ETH)),
        ACCEPT
    );
    assert_eq!(
        run4(&ipv4(s, c, TCP, 5, 0, 5432, 40000), ad4(HOST, ETH)),
        ACCEPT
    );
    assert_eq!(run4(&ipv4(c, s, TCP, 5, 0, 40000, 80), ad4(HOST, ETH)), 0);
    assert_eq!(run4(&ipv4(c, s, UDP, 5, 0, 40000, 3306), ad4(HOST, ETH)), 0);
    // Options: the TCP header moves with IHL.
    assert_eq!(
        run4(&ipv4(c, s, TCP, 15, 0, 40000, 3306), ad4(HOST, ETH)),
        ACCEPT
    );
    assert_eq!(run4(&ipv4(c, s, TCP, 6, 0, 40000, 80), ad4(HOST, ETH)), 0);
    // Fragments: the first is judged by its ports; later ones (no ports) pass.
    assert_eq!(
        run4(&ipv4(c, s, TCP, 5, 0x2000, 40000, 80), ad4(HOST, ETH)),
        0
    );
    assert_eq!(
        run4(&ipv4(c, s, TCP, 5, 0x2000 | 185, 1, 1), ad4(HOST, ETH)),
        ACCEPT
    );
    assert_eq!(run4(&ipv4(c, s, UDP, 5, 185, 1, 1), ad4(HOST, ETH)), 0);
    // Loopback: the outgoing copy is dropped, the incoming one kept; outgoing on eth kept.
    assert_eq!(
        run4(
            &ipv4(c, s, TCP, 5, 0, 40000, 3306),
            ad4(PACKET_OUTGOING, LO)
        ),
        0
    );
    assert_eq!(
        run4(&ipv4(c, s, TCP, 5, 0, 40000, 3306), ad4(HOST, LO)),
        ACCEPT
    );
    assert_eq!(
        run4(
            &ipv4(c, s, TCP, 5, 0, 40000, 3306),
            ad4(PACKET_OUTGOING, ETH)
        ),
        ACCEPT
    );
    // Truncated before the ports: rejected (the kernel ends the program on a bad load).
    assert_eq!(
        run4(&ipv4(c, s, TCP, 5, 0, 40000, 3306)[..21], ad4(HOST, ETH)),
        0
    );
    // IPv6.
    let (c6, s6) = (a6("fd00::1"), a6("fd00::2"));
    assert_eq!(
        run(&f, &ipv6(c6, s6, TCP, 40000, 5432), &ad6(HOST, ETH)),
        ACCEPT
    );
    assert_eq!(
        run(&f, &ipv6(s6, c6, TCP, 3306, 40000), &ad6(HOST, ETH)),
        ACCEPT
    );
    assert_eq!(run(&f, &ipv6(c6, s6, TCP, 40000, 80), &ad6(HOST, ETH)), 0);
    assert_eq!(run(&f, &ipv6(c6, s6, UDP, 40000, 3306), &ad6(HOST, ETH)), 0);
    // An extension header before TCP is not followed.
    assert_eq!(run(&f, &ipv6(c6, s6, 0, 40000, 3306), &ad6(HOST, ETH)), 0);
    // Other ethertypes.
    let arp = Ancillary {
        protocol: 0x0806,
        pkttype: HOST,
        ifindex: ETH,
    };
    assert_eq!(run(&f, &ipv4(c, s, TCP, 5, 0, 40000, 3306), &arp), 0);
}

#[test]
fn servers_and_sampling_on_hand_built_packets() {
    let srv4 = SocketAddr::new(IpAddr::V4(a4("10.0.0.2")), 3306);
    let srv6 = SocketAddr::new(IpAddr::V6(a6("fd00::2")), 5432);
    let mapped = SocketAddr::new(IpAddr::V6(a6("::ffff:10.0.0.9")), 6379);
    let f = servers_filter(&FilterSpec {
        ports: vec![],
        servers: vec![srv4, srv6, mapped],
        sample: 3,
        loopback_ifindex: None,
    });
    let (c, s, other) = (a4("10.0.0.1"), a4("10.0.0.2"), a4("10.0.0.3"));
    let h = ad4(HOST, ETH);
    let (kept, dropped) = (port_where(true, 3, 40000), port_where(false, 3, 40000));
    // A client port the sample keeps: kept both ways; one it does not: dropped both ways.
    assert_eq!(run(&f, &ipv4(c, s, TCP, 5, 0, kept, 3306), &h), ACCEPT);
    assert_eq!(run(&f, &ipv4(s, c, TCP, 5, 0, 3306, kept), &h), ACCEPT);
    assert_eq!(run(&f, &ipv4(c, s, TCP, 5, 0, dropped, 3306), &h), 0);
    assert_eq!(run(&f, &ipv4(s, c, TCP, 5, 0, 3306, dropped), &h), 0);
    // Same port, other address: not a server.
    assert_eq!(run(&f, &ipv4(c, other, TCP, 5, 0, kept, 3306), &h), 0);
    // The IPv4-mapped server is matched as IPv4.
    assert_eq!(
        run(&f, &ipv4(c, a4("10.0.0.9"), TCP, 5, 0, kept, 6379), &h),
        ACCEPT
    );
    let (c6, s6) = (a6("fd00::1"), a6("fd00::2"));
    let h6 = ad6(HOST, ETH);
    let (kept, dropped) = (port_where(true, 3, 30000), port_where(false, 3, 30000));
    assert_eq!(run(&f, &ipv6(c6, s6, TCP, kept, 5432), &h6), ACCEPT);
    assert_eq!(run(&f, &ipv6(s6, c6, TCP, 5432, kept), &h6), ACCEPT);
    assert_eq!(run(&f, &ipv6(s6, c6, TCP, 5432, dropped), &h6), 0);
    assert_eq!(run(&f, &ipv6(a6("fd00::3"), c6, TCP, 5432, kept), &h6), 0);
}

#[test]
fn empty_spec_accepts_all_tcp() {
    let f = servers_filter(&FilterSpec {
        sample: 1,
        ..FilterSpec::default()
    });
    let (c, s) = (a4("10.0.0.1"), a4("10.0.0.2"));
    assert_eq!(
        run(&f, &ipv4(c, s, TCP, 5, 0, 1, 2), &ad4(HOST, ETH)),
        ACCEPT
    );
    assert_eq!(run(&f, &ipv4(c, s, UDP, 5, 0, 1, 2), &ad4(HOST, ETH)), 0);
    assert_eq!(
        run(&f, &ipv6(a6("::1"), a6("::1"), TCP, 1, 2), &ad6(HOST, LO)),
        ACCEPT
    );
}

#[test]
fn many_ports_assemble_with_far_jumps() {
    let ports: Vec<u16> = (1000..1400).collect();
    let f = servers_filter(&FilterSpec {
        ports: ports.clone(),
        sample: 2,
        ..FilterSpec::default()
    });
    assert!(f.len() < BPF_MAXINSNS);
    let (c, s) = (a4("10.0.0.1"), a4("10.0.0.2"));
    let (kept, dropped) = (port_where(true, 2, 50000), port_where(false, 2, 50000));
    for &p in ports.iter().step_by(37).chain([1399].iter()) {
        assert_eq!(
            run(&f, &ipv4(c, s, TCP, 5, 0, kept, p), &ad4(HOST, ETH)),
            ACCEPT,
            "{p}"
        );
        assert_eq!(
            run(&f, &ipv4(s, c, TCP, 5, 0, p, kept), &ad4(HOST, ETH)),
            ACCEPT,
            "{p}"
        );
        assert_eq!(
            run(&f, &ipv4(s, c, TCP, 5, 0, p, dropped), &ad4(HOST, ETH)),
            0,
            "{p}"
        );
    }
    assert_eq!(
        run(&f, &ipv4(c, s, TCP, 5, 0, 50000, 1400), &ad4(HOST, ETH)),
        0
    );
}

// ---------------------------------------------------------------- the filter against a model

/// What `servers_filter(spec)` should decide for a packet long enough for every load.
fn model(spec: &FilterSpec, pkt: &[u8], ad: &Ancillary) -> bool {
    if spec.loopback_ifindex == Some(ad.ifindex) && ad.pkttype == PACKET_OUTGOING {
        return false;
    }
    let (l4, src, dst) = match ad.protocol {
        0x0800 => {
            if pkt[9] != TCP {
                return false;
            }
            if u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff != 0 {
                return true;
            }
            let src = IpAddr::V4(Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]));
            let dst = IpAddr::V4(Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]));
            (usize::from(pkt[0] & 0xf) * 4, src, dst)
        }
        0x86dd => {
            if pkt[6] != TCP {
                return false;
            }
            let src = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&pkt[8..24]).unwrap()));
            let dst = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&pkt[24..40]).unwrap()));
            (40, src, dst)
        }
        _ => return false,
    };
    if spec.ports.is_empty() && spec.servers.is_empty() {
        return true;
    }
    // A TCP header outside the packet (IHL pointing past the end) is a failed load: drop.
    let Some(ports) = pkt.get(l4..l4 + 4) else {
        return false;
    };
    let sport = u16::from_be_bytes([ports[0], ports[1]]);
    let dport = u16::from_be_bytes([ports[2], ports[3]]);
    let kept = |client: u16| crate::bpf::sample_keeps(client, spec.sample);
    let is_server = |ip: IpAddr, port: u16| {
        spec.ports.contains(&port)
            || spec
                .servers
                .iter()
                .any(|s| s.ip().to_canonical() == ip && s.port() == port)
    };
    (is_server(src, sport) && kept(dport)) || (is_server(dst, dport) && kept(sport))
}

fn arb_ip(v6: bool) -> BoxedStrategy<IpAddr> {
    if v6 {
        prop_oneof![
            Just(IpAddr::V6(a6("fd00::1"))),
            Just(IpAddr::V6(a6("fd00::2"))),
            Just(IpAddr::V6(a6("::ffff:10.0.0.1"))),
            any::<[u8; 16]>().prop_map(|o| IpAddr::V6(Ipv6Addr::from(o))),
        ]
        .boxed()
    } else {
        prop_oneof![
            Just(IpAddr::V4(a4("10.0.0.1"))),
            Just(IpAddr::V4(a4("10.0.0.2"))),
            any::<u32>().prop_map(|v| IpAddr::V4(Ipv4Addr::from(v))),
        ]
        .boxed()
    }
}

fn arb_port() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(3306u16),
        Just(5432),
        Just(40000),
        Just(40001),
        Just(40002),
        any::<u16>()
    ]
}

fn arb_spec() -> impl Strategy<Value = FilterSpec> {
    (
        proptest::collection::vec(arb_port(), 0..4),
        proptest::collection::vec((any::<bool>().prop_flat_map(arb_ip), arb_port()), 0..3),
        prop_oneof![Just(0u32), Just(1), Just(2), Just(3), 1u32..10],
        proptest::option::of(Just(LO)),
    )
        .prop_map(|(ports, servers, sample, lo)| FilterSpec {
            ports,
            servers: servers
                .into_iter()
                .map(|(ip, p)| SocketAddr::new(ip, p))
                .collect(),
            sample,
            loopback_ifindex: lo,
        })
}

/// A packet long enough for every load the filter may do, with an ancillary block.
fn arb_packet() -> impl Strategy<Value = (Vec<u8>, Ancillary)> {
    let v4 = (
        arb_ip(false),
        arb_ip(false),
        prop_oneof![Just(TCP), Just(UDP)],
        0u8..16,
        prop_oneof![Just(0u16), Just(0x4000), Just(0x2000), any::<u16>()],
        arb_port(),
        arb_port(),
    )
        .prop_map(|(s, d, proto, ihl, frag, sp, dp)| {
            let (IpAddr::V4(s), IpAddr::V4(d)) = (s, d) else {
                unreachable!()
            };
            (ipv4(s, d, proto, ihl, frag, sp, dp), 0x0800u16)
        });
    let v6 = (
        arb_ip(true),
        arb_ip(true),
        prop_oneof![Just(TCP), Just(UDP), Just(0u8)],
        arb_port(),
        arb_port(),
    )
        .prop_map(|(s, d, nh, sp, dp)| {
            let (IpAddr::V6(s), IpAddr::V6(d)) = (s, d) else {
                unreachable!()
            };
            (ipv6(s, d, nh, sp, dp), 0x86ddu16)
        });
    (
        prop_oneof![v4, v6],
        prop_oneof![Just(HOST), Just(PACKET_OUTGOING), Just(1u8)],
        prop_oneof![Just(LO), Just(ETH)],
        0u8..10,
    )
        .prop_map(|((pkt, proto), pkttype, ifindex, odd)| {
            // Now and then an ethertype that does not match the bytes.
            let protocol = match odd {
                0 => 0x0806,
                1 if proto == 0x0800 => 0x86dd,
                _ => proto,
            };
            let pkt = if protocol == 0x86dd && pkt.len() < 60 {
                [pkt, vec![0; 60]].concat()
            } else {
                pkt
            };
            (
                pkt,
                Ancillary {
                    protocol,
                    pkttype,
                    ifindex,
                },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn servers_filter_agrees_with_the_model(spec in arb_spec(), (pkt, ad) in arb_packet()) {
        let f = servers_filter(&spec);
        let got = run(&f, &pkt, &ad);
        prop_assert!(got == 0 || got == ACCEPT);
        prop_assert_eq!(got == ACCEPT, model(&spec, &pkt, &ad), "{:?} {:?}", spec, ad);
    }

    #[test]
    fn servers_filter_never_reads_out_of_bounds(spec in arb_spec(), pkt in proptest::collection::vec(any::<u8>(), 0..80), proto in prop_oneof![Just(0x0800u16), Just(0x86dd), any::<u16>()]) {
        // Out-of-bounds loads end the program with 0 in the interpreter as in the kernel;
        // what matters is no panic and a well-formed verdict.
        let f = servers_filter(&spec);
        let got = run(&f, &pkt, &Ancillary { protocol: proto, pkttype: HOST, ifindex: ETH });
        prop_assert!(got == 0 || got == ACCEPT);
        // Every jump stays inside the program.
        for (i, ins) in f.iter().enumerate() {
            if ins.code & 0x07 == BPF_JMP {
                let far = if ins.code & 0xf0 == BPF_JA { ins.k as usize } else { usize::from(ins.jt.max(ins.jf)) };
                prop_assert!(i + 1 + far < f.len());
            }
        }
    }

    #[test]
    fn interpreter_never_panics(prog in proptest::collection::vec((any::<u16>(), any::<u8>(), any::<u8>(), any::<u32>()), 0..64), pkt in proptest::collection::vec(any::<u8>(), 0..64)) {
        let prog: Vec<Insn> = prog.into_iter().map(|(code, jt, jf, k)| Insn { code, jt, jf, k }).collect();
        run(&prog, &pkt, &Ancillary::default());
    }

    #[test]
    fn and_accepts_what_both_accept(sa in arb_spec(), sb in arb_spec(), (pkt, ad) in arb_packet(), ret_a in any::<bool>()) {
        let a = if ret_a {
            // A program ending in `ret a`: A = ifindex (nonzero) on the loopback, else 0.
            vec![
                Insn::stmt(BPF_LD | BPF_W | BPF_ABS, (SKF_AD_OFF + SKF_AD_IFINDEX) as u32),
                Insn::jump(BPF_JMP | BPF_JEQ | BPF_K, LO as u32, 1, 0),
                Insn::stmt(BPF_LD | BPF_IMM, 0),
                Insn::stmt(BPF_RET | BPF_A, 0),
            ]
        } else {
            servers_filter(&sa)
        };
        let b = servers_filter(&sb);
        let both = and(&a, &b).unwrap();
        let want = run(&a, &pkt, &ad) != 0 && run(&b, &pkt, &ad) != 0;
        prop_assert_eq!(run(&both, &pkt, &ad) != 0, want);
    }
}

#[test]
fn and_refuses_programs_over_the_kernel_limit() {
    let big = vec![Insn::stmt(BPF_LD | BPF_IMM, 1); 3000];
    assert!(and(&big, &big).is_err());
    let msg = and(&big, &big).unwrap_err().to_string();
    assert!(msg.contains("4096") && !msg.contains('\n'), "{msg}");
}

#[test]
fn relocation_moves_packet_loads_only() {
    let mut p = vec![
        Insn::stmt(BPF_LD | BPF_H | BPF_ABS, 12),
        Insn::stmt(BPF_LD | BPF_B | BPF_IND, 14),
        Insn::stmt(BPF_LDX | BPF_B | BPF_MSH, 0),
        Insn::stmt(
            BPF_LD | BPF_W | BPF_ABS,
            (SKF_AD_OFF + SKF_AD_PROTOCOL) as u32,
        ),
        Insn::stmt(BPF_LD | BPF_IMM, 12),
        Insn::stmt(BPF_LDX | BPF_W | BPF_IMM, 12),
        Insn::stmt(BPF_RET | BPF_K, 12),
    ];
    relocate_to_net(&mut p);
    let net = |k: u32| (SKF_NET_OFF as u32).wrapping_add(k);
    assert_eq!(
        p.iter().map(|i| i.k).collect::<Vec<_>>(),
        vec![
            net(12),
            net(14),
            net(0),
            (SKF_AD_OFF + SKF_AD_PROTOCOL) as u32,
            12,
            12,
            12
        ]
    );
}

#[test]
fn libpcap_expressions_run_network_relative() {
    let f = match compile_expr("tcp port 3306") {
        Ok(f) => f,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let (c, s) = (a4("10.0.0.1"), a4("10.0.0.2"));
    assert_ne!(
        run(&f, &ipv4(c, s, TCP, 5, 0, 40000, 3306), &ad4(HOST, ETH)),
        0
    );
    assert_ne!(
        run(&f, &ipv4(c, s, TCP, 7, 0, 3306, 40000), &ad4(HOST, ETH)),
        0
    );
    assert_eq!(
        run(&f, &ipv4(c, s, TCP, 5, 0, 40000, 80), &ad4(HOST, ETH)),
        0
    );
    assert_eq!(
        run(&f, &ipv4(c, s, UDP, 5, 0, 40000, 3306), &ad4(HOST, ETH)),
        0
    );
    assert_ne!(
        run(
            &f,
            &ipv6(a6("::1"), a6("::2"), TCP, 40000, 3306),
            &ad6(HOST, ETH)
        ),
        0
    );
    assert_eq!(
        run(
            &f,
            &ipv6(a6("::1"), a6("::2"), UDP, 40000, 3306),
            &ad6(HOST, ETH)
        ),
        0
    );
    // Combined with the loopback rule.
    let g = and(&f, &drop_outgoing(LO)).unwrap();
    assert_ne!(
        run(&g, &ipv4(c, s, TCP, 5, 0, 40000, 3306), &ad4(HOST, LO)),
        0
    );
    assert_eq!(
        run(
            &g,
            &ipv4(c, s, TCP, 5, 0, 40000, 3306),
            &ad4(PACKET_OUTGOING, LO)
        ),
        0
    );
    // libpcap's message passes through, on one line.
    let e = compile_expr("ether host 00:11:22:33:44:55")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("filter expression 'ether host 00:11:22:33:44:55': ") && !e.contains('\n'),
        "{e}"
    );
    let e = compile_expr("tcp port").unwrap_err().to_string();
    assert!(e.contains("syntax error") || e.contains("tcp port"), "{e}");
}

/// The first client port from `from` up that `--sample n` keeps (or drops).
fn port_where(keep: bool, n: u32, from: u16) -> u16 {
    (from..u16::MAX)
        .find(|p| crate::bpf::sample_keeps(*p, n) == keep)
        .unwrap_or(from)
}

#[test]
fn sampling_hash_is_unbiased_on_even_ports() {
    // Linux hands connect() even ports: the hash must keep about 1 in n of them anyway.
    for n in [2u32, 3, 4, 8] {
        let even: Vec<u16> = (32768..61000).step_by(2).collect();
        let kept = even
            .iter()
            .filter(|p| crate::bpf::sample_keeps(**p, n))
            .count();
        let want = even.len() / n as usize;
        assert!(
            kept.abs_diff(want) * 20 < want,
            "n={n}: kept {kept} of {} even ports, want about {want}",
            even.len()
        );
    }
    assert!((0..=u16::MAX).all(|p| crate::bpf::sample_keeps(p, 1)));
}

// ---------------------------------------------------------------- the ring on a real socket

/// Opens a ring on `lo` for `spec`, or None without the privilege (a skip, unless
/// `DBTAP_REQUIRE_CAPTURE` is set, as the test command sets it: then it fails).
fn lo_ring(cfg: &crate::RingConfig, spec: &FilterSpec) -> Option<crate::Ring> {
    match crate::Ring::open(cfg, &servers_filter(spec)) {
        Ok(r) => Some(r),
        Err(crate::LiveError::NoPrivilege)
            if std::env::var_os("DBTAP_REQUIRE_CAPTURE").is_none() =>
        {
            eprintln!("skipped: needs CAP_NET_RAW (set DBTAP_REQUIRE_CAPTURE to make this fail)");
            None
        }
        Err(e) => panic!("opening a ring on lo: {e}"),
    }
}

/// A ring of four 128 KiB blocks retired after 10 ms, on `lo`, for the port of the listener it
/// returns with it (None without the privilege).
fn small_lo_ring() -> Option<(crate::Ring, std::net::TcpListener)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let spec = FilterSpec {
        ports: vec![listener.local_addr().unwrap().port()],
        loopback_ifindex: crate::loopback_index(),
        ..FilterSpec::default()
    };
    let cfg = crate::RingConfig {
        interface: "lo".into(),
        block_size: 128 << 10,
        block_count: 4,
        retire_ms: 10,
        fanout_group: None,
    };
    Some((lo_ring(&cfg, &spec)?, listener))
}

#[test]
fn reader_behind_the_kernel_skips_ahead_to_the_ready_block() {
    use std::io::{Read, Write};
    use std::time::Duration;

    let Some((mut ring, listener)) = small_lo_ring() else {
        return;
    };
    let port = listener.local_addr().unwrap().port();
    let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    client.write_all(b"resync-marker").unwrap();
    let mut got = [0u8; 13];
    server.read_exact(&mut got).unwrap();
    // The kernel retires the block after 10 ms; later packets (a delayed ACK) go to block 1.
    std::thread::sleep(Duration::from_millis(300));
    let ready = |r: &crate::Ring, i: usize| {
        r.map.block_status(i * r.block_size) & libc::TP_STATUS_USER != 0
    };
    assert!(ready(&ring, 0), "block 0 was not handed over");
    assert!(
        !ready(&ring, 3),
        "the ring wrapped: the test needs block 3 unused"
    );
    // The state behind the stall the benchmark once showed: the reader waits on a block the
    // kernel is not filling, while an earlier-numbered (later in ring order) block is ready.
    ring.cur = 3;
    let mut payloads = 0;
    let mut packets = 0;
    let n = ring
        .poll(Duration::from_millis(50), |p| {
            packets += 1;
            // IPv4 header 20 bytes, TCP header length from its data offset.
            if p.data.len() > 40 {
                let tcp = 20 + usize::from(p.data[32] >> 4) * 4;
                if p.data.get(tcp..) == Some(b"resync-marker".as_slice()) {
                    payloads += 1;
                }
            }
        })
        .unwrap();
    assert_eq!(n, packets);
    assert!(packets >= 4, "handshake and data: {packets} packets");
    assert_eq!(
        payloads, 1,
        "the data packet, once (no outgoing loopback copy)"
    );
    assert_eq!(ring.stats().unwrap().resyncs, 1);
    assert!(ring.cur < 3, "reading went on from the ready blocks");
    drop((client, server));
}

// ---------------------------------------------------------------- reader pauses

/// A block with `n` packets whose last one the kernel stamped `sec`.`nsec`.
fn block_stamped(n: u32, sec: u32, nsec: u32) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[12..16].copy_from_slice(&n.to_ne_bytes());
    b[40..44].copy_from_slice(&sec.to_ne_bytes());
    b[44..48].copy_from_slice(&nsec.to_ne_bytes());
    b
}

#[test]
fn block_wait_counts_from_the_last_packet() {
    let now = 1_700_000_001_250_000_000;
    assert_eq!(
        crate::block_wait_ns(&block_stamped(3, 1_700_000_000, 500_000_000), now),
        750_000_000
    );
    // Empty, short, or stamped after "now" (a clock that went back): no wait.
    assert_eq!(crate::block_wait_ns(&block_stamped(0, 1, 0), now), 0);
    assert_eq!(crate::block_wait_ns(&[0u8; 44], now), 0);
    assert_eq!(
        crate::block_wait_ns(&block_stamped(1, 1_800_000_000, 0), now),
        0
    );
}

proptest! {
    #[test]
    fn block_wait_never_panics(block in proptest::collection::vec(any::<u8>(), 0..96), now in any::<u64>()) {
        let w = crate::block_wait_ns(&block, now);
        prop_assert!(w <= now);
    }
}

#[test]
fn a_reader_that_does_not_read_shows_its_pause() {
    use std::io::{Read, Write};
    use std::time::Duration;

    let Some((mut ring, listener)) = small_lo_ring() else {
        return;
    };
    let port = listener.local_addr().unwrap().port();
    assert_eq!(ring.stats().unwrap().ring_bytes, 512 << 10);
    let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let mut got = [0u8; 5];
    client.write_all(b"first").unwrap();
    server.read_exact(&mut got).unwrap();
    // The reader looks away for 400 ms while a block waits.
    std::thread::sleep(Duration::from_millis(400));
    let n = ring.poll(Duration::from_millis(100), |_| {}).unwrap();
    assert!(n >= 1, "the packets were read");
    let paused = ring.take_interval_pause();
    let s = ring.stats().unwrap();
    assert!(
        (300_000_000..5_000_000_000).contains(&paused),
        "pause {paused} ns"
    );
    assert_eq!(s.pause_max_ns, paused);
    assert_eq!(s.long_pauses, 1);
    // Now the reader waits in poll when the next packets come: no long pause.
    let waiter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        client.write_all(b"again").unwrap();
        client
    });
    let mut handed = 0;
    while handed == 0 {
        handed = ring.poll(Duration::from_secs(2), |_| {}).unwrap();
    }
    let client = waiter.join().unwrap();
    server.read_exact(&mut got).unwrap();
    assert!(ring.take_interval_pause() < 100_000_000);
    assert_eq!(ring.stats().unwrap().long_pauses, 1);
    drop((client, server));
}
