"""Real-server harness for the PostgreSQL tests and bench/postgres.sh.

A private PostgreSQL 15 (own datadir under tests/out/, own port on 127.0.0.1, run as the
`postgres` OS user, pg_stat_statements preloaded with track=all, optionally ssl=on with a
self-signed certificate), its traffic captured with the real tcpdump, and its own statistics
(pg_stat_statements) read over the UNIX socket, which tcpdump on lo does not see. Nothing here
trusts dbtap: the truth is pg_stat_statements and the clients' own counts.

Also the capture probe shared with redis_harness.py: neither server speaks first, so the MySQL
harness's probe (which reads the greeting) is replaced by a bare connect-and-close.

Command line for bench/postgres.sh: `python3 pg_harness.py pgbench-capture --help`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402  (the MySQL suite's harness: Tcpdump, dbtap runners)

REPO = harness.REPO
PGBIN = Path("/usr/lib/postgresql/15/bin")
DB = "dbtap"            # the database every captured workload uses
SSL_USER = "tap_ssl"    # the role of the TLS connection (its statements are not on the wire)


def die(msg: str) -> None:
    raise RuntimeError(msg)


# -------------------------------------------------------------------------------------------------
# capture

class Tcpdump(harness.Tcpdump):
    """harness.Tcpdump with a probe for servers that do not speak first (PostgreSQL, Redis): a
    bare connect, then close. The probe sends no byte, so it makes no request in any protocol."""

    def sync(self, timeout: float = 120.0, fail: bool = True) -> bool:
        port = None
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                port = s.getsockname()[1]
        except OSError:
            pass
        if port is None:
            if fail:
                die(f"probe connection to 127.0.0.1:{self.port} failed")
            return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._scan_for_port(port):
                return True
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if fail:
            die(f"tcpdump did not write the probe's packets (client port {port}) within {timeout}s")
        return False


def check_dropped(stats: dict) -> None:
    if stats.get("dropped") != 0:
        die(f"tcpdump dropped {stats.get('dropped')} packets: the capture is not complete")


# -------------------------------------------------------------------------------------------------
# server

def _run(args: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       stdin=subprocess.DEVNULL, **kw)
    if r.returncode != 0:
        die(f"{what} failed ({r.returncode}): {' '.join(args)}\n{r.stdout[-3000:]}")
    return r


def as_postgres(*args: str) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *map(str, args)]


class PgServer:
    """A private PostgreSQL 15 on 127.0.0.1:port with its datadir under workdir."""

    def __init__(self, port: int, workdir: Path, ssl: bool = False, extra: list[str] | None = None):
        self.port = port
        self.workdir = Path(workdir).resolve()
        self.datadir = self.workdir / "data"
        self.sockdir = self.workdir / "sock"
        self.log = self.workdir / "server.log"
        self.ssl = ssl
        self.extra = extra or []
        self.started = False
        self._admin = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def _kill_leftover(self) -> None:
        """A server of an earlier run that died without cleanup: the postmaster named by our
        datadir's postmaster.pid whose command line names our datadir. Immediate shutdown."""
        pid = self._postmaster_pid()
        if pid is None:
            return
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return
        if "postgres" in cmd and str(self.datadir) in cmd:
            os.kill(pid, signal.SIGQUIT)
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.1)

    def start(self) -> "PgServer":
        self._kill_leftover()
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.sockdir.mkdir(parents=True)
        harness.wait_port_free(self.port)
        shutil.chown(self.workdir, "postgres", "postgres")
        shutil.chown(self.sockdir, "postgres", "postgres")
        _run(as_postgres(PGBIN / "initdb", "-D", self.datadir, "-U", "postgres", "--auth=trust",
                         "-E", "UTF8", "--locale=C", "--no-sync"), "initdb")
        opts = [
            "shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all",
            "pg_stat_statements.max=10000", "listen_addresses=127.0.0.1", f"port={self.port}",
            f"unix_socket_directories={self.sockdir}", "fsync=off", "synchronous_commit=off",
            "full_page_writes=off", "max_connections=100", "shared_buffers=128MB",
            "autovacuum=off", "log_min_messages=warning", "log_min_error_statement=panic",
        ]
        if self.ssl:
            cert, key = self.workdir / "cert.pem", self.workdir / "key.pem"
            _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                  "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)], "openssl")
            for f in (cert, key):
                shutil.chown(f, "postgres", "postgres")
            key.chmod(0o600)
            opts += ["ssl=on", f"ssl_cert_file={cert}", f"ssl_key_file={key}"]
        opts += self.extra
        o = " ".join(f"-c {x}" for x in opts)
        self.started = True
        _run(as_postgres(PGBIN / "pg_ctl", "-D", self.datadir, "-l", self.log, "-w", "-t", "120",
                         "-o", o, "start"), f"pg_ctl start (log: {self.log})")
        # (psycopg2's `with conn` opens a transaction even in autocommit mode: closing() instead)
        with closing(self.admin_conn("postgres")) as c, c.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DB}")
            cur.execute(f"CREATE ROLE {SSL_USER} LOGIN")
            # in the admin database: the view shows every database's statements
            cur.execute("CREATE EXTENSION pg_stat_statements")
        with closing(self.admin_conn(DB)) as c, c.cursor() as cur:
            cur.execute(f"GRANT ALL ON SCHEMA public TO {SSL_USER}")
        return self

    def stop(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:
                pass
            self._admin = None
        if not self.started:
            return
        self.started = False
        r = subprocess.run(as_postgres(PGBIN / "pg_ctl", "-D", self.datadir, "-m", "fast", "-w",
                                       "-t", "60", "stop"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            self._kill_leftover()

    def __enter__(self) -> "PgServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- connections -------------------------------------------------------------------------------
    def admin_conn(self, dbname: str = "postgres"):
        """Superuser over the UNIX socket: never captured by tcpdump on lo."""
        import psycopg2
        c = psycopg2.connect(host=str(self.sockdir), port=self.port, user="postgres",
                             dbname=dbname)
        c.autocommit = True
        return c

    def dsn(self, user: str = "postgres", sslmode: str = "disable", **kw) -> str:
        """TCP (captured). sslmode=disable unless asked: the server has ssl=on, and libpq's
        default `prefer` would encrypt every connection."""
        parts = {"host": "127.0.0.1", "port": self.port, "user": user, "dbname": DB,
                 "sslmode": sslmode, **kw}
        return " ".join(f"{k}={v}" for k, v in parts.items())

    def env(self) -> dict:
        return {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(self.port),
                "PGUSER": "postgres", "PGDATABASE": DB, "PGSSLMODE": "disable"}

    def _cur(self):
        if self._admin is None or self._admin.closed:
            self._admin = self.admin_conn("postgres")
        return self._admin.cursor()

    def sql(self, q: str, args=None) -> list[tuple]:
        with self._cur() as cur:
            cur.execute(q, args)
            return cur.fetchall() if cur.description else []

    # -- statistics --------------------------------------------------------------------------------
    def pgss_reset(self) -> None:
        self.sql("SELECT pg_stat_statements_reset()")

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until no client backend is connected to the workload database: every statement it ran
        has then been recorded by pg_stat_statements."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                         "backend_type = 'client backend'", (DB,))[0][0]
            if n == 0:
                return
            if time.monotonic() > deadline:
                die(f"{n} connections to {DB} still open after {timeout}s")
            time.sleep(0.05)

    def pgss(self, exclude_users: tuple[str, ...] = ()) -> dict[str, dict]:
        """pg_stat_statements of the workload database, top-level statements, by query text:
        {query: {calls, rows}} (entries of the same text from several users/queryids summed).
        Users in `exclude_users` are left out (the TLS connection's, whose statements dbtap
        cannot see)."""
        rows = self.sql(
            "SELECT s.query, s.calls, s.rows, r.rolname FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid "
            "WHERE d.datname = %s AND s.toplevel", (DB,))
        out: dict[str, dict] = {}
        for q, calls, nrows, user in rows:
            if user in exclude_users:
                continue
            e = out.setdefault(q, {"calls": 0, "rows": 0})
            e["calls"] += int(calls)
            e["rows"] += int(nrows)
        return out

    def calls(self) -> dict[str, int]:
        """Calls per statement as pg_stat_statements identifies them, to compare two servers'
        runs of one workload: {query text in lower case: calls}. pg_stat_statements keeps the
        text of whichever statement of an entry ran first, so pgbench's `select count(*) from
        pgbench_branches` and a client's `SELECT count(*) FROM pgbench_branches` (one entry) show
        under either text, depending on which session ran first; a replay's sessions do not wait
        for each other, so the order can differ from the capture's."""
        out: dict[str, int] = {}
        for q, e in self.pgss().items():
            out[q.lower()] = out.get(q.lower(), 0) + e["calls"]
        return out

    def pgss_exec_ms(self) -> dict[str, float]:
        """pg_stat_statements' total_exec_time (ms) of the workload database's top-level
        statements, by query text (summed as in `pgss`)."""
        rows = self.sql(
            "SELECT s.query, s.total_exec_time FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s AND s.toplevel", (DB,))
        out: dict[str, float] = {}
        for q, ms in rows:
            out[q] = out.get(q, 0.0) + float(ms)
        return out

    def pgss_user(self, user: str) -> dict[str, int]:
        rows = self.sql("SELECT s.query, s.calls FROM pg_stat_statements s JOIN pg_roles r "
                        "ON r.oid = s.userid WHERE r.rolname = %s AND s.toplevel", (user,))
        return {q: int(c) for q, c in rows}


# -------------------------------------------------------------------------------------------------
# pgbench

def pgbench_init(srv: PgServer, scale: int = 1) -> None:
    """pgbench -i over the UNIX socket (not captured)."""
    env = {**srv.env(), "PGHOST": str(srv.sockdir)}
    _run([str(PGBIN / "pgbench"), "-i", "-q", "-s", str(scale), DB], "pgbench -i", env=env)


def pgbench_run(srv: PgServer, mode: str, clients: int, transactions: int = 0,
                seconds: int = 0) -> dict:
    """pgbench -n (no vacuum) over TCP. Its own report: transactions actually processed, failed
    transactions (when printed)."""
    args = [str(PGBIN / "pgbench"), "-n", "-M", mode, "-c", str(clients), "-j", str(clients)]
    args += ["-t", str(transactions)] if transactions else ["-T", str(seconds)]
    r = _run(args + [DB], f"pgbench -M {mode}", env=srv.env())
    return parse_pgbench(r.stdout)


def parse_pgbench(out: str) -> dict:
    res: dict = {"raw": out}
    m = re.search(r"number of transactions actually processed: (\d+)", out)
    if not m:
        die(f"cannot find the transaction count in pgbench's output:\n{out}")
    res["transactions"] = int(m.group(1))
    m = re.search(r"number of failed transactions: (\d+)", out)
    res["failed"] = int(m.group(1)) if m else 0
    m = re.search(r"number of clients: (\d+)", out)
    res["clients"] = int(m.group(1)) if m else None
    return res


# -------------------------------------------------------------------------------------------------
# scripted workload (real drivers: psycopg2 = libpq simple protocol, psycopg 3 = extended protocol)

def local_port(conn) -> int:
    """The client port of a psycopg2/psycopg connection, from its socket (no query sent)."""
    fd = os.dup(conn.fileno())
    s = socket.socket(fileno=fd)
    try:
        return s.getsockname()[1]
    finally:
        s.close()


PREOPEN_K = 25
COPY_IN_ROWS = 5000
COPY_OUT_ROWS = 3000  # rows of copy_src
BIG_ROWS = 200_000
CURSOR_ROWS = 1000       # fetched through a suspended portal, CURSOR_PREFETCH rows per Execute
CURSOR_PREFETCH = 100
NULL_ROWS = 1000
PREPARED_N = 50
PIPE_BATCHES, PIPE_PER_BATCH = 8, 10

SCHEMA = [
    "CREATE TABLE items (id int PRIMARY KEY, v text, n int)",
    "INSERT INTO items SELECT g, 'v' || g, g % 10 FROM generate_series(1, 1000) g",
    "CREATE TABLE uniq (id int PRIMARY KEY)",
    "INSERT INTO uniq VALUES (1), (2)",
    "CREATE TABLE copy_in2 (id int, v text)",
    "CREATE TABLE copy_in3 (id int, v text)",
    "CREATE TABLE pipe (id int, v text)",
    "CREATE TABLE pipe2 (id int, v text)",
    "CREATE TABLE copy_src (id int, v text)",
    f"INSERT INTO copy_src SELECT g, 'x' || g FROM generate_series(1, {COPY_OUT_ROWS}) g",
]



class PgWorkload:
    """The scripted workload. Every count the tests need comes from the clients themselves:
    exceptions caught (by SQLSTATE), rows fetched, rows copied, statements sent."""

    def __init__(self, srv: PgServer):
        self.srv = srv
        self.pre = None
        self.ledger: dict = {"errors": collections.Counter(), "ports": {}, "rows": {},
                             "sent": collections.Counter()}

    def setup_schema(self) -> None:
        with closing(self.srv.admin_conn(DB)) as c, c.cursor() as cur:
            for q in SCHEMA:
                cur.execute(q)
            cur.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {SSL_USER}")

    def pre_open(self) -> None:
        """A connection opened before tcpdump starts: its startup is not captured."""
        import psycopg2
        self.pre = psycopg2.connect(self.srv.dsn())
        self.pre.autocommit = True
        self.ledger["ports"]["preopen"] = local_port(self.pre)

    def run_preopened(self) -> dict:
        """The pre-opened connection: PREOPEN_K queries, then close."""
        with self.pre.cursor() as cur:
            for i in range(PREOPEN_K):
                cur.execute("SELECT %s AS preopen", (i,))
                assert cur.fetchall() == [(i,)]
        self.pre.close()
        self.ledger["sent"]["preopen"] = PREOPEN_K
        return self.ledger

    def _err(self, fn) -> None:
        import psycopg2
        import psycopg
        try:
            fn()
        except (psycopg2.Error, psycopg.Error) as e:
            code = getattr(e, "pgcode", None) or getattr(getattr(e, "diag", None), "sqlstate", None)
            if not code:
                raise
            self.ledger["errors"][code] += 1
        else:
            die("the statement was expected to fail")

    def _pq_pipeline(self) -> None:
        from psycopg import pq
        L = self.ledger
        pg = pq.PGconn.connect(self.srv.dsn(application_name="pq-pipeline").encode())
        if pg.status != pq.ConnStatus.OK:
            die(f"pq connect failed: {pg.error_message!r}")
        fd = os.dup(pg.socket)
        with socket.socket(fileno=fd) as s:
            L["ports"]["pq_pipeline"] = s.getsockname()[1]
        pg.enter_pipeline_mode()
        ins = sel = 0
        for b in range(PIPE_BATCHES):
            for i in range(PIPE_PER_BATCH):
                pg.send_query_params(b"INSERT INTO pipe2 (id, v) VALUES ($1, $2)",
                                     [str(b * 100 + i).encode(), b"q"])
                ins += 1
            pg.send_query_params(b"SELECT count(*) FROM pipe2 WHERE id < $1",
                                 [str(b * 100 + 100).encode()])
            sel += 1
            pg.pipeline_sync()
        while pg.flush() != 0:
            time.sleep(0.001)
        syncs = got_ins = got_sel = 0
        while syncs < PIPE_BATCHES:
            r = pg.get_result()
            if r is None:
                continue
            if r.status == pq.ExecStatus.PIPELINE_SYNC:
                syncs += 1
            elif r.status == pq.ExecStatus.COMMAND_OK:
                got_ins += 1
            elif r.status == pq.ExecStatus.TUPLES_OK:
                got_sel += r.ntuples
            else:
                die(f"pipeline result {r.status}: {r.error_message!r}")
        pg.exit_pipeline_mode()
        pg.finish()
        assert (got_ins, got_sel) == (ins, sel), (got_ins, got_sel)
        L["sent"]["pq_insert"], L["sent"]["pq_select"] = ins, sel

    def _asyncpg_cursor(self) -> None:
        import asyncio
        import asyncpg
        L = self.ledger

        async def go():
            c = await asyncpg.connect(host="127.0.0.1", port=self.srv.port, user="postgres",
                                      database=DB, ssl=False)
            L["ports"]["asyncpg"] = c._transport.get_extra_info("sockname")[1]
            n = 0
            async with c.transaction():
                async for _ in c.cursor("SELECT g AS cursor_marker, md5(g::text) "
                                        "FROM generate_series(1, $1) g", CURSOR_ROWS,
                                        prefetch=CURSOR_PREFETCH):
                    n += 1
            await c.close()
            return n

        L["rows"]["cursor"] = asyncio.run(go())
        assert L["rows"]["cursor"] == CURSOR_ROWS

    def run(self) -> dict:
        import io
        import psycopg2
        import psycopg
        L = self.ledger
        # 2. psycopg2 (libpq, simple protocol, client-side parameters)
        c2 = psycopg2.connect(self.srv.dsn(application_name="psycopg2"))
        c2.autocommit = True
        L["ports"]["psycopg2"] = local_port(c2)
        with c2.cursor() as cur:
            for _ in range(2):
                self._err(lambda: cur.execute("SELEC 1"))                            # 42601
            for _ in range(3):
                self._err(lambda: cur.execute("SELECT * FROM no_such_table"))        # 42P01
            for i in (1, 2):
                self._err(lambda: cur.execute("INSERT INTO uniq VALUES (%s)", (i,)))  # 23505
            for i in range(3, 8):
                cur.execute("INSERT INTO uniq VALUES (%s)", (i,))
            L["sent"]["uniq_ok"] = 5
            # one Query message, three statements: the client sees the last result only
            cur.execute("SELECT 1 AS multi; SELECT 2 AS multi; SELECT 3 AS multi")
            assert cur.fetchall() == [(3,)]
            cur.execute("SELECT CASE WHEN g %% 3 = 0 THEN NULL ELSE g END AS a, NULL::text AS b, g "
                        "FROM generate_series(1, %s) g", (NULL_ROWS,))
            rows = cur.fetchall()
            assert sum(1 for r in rows if r[0] is None and r[1] is None) == NULL_ROWS // 3
            L["rows"]["nulls_psycopg2"] = len(rows)
            cur.execute("SELECT g, md5(g::text) FROM generate_series(1, %s) g", (BIG_ROWS,))
            L["rows"]["big"] = len(cur.fetchall())
            data = "".join(f"{i}\tcopy row {i}\n" for i in range(COPY_IN_ROWS))
            cur.copy_expert("COPY copy_in2 (id, v) FROM STDIN", io.StringIO(data))
            L["rows"]["copy_in2"] = data.count("\n")
            L["rows"]["copy_in2_client"] = cur.rowcount
            buf = io.StringIO()
            # (no constants in COPY: PostgreSQL 15's pg_stat_statements keeps a utility
            # statement's text as sent, where dbtap shows constants as $n like PostgreSQL 16+)
            cur.copy_expert("COPY (SELECT id, v FROM copy_src) TO STDOUT", buf)
            L["rows"]["copy_out2"] = buf.getvalue().count("\n")
            L["rows"]["copy_out2_bytes"] = len(buf.getvalue().encode())
        c2.close()

        # 3. psycopg 3 (extended protocol, server-side parameters)
        c3 = psycopg.connect(self.srv.dsn(application_name="psycopg3"), autocommit=True)
        L["ports"]["psycopg3"] = local_port(c3)
        with c3.cursor() as cur:
            for i in range(PREPARED_N):
                cur.execute("SELECT v FROM items WHERE id = %s", (i + 1,), prepare=True)
                assert cur.fetchall() == [(f"v{i + 1}",)]
            L["sent"]["prepared"] = PREPARED_N
            cur.execute("SELECT a, NULL::int AS b FROM (SELECT CASE WHEN g %% 2 = 0 THEN NULL "
                        "ELSE g END AS a FROM generate_series(1, %s) g) s", (NULL_ROWS,))
            L["rows"]["nulls_psycopg3"] = len(cur.fetchall())
            self._err(lambda: cur.execute("SELECT * FROM no_such_table_3 WHERE id = %s", (1,)))
            self._err(lambda: cur.execute("INSERT INTO uniq VALUES (%s)", (1,)))
            with cur.copy("COPY copy_in3 (id, v) FROM STDIN") as cp:
                for i in range(COPY_IN_ROWS):
                    cp.write_row((i, f"row {i}"))
            L["rows"]["copy_in3"] = COPY_IN_ROWS
            L["rows"]["copy_in3_client"] = cur.rowcount
            n = 0
            with cur.copy("COPY copy_src TO STDOUT") as cp:
                for _ in cp.rows():
                    n += 1
            L["rows"]["copy_out3"] = n
        # pipeline mode: PIPE_BATCHES Syncs sent without waiting for results
        sel = ins = 0
        with c3.pipeline() as p, c3.cursor() as cur:
            for b in range(PIPE_BATCHES):
                for i in range(PIPE_PER_BATCH):
                    cur.execute("INSERT INTO pipe (id, v) VALUES (%s, %s)", (b * 100 + i, "p"))
                    ins += 1
                cur.execute("SELECT count(*) FROM pipe WHERE id < %s", (b * 100 + 100,))
                sel += 1
                p.sync()
        L["sent"]["pipe_insert"], L["sent"]["pipe_select"] = ins, sel
        c3.close()
        # psycopg 3 waits for a batch's results at each sync(); its libpq binding (psycopg.pq)
        # can send every batch and every Sync before reading anything: PIPE_BATCHES Syncs in
        # flight at once
        self._pq_pipeline()

        # 4. asyncpg: a cursor in a transaction fetches with Execute and a row limit, the portal
        # suspended between batches (as JDBC's fetch size does)
        self._asyncpg_cursor()

        # 5. TLS: counted as encrypted, its statements invisible
        ct = psycopg2.connect(self.srv.dsn(user=SSL_USER, sslmode="require"))
        ct.autocommit = True
        L["ports"]["tls"] = local_port(ct)
        with ct.cursor() as cur:
            cur.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            assert cur.fetchone() == (True,), "the TLS connection is not encrypted"
        ct.close()
        return L


# -------------------------------------------------------------------------------------------------
# dbtap

def dbtap_pg_groups(digest: dict) -> dict[tuple[str, str], dict]:
    """PostgreSQL groups of a digest by (command, fingerprint)."""
    out = {}
    for g in digest["queries"]:
        if g["protocol"] == "postgres":
            key = (g["command"], g["fingerprint"])
            if key in out:
                die(f"two groups with the same command and fingerprint: {key}")
            out[key] = g
    return out


def renumber(query: str) -> str:
    """pg_stat_statements' text with its `$n` renumbered in order of first appearance, as dbtap
    shows them. pg_stat_statements keeps a statement's own parameters' numbers and numbers the
    constants it replaced after them (`... $2::int ... generate_series($3, $1)` for a statement
    sent with one parameter); dbtap numbers both in one sequence so the simple and the extended
    form of a statement read the same (crates/fingerprint/src/postgres.rs). Only the numbering
    changes: the statement, its grouping and its counts do not."""
    seen: dict[str, str] = {}

    def sub(m):
        return seen.setdefault(m.group(1), f"${len(seen) + 1}")
    return re.sub(r"\$(\d+)", sub, query)


def dbtap_queries(digest: dict) -> dict[str, int]:
    """{fingerprint: count} of the `query` groups (simple queries and extended executions)."""
    return {fp: g["count"] for (cmd, fp), g in dbtap_pg_groups(digest).items() if cmd == "query"}


# -------------------------------------------------------------------------------------------------
# command line for bench/postgres.sh

def _cmd_pgbench_capture(a: argparse.Namespace) -> int:
    """Start a private server, pgbench -i outside the capture, capture pgbench runs until the file
    is big enough, record pg_stat_statements and pgbench's own counts as JSON, stop everything."""
    srv = PgServer(a.port, Path(a.workdir))
    cap = Tcpdump(Path(a.out), a.port, iface="lo")
    try:
        srv.start()
        pgbench_init(srv, a.scale)
        srv.pgss_reset()
        cap.start()
        runs = []
        while True:
            runs.append(pgbench_run(srv, a.mode, a.clients, seconds=a.time))
            if cap.out.stat().st_size >= a.min_bytes:
                break
        stats = cap.stop()
        srv.wait_idle()
        pgss = srv.pgss()
        version = srv.sql("SHOW server_version")[0][0]
    finally:
        cap.stop()
        srv.stop()
    res = {
        "server_version": f"PostgreSQL {version}",
        "tcpdump": stats,
        "pgbench": {"mode": a.mode, "clients": a.clients, "time_per_run": a.time,
                    "scale": a.scale, "runs": len(runs),
                    "transactions": sum(r["transactions"] for r in runs),
                    "failed": sum(r["failed"] for r in runs)},
        "pg_stat_statements": pgss,
        "pcap_bytes": Path(a.out).stat().st_size,
    }
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    if stats.get("dropped", 1) != 0:
        print(f"tcpdump dropped {stats.get('dropped')} packets", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("pgbench-capture", help="capture pgbench runs against a private server")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--workdir", required=True)
    s.add_argument("--out", required=True, help="pcap to write")
    s.add_argument("--json", required=True, help="pg_stat_statements + pgbench counts")
    s.add_argument("--mode", default="extended", choices=("simple", "extended", "prepared"))
    s.add_argument("--clients", type=int, default=4)
    s.add_argument("--time", type=int, default=10, help="seconds per pgbench run")
    s.add_argument("--scale", type=int, default=1)
    s.add_argument("--min-bytes", type=int, default=0)
    a = p.parse_args()
    if a.cmd == "pgbench-capture":
        return _cmd_pgbench_capture(a)
    return 2


if __name__ == "__main__":
    sys.exit(main())
