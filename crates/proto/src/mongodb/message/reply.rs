//! What a reply says: ok, error, n, nModified, documents returned, cursor id, write errors,
//! collected as a [`Visitor`] over the reply's documents.

use super::super::bson::{Act, Ctx, Scalar, Visitor, ty};
use super::super::wire::{msg_flag, reply_flag};
use super::{
    R_BATCH, R_CURSOR, R_LAST_ERROR, R_ROOT, R_UPSERTED, R_VALUES, R_WCE, R_WRITE_ERROR,
    R_WRITE_ERRORS,
};

/// Everything a reply message says that dbtap keeps.
#[derive(Debug, Default)]
pub struct Reply {
    /// OP_MSG flags (moreToCome: more replies to the same request follow).
    pub flags: u32,
    /// `ok` as sent (absent in legacy query results).
    pub ok: Option<bool>,
    pub code: Option<i64>,
    pub code_name: Option<String>,
    pub errmsg: Option<String>,
    pub n: Option<i64>,
    pub n_modified: Option<i64>,
    /// Elements of `upserted`.
    pub upserted: u64,
    /// `cursor.id`.
    pub cursor_id: Option<i64>,
    /// Documents in `cursor.firstBatch` / `cursor.nextBatch`.
    pub batch: u64,
    /// Elements of distinct's `values`.
    pub values: u64,
    /// Elements of `writeErrors`.
    pub write_errors: u64,
    pub write_error: Option<(i64, Option<String>, String)>,
    /// `writeConcernError`: code, codeName, errmsg.
    pub write_concern_error: Option<(i64, Option<String>, String)>,
    /// `lastErrorObject.n` (findAndModify).
    pub last_error_n: Option<i64>,
    /// OP_REPLY: responseFlags, cursorID and the documents counted.
    pub legacy_flags: i32,
    pub legacy_cursor_id: i64,
    pub legacy_docs: u64,
    pub malformed: bool,
    pending: RPending,
    wce: (Option<i64>, Option<String>, Option<String>),
    we: (Option<i64>, Option<String>, Option<String>),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum RPending {
    #[default]
    None,
    Key(Ctx),
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Reply {
    /// Frees the texts it holds (the rest is started over by its next message).
    pub(super) fn forget_text(&mut self) {
        self.code_name = None;
        self.errmsg = None;
        self.write_error = None;
        self.write_concern_error = None;
        self.wce = (None, None, None);
        self.we = (None, None, None);
    }

    /// The error the reply reports: `ok: 0`, the first write error, a write-concern error or
    /// a legacy query failure; as (code, codeName, errmsg).
    pub fn error(&self) -> Option<(i64, Option<String>, String)> {
        if self.ok == Some(false) || self.legacy_flags & reply_flag::QUERY_FAILURE != 0 {
            return Some((
                self.code.unwrap_or(0),
                self.code_name.clone(),
                self.errmsg.clone().unwrap_or_default(),
            ));
        }
        if self.legacy_flags & reply_flag::CURSOR_NOT_FOUND != 0 {
            return Some((43, Some("CursorNotFound".into()), "cursor not found".into()));
        }
        self.write_error
            .clone()
            .or_else(|| self.write_concern_error.clone())
    }

    /// More replies to the same request follow (exhaust).
    pub fn more_to_come(&self) -> bool {
        self.flags & msg_flag::MORE_TO_COME != 0
    }

    pub(super) fn finish(&mut self) {
        if let (Some(c), n, m) = std::mem::take(&mut self.we) {
            self.write_error = Some((c, n, m.unwrap_or_default()));
        }
        if let (Some(c), n, m) = std::mem::take(&mut self.wce) {
            self.write_concern_error = Some((c, n, m.unwrap_or_default()));
        }
    }
}

impl Visitor for Reply {
    fn element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        let read = |s: &mut Reply| {
            s.pending = RPending::Key(parent);
            Act::Read
        };
        match (parent, key, t) {
            (R_ROOT, b"cursor", ty::DOCUMENT) => Act::Descend(R_CURSOR),
            (R_ROOT, b"writeErrors", ty::ARRAY) => Act::Descend(R_WRITE_ERRORS),
            (R_ROOT, b"writeConcernError", ty::DOCUMENT) => Act::Descend(R_WCE),
            (R_ROOT, b"lastErrorObject", ty::DOCUMENT) => Act::Descend(R_LAST_ERROR),
            (R_ROOT, b"values", ty::ARRAY) => Act::Descend(R_VALUES),
            (R_ROOT, b"upserted", ty::ARRAY) => Act::Descend(R_UPSERTED),
            (
                R_ROOT,
                b"ok" | b"code" | b"codeName" | b"errmsg" | b"$err" | b"n" | b"nModified",
                _,
            ) => read(self),
            (R_CURSOR, b"id", _) => read(self),
            (R_CURSOR, b"firstBatch" | b"nextBatch", ty::ARRAY) => Act::Descend(R_BATCH),
            (R_BATCH, ..) => {
                self.batch += 1;
                Act::Skip
            }
            (R_VALUES, ..) => {
                self.values += 1;
                Act::Skip
            }
            (R_UPSERTED, ..) => {
                self.upserted += 1;
                Act::Skip
            }
            (R_WRITE_ERRORS, _, _) => {
                self.write_errors += 1;
                if index == 0 && t == ty::DOCUMENT {
                    Act::Descend(R_WRITE_ERROR)
                } else {
                    Act::Skip
                }
            }
            (R_WRITE_ERROR | R_WCE, b"code" | b"codeName" | b"errmsg", _) => read(self),
            (R_LAST_ERROR, b"n", _) => read(self),
            _ => Act::Skip,
        }
    }

    fn scalar(&mut self, _: Ctx, key: &[u8], v: Scalar<'_>) {
        let RPending::Key(parent) = std::mem::take(&mut self.pending) else {
            return;
        };
        let text = match v {
            Scalar::Str { bytes, .. } => Some(lossy(bytes)),
            _ => None,
        };
        match (parent, key) {
            (R_ROOT, b"ok") => self.ok = Some(v.truthy()),
            (R_ROOT, b"code") => self.code = v.as_i64(),
            (R_ROOT, b"codeName") => self.code_name = text,
            (R_ROOT, b"errmsg") => self.errmsg = text,
            (R_ROOT, b"$err") if self.errmsg.is_none() => self.errmsg = text,
            (R_ROOT, b"n") => self.n = v.as_i64(),
            (R_ROOT, b"nModified") => self.n_modified = v.as_i64(),
            (R_CURSOR, b"id") => self.cursor_id = v.as_i64(),
            (R_LAST_ERROR, b"n") => self.last_error_n = v.as_i64(),
            (R_WRITE_ERROR | R_WCE, k) => {
                let e = if parent == R_WCE {
                    &mut self.wce
                } else {
                    &mut self.we
                };
                match k {
                    b"code" => e.0 = v.as_i64(),
                    b"codeName" => e.1 = text,
                    _ => e.2 = text,
                }
            }
            _ => {}
        }
    }

    fn leave(&mut self, _: Ctx) {}
}
