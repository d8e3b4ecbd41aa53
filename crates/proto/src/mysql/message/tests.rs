//! Byte-literal tests of the MySQL message parsers.

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
        caps::CLIENT_PROTOCOL_41 | caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | caps::CLIENT_MYSQL,
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
    let ok = OkPacket::parse(b"\x00\xfc\xe8\x03\x07\x22\x00\x00\x00Rows matched", false).unwrap();
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
