//! Real conversations (captured from MariaDB and PostgreSQL clients, tests/data) as a
//! TLS-reading source would deliver them: the pre-TLS bytes in plaintext then `start_tls`,
//! or only what follows TLS (`after_tls`). The events and health must be those of the
//! plaintext conversation: the bytes inside TLS are the same protocol.

use proto::registry::{Protocol, detect_after_tls};
use proto::testing::{Rng, Transcript, parse_hex_transcript, render};
use proto::{ConnMeta, Direction, Health, Progress, Session, SessionConfig, VecSink};

const C: Direction = Direction::ToServer;
const S: Direction = Direction::ToClient;

const MYSQL: [&str; 5] = [
    include_str!("data/mysql/pymysql_text.txt"),
    include_str!("data/mysql/mysqldb_compressed.txt"),
    include_str!("data/mysql/raw_prepared_mariadb.txt"),
    include_str!("data/mysql/raw_prepared_eof.txt"),
    include_str!("data/mysql/mariadb_cli.txt"),
];

const POSTGRES: [&str; 5] = [
    include_str!("data/postgres/psql_file.txt"),
    include_str!("data/postgres/psql_multi.txt"),
    include_str!("data/postgres/psycopg2_simple.txt"),
    include_str!("data/postgres/psycopg3_extended.txt"),
    include_str!("data/postgres/pgbench_extended_1.txt"),
];

const CLIENT_SSL: u8 = 0x08; // bit 11: the second byte of the capabilities

fn meta(port: u16, after_tls: bool) -> ConnMeta {
    ConnMeta {
        after_tls,
        ..proto::testing::loopback_meta(port, true)
    }
}

/// Feeds `t` in random pieces (whole segments with `seed` 0); returns the last progress.
fn feed(
    s: &mut dyn Session,
    t: &[(Direction, Vec<u8>, u64)],
    seed: u64,
    sink: &mut VecSink,
) -> Progress {
    let mut rng = Rng::new(seed);
    let mut p = Progress::Continue;
    for (d, bytes, ts) in t {
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = if seed == 0 {
                rest.len()
            } else {
                1 + rng.below(300) as usize
            };
            let (a, b) = rest.split_at(n.min(rest.len()));
            p = s.feed(*d, a, *ts, sink);
            rest = b;
        }
    }
    p
}

fn run(s: &mut dyn Session, t: &Transcript, seed: u64) -> VecSink {
    let mut sink = VecSink::default();
    feed(s, t, seed, &mut sink);
    s.close(u64::MAX / 2, &mut sink);
    sink
}

/// The MySQL transcript as inside TLS: the handshake response (the first client packet)
/// with CLIENT_SSL set and sequence id 2; and the 32-byte SSL request that precedes it.
fn mysql_tls(t: &Transcript) -> (Vec<u8>, Transcript) {
    assert_eq!(
        (t[0].0, t[1].0),
        (S, C),
        "greeting, then the handshake response"
    );
    let mut resp = t[1].1.clone();
    let len = usize::from(resp[0]) | usize::from(resp[1]) << 8 | usize::from(resp[2]) << 16;
    assert!(len > 32 && resp.len() >= 4 + len && resp[3] == 1);
    resp[3] = 2;
    resp[5] |= CLIENT_SSL;
    let mut ssl = vec![32, 0, 0, 1];
    ssl.extend_from_slice(&resp[4..36]);
    let mut inside = vec![(C, resp, t[1].2)];
    inside.extend_from_slice(&t[2..]);
    (ssl, inside)
}

#[test]
fn mysql_real_conversations_read_inside_tls() {
    let make =
        |after_tls| proto::mysql::new_session(meta(3306, after_tls), SessionConfig::default());
    for (i, text) in MYSQL.iter().enumerate() {
        let t = parse_hex_transcript(text).unwrap();
        let plain = run(&mut make(false), &t, 0);
        assert!(!plain.events.is_empty() && plain.events.iter().all(|e| e.user.is_some()));
        let (ssl, inside) = mysql_tls(&t);
        // A stream that starts inside TLS names its protocol by the login, on any port; the
        // plaintext login (sequence 1, no CLIENT_SSL) and the SSL request do not pass for one.
        assert_eq!(
            detect_after_tls(C, &inside[0].1),
            Some(Protocol::Mysql),
            "{i}"
        );
        assert_eq!(detect_after_tls(C, &t[1].1), None, "{i}");
        assert_eq!(detect_after_tls(C, &ssl), None, "{i}");
        assert_eq!(detect_after_tls(S, &inside[0].1), None, "{i}");
        for seed in [0, 1, 2] {
            // Greeting and SSL request in plaintext, then TLS.
            let mut s = make(false);
            let mut sink = VecSink::default();
            let before = [t[0].clone(), (C, ssl.clone(), t[1].2 - 1)];
            assert_eq!(
                feed(&mut s, &before, seed, &mut sink),
                Progress::Stop,
                "transcript {i}"
            );
            assert_eq!(sink.health.encrypted_connections, 1);
            assert!(s.start_tls());
            feed(&mut s, &inside, seed, &mut sink);
            s.close(u64::MAX / 2, &mut sink);
            assert_eq!(
                render(&sink.events),
                render(&plain.events),
                "transcript {i} seed {seed}"
            );
            assert_eq!(sink.health, plain.health, "transcript {i} seed {seed}");
            // Only what follows TLS.
            let r = run(&mut make(true), &inside, seed);
            assert_eq!(
                render(&r.events),
                render(&plain.events),
                "after_tls {i} seed {seed}"
            );
            assert_eq!(r.health, plain.health);
        }
    }
}

#[test]
fn postgres_real_conversations_read_inside_tls() {
    let make =
        |after_tls| proto::postgres::new_session(meta(5432, after_tls), SessionConfig::default());
    for (i, text) in POSTGRES.iter().enumerate() {
        let t = parse_hex_transcript(text).unwrap();
        // These clients asked for TLS first (SSLRequest) and were refused ('N').
        assert_eq!((t[1].0, &t[1].1[..]), (S, &b"N"[..]), "transcript {i}");
        let plain = run(&mut make(false), &t, 0);
        assert_eq!(plain.health, Health::default());
        assert!(!plain.events.is_empty() && plain.events.iter().all(|e| e.user.is_some()));
        // Inside TLS the StartupMessage comes first: PostgreSQL on any port, not MySQL.
        assert_eq!(
            detect_after_tls(C, &t[2].1),
            Some(Protocol::Postgres),
            "{i}"
        );
        for seed in [0, 1, 2] {
            let mut s = make(false);
            let mut sink = VecSink::default();
            let before = [t[0].clone(), (S, b"S".to_vec(), t[1].2)];
            assert_eq!(feed(&mut s, &before, seed, &mut sink), Progress::Stop);
            assert_eq!(sink.health.encrypted_connections, 1);
            assert!(s.start_tls());
            feed(&mut s, &t[2..], seed, &mut sink);
            s.close(u64::MAX / 2, &mut sink);
            assert_eq!(
                render(&sink.events),
                render(&plain.events),
                "transcript {i} seed {seed}"
            );
            assert_eq!(sink.health, Health::default());
            let r = run(&mut make(true), &t[2..].to_vec(), seed);
            assert_eq!(
                render(&r.events),
                render(&plain.events),
                "after_tls {i} seed {seed}"
            );
            assert_eq!(r.health, Health::default());
        }
    }
}
