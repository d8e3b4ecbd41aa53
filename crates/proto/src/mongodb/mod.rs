//! MongoDB wire protocol: framing, a streaming BSON skimmer, messages and the per-connection
//! session.
//!
//! [`new_session`] builds a [`MongoSession`] implementing [`crate::Session`]. It reads OP_MSG
//! (the body section and kind-1 document sequences, the checksum flag, moreToCome and exhaust),
//! OP_QUERY and OP_REPLY (commands on `<db>.$cmd`, `$query`/`$orderby` wrappers), the legacy
//! OP_INSERT, OP_UPDATE, OP_DELETE, OP_GET_MORE and OP_KILL_CURSORS, and OP_COMPRESSED with
//! snappy, zlib, zstd (and noop). Replies are matched to requests by `responseTo`, not by
//! order. BSON is skimmed as it streams, never built: a 16 MB batch of documents is counted by
//! its length prefixes with a few hundred bytes of state, and compressed bodies are
//! decompressed in 16 KiB pieces.
//!
//! # Command names
//!
//! [`crate::QueryEvent::command`] is the lower-case name of a known command from
//! [`commands::COMMANDS`] (`find`, `insert`, `update`, `delete`, `aggregate`, `count`,
//! `distinct`, `getmore`, `findandmodify`, `hello`, `ismaster`, `ping`, `endsessions`,
//! `killcursors`, `createindexes`, ...; `isMaster` and `ismaster` are one command), `unknown`
//! for any other command name or opcode, and for the legacy operations `op_query` (an
//! OP_QUERY on a collection), `op_insert`, `op_update`, `op_delete`, `op_get_more` and
//! `op_kill_cursors`. An OP_QUERY on `<db>.$cmd` is the command it carries.
//!
//! # Text: the query shape
//!
//! [`crate::QueryEvent::text`] never holds a literal value. It is
//! `<command> <db>.<collection> <shape>`:
//!
//! * `<command>` is the command as MongoDB spells it (`find`, `findAndModify`, `isMaster`), the
//!   name as sent for an unknown command (cut at 64 characters, odd characters as `_`), or the
//!   legacy opcode name (`OP_QUERY`);
//! * `<db>.<collection>` comes from `$db` and the command's first value (commands on a
//!   collection), getMore's `collection`, or the legacy full collection name. Without a
//!   collection it is `<db>` alone; an unknown database is `?`. Spaces, control characters and
//!   `%` in names are percent-escaped (`%20`);
//! * `<shape>`, when the command has one, is a JSON object of the fields that describe the
//!   query, keys in the order they were sent:
//!   - find: `filter`, `sort`, `projection`, `hint`, `limit`, `skip`; aggregate: `pipeline`;
//!     count: `query`, `hint`, `limit`, `skip`; distinct: `key`, `query`; findAndModify:
//!     `query`, `sort`, `fields`, `update`, `remove`, `new`, `upsert`, `arrayFilters`;
//!     mapReduce: `query`, `sort`; createIndexes: `indexes`; dropIndexes: `index`;
//!     listCollections, listDatabases: `filter`;
//!   - update and delete: `q`, `u`, `multi`, `upsert`, `limit`, `arrayFilters`, `hint` of the
//!     first statement (further statements are counted, not shown);
//!   - legacy: OP_QUERY `filter` (the document, or its `$query`), `sort` (`$orderby`), `hint`,
//!     `projection`; OP_UPDATE `q`, `u` (and `upsert`/`multi` when flagged); OP_DELETE `q`
//!     (and `limit: 1` for a single remove).
//!
//!   Values: in filters, queries and updates every value is `"?"`; `$in`, `$nin` and `$all`
//!   arrays fold to one `"?"` (so `{a: {$in: [1]}}` and `{a: {$in: [1, 2, 3]}}` share a shape),
//!   and so does any array holding only scalars; arrays of documents (`$or`, `$and`) keep one
//!   shape per element; operators (keys) are kept as sent, so `{a: 5}` and `{a: {$eq: 5}}` are
//!   two shapes. Sort, projection, hint, index keys and option flags keep numbers and
//!   booleans (`{"_id":1}`, `"multi":true`): direction matters. `limit` and `skip` are `"?"`.
//!   Pipelines are shown as filters, except that field paths (`"$amount"`) are kept and a
//!   `$sort` stage keeps its directions. distinct's `key` is kept (a field name).
//!
//! For example `find test.users {"filter":{"age":{"$gt":"?"},"name":"?"},"sort":{"_id":1}}`,
//! `insert test.users`, `update test.users {"q":{"name":"?"},"u":{"$set":{"name":"?"}},"multi":true}`,
//! `ping admin`. The session keeps keys in wire order; `fingerprint::mongodb` sorts them
//! (except inside sorts, where order matters) unless asked to keep their order. The shape is
//! cut at 64 KiB (or `max_text`), which sets `text_truncated`.
//!
//! # getMore and cursors
//!
//! A getMore carries the shape of the command that opened its cursor: when a find, an
//! aggregate, a listCollections, a listIndexes or an OP_QUERY is answered with a cursor id, the
//! connection remembers `getMore <db>.<collection> <shape of the original>` for that id (up to
//! 256 open cursors, the oldest forgotten first); a getMore (or OP_GET_MORE) on that cursor
//! carries that text (one shared allocation per cursor), so all the getMores of one query
//! shape group together. A cursor is forgotten when a reply says it is exhausted (id 0) or a
//! killCursors names it. A getMore on a cursor opened before the capture is
//! `getMore <db>.<collection>`.
//!
//! # Rows and errors
//!
//! `rows_sent` is the number of documents in `cursor.firstBatch`/`cursor.nextBatch`
//! (find, aggregate, getMore, ...), the length of distinct's `values`, or the documents of an
//! OP_REPLY to a legacy query. `rows_affected` is `n` for insert and delete, `nModified` plus
//! the upserted documents for update, and `lastErrorObject.n` for findAndModify; for writes
//! that expect no reply (moreToCome, legacy OP_INSERT/OP_UPDATE/OP_DELETE) it is the number
//! of documents or statements sent. An error is `ok: 0` (code, codeName as `state`, errmsg),
//! the first of `writeErrors`, a `writeConcernError`, an OP_REPLY QueryFailure (`$err`) or
//! CursorNotFound (code 43): [`crate::Outcome::Error`] with [`crate::DbError`].
//!
//! # Pairing
//!
//! A reply answers the request whose requestID is its `responseTo`. An OP_MSG request with
//! moreToCome, and the legacy writes and OP_KILL_CURSORS, expect no reply: they are emitted at
//! once with [`crate::Outcome::NoReplyExpected`]. Exhaust: a reply with moreToCome is followed
//! by more replies to the same request, each answering the previous reply's requestID; their
//! rows and bytes add up in one event, which ends with the last reply. Past `max_inflight`
//! requests waiting for replies, further requests are dropped and counted in
//! [`crate::Health::inflight_overflow`].
//!
//! # Picking up mid-stream, gaps and damage
//!
//! A direction that lost sync (a capture that started mid-connection, a gap the framing cannot
//! bridge, an impossible header) searches byte by byte for a plausible message start (see
//! [`looks_like_message`] and [`wire::plausible_start`]: a length the opcode allows and at most
//! 48 MB, an opcode that side sends, `responseTo` 0 for requests and not 0 for replies, and the
//! first fields of the body sane). A gap inside a message whose end is known keeps the framing:
//! that request or reply is marked damaged and its event is [`crate::Outcome::Incomplete`],
//! still counted, paired and timed. The body is parsed up to the gap only, so a request that
//! lost bytes has the shape of what was read before it (the command name alone, or `unknown`,
//! when little was), and [`crate::QueryEvent::text_partial`] set. A gap that runs past the end
//! of the message ends it the same way, then the direction loses sync.
//! Replies to requests the session did not see are skipped (counted in
//! [`crate::Health::responses_without_request`] only when no request can have been lost).
//! A reply lost in a server-side gap leaves its request waiting: it is emitted as incomplete
//! when a later request is answered, or at close. A body that does not parse (bad BSON, an
//! unknown section kind, bad compressed data) is counted in [`crate::Health::malformed`]; the
//! framing goes on, and what was read before the damage is kept. A TLS ClientHello as the
//! first client bytes counts as an encrypted connection and stops the session. The checksum
//! of OP_MSG is skipped, not verified.

