//! The documents of a body: walked (root elements tagged with a context), skipped by their
//! length prefix, counted; and what comes after each one, by what the run of documents is
//! ([`Next`]).

use super::super::bson::Ctx;
use super::super::commands::{Mode, Role};
use super::super::shape::SHAPE;
use super::{BodyParser, Next, R_ROOT, ROOT_CMD, Res, St, invalid};

impl BodyParser {
    /// Walks a document whose root elements get context `ctx`.
    pub(super) fn doc(&mut self, ctx: Ctx) {
        self.st = St::Doc(ctx);
        let limit = self.doc_room();
        self.w.start(ctx, limit);
    }

    /// Bytes a document may take: the rest of the sequence, or of the body before the
    /// checksum.
    #[inline]
    fn doc_room(&self) -> u64 {
        match self.next {
            Next::Sequence => self.seq_left,
            _ => self.left.saturating_sub(self.reserve),
        }
    }

    /// Skips a document by its length.
    pub(super) fn skip_doc(&mut self) {
        self.fixed(St::DocLen, 4);
    }

    /// The length of a skipped document was read: skip its body.
    pub(super) fn doc_len(&mut self) -> Res<()> {
        let len = i64::from(self.r.i32());
        if len < 5 || (len - 4) as u64 > self.doc_room() {
            return Err(invalid(
                "BSON document length",
                "below 5 or past its container",
            ));
        }
        self.st = St::DocBody;
        self.r.take((len - 4) as u64, 0);
        Ok(())
    }

    /// Counts one document of the current run.
    pub(super) fn count_doc(&mut self) {
        match self.next {
            Next::Inserts => {
                if let Some(r) = self.req_mut() {
                    r.docs += 1;
                }
            }
            Next::Sequence => {
                if matches!(self.seq_role, Some(Role::Statements | Role::Documents))
                    && let Some(r) = self.req_mut()
                {
                    r.docs += 1;
                }
            }
            Next::ReplyDocs => {
                if let Some(r) = self.reply_mut() {
                    r.legacy_docs += 1;
                }
            }
            _ => {}
        }
    }

    /// After the documents of a legacy body: the end.
    pub(super) fn end_legacy(&mut self) -> Res<()> {
        if self.left != 0 {
            return Err(invalid("message body", "bytes after the last document"));
        }
        self.st = St::Done;
        Ok(())
    }

    /// A document (walked or skipped) ended.
    pub(super) fn doc_done(&mut self, ctx: Ctx) -> Res<()> {
        match self.next {
            Next::Body => {
                if matches!(ctx, ROOT_CMD | R_ROOT) {
                    self.body_seen = true;
                }
                self.section_or_end();
            }
            Next::Sequence => self.next_in_sequence(),
            Next::Query => self.after_query(),
            Next::Selector => {
                self.next = Next::Update;
                if let Some(r) = self.req_mut() {
                    r.shape.member_root(b"u", Mode::Update);
                }
                self.doc(SHAPE);
            }
            Next::Projection | Next::Update | Next::Last => self.end_legacy()?,
            Next::Inserts | Next::ReplyDocs => {
                if self.left == 0 {
                    self.st = St::Done;
                } else {
                    self.count_doc();
                    self.skip_doc();
                }
            }
        }
        Ok(())
    }

    /// OP_QUERY: after the query, the end or a projection (walked into the shape, unless
    /// the query is a command).
    fn after_query(&mut self) {
        if self.left == 0 {
            self.st = St::Done;
            return;
        }
        self.next = Next::Projection;
        if self.query_is_command {
            self.skip_doc();
        } else {
            if let Some(r) = self.req_mut() {
                r.shape.member_root(b"projection", Mode::Keep);
            }
            self.doc(SHAPE);
        }
    }
}
