//! Helpers shared by the proto crate's integration tests: feeding a streaming reader its input
//! in pieces, for the split-invariance property tests.

/// What a streaming reader reported, in order: each event (with whatever the test read from
/// the reader after it), then how the input ended (`Error` at the first error, with the bytes
/// consumed before it).
#[derive(Debug, PartialEq)]
pub enum Seen<T> {
    Event(T),
    Error(usize),
}

/// Feeds `input` in pieces of at most `piece` bytes to `push`, which takes the unread bytes of
/// the current piece and returns how many it consumed and what it reported (`Ok(None)`: it needs
/// more). A reader that consumes nothing and reports nothing while bytes remain is stuck: that
/// ends the run like an error.
pub fn feed<T, E>(
    input: &[u8],
    piece: usize,
    mut push: impl FnMut(&[u8]) -> (usize, Result<Option<T>, E>),
) -> Vec<Seen<T>> {
    let mut out = Vec::new();
    let mut consumed = 0usize;
    for chunk in input.chunks(piece.max(1)) {
        let mut data = chunk;
        loop {
            let (n, res) = push(data);
            consumed += n;
            data = data.get(n..).unwrap_or(&[]);
            match res {
                Ok(Some(ev)) => out.push(Seen::Event(ev)),
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
