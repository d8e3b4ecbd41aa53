//! Client-to-server messages: command bytes and what each expects back, the parsed commands,
//! and the handshake response (or TLS request).

use super::super::wire::{Cursor, LenencRead, WireError};
use super::{Res, caps, cmd};

/// What a command expects back from the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Nothing (COM_QUIT, COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA).
    None,
    /// One OK, ERR or EOF packet.
    Single,
    /// OK, ERR, LOCAL INFILE request, or one or more result sets.
    Results,
    /// The COM_STMT_PREPARE response.
    Prepare,
    /// Binary rows then a terminator (COM_STMT_FETCH).
    Rows,
    /// Column definitions then a terminator (COM_FIELD_LIST).
    Columns,
    /// A plain string, or ERR (COM_STATISTICS).
    Text,
    /// An authentication exchange ending with OK or ERR (COM_CHANGE_USER).
    Auth,
    /// An endless stream (the binlog): the connection is not a query connection any more.
    Stream,
}

/// A command kind. Open: any byte parses; unknown ones are named "unknown".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command(pub u8);

impl Command {
    /// The stable lower-case name used in [`crate::QueryEvent::command`].
    pub fn name(self) -> &'static str {
        match self.0 {
            cmd::QUERY => "query",
            cmd::STMT_EXECUTE => "execute",
            cmd::STMT_PREPARE => "prepare",
            cmd::STMT_CLOSE => "close",
            cmd::STMT_RESET => "reset",
            cmd::STMT_SEND_LONG_DATA => "send_long_data",
            cmd::STMT_FETCH => "fetch",
            cmd::STMT_BULK_EXECUTE => "bulk_execute",
            cmd::INIT_DB => "init_db",
            cmd::PING => "ping",
            cmd::QUIT => "quit",
            cmd::CHANGE_USER => "change_user",
            cmd::FIELD_LIST => "field_list",
            cmd::STATISTICS => "statistics",
            cmd::PROCESS_KILL => "process_kill",
            cmd::PROCESS_INFO => "process_info",
            cmd::SET_OPTION => "set_option",
            cmd::RESET_CONNECTION => "reset_connection",
            cmd::BINLOG_DUMP => "binlog_dump",
            cmd::BINLOG_DUMP_GTID => "binlog_dump_gtid",
            cmd::REGISTER_SLAVE => "register_slave",
            cmd::CREATE_DB => "create_db",
            cmd::DROP_DB => "drop_db",
            cmd::REFRESH => "refresh",
            cmd::SHUTDOWN => "shutdown",
            cmd::DEBUG => "debug",
            _ => "unknown",
        }
    }

    pub fn is_known(self) -> bool {
        self.name() != "unknown"
    }

    pub fn reply(self) -> Reply {
        match self.0 {
            cmd::QUIT | cmd::STMT_CLOSE | cmd::STMT_SEND_LONG_DATA => Reply::None,
            cmd::QUERY | cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE | cmd::PROCESS_INFO => {
                Reply::Results
            }
            cmd::STMT_PREPARE => Reply::Prepare,
            cmd::STMT_FETCH => Reply::Rows,
            cmd::FIELD_LIST => Reply::Columns,
            cmd::STATISTICS => Reply::Text,
            cmd::CHANGE_USER => Reply::Auth,
            cmd::BINLOG_DUMP | cmd::BINLOG_DUMP_GTID => Reply::Stream,
            // Unknown commands are answered by one packet (usually ERR "Unknown command"); the
            // results parser accepts that and the shapes a newer command might use.
            cmd::INIT_DB
            | cmd::PING
            | cmd::STMT_RESET
            | cmd::PROCESS_KILL
            | cmd::SET_OPTION
            | cmd::RESET_CONNECTION
            | cmd::REGISTER_SLAVE
            | cmd::CREATE_DB
            | cmd::DROP_DB
            | cmd::REFRESH
            | cmd::SHUTDOWN
            | cmd::DEBUG => Reply::Single,
            _ => Reply::Results,
        }
    }

    /// Whether a packet of `len` payload bytes starting with this command byte is a plausible
    /// command (used to resynchronize on a stream picked up in the middle).
    pub fn plausible_len(self, len: u32) -> bool {
        match self.0 {
            cmd::QUIT
            | cmd::PING
            | cmd::STATISTICS
            | cmd::RESET_CONNECTION
            | cmd::DEBUG
            | cmd::PROCESS_INFO => len == 1,
            cmd::STMT_CLOSE | cmd::STMT_RESET | cmd::PROCESS_KILL => len == 5,
            cmd::SET_OPTION => len == 3,
            cmd::STMT_FETCH => len == 9,
            cmd::REFRESH => len == 2,
            cmd::STMT_EXECUTE => len >= 10,
            cmd::STMT_BULK_EXECUTE => len >= 7,
            cmd::STMT_SEND_LONG_DATA => len >= 7,
            cmd::BINLOG_DUMP => len >= 11,
            cmd::BINLOG_DUMP_GTID => len >= 19,
            cmd::REGISTER_SLAVE => len >= 17,
            cmd::QUERY
            | cmd::STMT_PREPARE
            | cmd::INIT_DB
            | cmd::FIELD_LIST
            | cmd::CHANGE_USER
            | cmd::CREATE_DB
            | cmd::DROP_DB => len >= 2,
            cmd::SHUTDOWN => len <= 2,
            _ => false,
        }
    }
}

