//! Typed MySQL/MariaDB messages borrowing the packet bytes: the handshake, commands, and the
//! server's OK/ERR/EOF, result-set and prepare responses. Pure parsing, no conversation state.

use super::wire::{Cursor, WireError};

type Res<T> = Result<T, WireError>;

/// Capability flags (the low 32 bits are MySQL's; MariaDB's extension lives in bits 32..64).
pub mod caps {
    /// `CLIENT_LONG_PASSWORD`; MariaDB calls it `CLIENT_MYSQL`: a server that clears it is
    /// MariaDB and sends extended capabilities.
    pub const CLIENT_MYSQL: u64 = 1;
    pub const CLIENT_FOUND_ROWS: u64 = 1 << 1;
    pub const CLIENT_LONG_FLAG: u64 = 1 << 2;
    pub const CLIENT_CONNECT_WITH_DB: u64 = 1 << 3;
    pub const CLIENT_COMPRESS: u64 = 1 << 5;
    pub const CLIENT_LOCAL_FILES: u64 = 1 << 7;
    pub const CLIENT_PROTOCOL_41: u64 = 1 << 9;
    pub const CLIENT_SSL: u64 = 1 << 11;
    pub const CLIENT_TRANSACTIONS: u64 = 1 << 13;
    pub const CLIENT_SECURE_CONNECTION: u64 = 1 << 15;
    pub const CLIENT_MULTI_STATEMENTS: u64 = 1 << 16;
    pub const CLIENT_MULTI_RESULTS: u64 = 1 << 17;
    pub const CLIENT_PS_MULTI_RESULTS: u64 = 1 << 18;
    pub const CLIENT_PLUGIN_AUTH: u64 = 1 << 19;
    pub const CLIENT_CONNECT_ATTRS: u64 = 1 << 20;
    pub const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u64 = 1 << 21;
    pub const CLIENT_SESSION_TRACK: u64 = 1 << 23;
    pub const CLIENT_DEPRECATE_EOF: u64 = 1 << 24;
    pub const CLIENT_OPTIONAL_RESULTSET_METADATA: u64 = 1 << 25;
    pub const CLIENT_ZSTD_COMPRESSION_ALGORITHM: u64 = 1 << 26;
    pub const CLIENT_QUERY_ATTRIBUTES: u64 = 1 << 27;
    pub const MARIADB_CLIENT_PROGRESS: u64 = 1 << 32;
    pub const MARIADB_CLIENT_COM_MULTI: u64 = 1 << 33;
    pub const MARIADB_CLIENT_STMT_BULK_OPERATIONS: u64 = 1 << 34;
    pub const MARIADB_CLIENT_EXTENDED_METADATA: u64 = 1 << 35;
    pub const MARIADB_CLIENT_CACHE_METADATA: u64 = 1 << 36;
    pub const MARIADB_CLIENT_BULK_UNIT_RESULTS: u64 = 1 << 37;
}

/// Server status flags carried by OK and EOF packets.
pub mod status {
    pub const IN_TRANS: u16 = 0x0001;
    pub const AUTOCOMMIT: u16 = 0x0002;
    pub const MORE_RESULTS_EXISTS: u16 = 0x0008;
    pub const CURSOR_EXISTS: u16 = 0x0040;
    pub const LAST_ROW_SENT: u16 = 0x0080;
    pub const SESSION_STATE_CHANGED: u16 = 0x4000;
}

