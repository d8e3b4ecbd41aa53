//! Byte-literal tests for every link type and header variant, and truncation at every length.

use std::net::IpAddr;

use crate::{Decoded, Defragmenter, Fragment, TcpSegment, decode, decode_ip, linktype};

/// A real Ethernet/IPv4/TCP frame (MySQL COM_QUERY "select 1", 127.0.0.1:50000 -> :3306),
/// with 4 bytes of Ethernet trailer padding that must not become payload.
const ETH_V4_MYSQL: &[u8] = &[
    // Ethernet: dst, src, type IPv4
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0x08, 0x00,
    // IPv4: v4 ihl5, tos, total 53, id, DF, ttl 64, TCP, csum, 10.0.0.1 -> 10.0.0.2
    0x45, 0x00, 0x00, 0x35, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 10, 0, 0, 1, 10, 0, 0,
    2, // TCP: 50000 -> 3306, seq 0x01020304, ack 0x0a0b0c0d, doff 5, PSH|ACK, win, csum, urg
    0xc3, 0x50, 0x0c, 0xea, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d, 0x50, 0x18, 0xff, 0xff,
    0x00, 0x00, 0x00, 0x00, // MySQL packet: len 9, seq 0, COM_QUERY "select 1"
    0x09, 0x00, 0x00, 0x00, 0x03, b's', b'e', b'l', b'e', b'c', b't', b' ', b'1',
    // Ethernet trailer padding
    0xde, 0xad, 0xbe, 0xef,
];

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::from(a)
}

fn v6(last: u8) -> IpAddr {
    let mut a = [0u8; 16];
    a[0] = 0x20;
    a[1] = 0x01;
    a[2] = 0x0d;
    a[3] = 0xb8;
    a[15] = last;
    IpAddr::from(a)
}

/// A TCP header with `opts` (a multiple of 4 bytes) and the payload.
fn tcp_bytes(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    opts: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.push((((20 + opts.len()) / 4) as u8) << 4);
    t.push(flags);
    t.extend_from_slice(&[0xfa, 0xf0, 0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t.extend_from_slice(payload);
    t
}

fn ipv4_bytes(proto: u8, opts: &[u8], frag: u16, id: u16, body: &[u8]) -> Vec<u8> {
    let ihl = 20 + opts.len();
    let total = (ihl + body.len()) as u16;
    let mut h = vec![0x40 | (ihl / 4) as u8, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0, 192, 168, 1, 10, 192, 168, 1, 20]);
    h.extend_from_slice(opts);
    h.extend_from_slice(body);
    h
}

/// IPv6 header followed by `ext` (already chained; `first_nh` names its first header).
fn ipv6_bytes(first_nh: u8, ext_and_body: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(ext_and_body.len() as u16).to_be_bytes());
    h.push(first_nh);
    h.push(64);
    if let (IpAddr::V6(s), IpAddr::V6(d)) = (v6(1), v6(2)) {
        h.extend_from_slice(&s.octets());
        h.extend_from_slice(&d.octets());
    }
    h.extend_from_slice(ext_and_body);
    h
}

fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn seg(d: Decoded<'_>) -> TcpSegment<'_> {
    match d {
        Decoded::Tcp(t) => t,
        other => panic!("expected Tcp, got {other:?}"),
    }
}

fn std_tcp(payload: &[u8]) -> Vec<u8> {
    tcp_bytes(
        40000,
        5432,
        1000,
        2000,
        crate::PSH | crate::ACK,
        &[],
        payload,
    )
}

/// Check a full frame decodes to TCP with `payload`, and every shorter prefix gives Truncated
/// (headers cut) or a Tcp segment whose captured+missing payload matches the full one.
fn check_all_prefixes(lt: u32, frame: &[u8], payload: &[u8]) {
    let full = seg(decode(lt, frame));
    assert_eq!(full.payload, payload);
    assert_eq!(full.missing, 0);
    let hdr_end = frame.len() - payload.len();
    let hdr_end = (0..=frame.len())
        .find(|&n| matches!(decode(lt, &frame[..n]), Decoded::Tcp(_)))
        .unwrap_or(hdr_end);
    for n in 0..frame.len() {
        let d = decode(lt, &frame[..n]);
        if n < hdr_end {
            assert_eq!(d, Decoded::Truncated, "lt {lt} prefix {n}");
        } else {
            let t = seg(d);
            assert_eq!(t.sport, full.sport);
            assert_eq!(t.seq, full.seq);
            assert_eq!(
                t.payload.len() as u64 + u64::from(t.missing),
                payload.len() as u64,
                "prefix {n}"
            );
            assert_eq!(t.payload, &payload[..t.payload.len()]);
        }
    }
}

#[test]
fn ethernet_ipv4_literal_with_trailer() {
    let t = seg(decode(linktype::ETHERNET, ETH_V4_MYSQL));
    assert_eq!(t.src, v4([10, 0, 0, 1]));
    assert_eq!(t.dst, v4([10, 0, 0, 2]));
    assert_eq!((t.sport, t.dport), (50000, 3306));
    assert_eq!((t.seq, t.ack), (0x01020304, 0x0a0b0c0d));
    assert_eq!(t.flags, crate::PSH | crate::ACK);
    assert!(t.has(TcpSegment::ACK) && !t.has(TcpSegment::SYN));
    assert_eq!(t.payload, b"\x09\x00\x00\x00\x03select 1");
    assert_eq!(t.missing, 0);
    check_all_prefixes(
        linktype::ETHERNET,
        ETH_V4_MYSQL,
        b"\x09\x00\x00\x00\x03select 1",
    );
}

#[test]
fn ethernet_ipv4_snaplen_cut_reports_missing() {
    let f = &ETH_V4_MYSQL[..14 + 20 + 20 + 3];
    let t = seg(decode(linktype::ETHERNET, f));
    assert_eq!(t.payload, b"\x09\x00\x00");
    assert_eq!(t.missing, 10);
    assert_eq!(t.wire_len(), 13);
}

#[test]
fn ipv4_options_and_tcp_options() {
    // Record-route-ish option padded to 8 bytes; TCP MSS + NOPs + timestamps (16 bytes).
    let ipopts = [0x07, 0x07, 0x04, 0, 0, 0, 0, 0x00];
    let tcpopts = [2, 4, 0x05, 0xb4, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    let pl = b"GET / HTTP/1.1\r\n";
    let ip = ipv4_bytes(
        6,
        &ipopts,
        0x4000,
        7,
        &tcp_bytes(1, 2, 3, 4, crate::SYN, &tcpopts, pl),
    );
    let f = eth(0x0800, &ip);
    let t = seg(decode(linktype::ETHERNET, &f));
    assert_eq!(t.src, v4([192, 168, 1, 10]));
    assert_eq!(t.flags, crate::SYN);
    assert_eq!(t.payload, pl);
    check_all_prefixes(linktype::ETHERNET, &f, pl);
}

#[test]
fn vlan_qinq_and_stacked_tags() {
    let ip = ipv4_bytes(6, &[], 0, 1, &std_tcp(b"vlan"));
    for tags in [
        &[0x8100u16][..],
        &[0x88a8, 0x8100],
        &[0x9100, 0x8100],
        &[0x8100, 0x8100, 0x8100],
    ] {
        let mut f = vec![0u8; 12];
        for tpid in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&[0x00, 0x64]); // TCI: VLAN 100
        }
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.extend_from_slice(&ip);
        check_all_prefixes(linktype::ETHERNET, &f, b"vlan");
    }
    // Too many stacked tags is malformed, not a loop.
    let mut f = vec![0u8; 12];
    for _ in 0..20 {
        f.extend_from_slice(&[0x81, 0x00, 0, 1]);
    }
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip);
    assert_eq!(decode(linktype::ETHERNET, &f), Decoded::Malformed);
}

#[test]
fn pppoe_and_mpls() {
    let ip = ipv4_bytes(6, &[], 0, 1, &std_tcp(b"ppp"));
    let mut p = vec![0x11, 0x00, 0x12, 0x34];
    p.extend_from_slice(&((ip.len() + 2) as u16).to_be_bytes());
    p.extend_from_slice(&[0x00, 0x21]);
    p.extend_from_slice(&ip);
    check_all_prefixes(linktype::ETHERNET, &eth(0x8864, &p), b"ppp");

    let mut m = vec![0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40]; // two labels, BoS on 2nd
    m.extend_from_slice(&ip);
    check_all_prefixes(linktype::ETHERNET, &eth(0x8847, &m), b"ppp");
}

