//! OP_COMPRESSED: the prefix (originalOpcode, uncompressedSize, compressorId) and the
//! decompressed bytes fed to an inner parser for the opcode it wraps.

use super::super::wire::{
    Cursor, Inflater, MAX_MESSAGE_LEN, is_reply_opcode, is_request_opcode, op,
};
use super::{BodyParser, Parsed, Res, St, invalid};

/// Bytes of the prefix of an OP_COMPRESSED body: originalOpcode, uncompressedSize,
/// compressorId.
pub(super) const COMPRESSED_PREFIX: u8 = 9;

impl BodyParser {
    /// The prefix: checks the wrapped opcode and size, and builds the decompressor and the
    /// inner parser.
    pub(super) fn compressed_prefix(&mut self) -> Res<()> {
        let b = self.r.bytes();
        let orig = le(b, 0);
        let size = le(b, 4);
        let id = b.get(8).copied().unwrap_or(0xFF);
        let from_client = matches!(self.out, Parsed::Request(_));
        let side_ok = if from_client {
            is_request_opcode(orig)
        } else {
            is_reply_opcode(orig)
        };
        if !side_ok || orig == op::COMPRESSED {
            return Err(invalid("OP_COMPRESSED", "wraps an impossible opcode"));
        }
        if size < 0 || size as u32 > MAX_MESSAGE_LEN {
            return Err(invalid("OP_COMPRESSED", "uncompressed size out of range"));
        }
        self.inflater = Some(Inflater::new(id)?);
        let inner = if from_client {
            BodyParser::request(orig, size as u64, self.shape_cap)
        } else {
            BodyParser::reply(orig, size as u64, self.reply_is_command)
        };
        self.inner = Some(Box::new(inner));
        self.st = St::Inflating;
        if self.left == 0 {
            self.inflate(&[], true)?;
            self.st = St::Done;
        }
        Ok(())
    }

    /// Decompresses `input` into the inner parser (`last`: the body's end).
    pub(super) fn inflate(&mut self, input: &[u8], last: bool) -> Res<()> {
        let (Some(inf), Some(inner)) = (self.inflater.as_mut(), self.inner.as_mut()) else {
            return Err(invalid("OP_COMPRESSED", "no decompressor"));
        };
        inf.push(input, last, &mut |out| inner.push(out))
    }
}

/// The little-endian int32 at `at` (0 when short).
fn le(b: &[u8], at: usize) -> i32 {
    let mut c = Cursor::new(b);
    c.skip(at, "field offset")
        .and_then(|()| c.i32("int32"))
        .unwrap_or(0)
}
