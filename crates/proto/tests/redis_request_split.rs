//! Property test: the Redis request reader reports the same events (arguments' kept heads
//! included), the same errors and the same byte counts whether a command arrives whole (its
//! arguments taken in one step each) or one byte at a time (every state of the slow path).

use proptest::prelude::*;
use proto::redis::wire::{ReqEvent, RequestReader};

/// What the reader reported, in order: events with the head of each argument, then how the
/// input ended (`Err` at the first error, with the bytes consumed before it).
#[derive(Debug, PartialEq)]
enum Seen {
    Event(ReqEvent, Vec<u8>),
    Error(usize),
}

fn keep(i: u64) -> usize {
    // Different kept lengths per argument, some shorter than the argument.
    [3usize, 0, 64, 1][(i % 4) as usize]
}

/// Feeds `input` in pieces of at most `piece` bytes.
fn run(input: &[u8], piece: usize) -> Vec<Seen> {
    let mut r = RequestReader::new();
    let mut out = Vec::new();
    let mut consumed = 0usize;
    for chunk in input.chunks(piece.max(1)) {
        let mut data = chunk;
        loop {
            let (n, res) = r.push(data, 7, &keep);
            consumed += n;
            data = data.get(n..).unwrap_or(&[]);
            match res {
                Ok(Some(ev)) => out.push(Seen::Event(ev, r.arg_head().to_vec())),
                Ok(None) if data.is_empty() => break,
                Ok(None) if n > 0 => {}
                Ok(None) | Err(_) => {
                    out.push(Seen::Error(consumed));
                    return out;
                }
            }
        }
    }
    out
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