/// Command bytes (client to server, first payload byte in the command phase).
pub mod cmd {
    pub const SLEEP: u8 = 0x00;
    pub const QUIT: u8 = 0x01;
    pub const INIT_DB: u8 = 0x02;
    pub const QUERY: u8 = 0x03;
    pub const FIELD_LIST: u8 = 0x04;
    pub const CREATE_DB: u8 = 0x05;
    pub const DROP_DB: u8 = 0x06;
    pub const REFRESH: u8 = 0x07;
    pub const SHUTDOWN: u8 = 0x08;
    pub const STATISTICS: u8 = 0x09;
    pub const PROCESS_INFO: u8 = 0x0A;
    pub const PROCESS_KILL: u8 = 0x0C;
    pub const DEBUG: u8 = 0x0D;
    pub const PING: u8 = 0x0E;
    pub const CHANGE_USER: u8 = 0x11;
    pub const BINLOG_DUMP: u8 = 0x12;
    pub const REGISTER_SLAVE: u8 = 0x15;
    pub const STMT_PREPARE: u8 = 0x16;
    pub const STMT_EXECUTE: u8 = 0x17;
    pub const STMT_SEND_LONG_DATA: u8 = 0x18;
    pub const STMT_CLOSE: u8 = 0x19;
    pub const STMT_RESET: u8 = 0x1A;
    pub const SET_OPTION: u8 = 0x1B;
    pub const STMT_FETCH: u8 = 0x1C;
    pub const BINLOG_DUMP_GTID: u8 = 0x1E;
    pub const RESET_CONNECTION: u8 = 0x1F;
    pub const STMT_BULK_EXECUTE: u8 = 0xFA;
}

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
                table: c.nul_or_rest(),
            },
            cmd::CHANGE_USER => {
                let user = c.nul_bytes("user")?;
                let secure = caps.is_none_or(|c| c & caps::CLIENT_SECURE_CONNECTION != 0);
                if secure {
                    let n = c.u8("auth length")?;
                    c.skip(usize::from(n), "auth data")?;
                } else {
                    c.nul_bytes("auth data")?;
                }
                let schema = if c.is_empty() {
                    None
                } else {
                    Some(c.nul_or_rest())
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

/// Protocol::HandshakeV10, the server greeting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake<'a> {
    pub server_version: &'a [u8],
    pub connection_id: u32,
    /// Server capabilities; MariaDB's extended capabilities in bits 32..64.
    pub capabilities: u64,
    pub charset: u8,
    pub status: u16,
    pub auth_plugin: Option<&'a [u8]>,
}

impl<'a> Handshake<'a> {
    pub fn parse(payload: &'a [u8]) -> Res<Self> {
        let mut c = Cursor::new(payload);
        let version = c.u8("protocol version")?;
        if version != 10 {
            return Err(WireError::Invalid {
                what: "greeting",
                why: "protocol version is not 10",
            });
        }
        let server_version = c.nul_bytes("server version")?;
        let connection_id = c.u32("connection id")?;
        c.skip(8, "auth data part 1")?;
        c.skip(1, "filler")?;
        let low = c.u16("capabilities")?;
        let mut capabilities = u64::from(low);
        let mut charset = 0;
        let mut status = 0;
        let mut auth_plugin = None;
        if !c.is_empty() {
            charset = c.u8("charset")?;
            status = c.u16("status")?;
            capabilities |= u64::from(c.u16("capabilities upper")?) << 16;
            let auth_len = c.u8("auth data length")?;
            c.skip(6, "reserved")?;
            let ext = c.u32("mariadb capabilities")?;
            if capabilities & caps::CLIENT_MYSQL == 0 {
                capabilities |= u64::from(ext) << 32;
            }
            if capabilities & caps::CLIENT_SECURE_CONNECTION != 0 {
                let n = usize::from(auth_len).saturating_sub(8).max(13);
                c.skip(n.min(c.remaining()), "auth data part 2")?;
            }
            if capabilities & caps::CLIENT_PLUGIN_AUTH != 0 && !c.is_empty() {
                auth_plugin = Some(c.nul_or_rest());
            }
        }
        Ok(Handshake {
            server_version,
            connection_id,
            capabilities,
            charset,
            status,
            auth_plugin,
        })
    }
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
            let user = c.nul_or_rest();
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
        r.user = c.nul_bytes("user")?;
        if capabilities & caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            c.lenenc_bytes("auth response")?;
        } else if capabilities & caps::CLIENT_SECURE_CONNECTION != 0 {
            let n = c.u8("auth response length")?;
            c.skip(usize::from(n), "auth response")?;
        } else {
            c.nul_bytes("auth response")?;
        }
        if capabilities & caps::CLIENT_CONNECT_WITH_DB != 0 && !c.is_empty() {
            r.database = Some(c.nul_or_rest());
        }
        if capabilities & caps::CLIENT_PLUGIN_AUTH != 0 && !c.is_empty() {
            r.auth_plugin = Some(c.nul_or_rest());
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

/// OK_Packet (header 0x00, or 0xFE when it ends a result set under CLIENT_DEPRECATE_EOF).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OkPacket<'a> {
    pub header: u8,
    pub affected_rows: u64,
    pub last_insert_id: u64,
    pub status: u16,
    pub warnings: u16,
    pub info: &'a [u8],
    /// The new default schema, from session-state tracking (SESSION_TRACK_SCHEMA).
    pub schema: Option<&'a [u8]>,
}

impl<'a> OkPacket<'a> {
    /// `session_track`: whether CLIENT_SESSION_TRACK was negotiated (`false` when unknown: the
    /// info string is then read to the end and no schema change is reported).
    pub fn parse(payload: &'a [u8], session_track: bool) -> Res<Self> {
        let mut c = Cursor::new(payload);
        let header = c.u8("ok header")?;
        if header != 0x00 && header != 0xFE {
            return Err(WireError::Invalid {
                what: "ok",
                why: "header is not 0x00 or 0xFE",
            });
        }
        let affected_rows = c.lenenc("affected rows")?;
        let last_insert_id = c.lenenc("last insert id")?;
        let status = c.u16("status")?;
        let warnings = c.u16("warnings")?;
        let mut ok = OkPacket {
            header,
            affected_rows,
            last_insert_id,
            status,
            warnings,
            info: &[],
            schema: None,
        };
        if session_track {
            if c.is_empty() {
                return Ok(ok);
            }
            ok.info = c.lenenc_bytes("info")?;
            if status & status::SESSION_STATE_CHANGED != 0 && !c.is_empty() {
                let state = c.lenenc_bytes("session state")?;
                let mut s = Cursor::new(state);
                while !s.is_empty() {
                    let ty = s.u8("session state type")?;
                    let data = s.lenenc_bytes("session state data")?;
                    if ty == 1 {
                        ok.schema = Some(Cursor::new(data).lenenc_bytes("schema")?);
                    }
                }
            }
        } else {
            ok.info = c.rest();
        }
        Ok(ok)
    }
}

/// ERR_Packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrPacket<'a> {
    pub code: u16,
    /// The five SQLSTATE characters (without the '#' marker).
    pub sql_state: Option<&'a [u8]>,
    pub message: &'a [u8],
}

