//! What a request says: the command (or legacy opcode), database, collection, query shape,
//! documents sent and cursor ids, collected as a [`Visitor`] over the request's documents.

use super::super::bson::{Act, Ctx, Scalar, Visitor, ty};
use super::super::commands::{self, Command, Mode, Role};
use super::super::shape::{SHAPE, Shape};
use super::super::wire::{msg_flag, op};
use super::{
    CURSOR_IDS, DOCUMENTS, MAX_KILL_IDS, NAME_CAP, ROOT_CMD, ROOT_LEGACY_QUERY, STATEMENT,
    STATEMENTS, UNKNOWN_NAME_CAP, WRAPPED_CMD,
};

/// What a request is.
#[derive(Clone, Copy, Debug)]
pub enum ReqKind {
    /// A command (OP_MSG, or OP_QUERY on `<db>.$cmd`): a known one, or `None` for an unknown
    /// command name.
    Command(Option<&'static Command>),
    /// A legacy operation (OP_QUERY on a collection, OP_INSERT, ...): its opcode.
    Legacy(i32),
    /// An opcode we do not know.
    Unknown(i32),
}

/// Everything a request message says that dbtap keeps.
#[derive(Debug)]
pub struct Request {
    pub kind: ReqKind,
    /// The command name as sent, for unknown commands (cut, sanitized).
    pub unknown_name: Option<String>,
    pub db: Option<Vec<u8>>,
    pub collection: Option<Vec<u8>>,
    pub shape: Shape,
    /// Documents (insert) or statements (update, delete) sent.
    pub docs: u64,
    /// The cursor a getMore (or OP_GET_MORE) reads.
    pub cursor_id: Option<i64>,
    /// Cursors a killCursors (or OP_KILL_CURSORS) closes (the first [`MAX_KILL_IDS`]).
    pub kill_ids: Vec<i64>,
    /// OP_MSG flags (0 for other opcodes).
    pub flags: u32,
    /// The body could not be read to its end (malformed or cut by a capture gap).
    pub malformed: bool,
    // Parsing state.
    /// An OP_QUERY on `$cmd`: the command may be wrapped in `$query`.
    pub(super) legacy_cmd: bool,
    pending: Pending,
    legacy_plain: Option<bool>,
    /// The buffers of the last request's names, for this one's.
    spare_names: [Vec<u8>; 2],
    /// Commands the last requests named, looked up again only when the name differs from
    /// each one's name as the table spells it (a connection repeats a few commands).
    recent_cmds: [Option<&'static Command>; RECENT_CMDS],
}

const RECENT_CMDS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    None,
    Shape,
    Collection,
    Db,
    CursorId,
    KillId,
}

impl Request {
    pub(super) fn new(kind: ReqKind, shape_cap: usize) -> Self {
        Request {
            kind,
            unknown_name: None,
            db: None,
            collection: None,
            shape: Shape::new(shape_cap),
            docs: 0,
            cursor_id: None,
            kill_ids: Vec::new(),
            flags: 0,
            malformed: false,
            legacy_cmd: false,
            pending: Pending::None,
            legacy_plain: None,
            spare_names: [Vec::new(), Vec::new()],
            recent_cmds: [None; RECENT_CMDS],
        }
    }

    /// Starts over as [`Request::new`] would, keeping the buffers (shape, names, cursor ids).
    pub(super) fn reset(&mut self, kind: ReqKind, shape_cap: usize) {
        let mut shape = std::mem::take(&mut self.shape);
        shape.reset(shape_cap);
        let mut kill_ids = std::mem::take(&mut self.kill_ids);
        kill_ids.clear();
        let mut spare_names = std::mem::take(&mut self.spare_names);
        for (slot, spare) in [&mut self.db, &mut self.collection]
            .into_iter()
            .zip(&mut spare_names)
        {
            if let Some(v) = slot.take() {
                *spare = v;
            }
        }
        let recent_cmds = self.recent_cmds;
        *self = Request {
            shape,
            kill_ids,
            spare_names,
            recent_cmds,
            ..Request::new(kind, shape_cap)
        };
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        let names = [&self.db, &self.collection]
            .into_iter()
            .flatten()
            .chain(&self.spare_names)
            .map(Vec::capacity)
            .sum::<usize>();
        self.shape.buffered_bytes() + self.kill_ids.capacity() * 8 + names
    }

    /// No reply will come: OP_MSG with moreToCome, or a legacy write or kill-cursors.
    pub fn expects_no_reply(&self) -> bool {
        match self.kind {
            ReqKind::Command(_) => self.flags & msg_flag::MORE_TO_COME != 0,
            ReqKind::Legacy(o) => {
                matches!(o, op::INSERT | op::UPDATE | op::DELETE | op::KILL_CURSORS)
            }
            ReqKind::Unknown(_) => false,
        }
    }

