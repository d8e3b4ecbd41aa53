//! The canonical form behind the PostgreSQL group hash: FNV-1a over case-folded words and
//! one symbol per constant, parameter or folded list, whitespace and comments left out.

use super::normalize::Normalizer;

/// FNV-1a, 64 bits, with a final avalanche.
pub(super) struct Fnv(u64);

impl Fnv {
    pub(super) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub(super) fn byte(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    pub(super) fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.byte(x);
        }
    }
    pub(super) fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

// Canonical token classes in the hash stream.
pub(super) const H_WORD: u8 = 1;
pub(super) const H_QIDENT: u8 = 2;
pub(super) const H_CONST: u8 = 3;
pub(super) const H_LIST: u8 = 4;
pub(super) const H_NUM: u8 = 5;
pub(super) const H_SYM: u8 = 6;
pub(super) const H_END: u8 = 0xFF;

impl Normalizer<'_, '_> {
    pub(super) fn hash_word(&mut self, w: &[u8]) {
        self.hash.byte(H_WORD);
        for &b in w {
            self.hash.byte(b.to_ascii_lowercase());
        }
        self.hash.byte(H_END);
    }

    pub(super) fn hash_tok(&mut self, class: u8, b: &[u8]) {
        self.hash.byte(class);
        self.hash.bytes(b);
        self.hash.byte(H_END);
    }

    /// A quoted identifier `w`: one that needs no quotes (`"id"`) is the same name as the
    /// bare word, any other keeps its quoted spelling.
    #[inline(always)]
    pub(super) fn hash_quoted_ident(&mut self, w: &[u8]) {
        let inner = w.get(1..w.len().saturating_sub(1)).unwrap_or(&[]);
        let plain = w.first() == Some(&b'"')
            && w.len() >= 2
            && inner
                .first()
                .is_some_and(|&b| b.is_ascii_lowercase() || b == b'_')
            && inner
                .iter()
                .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'$');
        if plain {
            self.hash_word(inner);
        } else {
            self.hash_tok(H_QIDENT, w);
        }
    }
}
