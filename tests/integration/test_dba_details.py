"""DBA details (issue 11): MySQL/MariaDB no-index flags against the server's own counters, and
EXPLAIN-ready examples of prepared statements (bound values substituted) run on the servers.

Private servers of this file's own, on their own ports, files under tests/out/dba/:
MariaDB 10.11 on 127.0.0.1:38140, PostgreSQL 15 on 127.0.0.1:38141.

# The no-index flags and MariaDB's counters (measured on 10.11, see the tests below)

The status word of the OK/EOF that ends a statement's result carries SERVER_QUERY_NO_INDEX_USED
(0x20) when any table of any SELECT of the statement was read by a full scan (join type ALL, or
a full index scan), and SERVER_QUERY_NO_GOOD_INDEX_USED (0x10) when a table was read with "range
checked for each record". The counters count per table access, not per statement:
`Select_scan` +1 for a full scan of the first table of a SELECT (each SELECT of a UNION, each
subquery, the UNION's temporary result too), `Select_full_join` +1 for a full scan of a later
table of a join, `Select_range_check` +1 per range-checked table. So:

* for statements that scan exactly one table in full, the flagged executions equal
  Δ(Select_scan + Select_full_join) exactly (test_no_index_flags_equal_the_scan_counters);
* a statement that scans two tables is flagged once but counts 2 (one of each); a UNION of two
  scans counts 3; a single-table UPDATE or DELETE without a usable index is flagged but counts
  nothing (the counters are the SELECT optimizer's); range-checked joins flag no-good-index-used
  once per statement, equal to ΔSelect_range_check when one table per statement is range-checked
  (test_no_index_flags_where_the_counters_differ shows each case with its numbers).

Run: `cargo build --release -p dbtap && /usr/bin/python3 -m pytest -q
tests/integration/test_dba_details.py` (or set DBTAP_BIN; the harness's binary, the same for
every test file: a module must not change it for the others). Truth: SHOW GLOBAL STATUS over the UNIX
socket (not captured), the servers themselves (EXPLAIN, SELECT <literal>) and the clients' own
values.
"""

from __future__ import annotations

import datetime
import decimal
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import binproto  # noqa: E402
import harness  # noqa: E402
import pg_harness as ph  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "dba"
MARIA_PORT = 38140
PG_PORT = 38141
ROWS = 1000


# -------------------------------------------------------------------------------------------------
# MariaDB

@pytest.fixture(scope="module")
def maria():
    srv = harness.Server(MARIA_PORT, OUT / "mariadb", tls=False)
    srv.start()
    try:
        with srv.root(database="dbtap_test") as r, r.cursor() as c:
            # `a.v` is indexed, `w` nowhere: a lookup on `w` scans.
            c.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT, w INT, KEY(v))")
            c.execute("CREATE TABLE b (id INT PRIMARY KEY, v INT, w INT)")
            c.execute(f"INSERT INTO a SELECT seq, seq % 10, seq FROM seq_1_to_{ROWS}")
            c.execute(f"INSERT INTO b SELECT seq, seq % 10, seq FROM seq_1_to_{ROWS}")
        yield srv
    finally:
        srv.stop()


def select_counters(root) -> dict[str, int]:
    with root.cursor() as c:
        c.execute("SHOW GLOBAL STATUS LIKE 'Select\\_%'")
        return {k: int(v) for k, v in c.fetchall()}


class Counters:
    """Select_* deltas over a phase, less what the SHOW statements themselves count (measured
    by two snapshots in a row before the phase)."""

    def __init__(self, root):
        self.root = root

    def __enter__(self):
        b1 = select_counters(self.root)
        self.before = select_counters(self.root)
        self.show = {k: self.before[k] - b1[k] for k in b1}
        return self

    def __exit__(self, *exc):
        after = select_counters(self.root)
        self.delta = {k: after[k] - self.before[k] - self.show[k] for k in after}


def run(conn, sql: str) -> None:
    with conn.cursor() as c:
        c.execute(sql)
        c.fetchall()


def digest_groups(pcap: Path, *extra: str) -> list[dict]:
    return harness.digest(pcap, extra=extra)["queries"]


def by_fingerprint(groups: list[dict]) -> dict[str, dict]:
    return {g["fingerprint"]: g for g in groups}


