//! Typed PostgreSQL messages borrowing the framed bytes: startup-phase packets, frontend
//! requests and backend responses, error fields and command tags. Pure parsing, no
//! conversation state. Every type byte parses: unknown ones become `Other`.

use super::wire::{Cursor, Header, MAX_MESSAGE_LEN, MAX_STARTUP_LEN, WireError, code};

type Res<T> = Result<T, WireError>;

/// Frontend (client to server) type bytes.
pub mod fe {
    pub const BIND: u8 = b'B';
    pub const CLOSE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
    pub const DESCRIBE: u8 = b'D';
    pub const EXECUTE: u8 = b'E';
    pub const FLUSH: u8 = b'H';
    pub const FUNCTION_CALL: u8 = b'F';
    pub const PARSE: u8 = b'P';
    /// PasswordMessage, SASLInitialResponse, SASLResponse, GSSResponse.
    pub const PASSWORD: u8 = b'p';
    pub const QUERY: u8 = b'Q';
    pub const SYNC: u8 = b'S';
    pub const TERMINATE: u8 = b'X';
}

/// Backend (server to client) type bytes.
pub mod be {
    pub const AUTHENTICATION: u8 = b'R';
    pub const BACKEND_KEY_DATA: u8 = b'K';
    pub const BIND_COMPLETE: u8 = b'2';
    pub const CLOSE_COMPLETE: u8 = b'3';
    pub const COMMAND_COMPLETE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_IN_RESPONSE: u8 = b'G';
    pub const COPY_OUT_RESPONSE: u8 = b'H';
    pub const COPY_BOTH_RESPONSE: u8 = b'W';
    pub const DATA_ROW: u8 = b'D';
    pub const EMPTY_QUERY_RESPONSE: u8 = b'I';
    pub const ERROR_RESPONSE: u8 = b'E';
    pub const FUNCTION_CALL_RESPONSE: u8 = b'V';
    pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
    pub const NO_DATA: u8 = b'n';
    pub const NOTICE_RESPONSE: u8 = b'N';
    pub const NOTIFICATION_RESPONSE: u8 = b'A';
    pub const PARAMETER_DESCRIPTION: u8 = b't';
    pub const PARAMETER_STATUS: u8 = b'S';
    pub const PARSE_COMPLETE: u8 = b'1';
    pub const PORTAL_SUSPENDED: u8 = b's';
    pub const READY_FOR_QUERY: u8 = b'Z';
    pub const ROW_DESCRIPTION: u8 = b'T';
}

/// Longest statement or portal name we consider plausible on the wire (the server truncates
/// names to 63 bytes, but accepts longer ones).
pub const MAX_NAME: u32 = 1024;

/// Whether a frontend message with this type byte and length field can exist. Fixed-size
/// messages must have their exact size; the others a minimum and, where the content is small
/// by nature, a maximum. `false` for type bytes that are not frontend messages.
#[inline]
pub fn frontend_len_ok(tag: u8, len: u32) -> bool {
    if !Header::len_ok(len) {
        return false;
    }
    match tag {
        fe::SYNC | fe::FLUSH | fe::TERMINATE | fe::COPY_DONE => len == 4,
        // Text, NUL.
        fe::QUERY | fe::COPY_FAIL => len >= 5,
        // Name, query, parameter count.
        fe::PARSE => len >= 8,
        // Portal, statement, format count, parameter count, result format count.
        fe::BIND => len >= 12,
        // Portal, row limit.
        fe::EXECUTE => (9..=4 + MAX_NAME + 1 + 4).contains(&len),
        // 'S' or 'P', name.
        fe::DESCRIBE | fe::CLOSE => (6..=4 + 1 + MAX_NAME + 1).contains(&len),
        // Function oid, format count, argument count, result format.
        fe::FUNCTION_CALL => len >= 14,
        fe::COPY_DATA | fe::PASSWORD => true,
        _ => false,
    }
}

