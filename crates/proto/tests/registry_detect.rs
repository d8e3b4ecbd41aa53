//! `registry::detect` keeps the priority the pipeline's detection always had: greeting or
//! startup of a captured opening, then a Redis or MongoDB request anywhere, then the MySQL and
//! PostgreSQL mid-stream probes. Checked against that order written out by hand, on messages of
//! every protocol, their concatenations, cuts and mutations.

use proptest::prelude::*;
use proto::registry::{self, REGISTRY};
use proto::{Direction, Protocol, mongodb, mysql, postgres, redis};

/// The detection order as the pipeline spelled it before the registry (the oracle).
fn by_hand(dir: Direction, data: &[u8], opening: bool) -> Option<Protocol> {
    match dir {
        Direction::ToClient if opening && mysql::looks_like_server_greeting(data) => {
            Some(Protocol::Mysql)
        }
        Direction::ToServer if opening && postgres::looks_like_startup(data) => {
            Some(Protocol::Postgres)
        }
        Direction::ToServer if redis::looks_like_request(data) => Some(Protocol::Redis),
        Direction::ToServer if mongodb::looks_like_message(data) => Some(Protocol::Mongodb),
        Direction::ToServer if !opening && mysql::looks_like_client_command(data) => {
            Some(Protocol::Mysql)
        }
        Direction::ToServer if !opening && postgres::looks_like_client_message(data) => {
            Some(Protocol::Postgres)
        }
        _ => None,
    }
}

fn mongo_ping() -> Vec<u8> {
    let mut body = vec![0, 0, 0, 0, 0];
    body.extend(
        mongodb::bson::build::Doc::new()
            .i32("ping", 1)
            .str("$db", "admin")
            .bytes(),
    );
    let mut m = Vec::new();
    mongodb::wire::put_message(&mut m, 7, 0, mongodb::wire::op::MSG, &body);
    m
}

/// Messages each of which some recognizer accepts, and some that none should.
fn corpus() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = vec![
        b"\x0a\x00\x00\x00\x0a8.0.1\x00\x01\x00\x00\x00abcdefgh\x00".to_vec(),
        b"\x17\x00\x00\x00\xff\x10\x04Too many connections".to_vec(),
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f".to_vec(),
        b"\x00\x00\x00\x10\x00\x03\x00\x00user\x00bob\x00\x00".to_vec(),
        b"*1\r\n$4\r\nPING\r\n".to_vec(),
        b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n".to_vec(),
        b"get foo\n".to_vec(),
        b"\x09\x00\x00\x00\x03SELECT 1".to_vec(),
        b"\x01\x00\x00\x00\x0e".to_vec(),
        b"Q\x00\x00\x00\x0dSELECT 1\x00".to_vec(),
        b"S\x00\x00\x00\x04".to_vec(),
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(),
        Vec::new(),
    ];
    v.push(mongo_ping());
    let mut bind = b"B\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec();
    bind.extend(b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00S\x00\x00\x00\x04");
    v.push(bind);
    v
}

fn check(data: &[u8]) {
    for dir in [Direction::ToServer, Direction::ToClient] {
        // The after-TLS detection never panics, and takes MySQL only for a login packet
        // (sequence id 2) that the client sent.
        let after = registry::detect_after_tls(dir, data);
        assert!(
            after != Some(Protocol::Mysql)
                || (dir == Direction::ToServer && data.get(3) == Some(&2)),
            "{data:?}"
        );
        for opening in [true, false] {
            assert_eq!(
                registry::detect(dir, data, opening),
                by_hand(dir, data, opening),
                "{dir:?} opening={opening} {data:?}"
            );
        }
    }
}

#[test]
fn the_corpus_is_recognised_as_before() {
    let corpus = corpus();
    let mut seen = std::collections::BTreeSet::new();
    for a in &corpus {
        check(a);
        for (dir, opening) in [
            (Direction::ToServer, true),
            (Direction::ToServer, false),
            (Direction::ToClient, true),
        ] {
            seen.extend(
                registry::detect(dir, a, opening).map(|p| (p, dir == Direction::ToServer, opening)),
            );
        }
        for b in &corpus {
            let mut ab = a.clone();
            ab.extend_from_slice(b);
            check(&ab);
        }
        for cut in 0..a.len() {
            check(&a[..cut]);
        }
    }
    // Every recognizer of every protocol accepted something: the comparison is not vacuous.
    let expected = [
        (Protocol::Mysql, false, true),
        (Protocol::Mysql, true, false),
        (Protocol::Postgres, true, true),
        (Protocol::Postgres, true, false),
        (Protocol::Mongodb, true, true),
        (Protocol::Mongodb, true, false),
        (Protocol::Redis, true, true),
        (Protocol::Redis, true, false),
    ];
    assert_eq!(seen, expected.into_iter().collect());
}

#[test]
fn the_registry_holds_the_protocols_of_the_oracle() {
    // The oracle names four protocols: the registry must hold exactly these.
    let mut names: Vec<_> = REGISTRY.iter().map(|s| s.protocol).collect();
    names.sort();
    assert_eq!(
        names,
        [
            Protocol::Mysql,
            Protocol::Postgres,
            Protocol::Mongodb,
            Protocol::Redis
        ]
    );
}

proptest! {
    #[test]
    fn mutations_are_recognised_as_before(
        pick in 0usize..16,
        pick2 in 0usize..16,
        flips in proptest::collection::vec((0usize..64, any::<u8>()), 0..4),
        cut in 0usize..80,
    ) {
        let corpus = corpus();
        let mut data = corpus[pick % corpus.len()].clone();
        data.extend_from_slice(&corpus[pick2 % corpus.len()]);
        for (i, byte) in flips {
            if let Some(b) = data.get_mut(i) {
                *b = byte;
            }
        }
        data.truncate(cut);
        check(&data);
    }

    #[test]
    fn random_bytes_are_recognised_as_before(data in proptest::collection::vec(any::<u8>(), 0..64)) {
        check(&data);
    }
}
