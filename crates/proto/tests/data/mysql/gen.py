#!/usr/bin/env python3
"""Workloads that produced the real MySQL transcripts in this directory.

Run against a private MariaDB on 127.0.0.1:PORT (user app/secret, database shop, table items
seeded with 5 rows) while `tcpdump -i lo -w cap.pcap port PORT` records, then
`pcap2transcripts.py cap.pcap PORT . expect.json`.

Each workload records what its client saw (rows, affected rows, error codes) as the truth the
Rust tests compare the session's events with. Clients: PyMySQL (text protocol), mysqlclient
(MySQLdb, libmariadb, compress=True), and a small raw-protocol client for the binary
(prepared statement) protocol, which neither Python library speaks.
"""
import hashlib
import json
import socket
import struct
import sys
import time

import MySQLdb
import pymysql

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 23306
HOST, USER, PW, DB = "127.0.0.1", "app", "secret", "shop"
EXPECT = {}


def rec(lst, command, sql="", rows=0, affected=0, err=0):
    lst.append(f"{command} rows={rows} affected={affected} err={err} sql={sql}")


def pymysql_text():
    conn = pymysql.connect(host=HOST, port=PORT, user=USER, password=PW, database=DB,
                           client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS,
                           local_infile=True, autocommit=True)
    ex = []
    cur = conn.cursor()

    def q(sql):
        # One expectation per statement the server ran (dbtap's events): each result set is
        # one statement's (no CALL here), and an error is the statement it reached. The
        # statements are split on "; " (none of the texts below holds one in a literal).
        stmts = sql.split("; ")
        i = 0
        try:
            cur.execute(sql)
            while True:
                rows = len(cur.fetchall()) if cur.description else 0
                aff = 0 if cur.description else cur.rowcount
                rec(ex, "query", stmts[i] if len(stmts) > 1 else sql, rows, aff)
                i += 1
                if not cur.nextset():
                    break
        except pymysql.MySQLError as e:
            rec(ex, "query", stmts[i] if len(stmts) > 1 else sql, err=e.args[0])

    q("SELECT id, name FROM items ORDER BY id")
    q("SELECT COUNT(*) FROM items")
    q("UPDATE items SET price = price + 1 WHERE id <= 2")
    q("SELECT * FROM nope")
    q("SELECT 1; SELECT id FROM items; UPDATE items SET price = price - 1 WHERE id <= 2")
    conn.select_db("mysql")
    rec(ex, "init_db")
    q("SELECT DATABASE()")
    q("USE shop")
    conn.ping(reconnect=False)
    rec(ex, "ping")
    with open("/tmp/h4-mysql/items.csv", "w") as f:
        f.write("melon,5.5\nlime,0.4\ndate,2.2\n")
    q("LOAD DATA LOCAL INFILE '/tmp/h4-mysql/items.csv' INTO TABLE items "
      "FIELDS TERMINATED BY ',' (name, price)")
    q("DELETE FROM items WHERE id > 5")
    q("SELECT seq FROM seq_1_to_2000")
    q("SELEC 1")
    EXPECT[conn.thread_id()] = {"name": "pymysql_text", "expect": ex}
    conn.close()
    rec(ex, "quit")


def mysqldb_compressed():
    conn = MySQLdb.connect(host=HOST, port=PORT, user=USER, passwd=PW, db=DB, compress=True,
                           autocommit=True)
    ex = []
    cur = conn.cursor()

    def q(sql):
        try:
            n = cur.execute(sql)
            if cur.description:
                rec(ex, "query", sql, rows=len(cur.fetchall()))
            else:
                rec(ex, "query", sql, affected=n)
        except MySQLdb.MySQLError as e:
            rec(ex, "query", sql, err=e.args[0])

    q("SELECT seq, CONCAT('row-', seq) FROM seq_1_to_3000")
    q("SELECT * FROM items ORDER BY id")
    q("INSERT INTO items (name, price) VALUES ('grape', 9.99)")
    q("DELETE FROM items WHERE name = 'grape'")
    q("SELECT * FROM items WHERE")
    conn.ping()
    rec(ex, "ping")
    q("SELECT REPEAT('abcdefgh', 10000)")
    EXPECT[conn.thread_id()] = {"name": "mysqldb_compressed", "expect": ex}
    conn.close()
    rec(ex, "quit")


