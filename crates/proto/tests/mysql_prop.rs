//! Property tests: arbitrary bytes and damaged real conversations, in any chunking, never make
//! the MySQL session panic, and its buffers stay bounded.

use proptest::prelude::*;
use proto::mysql::{MysqlSession, new_session};
use proto::testing::{self, Rng, Transcript, drive_random, loopback_meta, parse_hex_transcript};
use proto::{Direction, SessionConfig};

const REAL: [&str; 5] = [
    include_str!("data/mysql/pymysql_text.txt"),
    include_str!("data/mysql/mysqldb_compressed.txt"),
    include_str!("data/mysql/raw_prepared_mariadb.txt"),
    include_str!("data/mysql/raw_prepared_eof.txt"),
    include_str!("data/mysql/mariadb_cli.txt"),
];

const MAX_TEXT: usize = 4096;
/// Two directions of kept messages, decompression scratch, probes, a few in-flight requests
/// and statements: generous, but far below what an unbounded buffer would reach.
const MEMORY_BOUND: usize = 512 * 1024;

fn session(saw_open: bool) -> MysqlSession {
    new_session(
        loopback_meta(3306, saw_open),
        SessionConfig {
            max_inflight: 16,
            max_text: MAX_TEXT,
            ..SessionConfig::default()
        },
    )
}

/// Feeds in random pieces, with occasional gaps, checking the memory bound after each call.
fn drive(t: &Transcript, saw_open: bool, seed: u64, gaps: bool) {
    let sink = drive_random(
        session(saw_open),
        MysqlSession::buffered_bytes,
        MEMORY_BOUND,
        t,
        seed,
        gaps.then_some(200),
    );
    for e in &sink.events {
        assert!(e.text.as_ref().is_none_or(|t| t.len() <= MAX_TEXT));
    }
}

fn mutate(t: &mut Transcript, rng: &mut Rng, n: usize) {
    testing::mutate(t, rng, n, |rng| rng.next_u64() as u8, |_| 0xFF);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(
        segs in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..40),
        saw_open in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let t: Transcript = segs
            .into_iter()
            .enumerate()
            .map(|(i, (c, b))| (if c { Direction::ToServer } else { Direction::ToClient }, b, i as u64))
            .collect();
        drive(&t, saw_open, seed, seed % 3 == 0);
    }

    #[test]
    fn plausible_headers_never_panic(
        segs in proptest::collection::vec(
            (any::<bool>(), 0u32..400, any::<u8>(), proptest::collection::vec(any::<u8>(), 0..400)),
            0..40,
        ),
        saw_open in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // Packets with sane headers and random bodies reach deeper into the state machine.
        let t: Transcript = segs
            .into_iter()
            .enumerate()
            .map(|(i, (c, len, first, mut body))| {
                let mut b = len.to_le_bytes()[..3].to_vec();
                b.push(if c { 0 } else { 1 });
                body.insert(0, first);
                body.truncate(len as usize);
                b.extend(body);
                (if c { Direction::ToServer } else { Direction::ToClient }, b, i as u64)
            })
            .collect();
        drive(&t, saw_open, seed, false);
    }

    #[test]
    fn damaged_real_conversations_never_panic(
        which in 0usize..REAL.len(),
        mutations in 0usize..12,
        seed in any::<u64>(),
        skip in 0usize..6,
        saw_open in any::<bool>(),
    ) {
        let mut t = parse_hex_transcript(REAL[which]).unwrap();
        if !saw_open {
            t.drain(..skip.min(t.len()));
        }
        let mut rng = Rng::new(seed);
        mutate(&mut t, &mut rng, mutations);
        drive(&t, saw_open, seed, seed % 2 == 0);
    }
}
