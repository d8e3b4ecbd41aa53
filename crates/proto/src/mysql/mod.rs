//! MySQL/MariaDB client/server protocol: framing, messages and the per-connection session.
//!
//! [`new_session`] builds a [`MysqlSession`] implementing [`crate::Session`]. It follows the
//! handshake (user, schema, capabilities, TLS switch), pairs every command with its response,
//! maps prepared statement ids to their SQL, decompresses the compressed protocol (zlib and
//! zstd), and copes with captures that start mid-connection or lose bytes.
//!
//! # Command names
//!
//! [`crate::QueryEvent::command`] is one of (lower case, stable):
//! `query`, `prepare`, `execute`, `bulk_execute` (MariaDB), `fetch`, `close`, `reset`,
//! `send_long_data`, `init_db`, `ping`, `quit`, `change_user`, `field_list`, `statistics`,
//! `process_kill`, `process_info`, `set_option`, `reset_connection`, `binlog_dump`,
//! `binlog_dump_gtid`, `register_slave`, `create_db`, `drop_db`, `refresh`, `shutdown`, `debug`,
//! and `unknown` for any other command byte.
//!
//! `close`, `send_long_data` and `quit` expect no reply and are emitted when sent with
//! [`crate::Outcome::NoReplyExpected`]; so is `binlog_dump*`, after which the session stops (the
//! connection carries a replication stream). The handshake itself emits no event.
//!
//! # What the events carry
//!
//! `text` is the SQL of `query` and `prepare`, and the prepared SQL for the statement
//! commands (`execute`, `fetch`, `close`, ...), shared as one `Arc<str>` per statement.
//! `rows_sent` sums rows over every result set of the request (a multi-result `CALL`);
//! `rows_affected` sums the OK packets' affected rows, `warnings` the warning counts
//! of the OK/EOF packets that end each result set (not the EOF between column definitions and
//! rows, whose count the final one includes). Byte counts are wire bytes
//! including packet headers (compressed bytes when the compressed protocol is on; a
//! compressed frame is counted for the first message that ends in it).
//!
//! # Multi-statement queries
//!
//! When the server runs several statements from one COM_QUERY (the client's
//! `CLIENT_MULTI_STATEMENTS`, or COM_SET_OPTION; assumed on when the handshake was not
//! seen), the text is split by [`split::statements`] (quotes, comments and a stored program's
//! `BEGIN ... END` body keep their `;`) and each statement is its own `query`
//! event with its own text, paired in order with the result sets (each but the last ends with
//! `SERVER_MORE_RESULTS_EXISTS`). A statement starts when the previous one's result set ended
//! (the first when the request was sent) and ends with its own result set's last packet. The
//! request's bytes in are shared out: a later statement has the text from the end of the one
//! before it to its own end, the first the rest (header included), and statements never
//! reached leave theirs to the last event, so one request's events add up. A `CALL` keeps its
//! result sets until the OK packet that ends it, and result sets beyond the statements belong
//! to the last one. An ERR ends the query at the statement that failed: the statements after it
//! were not run (the server does not count them) and give no event, nor do those a lost or
//! missing response never reached. Text with one statement (`SELECT 1;`, or a trailing comment)
//! is one event with the text as sent, as before. When the text was cut at `max_text`, its last
//! kept statement is marked truncated and takes any further result sets.
//!
//! # Picking up mid-stream and resynchronizing
//!
//! Without the handshake the session does not know the capabilities. It recognises a command
//! at a boundary it can trust (the first client bytes, the first client bytes after the server
//! spoke, the first bytes after a gap) when the packet has sequence id 0, a known command byte
//! and a length that fits that command; a compressed frame (sequence 0, then a zlib or zstd
//! header, or a raw inner command) is recognised the same way and switches both directions to
//! the compressed protocol. Server bytes before the first recognised request are skipped.
//!
//! Whether result sets use `CLIENT_DEPRECATE_EOF` is read off their shape, which is
//! unambiguous: after the column definitions, a 5-byte EOF means EOFs are in use; a row (a
//! packet not headed 0xFE/0xFF) or an OK-shaped 0xFE packet (7 bytes or more) means they are
//! not. A 0xFE packet shorter than 0xFFFFFF always ends the rows (a text row starting with 0xFE
//! would be at least 16 MB). The one place shape cannot tell is the end of a
//! `COM_STMT_PREPARE` response: the trailing EOF is then awaited and the response is
//! considered complete when the client sends its next command.
//!
//! The flow layer says how many bytes a gap lost. When the hole lies inside the payload of the
//! packet in progress, after its first payload byte and ending at its last byte at the latest
//! (a long statement, a packet of a statement split over 16 MB packets, a result row), the
//! framing holds: the bytes are skipped, a request that lost bytes keeps its event, pairing,
//! time and size, with the text seen (the bytes before the hole joined to the last bytes after
//! it) marked [`crate::QueryEvent::text_partial`]; a request whose response lost bytes is
//! emitted with [`crate::Outcome::Incomplete`], its rows still counted. The compressed
//! protocol, the login, and any other gap (one that reaches a packet header) lose sync: the
//! damaged message is dropped; a request whose response lost bytes is emitted with
//! [`crate::Outcome::Incomplete`]; a request that lost its own bytes is not invented, and its
//! response is skipped. The server side resynchronizes at the first byte it sends after the
//! next recognised request.

