"""Real servers that listen on a Unix socket, plain TCP and TLS at once, their clients over each
path, and their own counters: the truth for the eBPF source's tests (test_ebpf.py) and for
bench/ebpf-overhead.sh.

- MariaDB 10.11: `--socket` + `--port` on 127.0.0.1, TLS with a CA and a server certificate made
  here (openssl), users `tap`@localhost (Unix socket) and `tap_tls`@127.0.0.1 (REQUIRE SSL).
  Truth: SHOW GLOBAL STATUS deltas (harness.Server.status / harness.delta).
- PostgreSQL 15: `unix_socket_directories` + a TCP port with ssl=on (same CA), pg_stat_statements.
  Truth: pg_stat_statements of the workload database.
- Redis 7.0: `unixsocket` + `--port` + `--tls-port` (same CA, `--tls-auth-clients no`).
  Truth: INFO commandstats deltas.

Unlike the packet tests, the eBPF source sees the Unix socket too, so the tests' own statistics
queries (SHOW GLOBAL STATUS, the pg_stat_statements query, INFO) are on the traced path: the
tests leave exactly those out of the comparison (`OWN_*` below) and nothing else.

Nothing here trusts dbtap. Every server runs under tests/out/ebpf/ on a port of 38200-38299;
start() stops a leftover of ours first, stop() is idempotent, and `python3 ebpf_harness.py
check` starts each server, connects over every path, reads the truth and stops (a by-hand check).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import live_harness  # noqa: E402
import pg_harness as ph  # noqa: E402
import redis_harness as rh  # noqa: E402

REPO = harness.REPO
OUT = REPO / "tests" / "out" / "ebpf"
MARIA_PORT = 38200
PG_PORT = 38210
REDIS_PORT = 38220
REDIS_TLS_PORT = 38221
TLS_USER, TLS_PASSWORD = "tap_tls", "taptls"


def die(msg: str) -> None:
    raise RuntimeError(msg)


def _run(args: list, what: str, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, stdin=subprocess.DEVNULL, **kw)
    if r.returncode != 0:
        die(f"{what} failed ({r.returncode}): {' '.join(map(str, args))}\n{r.stdout[-3000:]}")
    return r


# -------------------------------------------------------------------------------------------------
# certificates

def make_certs(d: Path) -> dict[str, Path]:
    """A CA and a server certificate it signed (CN and SAN 127.0.0.1 / localhost), made afresh in
    `d`: {ca, cert, key}."""
    d = Path(d).resolve()
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    ca_key, ca, key, csr, cert = (d / n for n in ("ca-key.pem", "ca.pem", "server-key.pem",
                                                  "server.csr", "server.pem"))
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
          "-subj", "/CN=dbtap test CA", "-keyout", ca_key, "-out", ca], "openssl CA")
    _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
          "-keyout", key, "-out", csr], "openssl server request")
    ext = d / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
          "-days", "3650", "-extfile", ext, "-out", cert], "openssl sign")
    # a client certificate too: sysbench 1.0 hands client-cert.pem/client-key.pem to the client
    # library whenever --mysql-ssl=on, and fails when they are missing
    ckey, ccsr, ccert = d / "client-key.pem", d / "client.csr", d / "client-cert.pem"
    _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=dbtap test client",
          "-keyout", ckey, "-out", ccsr], "openssl client request")
    _run(["openssl", "x509", "-req", "-in", ccsr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
          "-days", "3650", "-out", ccert], "openssl sign client")
    return {"ca": ca, "cert": cert, "key": key, "client_cert": ccert, "client_key": ckey}


# -------------------------------------------------------------------------------------------------
# MariaDB

class Maria(harness.Server):
    """harness.Server on MARIA_PORT with its Unix socket, TLS from make_certs(), and the users of
    the Unix socket (`tap`@localhost) and of TLS (`tap_tls`@127.0.0.1, REQUIRE SSL)."""

    def __init__(self, port: int = MARIA_PORT, workdir: Path = OUT / "mariadb",
                 extra: list[str] | None = None):
        super().__init__(port, workdir, tls=False, extra=list(extra or []))
        self.certdir = self.workdir.parent / (self.workdir.name + "-certs")
        self.certs: dict[str, Path] = {}

    def start(self, timeout: float = 120.0) -> "Maria":
        self._kill_leftover()
        self.certs = make_certs(self.certdir)
        self.extra = [x for x in self.extra if not x.startswith("--ssl-")] + [
            f"--ssl-cert={self.certs['cert']}", f"--ssl-key={self.certs['key']}",
            f"--ssl-ca={self.certs['ca']}"]
        super().start(timeout)
        with self.root() as c, c.cursor() as cur:
            cur.execute(f"CREATE USER '{harness.USER}'@'localhost' IDENTIFIED BY '{harness.PASSWORD}'")
            cur.execute(f"GRANT ALL ON *.* TO '{harness.USER}'@'localhost'")
            cur.execute(f"CREATE USER '{TLS_USER}'@'127.0.0.1' IDENTIFIED BY '{TLS_PASSWORD}' "
                        f"REQUIRE SSL")
            cur.execute(f"GRANT ALL ON *.* TO '{TLS_USER}'@'127.0.0.1'")
        return self

    def fresh_status(self, threads: int | None = None) -> dict[str, int]:
        """status() on a connection of its own (closed again): a persistent statistics connection
        opened before dbtap would be first seen mid-connection by the tracer."""
        if self._status_conn is not None:
            try:
                self._status_conn.close()
            except Exception:
                pass
            self._status_conn = None
        return self.status(threads=threads)

    # -- clients -------------------------------------------------------------------------------
    def unix_conn(self, **kw):
        import pymysql
        return pymysql.connect(unix_socket=str(self.sock), user=harness.USER,
                               password=harness.PASSWORD, database="dbtap_test",
                               autocommit=True, **kw)

    def tls_conn(self, **kw):
        import pymysql
        return pymysql.connect(host="127.0.0.1", port=self.port, user=TLS_USER,
                               password=TLS_PASSWORD, database="dbtap_test", autocommit=True,
                               ssl={"ca": str(self.certs["ca"])}, **kw)

    def plain_conn(self, **kw):
        return self.connect(**kw)

    def sysbench_args(self, threads: int, table_size: int, via: str = "unix",
                      test: str = "oltp_read_only", db: str = "sbtest") -> list[str]:
        """sysbench with prepared statements (--db-ps-mode=auto) over the Unix socket (`unix`), TCP
        without TLS (`tcp`) or TCP with TLS required by the user (`tls`)."""
        a = ["sysbench", test, "--db-driver=mysql", f"--mysql-db={db}", "--tables=1",
             f"--table-size={table_size}", f"--threads={threads}", "--db-ps-mode=auto"]
        if via == "unix":
            a += [f"--mysql-socket={self.sock}", f"--mysql-user={harness.USER}",
                  f"--mysql-password={harness.PASSWORD}", "--mysql-ssl=off"]
        elif via == "tcp":
            a += ["--mysql-host=127.0.0.1", f"--mysql-port={self.port}",
                  f"--mysql-user={harness.USER}", f"--mysql-password={harness.PASSWORD}",
                  "--mysql-ssl=off"]
        elif via == "tls":
            a += ["--mysql-host=127.0.0.1", f"--mysql-port={self.port}", f"--mysql-user={TLS_USER}",
                  f"--mysql-password={TLS_PASSWORD}", "--mysql-ssl=on"]
        else:
            die(f"unknown path {via!r}")
        return a

    def sysbench_prepare(self, table_size: int, db: str = "sbtest") -> None:
        with self.root() as c, c.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {db}")
            cur.execute(f"DROP TABLE IF EXISTS {db}.sbtest1")
        _run(self.sysbench_args(1, table_size, "unix", "oltp_read_only", db) + ["prepare"],
             "sysbench prepare")

    def sysbench_run(self, threads: int, table_size: int, seconds: int = 0, events: int = 0,
                     via: str = "unix", test: str = "oltp_read_only", db: str = "sbtest",
                     extra: list[str] | None = None) -> dict:
        """sysbench run; its own report (harness.parse_sysbench). In `tls` mode it runs in the
        certificate directory, where cacert.pem, client-cert.pem and client-key.pem are (sysbench
        1.0 passes those fixed names to the client library)."""
        args = self.sysbench_args(threads, table_size, via, test, db) + [
            f"--time={seconds}", f"--events={events}", "--report-interval=0", *(extra or []),
            "run"]
        cwd = None
        if via == "tls":
            cwd = self.certdir
            shutil.copy(self.certs["ca"], cwd / "cacert.pem")
        r = _run(args, f"sysbench run ({via})", cwd=cwd)
        return harness.parse_sysbench(r.stdout)

    def cli(self, sql: str, via: str = "tls") -> str:
        """The `mariadb` CLI, one -e batch, over TLS (required, CA verified) or the Unix socket."""
        if via == "tls":
            a = ["mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", str(self.port), "-u", TLS_USER,
                 f"-p{TLS_PASSWORD}", "--ssl", f"--ssl-ca={self.certs['ca']}",
                 "--ssl-verify-server-cert"]
        else:
            a = ["mariadb", "--no-defaults", f"--socket={self.sock}", "-u", harness.USER,
                 f"-p{harness.PASSWORD}", "--skip-ssl"]
        return _run(a + ["-N", "-B", "dbtap_test", "-e", sql], f"mariadb -e ({via})").stdout


# The statements the tests' own statistics connections send (MariaDB: harness.Server.status()).
OWN_MARIA_FINGERPRINTS = {"show global status"}  # compared lower-case


def maria_scripted(srv: Maria, conn_factory, n: int = 20) -> dict:
    """A scripted pymysql client: `n` point SELECTs, `n` INSERTs, `n // 2` UPDATEs, one DELETE,
    then errors the server answers (1146 no such table x3, 1064 syntax x2, 1062 duplicate x2),
    all on one connection that first creates its own table (CREATE TABLE: not compared).
    Returns the client's own counts: {sent: {select, insert, update, delete}, errors: {code: n}}."""
    import pymysql
    sent = {"select": 0, "insert": 0, "update": 0, "delete": 0}
    errors: dict[int, int] = {}
    with closing(conn_factory()) as c, c.cursor() as cur:
        tag = f"t{os.getpid()}_{int(time.monotonic() * 1000)}"
        cur.execute(f"CREATE TABLE {tag} (id INT PRIMARY KEY, v VARCHAR(32))")
        for i in range(n):
            cur.execute(f"INSERT INTO {tag} VALUES (%s, %s)", (i, f"v{i}"))
            sent["insert"] += 1
        for i in range(n):
            cur.execute(f"SELECT v FROM {tag} WHERE id = %s", (i,))
            assert cur.fetchall() == ((f"v{i}",),)
            sent["select"] += 1
        for i in range(n // 2):
            cur.execute(f"UPDATE {tag} SET v = %s WHERE id = %s", (f"u{i}", i))
            sent["update"] += 1
        cur.execute(f"DELETE FROM {tag} WHERE id = %s", (0,))
        sent["delete"] += 1
        bad = [("SELECT * FROM no_such_table_ebpf WHERE id = 1", 1146)] * 3 + \
              [("SELEC 1", 1064)] * 2 + [(f"INSERT INTO {tag} VALUES (1, 'dup')", 1062)] * 2
        for sql, code in bad:
            try:
                cur.execute(sql)
            except pymysql.err.MySQLError as e:
                got = int(e.args[0])
                if got != code:
                    die(f"{sql!r} failed with {got}, expected {code}")
                errors[got] = errors.get(got, 0) + 1
            else:
                die(f"{sql!r} did not fail")
        # the statements that fail after parsing bump their Com_<kind> (harness.py)
        sent["select"] += 3
        sent["insert"] += 2
    return {"sent": sent, "errors": errors, "table": tag}


# -------------------------------------------------------------------------------------------------
# PostgreSQL

class Pg(ph.PgServer):
    """pg_harness.PgServer on PG_PORT: its Unix socket in `sock/`, ssl=on with make_certs(),
    every connection logged (server.log: "connection authorized: ... SSL enabled" for TLS)."""

    def __init__(self, port: int = PG_PORT, workdir: Path = OUT / "pg"):
        super().__init__(port, workdir, ssl=False)
        self.certdir = self.workdir.parent / (self.workdir.name + "-certs")
        self.certs: dict[str, Path] = {}

    @property
    def socket_path(self) -> Path:
        return self.sockdir / f".s.PGSQL.{self.port}"

    def start(self) -> "Pg":
        self._kill_leftover()
        self.certs = make_certs(self.certdir)
        shutil.chown(self.certdir, "postgres", "postgres")
        for f in self.certs.values():
            shutil.chown(f, "postgres", "postgres")
        self.certs["key"].chmod(0o600)
        # log_connections: the server's own record of which connections used TLS
        self.extra = ["ssl=on", f"ssl_cert_file={self.certs['cert']}",
                      f"ssl_key_file={self.certs['key']}", f"ssl_ca_file={self.certs['ca']}",
                      "log_connections=on"]
        return super().start()

    def env_unix(self) -> dict:
        return {**self.env(), "PGHOST": str(self.sockdir)}

    def env_tls(self) -> dict:
        return {**self.env(), "PGSSLMODE": "require"}

    def pgbench(self, via: str, mode: str, clients: int, transactions: int) -> dict:
        """pgbench -n over the Unix socket (`unix`), TLS required (`tls`) or plain TCP (`tcp`)."""
        env = {"unix": self.env_unix, "tls": self.env_tls, "tcp": self.env}[via]()
        args = [str(ph.PGBIN / "pgbench"), "-n", "-M", mode, "-c", str(clients), "-j",
                str(clients), "-t", str(transactions), ph.DB]
        r = _run(args, f"pgbench ({via})", env=env)
        return ph.parse_pgbench(r.stdout)

    def psycopg_tls(self, n: int = 30) -> dict:
        """psycopg 3 with sslmode=require (extended protocol): `n` SELECTs of one statement, one
        error (42P01). The connection is checked to be encrypted by the server itself. Returns
        the client's own counts."""
        import psycopg
        errors: dict[str, int] = {}
        with psycopg.connect(self.dsn(sslmode="require", sslrootcert=self.certs["ca"]),
                             autocommit=True) as c:
            with c.cursor() as cur:
                cur.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                if cur.fetchone() != (True,):
                    die("the psycopg connection is not encrypted")
                for i in range(n):
                    cur.execute("SELECT abalance FROM pgbench_accounts WHERE aid = %s", (i + 1,))
                    cur.fetchall()
                try:
                    cur.execute("SELECT * FROM no_such_table_ebpf WHERE id = %s", (1,))
                except psycopg.Error as e:
                    errors[e.sqlstate] = errors.get(e.sqlstate, 0) + 1
                else:
                    die("the statement was expected to fail")
        return {"selects": n, "errors": errors}

    def psycopg_unix(self, n: int = 30) -> dict:
        """psycopg 3 over the Unix socket: `n` SELECTs (extended protocol)."""
        import psycopg
        with psycopg.connect(host=str(self.sockdir), port=self.port, user="postgres",
                             dbname=ph.DB, autocommit=True) as c, c.cursor() as cur:
            for i in range(n):
                cur.execute("SELECT bid FROM pgbench_branches WHERE bid = %s", (1,))
                cur.fetchall()
        return {"selects": n}


# -------------------------------------------------------------------------------------------------
# Redis

class Redis(rh.RedisServer):
    """redis_harness.RedisServer on REDIS_PORT with its unixsocket, plus --tls-port REDIS_TLS_PORT
    (make_certs(), clients not asked for certificates)."""

    def __init__(self, port: int = REDIS_PORT, tls_port: int = REDIS_TLS_PORT,
                 workdir: Path = OUT / "redis"):
        super().__init__(port, workdir)
        self.tls_port = tls_port
        self.certdir = self.workdir.parent / (self.workdir.name + "-certs")
        self.certs: dict[str, Path] = {}

    def start(self) -> "Redis":
        self._kill(signal.SIGKILL)
        self.certs = make_certs(self.certdir)
        harness.wait_port_free(self.tls_port)
        self.extra = ["--tls-port", str(self.tls_port), "--tls-cert-file", str(self.certs["cert"]),
                      "--tls-key-file", str(self.certs["key"]), "--tls-ca-cert-file",
                      str(self.certs["ca"]), "--tls-auth-clients", "no"]
        return super().start()

    def benchmark(self, via: str, tests: str, n: int, clients: int = 4, pipeline: int = 1,
                  size: int = 3) -> str:
        """redis-benchmark over the Unix socket (`unix`), TLS (`tls`) or plain TCP (`tcp`)."""
        args = ["redis-benchmark", "-c", str(clients), "-n", str(n), "-P", str(pipeline), "-d",
                str(size), "-t", tests, "--csv"]
        args += self.path_args(via)
        return _run(args, f"redis-benchmark ({via})").stdout

    def path_args(self, via: str) -> list[str]:
        if via == "unix":
            return ["-s", str(self.sock)]
        if via == "tls":
            return ["-h", "127.0.0.1", "-p", str(self.tls_port), "--tls", "--cacert",
                    str(self.certs["ca"])]
        if via == "tcp":
            return ["-h", "127.0.0.1", "-p", str(self.port)]
        die(f"unknown path {via!r}")

    def cli(self, via: str, *cmd: str) -> str:
        return _run(["redis-cli", *self.path_args(via), *cmd], f"redis-cli ({via})").stdout

    def py_client(self, via: str):
        """A redis-py client (one connection) over `via`."""
        import redis
        if via == "unix":
            return redis.Redis(unix_socket_path=str(self.sock), single_connection_client=True)
        if via == "tls":
            return redis.Redis(host="127.0.0.1", port=self.tls_port, ssl=True,
                               ssl_ca_certs=str(self.certs["ca"]), single_connection_client=True)
        return redis.Redis(host="127.0.0.1", port=self.port, single_connection_client=True)


class NetBytes:
    """Redis's own byte counters (INFO stats: total_net_input_bytes / total_net_output_bytes,
    every read and write of every connection, Unix socket included) around a window, read on a
    connection of their own. Every byte of the window's connections is counted by the server
    except the opening INFO's request (read before the counters were printed) and the closing
    INFO's reply (written after): `total()` adds exactly those two, so it is every byte a tracer
    running from before `open()` to after `close()` saw on the server's sockets."""

    def __init__(self, srv: rh.RedisServer):
        self.srv = srv
        self.first: tuple[int, int, int, int] | None = None
        self.last: tuple[int, int, int, int] | None = None

    def _read(self) -> tuple[int, int, int, int]:
        req = rh.resp_cmd("INFO", "stats")
        c = rh.RawConn(unix=str(self.srv.sock))
        try:
            c.s.sendall(req)
            data = b""
            while b"\r\n" not in data:
                chunk = c.s.recv(65536)
                if not chunk:
                    die("redis closed the INFO connection")
                data += chunk
            n = int(data[1:data.index(b"\r\n")])
            total = data.index(b"\r\n") + 2 + n + 2
            while len(data) < total:
                chunk = c.s.recv(65536)
                if not chunk:
                    die("redis closed the INFO connection")
                data += chunk
        finally:
            c.close()
        self.srv.socket_calls["info"] += 1
        text = data.decode()
        i = int(text.split("total_net_input_bytes:", 1)[1].split()[0])
        o = int(text.split("total_net_output_bytes:", 1)[1].split()[0])
        return i, o, len(req), len(data)

    def open(self) -> None:
        self.first = self._read()

    def close(self) -> None:
        self.last = self._read()

    def total(self) -> int:
        (i0, o0, req0, _), (i1, o1, _, reply1) = self.first, self.last
        return (i1 - i0) + req0 + (o1 - o0) + reply1


# The command the tests' own statistics connection sends (redis_harness.RedisServer.snapshot()).
OWN_REDIS_COMMANDS = {"info"}


def redis_truth(before: dict, after: dict) -> dict[str, tuple[int, int]]:
    """{command: (requests, errors)} of the window, the snapshots' own INFO left out."""
    return {k: (v["requests"], v["errors"])
            for k, v in rh.per_command(rh.stats_delta(before, after)).items()
            if k not in OWN_REDIS_COMMANDS}


# -------------------------------------------------------------------------------------------------
# dbtap live in ebpf/auto mode

def ebpf_unavailable(text: str) -> bool:
    """dbtap's one-line refusal when BPF cannot load here (no privilege, no BTF, no tracefs)."""
    t = text.lower()
    return any(w in t for w in ("cap_bpf", "cap_perfmon", "btf", "tracefs", "not permitted",
                                "without the `ebpf` feature"))


class Live(live_harness.Live):
    """One `dbtap live` process (live_harness.Live, with the source the test names). start()
    returns once dbtap is reading plus a settle: under `--source ebpf` its "dbtap: source ebpf:
    ..." line (printed once the tracer is attached), otherwise its "dbtap: capturing on ..."
    line (the packet rings are open), and in `auto` also the "dbtap: source auto: ..." line
    after it. A start that fails raises NotReady; stop() signals it."""

    settle_s = 0.5

    def __init__(self, *args, binary: Path | None = None):
        super().__init__(*args, binary=binary)
        self._seen: set[str] = set()

    @property
    def source(self) -> str:
        a = self.args
        return a[a.index("--source") + 1] if "--source" in a[:-1] else "auto"

    @property
    def ready_line(self) -> str:
        return "dbtap: source ebpf" if self.source == "ebpf" else "dbtap: capturing on "

    def source_line(self) -> str:
        """dbtap's "dbtap: source ..." line: what it chose and why."""
        return next((l.strip() for l in self.err if l.startswith("dbtap: source ")), "")

    def on_err_line(self, line: str) -> bool:
        self._seen.add("ready" if line.startswith(self.ready_line) else
                       "source" if line.startswith("dbtap: source ") else "")
        # in auto, the source line (what it chose) follows the packet start line
        return "ready" in self._seen and (self.source != "auto" or "source" in self._seen)

    def not_ready(self) -> None:
        raise NotReady(self)

    def start(self, timeout: float = 30.0) -> "Live":
        return super().start(timeout)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60.0) -> "Live":
        return super().stop(sig, timeout)