#[test]
fn not_tcp_variants() {
    // ARP
    assert_eq!(
        decode(linktype::ETHERNET, &eth(0x0806, &[0; 28])),
        Decoded::NotTcp
    );
    // 802.3 length field + LLC
    assert_eq!(
        decode(linktype::ETHERNET, &eth(0x0030, &[0xaa; 48])),
        Decoded::NotTcp
    );
    // UDP and ICMP over IPv4
    let udp = ipv4_bytes(17, &[], 0, 1, &[0, 53, 0, 53, 0, 8, 0, 0]);
    assert_eq!(
        decode(linktype::ETHERNET, &eth(0x0800, &udp)),
        Decoded::NotTcp
    );
    let icmp = ipv4_bytes(1, &[], 0, 1, &[8, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(decode_ip(&icmp), Decoded::NotTcp);
    // UDP fragments are not handed to the defragmenter.
    let ufrag = ipv4_bytes(17, &[], 0x2000, 1, &[0; 16]);
    assert_eq!(decode_ip(&ufrag), Decoded::NotTcp);
    // IPv6 ESP and No Next Header
    assert_eq!(decode_ip(&ipv6_bytes(50, &[0; 16])), Decoded::NotTcp);
    assert_eq!(decode_ip(&ipv6_bytes(59, &[])), Decoded::NotTcp);
    assert_eq!(decode_ip(&ipv6_bytes(17, &[0; 8])), Decoded::NotTcp);
}

#[test]
fn malformed_variants() {
    let good = ipv4_bytes(6, &[], 0, 1, &std_tcp(b"x"));
    // Bad version nibble.
    let mut b = good.clone();
    b[0] = 0x55;
    assert_eq!(decode_ip(&b), Decoded::Malformed);
    // IHL below 5.
    let mut b = good.clone();
    b[0] = 0x44;
    assert_eq!(decode_ip(&b), Decoded::Malformed);
    // Total length shorter than the header.
    let mut b = good.clone();
    b[2..4].copy_from_slice(&10u16.to_be_bytes());
    assert_eq!(decode_ip(&b), Decoded::Malformed);
    // Total length too short for a TCP header.
    let mut b = good.clone();
    b[2..4].copy_from_slice(&30u16.to_be_bytes());
    assert_eq!(decode_ip(&b), Decoded::Malformed);
    // TCP data offset below 5 and past the segment.
    let mut b = good.clone();
    b[20 + 12] = 0x40;
    assert_eq!(decode_ip(&b), Decoded::Malformed);
    let mut b = good.clone();
    b[20 + 12] = 0xf0;
    assert_eq!(decode_ip(&b), Decoded::Malformed);
    // Version mismatch for the IPv4/IPv6 link types.
    assert_eq!(decode(linktype::IPV6, &good), Decoded::Malformed);
    assert_eq!(
        decode(linktype::IPV4, &ipv6_bytes(6, &std_tcp(b""))),
        Decoded::Malformed
    );
    // Raw IP with version 5.
    assert_eq!(decode(linktype::RAW, &[0x50; 40]), Decoded::Malformed);
    // IPv6 extension header longer than the payload length.
    assert_eq!(
        decode_ip(&ipv6_bytes(0, &[6, 5, 0, 0, 0, 0, 0, 0])),
        Decoded::Malformed
    );
    // Unsupported link.
    assert_eq!(decode(147, &good), Decoded::UnsupportedLink(147));
}

#[test]
fn tso_zero_total_length_uses_captured_length() {
    let mut b = ipv4_bytes(6, &[], 0x4000, 1, &std_tcp(&[7u8; 3000]));
    b[2..4].copy_from_slice(&[0, 0]);
    let t = seg(decode_ip(&b));
    assert_eq!(t.payload.len(), 3000);
}

#[test]
fn raw_ip_link_types() {
    let v4p = ipv4_bytes(6, &[], 0, 1, &std_tcp(b"raw4"));
    let v6p = ipv6_bytes(6, &std_tcp(b"raw6"));
    for lt in [linktype::RAW, linktype::RAW_12, linktype::RAW_14] {
        check_all_prefixes(lt, &v4p, b"raw4");
        check_all_prefixes(lt, &v6p, b"raw6");
    }
    check_all_prefixes(linktype::IPV4, &v4p, b"raw4");
    check_all_prefixes(linktype::IPV6, &v6p, b"raw6");
}

#[test]
fn null_and_loop_both_byte_orders() {
    let v4p = ipv4_bytes(6, &[], 0, 1, &std_tcp(b"lo4"));
    let v6p = ipv6_bytes(6, &std_tcp(b"lo6"));
    for lt in [linktype::NULL, linktype::LOOP] {
        for fam in [2u32] {
            for hdr in [fam.to_le_bytes(), fam.to_be_bytes()] {
                let f = [&hdr[..], &v4p].concat();
                check_all_prefixes(lt, &f, b"lo4");
            }
        }
        for fam in [10u32, 24, 28, 30] {
            for hdr in [fam.to_le_bytes(), fam.to_be_bytes()] {
                let f = [&hdr[..], &v6p].concat();
                check_all_prefixes(lt, &f, b"lo6");
            }
        }
        // AF_APPLETALK-ish: not TCP.
        assert_eq!(decode(lt, &[16, 0, 0, 0, 1, 2, 3]), Decoded::NotTcp);
    }
}

#[test]
fn linux_sll_and_sll2() {
    let v4p = ipv4_bytes(6, &[], 0, 1, &std_tcp(b"sll"));
    let v6p = ipv6_bytes(6, &std_tcp(b"sll6"));
    // SLL: packet type 0 (host), ARPHRD_ETHER, addr len 6, addr (8), protocol.
    let sll = |proto: u16, p: &[u8]| {
        let mut f = vec![0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0];
        f.extend_from_slice(&proto.to_be_bytes());
        f.extend_from_slice(p);
        f
    };
    check_all_prefixes(linktype::LINUX_SLL, &sll(0x0800, &v4p), b"sll");
    check_all_prefixes(linktype::LINUX_SLL, &sll(0x86dd, &v6p), b"sll6");
    assert_eq!(
        decode(linktype::LINUX_SLL, &sll(0x0806, &[0; 28])),
        Decoded::NotTcp
    );
    // A real SLL2 header as written by `tcpdump -i any` for a loopback packet:
    // protocol 0x0800, reserved, ifindex 1, ARPHRD_LOOPBACK (772), outgoing (4), addr len 6.
    let sll2 = |proto: u16, p: &[u8]| {
        let mut f = proto.to_be_bytes().to_vec();
        f.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0x03, 0x04, 4, 6, 0, 0, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(p);
        f
    };
    check_all_prefixes(linktype::LINUX_SLL2, &sll2(0x0800, &v4p), b"sll");
    check_all_prefixes(linktype::LINUX_SLL2, &sll2(0x86dd, &v6p), b"sll6");
    // Netlink monitor frames.
    let mut nl = sll2(0x0000, &[0; 16]);
    nl[8..10].copy_from_slice(&824u16.to_be_bytes());
    assert_eq!(decode(linktype::LINUX_SLL2, &nl), Decoded::NotTcp);
}

#[test]
fn ipv6_extension_headers() {
    let tcp = std_tcp(b"ext");
    // Hop-by-hop (8) -> routing (type 0 len 2 => 24 bytes) -> dest opts (8) -> AH (len 4 => 24) -> TCP
    let mut chain = vec![43, 0, 1, 4, 0, 0, 0, 0];
    chain.extend_from_slice(&[60, 2, 0, 0, 0, 0, 0, 0]);
    chain.extend_from_slice(&[0; 16]);
    chain.extend_from_slice(&[51, 0, 1, 4, 0, 0, 0, 0]);
    chain.extend_from_slice(&[6, 4, 0, 0, 0, 0, 0, 1]);
    chain.extend_from_slice(&[0; 16]);
    chain.extend_from_slice(&tcp);
    let p = ipv6_bytes(0, &chain);
    let t = seg(decode_ip(&p));
    assert_eq!(t.src, v6(1));
    assert_eq!(t.dst, v6(2));
    check_all_prefixes(linktype::RAW, &p, b"ext");
    check_all_prefixes(linktype::ETHERNET, &eth(0x86dd, &p), b"ext");
    // Atomic fragment: fragment header with offset 0 and M=0 is a whole packet.
    let mut atomic = vec![6, 0, 0, 0, 0, 0, 0, 9];
    atomic.extend_from_slice(&tcp);
    assert_eq!(seg(decode_ip(&ipv6_bytes(44, &atomic))).payload, b"ext");
}

fn frag(d: Decoded<'_>) -> Fragment<'_> {
    match d {
        Decoded::Fragment(f) => f,
        other => panic!("expected Fragment, got {other:?}"),
    }
}

#[test]
fn ipv4_fragments_reassemble_in_any_order() {
    let payload: Vec<u8> = (0..100u8).collect();
    let whole_tcp = std_tcp(&payload); // 120 bytes
    let opts = [1, 1, 1, 0]; // NOP NOP NOP EOL
    let pieces = [(0usize, 48usize, true), (48, 96, true), (96, 120, false)];
    let frames: Vec<Vec<u8>> = pieces
        .iter()
        .map(|&(s, e, more)| {
            let fo = (s / 8) as u16 | if more { 0x2000 } else { 0 };
            ipv4_bytes(6, &opts, fo, 0x4242, &whole_tcp[s..e])
        })
        .collect();
    for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
        let mut d = Defragmenter::new();
        let mut out = None;
        for (i, &k) in order.iter().enumerate() {
            let f = frag(decode(linktype::RAW, &frames[k]));
            assert_eq!(f.id, 0x4242);
            let r = d.push(&f, 1_000 + i as u64);
            if i < 2 {
                assert!(r.is_none());
            } else {
                out = r;
            }
        }
        let whole = out.expect("reassembled");
        let t = seg(decode_ip(&whole));
        assert_eq!(t.payload, &payload[..]);
        assert_eq!(t.dport, 5432);
        // Reassembled header: no fragment bits, right length, valid checksum.
        assert_eq!(&whole[6..8], &[0, 0]);
        assert_eq!(
            u16::from_be_bytes([whole[2], whole[3]]) as usize,
            whole.len()
        );
        assert_eq!(super::defrag_checksum_for_tests(&whole[..24]), 0);
        let s = d.stats();
        assert_eq!(
            (s.fragments, s.reassembled, s.dropped(), s.in_progress),
            (3, 1, 0, 0)
        );
        assert_eq!(d.held_bytes(), 0);
    }
}

#[test]
fn ipv6_fragments_reassemble() {
    let payload: Vec<u8> = (0..64u8).collect();
    let whole_tcp = std_tcp(&payload); // 84 bytes
    // Hop-by-hop before the fragment header: part of the unfragmentable part.
    let mk = |s: usize, e: usize, more: bool| {
        let mut x = vec![44, 0, 0, 0, 0, 0, 0, 0];
        let fo = ((s / 8) as u16) << 3 | u16::from(more);
        x.extend_from_slice(&[6, 0]);
        x.extend_from_slice(&fo.to_be_bytes());
        x.extend_from_slice(&0xdeadbeefu32.to_be_bytes());
        x.extend_from_slice(&whole_tcp[s..e]);
        ipv6_bytes(0, &x)
    };
    let a = mk(0, 40, true);
    let b = mk(40, 84, false);
    let mut d = Defragmenter::new();
    let fb = frag(decode(linktype::RAW, &b));
    assert_eq!(
        (fb.id, fb.offset, fb.more, fb.protocol),
        (0xdeadbeef, 40, false, 6)
    );
    assert!(fb.is_ipv6());
    assert!(d.push(&fb, 5).is_none());
    let whole = d.push(&frag(decode_ip(&a)), 6).expect("reassembled");
    let t = seg(decode_ip(&whole));
    assert_eq!(t.payload, &payload[..]);
    assert_eq!(t.src, v6(1));
    // Truncated fragment (snaplen) cannot be reassembled: reported as Truncated.
    assert_eq!(decode_ip(&a[..a.len() - 1]), Decoded::Truncated);
}

#[test]
fn defrag_overlap_timeout_and_limits() {
    let body = [9u8; 64];
    let mk = |off: u16, more: bool, id: u16, fill: u8| {
        let mut b = body;
        b.fill(fill);
        ipv4_bytes(
            6,
            &[],
            (off / 8) | if more { 0x2000 } else { 0 },
            id,
            &b[..32],
        )
    };
    // Identical overlap is fine, differing overlap drops the datagram.
    let mut d = Defragmenter::new();
    let f1 = mk(0, true, 1, 1);
    let f1b = mk(0, true, 1, 2);
    assert!(d.push(&frag(decode_ip(&f1)), 0).is_none());
    assert!(d.push(&frag(decode_ip(&f1)), 0).is_none());
    assert!(d.push(&frag(decode_ip(&f1b)), 0).is_none());
    assert_eq!(d.stats().dropped_overlap, 1);
    assert_eq!(d.stats().in_progress, 0);

    // Timeout on capture time.
    let mut d = Defragmenter::new();
    assert!(d.push(&frag(decode_ip(&mk(0, true, 2, 1))), 0).is_none());
    let late = 31_000_000_000;
    assert!(
        d.push(&frag(decode_ip(&mk(32, false, 2, 1))), late)
            .is_none()
    );
    assert_eq!(d.stats().dropped_timeout, 1);
    assert_eq!(d.stats().in_progress, 1);

    // Datagram limit: the oldest goes.
    let mut d = Defragmenter::with_limits(crate::DefragLimits {
        max_datagrams: 4,
        ..Default::default()
    });
    for id in 0..10u16 {
        assert!(
            d.push(&frag(decode_ip(&mk(0, true, id, 1))), u64::from(id))
                .is_none()
        );
    }
    assert_eq!(d.stats().in_progress, 4);
    assert_eq!(d.stats().dropped_overflow, 6);
    // The newest ones survive and complete.
    assert!(d.push(&frag(decode_ip(&mk(32, false, 9, 1))), 20).is_some());

    // Byte limit.
    let mut d = Defragmenter::with_limits(crate::DefragLimits {
        max_bytes: 200,
        ..Default::default()
    });
    for id in 0..10u16 {
        d.push(&frag(decode_ip(&mk(0, true, id, 1))), 0);
        assert!(d.held_bytes() <= 200);
    }
    assert!(d.stats().dropped_overflow > 0);

    // Too many disjoint pieces (every other 8-byte slot): dropped, not quadratic.
    let mut d = Defragmenter::new();
    for i in 0..400u16 {
        let b = ipv4_bytes(6, &[], (i * 2) | 0x2000, 77, &[1u8; 8]);
        d.push(&frag(decode_ip(&b)), 0);
    }
    assert_eq!(d.stats().dropped_overflow, 1);
    assert!(d.stats().in_progress <= 1);

    // Two different ends.
    let mut d = Defragmenter::new();
    d.push(&frag(decode_ip(&mk(32, false, 3, 1))), 0);
    d.push(&frag(decode_ip(&mk(64, false, 3, 1))), 0);
    assert_eq!(d.stats().dropped_invalid, 1);
}

#[test]
fn fragment_rules() {
    // Non-last fragment whose length is not a multiple of 8.
    let b = ipv4_bytes(6, &[], 0x2000, 1, &[0u8; 30]);
    assert_eq!(decode_ip(&b), Decoded::Malformed);
    // Fragment reaching past 65535 bytes.
    let b = ipv4_bytes(6, &[], 0x1fff, 1, &[0u8; 64]);
    assert_eq!(decode_ip(&b), Decoded::Malformed);
    // IPv4 fragment cut by snaplen.
    let b = ipv4_bytes(6, &[], 0x2000, 1, &[0u8; 64]);
    assert_eq!(decode_ip(&b[..70]), Decoded::Truncated);
    assert!(matches!(decode_ip(&b), Decoded::Fragment(_)));
}

#[test]
fn empty_and_tiny_inputs_never_panic() {
    for lt in [0, 1, 12, 14, 101, 108, 113, 228, 229, 276] {
        for n in 0..64 {
            let buf = vec![0xffu8; n];
            let _ = decode(lt, &buf);
            let buf = vec![0u8; n];
            let _ = decode(lt, &buf);
        }
        assert_eq!(decode(lt, &[]), Decoded::Truncated, "lt {lt}");
    }
}
