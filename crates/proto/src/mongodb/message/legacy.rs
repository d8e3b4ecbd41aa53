//! Fields of the legacy opcodes: OP_QUERY, OP_INSERT, OP_UPDATE, OP_DELETE, OP_GET_MORE and
//! OP_KILL_CURSORS requests (flags, full collection name, skip/return counts, cursor ids,
//! update and delete flags) and the OP_REPLY header.

use super::super::bson::{Scalar, ty};
use super::super::commands::Mode;
use super::super::shape::SHAPE;
use super::super::wire::{Cursor, op, reply_flag};
use super::{
    BodyParser, MAX_KILL_IDS, NAME_CAP, Next, R_ROOT, ROOT_CMD, ROOT_LEGACY_QUERY, ReqKind, Res,
    St, invalid,
};

impl BodyParser {
    /// OP_QUERY and OP_INSERT flags: then the full collection name.
    pub(super) fn legacy_flags(&mut self) -> Res<()> {
        self.st = St::Namespace;
        self.r.cstr(2 * NAME_CAP);
        Ok(())
    }

    /// The reserved zero of OP_UPDATE, OP_DELETE, OP_GET_MORE, OP_KILL_CURSORS.
    pub(super) fn zero(&mut self) -> Res<()> {
        if self.opcode == op::KILL_CURSORS {
            self.fixed(St::NumberOfIds, 4);
        } else {
            self.st = St::Namespace;
            self.r.cstr(2 * NAME_CAP);
        }
        Ok(())
    }

    /// The full collection name `<db>.<collection>`; `<db>.$cmd` makes an OP_QUERY a command.
    pub(super) fn namespace(&mut self) -> Res<()> {
        let ns = self.r.bytes().to_vec();
        let opcode = self.opcode;
        let left = self.left;
        let mut is_cmd = false;
        if let Some(r) = self.req_mut() {
            r.set_namespace(&ns);
            if opcode == op::QUERY && r.collection.as_deref() == Some(b"$cmd") {
                r.kind = ReqKind::Command(None);
                r.collection = None;
                r.legacy_cmd = true;
                is_cmd = true;
            }
        }
        self.query_is_command = is_cmd;
        match opcode {
            op::QUERY => self.fixed(St::NumberToSkip, 4),
            op::INSERT if left == 0 => self.st = St::Done,
            op::INSERT => {
                self.count_doc();
                self.skip_doc();
            }
            op::UPDATE | op::DELETE => self.fixed(St::WriteFlags, 4),
            _ => self.fixed(St::NumberToReturn, 4),
        }
        Ok(())
    }

    /// OP_QUERY numberToSkip: then numberToReturn.
    pub(super) fn number_to_skip(&mut self) -> Res<()> {
        self.fixed(St::NumberToReturn, 4);
        Ok(())
    }

    /// numberToReturn: then OP_GET_MORE's cursor id, or OP_QUERY's query document.
    pub(super) fn number_to_return(&mut self) -> Res<()> {
        if self.opcode == op::GET_MORE {
            self.fixed(St::CursorId, 8);
        } else {
            let ctx = if self.query_is_command {
                ROOT_CMD
            } else {
                ROOT_LEGACY_QUERY
            };
            self.doc(ctx);
        }
        Ok(())
    }

    /// OP_GET_MORE's cursor id, last.
    pub(super) fn get_more_cursor(&mut self) -> Res<()> {
        let id = self.r.i64();
        if let Some(r) = self.req_mut() {
            r.cursor_id = Some(id);
        }
        self.end_legacy()
    }

    /// OP_UPDATE / OP_DELETE flags, shown in the shape (upsert, multi; limit 1); then the
    /// selector.
    pub(super) fn write_flags(&mut self) -> Res<()> {
        let flags = self.r.i32();
        let opcode = self.opcode;
        if let Some(r) = self.req_mut() {
            if opcode == op::UPDATE {
                if flags & 1 != 0 {
                    r.shape.member(b"upsert", ty::BOOL, Mode::Keep);
                    r.shape.scalar(Scalar::Bool(true));
                }
                if flags & 2 != 0 {
                    r.shape.member(b"multi", ty::BOOL, Mode::Keep);
                    r.shape.scalar(Scalar::Bool(true));
                }
            } else if flags & 1 != 0 {
                r.shape.member(b"limit", ty::INT32, Mode::Keep);
                r.shape.scalar(Scalar::Int32(1));
            }
            r.shape.member_root(b"q", Mode::Values);
        }
        self.next = if opcode == op::UPDATE {
            Next::Selector
        } else {
            Next::Last
        };
        self.doc(SHAPE);
        Ok(())
    }

    /// OP_KILL_CURSORS numberOfCursorIDs: must fill the rest of the body.
    pub(super) fn number_of_ids(&mut self) -> Res<()> {
        let n = self.r.i32();
        if n < 0 || n as u64 * 8 != self.left {
            return Err(invalid("OP_KILL_CURSORS", "id count does not fit"));
        }
        self.ids_left = n as u32;
        if n == 0 {
            self.st = St::Done;
        } else {
            self.fixed(St::KillId, 8);
        }
        Ok(())
    }

    /// One OP_KILL_CURSORS cursor id (the first [`MAX_KILL_IDS`] are kept).
    pub(super) fn kill_id(&mut self) -> Res<()> {
        let id = self.r.i64();
        if let Some(r) = self.req_mut()
            && r.kill_ids.len() < MAX_KILL_IDS
        {
            r.kill_ids.push(id);
        }
        self.ids_left -= 1;
        if self.ids_left == 0 {
            self.st = St::Done;
        } else {
            self.fixed(St::KillId, 8);
        }
        Ok(())
    }

    /// The OP_REPLY header, always 20 bytes: responseFlags, cursorID, startingFrom,
    /// numberReturned. Then the documents, the first walked when it answers a command or
    /// reports a query failure.
    pub(super) fn reply_header(&mut self) -> Res<()> {
        let mut c = Cursor::new(self.r.bytes());
        let flags = c.i32("responseFlags").unwrap_or(0);
        let cursor = c.i64("cursorID").unwrap_or(0);
        let walk_first = self.reply_is_command || flags & reply_flag::QUERY_FAILURE != 0;
        if let Some(r) = self.reply_mut() {
            r.legacy_flags = flags;
            r.legacy_cursor_id = cursor;
        }
        self.next = Next::ReplyDocs;
        if self.left == 0 {
            self.st = St::Done;
        } else {
            self.count_doc();
            if walk_first {
                self.doc(R_ROOT);
            } else {
                self.skip_doc();
            }
        }
        Ok(())
    }
}