pub mod bson;
pub mod commands;
pub mod message;
pub mod session;
pub mod shape;
pub mod wire;

pub use session::MongoSession;

use crate::registry::{self, CommandFacts, Detection, ProtocolSpec, Reply};
use crate::{ConnMeta, Protocol, SessionConfig};

/// The default mongod/mongos port.
pub const DEFAULT_PORT: u16 = 27017;

/// What MongoDB declares to the [registry](crate::registry): a request header names its
/// protocol at any message boundary, so one recognizer serves a captured start and a pickup
/// mid-stream alike.
pub static SPEC: ProtocolSpec = ProtocolSpec {
    protocol: Protocol::Mongodb,
    default_ports: &[DEFAULT_PORT],
    detect: Detection {
        server_greeting: None,
        client_startup: None,
        client_request: Some(looks_like_message),
        client_midstream: None,
        client_after_tls: None,
    },
    new_session: |meta, cfg| Box::new(new_session(meta, cfg)),
    command_facts,
    text_without_statement: registry::command_as_text,
};

/// What a MongoDB command name means: every command and legacy operation is an execution
/// except the cursor steps (`getmore`, `killcursors`, `op_get_more`, `op_kill_cursors`); the
/// legacy writes and `op_kill_cursors` are never answered (an OP_MSG command is answered unless
/// it carries `moreToCome`).
pub fn command_facts(command: &'static str) -> CommandFacts {
    CommandFacts {
        execution: !matches!(
            command,
            "getmore" | "killcursors" | "op_get_more" | "op_kill_cursors"
        ),
        reply: match command {
            "op_insert" | "op_update" | "op_delete" | "op_kill_cursors" => Reply::Never,
            _ => Reply::Answered,
        },
        text_is_statement: true,
        group_under: command,
    }
}