/// Whether a backend message with this type byte and length field can exist (see
/// [`frontend_len_ok`]).
#[inline]
pub fn backend_len_ok(tag: u8, len: u32) -> bool {
    if !Header::len_ok(len) {
        return false;
    }
    match tag {
        be::PARSE_COMPLETE
        | be::BIND_COMPLETE
        | be::CLOSE_COMPLETE
        | be::NO_DATA
        | be::PORTAL_SUSPENDED
        | be::EMPTY_QUERY_RESPONSE
        | be::COPY_DONE => len == 4,
        be::READY_FOR_QUERY => len == 5,
        // Process id and a secret key of 4 to 256 bytes (protocol 3.2).
        be::BACKEND_KEY_DATA => (12..=8 + 256).contains(&len),
        be::AUTHENTICATION => len >= 8,
        // Format, column count.
        be::COPY_IN_RESPONSE | be::COPY_OUT_RESPONSE | be::COPY_BOTH_RESPONSE => len >= 7,
        // A short tag and a number or two.
        be::COMMAND_COMPLETE => (5..=4 + 256).contains(&len),
        be::ERROR_RESPONSE | be::NOTICE_RESPONSE => len >= 5,
        be::PARAMETER_STATUS => len >= 6,
        be::NOTIFICATION_RESPONSE => len >= 10,
        be::ROW_DESCRIPTION | be::DATA_ROW | be::PARAMETER_DESCRIPTION => len >= 6,
        be::FUNCTION_CALL_RESPONSE => len >= 8,
        be::NEGOTIATE_PROTOCOL_VERSION => len >= 12,
        be::COPY_DATA => true,
        _ => false,
    }
}

/// Whether `tag` is a frontend message type (authentication data included).
#[inline]
pub fn is_frontend_tag(tag: u8) -> bool {
    matches!(
        tag,
        fe::BIND
            | fe::CLOSE
            | fe::COPY_DATA
            | fe::COPY_DONE
            | fe::COPY_FAIL
            | fe::DESCRIBE
            | fe::EXECUTE
            | fe::FLUSH
            | fe::FUNCTION_CALL
            | fe::PARSE
            | fe::PASSWORD
            | fe::QUERY
            | fe::SYNC
            | fe::TERMINATE
    )
}

/// Whether `tag` is a backend message type.
#[inline]
pub fn is_backend_tag(tag: u8) -> bool {
    matches!(
        tag,
        be::AUTHENTICATION
            | be::BACKEND_KEY_DATA
            | be::BIND_COMPLETE
            | be::CLOSE_COMPLETE
            | be::COMMAND_COMPLETE
            | be::COPY_DATA
            | be::COPY_DONE
            | be::COPY_IN_RESPONSE
            | be::COPY_OUT_RESPONSE
            | be::COPY_BOTH_RESPONSE
            | be::DATA_ROW
            | be::EMPTY_QUERY_RESPONSE
            | be::ERROR_RESPONSE
            | be::FUNCTION_CALL_RESPONSE
            | be::NEGOTIATE_PROTOCOL_VERSION
            | be::NO_DATA
            | be::NOTICE_RESPONSE
            | be::NOTIFICATION_RESPONSE
            | be::PARAMETER_DESCRIPTION
            | be::PARAMETER_STATUS
            | be::PARSE_COMPLETE
            | be::PORTAL_SUSPENDED
            | be::READY_FOR_QUERY
            | be::ROW_DESCRIPTION
    )
}

/// `Describe` and `Close` name a prepared statement or a portal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Statement,
    Portal,
}

/// The first packet a client sends (untyped: length, code, body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartupPacket<'a> {
    /// StartupMessage, protocol `3.minor`.
    Startup {
        minor: u16,
        user: Option<&'a [u8]>,
        database: Option<&'a [u8]>,
        application_name: Option<&'a [u8]>,
        /// The `replication` parameter was given (a walsender connection).
        replication: bool,
    },
    SslRequest,
    GssEncRequest,
    CancelRequest {
        pid: u32,
    },
}

