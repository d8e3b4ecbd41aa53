//! Typed MySQL/MariaDB messages borrowing the packet bytes: the handshake, commands, and the
//! server's OK/ERR/EOF, result-set and prepare responses. Pure parsing, no conversation state.
//!
//! Split by direction: [`request`] holds what clients send (commands and the handshake
//! response), [`response`] what servers send (greeting, OK/ERR/EOF, result sets, prepare OK,
//! rows); both are re-exported here, with the flag constants they share.

use super::wire::WireError;

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
    pub const NO_GOOD_INDEX_USED: u16 = 0x0010;
    pub const NO_INDEX_USED: u16 = 0x0020;
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

mod request;
mod response;

pub use request::*;
pub use response::*;

#[cfg(test)]
mod tests;