/// A client command, borrowing the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Query {
        sql: &'a [u8],
    },
    Prepare {
        sql: &'a [u8],
    },
    Execute {
        stmt_id: u32,
        flags: u8,
    },
    BulkExecute {
        stmt_id: u32,
        flags: u16,
    },
    Fetch {
        stmt_id: u32,
        rows: u32,
    },
    Close {
        stmt_id: u32,
    },
    Reset {
        stmt_id: u32,
    },
    SendLongData {
        stmt_id: u32,
        param: u16,
    },
    InitDb {
        schema: &'a [u8],
    },
    FieldList {
        table: &'a [u8],
    },
    ChangeUser {
        user: &'a [u8],
        schema: Option<&'a [u8]>,
    },
    ProcessKill {
        id: u32,
    },
    SetOption {
        option: u16,
    },
    /// Any other command; its body is not interpreted.
    Other(Command),
}

/// Flag bit of COM_STMT_EXECUTE asking for a read-only cursor (rows come via COM_STMT_FETCH).
pub const CURSOR_TYPE_READ_ONLY: u8 = 1;

impl<'a> Request<'a> {
    /// Parses a command packet. `caps` are the negotiated capabilities when known
    /// (`None` on a connection picked up mid-stream).
    pub fn parse(payload: &'a [u8], caps: Option<u64>) -> Res<Self> {
        let mut c = Cursor::new(payload);
        let command = Command(c.u8("command")?);
        Ok(match command.0 {
            cmd::QUERY => {
                if caps.is_some_and(|c| c & caps::CLIENT_QUERY_ATTRIBUTES != 0) {
                    skip_query_attributes(&mut c)?;
                }
                Request::Query { sql: c.rest() }
            }
            cmd::STMT_PREPARE => Request::Prepare { sql: c.rest() },
            cmd::STMT_EXECUTE => Request::Execute {
                stmt_id: c.u32("stmt id")?,
                flags: c.u8("cursor flags")?,
            },
            cmd::STMT_BULK_EXECUTE => Request::BulkExecute {
                stmt_id: c.u32("stmt id")?,
                flags: c.u16("bulk flags")?,
            },
            cmd::STMT_FETCH => Request::Fetch {
                stmt_id: c.u32("stmt id")?,
                rows: c.u32("rows")?,
            },
            cmd::STMT_CLOSE => Request::Close {
                stmt_id: c.u32("stmt id")?,
            },
            cmd::STMT_RESET => Request::Reset {
                stmt_id: c.u32("stmt id")?,
            },
            cmd::STMT_SEND_LONG_DATA => Request::SendLongData {
                stmt_id: c.u32("stmt id")?,
                param: c.u16("param id")?,
            },
            cmd::INIT_DB => Request::InitDb { schema: c.rest() },
            cmd::FIELD_LIST => Request::FieldList {
                table: c.cstr_or_rest().0,
            },
            cmd::CHANGE_USER => {
                let user = c.cstr("user")?;
                let secure = caps.is_none_or(|c| c & caps::CLIENT_SECURE_CONNECTION != 0);
                if secure {
                    let n = c.u8("auth length")?;
                    c.skip(usize::from(n), "auth data")?;
                } else {
                    c.cstr("auth data")?;
                }
                let schema = if c.is_empty() {
                    None
                } else {
                    Some(c.cstr_or_rest().0)
                };
                Request::ChangeUser { user, schema }
            }
            cmd::PROCESS_KILL => Request::ProcessKill {
                id: c.u32("connection id")?,
            },
            cmd::SET_OPTION => Request::SetOption {
                option: c.u16("option")?,
            },
            _ => Request::Other(command),
        })
    }

    pub fn command(&self) -> Command {
        Command(match self {
            Request::Query { .. } => cmd::QUERY,
            Request::Prepare { .. } => cmd::STMT_PREPARE,
            Request::Execute { .. } => cmd::STMT_EXECUTE,
            Request::BulkExecute { .. } => cmd::STMT_BULK_EXECUTE,
            Request::Fetch { .. } => cmd::STMT_FETCH,
            Request::Close { .. } => cmd::STMT_CLOSE,
            Request::Reset { .. } => cmd::STMT_RESET,
            Request::SendLongData { .. } => cmd::STMT_SEND_LONG_DATA,
            Request::InitDb { .. } => cmd::INIT_DB,
            Request::FieldList { .. } => cmd::FIELD_LIST,
            Request::ChangeUser { .. } => cmd::CHANGE_USER,
            Request::ProcessKill { .. } => cmd::PROCESS_KILL,
            Request::SetOption { .. } => cmd::SET_OPTION,
            Request::Other(c) => return *c,
        })
    }
}

