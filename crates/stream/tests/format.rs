//! The record format of `--write` files: encode -> decode round trips; arbitrary bytes
//! never panic and fail with a one-line error.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use proptest::prelude::*;
use stream::{Direction, Endpoint, Process, Record, StreamOpen, decode, encode};

fn endpoint() -> impl Strategy<Value = Endpoint> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(a, p)| Endpoint::Ip(SocketAddr::new(IpAddr::from(a), p))),
        (any::<[u8; 16]>(), any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(a, p, f, s)| {
            Endpoint::Ip(std::net::SocketAddrV6::new(a.into(), p, f, s).into())
        }),
        ".{0,120}".prop_map(|s| Endpoint::Unix(Arc::from(s))),
    ]
}

fn open() -> impl Strategy<Value = StreamOpen> {
    (
        any::<u64>(),
        any::<u64>(),
        endpoint(),
        endpoint(),
        proptest::option::of((any::<u32>(), ".{0,20}")),
        any::<bool>(),
    )
        .prop_map(|(conn, ts_ns, client, server, peer, saw_open)| StreamOpen {
            conn,
            ts_ns,
            client,
            server,
            peer: peer.map(|(pid, c)| {
                Arc::new(Process {
                    pid,
                    comm: Arc::from(c),
                })
            }),
            saw_open,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn open_round_trips(o in open()) {
        let mut b = Vec::new();
        encode(&Record::Open(o.clone()), &mut b);
        prop_assert_eq!(decode(&b), Ok(Record::Open(o)));
    }

    #[test]
    fn data_and_close_round_trip(
        conn in any::<u64>(), ts_ns in any::<u64>(), to_client in any::<bool>(),
        offset in any::<u64>(), extra in 0u64..1 << 40, tls in any::<bool>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..2000),
    ) {
        let dir = if to_client { Direction::ToClient } else { Direction::ToServer };
        let len = bytes.len() as u64 + extra;
        let r = Record::Data { conn, dir, ts_ns, offset, len, bytes: &bytes, tls };
        let mut b = Vec::new();
        encode(&r, &mut b);
        prop_assert_eq!(decode(&b), Ok(r));
        let c = Record::Close { conn, ts_ns };
        b.clear();
        encode(&c, &mut b);
        prop_assert_eq!(decode(&b), Ok(c));
    }

    /// Every strict prefix of an Open or Close fails cleanly, as do arbitrary bytes.
    #[test]
    fn damaged_bytes_fail_with_one_line(
        o in open(), junk in proptest::collection::vec(any::<u8>(), 0..200), flip in any::<usize>(),
    ) {
        let mut b = Vec::new();
        encode(&Record::Open(o), &mut b);
        for n in 0..b.len() {
            let e = decode(&b[..n]).unwrap_err().to_string();
            prop_assert!(!e.contains('\n'));
        }
        let mut bad = b.clone();
        let i = flip % bad.len();
        bad[i] ^= 0xA5;
        let _ = decode(&bad);
        bad.extend_from_slice(&junk);
        let _ = decode(&bad);
        if let Err(e) = decode(&junk) {
            prop_assert!(!e.to_string().contains('\n'));
        }
        let mut with_header = vec![0xDB, 1];
        with_header.extend_from_slice(&junk);
        let _ = decode(&with_header);
    }
}

#[test]
fn errors_say_what_and_where() {
    assert_eq!(
        decode(b"").unwrap_err().to_string(),
        "stream record: magic at byte 0"
    );
    assert_eq!(
        decode(&[0xDB, 9]).unwrap_err().to_string(),
        "stream record: unsupported version at byte 1"
    );
    let mut b = Vec::new();
    encode(&Record::Close { conn: 1, ts_ns: 2 }, &mut b);
    b.push(0);
    assert_eq!(
        decode(&b).unwrap_err().to_string(),
        "stream record: trailing bytes at byte 19"
    );
    // A Data record whose length is below its bytes is refused.
    let mut d = Vec::new();
    let r = Record::Data {
        conn: 1,
        dir: Direction::ToServer,
        ts_ns: 2,
        offset: 0,
        len: 3,
        bytes: b"abc",
        tls: false,
    };
    encode(&r, &mut d);
    d.push(b'd');
    assert_eq!(
        decode(&d).unwrap_err().what,
        "length shorter than the bytes"
    );
}

#[test]
fn the_layout_is_the_documented_one() {
    let mut b = Vec::new();
    let r = Record::Data {
        conn: 0x0102,
        dir: Direction::ToClient,
        ts_ns: 3,
        offset: 4,
        len: 6,
        bytes: b"hi",
        tls: true,
    };
    encode(&r, &mut b);
    let mut want = vec![0xDB, 1, 2];
    want.extend_from_slice(&0x0102u64.to_le_bytes());
    want.extend_from_slice(&3u64.to_le_bytes());
    want.extend_from_slice(&[1, 1]);
    want.extend_from_slice(&4u64.to_le_bytes());
    want.extend_from_slice(&6u64.to_le_bytes());
    want.extend_from_slice(b"hi");
    assert_eq!(b, want);
    let mut u = Vec::new();
    let o = StreamOpen {
        conn: 1,
        ts_ns: 2,
        client: Endpoint::Unix(Arc::from("")),
        server: Endpoint::Unix(Arc::from("/tmp/s")),
        peer: Some(Arc::new(Process {
            pid: 5,
            comm: Arc::from("psql"),
        })),
        saw_open: true,
    };
    encode(&Record::Open(o), &mut u);
    let mut want = vec![0xDB, 1, 1];
    want.extend_from_slice(&1u64.to_le_bytes());
    want.extend_from_slice(&2u64.to_le_bytes());
    want.extend_from_slice(&[3, b'u', 0, 0, b'u', 6, 0]);
    want.extend_from_slice(b"/tmp/s");
    want.extend_from_slice(&5u32.to_le_bytes());
    want.extend_from_slice(&[4, 0]);
    want.extend_from_slice(b"psql");
    assert_eq!(u, want);
}
