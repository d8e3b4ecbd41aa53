//! Property tests: arbitrary bytes, RESP-shaped garbage and damaged real conversations, in any
//! chunking and with gaps, never make the Redis session panic, and its buffers stay bounded.

use std::io::Read as _;

use proptest::prelude::*;
use proto::redis::{RedisSession, new_session};
use proto::testing::{self, Rng, Transcript, drive_random, loopback_meta, parse_hex_transcript};
use proto::{Direction, SessionConfig};

const MAX_TEXT: usize = 4096;
const MAX_INFLIGHT: usize = 16;
/// Framing state (an inline line up to 64 KB), the probe window, and two queues of at most
/// `MAX_INFLIGHT` small requests: far below what buffering a value would reach.
const MEMORY_BOUND: usize = 128 * 1024;

fn real() -> Vec<Transcript> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/redis");
    let mut out = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in names {
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        // The small ones: proptest runs each case many times.
        if name == "commandstats.txt" || name.starts_with("other_") || name.contains("big") {
            continue;
        }
        let text = if name.ends_with(".txt.gz") {
            let mut s = String::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&p).unwrap())
                .read_to_string(&mut s)
                .unwrap();
            s
        } else if name.ends_with(".txt") {
            std::fs::read_to_string(&p).unwrap()
        } else {
            continue;
        };
        out.push(parse_hex_transcript(&text).unwrap());
    }
    assert!(out.len() >= 5);
    out
}

fn session(saw_open: bool) -> RedisSession {
    new_session(
        loopback_meta(6379, saw_open),
        SessionConfig {
            max_inflight: MAX_INFLIGHT,
            max_text: MAX_TEXT,
            ..SessionConfig::default()
        },
    )
}

/// Feeds in random pieces, with occasional gaps, checking the memory bound after each call.
fn drive(t: &Transcript, saw_open: bool, seed: u64, gaps: bool) {
    let sink = drive_random(
        session(saw_open),
        RedisSession::buffered_bytes,
        MEMORY_BOUND,
        t,
        seed,
        gaps.then_some(100),
    );
    for e in &sink.events {
        assert!(e.text.as_ref().is_some_and(|t| t.len() <= MAX_TEXT));
    }
}

fn mutate(t: &mut Transcript, rng: &mut Rng, n: usize) {
    testing::mutate(
        t,
        rng,
        n,
        |rng| {
            const ALPHABET: &[u8] = b"*$+-:_#,(!=%~|>?\r\n0123456789-";
            ALPHABET[rng.below(ALPHABET.len() as u64) as usize]
        },
        |_| b'9',
    );
}

/// RESP-shaped tokens: headers with small and huge lengths, scalars, CRLFs, payload bytes.
fn resp_token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (prop::sample::select(b"*$%~|>!=".to_vec()), -2i64..2000).prop_map(|(t, n)| {
            let mut v = vec![t];
            v.extend_from_slice(n.to_string().as_bytes());
            v.extend_from_slice(b"\r\n");
            v
        }),
        prop::sample::select(vec![
            b"+OK\r\n".to_vec(),
            b"-ERR x\r\n".to_vec(),
            b":1\r\n".to_vec(),
            b"_\r\n".to_vec(),
            b"#t\r\n".to_vec(),
            b",1.5\r\n".to_vec(),
            b"(12\r\n".to_vec(),
            b"$?\r\n".to_vec(),
            b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n".to_vec(),
            b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nb\r\n".to_vec(),
            b">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nb\r\n".to_vec(),
            b"+QUEUED\r\n".to_vec(),
            b"*1\r\n$5\r\nMULTI\r\n".to_vec(),
            b"*1\r\n$4\r\nEXEC\r\n".to_vec(),
            b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n".to_vec(),
            b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n".to_vec(),
            b"*1\r\n$11\r\nUNSUBSCRIBE\r\n".to_vec(),
            b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n".to_vec(),
            b"PING\r\n".to_vec(),
            b"\r\n".to_vec(),
        ]),
        proptest::collection::vec(any::<u8>(), 0..20),
    ]
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
    fn resp_shaped_garbage_never_panics(
        segs in proptest::collection::vec((any::<bool>(), proptest::collection::vec(resp_token(), 0..12)), 0..30),
        saw_open in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let t: Transcript = segs
            .into_iter()
            .enumerate()
            .map(|(i, (c, toks))| {
                (if c { Direction::ToServer } else { Direction::ToClient }, toks.concat(), i as u64)
            })
            .collect();
        drive(&t, saw_open, seed, seed % 2 == 0);
    }

    #[test]
    fn damaged_real_conversations_never_panic(
        which in 0usize..64,
        mutations in 0usize..12,
        seed in any::<u64>(),
        skip in 0usize..6,
        saw_open in any::<bool>(),
    ) {
        let all = real();
        let mut t = all[which % all.len()].clone();
        if !saw_open {
            t.drain(..skip.min(t.len()));
        }
        let mut rng = Rng::new(seed);
        mutate(&mut t, &mut rng, mutations);
        drive(&t, saw_open, seed, seed % 2 == 0);
    }
}

/// Deep nesting, huge counts and endless lines stay bounded.
#[test]
fn adversarial_shapes_stay_bounded() {
    let cases: Vec<Vec<u8>> = vec![
        "*4294967296\r\n".to_string() + &":1\r\n".repeat(10_000),
        "*1\r\n".repeat(127) + "*1000\r\n" + &"+x\r\n".repeat(5000),
        format!("+{}", "a".repeat(1 << 20)),
        format!("-{}\r\n", "E".repeat(1 << 20)),
        "$1099511627776\r\n".to_string() + &"x".repeat(100_000),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect();
    for reply in cases {
        let t: Transcript = vec![
            (
                Direction::ToServer,
                b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec(),
                1,
            ),
            (Direction::ToClient, reply, 2),
        ];
        drive(&t, true, 1, false);
    }
    // An endless inline line and an endless argument.
    let t: Transcript = vec![(Direction::ToServer, vec![b'a'; 200_000], 1)];
    drive(&t, true, 2, false);
    let mut req = b"*2\r\n$3\r\nSET\r\n$1000000000\r\n".to_vec();
    req.extend(vec![b'v'; 300_000]);
    drive(&vec![(Direction::ToServer, req, 1)], true, 3, false);
}