    /// The lower-case command name of [`crate::QueryEvent::command`].
    pub fn command_name(&self) -> &'static str {
        match self.kind {
            ReqKind::Command(Some(c)) => c.lower,
            ReqKind::Command(None) | ReqKind::Unknown(_) => "unknown",
            ReqKind::Legacy(o) => legacy_name(o).0,
        }
    }

    /// The command name as the text shows it.
    pub fn text_name(&self) -> &str {
        match self.kind {
            ReqKind::Command(Some(c)) => c.name,
            ReqKind::Command(None) => self.unknown_name.as_deref().unwrap_or("unknown"),
            ReqKind::Legacy(o) => legacy_name(o).1,
            ReqKind::Unknown(_) => "unknown",
        }
    }

    /// Whether this is a command with the given lower-case name.
    pub fn is(&self, lower: &str) -> bool {
        matches!(self.kind, ReqKind::Command(Some(c)) if c.lower == lower)
    }

    fn command(&self) -> Option<&'static Command> {
        match self.kind {
            ReqKind::Command(c) => c,
            _ => None,
        }
    }

    /// Sets db and collection from a legacy `<db>.<collection>` name.
    pub(super) fn set_namespace(&mut self, ns: &[u8]) {
        match ns.iter().position(|&b| b == b'.') {
            Some(i) => {
                self.db = ns.get(..i).map(<[u8]>::to_vec);
                self.collection = ns.get(i + 1..).map(<[u8]>::to_vec);
            }
            None => self.db = Some(ns.to_vec()),
        }
    }

    /// [`commands::lookup`], first among the commands the last requests named.
    fn command_named(&mut self, key: &[u8]) -> Option<&'static Command> {
        if let Some(c) = self
            .recent_cmds
            .iter()
            .flatten()
            .find(|c| c.name.as_bytes() == key)
        {
            return Some(c);
        }
        let cmd = commands::lookup(key)?;
        self.recent_cmds.rotate_right(1);
        self.recent_cmds[0] = Some(cmd);
        Some(cmd)
    }

    /// Element of a command document (root, or wrapped in `$query`).
    fn cmd_element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        if index == 0 {
            if parent == ROOT_CMD && self.legacy_cmd && key == b"$query" && t == ty::DOCUMENT {
                return Act::Descend(WRAPPED_CMD);
            }
            let cmd = self.command_named(key);
            self.kind = ReqKind::Command(cmd);
            match cmd {
                None => {
                    let name: String = String::from_utf8_lossy(key)
                        .chars()
                        .take(UNKNOWN_NAME_CAP)
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '-') {
                                c
                            } else {
                                '_'
                            }
                        })
                        .collect();
                    self.unknown_name = Some(if name.is_empty() { "_".into() } else { name });
                }
                Some(c) if c.coll && t == ty::STRING => {
                    self.pending = Pending::Collection;
                    return Act::Read;
                }
                Some(c) if c.lower == "getmore" && t == ty::INT64 => {
                    self.pending = Pending::CursorId;
                    return Act::Read;
                }
                Some(_) => {}
            }
            return Act::Skip;
        }
        if key == b"$db" && t == ty::STRING {
            self.pending = Pending::Db;
            return Act::Read;
        }
        let Some(role) = self.command().and_then(|c| c.role(key)) else {
            return Act::Skip;
        };
        self.role_element(role, key, t)
    }

    fn role_element(&mut self, role: Role, key: &[u8], t: u8) -> Act {
        match (role, t) {
            (Role::Shape(mode), _) => {
                let act = self.shape.member(key, t, mode);
                self.shape_read(act)
            }
            (Role::Statements, ty::ARRAY) => Act::Descend(STATEMENTS),
            (Role::Documents, ty::ARRAY) => Act::Descend(DOCUMENTS),
            (Role::CursorIds, ty::ARRAY) => Act::Descend(CURSOR_IDS),
            (Role::Collection, ty::STRING) => {
                self.pending = Pending::Collection;
                Act::Read
            }
            _ => Act::Skip,
        }
    }

    /// The shape asked to read a scalar: it gets the value.
    fn shape_read(&mut self, act: Act) -> Act {
        if act == Act::Read {
            self.pending = Pending::Shape;
        }
        act
    }

    /// A document of an OP_MSG kind-1 section.
    pub(super) fn sequence_role(&self, ident: &[u8]) -> Option<Role> {
        match self.command() {
            Some(c) => c.role(ident),
            // The command document may come after the sequence: go by the identifier.
            None => match ident {
                b"updates" | b"deletes" => Some(Role::Statements),
                b"documents" => Some(Role::Documents),
                _ => None,
            },
        }
    }
}

/// Sets `slot` to `bytes` (cut at [`NAME_CAP`]), in its own buffer or `spare`'s.
fn set_name(slot: &mut Option<Vec<u8>>, spare: &mut Vec<u8>, bytes: &[u8]) {
    let mut v = slot.take().unwrap_or_else(|| std::mem::take(spare));
    v.clear();
    v.extend_from_slice(bytes.get(..NAME_CAP as usize).unwrap_or(bytes));
    *slot = Some(v);
}

