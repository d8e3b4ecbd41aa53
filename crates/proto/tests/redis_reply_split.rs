//! Property test: the Redis reply reader reports the same events (values, elements, the
//! kept heads and first elements), the same errors and the same byte counts whether a reply
//! arrives whole (a top-level scalar taken in one step) or one byte at a time (every state of
//! the slow path).

use proptest::prelude::*;
use proto::redis::wire::{Event, Kept, ReplyReader};

mod common;

use common::{Seen, feed};

/// An event with the heads and first elements the reader left after it.
type Reported = (Event, Vec<u8>, Vec<u8>, Vec<Kept>);

/// Feeds `input` in pieces of at most `piece` bytes.
fn run(input: &[u8], piece: usize) -> Vec<Seen<Reported>> {
    let mut r = ReplyReader::new();
    feed(input, piece, |data| {
        let (n, res) = r.push(data, 7);
        let res = res.map(|ev| {
            ev.map(|ev| {
                (
                    ev,
                    r.head().to_vec(),
                    r.elem_head().to_vec(),
                    r.first_elements().to_vec(),
                )
            })
        });
        (n, res)
    })
}

/// RESP reply pieces: valid scalars and aggregates, and near-miss variants.
fn token() -> impl Strategy<Value = Vec<u8>> {
    let text = proptest::collection::vec(any::<u8>(), 0..12);
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..12).prop_map(|a| {
            let mut v = format!("${}\r\n", a.len()).into_bytes();
            v.extend_from_slice(&a);
            v.extend_from_slice(b"\r\n");
            v
        }),
        2 => text.clone().prop_map(|a| {
            let mut v = b"+".to_vec();
            v.extend(a.into_iter().filter(|&b| b != b'\r' && b != b'\n'));
            v.extend_from_slice(b"\r\n");
            v
        }),
        1 => text.prop_map(|a| {
            let mut v = b"-ERR ".to_vec();
            v.extend_from_slice(&a);
            v.extend_from_slice(b"\r\n");
            v
        }),
        2 => any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
        1 => (0usize..4).prop_map(|n| {
            let mut v = format!("*{n}\r\n").into_bytes();
            for i in 0..n {
                v.extend_from_slice(format!("$1\r\n{i}\r\n").as_bytes());
            }
            v
        }),
        1 => Just(b"$-1\r\n".to_vec()),
        1 => Just(b"*-1\r\n".to_vec()),
        1 => Just(b"$0\r\n\r\n".to_vec()),
        1 => Just(b"$+3\r\nabc\r\n".to_vec()),
        1 => Just(b"$3\r\nabcd\r\n".to_vec()),
        1 => Just(b"$?\r\n".to_vec()),
        1 => Just(b"$-2\r\n".to_vec()),
        1 => Just(b":12a\r\n".to_vec()),
        1 => Just(b":+7\r\n".to_vec()),
        1 => Just(b":123456789012345678901\r\n".to_vec()),
        1 => Just(b"+a\nb\r\n".to_vec()),
        1 => Just(b"+ok\r\r\n".to_vec()),
        1 => Just(b"|1\r\n+a\r\n+b\r\n+c\r\n".to_vec()),
        1 => Just(b"%1\r\n+k\r\n:1\r\n".to_vec()),
        1 => Just(b"_\r\n".to_vec()),
        1 => (500usize..530).prop_map(|n| {
            let mut v = b"+".to_vec();
            v.extend(std::iter::repeat_n(b'x', n));
            v.extend_from_slice(b"\r\n");
            v
        }),
        1 => (500usize..530).prop_map(|n| {
            let mut v = format!("${n}\r\n").into_bytes();
            v.extend(std::iter::repeat_n(b'y', n));
            v.extend_from_slice(b"\r\n");
            v
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..6),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn whole_replies_read_as_byte_at_a_time(
        tokens in proptest::collection::vec(token(), 1..8),
        piece in 2usize..40,
    ) {
        let input: Vec<u8> = tokens.concat();
        let slow = run(&input, 1);
        prop_assert_eq!(&run(&input, input.len()), &slow);
        prop_assert_eq!(&run(&input, piece), &slow);
    }
}
