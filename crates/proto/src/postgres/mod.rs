//! PostgreSQL frontend/backend protocol (v3.0 and v3.2): framing, messages and the
//! per-connection session.
//!
//! [`new_session`] builds a [`PgSession`] implementing [`crate::Session`]. It follows the
//! startup (user, database, application name; SSLRequest and GSSENCRequest), pairs every
//! request with its response in the simple and the extended protocol (pipelining included),
//! maps prepared statements and portals to their SQL, follows COPY in both directions, and
//! copes with captures that start mid-connection or lose bytes. Large results stream: DataRow
//! bodies are counted, never buffered.
//!
//! # Command names
//!
//! [`crate::QueryEvent::command`] is one of (lower case, stable):
//!
//! * `query`: one statement of a simple-protocol Query message (see below);
//! * `prepare`: a Parse, with the Describe of the same statement if one follows it directly;
//!   answered by ParseComplete. A Parse in the same flight as a Bind of its statement (the
//!   Bind sent before the Parse was fully answered: an unnamed statement's
//!   Parse/Bind/Describe/Execute/Sync, a pipeline) is part of that execution: its event is
//!   count-only ([`crate::QueryEvent::timed`] false), as the `execute`, which starts at the Bind,
//!   carries the round trip. A Parse answered before its Bind was sent (its own Sync or Flush),
//!   or one that failed (the execution never ran), keeps its time;
//! * `execute`: an Execute, together with the Bind (and Describe of the portal) before it;
//!   `text` is the statement's SQL; `start_ns` is the first byte of the Bind;
//! * `fetch`: a further Execute of a portal already executed since its Bind, fetching more rows
//!   of a suspended portal (a row limit, as JDBC's fetch size or asyncpg's cursors use): the
//!   `execute` counts once, as pg_stat_statements counts one call, and each fetch is an event
//!   of its own that starts at its own first byte (rows: the `execute` and its fetches add up
//!   to pg_stat_statements' `rows`);
//! * `bind`: a Bind never followed by an Execute of its portal;
//! * `describe`: a Describe that is not part of a `prepare` or an `execute`;
//! * `close`: a Close of a statement or portal;
//! * `function_call`: the fast-path FunctionCall (no text);
//! * `cancel`: a CancelRequest (it comes on a connection of its own, which then ends);
//! * `terminate`: Terminate;
//! * `unknown`: any other message type (the server answers it with an error).
//!
//! `cancel` and `terminate` expect no reply ([`crate::Outcome::NoReplyExpected`]). Sync and
//! Flush are not events: their bytes, and the ReadyForQuery that answers a Sync, are counted
//! with the request they close. COPY is not a command of its own: a `COPY` statement is a
//! `query` or an `execute` whose CopyData bytes count in `bytes_in` (COPY FROM STDIN) or
//! `bytes_out` (COPY TO STDOUT), and whose rows come from the `COPY n` tag (`rows_affected`
//! for COPY FROM, `rows_sent` for COPY TO). CopyBoth (replication streaming) ends the event and
//! the session ([`crate::Progress::Stop`]).
//!
//! # Simple queries hold several statements
//!
//! The server answers each statement of a Query message with its own CommandComplete,
//! EmptyQueryResponse or ErrorResponse (an error aborts the rest), and `pg_stat_statements`
//! counts statements. So the text is split on top-level `;` (quotes, `E''` strings, dollar
//! quoting, comments, parentheses and `BEGIN ATOMIC` bodies respected; empty statements skipped
//! as the server skips them) and every statement is its own `query` event with its own text,
//! rows and outcome. The first statement starts at the first byte of the message; each later
//! one starts when the previous statement completed, and its first response byte is its own
//! first message. Each statement's `bytes_in` is its piece of the text; the last event also
//! gets the message header, the bytes of statements an error kept from running, and the
//! ReadyForQuery. Statements after an error are not run and produce no event. Should the
//! server answer fewer statements than the text seems to hold (and no error explains it), the
//! last event's text runs to the end; should it answer more, the extra results count in the
//! last statement.
//!
//! # Rows
//!
//! `rows_sent` counts DataRow messages (NULL columns and huge rows alike). `rows_affected`
//! comes from the CommandComplete tag of INSERT, UPDATE, DELETE, MERGE, MOVE and COPY FROM.
//! For `SELECT n` and `FETCH n` the DataRows are the rows; when there were none (CREATE TABLE
//! AS, SELECT INTO) `rows_sent` takes the tag's count. Errors are [`crate::DbError`] with code 0,
//! the SQLSTATE in `state` and the primary message.
//!
//! # Prepared statements, portals, pipelining
//!
//! Statement names map to their SQL per connection (one `Arc<str>` per statement, shared by
//! every execution); the unnamed statement is replaced by each Parse; a portal takes its
//! statement's text at Bind. A statement prepared before the capture began is counted under
//! its name: its text is `EXECUTE <name>`, so its executions still group together (an unnamed
//! statement whose Parse was not seen has no text).
//!
//! Responses come in request order, so requests sent ahead (pipelining, several Syncs in
//! flight) wait in a queue of expected responses. Past `max_inflight` requests, further ones
//! are still followed (so pairing stays exact) but produce no event and are counted in
//! [`crate::Health::inflight_overflow`]; the queue of expected responses is bounded too.
//!
//! When an extended-protocol request fails, the server discards every message up to the next
//! Sync. The requests it discarded never ran and get no response: they produce no event (as in
//! `pg_stat_statements`), and their bytes are counted with the request that failed, which also
//! takes the Sync and its ReadyForQuery. While a COPY FROM STDIN runs, the server ignores Sync
//! and Flush (libpq sends a second Sync after CopyDone); the session does the same.
//!
//! NoticeResponse, NotificationResponse and ParameterStatus may come at any time; they are not
//! responses (their bytes count with the response in progress, if any). The transaction status
//! of the last ReadyForQuery is kept: [`PgSession::transaction_status`].
//!
//! # Startup and encryption
//!
//! An SSLRequest or GSSENCRequest answered `S` or `G` (or a TLS ClientHello sent straight away)
//! means an encrypted connection: it is counted in [`crate::Health::encrypted_connections`] and
//! the session stops (a source that reads TLS can resume it: [`crate::Session::start_tls`], then
//! the StartupMessage comes inside TLS, and the count is undone). Answered `N`, the plaintext
//! startup follows. The authentication exchange
//! is skipped until the first ReadyForQuery. A connection that fails authentication produces no
//! event.
//!
//! # Picking up mid-stream and resynchronizing
//!
//! Without the startup the session knows no user or database. It recognises a client message
//! at a boundary it can trust (the first client bytes, the first client bytes after the server
//! spoke, the first bytes after a gap) when its type byte is a frontend one, its length fits
//! that type (Sync, Flush, Terminate and CopyDone have exactly 4; Describe, Close and Execute
//! carry a short name; every message is shorter than 1 GB), its start looks like what the type
//! carries, and the next header in the first 16 bytes is plausible too. The server side joins
//! at its first message after a recognised request when that message's type and length fit;
//! until a response fits the request at the head of the queue, server messages are taken as the
//! tail of responses to requests we did not see and skipped.
//!
//! The flow layer says how many bytes a gap lost. When the hole lies inside one message whose
//! end is known, ending at its last byte at the latest (typically a DataRow, CopyData or a long
//! query text), the framing holds: that request is emitted with [`crate::Outcome::Incomplete`]
//! (counted, paired and timed; a request that lost its own bytes has the text seen before the
//! hole, marked [`crate::QueryEvent::text_partial`]) and everything else stays exact.
//! Otherwise the damaged direction resynchronizes as above: a server-side gap emits every
//! request in flight as incomplete; a client-side gap marks the place where requests may have
//! been lost, and responses that fit nothing we know are skipped until one fits the next
//! request we saw. A message length the type cannot have (1 GB and more for any type) is
//! malformed and treated like a gap.

