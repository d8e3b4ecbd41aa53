//! Server-to-client messages: the greeting, OK/ERR/EOF and progress packets, how a packet
//! presents itself, result-set column counts and definitions, the prepare OK, and rows.

use super::super::wire::{Cursor, LenencRead, MAX_PACKET_PAYLOAD, WireError};
use super::{Res, caps, skip_binary_value, status};

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
        let server_version = c.cstr("server version")?;
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
                auth_plugin = Some(c.cstr_or_rest().0);
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
        Some(0xFE) if len < u64::from(MAX_PACKET_PAYLOAD) => Shape::Terminator,
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