# ---- a raw client for the binary protocol ----------------------------------------------

CLIENT_LONG_FLAG, CLIENT_CONNECT_WITH_DB, CLIENT_PROTOCOL_41 = 4, 8, 512
CLIENT_TRANSACTIONS, CLIENT_SECURE_CONNECTION = 8192, 32768
CLIENT_MULTI_RESULTS, CLIENT_PS_MULTI_RESULTS, CLIENT_PLUGIN_AUTH = 1 << 17, 1 << 18, 1 << 19
CLIENT_DEPRECATE_EOF = 1 << 24
MARIADB_PROGRESS, MARIADB_BULK, MARIADB_CACHE_METADATA = 1, 4, 16


def native(pw, scramble):
    h1 = hashlib.sha1(pw.encode()).digest()
    h2 = hashlib.sha1(h1).digest()
    h3 = hashlib.sha1(scramble + h2).digest()
    return bytes(a ^ b for a, b in zip(h1, h3))


class Raw:
    def __init__(self, deprecate_eof, ext):
        self.s = socket.create_connection((HOST, PORT))
        self.deprecate = deprecate_eof
        _, g = self.read()
        nul = g.index(0, 1)
        p = nul + 1
        self.thread_id = struct.unpack("<I", g[p:p + 4])[0]
        s1 = g[p + 4:p + 12]
        s2 = g[p + 31:p + 31 + 12]
        caps = (CLIENT_LONG_FLAG | CLIENT_CONNECT_WITH_DB | CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS
                | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_RESULTS | CLIENT_PS_MULTI_RESULTS
                | CLIENT_PLUGIN_AUTH)
        if deprecate_eof:
            caps |= CLIENT_DEPRECATE_EOF
        auth = native(PW, s1 + s2)
        body = (struct.pack("<IIB", caps, 1 << 24, 45) + b"\0" * 19 + struct.pack("<I", ext)
                + USER.encode() + b"\0" + bytes([len(auth)]) + auth + DB.encode() + b"\0"
                + b"mysql_native_password\0")
        self.write(body, 1)
        _, r = self.read()
        assert r[0] == 0, r

    def write(self, payload, seq=0):
        self.s.sendall(struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload)

    def read(self):
        h = self.recv(4)
        n = h[0] | h[1] << 8 | h[2] << 16
        return h[3], self.recv(n)

    def recv(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            assert c
            b += c
        return b

    def is_term(self, p):
        return p[0] == 0xFE and len(p) < 0xFFFFFF

    def rows_until_end(self):
        rows = 0
        while True:
            _, p = self.read()
            if p[0] == 0xFF:
                return rows, struct.unpack("<H", p[1:3])[0], 0
            if self.is_term(p):
                st = struct.unpack("<H", p[3:5])[0] if len(p) < 7 else struct.unpack("<H", p[3:5])[0]
                return rows, 0, st
            rows += 1

    def result(self):
        """Reads one response to a query/execute: (rows, affected, err)."""
        _, p = self.read()
        if p[0] == 0xFF:
            return 0, 0, struct.unpack("<H", p[1:3])[0]
        if p[0] == 0x00:
            return 0, p[1], 0
        ncols, meta = p[0], (p[1] if len(p) > 1 else 1)
        if meta:
            for _ in range(ncols):
                self.read()
        if not self.deprecate:
            _, e = self.read()
            if struct.unpack("<H", e[3:5])[0] & 0x40:  # cursor opened
                return 0, 0, 0
        rows, err, st = self.rows_until_end()
        return rows, 0, err

    def prepare(self, sql):
        self.write(b"\x16" + sql.encode())
        _, p = self.read()
        if p[0] == 0xFF:
            return None, struct.unpack("<H", p[1:3])[0]
        sid, cols, params = struct.unpack("<IHH", p[1:9])
        for n in (params, cols):
            if n:
                for _ in range(n):
                    self.read()
                if not self.deprecate:
                    self.read()
        return sid, 0

    def execute(self, sid, params=b"", flags=0):
        self.write(b"\x17" + struct.pack("<IBI", sid, flags, 1) + params)
        if flags and self.deprecate:
            # metadata then an OK with SERVER_STATUS_CURSOR_EXISTS
            _, p = self.read()
            for _ in range(p[0]):
                self.read()
            self.read()
            return 0, 0, 0
        return self.result()


def raw_prepared(deprecate_eof, ext, name):
    c = Raw(deprecate_eof, ext)
    ex = []
    sel = "SELECT id, name, price FROM items WHERE id > ?"
    s1, _ = c.prepare(sel)
    rec(ex, "prepare", sel)
    one_int = lambda v: b"\x00\x01\x08\x00" + struct.pack("<q", v)
    for v in (1, 3):
        r = c.execute(s1, one_int(v))
        rec(ex, "execute", sel, r[0], r[1], r[2])
    ins = "INSERT INTO items (name, price) VALUES (?, ?)"
    s2, _ = c.prepare(ins)
    rec(ex, "prepare", ins)
    c.write(b"\x18" + struct.pack("<IH", s2, 0) + b"melon")
    rec(ex, "send_long_data", ins)
    params = b"\x00\x01" + b"\xfe\x00\x05\x00" + struct.pack("<d", 5.5)
    r = c.execute(s2, params)
    rec(ex, "execute", ins, r[0], r[1], r[2])
    c.write(b"\x1a" + struct.pack("<I", s2))
    c.read()
    rec(ex, "reset", ins)
    if ext & MARIADB_BULK:
        body = b"\xfa" + struct.pack("<IH", s2, 128) + b"\xfe\x00\x05\x00"
        for nm, pr in ((b"kiwi2", 1.0), (b"lime2", 2.0), (b"fig2", 3.0)):
            body += b"\x00" + bytes([len(nm)]) + nm + b"\x00" + struct.pack("<d", pr)
        c.write(body)
        _, p = c.read()
        rec(ex, "bulk_execute", ins, 0, p[1] if p[0] == 0 else 0, 0 if p[0] == 0 else struct.unpack("<H", p[1:3])[0])
    # A cursor: rows come through COM_STMT_FETCH.
    r = c.execute(s1, one_int(0), flags=1)
    rec(ex, "execute", sel)
    total = 0
    for n in (2, 100):
        c.write(b"\x1c" + struct.pack("<II", s1, n))
        rows, err, st = c.rows_until_end()
        total += rows
        rec(ex, "fetch", sel, rows)
    bad = "SELECT * FROM nope"
    sid, err = c.prepare(bad)
    rec(ex, "prepare", bad, err=err)
    c.write(b"\x19" + struct.pack("<I", s1))
    rec(ex, "close", sel)
    c.write(b"\x19" + struct.pack("<I", s2))
    rec(ex, "close", ins)
    r = c.execute(s1, one_int(1))
    rec(ex, "execute", "", r[0], r[1], r[2])
    c.write(b"\x03DELETE FROM items WHERE id > 5")
    r = c.result()
    rec(ex, "query", "DELETE FROM items WHERE id > 5", r[0], r[1], r[2])
    c.write(b"\x01")
    rec(ex, "quit")
    time.sleep(0.1)
    EXPECT[c.thread_id] = {"name": name, "expect": ex}


if __name__ == "__main__":
    pymysql_text()
    mysqldb_compressed()
    raw_prepared(True, MARIADB_PROGRESS | MARIADB_BULK | MARIADB_CACHE_METADATA, "raw_prepared_mariadb")
    raw_prepared(False, 0, "raw_prepared_eof")
    with open("expect.json", "w") as f:
        json.dump(EXPECT, f, indent=1)
    print(json.dumps(EXPECT, indent=1))