class NotReady(RuntimeError):
    def __init__(self, live: Live):
        self.live = live
        self.stderr = live.stderr
        super().__init__(f"{' '.join(live.cmd)} did not start (exit {live.rc}); "
                         f"stderr: {live.stderr[-2000:]!r}")


# -------------------------------------------------------------------------------------------------
# by-hand check: every server, every path, the truth readable

def _check() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    m, p, r = Maria(), Pg(), Redis()
    try:
        m.start()
        m.sysbench_prepare(1000)
        b = m.fresh_status()
        sb = m.sysbench_run(2, 1000, events=50, via="unix")
        sc = maria_scripted(m, m.unix_conn)
        a = m.fresh_status(threads=b["Threads_connected"])
        d = harness.delta(b, a)
        print("mariadb unix: sysbench", {k: sb[k] for k in ("total", "ignored_errors")},
              "scripted", sc["sent"], sc["errors"],
              {k: d[k] for k in ("Com_stmt_execute", "Com_select", "Com_insert", "Connections")})
        b = m.fresh_status()
        with closing(m.tls_conn()) as c, c.cursor() as cur:
            cur.execute("SHOW STATUS LIKE 'Ssl_version'")
            print("mariadb tls pymysql:", cur.fetchall())
        print("mariadb tls cli:", m.cli("SELECT 1; SHOW STATUS LIKE 'Ssl_cipher'").split())
        sb = m.sysbench_run(1, 1000, events=10, via="tls")
        a = m.fresh_status(threads=b["Threads_connected"])
        d = harness.delta(b, a)
        print("mariadb tls: sysbench total", sb["total"], {k: d[k] for k in (
            "Ssl_accepts", "Com_stmt_execute", "Com_select", "Connections")})
        m.stop()

        p.start()
        ph.pgbench_init(p)
        p.pgss_reset()
        print("pg unix pgbench:", p.pgbench("unix", "prepared", 2, 20)["transactions"])
        print("pg tls pgbench:", p.pgbench("tls", "extended", 2, 20)["transactions"])
        print("pg tls psycopg:", p.psycopg_tls(5))
        p.wait_idle()
        for q, v in sorted(p.pgss().items()):
            print("   pgss", v["calls"], q[:70])
        p.stop()

        r.start()
        r.reset_stats()
        b = r.snapshot()
        r.benchmark("unix", "set,get", 1000)
        r.benchmark("tls", "set,get", 1000)
        print("redis tls cli:", r.cli("tls", "INCR", "k").strip(), "unix cli:",
              r.cli("unix", "GET", "k").strip())
        with r.py_client("tls") as c:
            c.set("a", "b")
        a = r.snapshot()
        print("redis truth:", redis_truth(b, a))
    finally:
        r.stop()
        p.stop()
        m.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["check"]:
        sys.exit(_check())
    print("usage: python3 ebpf_harness.py check", file=sys.stderr)
    sys.exit(2)
