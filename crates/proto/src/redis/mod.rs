//! Redis serialization protocol (RESP2, RESP3, inline commands): framing, messages and the
//! per-connection session.
//!
//! [`new_session`] builds a [`RedisSession`] implementing [`crate::Session`]. It pairs every
//! command with its reply in order (hundreds of pipelined commands in flight, bounded by
//! [`crate::SessionConfig::max_inflight`]), follows `HELLO` (RESP3), transactions, pub/sub,
//! `CLIENT REPLY`, and copes with captures that start mid-connection or lose bytes. Values of
//! any size stream through: payloads are skipped, never buffered (memory per connection is a
//! few KB, plus the requests in flight).
//!
//! # What the events carry
//!
//! * `command`: the lower-case command name from a table of every Redis 7.x command
//!   ([`commands::COMMANDS`]: `get`, `set`, `hset`, `config`, `client`, ...), or `unknown`
//!   (module commands such as `FT.SEARCH` included).
//! * `text`: the upper-case command name, then the subcommand of container commands
//!   (`CONFIG GET`, `CLIENT LIST`, `XINFO STREAM`, `OBJECT ENCODING`, `SCRIPT LOAD`, ...), then
//!   the first key when the command has one (`SET user:1234:profile`, `MGET a`,
//!   `EVAL k1` for `EVAL script 1 k1`, `XREAD s1` for `XREAD COUNT 2 STREAMS s1 s2 0 0`),
//!   separated by single spaces. The key is everything after the command words (it may itself
//!   contain spaces), cut at 256 bytes; an empty key is left out. Values, passwords and
//!   other arguments are never kept. For an unknown command the text is its name as sent,
//!   upper-cased, cut at 64 bytes. `text_truncated` is set when the key or the name was cut,
//!   or when the text was cut at `max_text`. Non-UTF-8 bytes are replaced.
//! * `rows_sent`: the element count of an array, set, map (pairs) or push reply; 1 for a
//!   non-null bulk or verbatim string (so `GET` hits count 1 and misses 0); 0 for simple
//!   strings, integers, nulls, errors, doubles, booleans and big numbers. Subscribe-family
//!   commands report 0. `rows_affected` is always 0.
//! * Errors (`-ERR ...`, `-WRONGTYPE ...`, RESP3 `!` blob errors): [`crate::Outcome::Error`]
//!   with [`crate::DbError`] `code` 0, `state` the first word when it is an upper-case code
//!   (`ERR`, `WRONGTYPE`, `NOSCRIPT`, `MOVED`, `EXECABORT`, ...), `message` the rest.
//! * `bytes_in`/`bytes_out`: exact wire bytes of the command and of its reply (a RESP3
//!   attribute counts with the reply it precedes). `start_ns` is the first command byte,
//!   `first_response_ns` and `end_ns` the first and last reply byte. Blocking commands
//!   (`BLPOP`, ...) include the wait.
//! * `user` comes from a successful `AUTH` or `HELLO ... AUTH` (never the password);
//!   `database` from `SELECT` (`"0"` from the start of a connection seen opening, unknown
//!   mid-stream). Both are the values in force when the reply arrived.
//!
//! # Transactions
//!
//! `MULTI`, `EXEC`, `DISCARD` and every queued command are events of their own. A queued
//! command is emitted when the transaction ends: its timing (`first_response_ns`, `end_ns`,
//! latency) is that of its `+QUEUED` reply, i.e. the round trip of queueing it; its result
//! (rows, error, and the bytes of its element in `EXEC`'s array, added to the `+QUEUED`
//! bytes) comes from `EXEC`'s reply. The time the server spent running the queued commands
//! is in `EXEC`'s latency, whose `rows_sent` is the number of results and whose `bytes_out`
//! is its reply minus the elements given to the queued commands. Commands that never ran
//! are emitted as errors: with `EXEC`'s error when it refused (`EXECABORT`), with state
//! `ABORTED` when `EXEC` returned null (a `WATCH`ed key changed), with state `DISCARDED` after
//! `DISCARD` or `RESET` (these two states are dbtap's, not the server's). A command refused
//! while queueing (`-ERR unknown command`) is an error event at once.
//!
//! # Pub/sub, pushes, CLIENT REPLY, MONITOR
//!
//! Subscription confirmations are the replies to `(P|S)SUBSCRIBE` and `(P|S)UNSUBSCRIBE`:
//! one per channel, so the command is answered with its last confirmation. An unsubscribe
//! from everything gets one confirmation per current subscription (one when there is none):
//! the session counts subscriptions from the confirmations' counts; when it cannot know them
//! (picked up mid-stream), the batch ends at the first reply that does not continue it.
//! Published messages (`message`, `pmessage`, `smessage`) are not replies: RESP3 sends them as
//! pushes, RESP2 as plain arrays, recognised by their first element while the connection is
//! subscribed. Pushes are counted in [`crate::Health::server_pushes`], not paired, not events.
//! In RESP3, confirmations are pushes too, and pair with the subscribe command waiting for
//! them.
//!
//! `CLIENT REPLY OFF` and `SKIP` (and the commands they silence) expect no reply: they are
//! emitted at once with [`crate::Outcome::NoReplyExpected`]; `CLIENT REPLY ON` and `RESET`
//! are answered. After `MONITOR`'s `+OK` the connection only carries monitored commands and
//! the session stops; `SYNC`/`PSYNC` (a replica) stop it at once.
//!
//! # Framing limits
//!
//! RESP3 streamed strings and aggregates (`$?`, `*?`, ...) are counted as malformed: Redis
//! never sends them. Aggregates nested deeper than 128, lines of numbers longer than 20
//! bytes and inline commands longer than 64 KB are malformed too.
//!
//! # Picking up mid-stream, losing bytes
//!
//! When the connection was not seen opening, the client side looks for the next
//! `*<n>\r\n$<len>\r\n<name>\r\n` with a plausible command name (`[A-Za-z][A-Za-z0-9._:|-]*`,
//! at most 64 bytes), so an inline command is only recognised once the client side is in
//! sync. Server bytes are skipped (counted as unparsed) until the first byte after the first
//! recognised command; that byte must be able to start a value.
//!
//! A gap that falls inside the announced length of a bulk string (an argument of a command,
//! or a bulk string, blob error or verbatim string anywhere in a reply) keeps the framing:
//! exactly the lost bytes are skipped and counted in the wire bytes, and parsing goes on. A
//! command that lost bytes is counted, paired and timed as usual, with
//! [`crate::QueryEvent::text_partial`] set; its text is built from what was seen (an argument
//! keeps only its bytes before the gap, so a cut key reads as truncated and a cut command name
//! gives `unknown`). A reply that lost bytes pairs with its command, which is then
//! [`crate::Outcome::Incomplete`]. Any other gap (in a header line, a CRLF, an inline command,
//! or one that runs past the end of the bulk string) loses sync as follows.
//!
//! After a gap in the client direction the command in progress is dropped and the client side
//! resynchronizes the same way. After a gap in the server direction (or bytes that do not
//! parse) every command in flight is emitted with [`crate::Outcome::Incomplete`] and server
//! bytes are skipped until the first byte after the client's next command; commands in flight
//! while bytes are being skipped are abandoned the same way.
//!
//! Redis has no request ids: pairing is by order, and a reply to a command the session did not
//! see (before the pickup, in lost bytes, or silenced by a lost `CLIENT REPLY`) would shift
//! it. So after a pickup, a client-side gap, or a server-side gap that hit a pipeline, the
//! commands sent are emitted as incomplete until the in-flight queue first drains; replies
//! that arrive meanwhile with nothing in flight answer unseen commands (unparsed, not
//! `responses_without_request`). A client that waits for its replies (request/response, or
//! pipelines sent in batches such as redis-py's or redis-benchmark's) is back in step at the
//! first drain; one that streams commands without ever draining stays untrusted, and a lost
//! `CLIENT REPLY OFF`/`SKIP` can leave it so for the rest of the connection. A subscription
//! confirmation no command waits for never pairs with another command (it updates the
//! subscription count and is counted as unparsed, or as a push in RESP3). Requests beyond
//! `max_inflight` are dropped and counted, but their place in the order is kept, so later
//! replies still pair correctly. After a server-side gap on a subscribed connection with
//! nothing in flight, pushes are not counted until the client's next command.

