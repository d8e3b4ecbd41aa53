//! Property tests: arbitrary bytes and damaged real conversations, in any chunking, never make
//! the PostgreSQL session panic, and its buffers stay bounded.

use proptest::prelude::*;
use proto::postgres::{PgSession, new_session};
use proto::testing::{
    self, Chunking, Rng, Step, Transcript, assert_chunkings, drive_random, loopback_meta,
    parse_hex_transcript,
};
use proto::{Direction, SessionConfig};

const REAL: [&str; 6] = [
    include_str!("data/postgres/psql_file.txt"),
    include_str!("data/postgres/psql_multi.txt"),
    include_str!("data/postgres/psycopg2_simple.txt"),
    include_str!("data/postgres/psycopg3_extended.txt"),
    include_str!("data/postgres/pgbench_extended_2.txt"),
    include_str!("data/postgres/pgbench_prepared_2.txt"),
];

const MAX_TEXT: usize = 4096;
/// Two directions of kept messages, probes, 16 requests in flight, statements and portals:
/// generous, but far below what an unbounded buffer would reach.
const MEMORY_BOUND: usize = 512 * 1024;

fn session(saw_open: bool) -> PgSession {
    new_session(
        loopback_meta(5432, saw_open),
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
        PgSession::buffered_bytes,
        MEMORY_BOUND,
        t,
        seed,
        gaps.then_some(200),
    );
    for e in &sink.events {
        assert!(e.text.as_ref().is_none_or(|t| t.len() <= MAX_TEXT));
        // (Mutations reorder segments, so timestamps need not grow.)
        assert!(e.end_ns.is_none() || e.first_response_ns.is_some(), "{e:?}");
    }
}

fn mutate(t: &mut Transcript, rng: &mut Rng, n: usize) {
    testing::mutate(
        t,
        rng,
        n,
        |rng| rng.next_u64() as u8,
        |rng| if rng.below(2) == 0 { 0x3F } else { 0xFF },
    );
}

const CLIENT_TAGS: &[u8] = b"QPBDEHSCXFdcfp?";
const SERVER_TAGS: &[u8] = b"RKSZTDCIENA123ntsGHWdcVv?";

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
    fn plausible_messages_never_panic(
        segs in proptest::collection::vec(
            (any::<bool>(), 0usize..64, 0u32..300, proptest::collection::vec(any::<u8>(), 0..300)),
            0..60,
        ),
        saw_open in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // Messages with known type bytes and sane lengths reach deep into the state machine.
        let t: Transcript = segs
            .into_iter()
            .enumerate()
            .map(|(i, (c, tag, len, mut body))| {
                let tags = if c { CLIENT_TAGS } else { SERVER_TAGS };
                let mut b = vec![tags[tag % tags.len()]];
                body.resize(len as usize, 0);
                b.extend((len + 4).to_be_bytes());
                b.extend(body);
                (if c { Direction::ToServer } else { Direction::ToClient }, b, i as u64)
            })
            .collect();
        drive(&t, saw_open, seed, seed % 4 == 0);
    }

    #[test]
    fn damaged_real_conversations_never_panic(
        which in 0usize..REAL.len(),
        mutations in 0usize..12,
        seed in any::<u64>(),
        skip in 0usize..8,
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

    /// Damaged conversations still give the same events whatever the chunking.
    #[test]
    fn damaged_conversations_are_chunking_invariant(
        which in 0usize..REAL.len(),
        mutations in 0usize..6,
        seed in any::<u64>(),
    ) {
        let mut t = parse_hex_transcript(REAL[which]).unwrap();
        let mut rng = Rng::new(seed);
        mutate(&mut t, &mut rng, mutations);
        let steps: Vec<Step> = t.into_iter().map(|(d, b, ts)| Step::Data(d, b, ts)).collect();
        assert_chunkings(
            || session(true),
            &steps,
            &[Chunking::Whole, Chunking::ByteByByte, Chunking::Random(seed)],
        );
    }
}
