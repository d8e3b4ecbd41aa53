//! Property tests: arbitrary bytes, plausible messages and damaged real conversations, in any
//! chunking, never make the MongoDB session panic, and its buffers stay bounded.

use proptest::prelude::*;
use proto::mongodb::bson::build::Doc;
use proto::mongodb::wire::{op, put_message};
use proto::mongodb::{MongoSession, new_session};
use proto::testing::{
    self, Chunking, Rng, Step, Transcript, assert_chunkings, drive_random, loopback_meta,
    parse_hex_transcript,
};
use proto::{Direction, SessionConfig};

const REAL: [&str; 2] = [
    include_str!("data/mongodb/pymongo_crud.txt"),
    include_str!("data/mongodb/pymongo_reads.txt"),
];

const MAX_TEXT: usize = 4096;
/// Two directions' parsers (a zstd or zlib decoder at most each), probes, 16 requests in flight
/// with their texts, 256 cursors: generous, but far below what buffering a message would take.
const MEMORY_BOUND: usize = 1024 * 1024;

fn session(saw_open: bool) -> MongoSession {
    new_session(
        loopback_meta(27017, saw_open),
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
        MongoSession::buffered_bytes,
        MEMORY_BOUND,
        t,
        seed,
        gaps.then_some(200),
    );
    for e in &sink.events {
        assert!(e.text.as_ref().is_none_or(|t| t.len() <= MAX_TEXT));
        assert!(e.end_ns.is_none() || e.first_response_ns.is_some(), "{e:?}");
    }
}

fn mutate(t: &mut Transcript, rng: &mut Rng, n: usize) {
    testing::mutate(
        t,
        rng,
        n,
        |rng| rng.next_u64() as u8,
        |rng| if rng.below(2) == 0 { 0x7F } else { 0xFF },
    );
}

const OPCODES: [i32; 11] = [
    op::MSG,
    op::QUERY,
    op::REPLY,
    op::COMPRESSED,
    op::INSERT,
    op::UPDATE,
    op::DELETE,
    op::GET_MORE,
    op::KILL_CURSORS,
    2010,
    0,
];

/// A small random document: a command name, then random scalars and nested pieces.
fn random_doc(rng: &mut Rng, depth: u32) -> Doc {
    const KEYS: [&str; 12] = [
        "find",
        "insert",
        "getMore",
        "filter",
        "$db",
        "cursor",
        "firstBatch",
        "n",
        "ok",
        "updates",
        "$in",
        "q",
    ];
    let mut d = Doc::new();
    for _ in 0..rng.below(5) {
        let k = KEYS[rng.below(KEYS.len() as u64) as usize];
        d = match rng.below(7) {
            0 => d.str(k, "x"),
            1 => d.i32(k, rng.next_u64() as i32),
            2 => d.i64(k, rng.next_u64() as i64),
            3 => d.f64(k, 1.0),
            4 if depth < 3 => d.doc(k, random_doc(rng, depth + 1)),
            5 if depth < 3 => d.arr(k, vec![random_doc(rng, depth + 1), Doc::new()]),
            _ => d.bool(k, true),
        };
    }
    d
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
    fn plausible_messages_never_panic(
        msgs in proptest::collection::vec((any::<bool>(), 0usize..11, 0i32..4, any::<u32>(), any::<u64>()), 0..40),
        saw_open in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // Headers with known opcodes, ids that pair up, bodies of flags and documents.
        let t: Transcript = msgs
            .into_iter()
            .enumerate()
            .map(|(i, (c, opi, rto, flags, dseed))| {
                let mut rng = Rng::new(dseed);
                let mut body = (flags & 0x0001_0003).to_le_bytes().to_vec();
                if rng.below(3) == 0 {
                    body.push(rng.below(3) as u8);
                }
                body.push(0);
                body.extend(random_doc(&mut rng, 0).bytes());
                if rng.below(4) == 0 {
                    body.truncate(rng.below(body.len() as u64) as usize);
                }
                let mut m = Vec::new();
                let rid = i as i32 + 1;
                let response_to = if c { 0 } else { (i as i32 - rto).max(0) };
                put_message(&mut m, rid, response_to, OPCODES[opi], &body);
                (if c { Direction::ToServer } else { Direction::ToClient }, m, i as u64)
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
        saw_open in any::<bool>(),
    ) {
        let mut t = parse_hex_transcript(REAL[which]).unwrap();
        let mut rng = Rng::new(seed);
        mutate(&mut t, &mut rng, mutations);
        let steps: Vec<Step> = t.into_iter().map(|(d, b, ts)| Step::Data(d, b, ts)).collect();
        assert_chunkings(
            || session(saw_open),
            &steps,
            &[Chunking::Whole, Chunking::ByteByByte, Chunking::Random(seed)],
        );
    }
}