/// MariaDB progress report, sent as an ERR packet with code 0xFFFF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgressReport<'a> {
    pub stage: u8,
    pub max_stage: u8,
    /// Per mille times 1000 (0..=100000).
    pub progress: u32,
    pub info: &'a [u8],
}

/// A packet starting with 0xFF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrOrProgress<'a> {
    Err(ErrPacket<'a>),
    Progress(ProgressReport<'a>),
}

impl<'a> ErrOrProgress<'a> {
    pub fn parse(payload: &'a [u8]) -> Res<Self> {
        let mut c = Cursor::new(payload);
        if c.u8("err header")? != 0xFF {
            return Err(WireError::Invalid {
                what: "err",
                why: "header is not 0xFF",
            });
        }
        let code = c.u16("error code")?;
        if code == 0xFFFF {
            let stage = c.u8("progress stage")?;
            let max_stage = c.u8("progress max stage")?;
            let progress = c.u24("progress")?;
            let info = if c.is_empty() {
                &[][..]
            } else {
                c.lenenc_bytes("progress info")?
            };
            return Ok(ErrOrProgress::Progress(ProgressReport {
                stage,
                max_stage,
                progress,
                info,
            }));
        }
        let mut sql_state = None;
        if c.peek() == Some(b'#') && c.remaining() >= 6 {
            c.skip(1, "sql state marker")?;
            sql_state = Some(c.bytes(5, "sql state")?);
        }
        Ok(ErrOrProgress::Err(ErrPacket {
            code,
            sql_state,
            message: c.rest(),
        }))
    }
}

/// EOF_Packet (0xFE, fewer than 9 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EofPacket {
    pub warnings: u16,
    pub status: u16,
}

impl EofPacket {
    pub fn parse(payload: &[u8]) -> Res<Self> {
        let mut c = Cursor::new(payload);
        if c.u8("eof header")? != 0xFE {
            return Err(WireError::Invalid {
                what: "eof",
                why: "header is not 0xFE",
            });
        }
        if c.is_empty() {
            // Pre-4.1 EOF: a lone 0xFE.
            return Ok(EofPacket {
                warnings: 0,
                status: 0,
            });
        }
        Ok(EofPacket {
            warnings: c.u16("warnings")?,
            status: c.u16("status")?,
        })
    }
}

