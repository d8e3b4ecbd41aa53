//! Property test: the Redis request reader reports the same events (arguments' kept heads
//! included), the same errors and the same byte counts whether a command arrives whole (its
//! arguments taken in one step each) or one byte at a time (every state of the slow path).

use proptest::prelude::*;
use proto::redis::wire::{ReqEvent, RequestReader};

mod common;

use common::{Seen, feed};

fn keep(i: u64) -> usize {
    // Different kept lengths per argument, some shorter than the argument.
    [3usize, 0, 64, 1][(i % 4) as usize]
}

/// Feeds `input` in pieces of at most `piece` bytes; each event with the head of its
/// argument.
fn run(input: &[u8], piece: usize) -> Vec<Seen<(ReqEvent, Vec<u8>)>> {
    let mut r = RequestReader::new();
    feed(input, piece, |data| {
        let (n, res) = r.push(data, 7, &keep);
        (n, res.map(|ev| ev.map(|ev| (ev, r.arg_head().to_vec()))))
    })
}

/// RESP request pieces: valid commands and near-miss variants of their parts.
fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..4)
            .prop_map(|args| {
                let mut v = format!("*{}\r\n", args.len()).into_bytes();
                for a in args {
                    v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                    v.extend_from_slice(&a);
                    v.extend_from_slice(b"\r\n");
                }
                v
            }),
        1 => Just(b"*2\r\n$3\r\nGET\r\n$-1\r\n".to_vec()),
        1 => Just(b"*1\r\n$\r\nx\r\n".to_vec()),
        1 => Just(b"*1\r\n$3\r\nGETX\r\n".to_vec()),
        1 => Just(b"*1\r\n$3\n\nGET\r\n".to_vec()),
        1 => Just(b"*1\r\n$+3\r\nGET\r\n".to_vec()),
        1 => Just(b"*1\r\n$123456789012345678901\r\nGET\r\n".to_vec()),
        1 => Just(b"*1\r\n$00000000000000000003\r\nGET\r\n".to_vec()),
        1 => Just(b"PING\r\n".to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..6),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn whole_arguments_read_as_byte_at_a_time(
        tokens in proptest::collection::vec(token(), 1..8),
        piece in 2usize..40,
    ) {
        let input: Vec<u8> = tokens.concat();
        let slow = run(&input, 1);
        prop_assert_eq!(&run(&input, input.len()), &slow);
        prop_assert_eq!(&run(&input, piece), &slow);
    }
}