pub mod commands;
pub mod message;
pub mod session;
pub mod wire;

pub use session::RedisSession;

use crate::registry::{self, CommandFacts, Detection, ProtocolSpec, Reply};
use crate::{ConnMeta, Protocol, SessionConfig};

/// The port Redis listens on by default.
pub const DEFAULT_PORT: u16 = 6379;

/// What Redis declares to the [registry](crate::registry): a command names its protocol at any
/// command boundary, so one recognizer serves a captured start and a pickup mid-stream alike.
pub static SPEC: ProtocolSpec = ProtocolSpec {
    protocol: Protocol::Redis,
    default_ports: &[DEFAULT_PORT],
    detect: Detection {
        server_greeting: None,
        client_startup: None,
        client_request: Some(looks_like_request),
        client_midstream: None,
        client_after_tls: None,
    },
    new_session: |meta, cfg| Box::new(new_session(meta, cfg)),
    command_facts,
    text_without_statement: registry::command_as_text,
};

/// What a Redis command name means: every command is an execution (`INFO commandstats`
/// counts each), and every command is answered unless `CLIENT REPLY OFF`/`SKIP` silenced it.
pub fn command_facts(command: &'static str) -> CommandFacts {
    CommandFacts {
        execution: true,
        reply: Reply::Answered,
        text_is_statement: true,
        group_under: command,
    }
}