def test_no_index_flags_equal_the_scan_counters(maria):
    """Full scans, index lookups and range + full joins: the flagged executions of each group
    equal the server's Select_scan / Select_full_join deltas, and in total their sum."""
    scans, lookups, joins = 7, 5, 4
    pcap = OUT / "index-exact.pcap"
    with maria.root(database="dbtap_test") as root:
        cap = harness.Tcpdump(pcap, MARIA_PORT).start()
        conn = maria.connect()
        with Counters(root) as k:
            for i in range(scans):
                run(conn, f"SELECT * FROM a WHERE w = {i + 3}")
            for i in range(lookups):
                run(conn, f"SELECT * FROM a WHERE id = {i + 1}")
            for i in range(joins):
                run(conn, f"SELECT * FROM a STRAIGHT_JOIN b ON a.w = b.w WHERE a.id BETWEEN {i + 1} AND {i + 3}")
        conn.close()
        cap.sync()
        assert cap.stop().get("dropped") == 0
    d = k.delta
    assert (d["Select_scan"], d["Select_full_join"]) == (scans, joins), d
    g = by_fingerprint(digest_groups(pcap))
    scan = g["select * from a where w = ?"]
    lookup = g["select * from a where id = ?"]
    join = g["select * from a straight_join b on a.w = b.w where a.id between ? and ?"]
    assert (scan["count"], lookup["count"], join["count"]) == (scans, lookups, joins)
    assert scan.get("no_index_used", 0) == d["Select_scan"]
    assert join.get("no_index_used", 0) == d["Select_full_join"]
    assert "no_index_used" not in lookup and "no_good_index_used" not in lookup
    flagged = sum(x.get("no_index_used", 0) for x in g.values())
    assert flagged == d["Select_scan"] + d["Select_full_join"]
    assert sum(x.get("no_good_index_used", 0) for x in g.values()) == d["Select_range_check"] == 0
    # The text report says it per group.
    text = harness.dbtap("digest", pcap).stdout.decode()
    assert f"# Index use: no index used 100% ({scans} of {scans})" in text
    assert f"# Index use: no index used 100% ({joins} of {joins})" in text


def test_no_index_flags_where_the_counters_differ(maria):
    """Where a statement is not one table scan, flags (per statement) and counters (per table
    access) part, each in the way the module docs state."""
    pcap = OUT / "index-differ.pcap"
    cases = {
        # fingerprint: (sql, times)
        "select * from a join b on a.w = b.w where a.w < ?":
            ("SELECT * FROM a JOIN b ON a.w = b.w WHERE a.w < {i}", 3),
        "update b set v = v where w = ?": ("UPDATE b SET v = v WHERE w = {i}", 2),
        "select * from a where w=? union select * from b where w=?":
            ("SELECT * FROM a WHERE w={i} UNION SELECT * FROM b WHERE w={i}", 2),
        "select * from a straight_join b on b.id > a.w and b.id < a.w + ? where a.id < ?":
            ("SELECT * FROM a STRAIGHT_JOIN b ON b.id > a.w AND b.id < a.w + 3 WHERE a.id < {i}", 2),
    }
    deltas = {}
    with maria.root(database="dbtap_test") as root:
        cap = harness.Tcpdump(pcap, MARIA_PORT).start()
        conn = maria.connect()
        for fp, (sql, times) in cases.items():
            with Counters(root) as k:
                for i in range(times):
                    run(conn, sql.format(i=i + 4))
            deltas[fp] = k.delta
        conn.close()
        cap.sync()
        assert cap.stop().get("dropped") == 0
    g = by_fingerprint(digest_groups(pcap))
    flags = {fp: (g[fp].get("no_index_used", 0), g[fp].get("no_good_index_used", 0)) for fp in cases}
    counts = {fp: (d["Select_scan"], d["Select_full_join"], d["Select_range_check"])
              for fp, d in deltas.items()}
    print("flags (no index, no good index):", flags)
    print("counters (scan, full join, range check):", counts)
    join, upd, union, check = cases
    # A join of two scanned tables: flagged once per statement, one Select_scan and one
    # Select_full_join per statement.
    assert flags[join] == (3, 0) and counts[join] == (3, 3, 0)
    # A single-table UPDATE without a usable index: flagged, no SELECT counter moves.
    assert flags[upd] == (2, 0) and counts[upd] == (0, 0, 0)
    # A UNION of two scans: flagged once, three scans counted (two tables, the union result).
    assert flags[union] == (2, 0) and counts[union] == (6, 0, 0)
    # Range checked for each record: no good index used, equal to Select_range_check.
    assert flags[check] == (0, 2) and counts[check][2] == 2