pub mod message;
pub mod params;
pub mod session;
pub mod statements;
pub mod wire;

pub use session::{PgSession, TxStatus};

use crate::registry::{self, CommandFacts, Detection, ProtocolSpec, Reply};
use crate::{ConnMeta, Protocol, SessionConfig};

/// The default PostgreSQL server port.
pub const DEFAULT_PORT: u16 = 5432;

/// What PostgreSQL declares to the [registry](crate::registry): a connection is recognised by
/// its startup (or SSL, GSS or cancel request) when its start was captured, and mid-stream by a
/// run of whole frontend messages.
pub static SPEC: ProtocolSpec = ProtocolSpec {
    protocol: Protocol::Postgres,
    default_ports: &[DEFAULT_PORT],
    detect: Detection {
        server_greeting: None,
        client_startup: Some(looks_like_startup),
        client_request: None,
        client_midstream: Some(looks_like_client_message),
        client_after_tls: None,
    },
    new_session: |meta, cfg| Box::new(new_session(meta, cfg)),
    command_facts,
    text_without_statement: registry::command_as_text,
};

/// What a PostgreSQL command name means: `query` and `execute` run statements, and are filed
/// under one group, `query`, as pg_stat_statements counts them as one statement (a `fetch`
/// from the same portal is its own group: it counts no call); `cancel` and `terminate` are
/// never answered.
pub fn command_facts(command: &'static str) -> CommandFacts {
    CommandFacts {
        execution: matches!(command, "query" | "execute"),
        reply: match command {
            "cancel" | "terminate" => Reply::Never,
            _ => Reply::Answered,
        },
        text_is_statement: true,
        group_under: match command {
            "execute" => "query",
            other => other,
        },
    }
}

