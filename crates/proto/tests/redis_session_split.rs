//! Property test: a Redis session reports the same events and health whether pipelined
//! commands and replies arrive whole (commands taken in one pass, scalar replies in one step)
//! or in any other cut (byte by byte, random pieces): the one-pass paths change nothing.

use proptest::prelude::*;
use proto::redis::{RedisSession, new_session};
use proto::testing::{Step, assert_chunking_invariant, loopback_meta};
use proto::{Direction, SessionConfig};

fn session() -> RedisSession {
    new_session(
        loopback_meta(6379, true),
        SessionConfig {
            max_inflight: 16,
            max_text: 40,
            ..SessionConfig::default()
        },
    )
}

fn command(args: &[Vec<u8>]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// A command: a name the builder treats apart (or an ordinary or unknown one, any case),
/// then arguments of any bytes, some longer than what is kept of them.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let names = prop_oneof![
        Just(&b"GET"[..]),
        Just(&b"set"[..]),
        Just(&b"hello"[..]),
        Just(&b"AUTH"[..]),
        Just(&b"select"[..]),
        Just(&b"client"[..]),
        Just(&b"config"[..]),
        Just(&b"eval"[..]),
        Just(&b"xread"[..]),
        Just(&b"multi"[..]),
        Just(&b"exec"[..]),
        Just(&b"subscribe"[..]),
        Just(&b"nosuchcommand"[..]),
    ];
    let arg = prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..10),
        1 => Just(b"reply".to_vec()),
        1 => Just(b"off".to_vec()),
        1 => Just(b"1".to_vec()),
        1 => Just(b"streams".to_vec()),
        1 => Just(b"auth".to_vec()),
        1 => Just(b"3".to_vec()),
        1 => (30usize..300).prop_map(|n| vec![b'k'; n]),
    ];
    prop_oneof![
        8 => (names, proptest::collection::vec(arg, 0..10)).prop_map(|(n, rest)| {
            let mut args = vec![n.to_vec()];
            args.extend(rest);
            command(&args)
        }),
        1 => Just(b"*0\r\n".to_vec()),
        1 => Just(b"PING\r\n".to_vec()),
        1 => Just(b"*1\r\n$+3\r\nGET\r\n".to_vec()),
    ]
}

fn reply() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"+OK\r\n".to_vec()),
        Just(b"-ERR no\r\n".to_vec()),
        Just(b":42\r\n".to_vec()),
        Just(b"$-1\r\n".to_vec()),
        Just(b"$3\r\nabc\r\n".to_vec()),
        Just(b"+QUEUED\r\n".to_vec()),
        Just(b"*2\r\n:1\r\n$1\r\nx\r\n".to_vec()),
        Just(b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n".to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pipelined_conversations_read_the_same_in_any_cut(
        rounds in proptest::collection::vec(
            (proptest::collection::vec(request(), 1..6), proptest::collection::vec(reply(), 0..6)),
            1..5,
        ),
    ) {
        let mut steps = Vec::new();
        let mut ts = 1_000u64;
        for (reqs, reps) in rounds {
            steps.push(Step::Data(Direction::ToServer, reqs.concat(), ts));
            ts += 10;
            if !reps.is_empty() {
                steps.push(Step::Data(Direction::ToClient, reps.concat(), ts));
                ts += 10;
            }
        }
        assert_chunking_invariant(session, &steps);
    }
}
