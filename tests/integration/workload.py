"""The scripted workload: real clients (pymysql, MySQLdb, a binary-protocol client on pymysql's
packet layer) doing known things, each on its own TCP connection, while a Ledger writes down what
each connection sent and what the server answered, as the client saw it.

The Ledger is the truth the tests hold dbtap to: per connection (keyed by the client's TCP port),
the ordered list of requests with their command, marker, outcome, rows, affected rows, error code.
A multi-statement query is one request that also lists the statements the server ran, as the
client saw them (one per result set, and the one that failed): dbtap's events are those.
"""

from __future__ import annotations

import collections
import os
import socket
from dataclasses import dataclass, field

import pymysql
import pymysql.constants.CLIENT as CLIENT

from binproto import BinaryClient
from harness import PASSWORD, PASSWORD2, USER, USER2, Server, com_class


@dataclass
class Req:
    command: str              # dbtap's command name: query, execute, prepare, close, ...
    marker: str = ""          # an identifier that the fingerprint keeps ('' when none)
    outcome: str = "ok"       # ok | error | no_reply_expected
    rows: int = 0             # rows returned to the client (all result sets)
    affected: int = 0         # affected rows (all result sets)
    code: int | None = None   # error code when outcome == error
    message: str | None = None
    size: int = 0             # bytes of SQL text / payload the client sent (0 when not tracked)
    user: str | None = None   # when set: the user dbtap must report for this request
    db: str | None = None     # when set: the database dbtap must report for this request
    warnings: int | None = None  # warnings the client was told of (pymysql: every result set)
    klass: str | None = None  # the Com_<kind> counter the statement bumps (harness.com_class)
    # A multi-statement query: the statements the server ran, each its own Req (dbtap's events).
    statements: list["Req"] | None = None

    def events(self) -> list["Req"]:
        """What dbtap reports for this request: one event, or one per statement run."""
        return self.statements if self.statements is not None else [self]


@dataclass
class Conn:
    name: str
    port: int
    user: str | None = USER
    visible: bool = True      # False for the TLS connection: its requests are not decodable
    reqs: list[Req] = field(default_factory=list)

    def add(self, *a, **kw) -> Req:
        r = Req(*a, **kw)
        self.reqs.append(r)
        return r

    def counts(self) -> collections.Counter:
        """Requests per command (a multi-statement query is one)."""
        return collections.Counter(r.command for r in self.reqs)

    def expected(self) -> list[Req]:
        """dbtap's events for this connection, in order: the requests, with each
        multi-statement query expanded into the statements the server ran."""
        return [e for r in self.reqs for e in r.events()]

    def event_counts(self) -> collections.Counter:
        return collections.Counter(r.command for r in self.expected())


class Ledger:
    def __init__(self) -> None:
        self.conns: dict[int, Conn] = {}
        self.sql_prepare = self.sql_execute = self.sql_dealloc = 0   # text PREPARE/EXECUTE/...

    def conn(self, name: str, port: int, **kw) -> Conn:
        c = Conn(name, port, **kw)
        assert port not in self.conns, f"client port {port} reused"
        self.conns[port] = c
        return c

    def by_name(self, name: str) -> Conn:
        for c in self.conns.values():
            if c.name == name:
                return c
        raise KeyError(name)

    def errors_by_code(self) -> collections.Counter:
        out = collections.Counter()
        for c in self.conns.values():
            if c.visible:
                for r in c.reqs:
                    if r.outcome == "error":
                        out[r.code] += 1
        return out

    def visible_counts(self) -> collections.Counter:
        out = collections.Counter()
        for c in self.conns.values():
            if c.visible:
                out.update(c.counts())
        return out


def pymysql_port(c) -> int:
    return c._sock.getsockname()[1]


def mysqldb_port(c) -> int:
    s = socket.socket(fileno=os.dup(c.fileno()))
    try:
        return s.getsockname()[1]
    finally:
        s.close()  # closes the duplicate only