fn legacy_name(opcode: i32) -> (&'static str, &'static str) {
    match opcode {
        op::QUERY => ("op_query", "OP_QUERY"),
        op::INSERT => ("op_insert", "OP_INSERT"),
        op::UPDATE => ("op_update", "OP_UPDATE"),
        op::DELETE => ("op_delete", "OP_DELETE"),
        op::GET_MORE => ("op_get_more", "OP_GET_MORE"),
        op::KILL_CURSORS => ("op_kill_cursors", "OP_KILL_CURSORS"),
        _ => ("unknown", "unknown"),
    }
}

fn is_query_modifier(key: &[u8]) -> bool {
    matches!(
        key,
        b"$query"
            | b"query"
            | b"$orderby"
            | b"orderby"
            | b"$hint"
            | b"$explain"
            | b"$snapshot"
            | b"$comment"
            | b"$maxTimeMS"
            | b"$readPreference"
            | b"$returnKey"
            | b"$showDiskLoc"
            | b"$min"
            | b"$max"
            | b"$maxScan"
    )
}

impl Visitor for Request {
    fn element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        match parent {
            ROOT_CMD | WRAPPED_CMD => self.cmd_element(parent, key, t, index),
            SHAPE => {
                let act = self.shape.element(key, t);
                self.shape_read(act)
            }
            ROOT_LEGACY_QUERY => {
                if index == 0 {
                    let plain = !is_query_modifier(key);
                    self.legacy_plain = Some(plain);
                    if plain {
                        self.shape.member_root(b"filter", Mode::Values);
                    }
                }
                if self.legacy_plain == Some(true) {
                    let act = self.shape.element(key, t);
                    return self.shape_read(act);
                }
                let (name, mode): (&[u8], Mode) = match key {
                    b"$query" | b"query" => (b"filter", Mode::Values),
                    b"$orderby" | b"orderby" => (b"sort", Mode::Keep),
                    b"$hint" => (b"hint", Mode::Keep),
                    _ => return Act::Skip,
                };
                let act = self.shape.member(name, t, mode);
                self.shape_read(act)
            }
            STATEMENTS => {
                self.docs += 1;
                if index == 0 && t == ty::DOCUMENT {
                    Act::Descend(STATEMENT)
                } else {
                    Act::Skip
                }
            }
            STATEMENT => match commands::statement_field(key) {
                Some(mode) => {
                    let act = self.shape.member(key, t, mode);
                    self.shape_read(act)
                }
                None => Act::Skip,
            },
            DOCUMENTS => {
                self.docs += 1;
                Act::Skip
            }
            CURSOR_IDS => {
                if t == ty::INT64 && self.kill_ids.len() < MAX_KILL_IDS {
                    self.pending = Pending::KillId;
                    Act::Read
                } else {
                    Act::Skip
                }
            }
            _ => Act::Skip,
        }
    }

    fn scalar(&mut self, _: Ctx, _: &[u8], v: Scalar<'_>) {
        let pending = std::mem::replace(&mut self.pending, Pending::None);
        match (pending, v) {
            (Pending::Shape, v) => self.shape.scalar(v),
            (Pending::Collection, Scalar::Str { bytes, .. }) => {
                let [_, spare] = &mut self.spare_names;
                set_name(&mut self.collection, spare, bytes);
            }
            (Pending::Db, Scalar::Str { bytes, .. }) => {
                let [spare, _] = &mut self.spare_names;
                set_name(&mut self.db, spare, bytes);
            }
            (Pending::CursorId, Scalar::Int64(id)) => self.cursor_id = Some(id),
            (Pending::KillId, Scalar::Int64(id)) => self.kill_ids.push(id),
            _ => {}
        }
    }

    fn leave(&mut self, ctx: Ctx) {
        match ctx {
            SHAPE => self.shape.leave(),
            ROOT_LEGACY_QUERY => match self.legacy_plain {
                Some(true) => self.shape.leave(),
                Some(false) => {}
                None => {
                    // An empty filter.
                    self.shape.member_root(b"filter", Mode::Values);
                    self.shape.leave();
                }
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recent commands answer exactly what the table's lookup answers, whatever the case
    /// and the order the names come in, and a reset keeps them.
    #[test]
    fn recent_commands_answer_as_the_table() {
        let mut r = Request::new(ReqKind::Command(None), 64);
        let names: [&[u8]; 12] = [
            b"find",
            b"getMore",
            b"find",
            b"ISMASTER",
            b"isMaster",
            b"ismaster",
            b"insert",
            b"update",
            b"delete",
            b"aggregate",
            b"nope",
            b"find",
        ];
        for round in 0..3 {
            for n in names {
                let want = commands::lookup(n).map(|c| c.lower);
                assert_eq!(r.command_named(n).map(|c| c.lower), want, "{round} {n:?}");
            }
            r.reset(ReqKind::Command(None), 64);
        }
        assert!(r.recent_cmds.iter().all(Option::is_some));
    }
}