/// The longest EOF packet: anything 0xFE-headed and shorter than this is an EOF, anything
/// longer (but below 0xFFFFFF) is an OK packet with a 0xFE header.
pub const EOF_MAX_LEN: u64 = 7;

/// A 0xFE-headed packet that ends a result set (or its metadata): EOF or OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminator<'a> {
    Eof(EofPacket),
    Ok(OkPacket<'a>),
}

impl<'a> Terminator<'a> {
    /// `len` is the whole message length (the head may be cut short).
    pub fn parse(head: &'a [u8], len: u64, session_track: bool) -> Res<Self> {
        if len < EOF_MAX_LEN {
            EofPacket::parse(head).map(Terminator::Eof)
        } else {
            OkPacket::parse(head, session_track).map(Terminator::Ok)
        }
    }
    pub fn status(&self) -> u16 {
        match self {
            Terminator::Eof(e) => e.status,
            Terminator::Ok(o) => o.status,
        }
    }
    pub fn warnings(&self) -> u16 {
        match self {
            Terminator::Eof(e) => e.warnings,
            Terminator::Ok(o) => o.warnings,
        }
    }
}

/// How a server packet presents itself by its first byte and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// 0x00: OK (or a binary row, in a binary result set).
    Ok,
    /// 0xFF: ERR or MariaDB progress.
    Err,
    /// 0xFE and shorter than 0xFFFFFF: EOF, or OK ending a result set.
    Terminator,
    /// 0xFB: LOCAL INFILE request (as a first response packet).
    LocalInfile,
    /// Anything else (including an empty packet).
    Other,
}

pub fn shape(head: &[u8], len: u64) -> Shape {
    match head.first() {
        Some(0x00) => Shape::Ok,
        Some(0xFF) => Shape::Err,
        Some(0xFE) if len < u64::from(super::wire::MAX_PACKET_PAYLOAD) => Shape::Terminator,
        Some(0xFB) => Shape::LocalInfile,
        _ => Shape::Other,
    }
}

/// The packet that opens a result set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnCount {
    pub count: u64,
    /// MariaDB CACHE_METADATA / MySQL optional metadata: `Some(false)` when the column
    /// definitions are not sent.
    pub metadata_follows: Option<bool>,
}

/// Most columns a result set can have (MySQL and MariaDB limit tables to 4096 columns).
pub const MAX_COLUMNS: u64 = 4096;

impl ColumnCount {
    pub fn parse(payload: &[u8]) -> Res<Self> {
        let mut c = Cursor::new(payload);
        let count = c.lenenc("column count")?;
        if count == 0 || count > MAX_COLUMNS {
            return Err(WireError::Invalid {
                what: "column count",
                why: "out of range",
            });
        }
        let metadata_follows = match c.rest() {
            [] => None,
            [b] if *b <= 1 => Some(*b == 1),
            _ => {
                return Err(WireError::Invalid {
                    what: "column count",
                    why: "trailing bytes",
                });
            }
        };
        Ok(ColumnCount {
            count,
            metadata_follows,
        })
    }
}

/// Protocol::ColumnDefinition41.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnDef<'a> {
    pub schema: &'a [u8],
    pub table: &'a [u8],
    pub org_table: &'a [u8],
    pub name: &'a [u8],
    pub org_name: &'a [u8],
    pub charset: u16,
    pub length: u32,
    pub column_type: u8,
    pub flags: u16,
    pub decimals: u8,
}

impl<'a> ColumnDef<'a> {
    /// Cheap check used while streaming: a column definition starts with the catalog "def".
    pub fn looks_like(head: &[u8]) -> bool {
        head.starts_with(b"\x03def")
    }