/// MySQL 8 query attributes prefix the COM_QUERY text when CLIENT_QUERY_ATTRIBUTES is on.
fn skip_query_attributes(c: &mut Cursor<'_>) -> Res<()> {
    let count = c.lenenc("attribute count")?;
    let _sets = c.lenenc("attribute set count")?;
    if count == 0 {
        return Ok(());
    }
    let count = usize::try_from(count)
        .ok()
        .filter(|&n| n <= 0xFFFF)
        .ok_or(WireError::Invalid {
            what: "attribute count",
            why: "too large",
        })?;
    c.skip(count.div_ceil(8), "attribute null bitmap")?;
    let null_bitmap_end = c.pos();
    let bound = c.u8("new params bound flag")?;
    if bound != 1 {
        return Err(WireError::Invalid {
            what: "query attributes",
            why: "types not sent",
        });
    }
    let mut types = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        types.push(c.u16("attribute type")?);
        c.lenenc_bytes("attribute name")?;
    }
    let _ = null_bitmap_end;
    for t in types {
        skip_binary_value(c, (t & 0xFF) as u8)?;
    }
    Ok(())
}

/// Skips one binary-protocol value of column type `ty`.
pub fn skip_binary_value(c: &mut Cursor<'_>, ty: u8) -> Res<()> {
    let n = match ty {
        0x01 => 1,               // TINY
        0x02 | 0x0D => 2,        // SHORT, YEAR
        0x03 | 0x09 | 0x04 => 4, // LONG, INT24, FLOAT
        0x05 | 0x08 => 8,        // DOUBLE, LONGLONG
        0x06 => 0,               // NULL
        0x07 | 0x0A | 0x0B | 0x0C | 0x11 | 0x12 | 0x13 => {
            // TIMESTAMP, DATE, TIME, DATETIME and their *2 forms: a length byte then that many.
            usize::from(c.u8("temporal length")?)
        }
        _ => {
            c.lenenc_bytes("binary value")?;
            0
        }
    };
    c.skip(n, "binary value")
}

/// Protocol::HandshakeResponse41 (or the 32-byte SSLRequest that precedes TLS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeResponse<'a> {
    /// Client capabilities; MariaDB's extended capabilities in bits 32..64.
    pub capabilities: u64,
    pub max_packet: u32,
    pub charset: u8,
    /// True for an SSLRequest: the rest of the connection is TLS.
    pub ssl_request: bool,
    pub user: &'a [u8],
    pub database: Option<&'a [u8]>,
    pub auth_plugin: Option<&'a [u8]>,
    pub zstd_level: Option<u8>,
}

impl<'a> HandshakeResponse<'a> {
    pub fn parse(payload: &'a [u8]) -> Res<Self> {
        let mut c = Cursor::new(payload);
        let low = c.u16("capabilities")?;
        let mut capabilities = u64::from(low);
        if capabilities & caps::CLIENT_PROTOCOL_41 == 0 {
            // HandshakeResponse320: capabilities(2), max packet(3), user NUL, auth.
            let max_packet = c.u24("max packet")?;
            let user = c.cstr_or_rest().0;
            return Ok(HandshakeResponse {
                capabilities,
                max_packet,
                charset: 0,
                ssl_request: capabilities & caps::CLIENT_SSL != 0 && user.is_empty(),
                user,
                database: None,
                auth_plugin: None,
                zstd_level: None,
            });
        }
        capabilities |= u64::from(c.u16("capabilities upper")?) << 16;
        let max_packet = c.u32("max packet")?;
        let charset = c.u8("charset")?;
        c.skip(19, "filler")?;
        let ext = c.u32("mariadb capabilities")?;
        if capabilities & caps::CLIENT_MYSQL == 0 {
            capabilities |= u64::from(ext) << 32;
        }
        let mut r = HandshakeResponse {
            capabilities,
            max_packet,
            charset,
            ssl_request: false,
            user: &[],
            database: None,
            auth_plugin: None,
            zstd_level: None,
        };
        if c.is_empty() {
            r.ssl_request = capabilities & caps::CLIENT_SSL != 0;
            return Ok(r);
        }
        // A full response with CLIENT_SSL is only ever sent inside TLS.
        r.ssl_request = capabilities & caps::CLIENT_SSL != 0;
        r.user = c.cstr("user")?;
        if capabilities & caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            c.lenenc_bytes("auth response")?;
        } else if capabilities & caps::CLIENT_SECURE_CONNECTION != 0 {
            let n = c.u8("auth response length")?;
            c.skip(usize::from(n), "auth response")?;
        } else {
            c.cstr("auth response")?;
        }
        if capabilities & caps::CLIENT_CONNECT_WITH_DB != 0 && !c.is_empty() {
            r.database = Some(c.cstr_or_rest().0);
        }
        if capabilities & caps::CLIENT_PLUGIN_AUTH != 0 && !c.is_empty() {
            r.auth_plugin = Some(c.cstr_or_rest().0);
        }
        if capabilities & caps::CLIENT_CONNECT_ATTRS != 0 && !c.is_empty() {
            c.lenenc_bytes("connect attributes")?;
        }
        if capabilities & caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 && !c.is_empty() {
            r.zstd_level = Some(c.u8("zstd level")?);
        }
        Ok(r)
    }
}