impl<'a> StartupPacket<'a> {
    /// Parses the body of an untyped packet (everything after the length field).
    pub fn parse(body: &'a [u8]) -> Res<Self> {
        let len = body.len() as u32 + 4;
        let mut c = Cursor::new(body);
        let code = c.u32("startup code")?;
        match code {
            code::SSL_REQUEST | code::GSSENC_REQUEST if len != 8 => Err(WireError::Invalid {
                what: "encryption request",
                why: "length is not 8",
            }),
            code::SSL_REQUEST => Ok(StartupPacket::SslRequest),
            code::GSSENC_REQUEST => Ok(StartupPacket::GssEncRequest),
            code::CANCEL_REQUEST => {
                if !(16..=12 + 256).contains(&len) {
                    return Err(WireError::Invalid {
                        what: "CancelRequest",
                        why: "key length outside 4..=256",
                    });
                }
                Ok(StartupPacket::CancelRequest {
                    pid: c.u32("CancelRequest pid")?,
                })
            }
            v if v >> 16 == 3 => {
                if len > MAX_STARTUP_LEN {
                    return Err(WireError::Invalid {
                        what: "StartupMessage",
                        why: "longer than 10000 bytes",
                    });
                }
                let (mut user, mut database, mut application_name) = (None, None, None);
                let mut replication = false;
                loop {
                    let key = c.cstr("startup parameter name")?;
                    if key.is_empty() {
                        break;
                    }
                    let value = c.cstr("startup parameter value")?;
                    match key {
                        b"user" => user = Some(value),
                        b"database" => database = Some(value),
                        b"application_name" => application_name = Some(value),
                        b"replication" => replication = true,
                        _ => {}
                    }
                }
                Ok(StartupPacket::Startup {
                    minor: (v & 0xFFFF) as u16,
                    user,
                    database,
                    application_name,
                    replication,
                })
            }
            _ => Err(WireError::Invalid {
                what: "startup code",
                why: "not protocol 3, SSL, GSS or cancel",
            }),
        }
    }
}

/// A frontend message in the query phase. Text fields may be cut short when the framer kept
/// only the start of a long message (`*_complete` says whether the terminator was seen).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frontend<'a> {
    Query {
        sql: &'a [u8],
        sql_complete: bool,
    },
    Parse {
        name: &'a [u8],
        sql: &'a [u8],
        sql_complete: bool,
    },
    Bind {
        portal: &'a [u8],
        statement: &'a [u8],
    },
    Describe {
        target: Target,
        name: &'a [u8],
    },
    Execute {
        portal: &'a [u8],
        /// 0 means no limit.
        max_rows: u32,
    },
    Close {
        target: Target,
        name: &'a [u8],
    },
    Sync,
    Flush,
    Terminate,
    CopyData,
    CopyDone,
    CopyFail,
    FunctionCall {
        oid: u32,
    },
    /// Authentication data (password, SASL, GSS).
    Password,
    /// Any other type byte.
    Other(u8),
}

fn target(b: u8) -> Res<Target> {
    match b {
        b'S' => Ok(Target::Statement),
        b'P' => Ok(Target::Portal),
        _ => Err(WireError::Invalid {
            what: "describe/close target",
            why: "not 'S' or 'P'",
        }),
    }
}

