//! The reply reader's one-step path: a whole top-level scalar reply (`+...`, `-...`, `:<n>`,
//! `$<n>` with its payload, `$-1`) lying entirely in the input is read in one step, leaving the
//! reader exactly as the byte-at-a-time states would (same event, same kept head, same wire
//! bytes and timestamps). Anything else (split over inputs, aggregates, RESP3 types, long
//! lines, malformed bytes) is left to the ordinary states, which report what they find.

use super::{Event, HEAD_KEEP, MAX_BULK, MAX_NUMBER_LINE, ReplyReader, St, Type, Value, parse_i64};

impl ReplyReader {
    /// The whole scalar at `*pos`, if there is one and the reader is between top-level values;
    /// `None`, with nothing consumed or changed, otherwise.
    #[inline]
    pub(super) fn whole_scalar(&mut self, input: &[u8], ts: u64, pos: &mut usize) -> Option<Event> {
        if self.st != St::Type || self.top_open || !self.stack.is_empty() {
            return None;
        }
        let rest = input.get(*pos..)?;
        let ty = Type::from_byte(*rest.first()?)?;
        if !matches!(
            ty,
            Type::SimpleString | Type::Error | Type::Integer | Type::BulkString
        ) {
            return None;
        }
        let body = rest.get(1..)?;
        // The line: up to the first CR or LF, which must be a CR followed by LF.
        let limit = if ty.numeric_line() {
            MAX_NUMBER_LINE
        } else {
            HEAD_KEEP
        };
        let end = body
            .iter()
            .take(limit + 1)
            .position(|&c| c == b'\r' || c == b'\n')?;
        let line = body.get(..end)?;
        // Simple strings and errors take any byte but CR and LF (none before `end`).
        let any_byte = matches!(ty, Type::SimpleString | Type::Error);
        if body.get(end..end + 2)? != b"\r\n"
            || !(any_byte || line.iter().all(|&c| ty.line_byte_ok(c)))
        {
            return None;
        }
        let line_wire = 1 + end + 2;
        let (wire, null, len, kept) = if ty == Type::BulkString {
            let n = parse_i64(line)?;
            if n == -1 {
                (line_wire, true, 0, &[][..])
            } else {
                let len = u64::try_from(n).ok().filter(|&l| l <= MAX_BULK)?;
                let l = usize::try_from(len).ok()?;
                let payload = body.get(end + 2..)?;
                if payload.get(l..l.checked_add(2)?)? != b"\r\n" {
                    return None;
                }
                let data = payload.get(..l)?;
                (
                    line_wire + l + 2,
                    false,
                    len,
                    data.get(..HEAD_KEEP).unwrap_or(data),
                )
            }
        } else {
            if ty == Type::Integer {
                parse_i64(line)?;
            }
            (line_wire, false, 0, line)
        };
        self.top = Value {
            ty,
            null,
            len,
            wire: wire as u64,
            start_ts: ts,
            end_ts: ts,
            attribute: false,
            lost: 0,
        };
        self.head.clear();
        self.head.extend_from_slice(kept);
        self.content.clear();
        self.line.clear();
        self.line_len = 0;
        self.elems_done = 0;
        self.firsts_len = 0;
        self.blob_cut = false;
        *pos += wire;
        Some(Event::Value(self.top))
    }
}
