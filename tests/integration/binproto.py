"""A minimal binary-protocol (server-side prepared statement) client on top of pymysql's packet
layer, so the tests can send COM_STMT_PREPARE / EXECUTE / SEND_LONG_DATA / RESET / FETCH / CLOSE
themselves and count exactly what they sent. Neither pymysql nor mysqlclient (MySQLdb) prepares
statements on the server, and only those two client libraries are allowed here.

pymysql does not ask for CLIENT_DEPRECATE_EOF, so result sets end with EOF packets.
"""

from __future__ import annotations

import struct

import pymysql

COM_STMT_PREPARE = 0x16
COM_STMT_EXECUTE = 0x17
COM_STMT_SEND_LONG_DATA = 0x18
COM_STMT_CLOSE = 0x19
COM_STMT_RESET = 0x1A
COM_STMT_FETCH = 0x1C

T_LONGLONG = 0x08
T_VAR_STRING = 0xFD
T_BLOB = 0xFC
T_NULL = 0x06

CURSOR_TYPE_NO_CURSOR = 0x00
CURSOR_TYPE_READ_ONLY = 0x01

SERVER_STATUS_CURSOR_EXISTS = 0x0040
SERVER_STATUS_LAST_ROW_SENT = 0x0080


def _lenenc_bytes(b: bytes) -> bytes:
    n = len(b)
    if n < 251:
        head = struct.pack("<B", n)
    elif n < 1 << 16:
        head = b"\xfc" + struct.pack("<H", n)
    elif n < 1 << 24:
        head = b"\xfd" + struct.pack("<I", n)[:3]
    else:
        head = b"\xfe" + struct.pack("<Q", n)
    return head + b


class Stmt:
    def __init__(self, stmt_id: int, ncols: int, nparams: int):
        self.id = stmt_id
        self.ncols = ncols
        self.nparams = nparams
        self.long_data: set[int] = set()


class BinaryClient:
    """Counts what it sent in `sent` (command name -> number of packets sent)."""

    def __init__(self, conn: pymysql.connections.Connection):
        self.conn = conn
        self.sent: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.sent[name] = self.sent.get(name, 0) + 1

    def _read(self):
        return self.conn._read_packet()

    def _skip_until_eof(self) -> None:
        while not self._read().is_eof_packet():
            pass

    def prepare(self, sql: str) -> Stmt:
        self._count("prepare")
        self.conn._execute_command(COM_STMT_PREPARE, sql)
        p = self._read()  # raises pymysql.err.* on an ERR packet
        data = p.get_all_data()
        if data[0] != 0:
            raise RuntimeError(f"unexpected COM_STMT_PREPARE response {data[:16]!r}")
        stmt_id, ncols, nparams = struct.unpack_from("<IHH", data, 1)
        if nparams:
            for _ in range(nparams):
                self._read()
            self._read()  # EOF
        if ncols:
            for _ in range(ncols):
                self._read()
            self._read()  # EOF
        return Stmt(stmt_id, ncols, nparams)

    def send_long_data(self, st: Stmt, param: int, data: bytes) -> None:
        """No response from the server."""
        self._count("send_long_data")
        self.conn._execute_command(COM_STMT_SEND_LONG_DATA,
                                   struct.pack("<IH", st.id, param) + data)
        st.long_data.add(param)

    def execute(self, st: Stmt, params: list | tuple = (), cursor: bool = False) -> dict:
        """Returns {'rows': n, 'affected': n, 'cursor': bool}. Raises on an ERR packet."""
        self._count("execute")
        if len(params) != st.nparams:
            raise ValueError(f"statement has {st.nparams} parameters, got {len(params)}")
        body = struct.pack("<IBI", st.id, CURSOR_TYPE_READ_ONLY if cursor else CURSOR_TYPE_NO_CURSOR, 1)
        if st.nparams:
            nullmap = bytearray((st.nparams + 7) // 8)
            types = b""
            values = b""
            for i, v in enumerate(params):
                if i in st.long_data:
                    types += struct.pack("<BB", T_BLOB, 0)
                elif v is None:
                    nullmap[i // 8] |= 1 << (i % 8)
                    types += struct.pack("<BB", T_NULL, 0)
                elif isinstance(v, int):
                    types += struct.pack("<BB", T_LONGLONG, 0)
                    values += struct.pack("<q", v)
                else:
                    b = v if isinstance(v, bytes) else str(v).encode()
                    types += struct.pack("<BB", T_VAR_STRING, 0)
                    values += _lenenc_bytes(b)
            body += bytes(nullmap) + b"\x01" + types + values
        self.conn._execute_command(COM_STMT_EXECUTE, body)
        st.long_data.clear()
        first = self._read()
        if first.is_ok_packet():
            data = first.get_all_data()
            p = pymysql.protocol.MysqlPacket(data, "utf8")
            p.advance(1)
            affected = p.read_length_encoded_integer()
            return {"rows": 0, "affected": affected, "cursor": False}
        ncols = first.read_length_encoded_integer()
        for _ in range(ncols):
            self._read()
        eof = self._read()
        assert eof.is_eof_packet(), "expected EOF after column definitions"
        _, _, status = struct.unpack_from("<BHH", eof.get_all_data(), 0)
        if status & SERVER_STATUS_CURSOR_EXISTS:
            return {"rows": 0, "affected": 0, "cursor": True}
        rows = 0
        while True:
            p = self._read()
            if p.is_eof_packet():
                break
            rows += 1
        return {"rows": rows, "affected": 0, "cursor": False}

    def fetch(self, st: Stmt, n: int) -> tuple[int, bool]:
        """Returns (rows received, last row sent)."""
        self._count("fetch")
        self.conn._execute_command(COM_STMT_FETCH, struct.pack("<II", st.id, n))
        rows = 0
        while True:
            p = self._read()
            if p.is_eof_packet():
                _, _, status = struct.unpack_from("<BHH", p.get_all_data(), 0)
                return rows, bool(status & SERVER_STATUS_LAST_ROW_SENT)
            rows += 1

    def reset(self, st: Stmt) -> None:
        self._count("reset")
        self.conn._execute_command(COM_STMT_RESET, struct.pack("<I", st.id))
        p = self._read()
        if not p.is_ok_packet():
            raise RuntimeError("COM_STMT_RESET: expected OK")

    def close(self, st: Stmt) -> None:
        """No response from the server."""
        self._count("close")
        self.conn._execute_command(COM_STMT_CLOSE, struct.pack("<I", st.id))