    pub fn parse(payload: &'a [u8]) -> Res<Self> {
        let mut c = Cursor::new(payload);
        let catalog = c.lenenc_bytes("catalog")?;
        if catalog != b"def" {
            return Err(WireError::Invalid {
                what: "column definition",
                why: "catalog is not def",
            });
        }
        let schema = c.lenenc_bytes("schema")?;
        let table = c.lenenc_bytes("table")?;
        let org_table = c.lenenc_bytes("org table")?;
        let name = c.lenenc_bytes("name")?;
        let org_name = c.lenenc_bytes("org name")?;
        // MariaDB extended metadata may sit here when MARIADB_CLIENT_EXTENDED_METADATA is on:
        // the fixed-length block is always the last 13 bytes.
        let rest = c.rest();
        let fixed = rest
            .len()
            .checked_sub(13)
            .and_then(|s| rest.get(s..))
            .ok_or(WireError::Short {
                what: "column fixed fields",
                at: c.pos(),
                need: 13,
                have: rest.len(),
            })?;
        let mut f = Cursor::new(fixed);
        let _len_fixed = f.u8("fixed length")?;
        Ok(ColumnDef {
            schema,
            table,
            org_table,
            name,
            org_name,
            charset: f.u16("charset")?,
            length: f.u32("column length")?,
            column_type: f.u8("column type")?,
            flags: f.u16("column flags")?,
            decimals: f.u8("decimals")?,
        })
    }
}

/// COM_STMT_PREPARE_OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrepareOk {
    pub stmt_id: u32,
    pub num_columns: u16,
    pub num_params: u16,
    pub warnings: u16,
    /// MySQL optional metadata: `Some(false)` when no definitions follow.
    pub metadata_follows: Option<bool>,
}

impl PrepareOk {
    pub fn parse(payload: &[u8]) -> Res<Self> {
        let mut c = Cursor::new(payload);
        if c.u8("prepare ok header")? != 0 {
            return Err(WireError::Invalid {
                what: "prepare ok",
                why: "header is not 0x00",
            });
        }
        let stmt_id = c.u32("stmt id")?;
        let num_columns = c.u16("column count")?;
        let num_params = c.u16("param count")?;
        let mut p = PrepareOk {
            stmt_id,
            num_columns,
            num_params,
            warnings: 0,
            metadata_follows: None,
        };
        if !c.is_empty() {
            c.skip(1, "reserved")?;
            p.warnings = c.u16("warnings")?;
            if let Some(b) = c.peek() {
                p.metadata_follows = Some(b == 1);
            }
        }
        Ok(p)
    }
}

/// A text-protocol row: `n` length-encoded strings, 0xFB for NULL.
pub fn parse_text_row(payload: &[u8], n: usize) -> Res<Vec<Option<&[u8]>>> {
    let mut c = Cursor::new(payload);
    let mut out = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        if c.peek() == Some(0xFB) {
            c.skip(1, "null")?;
            out.push(None);
        } else {
            out.push(Some(c.lenenc_bytes("column value")?));
        }
    }
    if !c.is_empty() {
        return Err(WireError::Invalid {
            what: "text row",
            why: "trailing bytes",
        });
    }
    Ok(out)
}