pub mod message;
pub mod params;
pub mod session;
pub mod split;
pub mod wire;

pub use session::MysqlSession;

use crate::registry::{CommandFacts, Detection, ProtocolSpec, Reply};
use crate::{ConnMeta, Protocol, SessionConfig};

/// The port MySQL and MariaDB listen on by default.
pub const DEFAULT_PORT: u16 = 3306;

/// What MySQL declares to the [registry](crate::registry): a connection is recognised by the
/// server's greeting when its start was captured, and mid-stream by one whole command packet.
pub static SPEC: ProtocolSpec = ProtocolSpec {
    protocol: Protocol::Mysql,
    default_ports: &[DEFAULT_PORT],
    detect: Detection {
        server_greeting: Some(looks_like_server_greeting),
        client_startup: None,
        client_request: None,
        client_midstream: Some(looks_like_client_command),
        client_after_tls: Some(looks_like_login_after_tls),
    },
    new_session: |meta, cfg| Box::new(new_session(meta, cfg)),
    command_facts,
    text_without_statement,
};

/// What a MySQL command name means: `query`, `execute` and `bulk_execute` run statements;
/// `close`, `send_long_data`, `quit` and `binlog_dump*` are never answered (the binlog dump is
/// answered by a stream, not a reply); the statement commands carry the SQL (their own or the
/// prepared statement's), while `init_db` and the others carry an argument or nothing.
pub fn command_facts(command: &'static str) -> CommandFacts {
    CommandFacts {
        execution: matches!(command, "query" | "execute" | "bulk_execute"),
        reply: match command {
            "close" | "send_long_data" | "quit" | "binlog_dump" | "binlog_dump_gtid" => {
                Reply::Never
            }
            _ => Reply::Answered,
        },
        text_is_statement: matches!(
            command,
            "query"
                | "execute"
                | "prepare"
                | "close"
                | "reset"
                | "fetch"
                | "send_long_data"
                | "bulk_execute"
        ),
        group_under: command,
    }
}

/// The group text of a command without statement text: as pt-query-digest names MySQL
/// commands (`administrator command: Ping`), or a statement command whose statement was
/// prepared before the capture.
pub fn text_without_statement(command: &str) -> String {
    let name = match command {
        "execute" => return "execute <statement not captured>".to_string(),
        "prepare" => return "prepare <statement not captured>".to_string(),
        "ping" => "Ping",
        "quit" => "Quit",
        "init_db" => "Init DB",
        "change_user" => "Change user",
        "statistics" => "Statistics",
        "field_list" => "Field List",
        "process_kill" => "Kill",
        "set_option" => "Set option",
        "reset_connection" => "Reset connection",
        "reset" => "Reset stmt",
        "fetch" => "Fetch",
        "send_long_data" => "Long Data",
        "close" => "Close stmt",
        "binlog_dump" => "Binlog Dump",
        "bulk_execute" => "Bulk execute",
        "connect" => "Connect",
        other => other,
    };
    format!("administrator command: {name}")
}

/// A session for one MySQL/MariaDB connection.
pub fn new_session(meta: ConnMeta, cfg: SessionConfig) -> MysqlSession {
    MysqlSession::new(meta, cfg)
}

/// Whether bytes a client sent, on a connection picked up mid-stream, are one plausible command
/// packet (sequence id 0, a known command byte, a length that fits the command and is exactly
/// what was delivered, and statement text that starts like text), for detection on ports given
/// without a protocol. MySQL clients send one command at a time, so a delivery holding exactly
/// one packet is the normal case, and requiring it keeps other protocols' bytes from passing.
pub fn looks_like_client_command(client_bytes: &[u8]) -> bool {
    let Some(h) = wire::PacketHeader::parse(client_bytes) else {
        return false;
    };
    if client_bytes.len() != h.len as usize + 4 {
        return false;
    }
    let payload = client_bytes.get(4..).unwrap_or(&[]);
    let Some(&code) = payload.first() else {
        return false;
    };
    let command = message::Command(code);
    if h.seq != 0 || !command.is_known() || !command.plausible_len(h.len) {
        return false;
    }
    match code {
        message::cmd::QUERY | message::cmd::STMT_PREPARE => {
            payload.get(1..payload.len().min(17)).is_some_and(|t| {
                !t.is_empty() && t.iter().all(|&b| b >= 0x20 || b.is_ascii_whitespace())
            })
        }
        _ => true,
    }
}