# -------------------------------------------------------------------------------------------------
# MySQL binary protocol: bound values

EXPLAINABLE = re.compile(r"^\s*(select|insert|update|delete|replace|with)\b", re.I)


def explain_mysql(root, sql: str) -> None:
    with root.cursor() as c:
        c.execute("EXPLAIN " + sql)  # pymysql formats nothing without args
        c.fetchall()


def test_sysbench_examples_explain_on_mariadb(maria):
    """sysbench oltp_read_write with server-side prepared statements: every execute group with
    placeholders has an example with its values, and EXPLAIN of each runs on the server."""
    harness.sysbench_prepare(MARIA_PORT, 2000)
    pcap = OUT / "sysbench.pcap"
    cap = harness.Tcpdump(pcap, MARIA_PORT).start()
    harness.sysbench_run(MARIA_PORT, 2, 0, 2000, events=300)
    cap.sync()
    assert cap.stop().get("dropped") == 0
    groups = [g for g in digest_groups(pcap) if g["command"] == "execute"]
    with_params = [g for g in groups if "?" in (g["example"] or {}).get("text", "")]
    assert len(with_params) >= 8, [g["fingerprint"] for g in groups]
    with maria.root(database="sbtest") as root:
        for g in with_params:
            sql = g["example"].get("with_values")
            assert sql, g["example"]
            assert "?" not in sql and "dbtap:" not in sql, sql
            if EXPLAINABLE.match(sql):
                explain_mysql(root, sql)
    # Values are raw text: --no-examples leaves them out with the rest.
    assert all(g["example"] is None for g in harness.digest(pcap, extra=("--no-examples",))["queries"])


def _lenenc(b: bytes) -> bytes:
    return binproto._lenenc_bytes(b)


# (alias, MySQL type byte, unsigned, wire bytes or None for NULL, the value SELECT returns)
TYPED = [
    ("tiny_neg", 0x01, False, struct.pack("<b", -7), -7),
    ("short_uns", 0x02, True, struct.pack("<H", 65535), 65535),
    ("long_neg", 0x03, False, struct.pack("<i", -2_000_000_000), -2_000_000_000),
    ("big_uns", 0x08, True, struct.pack("<Q", 2**64 - 1), 2**64 - 1),
    ("dbl", 0x05, False, struct.pack("<d", -1.25e-7), -1.25e-7),
    ("flt", 0x04, False, struct.pack("<f", 0.5), 0.5),
    ("dec", 0xF6, False, _lenenc(b"-123.4500"), decimal.Decimal("-123.4500")),
    ("quote", 0xFD, False, _lenenc("it's \"ü\"".encode()), "it's \"ü\""),
    ("backslash", 0xFE, False, _lenenc(b"a\\b\n"), "a\\b\n"),
    ("blob", 0xFC, False, _lenenc(b"\x00\xff'\\"), b"\x00\xff'\\"),
    ("nul", 0x06, False, None, None),
    ("day", 0x0A, False, bytes([4]) + struct.pack("<HBB", 2024, 2, 29), datetime.date(2024, 2, 29)),
    ("stamp", 0x0C, False, bytes([11]) + struct.pack("<HBBBBBI", 2001, 12, 31, 23, 59, 58, 123456),
     datetime.datetime(2001, 12, 31, 23, 59, 58, 123456)),
    ("dur", 0x0B, False, bytes([12]) + struct.pack("<BIBBBI", 1, 1, 2, 3, 4, 5),
     -datetime.timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=5)),
]


