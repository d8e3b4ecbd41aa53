//! The boundary probe: whether bytes at a possible command boundary start a command, used to
//! resynchronize the client side after lost bytes or a mid-stream pickup.

use super::MAX_ARGS;

/// The kit's checked reader (RESP has no multi-byte binary integers).
type Cursor<'a> = crate::kit::Cursor<'a>;

/// What [`probe_command`] concludes about bytes at a possible command boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `*<n>\r\n$<len>\r\n<name>\r\n` with a plausible command name.
    Match,
    NoMatch,
    /// A prefix of a match: more bytes are needed to decide.
    NeedMore,
}

/// The most bytes [`probe_command`] looks at: it always decides with this many.
pub const PROBE_MAX: usize = 1 + 10 + 2 + 1 + 2 + 2 + 64 + 2;

/// Whether a command name is plausible: an ASCII letter, then letters, digits, `.`, `_`, `-`,
/// `|` or `:` (module commands such as `FT.SEARCH` or `JSON.GET`), 1 to 64 bytes.
pub fn plausible_name(name: &[u8]) -> bool {
    name.first().is_some_and(u8::is_ascii_alphabetic)
        && name.len() <= 64
        && name
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'|' | b':'))
}

/// Checks whether `b` starts a command in the array-of-bulk-strings form, with a plausible
/// command name as its first argument. Used to resynchronize on the client side.
pub fn probe_command(b: &[u8]) -> Probe {
    // `*` count CRLF `$` len CRLF name CRLF.
    match command_head(&mut Cursor::new(b)) {
        Ok(()) => Probe::Match,
        Err(p) => p,
    }
}

/// Reads `*<n>\r\n$<len>\r\n<name>\r\n`; `Err` says why it is not a match (yet).
fn command_head(c: &mut Cursor<'_>) -> Result<(), Probe> {
    byte(c, b'*')?;
    if !(1..=MAX_ARGS).contains(&number(c, 10)?) {
        return Err(Probe::NoMatch);
    }
    byte(c, b'$')?;
    let len = number(c, 2)?;
    if !(1..=64).contains(&len) {
        return Err(Probe::NoMatch);
    }
    let len = len as usize;
    let avail = c.peek_rest();
    let name = avail.get(..len.min(avail.len())).unwrap_or(&[]);
    let plausible_prefix = name.first().is_none_or(u8::is_ascii_alphabetic)
        && name
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'|' | b':'));
    if !plausible_prefix {
        return Err(Probe::NoMatch);
    }
    c.skip(len, "command name").map_err(|_| Probe::NeedMore)?;
    byte(c, b'\r')?;
    byte(c, b'\n')
}

/// The next byte is `want` (consumed).
fn byte(c: &mut Cursor<'_>, want: u8) -> Result<(), Probe> {
    match c.peek() {
        None => Err(Probe::NeedMore),
        Some(b) if b == want => c.skip(1, "byte").map_err(|_| Probe::NeedMore),
        Some(_) => Err(Probe::NoMatch),
    }
}

/// A decimal number of at most `max_digits` digits and its CRLF (consumed).
fn number(c: &mut Cursor<'_>, max_digits: usize) -> Result<u64, Probe> {
    let mut v = 0u64;
    let mut digits = 0;
    loop {
        match c.peek() {
            None => return Err(Probe::NeedMore),
            Some(d @ b'0'..=b'9') if digits < max_digits => {
                v = v * 10 + u64::from(d - b'0');
                digits += 1;
                c.skip(1, "digit").map_err(|_| Probe::NeedMore)?;
            }
            Some(b'\r') if digits > 0 => {
                c.skip(1, "CR").map_err(|_| Probe::NeedMore)?;
                byte(c, b'\n')?;
                return Ok(v);
            }
            Some(_) => return Err(Probe::NoMatch),
        }
    }
}

/// The command name of a probe match: the bytes of its first argument.
pub fn probe_name(b: &[u8]) -> Option<&[u8]> {
    let mut c = Cursor::new(b);
    c.until(b"$", "array header").ok()?;
    let len = c.until(b"\r", "name length").ok()?;
    let len: usize = std::str::from_utf8(len).ok()?.parse().ok()?;
    c.skip(1, "LF").ok()?;
    c.bytes(len, "command name").ok()
}