def _q(conn: Conn, cur, sql: str, args=None, marker: str = "", klass: str | None = None) -> Req:
    """Run one text query on a pymysql/MySQLdb cursor and record it, with all its result sets."""
    text = sql if args is None else (cur.mogrify(sql, args) if hasattr(cur, "mogrify") else sql)
    klass = klass or com_class(sql)
    try:
        cur.execute(sql, args)
    except (pymysql.err.MySQLError,) as e:
        return conn.add("query", marker, "error", code=e.args[0], message=e.args[1],
                        size=len(text.encode()) if isinstance(text, str) else 0, klass=klass)
    rows = affected = 0
    # pymysql keeps each result set's warning count (from its OK/EOF); MySQLdb does not here.
    result = lambda: getattr(cur, "_result", None)  # noqa: E731
    warnings = 0 if result() is not None else None
    while True:
        if warnings is not None:
            warnings += result().warning_count
        if cur.description is not None:
            rows += len(cur.fetchall())
        else:
            affected += max(cur.rowcount, 0)
        try:
            if not cur.nextset():
                break
        except pymysql.err.MySQLError as e:
            return conn.add("query", marker, "error", rows=rows, affected=affected,
                            code=e.args[0], message=e.args[1], klass=klass)
    return conn.add("query", marker, "ok", rows=rows, affected=affected, warnings=warnings,
                    size=len(text.encode()) if isinstance(text, str) else 0, klass=klass)


def _q_multi(conn: Conn, cur, stmts: list[tuple[str, str]]) -> Req:
    """Run (sql, marker) statements as one multi-statement COM_QUERY (pymysql, with
    CLIENT.MULTI_STATEMENTS) and record it: one request with everything summed, as `_q` does,
    whose `statements` are those the server ran, from what the client saw: each result set
    (`nextset()`) is one statement's, in order (no CALL here, whose result sets would all be its
    own), and an error is the statement the server had reached; those after it were not run."""
    sql = "; ".join(s for s, _ in stmts)
    ran: list[Req] = []

    def stmt(**kw) -> Req:
        s, marker = stmts[len(ran)]
        r = Req("query", marker, klass=com_class(s), size=len(s.encode()), **kw)
        ran.append(r)
        return r

    err = None
    try:
        cur.execute(sql)
        while True:
            assert len(ran) < len(stmts), f"more result sets than statements: {sql!r}"
            warnings = cur._result.warning_count
            if cur.description is not None:
                stmt(rows=len(cur.fetchall()), warnings=warnings)
            else:
                stmt(affected=max(cur.rowcount, 0), warnings=warnings)
            if not cur.nextset():
                break
    except pymysql.err.MySQLError as e:
        err = e
        stmt(outcome="error", code=e.args[0], message=e.args[1])
    r = conn.add("query", stmts[0][1], "error" if err else "ok",
                 rows=sum(s.rows for s in ran), affected=sum(s.affected for s in ran),
                 code=err.args[0] if err else None, message=err.args[1] if err else None,
                 size=len(sql.encode()), statements=ran,
                 warnings=None if err else sum(s.warnings for s in ran))
    return r


