//! A connection's read buffer, allocated once: reads go straight into its free end and whole
//! messages are split off its front in place (no copy per read, no allocation per reply).

/// Bytes read and not yet returned are `buf[at..end]`.
pub(super) struct ReadBuf {
    buf: Vec<u8>,
    at: usize,
    end: usize,
}

impl ReadBuf {
    pub(super) fn new(size: usize) -> ReadBuf {
        ReadBuf {
            buf: vec![0u8; size.max(16)],
            at: 0,
            end: 0,
        }
    }

    /// The bytes read and not yet returned.
    pub(super) fn pending(&self) -> &[u8] {
        self.buf.get(self.at..self.end).unwrap_or_default()
    }

    /// `n` pending bytes are returned: `start..start + n` of the buffer, valid until the
    /// next [`room`](ReadBuf::room).
    pub(super) fn take(&mut self, n: usize) -> std::ops::Range<usize> {
        let start = self.at;
        self.at = (self.at + n).min(self.end);
        start..self.at
    }

    pub(super) fn get(&self, r: std::ops::Range<usize>) -> &[u8] {
        self.buf.get(r).unwrap_or_default()
    }

    /// Free space at the end for the next read (never empty): the pending bytes are moved to
    /// the start when less than a quarter is free, and the buffer doubles when they fill half
    /// of it (a message longer than the buffer; it grows only as bytes arrive).
    pub(super) fn room(&mut self) -> &mut [u8] {
        if self.at == self.end {
            (self.at, self.end) = (0, 0);
        }
        let len = self.buf.len();
        if len - self.end < len / 4 {
            self.buf.copy_within(self.at..self.end, 0);
            (self.at, self.end) = (0, self.end - self.at);
            if self.end > len / 2 {
                self.buf.resize(len * 2, 0);
            }
        }
        self.buf.get_mut(self.end..).unwrap_or_default()
    }

    /// `k` bytes were read into [`room`](ReadBuf::room): returns them.
    pub(super) fn filled(&mut self, k: usize) -> &[u8] {
        let start = self.end;
        self.end = (self.end + k).min(self.buf.len());
        self.buf.get(start..self.end).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::{message, server_message};
    use proptest::prelude::*;

    proptest! {
        /// Messages split into reads of any sizes come out whole, in order, as sent, and every
        /// byte read is handed back once by `filled`.
        #[test]
        fn messages_survive_any_read_sizes(
            bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..40),
            cuts in proptest::collection::vec(1usize..200, 1..50),
            size in 16usize..256,
        ) {
            let mut wire = Vec::new();
            for (i, b) in bodies.iter().enumerate() {
                wire.extend(message(b'A' + (i % 20) as u8, b));
            }
            let mut rb = ReadBuf::new(size);
            let (mut sent, mut seen, mut got) = (0, Vec::new(), Vec::new());
            let mut cut = cuts.iter().cycle();
            while got.len() < bodies.len() {
                if let Some((t, body, used)) = server_message(rb.pending()) {
                    got.push((t, body.to_vec()));
                    let r = rb.take(used);
                    prop_assert_eq!(r.len(), used);
                    continue;
                }
                let room = rb.room();
                prop_assert!(!room.is_empty());
                let k = (*cut.next().unwrap()).min(room.len()).min(wire.len() - sent);
                room[..k].copy_from_slice(&wire[sent..sent + k]);
                sent += k;
                seen.extend_from_slice(rb.filled(k));
            }
            prop_assert_eq!(&seen[..], &wire[..sent]);
            let want: Vec<_> = bodies
                .iter()
                .enumerate()
                .map(|(i, b)| (b'A' + (i % 20) as u8, b.clone()))
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
