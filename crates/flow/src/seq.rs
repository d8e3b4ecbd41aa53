//! 32-bit TCP sequence-number arithmetic with wrap-around.

/// The largest TCP window (2^30 bytes with window scaling). A sequence number farther than this
/// from the expected one cannot belong to the same stretch of the stream.
pub(crate) const WINDOW: u32 = 1 << 30;

/// Signed distance from `from` to `to` in sequence space, in [-2^31, 2^31).
pub(crate) fn diff(to: u32, from: u32) -> i64 {
    i64::from(to.wrapping_sub(from) as i32)
}

/// Forward distance from `from` to `to` (how far ahead `to` is, modulo 2^32).
pub(crate) fn ahead(to: u32, from: u32) -> u32 {
    to.wrapping_sub(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        assert_eq!(diff(5, u32::MAX - 4), 10);
        assert_eq!(diff(u32::MAX - 4, 5), -10);
        assert_eq!(ahead(5, u32::MAX - 4), 10);
        assert_eq!(diff(0x8000_0000, 0), -(1 << 31));
    }
}
