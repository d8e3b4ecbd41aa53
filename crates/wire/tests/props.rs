//! Property tests: random and mutated bytes never panic; random valid packets built with
//! etherparse decode to the same addresses, ports, sequence numbers and payload as etherparse sees.

use std::net::IpAddr;

use etherparse::{
    LinuxSllPacketType, NetSlice, PacketBuilder, SlicedPacket, TcpOptionElement, TransportSlice,
    VlanId,
};
use proptest::prelude::*;
use wire::{Decoded, Defragmenter, decode, decode_ip, linktype};

const LINKS: [u32; 11] = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276, 999];

/// Decode and check the invariants every result must hold.
fn decode_checked(lt: u32, frame: &[u8]) -> Decoded<'_> {
    let d = decode(lt, frame);
    let range = frame.as_ptr_range();
    match d {
        Decoded::Tcp(t) => {
            let pr = t.payload.as_ptr_range();
            assert!(t.payload.is_empty() || (range.start <= pr.start && pr.end <= range.end));
        }
        Decoded::Fragment(f) => {
            assert!(f.offset as usize + f.data.len() <= 65535);
            let mut d = Defragmenter::new();
            if let Some(whole) = d.push(&f, 0) {
                let _ = decode_ip(&whole);
            }
        }
        _ => {}
    }
    d
}

#[derive(Debug, Clone)]
struct Spec {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    fin: bool,
    psh: bool,
    rst: bool,
    mss: Option<u16>,
    ts: Option<(u32, u32)>,
    vlans: u8,
    pad: usize,
    payload: Vec<u8>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (
            any::<bool>(),
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
        ),
        (
            any::<Option<u32>>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            any::<Option<u16>>(),
            any::<Option<(u32, u32)>>(),
            0u8..3,
            0usize..12,
        ),
        proptest::collection::vec(any::<u8>(), 0..1600),
    )
        .prop_map(
            |(
                (v6, src, dst, sport, dport, seq),
                (ack, syn, fin, psh, rst),
                (mss, ts, vlans, pad),
                payload,
            )| Spec {
                v6,
                src,
                dst,
                sport,
                dport,
                seq,
                ack,
                syn,
                fin,
                psh,
                rst,
                mss,
                ts,
                vlans,
                pad,
                payload,
            },
        )
}

/// Build the Ethernet frame for `s` with etherparse (plus `s.pad` trailer bytes).
fn build_eth(s: &Spec) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]);
    let v1 = VlanId::try_new(100).unwrap();
    let v2 = VlanId::try_new(200).unwrap();
    let src4: [u8; 4] = s.src[..4].try_into().unwrap();
    let dst4: [u8; 4] = s.dst[..4].try_into().unwrap();
    let ip = match (s.vlans, s.v6) {
        (0, false) => eth.ipv4(src4, dst4, 64),
        (0, true) => eth.ipv6(s.src, s.dst, 64),
        (1, false) => eth.single_vlan(v1).ipv4(src4, dst4, 64),
        (1, true) => eth.single_vlan(v1).ipv6(s.src, s.dst, 64),
        (_, false) => eth.double_vlan(v1, v2).ipv4(src4, dst4, 64),
        (_, true) => eth.double_vlan(v1, v2).ipv6(s.src, s.dst, 64),
    };
    let mut tcp = ip.tcp(s.sport, s.dport, s.seq, 65535);
    if let Some(a) = s.ack {
        tcp = tcp.ack(a);
    }
    if s.syn {
        tcp = tcp.syn();
    }
    if s.fin {
        tcp = tcp.fin();
    }
    if s.psh {
        tcp = tcp.psh();
    }
    if s.rst {
        tcp = tcp.rst();
    }
    let mut opts = Vec::new();
    if let Some(m) = s.mss {
        opts.push(TcpOptionElement::MaximumSegmentSize(m));
    }
    if let Some((a, b)) = s.ts {
        opts.push(TcpOptionElement::Noop);
        opts.push(TcpOptionElement::Noop);
        opts.push(TcpOptionElement::Timestamp(a, b));
    }
    if !opts.is_empty() {
        tcp = tcp.options(&opts).unwrap();
    }
    let mut out = Vec::new();
    tcp.write(&mut out, &s.payload).unwrap();
    out.extend(std::iter::repeat_n(0xee, s.pad));
    out
}

fn addrs(s: &Spec) -> (IpAddr, IpAddr) {
    if s.v6 {
        (IpAddr::from(s.src), IpAddr::from(s.dst))
    } else {
        let a: [u8; 4] = s.src[..4].try_into().unwrap();
        let b: [u8; 4] = s.dst[..4].try_into().unwrap();
        (IpAddr::from(a), IpAddr::from(b))
    }
}