/// A binary-protocol row: header 0x00, NULL bitmap (offset 2), values by column type.
pub fn parse_binary_row<'a>(payload: &'a [u8], types: &[u8]) -> Res<Vec<Option<&'a [u8]>>> {
    let mut c = Cursor::new(payload);
    if c.u8("binary row header")? != 0 {
        return Err(WireError::Invalid {
            what: "binary row",
            why: "header is not 0x00",
        });
    }
    let bitmap = c.bytes((types.len() + 7 + 2) / 8, "null bitmap")?;
    let mut out = Vec::with_capacity(types.len());
    for (i, &t) in types.iter().enumerate() {
        let bit = i + 2;
        let null = bitmap
            .get(bit / 8)
            .is_some_and(|b| b & (1 << (bit % 8)) != 0);
        if null {
            out.push(None);
            continue;
        }
        let start = c.pos();
        skip_binary_value(&mut c, t)?;
        out.push(payload.get(start..c.pos()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A MariaDB 10.11 greeting captured from a real server (payload only).
    const GREETING: &[u8] =
        b"\x0a5.5.5-10.11.19-MariaDB-0+deb12u1\x00\x08\x00\x00\x00!6*pv!;I\x00\xfe\xf7\x08\x02\
\x00\xff\x81\x15\x00\x00\x00\x00\x00\x00\x1d\x00\x00\x00;.pkHeGox1)u\x00mysql_native\
_password\x00";

    #[test]
    fn greeting_v10() {
        let h = Handshake::parse(GREETING).unwrap();
        assert_eq!(h.server_version, b"5.5.5-10.11.19-MariaDB-0+deb12u1");
        assert_eq!(h.connection_id, 8);
        assert_eq!(h.capabilities & caps::CLIENT_MYSQL, 0);
        assert_ne!(h.capabilities & caps::CLIENT_PROTOCOL_41, 0);
        assert_ne!(h.capabilities & caps::CLIENT_DEPRECATE_EOF, 0);
        assert_ne!(h.capabilities & caps::MARIADB_CLIENT_PROGRESS, 0);
        assert_ne!(h.capabilities & caps::MARIADB_CLIENT_CACHE_METADATA, 0);
        assert_eq!(h.auth_plugin, Some(&b"mysql_native_password"[..]));
        assert!(Handshake::parse(b"\x09abc\x00").is_err());
        assert!(Handshake::parse(&GREETING[..20]).is_err());
    }

    fn response(caps: u64, ext: u32, tail: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&(caps as u32).to_le_bytes());
        p.extend_from_slice(&16_777_216u32.to_le_bytes());
        p.push(45);
        p.extend_from_slice(&[0; 19]);
        p.extend_from_slice(&ext.to_le_bytes());
        p.extend_from_slice(tail);
        p
    }

    #[test]
    fn handshake_response_41() {
        let c = caps::CLIENT_PROTOCOL_41
            | caps::CLIENT_SECURE_CONNECTION
            | caps::CLIENT_CONNECT_WITH_DB
            | caps::CLIENT_PLUGIN_AUTH
            | caps::CLIENT_CONNECT_ATTRS
            | caps::CLIENT_DEPRECATE_EOF
            | caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM
            | caps::CLIENT_COMPRESS;
        let p = response(
            c,
            0,
            b"app\x00\x14aaaaaaaaaaaaaaaaaaaa shop\x00mysql_native_password\x00\x03\x01a\x00\x05",
        );
        let r = HandshakeResponse::parse(&p).unwrap();
        assert_eq!(r.user, b"app");
        assert_eq!(r.database, Some(&b" shop"[..]));
        assert_eq!(r.auth_plugin, Some(&b"mysql_native_password"[..]));
        assert_eq!(r.zstd_level, Some(5));
        assert!(!r.ssl_request);
        // MariaDB client: CLIENT_MYSQL clear, extended capabilities in the filler.
        let p = response(
            caps::CLIENT_PROTOCOL_41 | caps::CLIENT_SECURE_CONNECTION,
            0x14,
            b"u\x00\x00",
        );
        let r = HandshakeResponse::parse(&p).unwrap();
        assert_eq!(r.capabilities >> 32, 0x14);
        assert_eq!(r.database, None);
        // Lenenc auth data.
        let p = response(
            caps::CLIENT_PROTOCOL_41
                | caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
                | caps::CLIENT_MYSQL,
            0x14,
            b"u\x00\x02xy",
        );
        let r = HandshakeResponse::parse(&p).unwrap();
        assert_eq!(r.capabilities >> 32, 0);
        assert_eq!(r.user, b"u");
    }

    #[test]
    fn ssl_request() {
        let p = response(caps::CLIENT_PROTOCOL_41 | caps::CLIENT_SSL, 0, b"");
        assert_eq!(p.len(), 32);
        assert!(HandshakeResponse::parse(&p).unwrap().ssl_request);
        assert!(HandshakeResponse::parse(&p[..20]).is_err());
    }

    #[test]
    fn ok_packets() {
        let ok = OkPacket::parse(b"\x00\x03\x00\x02\x00\x01\x00", false).unwrap();
        assert_eq!((ok.affected_rows, ok.status, ok.warnings), (3, 2, 1));
        let ok =
            OkPacket::parse(b"\x00\xfc\xe8\x03\x07\x22\x00\x00\x00Rows matched", false).unwrap();
        assert_eq!((ok.affected_rows, ok.last_insert_id), (1000, 7));
        assert_eq!(ok.info, b"Rows matched");
        // Session tracking: USE shop.
        let ok = OkPacket::parse(
            b"\x00\x00\x00\x02\x40\x00\x00\x00\x07\x01\x05\x04shop",
            true,
        )
        .unwrap();
        assert_eq!(ok.schema, Some(&b"shop"[..]));
        let t = Terminator::parse(b"\xfe\x00\x00\x0a\x00\x00\x00", 7, false).unwrap();
        assert_eq!(t.status(), 0x0a);
        assert!(OkPacket::parse(b"\x00\x01", false).is_err());
        assert!(OkPacket::parse(b"\x01\x00\x00\x00\x00\x00\x00", false).is_err());
    }

    #[test]
    fn err_eof_progress() {
        let e = ErrOrProgress::parse(b"\xff\x7a\x04#42S02Table 'x.y' doesn't exist").unwrap();
        assert_eq!(
            e,
            ErrOrProgress::Err(ErrPacket {
                code: 1146,
                sql_state: Some(b"42S02"),
                message: b"Table 'x.y' doesn't exist"
            })
        );
        let e = ErrOrProgress::parse(b"\xff\x15\x04Host not allowed").unwrap();
        assert!(matches!(
            e,
            ErrOrProgress::Err(ErrPacket {
                code: 1045,
                sql_state: None,
                ..
            })
        ));
        let p = ErrOrProgress::parse(b"\xff\xff\xff\x01\x02\x10\x27\x00\x08copy tbl").unwrap();
        assert_eq!(
            p,
            ErrOrProgress::Progress(ProgressReport {
                stage: 1,
                max_stage: 2,
                progress: 10000,
                info: b"copy tbl"
            })
        );
        assert!(ErrOrProgress::parse(b"\xff\x01").is_err());
        let eof = EofPacket::parse(b"\xfe\x01\x00\x22\x00").unwrap();
        assert_eq!(
            eof,
            EofPacket {
                warnings: 1,
                status: 0x22
            }
        );
        assert!(matches!(
            Terminator::parse(b"\xfe\x00\x00\x22\x00", 5, true),
            Ok(Terminator::Eof(_))
        ));
    }

    #[test]
    fn shapes() {
        assert_eq!(shape(b"\x00", 7), Shape::Ok);
        assert_eq!(shape(b"\xff", 9), Shape::Err);
        assert_eq!(shape(b"\xfe", 5), Shape::Terminator);
        assert_eq!(shape(b"\xfe", 0xFF_FFFF), Shape::Other);
        assert_eq!(shape(b"\xfbfile.csv", 9), Shape::LocalInfile);
        assert_eq!(shape(b"\x02", 1), Shape::Other);
        assert_eq!(shape(b"", 0), Shape::Other);
    }

    #[test]
    fn column_count_and_definition() {
        assert_eq!(
            ColumnCount::parse(b"\x02").unwrap(),
            ColumnCount {
                count: 2,
                metadata_follows: None
            }
        );
        assert_eq!(
            ColumnCount::parse(b"\x02\x00").unwrap(),
            ColumnCount {
                count: 2,
                metadata_follows: Some(false)
            }
        );
        assert!(ColumnCount::parse(b"\x00").is_err());
        assert!(ColumnCount::parse(b"\xfc\x01\x20").is_err());
        assert!(ColumnCount::parse(b"\x02\x05").is_err());
        let def = b"\x03def\x04shop\x01t\x01t\x02id\x02id\x0c\x3f\x00\x0b\x00\x00\x00\x03\x03\x42\x00\x00\x00";
        assert!(ColumnDef::looks_like(def));
        let d = ColumnDef::parse(def).unwrap();
        assert_eq!(
            (d.schema, d.name, d.column_type, d.length),
            (&b"shop"[..], &b"id"[..], 3, 11)
        );
        assert!(ColumnDef::parse(b"\x03abc").is_err());
    }

    #[test]
    fn prepare_ok() {
        let p = PrepareOk::parse(b"\x00\x01\x00\x00\x00\x02\x00\x01\x00\x00\x00\x00").unwrap();
        assert_eq!(
            (p.stmt_id, p.num_columns, p.num_params, p.metadata_follows),
            (1, 2, 1, None)
        );
        let p = PrepareOk::parse(b"\x00\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00").unwrap();
        assert_eq!(p.metadata_follows, Some(false));
        assert!(PrepareOk::parse(b"\x00\x01").is_err());
    }

    #[test]
    fn rows() {
        let r = parse_text_row(b"\x011\xfb\x03abc", 3).unwrap();
        assert_eq!(r, vec![Some(&b"1"[..]), None, Some(&b"abc"[..])]);
        assert!(parse_text_row(b"\x05ab", 1).is_err());
        // Binary: LONGLONG 7, NULL varchar, TINY 1.
        let row = b"\x00\x08\x07\x00\x00\x00\x00\x00\x00\x00\x01";
        let r = parse_binary_row(row, &[0x08, 0x0F, 0x01]).unwrap();
        assert_eq!(r[0], Some(&row[2..10]));
        assert_eq!(r[1], None);
        assert_eq!(r[2], Some(&b"\x01"[..]));
    }

    #[test]
    fn requests_every_command() {
        fn q(b: &[u8]) -> Request<'_> {
            Request::parse(b, None).unwrap()
        }
        assert_eq!(q(b"\x03SELECT 1"), Request::Query { sql: b"SELECT 1" });
        assert_eq!(q(b"\x16SELECT ?"), Request::Prepare { sql: b"SELECT ?" });
        assert_eq!(
            q(b"\x17\x05\x00\x00\x00\x01\x01\x00\x00\x00"),
            Request::Execute {
                stmt_id: 5,
                flags: CURSOR_TYPE_READ_ONLY
            }
        );
        assert_eq!(
            q(b"\xfa\x05\x00\x00\x00\x80\x00"),
            Request::BulkExecute {
                stmt_id: 5,
                flags: 0x80
            }
        );
        assert_eq!(
            q(b"\x1c\x05\x00\x00\x00\x0a\x00\x00\x00"),
            Request::Fetch {
                stmt_id: 5,
                rows: 10
            }
        );
        assert_eq!(q(b"\x19\x05\x00\x00\x00"), Request::Close { stmt_id: 5 });
        assert_eq!(q(b"\x1a\x05\x00\x00\x00"), Request::Reset { stmt_id: 5 });
        assert_eq!(
            q(b"\x18\x05\x00\x00\x00\x01\x00data"),
            Request::SendLongData {
                stmt_id: 5,
                param: 1
            }
        );
        assert_eq!(q(b"\x02shop"), Request::InitDb { schema: b"shop" });
        assert_eq!(q(b"\x04t\x00%"), Request::FieldList { table: b"t" });
        assert_eq!(
            q(b"\x11bob\x00\x02xyshop\x00\x21\x00"),
            Request::ChangeUser {
                user: b"bob",
                schema: Some(b"shop")
            }
        );
        assert_eq!(q(b"\x0c\x09\x00\x00\x00"), Request::ProcessKill { id: 9 });
        assert_eq!(q(b"\x1b\x01\x00"), Request::SetOption { option: 1 });
        for (b, name) in [
            (0x01, "quit"),
            (0x0e, "ping"),
            (0x09, "statistics"),
            (0x1f, "reset_connection"),
            (0x12, "binlog_dump"),
            (0x99, "unknown"),
        ] {
            let one = [b];
            let r = q(&one);
            assert_eq!(r, Request::Other(Command(b)));
            assert_eq!(r.command().name(), name);
        }
        assert!(Request::parse(b"", None).is_err());
        assert!(Request::parse(b"\x17\x01", None).is_err());
        // Query attributes (MySQL 8): no attributes, then one VARCHAR attribute.
        let qa = Some(caps::CLIENT_QUERY_ATTRIBUTES);
        assert_eq!(
            Request::parse(b"\x03\x00\x01SELECT 1", qa).unwrap(),
            Request::Query { sql: b"SELECT 1" }
        );
        assert_eq!(
            Request::parse(b"\x03\x01\x01\x00\x01\x0f\x00\x01a\x02xySELECT 2", qa).unwrap(),
            Request::Query { sql: b"SELECT 2" }
        );
    }

    #[test]
    fn command_table() {
        assert_eq!(Command(cmd::STMT_CLOSE).reply(), Reply::None);
        assert_eq!(Command(cmd::QUERY).reply(), Reply::Results);
        assert_eq!(Command(cmd::STMT_PREPARE).reply(), Reply::Prepare);
        assert_eq!(Command(0x99).reply(), Reply::Results);
        assert!(Command(cmd::PING).plausible_len(1));
        assert!(!Command(cmd::PING).plausible_len(2));
        assert!(!Command(cmd::SLEEP).plausible_len(1));
        assert!(!Command(0x99).plausible_len(1));
    }
}