def execute_typed(bp: binproto.BinaryClient, st: binproto.Stmt, params: list, send_types: bool) -> None:
    """COM_STMT_EXECUTE with (type, unsigned, bytes|None) parameters; types sent only when
    `send_types` (new-params-bound = 1), as connectors do on the first execution."""
    body = struct.pack("<IBI", st.id, 0, 1)
    nullmap = bytearray((len(params) + 7) // 8)
    types, values = b"", b""
    for i, (t, uns, v) in enumerate(params):
        types += struct.pack("<BB", t, 0x80 if uns else 0)
        if v is None:
            nullmap[i // 8] |= 1 << (i % 8)
        else:
            values += v
    body += bytes(nullmap) + (b"\x01" + types if send_types else b"\x00") + values
    bp.conn._execute_command(binproto.COM_STMT_EXECUTE, body)
    first = bp._read()
    if first.is_ok_packet():
        return
    for _ in range(first.read_length_encoded_integer()):
        bp._read()
    bp._read()  # EOF after the column definitions (pymysql: no DEPRECATE_EOF)
    bp._skip_until_eof()


def test_mysql_binary_values_round_trip(maria):
    """Every binary type: `SELECT <literal>` of the substituted example returns the value the
    client bound. Each statement runs twice, the second time without types (the remembered
    types decode it) and slower (SLEEP), so the example is the second execution."""
    pcap = OUT / "binary-types.pcap"
    cap = harness.Tcpdump(pcap, MARIA_PORT).start()
    conn = maria.connect()
    bp = binproto.BinaryClient(conn)
    sleep_t = (0x05, False)
    for alias, t, uns, wire, _ in TYPED:
        st = bp.prepare(f"SELECT ? AS v_{alias}, SLEEP(?) AS pause_{alias}")
        execute_typed(bp, st, [(t, uns, wire), (*sleep_t, struct.pack("<d", 0.0))], True)
        execute_typed(bp, st, [(t, uns, wire), (*sleep_t, struct.pack("<d", 0.02))], False)
        bp.close(st)
    conn.close()
    cap.sync()
    assert cap.stop().get("dropped") == 0
    groups = [g for g in digest_groups(pcap) if g["command"] == "execute"]
    assert len(groups) == len(TYPED)
    with maria.root() as root:
        for alias, _, _, _, want in TYPED:
            (g,) = [g for g in groups if f"as v_{alias}," in g["fingerprint"]]
            sql = g["example"]["with_values"]
            assert "SLEEP(0.02)" in sql, sql
            explain_mysql(root, sql)
            with root.cursor() as c:
                c.execute(sql.replace("SLEEP(0.02)", "0"))
                got = c.fetchone()[0]
            if isinstance(want, float):
                assert float(got) == want, (sql, got)
            else:
                assert got == want, (sql, got)


def test_mysql_execute_of_the_statement_just_prepared(maria):
    """MariaDB's direct execution: COM_STMT_PREPARE and COM_STMT_EXECUTE with statement id -1
    sent together, before the prepare's answer; the values are decoded once it comes."""
    pcap = OUT / "execute-direct.pcap"
    cap = harness.Tcpdump(pcap, MARIA_PORT).start()
    conn = maria.connect()
    conn._execute_command(binproto.COM_STMT_PREPARE, "SELECT ? + 1 AS direct_v")
    body = struct.pack("<IBI", 0xFFFFFFFF, 0, 1) + b"\x00\x01" + struct.pack("<BBq", 0x08, 0, 41)
    conn._execute_command(binproto.COM_STMT_EXECUTE, body)
    ok = conn._read_packet().get_all_data()
    _, ncols, nparams = struct.unpack_from("<IHH", ok, 1)
    for _ in range(nparams + 1 + ncols + 1):  # definitions, each section ended by an EOF
        conn._read_packet()
    conn._next_seq_id = 1  # the execute's answer numbers its packets from 1 again
    first = conn._read_packet()
    for _ in range(first.read_length_encoded_integer()):
        conn._read_packet()
    conn._read_packet()  # EOF
    rows = 0
    while not conn._read_packet().is_eof_packet():
        rows += 1
    assert rows == 1
    conn.close()
    cap.sync()
    assert cap.stop().get("dropped") == 0
    (g,) = [g for g in digest_groups(pcap) if g["command"] == "execute"]
    sql = g["example"]["with_values"]
    assert sql == "SELECT 41 + 1 AS direct_v", g["example"]
    with maria.root() as root, root.cursor() as c:
        c.execute(sql)
        assert c.fetchone()[0] == 42


# -------------------------------------------------------------------------------------------------
# PostgreSQL

@pytest.fixture(scope="module")
def pg():
    srv = ph.PgServer(PG_PORT, OUT / "pg")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def pg_placeholder_groups(pcap: Path) -> list[dict]:
    out = []
    for g in digest_groups(pcap, "--server", f"127.0.0.1:{PG_PORT}"):
        text = (g["example"] or {}).get("text") or ""
        # Executions (filed under `query`), not the Parse steps (`prepare`).
        if g["command"] != "prepare" and re.search(r"\$\d", text):
            out.append(g)
    return out


def explain_pg(pg, sql: str) -> None:
    with ph.closing(pg.admin_conn(ph.DB)) as c, c.cursor() as cur:
        cur.execute("EXPLAIN " + sql)  # psycopg2 formats nothing without args
        cur.fetchall()


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_pgbench_examples_explain(pg, mode):
    """pgbench -M extended / -M prepared: every group with `$n` parameters has an example with
    its values, and EXPLAIN of it runs on the server."""
    env = pg.env()
    subprocess.run(["pgbench", "-i", "-s", "1", "-q"], env=env, check=True, capture_output=True)
    pcap = OUT / f"pgbench-{mode}.pcap"
    cap = ph.Tcpdump(pcap, PG_PORT).start()
    subprocess.run(["pgbench", "-M", mode, "-c", "2", "-t", "100", "-n"], env=env, check=True,
                   capture_output=True)
    cap.sync()
    assert cap.stop().get("dropped") == 0
    groups = pg_placeholder_groups(pcap)
    assert len(groups) == 5, [g["fingerprint"] for g in groups]
    for g in groups:
        sql = g["example"].get("with_values")
        assert sql and "dbtap:" not in sql, g["example"]
        assert not re.search(r"\$\d", sql), sql
        explain_pg(pg, sql)


# (value bound by psycopg in binary, the SQL type psycopg says for it, what SELECT returns)
PG_TYPED = [
    ("i2", "int2", 7),
    ("i4", "int4", -70000),
    ("i8", "int8", 2**62),
    ("f8", "float8", -1.25e-7),
    ("f4", "float4", 0.5),
    ("flag", "bool", True),
    ("txt", "text", "it's \\ \"ü\""),
    ("raw", "bytea", b"\x00\xff'\\"),
    ("uid", "uuid", "12345678-9abc-def0-1234-56789abcdef0"),
    ("day", "date", datetime.date(1999, 12, 31)),
    ("ts", "timestamp", datetime.datetime(2001, 2, 3, 4, 5, 6, 789)),
    ("num", "numeric", decimal.Decimal("-12345.000670")),
]


def test_psycopg_binary_values_round_trip(pg):
    """psycopg 3 with binary parameters (types named in the Parse): `SELECT <literal>` of each
    substituted example returns the value bound; EXPLAIN of each runs."""
    psycopg = pytest.importorskip("psycopg")
    import uuid
    pcap = OUT / "psycopg-binary.pcap"
    cap = ph.Tcpdump(pcap, PG_PORT).start()
    with psycopg.connect(pg.dsn(), autocommit=True) as c:
        for alias, typ, v in PG_TYPED:
            val = uuid.UUID(v) if typ == "uuid" else v
            c.execute(f"SELECT %s::{typ} AS {alias}", (val,), binary=True, prepare=True).fetchall()
            c.execute(f"SELECT %s::{typ} AS {alias}", (val,), binary=True, prepare=True).fetchall()
    cap.sync()
    assert cap.stop().get("dropped") == 0
    groups = pg_placeholder_groups(pcap)
    assert len(groups) == len(PG_TYPED), [g["fingerprint"] for g in groups]
    for alias, typ, want in PG_TYPED:
        (g,) = [g for g in groups if re.search(rf"\bas {alias}$", g["fingerprint"], re.I)]
        sql = g["example"].get("with_values")
        assert sql and "dbtap:" not in sql, g["example"]
        explain_pg(pg, sql)
        with ph.closing(pg.admin_conn(ph.DB)) as c, c.cursor() as cur:
            cur.execute(sql)
            got = cur.fetchone()[0]
        if typ == "uuid":
            got = str(got)
        if typ == "bytea":
            got = bytes(got)
        assert got == want, (sql, got)
