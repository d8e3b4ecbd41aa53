//! The request reader's one-pass path: a whole command (`*<n>\r\n` and its `n` bulk strings,
//! all in the input, every length valid) is located in one scan, with no state turn per
//! argument; the caller hands the arguments to the builder itself. The reader is left as
//! after the command's end on the ordinary path. Anything else (split over inputs, inline
//! commands, `*0`, malformed bytes, more than [`WHOLE_ARGS`] arguments) is left to the
//! ordinary states, which report what they find.

use super::{MAX_ARGS, MAX_BULK, MAX_NUMBER_LINE, RSt, RequestReader, parse_i64};

/// The most arguments a command may have to take the one-pass path.
pub const WHOLE_ARGS: usize = 8;

/// Where one argument's bytes are in the input, and its length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub len: usize,
}

/// A whole command found by [`RequestReader::whole_command`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WholeCommand {
    /// Bytes of the command (all of its wire bytes).
    pub wire: usize,
    pub argc: usize,
    spans: [Span; WHOLE_ARGS],
}

impl WholeCommand {
    /// The arguments' places in the input given to [`RequestReader::whole_command`].
    pub fn spans(&self) -> &[Span] {
        self.spans.get(..self.argc).unwrap_or(&[])
    }
}

/// A number line at the start of `rest` (`<digits>\r\n`, as the ordinary path accepts it):
/// its value and the bytes it takes, CRLF included.
#[inline]
pub(super) fn number(rest: &[u8]) -> Option<(i64, usize)> {
    // One digit, the usual argument count and length: no loop.
    if let Some(&[d, b'\r', b'\n']) = rest.get(..3)
        && d.is_ascii_digit()
    {
        return Some((i64::from(d - b'0'), 3));
    }
    // The usual line, plain digits (at most 18: no overflow) then CRLF, in one pass.
    let mut v: i64 = 0;
    for (i, &b) in rest.iter().take(19).enumerate() {
        match b {
            b'0'..=b'9' if i < 18 => v = v * 10 + i64::from(b - b'0'),
            b'\r' if i > 0 => {
                return (rest.get(i + 1) == Some(&b'\n')).then_some((v, i + 2));
            }
            _ => break,
        }
    }
    // Signs, long lines and anything odd: the ordinary path's rules.
    number_slow(rest)
}

/// [`number`] by the ordinary path's rules only.
fn number_slow(rest: &[u8]) -> Option<(i64, usize)> {
    let digits = rest
        .iter()
        .take(MAX_NUMBER_LINE + 1)
        .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+'))
        .count();
    if digits > MAX_NUMBER_LINE || rest.get(digits..digits + 2)? != b"\r\n" {
        return None;
    }
    Some((parse_i64(rest.get(..digits)?)?, digits + 2))
}

impl RequestReader {
    /// The whole command at the start of `input`, if the reader is between commands and one
    /// lies there: written into `cmd` (filled in place, not returned: it is a few cache lines),
    /// and the reader then stands as after that command's end (started at `ts`, no bytes
    /// lost). False, with the reader unchanged (`cmd` may be overwritten), otherwise.
    #[inline]
    pub fn whole_command(&mut self, input: &[u8], ts: u64, cmd: &mut WholeCommand) -> bool {
        self.locate(input, ts, cmd).is_some()
    }

    #[inline]
    fn locate(&mut self, input: &[u8], ts: u64, cmd: &mut WholeCommand) -> Option<()> {
        if self.st != RSt::Start || self.active || self.end_pending || !self.line.is_empty() {
            return None;
        }
        if *input.first()? != b'*' {
            return None;
        }
        let (n, used) = number(input.get(1..)?)?;
        let argc = u64::try_from(n)
            .ok()
            .filter(|&n| (1..=MAX_ARGS).contains(&n))?;
        let argc = usize::try_from(argc).ok().filter(|&n| n <= WHOLE_ARGS)?;
        cmd.argc = 0;
        let mut at = 1 + used;
        for span in cmd.spans.iter_mut().take(argc) {
            if *input.get(at)? != b'$' {
                return None;
            }
            let (len, used) = number(input.get(at + 1..)?)?;
            let len = u64::try_from(len).ok().filter(|&l| l <= MAX_BULK)?;
            let len = usize::try_from(len).ok()?;
            let start = at + 1 + used;
            let end = start.checked_add(len)?;
            if input.get(end..end.checked_add(2)?)? != b"\r\n" {
                return None;
            }
            *span = Span { start, len };
            at = end + 2;
        }
        cmd.wire = at;
        cmd.argc = argc;
        // As after `finish` on the ordinary path.
        self.argc = argc as u64;
        self.index = argc as u64;
        self.wire = at as u64;
        self.start_ts = ts;
        self.lost = 0;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_one_pass_number_agrees_with_the_ordinary_rules(
            line in proptest::collection::vec(
                prop_oneof![8 => b'0'..=b'9', 1 => Just(b'-'), 1 => Just(b'+'), 1 => Just(b'\r'), 1 => Just(b'\n'), 1 => Just(b'x')],
                0..24,
            ),
            crlf in any::<bool>(),
        ) {
            let mut v = line;
            if crlf {
                v.extend_from_slice(b"\r\n");
            }
            prop_assert_eq!(number(&v), number_slow(&v));
        }
    }

    #[test]
    fn long_numbers_take_the_ordinary_path() {
        for n in 1..=21 {
            let mut v = vec![b'9'; n];
            v.extend_from_slice(b"\r\n");
            assert_eq!(number(&v), number_slow(&v), "{n} digits");
        }
        assert_eq!(number(b"18\r\n"), Some((18, 4)));
        assert_eq!(number(b"\r\n"), None);
        assert_eq!(number(b"3\rx"), None);
    }
}