impl<'a> Frontend<'a> {
    /// Parses a frontend message from its type byte and the kept start of its body.
    pub fn parse(tag: u8, head: &'a [u8]) -> Res<Self> {
        let mut c = Cursor::new(head);
        Ok(match tag {
            fe::QUERY => {
                let (sql, sql_complete) = c.cstr_or_rest();
                Frontend::Query { sql, sql_complete }
            }
            fe::PARSE => {
                let name = c.cstr("Parse statement name")?;
                let (sql, sql_complete) = c.cstr_or_rest();
                Frontend::Parse {
                    name,
                    sql,
                    sql_complete,
                }
            }
            fe::BIND => Frontend::Bind {
                portal: c.cstr("Bind portal")?,
                statement: c.cstr("Bind statement")?,
            },
            fe::DESCRIBE => Frontend::Describe {
                target: target(c.u8("Describe target")?)?,
                name: c.cstr("Describe name")?,
            },
            fe::CLOSE => Frontend::Close {
                target: target(c.u8("Close target")?)?,
                name: c.cstr("Close name")?,
            },
            fe::EXECUTE => Frontend::Execute {
                portal: c.cstr("Execute portal")?,
                max_rows: c.u32("Execute row limit")?,
            },
            fe::SYNC => Frontend::Sync,
            fe::FLUSH => Frontend::Flush,
            fe::TERMINATE => Frontend::Terminate,
            fe::COPY_DATA => Frontend::CopyData,
            fe::COPY_DONE => Frontend::CopyDone,
            fe::COPY_FAIL => Frontend::CopyFail,
            fe::FUNCTION_CALL => Frontend::FunctionCall {
                oid: c.u32("FunctionCall oid")?,
            },
            fe::PASSWORD => Frontend::Password,
            t => Frontend::Other(t),
        })
    }
}

/// The fields of an ErrorResponse or NoticeResponse that matter here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorFields<'a> {
    /// `V` (never localized) or else `S`: ERROR, FATAL, PANIC, WARNING, NOTICE...
    pub severity: Option<&'a [u8]>,
    /// `C`: the SQLSTATE.
    pub code: Option<&'a [u8]>,
    /// `M`: the primary message.
    pub message: Option<&'a [u8]>,
}

impl<'a> ErrorFields<'a> {
    /// Parses the fields; a list cut short by the kept-bytes limit yields what was read.
    pub fn parse(head: &'a [u8]) -> Self {
        let mut f = ErrorFields::default();
        let mut c = Cursor::new(head);
        let mut localized = None;
        while let Ok(t) = c.u8("field type") {
            if t == 0 {
                break;
            }
            let (v, _) = c.cstr_or_rest();
            match t {
                b'S' => localized = Some(v),
                b'V' => f.severity = Some(v),
                b'C' => f.code = Some(v),
                b'M' => f.message = Some(v),
                _ => {}
            }
        }
        if f.severity.is_none() {
            f.severity = localized;
        }
        f
    }

    /// FATAL or PANIC: the server closes the connection after it.
    pub fn is_fatal(&self) -> bool {
        matches!(self.severity, Some(b"FATAL" | b"PANIC"))
    }
}

/// A CommandComplete tag: the command word(s) and the row count, when the tag has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandTag<'a> {
    /// The first word ("SELECT", "INSERT", "CREATE", ...).
    pub verb: &'a [u8],
    /// The last word when it is a number: rows for SELECT, INSERT (after the oid), UPDATE,
    /// DELETE, MERGE, FETCH, MOVE, COPY.
    pub rows: Option<u64>,
}