/// A session for one PostgreSQL connection.
pub fn new_session(meta: ConnMeta, cfg: SessionConfig) -> PgSession {
    PgSession::new(meta, cfg)
}

/// Whether the first bytes a client sent look like the start of a PostgreSQL connection: a
/// StartupMessage for protocol 3.x, an SSLRequest, a GSSENCRequest or a CancelRequest. For
/// detection on unknown ports.
pub fn looks_like_startup(first_client_bytes: &[u8]) -> bool {
    message::looks_like_startup(first_client_bytes)
}

/// Whether bytes a client sent, on a connection picked up mid-stream, are a run of plausible
/// frontend messages: each a known type byte with a length that fits it (a Query's text ending
/// in its NUL), back to back to the end of the delivery (the last may be cut short). For
/// detection on ports given without a protocol; walking the whole delivery keeps other
/// protocols' bytes from passing by chance.
pub fn looks_like_client_message(client_bytes: &[u8]) -> bool {
    let mut rest = client_bytes;
    let mut seen = 0;
    while !rest.is_empty() {
        let Some(len) = one_client_message(rest) else {
            return false;
        };
        seen += 1;
        match rest.get(len..) {
            Some(r) => rest = r,
            None => break,
        }
    }
    seen > 0
}

/// The wire length of the plausible frontend message at the start of `b` (type byte included),
/// or `None`. Messages longer than 16 MiB are not taken as evidence.
fn one_client_message(b: &[u8]) -> Option<usize> {
    let ty = *b.first()?;
    let h = b.get(1..5)?;
    let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    if !(4..1 << 24).contains(&len) {
        return None;
    }
    let body = b.get(5..).unwrap_or(&[]);
    let complete = body.len() >= len as usize - 4;
    let body = body.get(..len as usize - 4).unwrap_or(body);
    let ok = match ty {
        message::fe::SYNC | message::fe::FLUSH | message::fe::TERMINATE => len == 4,
        message::fe::EXECUTE => len >= 9,
        message::fe::BIND => len >= 12,
        message::fe::PARSE => len >= 8,
        message::fe::DESCRIBE | message::fe::CLOSE => {
            len >= 6 && matches!(body.first(), Some(b'S' | b'P'))
        }
        message::fe::QUERY => {
            len >= 5
                && body
                    .iter()
                    .take(16)
                    .all(|&b| b >= 0x20 || b.is_ascii_whitespace() || b == 0)
                && (!complete || body.last() == Some(&0))
        }
        _ => false,
    };
    ok.then_some(len as usize + 1)
}

#[cfg(test)]
mod sniff_tests {
    use super::looks_like_client_message;

    fn msg(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![ty];
        v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn frontend_runs_are_recognized() {
        assert!(looks_like_client_message(&msg(b'Q', b"SELECT 1\0")));
        let mut pipeline = msg(b'B', b"\0\0\0\0\0\0\0\0\0\0");
        pipeline.extend(msg(b'E', b"\0\0\0\0\0"));
        pipeline.extend(msg(b'S', b""));
        assert!(looks_like_client_message(&pipeline));
        // The last message may be cut short by the segment boundary.
        let q = msg(b'Q', b"SELECT * FROM a_rather_long_table_name\0");
        assert!(looks_like_client_message(&q[..12]));
    }

    #[test]
    fn other_protocols_and_garbage_are_not() {
        // A MySQL COM_QUERY packet: 3-byte length, sequence 0, command 3.
        assert!(!looks_like_client_message(b"\x09\x00\x00\x00\x03SELECT 1"));
        // A MySQL COM_STMT_EXECUTE of 66 bytes starts with 'B' but does not walk as PostgreSQL.
        let mut exec = vec![0x42, 0, 0, 0, 0x17];
        exec.extend([1u8; 65]);
        assert!(!looks_like_client_message(&exec));
        assert!(!looks_like_client_message(b"*1\r\n$4\r\nPING\r\n"));
        assert!(!looks_like_client_message(b""));
        assert!(!looks_like_client_message(&msg(b'S', b"x")));
        assert!(!looks_like_client_message(&msg(b'Q', b"SELECT 1")));
    }
}