class Workload:
    """Runs each part on its own connection. `pre_open()` must run before tcpdump starts."""

    K_PRE = 25
    N_PLAIN = 200

    def __init__(self, srv: Server, tmpdir) -> None:
        self.srv = srv
        self.tmpdir = tmpdir
        self.ledger = Ledger()
        self.pre = None

    # -- setup outside the capture ----------------------------------------------------------
    def setup_schema(self) -> None:
        with self.srv.root() as c, c.cursor() as cur:
            cur.execute("USE dbtap_test")
            for t in ("plain_t", "err_t", "multi_t", "infile_t", "bin_t"):
                cur.execute(f"DROP TABLE IF EXISTS {t}")
            cur.execute("CREATE TABLE plain_t (id INT PRIMARY KEY, v INT)")
            cur.execute("CREATE TABLE err_t (id INT PRIMARY KEY)")
            cur.execute("INSERT INTO err_t VALUES (1)")
            cur.execute("CREATE TABLE multi_t (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
            cur.execute("CREATE TABLE infile_t (id INT PRIMARY KEY, name VARCHAR(64))")
            cur.execute("CREATE TABLE bin_t (id INT PRIMARY KEY, bin_marker INT, payload LONGBLOB)")
            cur.execute("INSERT INTO bin_t (id, bin_marker) SELECT seq, seq % 7 FROM seq_1_to_100")

    def pre_open(self) -> None:
        """A connection whose handshake is NOT in the capture."""
        self.pre = self.srv.connect()

    # -- the captured part --------------------------------------------------------------------
    def run(self) -> Ledger:
        L = self.ledger
        self.part_pre()
        self.part_plain()
        self.part_errors()
        self.part_big()
        self.part_multi()
        self.part_infile()
        self.part_sql_prepare()
        self.part_binary()
        self.part_compressed()
        self.part_tls()
        self.part_admin()
        self.part_change_user()
        self.part_bad_login()
        return L

    BAD_LOGINS = 3

    def part_bad_login(self) -> None:
        """Logins the server refuses (wrong password): each a `connect` error, and the server's
        Access_denied_errors. pymysql connects over a socket of ours, so the port is known."""
        for i in range(self.BAD_LOGINS):
            s = socket.create_connection(("127.0.0.1", self.srv.port))
            port = s.getsockname()[1]
            c = pymysql.connect(host="127.0.0.1", port=self.srv.port, user=USER,
                                password=f"wrong-{i}", database="dbtap_test", defer_connect=True)
            conn = self.ledger.conn(f"bad_login_{i}", port)
            try:
                c.connect(s)
                raise AssertionError("a login with a wrong password succeeded")
            except pymysql.err.OperationalError as e:
                conn.add("connect", outcome="error", code=e.args[0], message=e.args[1],
                         user=USER, db="dbtap_test")
            finally:
                s.close()

    def part_pre(self) -> None:
        c = self.pre
        conn = self.ledger.conn("pre_existing", pymysql_port(c), user=None)
        with c.cursor() as cur:
            for i in range(self.K_PRE):
                _q(conn, cur, "SELECT %s AS pre_marker", (i,), "pre_marker")
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_plain(self) -> None:
        c = self.srv.connect()
        conn = self.ledger.conn("plain", pymysql_port(c))
        with c.cursor() as cur:
            for i in range(self.N_PLAIN):
                _q(conn, cur, "SELECT %s AS plain_marker, 'x' AS plain_other", (i,), "plain_marker")
            for i in range(50):
                _q(conn, cur, "INSERT INTO plain_t (id, v) VALUES (%s, %s)", (i, i), "plain_t")
            for i in range(20):
                _q(conn, cur, "UPDATE plain_t SET v = v + 1 WHERE id >= %s", (45 + i % 10,), "plain_t")
            for i in range(10):
                _q(conn, cur, "DELETE FROM plain_t WHERE id = %s", (i * 3,), "plain_t")
            _q(conn, cur, "SELECT id, v FROM plain_t ORDER BY id", None, "plain_t")
            # Statements the server answers with warnings (division by zero, truncation).
            for i in range(4):
                r = _q(conn, cur, f"SELECT 1/0 AS warn_div_marker, CAST('{i}x' AS UNSIGNED) AS c",
                       None, "warn_div_marker")
                assert r.warnings == 2, r
            r = _q(conn, cur, "SET @warn_set_marker = 1/0", None, "warn_set_marker")
            assert r.warnings == 1, r
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_errors(self) -> None:
        c = self.srv.connect()
        conn = self.ledger.conn("errors", pymysql_port(c))
        with c.cursor() as cur:
            for i in range(3):
                r = _q(conn, cur, f"SELEC {i} AS syntax_marker", None, "syntax_marker")
                assert r.code == 1064, r
            for i in range(4):
                r = _q(conn, cur, "SELECT * FROM no_such_table_marker WHERE id = %s", (i,),
                       "no_such_table_marker")
                assert r.code == 1146, r
            for i in range(5):
                r = _q(conn, cur, "INSERT INTO err_t (id) VALUES (%s)", (1,), "err_t")
                assert r.code == 1062, r
            _q(conn, cur, "SELECT COUNT(*) AS after_errors_marker FROM err_t", None,
               "after_errors_marker")
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_big(self) -> None:
        c = self.srv.connect()
        conn = self.ledger.conn("big", pymysql_port(c))
        with c.cursor() as cur:
            two_mb = "a" * (2 * 1024 * 1024)
            r = _q(conn, cur, f"SELECT LENGTH('{two_mb}') AS big_query_marker", None,
                   "big_query_marker")
            assert r.outcome == "ok" and r.rows == 1
            # More than 16 MB: the request spans two MySQL packets (0xffffff + rest).
            seventeen = "b" * (17 * 1024 * 1024)
            r = _q(conn, cur, f"SELECT LENGTH('{seventeen}') AS huge_query_marker", None,
                   "huge_query_marker")
            assert r.outcome == "ok" and r.rows == 1
            r = _q(conn, cur, "SELECT seq, REPEAT('r', 1000) AS big_result_marker FROM seq_1_to_5000",
                   None, "big_result_marker")
            assert r.rows == 5000
            # One 20 MB row: the row spans two MySQL packets.
            r = _q(conn, cur, "SELECT REPEAT('y', 20971520) AS huge_row_marker", None,
                   "huge_row_marker")
            assert r.rows == 1
            _q(conn, cur, "SELECT 1 AS after_big_marker", None, "after_big_marker")
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_multi(self) -> None:
        c = self.srv.connect(client_flag=CLIENT.MULTI_STATEMENTS)
        conn = self.ledger.conn("multi", pymysql_port(c))
        with c.cursor() as cur:
            for i in range(3):
                r = _q_multi(conn, cur, [
                    ("SELECT 1 AS multi_marker", "multi_marker"),
                    ("SELECT 2 UNION SELECT 3", ""),
                    (f"INSERT INTO multi_t (v) VALUES ({i}), ({i})", "multi_t"),
                    ("UPDATE multi_t SET v = v + 1", "multi_t")])
                assert r.outcome == "ok" and r.rows == 3 and len(r.statements) == 4, r
            # The 2nd statement fails to parse: the server stops there.
            r = _q_multi(conn, cur, [("SELECT 1 AS multi_err_marker", "multi_err_marker"),
                                     ("SELEC 2", ""), ("SELECT 3", "")])
            assert r.code == 1064 and r.rows == 1 and len(r.statements) == 2, r
            # The 2nd statement parses and fails (counted in Com_select); the 3rd is not run.
            r = _q_multi(conn, cur, [("SELECT 1 AS multi_fail_marker", "multi_fail_marker"),
                                     ("SELECT * FROM no_such_multi_marker", "no_such_multi_marker"),
                                     ("SELECT 3 AS multi_unrun_marker", "multi_unrun_marker")])
            assert r.code == 1146 and r.rows == 1 and len(r.statements) == 2, r
            r = _q_multi(conn, cur, [("SELECT 1/0 AS multi_warn_marker", "multi_warn_marker"),
                                     ("SELECT CAST('3x' AS UNSIGNED)", "")])
            assert r.outcome == "ok" and [s.warnings for s in r.statements] == [1, 1], r
            assert r.warnings == 2, r
            for i in range(5):
                _q(conn, cur, "SELECT %s AS after_multi_marker", (i,), "after_multi_marker")
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_infile(self) -> None:
        path = os.path.join(self.tmpdir, "infile.tsv")
        with open(path, "w") as f:
            for i in range(1000):
                f.write(f"{i}\tname-{i}\n")
        c = self.srv.connect(local_infile=True)
        conn = self.ledger.conn("infile", pymysql_port(c))
        with c.cursor() as cur:
            r = _q(conn, cur, f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE infile_t", None,
                   "infile_t")
            assert r.outcome == "ok" and r.affected == 1000, r
            _q(conn, cur, "SELECT COUNT(*) AS after_infile_marker FROM infile_t", None,
               "after_infile_marker")
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_sql_prepare(self) -> None:
        """SQL-level PREPARE/EXECUTE/DEALLOCATE: text queries (COM_QUERY)."""
        c = self.srv.connect()
        conn = self.ledger.conn("sql_prepare", pymysql_port(c))
        with c.cursor() as cur:
            _q(conn, cur, "PREPARE sqlps FROM 'SELECT id, bin_marker AS sqlps_marker FROM bin_t WHERE id <= ?'",
               None, "sqlps")
            self.ledger.sql_prepare += 1
            for i in range(10):
                _q(conn, cur, f"SET @sqlps_arg = {i + 1}", None, "sqlps_arg")
                _q(conn, cur, "EXECUTE sqlps USING @sqlps_arg", None, "sqlps")
                self.ledger.sql_execute += 1
            _q(conn, cur, "DEALLOCATE PREPARE sqlps", None, "sqlps")
            self.ledger.sql_dealloc += 1
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_binary(self) -> None:
        """Server-side prepared statements over the binary protocol."""
        c = self.srv.connect()
        conn = self.ledger.conn("binary", pymysql_port(c))
        bc = BinaryClient(c)
        st1 = bc.prepare("SELECT id, bin_marker FROM bin_t WHERE id <= ?")
        conn.add("prepare", "bin_marker")
        for i in range(20):
            r = bc.execute(st1, [i * 3])
            conn.add("execute", "bin_marker", rows=r["rows"])
        # A read-only cursor: the execute returns no rows, COM_STMT_FETCH brings them.
        r = bc.execute(st1, [35], cursor=True)
        assert r["cursor"], r
        conn.add("execute", "bin_marker", rows=0)
        fetched, last = 0, False
        while not last:
            n, last = bc.fetch(st1, 10)
            fetched += n
            conn.add("fetch", "bin_marker", rows=n)
        assert fetched == 35, fetched
        bc.reset(st1)
        conn.add("reset", "bin_marker")
        st2 = bc.prepare("UPDATE bin_t SET payload = ? WHERE id = ?")
        conn.add("prepare", "bin_t")
        for rep in range(2):
            for chunk in range(3):
                bc.send_long_data(st2, 0, bytes([65 + chunk]) * 100_000)
                conn.add("send_long_data", "bin_t", outcome="no_reply_expected", size=100_000)
            r = bc.execute(st2, [None, 10 + rep])
            conn.add("execute", "bin_t", affected=r["affected"])
            assert r["affected"] == 1, r
        st3 = bc.prepare("INSERT INTO bin_t (id, bin_marker) VALUES (?, ?)")
        conn.add("prepare", "bin_t")
        r = bc.execute(st3, [1000, 1])
        conn.add("execute", "bin_t", affected=r["affected"])
        try:
            bc.execute(st3, [1000, 2])
            raise AssertionError("duplicate key insert did not fail")
        except pymysql.err.MySQLError as e:
            assert e.args[0] == 1062
            conn.add("execute", "bin_t", "error", code=e.args[0], message=e.args[1])
        try:
            bc.prepare("SELEC ? AS bad_prepare_marker")
            raise AssertionError("bad prepare did not fail")
        except pymysql.err.MySQLError as e:
            assert e.args[0] == 1064
            conn.add("prepare", "bad_prepare_marker", "error", code=e.args[0], message=e.args[1])
        for st in (st1, st2, st3):
            bc.close(st)
            conn.add("close", outcome="no_reply_expected")
        # A plain query after all that: the pairing must still be in step.
        with c.cursor() as cur:
            _q(conn, cur, "SELECT 1 AS after_binary_marker", None, "after_binary_marker")
        c.close()
        conn.add("quit", outcome="no_reply_expected")
        # sent[] counts what went out on the wire; the ledger must agree with it.
        got = conn.counts()
        for k, v in bc.sent.items():
            assert got[k] == v, (k, got[k], v)

    def part_compressed(self) -> None:
        import MySQLdb
        c = MySQLdb.connect(host="127.0.0.1", port=self.srv.port, user=USER, password=PASSWORD,
                            database="dbtap_test", compress=True, autocommit=True)
        conn = self.ledger.conn("compressed", mysqldb_port(c))
        cur = c.cursor()
        for i in range(30):
            cur.execute("SELECT %s AS compressed_marker", (i,))
            conn.add("query", "compressed_marker", rows=len(cur.fetchall()))
        cur.execute("SELECT seq, REPEAT('z', 100) AS compressed_big_marker FROM seq_1_to_2000")
        conn.add("query", "compressed_big_marker", rows=len(cur.fetchall()))
        assert conn.reqs[-1].rows == 2000
        cur.close()
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_tls(self) -> None:
        c = self.srv.connect(ssl={"ca": str(self.srv.ssldir / "cert.pem")})
        conn = self.ledger.conn("tls", pymysql_port(c), visible=False)
        with c.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            cipher = cur.fetchall()[0][1]
            assert cipher, "the TLS connection is not encrypted"
            conn.add("query", "tls", rows=1)
            for i in range(10):
                _q(conn, cur, "SELECT %s AS tls_marker", (i,), "tls_marker")
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_admin(self) -> None:
        c = self.srv.connect()
        conn = self.ledger.conn("admin", pymysql_port(c))
        with c.cursor() as cur:
            for _ in range(3):
                c.ping(reconnect=False)
                conn.add("ping")
            for db in ("dbtap_other", "dbtap_test", "dbtap_other"):
                c.select_db(db)
                conn.add("init_db")
                r = _q(conn, cur, "SELECT DATABASE() AS db_marker", None, "db_marker")
                assert r.rows == 1
                r.db = db
        c.close()
        conn.add("quit", outcome="no_reply_expected")

    def part_change_user(self) -> None:
        import MySQLdb
        c = MySQLdb.connect(host="127.0.0.1", port=self.srv.port, user=USER, password=PASSWORD,
                            database="dbtap_test", autocommit=True)
        conn = self.ledger.conn("change_user", mysqldb_port(c))
        cur = c.cursor()
        cur.execute("SELECT CURRENT_USER() AS before_change_marker")
        assert cur.fetchall()[0][0].startswith(USER + "@")
        conn.add("query", "before_change_marker", rows=1, user=USER, db="dbtap_test")
        c.change_user(USER2, PASSWORD2, "dbtap_other")
        conn.add("change_user")
        cur = c.cursor()
        cur.execute("SELECT CURRENT_USER() AS after_change_marker")
        assert cur.fetchall()[0][0].startswith(USER2 + "@")
        conn.add("query", "after_change_marker", rows=1, user=USER2, db="dbtap_other")
        cur.close()
        c.close()
        conn.add("quit", outcome="no_reply_expected")