/// A session for one Redis connection.
pub fn new_session(meta: ConnMeta, cfg: SessionConfig) -> RedisSession {
    RedisSession::new(meta, cfg)
}

/// Whether the first bytes a client sent look like a Redis command, for detection on unknown
/// ports: an array of bulk strings whose first is a known command (or a dotted module
/// command such as `JSON.GET`), or an inline line whose first word is a known command (and
/// that is not an HTTP request line).
pub fn looks_like_request(first_client_bytes: &[u8]) -> bool {
    let b = first_client_bytes;
    if b.first() == Some(&b'*') {
        if wire::probe_command(b) != wire::Probe::Match {
            return false;
        }
        return wire::probe_name(b)
            .is_some_and(|n| commands::lookup(n).is_some() || n.contains(&b'.'));
    }
    let Some(nl) = b.iter().take(4096).position(|&c| c == b'\n') else {
        return false;
    };
    let line = b.get(..nl).unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let printable = line
        .iter()
        .all(|&c| c == b'\t' || (0x20..0x7F).contains(&c) || c >= 0x80);
    let http = line.windows(6).any(|w| w.eq_ignore_ascii_case(b" HTTP/"));
    let first = line
        .split(|&c| c == b' ' || c == b'\t')
        .next()
        .unwrap_or(&[]);
    printable && !http && commands::lookup(first).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection() {
        assert!(looks_like_request(b"*1\r\n$4\r\nPING\r\n"));
        assert!(looks_like_request(
            b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n"
        ));
        assert!(looks_like_request(b"*2\r\n$8\r\nJSON.GET\r\n$1\r\nk\r\n"));
        assert!(looks_like_request(b"PING\r\n"));
        assert!(looks_like_request(b"get foo\n"));
        assert!(!looks_like_request(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(!looks_like_request(b"*1\r\n$4\r\nPI"));
        assert!(!looks_like_request(b"*1\r\n$4\r\nNOPE\r\n"));
        assert!(!looks_like_request(b"\x16\x03\x01\x02\x00"));
        assert!(!looks_like_request(b"hi there\r\n"));
        assert!(!looks_like_request(b""));
    }
}
