//! OP_MSG fields: flagBits (and the checksum they announce), the kind of each section, the
//! size and identifier of a kind-1 document sequence, and the walk through its documents.

use super::super::commands::Role;
use super::super::wire::msg_flag;
use super::{BodyParser, Next, Parsed, R_ROOT, ROOT_CMD, Res, STATEMENT, St, invalid};

impl BodyParser {
    /// flagBits: whether a checksum ends the message, and moreToCome for the session.
    pub(super) fn msg_flags(&mut self) -> Res<()> {
        let flags = self.r.i32() as u32;
        self.reserve = if flags & msg_flag::CHECKSUM_PRESENT != 0 {
            4
        } else {
            0
        };
        match &mut self.out {
            Parsed::Request(r) => r.flags = flags,
            Parsed::Reply(r) => r.flags = flags,
        }
        if self.left < self.reserve {
            return Err(invalid("OP_MSG", "no room for the checksum"));
        }
        self.section_or_end();
        Ok(())
    }

    /// The kind byte of a section: 0 the body document, 1 a document sequence.
    pub(super) fn section_kind(&mut self) -> Res<()> {
        match self.r.bytes().first() {
            Some(0) => {
                if self.body_seen {
                    return Err(invalid("OP_MSG", "two body sections"));
                }
                let ctx = match self.out {
                    Parsed::Request(_) => ROOT_CMD,
                    Parsed::Reply(_) => R_ROOT,
                };
                self.doc(ctx);
            }
            Some(1) => self.fixed(St::SeqSize, 4),
            _ => return Err(invalid("OP_MSG", "unknown section kind")),
        }
        Ok(())
    }

    /// The size of a kind-1 sequence: then its identifier.
    pub(super) fn seq_size(&mut self) -> Res<()> {
        let size = i64::from(self.r.i32());
        if size < 5 || (size - 4) as u64 > self.left.saturating_sub(self.reserve) {
            return Err(invalid("OP_MSG sequence", "size outside the message"));
        }
        self.seq_left = (size - 4) as u64;
        self.st = St::SeqIdent;
        self.r.cstr(64);
        Ok(())
    }

    /// The identifier of a kind-1 sequence says what its documents are.
    pub(super) fn seq_ident(&mut self) -> Res<()> {
        // Read where the field reader keeps it: no copy per sequence.
        let ident = self.r.bytes();
        self.seq_role = match &self.out {
            Parsed::Request(r) => r.sequence_role(ident),
            Parsed::Reply(_) => None,
        };
        self.seq_first = true;
        self.next = Next::Sequence;
        self.next_in_sequence();
        Ok(())
    }

    /// The checksum (not verified): the end.
    pub(super) fn checksum(&mut self) -> Res<()> {
        self.st = St::Done;
        Ok(())
    }

    /// The next section, the checksum, or the end.
    pub(super) fn section_or_end(&mut self) {
        self.next = Next::Body;
        if self.left > self.reserve {
            self.fixed(St::SectionKind, 1);
        } else if self.reserve > 0 {
            self.fixed(St::Checksum, 4);
        } else {
            self.st = St::Done;
        }
    }

    /// The next document of a kind-1 sequence, or the next section.
    pub(super) fn next_in_sequence(&mut self) {
        if self.seq_left == 0 {
            self.section_or_end();
            return;
        }
        self.count_doc();
        if self.seq_first && self.seq_role == Some(Role::Statements) {
            self.seq_first = false;
            self.doc(STATEMENT);
        } else {
            self.seq_first = false;
            self.skip_doc();
        }
    }
}
