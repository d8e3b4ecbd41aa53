//! The PostgreSQL display form: spacing, copied tokens and `$n` numbering of constants and
//! parameters.

use super::MAP_LEN;
use super::canon::{H_CONST, H_END};
use super::lex::{Tok, is_ident_char};
use super::normalize::{Normalizer, Prev};

impl Normalizer<'_, '_> {
    #[inline]
    pub(super) fn sep(&mut self, ws: bool) {
        if (ws || self.ws) && !self.out.is_empty() {
            self.out.push(' ');
        }
        self.ws = false;
    }

    #[inline]
    pub(super) fn copy(&mut self, t: Tok) {
        self.sep(t.ws);
        let s = self.s;
        // Token boundaries are ASCII bytes or the ends: always char boundaries.
        let txt = std::str::from_utf8(s.get(t.start..t.end).unwrap_or(&[])).unwrap_or("");
        self.out.push_str(txt);
    }

    pub(super) fn push_number(&mut self, n: u32) {
        self.out.push('$');
        let mut buf = [0u8; 10];
        let mut i = buf.len();
        let mut v = n;
        loop {
            i -= 1;
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for &d in &buf[i..] {
            self.out.push(char::from(d));
        }
    }

    pub(super) fn fresh(&mut self) -> u32 {
        self.next_param += 1;
        self.next_param
    }

    /// A constant (or parameter): `$n` in the text, one symbol in the hash.
    pub(super) fn constant(&mut self, ws: bool, n: u32) {
        self.sep(ws);
        // `x'1'` must not become the identifier `x$1`.
        if self
            .out
            .as_bytes()
            .last()
            .is_some_and(|&b| is_ident_char(b))
        {
            self.out.push(' ');
        }
        self.push_number(n);
        self.hash.byte(H_CONST);
        self.hash.byte(H_END);
        self.prev = Prev::Operand;
    }

    pub(super) fn param_number(&mut self, t: Tok) -> u32 {
        let digits = self.s.get(t.start + 1..t.end).unwrap_or(&[]);
        let mut v: usize = 0;
        for &d in digits {
            v = v.saturating_mul(10).saturating_add(usize::from(d - b'0'));
        }
        let slot = v.checked_sub(1).filter(|&i| i < MAP_LEN);
        match slot.and_then(|i| self.map.get(i)) {
            Some(&known) if known != 0 => u32::from(known),
            _ => {
                let n = self.fresh();
                if let (Some(i), Ok(x)) = (slot, u16::try_from(n))
                    && let Some(m) = self.map.get_mut(i)
                {
                    *m = x;
                }
                n
            }
        }
    }
}