/// Whether the first client bytes of a stream that starts inside TLS look like a MySQL/MariaDB
/// login (HandshakeResponse41): sequence id 2 (after the greeting and the SSL request), the
/// capability flags with CLIENT_PROTOCOL_41 and CLIENT_SSL (the client asked for TLS), and the
/// 19 reserved zero bytes after the character set (MariaDB puts its extended capabilities in
/// the last 4 of the 23).
pub fn looks_like_login_after_tls(first_client_bytes: &[u8]) -> bool {
    const PROTOCOL_41: u32 = 0x200;
    const SSL: u32 = 0x800;
    let Some(h) = wire::PacketHeader::parse(first_client_bytes) else {
        return false;
    };
    let caps = match first_client_bytes.get(4..8) {
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        _ => return false,
    };
    h.seq == 2
        && (32..=(1 << 16)).contains(&h.len)
        && caps & (PROTOCOL_41 | SSL) == PROTOCOL_41 | SSL
        && first_client_bytes
            .get(13..32)
            .is_some_and(|reserved| reserved.iter().all(|&b| b == 0))
}

/// Whether the first bytes a server sent look like a MySQL/MariaDB greeting (protocol 10
/// handshake, or an ERR packet refusing the connection), for detection on unknown ports.
pub fn looks_like_server_greeting(first_server_bytes: &[u8]) -> bool {
    let Some(h) = wire::PacketHeader::parse(first_server_bytes) else {
        return false;
    };
    if h.seq != 0 || h.len < 5 || h.len > 4096 {
        return false;
    }
    let payload = first_server_bytes.get(4..).unwrap_or(&[]);
    let payload = payload.get(..h.len as usize).unwrap_or(payload);
    match payload.first() {
        Some(10) => {
            // Version string: printable ASCII, NUL-terminated, then the fixed fields.
            let Some(nul) = payload.iter().skip(1).position(|&b| b == 0) else {
                return false;
            };
            let version = payload.get(1..1 + nul).unwrap_or(&[]);
            !version.is_empty()
                && version.len() < 100
                && version.iter().all(|b| (0x20..0x7F).contains(b))
                && version.first().is_some_and(u8::is_ascii_digit)
                && (payload.len() < 1 + nul + 1 + 4 + 9
                    || payload.get(1 + nul + 1 + 4 + 8) == Some(&0))
        }
        Some(0xFF) => {
            let code = match payload.get(1..3) {
                Some(&[a, b]) => Some(u16::from_le_bytes([a, b])),
                _ => None,
            };
            let msg = payload.get(3..).unwrap_or(&[]);
            code.is_some_and(|c| (1000..3000).contains(&c))
                && !msg.is_empty()
                && msg.iter().all(|b| *b >= 0x20 || *b == b'\n' || *b == b'\t')
        }
        _ => false,
    }
}

#[cfg(test)]
mod sniff_tests {
    use super::looks_like_client_command;

    #[test]
    fn one_whole_command_packet_is_recognized() {
        assert!(looks_like_client_command(b"\x09\x00\x00\x00\x03SELECT 1"));
        assert!(looks_like_client_command(b"\x01\x00\x00\x00\x0e")); // COM_PING
    }

    #[test]
    fn partial_extra_or_foreign_bytes_are_not() {
        // Cut short, or followed by more bytes.
        assert!(!looks_like_client_command(b"\x09\x00\x00\x00\x03SELE"));
        assert!(!looks_like_client_command(b"\x01\x00\x00\x00\x0e\x01"));
        // Not sequence 0 (a continuation or a response).
        assert!(!looks_like_client_command(b"\x09\x00\x00\x01\x03SELECT 1"));
        // A PostgreSQL Bind whose length byte reads as COM_CHANGE_USER.
        let mut bind = vec![b'B', 0, 0, 0, 0x11];
        bind.extend([0u8; 12]);
        assert!(!looks_like_client_command(&bind));
        assert!(!looks_like_client_command(b"*1\r\n$4\r\nPING\r\n"));
        assert!(!looks_like_client_command(b""));
    }
}

#[cfg(test)]
mod facts_tests {
    use super::{command_facts, message, message::Command};
    use crate::registry::Reply;

    #[test]
    fn reply_facts_agree_with_the_command_table() {
        for byte in 0..=u8::MAX {
            let c = Command(byte);
            let never = matches!(c.reply(), message::Reply::None | message::Reply::Stream);
            let facts = command_facts(c.name());
            assert_eq!(facts.reply == Reply::Never, never, "{}", c.name());
            assert_eq!(facts.group_under, c.name());
        }
    }

    #[test]
    fn statements_and_executions() {
        assert!(command_facts("execute").execution);
        assert!(!command_facts("prepare").execution);
        assert!(command_facts("close").text_is_statement);
        assert!(!command_facts("init_db").text_is_statement);
        assert_eq!(
            super::text_without_statement("init_db"),
            "administrator command: Init DB"
        );
        assert_eq!(
            super::text_without_statement("execute"),
            "execute <statement not captured>"
        );
    }
}