/// A session for one MongoDB connection.
pub fn new_session(meta: ConnMeta, cfg: SessionConfig) -> MongoSession {
    MongoSession::new(meta, cfg)
}

/// Whether the first bytes a client sent look like a MongoDB request, for detection on unknown
/// ports: a plausible header (length 16 bytes to 48 MB and fitting its opcode, a request
/// opcode, `responseTo` 0) and sane first body fields.
pub fn looks_like_message(first_client_bytes: &[u8]) -> bool {
    wire::plausible_start(first_client_bytes, true) == wire::Plausible::Yes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection() {
        let mut m = Vec::new();
        let body = {
            let mut b = vec![0, 0, 0, 0, 0];
            b.extend(
                bson::build::Doc::new()
                    .i32("ping", 1)
                    .str("$db", "admin")
                    .bytes(),
            );
            b
        };
        wire::put_message(&mut m, 1, 0, wire::op::MSG, &body);
        assert!(looks_like_message(&m));
        assert!(!looks_like_message(&m[..10]));
        assert!(!looks_like_message(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(!looks_like_message(
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03abcdefghijklmnop"
        ));
        assert!(!looks_like_message(b"*1\r\n$4\r\nPING\r\n"));
        let mut reply = Vec::new();
        wire::put_message(&mut reply, 2, 1, wire::op::MSG, &body);
        assert!(!looks_like_message(&reply), "a reply is not a request");
        assert_eq!(DEFAULT_PORT, 27017);
    }
}