/// What etherparse sees: (src, dst, sport, dport, seq, ack, payload).
fn etherparse_view(p: &SlicedPacket<'_>) -> (IpAddr, IpAddr, u16, u16, u32, u32, Vec<u8>) {
    let (src, dst) = match p.net.as_ref().unwrap() {
        NetSlice::Ipv4(x) => (
            IpAddr::V4(x.header().source_addr()),
            IpAddr::V4(x.header().destination_addr()),
        ),
        NetSlice::Ipv6(x) => (
            IpAddr::V6(x.header().source_addr()),
            IpAddr::V6(x.header().destination_addr()),
        ),
        NetSlice::Arp(_) => panic!("arp"),
    };
    let Some(TransportSlice::Tcp(t)) = p.transport.as_ref() else {
        panic!("no tcp")
    };
    (
        src,
        dst,
        t.source_port(),
        t.destination_port(),
        t.sequence_number(),
        t.acknowledgment_number(),
        t.payload().to_vec(),
    )
}

fn check_same(lt: u32, frame: &[u8], s: &Spec, theirs: &SlicedPacket<'_>) {
    let Decoded::Tcp(t) = decode(lt, frame) else {
        panic!("lt {lt}: {:?}", decode(lt, frame));
    };
    let (src, dst) = addrs(s);
    assert_eq!((t.src, t.dst), (src, dst));
    assert_eq!((t.sport, t.dport, t.seq), (s.sport, s.dport, s.seq));
    assert_eq!(t.ack, s.ack.unwrap_or(0));
    assert_eq!(t.payload, &s.payload[..]);
    assert_eq!(t.missing, 0);
    let want_flags = [
        (s.fin, wire::FIN),
        (s.syn, wire::SYN),
        (s.rst, wire::RST),
        (s.psh, wire::PSH),
        (s.ack.is_some(), wire::ACK),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0u8, |acc, (_, bit)| acc | bit);
    assert_eq!(t.flags, want_flags);
    let ep = etherparse_view(theirs);
    assert_eq!(
        ep,
        (
            t.src,
            t.dst,
            t.sport,
            t.dport,
            t.seq,
            t.ack,
            t.payload.to_vec()
        )
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(lt in proptest::sample::select(&LINKS[..]),
                                bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        decode_checked(lt, &bytes);
        let _ = decode_ip(&bytes);
    }

    /// Random bytes behind plausible headers reach the deeper parsers.
    #[test]
    fn random_bytes_behind_headers_never_panic(v6 in any::<bool>(), proto in any::<u8>(),
                                               bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut p = bytes.clone();
        if v6 {
            p.splice(0..0, [0x60, 0, 0, 0, 0, (bytes.len() as u8), proto, 64]);
            p.splice(8..8, [0u8; 32]);
        } else {
            p.splice(0..0, [0x45, 0, 0, (20 + bytes.len()) as u8, 0, 0, 0, 0, 64, proto, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        }
        let _ = decode_ip(&p);
        let mut f = vec![0u8; 12];
        f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        f.extend_from_slice(&p);
        decode_checked(linktype::ETHERNET, &f);
    }

    #[test]
    fn matches_etherparse_ethernet(s in spec()) {
        let frame = build_eth(&s);
        let theirs = SlicedPacket::from_ethernet(&frame).unwrap();
        check_same(linktype::ETHERNET, &frame, &s, &theirs);
    }

    #[test]
    fn matches_etherparse_raw_null_sll(s in spec()) {
        let s = Spec { vlans: 0, pad: 0, ..s };
        let frame = build_eth(&s);
        let ip = &frame[14..];
        let theirs = SlicedPacket::from_ip(ip).unwrap();
        for lt in [linktype::RAW, linktype::RAW_12, linktype::RAW_14,
                   if s.v6 { linktype::IPV6 } else { linktype::IPV4 }] {
            check_same(lt, ip, &s, &theirs);
        }
        let fam: u32 = if s.v6 { 30 } else { 2 };
        for (lt, hdr) in [(linktype::NULL, fam.to_le_bytes()), (linktype::LOOP, fam.to_be_bytes())] {
            check_same(lt, &[&hdr[..], ip].concat(), &s, &theirs);
        }
        // SLL through etherparse's own builder; SLL2 by hand.
        let src4: [u8; 4] = s.src[..4].try_into().unwrap();
        let dst4: [u8; 4] = s.dst[..4].try_into().unwrap();
        let b = PacketBuilder::linux_sll(LinuxSllPacketType::HOST, 6, [1, 2, 3, 4, 5, 6, 0, 0]);
        let b = if s.v6 { b.ipv6(s.src, s.dst, 9) } else { b.ipv4(src4, dst4, 9) };
        let mut sll = Vec::new();
        let mut tcp = b.tcp(s.sport, s.dport, s.seq, 1000);
        if let Some(a) = s.ack { tcp = tcp.ack(a); }
        if s.syn { tcp = tcp.syn(); }
        if s.fin { tcp = tcp.fin(); }
        if s.psh { tcp = tcp.psh(); }
        if s.rst { tcp = tcp.rst(); }
        tcp.write(&mut sll, &s.payload).unwrap();
        let theirs_sll = SlicedPacket::from_linux_sll(&sll).unwrap();
        check_same(linktype::LINUX_SLL, &sll, &s, &theirs_sll);
        let mut sll2 = if s.v6 { vec![0x86, 0xdd] } else { vec![0x08, 0x00] };
        sll2.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0]);
        sll2.extend_from_slice(ip);
        check_same(linktype::LINUX_SLL2, &sll2, &s, &theirs);
    }

    #[test]
    fn mutated_valid_frames_never_panic(s in spec(),
                                        muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
                                        cut in any::<prop::sample::Index>()) {
        let mut frame = build_eth(&s);
        for (i, b) in &muts {
            let at = i.index(frame.len());
            frame[at] = *b;
        }
        let n = cut.index(frame.len() + 1);
        for lt in [linktype::ETHERNET, linktype::RAW, linktype::LINUX_SLL2, linktype::NULL] {
            decode_checked(lt, &frame[..n]);
            decode_checked(lt, &frame);
        }
    }

    /// Snaplen cuts of a valid frame: Truncated inside the headers, Tcp with `missing` after.
    #[test]
    fn snaplen_cuts_are_truncated_or_missing(s in spec(), cut in any::<prop::sample::Index>()) {
        let s = Spec { pad: 0, ..s };
        let frame = build_eth(&s);
        let n = cut.index(frame.len() + 1);
        let hdr = frame.len() - s.payload.len();
        match decode(linktype::ETHERNET, &frame[..n]) {
            Decoded::Truncated => prop_assert!(n < hdr),
            Decoded::Tcp(t) => {
                prop_assert!(n >= hdr);
                prop_assert_eq!(t.payload, &s.payload[..n - hdr]);
                prop_assert_eq!(t.missing as usize, frame.len() - n);
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }

    /// Fragments pushed in any order reassemble to the original.
    #[test]
    fn defrag_any_order(payload in proptest::collection::vec(any::<u8>(), 1..3000),
                        chunk in 1usize..64, seed in any::<u64>(), v6 in any::<bool>()) {
        let s = Spec {
            v6, src: [1; 16], dst: [2; 16], sport: 1, dport: 2, seq: 3, ack: None, syn: false, fin: false,
            psh: true, rst: false, mss: None, ts: None, vlans: 0, pad: 0, payload: payload.clone(),
        };
        let frame = build_eth(&s);
        let ip = &frame[14..];
        let hl = if v6 { 40 } else { 20 };
        let (hdr, body) = ip.split_at(hl);
        let step = chunk * 8;
        let mut frags: Vec<Vec<u8>> = body
            .chunks(step)
            .enumerate()
            .map(|(i, c)| {
                let off = i * step;
                let more = off + c.len() < body.len();
                if v6 {
                    let mut h = hdr.to_vec();
                    let nh = h[6];
                    h[6] = 44;
                    h[4..6].copy_from_slice(&((8 + c.len()) as u16).to_be_bytes());
                    h.extend_from_slice(&[nh, 0]);
                    h.extend_from_slice(&(((off / 8) as u16) << 3 | u16::from(more)).to_be_bytes());
                    h.extend_from_slice(&77u32.to_be_bytes());
                    h.extend_from_slice(c);
                    h
                } else {
                    let mut h = hdr.to_vec();
                    h[2..4].copy_from_slice(&((20 + c.len()) as u16).to_be_bytes());
                    let fo = (off / 8) as u16 | if more { 0x2000 } else { 0 };
                    h[6..8].copy_from_slice(&fo.to_be_bytes());
                    h.extend_from_slice(c);
                    h
                }
            })
            .collect();
        // Deterministic shuffle from the seed.
        let mut x = seed | 1;
        for i in (1..frags.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            frags.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut d = Defragmenter::new();
        let mut out = None;
        let n = frags.len();
        for (i, f) in frags.iter().enumerate() {
            let r = match decode_ip(f) {
                Decoded::Fragment(fr) => d.push(&fr, i as u64),
                Decoded::Tcp(_) if n == 1 => None,
                other => { prop_assert!(false, "{:?}", other); None }
            };
            if i + 1 < n { prop_assert!(r.is_none()); } else { out = r; }
        }
        if n > 1 {
            let whole = out.unwrap();
            let Decoded::Tcp(t) = decode_ip(&whole) else { panic!("not tcp") };
            prop_assert_eq!(t.payload, &payload[..]);
        }
    }
}