impl<'a> CommandTag<'a> {
    pub fn parse(head: &'a [u8]) -> Self {
        let mut c = Cursor::new(head);
        let (tag, _) = c.cstr_or_rest();
        let verb = tag.split(|&b| b == b' ').next().unwrap_or(tag);
        let last = tag.rsplit(|&b| b == b' ').next().unwrap_or(&[]);
        let rows = if last.len() != tag.len()
            && !last.is_empty()
            && last.len() <= 20
            && last.iter().all(u8::is_ascii_digit)
        {
            // ASCII digits: the decimal value, `None` past u64 (as `str::parse` would say).
            last.iter().try_fold(0u64, |n, &d| {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
        } else {
            None
        };
        CommandTag { verb, rows }
    }

    /// Rows sent and rows affected of an execution that had `rows_sent` and `rows_affected`
    /// when this tag ended it (`copy_out`: a COPY TO STDOUT, whose rows were sent).
    pub fn counts(&self, copy_out: bool, rows_sent: u64, rows_affected: u64) -> (u64, u64) {
        let Some(n) = self.rows else {
            return (rows_sent, rows_affected);
        };
        match self.verb {
            b"INSERT" | b"UPDATE" | b"DELETE" | b"MERGE" | b"MOVE" => {
                (rows_sent, rows_affected.saturating_add(n))
            }
            b"COPY" if copy_out && rows_sent == 0 => (n, rows_affected),
            b"COPY" if copy_out => (rows_sent, rows_affected),
            b"COPY" => (rows_sent, rows_affected.saturating_add(n)),
            // SELECT (also CREATE TABLE AS / SELECT INTO) and FETCH: the rows are the DataRows
            // seen; the tag stands in when there were none.
            b"SELECT" | b"FETCH" if rows_sent == 0 => (n, rows_affected),
            _ => (rows_sent, rows_affected),
        }
    }
}

/// A backend message, typed. Bodies that are only counted (rows, descriptions) are not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend<'a> {
    /// `R`: 0 is AuthenticationOk; the others ask for more.
    Authentication {
        code: u32,
    },
    ParameterStatus,
    BackendKeyData,
    /// `Z` with the transaction status: `I` idle, `T` in a transaction, `E` failed.
    ReadyForQuery {
        status: u8,
    },
    RowDescription,
    DataRow,
    CommandComplete(CommandTag<'a>),
    EmptyQueryResponse,
    ErrorResponse(ErrorFields<'a>),
    NoticeResponse,
    NotificationResponse,
    ParseComplete,
    BindComplete,
    CloseComplete,
    NoData,
    ParameterDescription,
    PortalSuspended,
    CopyInResponse,
    CopyOutResponse,
    CopyBothResponse,
    CopyData,
    CopyDone,
    FunctionCallResponse,
    NegotiateProtocolVersion,
    Other(u8),
}

impl<'a> Backend<'a> {
    pub fn parse(tag: u8, head: &'a [u8]) -> Res<Self> {
        let mut c = Cursor::new(head);
        Ok(match tag {
            be::AUTHENTICATION => Backend::Authentication {
                code: c.u32("Authentication code")?,
            },
            be::PARAMETER_STATUS => Backend::ParameterStatus,
            be::BACKEND_KEY_DATA => Backend::BackendKeyData,
            be::READY_FOR_QUERY => match c.u8("ReadyForQuery status")? {
                s @ (b'I' | b'T' | b'E') => Backend::ReadyForQuery { status: s },
                _ => {
                    return Err(WireError::Invalid {
                        what: "ReadyForQuery status",
                        why: "not I, T or E",
                    });
                }
            },
            be::ROW_DESCRIPTION => Backend::RowDescription,
            be::DATA_ROW => Backend::DataRow,
            be::COMMAND_COMPLETE => Backend::CommandComplete(CommandTag::parse(head)),
            be::EMPTY_QUERY_RESPONSE => Backend::EmptyQueryResponse,
            be::ERROR_RESPONSE => Backend::ErrorResponse(ErrorFields::parse(head)),
            be::NOTICE_RESPONSE => Backend::NoticeResponse,
            be::NOTIFICATION_RESPONSE => Backend::NotificationResponse,
            be::PARSE_COMPLETE => Backend::ParseComplete,
            be::BIND_COMPLETE => Backend::BindComplete,
            be::CLOSE_COMPLETE => Backend::CloseComplete,
            be::NO_DATA => Backend::NoData,
            be::PARAMETER_DESCRIPTION => Backend::ParameterDescription,
            be::PORTAL_SUSPENDED => Backend::PortalSuspended,
            be::COPY_IN_RESPONSE => Backend::CopyInResponse,
            be::COPY_OUT_RESPONSE => Backend::CopyOutResponse,
            be::COPY_BOTH_RESPONSE => Backend::CopyBothResponse,
            be::COPY_DATA => Backend::CopyData,
            be::COPY_DONE => Backend::CopyDone,
            be::FUNCTION_CALL_RESPONSE => Backend::FunctionCallResponse,
            be::NEGOTIATE_PROTOCOL_VERSION => Backend::NegotiateProtocolVersion,
            t => Backend::Other(t),
        })
    }

    /// Messages the server may send at any time, outside any response.
    pub fn is_async(tag: u8) -> bool {
        matches!(
            tag,
            be::NOTICE_RESPONSE | be::NOTIFICATION_RESPONSE | be::PARAMETER_STATUS
        )
    }
}

/// Whether `b` starts like a PostgreSQL connection from the client side: a StartupMessage for
/// protocol 3.x whose parameters look like names, an SSLRequest, a GSSENCRequest or a
/// CancelRequest. `b` may be only the first bytes of the packet.
pub fn looks_like_startup(b: &[u8]) -> bool {
    let mut c = Cursor::new(b);
    let (Ok(len), Ok(code)) = (c.u32("length"), c.u32("code")) else {
        return false;
    };
    match code {
        code::SSL_REQUEST | code::GSSENC_REQUEST => len == 8,
        code::CANCEL_REQUEST => (16..=12 + 256).contains(&len),
        v if v >> 16 == 3 && v & 0xFFFF < 16 => {
            if !(8 + 5..=MAX_STARTUP_LEN).contains(&len) {
                return false;
            }
            // Parameter names and values: NUL-terminated text, ending with an empty name.
            let body = b.get(8..(len as usize).min(b.len())).unwrap_or(&[]);
            let mut first = true;
            let mut in_name = true;
            let mut start = true;
            for &c in body {
                if c == 0 {
                    if in_name && start {
                        // The terminating empty name: only valid after a whole pair.
                        return !first;
                    }
                    in_name = !in_name;
                    first = false;
                    start = true;
                    continue;
                }
                if in_name && !(c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-') {
                    return false;
                }
                if !in_name && c < 0x20 && c != b'\t' {
                    return false;
                }
                start = false;
            }
            true
        }
        _ => false,
    }
}

/// The largest message length the protocol allows, for documentation and tests.
pub const MAX_LEN: u32 = MAX_MESSAGE_LEN - 1;

#[cfg(test)]
mod tests {
    use super::super::wire::put_startup;
    use super::*;

    fn startup_body(params: &[(&str, &str)], version: u32) -> Vec<u8> {
        let mut body = Vec::new();
        for (k, v) in params {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut out = Vec::new();
        put_startup(&mut out, version, &body);
        out
    }

    #[test]
    fn startup_packets() {
        let p = startup_body(
            &[
                ("user", "app"),
                ("database", "shop"),
                ("application_name", "psql"),
                ("client_encoding", "UTF8"),
            ],
            code::PROTOCOL_3_0,
        );
        assert!(looks_like_startup(&p));
        assert!(looks_like_startup(&p[..12]));
        assert_eq!(
            StartupPacket::parse(&p[4..]).unwrap(),
            StartupPacket::Startup {
                minor: 0,
                user: Some(b"app"),
                database: Some(b"shop"),
                application_name: Some(b"psql"),
                replication: false,
            }
        );
        let p32 = startup_body(&[("user", "u"), ("replication", "true")], 0x0003_0002);
        assert!(matches!(
            StartupPacket::parse(&p32[4..]).unwrap(),
            StartupPacket::Startup {
                minor: 2,
                database: None,
                replication: true,
                ..
            }
        ));
        let mut ssl = Vec::new();
        put_startup(&mut ssl, code::SSL_REQUEST, b"");
        assert!(looks_like_startup(&ssl));
        assert_eq!(
            StartupPacket::parse(&ssl[4..]).unwrap(),
            StartupPacket::SslRequest
        );
        let mut gss = Vec::new();
        put_startup(&mut gss, code::GSSENC_REQUEST, b"");
        assert_eq!(
            StartupPacket::parse(&gss[4..]).unwrap(),
            StartupPacket::GssEncRequest
        );
        let mut cancel = Vec::new();
        put_startup(
            &mut cancel,
            code::CANCEL_REQUEST,
            &[0, 0, 0, 42, 1, 2, 3, 4],
        );
        assert!(looks_like_startup(&cancel));
        assert_eq!(
            StartupPacket::parse(&cancel[4..]).unwrap(),
            StartupPacket::CancelRequest { pid: 42 }
        );
        // Lies and other protocols.
        let mut bad = Vec::new();
        put_startup(&mut bad, code::SSL_REQUEST, b"xx");
        assert!(!looks_like_startup(&bad));
        assert!(StartupPacket::parse(&bad[4..]).is_err());
        let mut v2 = Vec::new();
        put_startup(&mut v2, 2 << 16, &[0; 20]);
        assert!(!looks_like_startup(&v2));
        assert!(StartupPacket::parse(&v2[4..]).is_err());
        assert!(!looks_like_startup(b"GET / HTTP/1.1\r\n"));
        assert!(!looks_like_startup(b"\x16\x03\x01\x02\x00\x01\x00\x01"));
        assert!(!looks_like_startup(&[0, 0, 0, 8]));
        let unterminated = startup_body(&[("user", "a")], code::PROTOCOL_3_0);
        assert!(StartupPacket::parse(&unterminated[4..unterminated.len() - 2]).is_err());
        assert!(!looks_like_startup(&startup_body(&[], code::PROTOCOL_3_0)));
        let mut huge = startup_body(&[("user", "a")], code::PROTOCOL_3_0);
        huge[..4].copy_from_slice(&20_000u32.to_be_bytes());
        assert!(!looks_like_startup(&huge));
    }

    #[test]
    fn frontend_messages() {
        assert_eq!(
            Frontend::parse(b'Q', b"SELECT 1\0").unwrap(),
            Frontend::Query {
                sql: b"SELECT 1",
                sql_complete: true
            }
        );
        assert_eq!(
            Frontend::parse(b'Q', b"SELECT 1").unwrap(),
            Frontend::Query {
                sql: b"SELECT 1",
                sql_complete: false
            }
        );
        assert_eq!(
            Frontend::parse(b'P', b"s1\0SELECT $1\0\0\x01\0\0\0\x17").unwrap(),
            Frontend::Parse {
                name: b"s1",
                sql: b"SELECT $1",
                sql_complete: true
            }
        );
        assert!(Frontend::parse(b'P', b"s1").is_err());
        assert_eq!(
            Frontend::parse(b'B', b"\0s1\0\0\0\0\x01\0\0\0\x011\0\0").unwrap(),
            Frontend::Bind {
                portal: b"",
                statement: b"s1"
            }
        );
        assert_eq!(
            Frontend::parse(b'D', b"Pcur\0").unwrap(),
            Frontend::Describe {
                target: Target::Portal,
                name: b"cur"
            }
        );
        assert!(Frontend::parse(b'D', b"Xcur\0").is_err());
        assert_eq!(
            Frontend::parse(b'C', b"Ss1\0").unwrap(),
            Frontend::Close {
                target: Target::Statement,
                name: b"s1"
            }
        );
        assert_eq!(
            Frontend::parse(b'E', b"\0\0\0\0\x0a").unwrap(),
            Frontend::Execute {
                portal: b"",
                max_rows: 10
            }
        );
        assert!(Frontend::parse(b'E', b"\0\0\0").is_err());
        assert_eq!(
            Frontend::parse(b'F', &[0, 0, 0x03, 0xB8, 0, 0]).unwrap(),
            Frontend::FunctionCall { oid: 952 }
        );
        for (t, m) in [
            (b'S', Frontend::Sync),
            (b'H', Frontend::Flush),
            (b'X', Frontend::Terminate),
            (b'd', Frontend::CopyData),
            (b'c', Frontend::CopyDone),
            (b'f', Frontend::CopyFail),
            (b'p', Frontend::Password),
            (b'?', Frontend::Other(b'?')),
        ] {
            assert_eq!(Frontend::parse(t, b"").unwrap(), m);
        }
    }

    #[test]
    fn frontend_and_backend_lengths() {
        assert!(frontend_len_ok(b'S', 4) && !frontend_len_ok(b'S', 5));
        assert!(frontend_len_ok(b'Q', 5) && !frontend_len_ok(b'Q', 4));
        assert!(!frontend_len_ok(b'Q', MAX_MESSAGE_LEN));
        assert!(frontend_len_ok(b'Q', MAX_LEN));
        assert!(!frontend_len_ok(b'E', 5000));
        assert!(!frontend_len_ok(b'Z', 5));
        assert!(backend_len_ok(b'Z', 5) && !backend_len_ok(b'Z', 6));
        assert!(backend_len_ok(b'1', 4) && !backend_len_ok(b'1', 5));
        assert!(backend_len_ok(b'K', 12) && backend_len_ok(b'K', 40));
        assert!(!backend_len_ok(b'K', 8));
        assert!(backend_len_ok(b'D', 6) && backend_len_ok(b'D', MAX_LEN));
        assert!(!backend_len_ok(b'D', MAX_MESSAGE_LEN));
        assert!(!backend_len_ok(b'Q', 10));
        assert!(!backend_len_ok(b'C', 4) && !backend_len_ok(b'C', 1000));
    }

    #[test]
    fn backend_messages() {
        assert_eq!(
            Backend::parse(b'Z', b"T").unwrap(),
            Backend::ReadyForQuery { status: b'T' }
        );
        assert!(Backend::parse(b'Z', b"x").is_err());
        assert!(Backend::parse(b'Z', b"").is_err());
        assert_eq!(
            Backend::parse(b'R', &[0, 0, 0, 10]).unwrap(),
            Backend::Authentication { code: 10 }
        );
        let e = b"SERROR\0VERROR\0C42P01\0Mrelation \"nope\" does not exist\0P15\0\0";
        match Backend::parse(b'E', e).unwrap() {
            Backend::ErrorResponse(f) => {
                assert_eq!(f.severity, Some(&b"ERROR"[..]));
                assert_eq!(f.code, Some(&b"42P01"[..]));
                assert_eq!(f.message, Some(&b"relation \"nope\" does not exist"[..]));
                assert!(!f.is_fatal());
            }
            other => panic!("{other:?}"),
        }
        // Localized severity only; cut short.
        let f = ErrorFields::parse(b"SFATAL\0C57P01\0Mterminat");
        assert!(f.is_fatal());
        assert_eq!(f.message, Some(&b"terminat"[..]));
        assert_eq!(ErrorFields::parse(b""), ErrorFields::default());
        for (tag, verb, rows) in [
            (&b"SELECT 10\0"[..], &b"SELECT"[..], Some(10)),
            (b"INSERT 0 5\0", b"INSERT", Some(5)),
            (b"UPDATE 3\0", b"UPDATE", Some(3)),
            (b"COPY 7\0", b"COPY", Some(7)),
            (b"CREATE TABLE\0", b"CREATE", None),
            (b"BEGIN\0", b"BEGIN", None),
            (b"SELECT 99999999999999999999999\0", b"SELECT", None),
            (b"SELECT 18446744073709551615\0", b"SELECT", Some(u64::MAX)),
            (b"SELECT 18446744073709551616\0", b"SELECT", None),
            (b"FETCH 007\0", b"FETCH", Some(7)),
            (b"", b"", None),
        ] {
            assert_eq!(CommandTag::parse(tag), CommandTag { verb, rows }, "{tag:?}");
        }
        for t in [
            b'K', b'S', b'T', b'D', b'I', b'N', b'A', b'1', b'2', b'3', b'n', b't', b's', b'G',
            b'H', b'W', b'd', b'c', b'V', b'v',
        ] {
            assert!(!matches!(
                Backend::parse(t, b"").unwrap(),
                Backend::Other(_)
            ));
        }
        assert_eq!(Backend::parse(b'?', b"").unwrap(), Backend::Other(b'?'));
        assert!(Backend::is_async(b'N') && Backend::is_async(b'A') && Backend::is_async(b'S'));
        assert!(!Backend::is_async(b'Z'));
    }
}
