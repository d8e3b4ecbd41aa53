//! The boundary probe: whether bytes at a possible command boundary start a command, used to
//! resynchronize the client side after lost bytes or a mid-stream pickup.

use super::MAX_ARGS;

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
    let mut i = 0usize;
    let at = |i: usize| b.get(i).copied();
    let number = |i: &mut usize, max_digits: usize| -> Result<u64, Probe> {
        let start = *i;
        let mut v = 0u64;
        loop {
            match at(*i) {
                None => return Err(Probe::NeedMore),
                Some(d @ b'0'..=b'9') if *i - start < max_digits => {
                    v = v * 10 + u64::from(d - b'0');
                    *i += 1;
                }
                Some(b'\r') if *i > start => {
                    return match at(*i + 1) {
                        None => Err(Probe::NeedMore),
                        Some(b'\n') => {
                            *i += 2;
                            Ok(v)
                        }
                        Some(_) => Err(Probe::NoMatch),
                    };
                }
                Some(_) => return Err(Probe::NoMatch),
            }
        }
    };
    match at(i) {
        None => return Probe::NeedMore,
        Some(b'*') => i += 1,
        Some(_) => return Probe::NoMatch,
    }
    match number(&mut i, 10) {
        Ok(n) if (1..=MAX_ARGS).contains(&n) => {}
        Ok(_) => return Probe::NoMatch,
        Err(p) => return p,
    }
    match at(i) {
        None => return Probe::NeedMore,
        Some(b'$') => i += 1,
        Some(_) => return Probe::NoMatch,
    }
    let len = match number(&mut i, 2) {
        Ok(n) if (1..=64).contains(&n) => n as usize,
        Ok(_) => return Probe::NoMatch,
        Err(p) => return p,
    };
    let avail = b.get(i..).unwrap_or(&[]);
    let name = avail.get(..len.min(avail.len())).unwrap_or(&[]);
    let plausible_prefix = name.first().is_none_or(u8::is_ascii_alphabetic)
        && name
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'|' | b':'));
    if !plausible_prefix {
        return Probe::NoMatch;
    }
    if name.len() < len {
        return Probe::NeedMore;
    }
    match (at(i + len), at(i + len + 1)) {
        (Some(b'\r'), Some(b'\n')) => Probe::Match,
        (None, _) | (Some(b'\r'), None) => Probe::NeedMore,
        _ => Probe::NoMatch,
    }
}

/// The command name of a probe match: the bytes of its first argument.
pub fn probe_name(b: &[u8]) -> Option<&[u8]> {
    let dollar = b.iter().position(|&c| c == b'$')?;
    let rest = b.get(dollar + 1..)?;
    let cr = rest.iter().position(|&c| c == b'\r')?;
    let len: usize = std::str::from_utf8(rest.get(..cr)?).ok()?.parse().ok()?;
    rest.get(cr + 2..cr + 2 + len)
}
