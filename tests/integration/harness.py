"""Real-server harness shared by the integration tests, the benchmark and the sample generator.

It runs a private MariaDB (own datadir, own port on 127.0.0.1, TLS on with a self-signed cert),
captures its TCP traffic with the real tcpdump, reads the server's own counters over the UNIX
socket (which tcpdump does not see), and runs the dbtap binary. Nothing here trusts dbtap: the
truth is SHOW GLOBAL STATUS deltas and the clients' own counts.

Python stdlib + pymysql only (MySQLdb is imported lazily by the tests that use it).

Also a small command line, for bench/ and samples/ (see `python3 harness.py --help`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql

REPO = Path(__file__).resolve().parents[2]
DBTAP = Path(os.environ.get("DBTAP_BIN", REPO / "target" / "release" / "dbtap"))
USER, PASSWORD = "tap", "tap"
USER2, PASSWORD2 = "tap2", "tap2pw"

# ---------------------------------------------------------------------------------------------
# What MariaDB 10.11 counts. Measured on 10.11.19 and asserted against the live server by
# tests/integration/test_counters.py, so another server version fails there, loudly, instead of
# skewing the other tests.
#
# * Com_select / Com_insert / Com_update / Com_delete / Com_load ...: +1 per executed statement of
#   that kind, however it arrived: a COM_QUERY, each statement of a multi-statement COM_QUERY, a
#   COM_STMT_EXECUTE of a prepared statement (which bumps Com_stmt_execute AND Com_select etc.), or
#   an SQL-level `EXECUTE stmt` (Com_execute_sql AND Com_stmt_execute AND Com_select).
#   COM_STMT_PREPARE does not bump Com_select. A statement that fails to parse (1064) bumps no
#   Com_<kind>; one that parses and then fails (1146 unknown table, 1062 duplicate key, 1213
#   deadlock) bumps its Com_<kind>.
# * Com_stmt_prepare: +1 per COM_STMT_PREPARE (failed ones too) and per SQL `PREPARE`.
#   Com_stmt_execute: +1 per COM_STMT_EXECUTE (failed ones too) and per SQL `EXECUTE`.
#   Com_stmt_close: +1 per COM_STMT_CLOSE and per SQL `DEALLOCATE PREPARE`.
#   Com_stmt_reset / Com_stmt_fetch / Com_stmt_send_long_data: +1 per such packet.
# * Com_change_db: +1 per COM_INIT_DB and per `USE db`.
# * Com_admin_commands: +1 per COM_PING and per COM_CHANGE_USER. COM_STATISTICS bumps
#   Com_show_status instead.
# * Questions: +1 per statement a client sends: per COM_QUERY (+1 more for each further statement
#   of a multi-statement query, counting the one that failed), per COM_STMT_EXECUTE, COM_STMT_FETCH,
#   COM_STMT_SEND_LONG_DATA, COM_INIT_DB, COM_CHANGE_USER and COM_QUIT. NOT for COM_PING,
#   COM_STATISTICS, COM_STMT_PREPARE, COM_STMT_CLOSE, COM_STMT_RESET. (Queries = Questions + those
#   three COM_STMT_* + statements inside stored programs.)
# * Rows_sent: +1 per row sent in a result set (each result set of a multi-statement query, each
#   COM_STMT_EXECUTE result), but NOT the rows sent in answer to COM_STMT_FETCH (cursor).
# * Connections: +1 per TCP connection accepted (a bare connect that sends nothing included).
#   Ssl_accepts: +1 per TLS handshake.
# * Clients: pymysql with autocommit=True sends no statement at connect; MySQLdb with
#   autocommit=True neither; MySQLdb with the default autocommit=False sends `SET autocommit=0`.
#   The `mariadb` CLI of 10.11 uses TLS by default (pass --skip-ssl to see its queries); sysbench
#   is run with --mysql-ssl=off; pymysql and MySQLdb use TLS only when asked.
# * sysbench oltp_read_write --db-ps-mode=auto runs every statement, BEGIN and COMMIT included, as
#   a prepared statement: 11 COM_STMT_PREPARE and 11 COM_STMT_CLOSE per thread, and
#   Com_stmt_execute == its "total" queries + its "ignored errors" (a failed statement is not in
#   its read/write/other counts; after a deadlock it retries the transaction from BEGIN).
# ---------------------------------------------------------------------------------------------

COUNTERS = [
    "Questions", "Queries", "Connections", "Aborted_connects", "Ssl_accepts", "Rows_sent",
    "Com_select", "Com_insert", "Com_update", "Com_delete", "Com_replace",
    "Com_begin", "Com_commit", "Com_rollback", "Com_set_option", "Com_show_status",
    "Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close", "Com_stmt_reset",
    "Com_stmt_send_long_data", "Com_stmt_fetch", "Com_stmt_reprepare",
    "Com_prepare_sql", "Com_execute_sql", "Com_dealloc_sql",
    "Com_change_db", "Com_load", "Com_create_table", "Com_drop_table",
    "Com_empty_query", "Com_admin_commands", "Com_show_processlist",
]


# The Com_<kind> counter a statement bumps, by its first keyword (test_scripted compares dbtap's
# per-statement events with these deltas; other kinds, SET, SHOW, PREPARE ..., are not compared).
STATEMENT_CLASSES = {"select": "Com_select", "insert": "Com_insert", "update": "Com_update",
                     "delete": "Com_delete", "replace": "Com_replace", "load": "Com_load"}


def com_class(text: str | None) -> str | None:
    """The Com_<kind> counter of a statement (SQL or dbtap fingerprint), None for other kinds."""
    m = re.match(r"\s*(?:/\*.*?\*/\s*)*([A-Za-z]+)", text or "", re.S)
    return STATEMENT_CLASSES.get(m.group(1).lower()) if m else None


def die(msg: str) -> None:
    raise RuntimeError(msg)


def end_process(proc: subprocess.Popen | None, timeout: float,
                pidfile: Path | None = None) -> None:
    """Stop a child we started: SIGTERM, wait up to `timeout` s, then SIGKILL; remove its pidfile."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if pidfile is not None:
        try:
            pidfile.unlink()
        except OSError:
            pass


def wait_port_free(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return
        if time.monotonic() > deadline:
            die(f"port 127.0.0.1:{port} is already in use by another process; "
                f"the tests need it for their private MariaDB")
        time.sleep(0.2)


class Server:
    """A private MariaDB on 127.0.0.1:port with its datadir under workdir."""

    def __init__(self, port: int, workdir: Path, tls: bool = True, extra: list[str] | None = None):
        self.port = port
        self.workdir = Path(workdir).resolve()
        self.datadir = self.workdir / "data"
        self.sock = self.workdir / "mysqld.sock"
        self.pidfile = self.workdir / "mysqld.pid"
        self.errlog = self.workdir / "error.log"
        self.ssldir = self.workdir / "ssl"
        self.tls = tls
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None
        self._status_conn = None

    # -- lifecycle -----------------------------------------------------------------------------
    def _kill_leftover(self) -> None:
        """A server from an earlier run of ours that died without cleanup: same pidfile, same
        datadir in its command line. Stop exactly that process."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return
        if "mariadbd" in cmdline and str(self.datadir) in cmdline:
            os.kill(pid, signal.SIGKILL)
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.1)

    def _make_certs(self) -> None:
        self.ssldir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(self.ssldir / "key.pem"),
             "-out", str(self.ssldir / "cert.pem")],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self, timeout: float = 120.0) -> "Server":
        self._kill_leftover()
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        wait_port_free(self.port)
        r = subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={self.datadir}", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db",
             "--innodb-log-file-size=64M"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            die(f"mariadb-install-db failed ({r.returncode}):\n{r.stdout[-3000:]}")
        args = [
            "mariadbd", "--no-defaults", "--user=root", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--socket={self.sock}", f"--datadir={self.datadir}",
            f"--pid-file={self.pidfile}", f"--log-error={self.errlog}",
            "--max-allowed-packet=64M", "--skip-name-resolve", "--local-infile=1",
            "--max-connections=500", "--performance-schema=OFF", "--skip-log-bin",
            "--innodb-buffer-pool-size=256M", "--innodb-log-file-size=64M",
            "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",
            "--thread-cache-size=0",
        ]
        if self.tls:
            self._make_certs()
            args += [f"--ssl-cert={self.ssldir / 'cert.pem'}", f"--ssl-key={self.ssldir / 'key.pem'}",
                     f"--ssl-ca={self.ssldir / 'cert.pem'}"]
        args += self.extra
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                die(f"mariadbd exited with {self.proc.returncode} during startup; "
                    f"log:\n{self._errlog_tail()}")
            try:
                c = self.root()
                c.close()
                break
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    die(f"mariadbd not ready after {timeout}s; log:\n{self._errlog_tail()}")
                time.sleep(0.2)
        with self.root() as c, c.cursor() as cur:
            for u, p in ((USER, PASSWORD), (USER2, PASSWORD2)):
                cur.execute(f"CREATE USER '{u}'@'127.0.0.1' IDENTIFIED BY '{p}'")
                cur.execute(f"GRANT ALL ON *.* TO '{u}'@'127.0.0.1'")
            cur.execute("CREATE DATABASE sbtest")
            cur.execute("CREATE DATABASE dbtap_test")
            cur.execute("CREATE DATABASE dbtap_other")
        return self

    def _errlog_tail(self) -> str:
        try:
            return "".join(self.errlog.read_text(errors="replace").splitlines(True)[-30:])
        except OSError:
            return "(no error log)"

    def stop(self) -> None:
        if self._status_conn is not None:
            try:
                self._status_conn.close()
            except Exception:
                pass
            self._status_conn = None
        if self.proc is None:
            return
        end_process(self.proc, 60)
        self.proc = None

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- connections ---------------------------------------------------------------------------
    def root(self, **kw):
        """Root over the UNIX socket: never captured by tcpdump on lo."""
        return pymysql.connect(unix_socket=str(self.sock), user="root", password="",
                               autocommit=True, **kw)

    def connect(self, **kw):
        """The test user over TCP 127.0.0.1:port (what tcpdump sees)."""
        args = dict(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                    database="dbtap_test", autocommit=True)
        args.update(kw)
        return pymysql.connect(**args)

    def status(self, threads: int | None = None, timeout: float = 30.0) -> dict[str, int]:
        """SHOW GLOBAL STATUS over one persistent socket connection.

        With `threads`, first wait until Threads_connected == threads (this connection included):
        a client's COM_QUIT is handled by the server after the client's close() has returned, so
        without the wait a snapshot can miss the last Questions of a workload. Every SHOW counts
        itself in Questions/Com_show_status and its rows in Rows_sent; the snapshot records how
        many so that delta() can take them back out."""
        if self._status_conn is None:
            self._status_conn = self.root()
        polls = extra_rows = 0
        prev: dict[str, int] | None = None
        deadline = time.monotonic() + timeout
        while True:
            with self._status_conn.cursor() as cur:
                cur.execute("SHOW GLOBAL STATUS")
                rows = cur.fetchall()
            polls += 1
            out = {}
            for k, v in rows:
                try:
                    out[k] = int(v)
                except (TypeError, ValueError):
                    pass
            if threads is None:
                break
            # Threads_connected drops before a closing session's counters are added to the global
            # ones (a TLS close takes longest): also wait until two polls in a row differ by
            # nothing but the second poll itself.
            if out["Threads_connected"] == threads and prev is not None and \
                    all(out.get(k, 0) == prev.get(k, 0) + (1 if k in ("Questions", "Queries", "Com_show_status") else 0)
                        for k in COUNTERS if k != "Rows_sent"):
                break
            if time.monotonic() > deadline:
                die(f"server counters did not settle: Threads_connected {out['Threads_connected']}, "
                    f"expected {threads}")
            prev = out
            extra_rows += len(rows)
            time.sleep(0.05)
        out["__statements"] = polls        # SHOW statements run by this call, counted in `out`
        out["__rows_counted"] = extra_rows  # rows of the earlier polls, counted in Rows_sent
        out["__rows_returned"] = len(rows)  # rows of the last one, counted after `out` was read
        return out


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """after - before for every numeric counter, less what the SHOW GLOBAL STATUS statements
    themselves did: those run by the call that took `after` count in Questions/Queries/
    Com_show_status, and the rows sent by the one that took `before` (and by the earlier polls of
    the `after` call) count in Rows_sent. Rows sent through COM_STMT_FETCH are not counted in
    Rows_sent by MariaDB 10.11 at all (see test_counters.py)."""
    d = {k: after[k] - before.get(k, 0) for k in after if k in before and not k.startswith("__")}
    for k in ("Questions", "Queries", "Com_show_status"):
        if k in d:
            d[k] -= after["__statements"]
    if "Rows_sent" in d:
        d["Rows_sent"] -= before["__rows_returned"] + after["__rows_counted"]
    return d


class Tcpdump:
    """Real tcpdump writing a pcap; start() returns only once packets are really being written."""

    def __init__(self, out: Path, port: int, iface: str = "lo", extra_filter: str = "",
                 snaplen: int = 0):
        self.out = Path(out).resolve()
        self.snaplen = snaplen  # tcpdump -s: 0 keeps whole packets
        self.port = port
        self.iface = iface
        self.filter = f"tcp port {port}" + (f" and ({extra_filter})" if extra_filter else "")
        self.proc: subprocess.Popen | None = None
        self.stderr: list[str] = []
        self.stats: dict[str, int] = {}

    def _reader(self) -> None:
        assert self.proc and self.proc.stderr
        for line in self.proc.stderr:
            self.stderr.append(line)

    def start(self, timeout: float = 30.0) -> "Tcpdump":
        self.out.parent.mkdir(parents=True, exist_ok=True)
        if self.out.exists():
            self.out.unlink()
        self.proc = subprocess.Popen(
            ["tcpdump", "-i", self.iface, "-w", str(self.out), "-s", str(self.snaplen), "-B", "65536", "-U",
             "-n", self.filter],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        self.pidfile = self.out.with_name(self.out.name + ".pid")
        self.pidfile.write_text(f"{self.proc.pid}\n")  # for tests/run.sh's cleanup after a kill
        threading.Thread(target=self._reader, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not any("listening on" in l for l in self.stderr):
            if self.proc.poll() is not None:
                time.sleep(0.2)
                die(f"tcpdump exited with {self.proc.returncode}: {''.join(self.stderr)}")
            if time.monotonic() > deadline:
                self.stop(sync=False)
                die(f"tcpdump did not report 'listening on' in {timeout}s: {''.join(self.stderr)}")
            time.sleep(0.05)
        # Probe: a bare TCP connection to the port (reads the greeting, closes; sends no command),
        # repeated until its packets show up in the file. Done before any status snapshot.
        self._scan_off = 0
        self._linktype = None
        while not self.sync(timeout=2.0, fail=False):
            if time.monotonic() > deadline:
                self.stop(sync=False)
                die(f"tcpdump wrote no packet of the probe within {timeout}s")
        return self

    def sync(self, timeout: float = 120.0, fail: bool = True) -> bool:
        """Make a probe connection and wait until tcpdump has written its packets: everything
        sent before the probe is then in the file too. tcpdump can lag seconds behind a fast
        workload, and packets it has not read when it gets SIGINT are lost without being counted
        as dropped."""
        port = None
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                port = s.getsockname()[1]
                s.recv(4096)
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

    def _scan_for_port(self, port: int) -> bool:
        """Read the pcap from where the last scan stopped; True once a TCP packet from `port`."""
        try:
            with open(self.out, "rb") as f:
                if self._linktype is None:
                    hdr = f.read(24)
                    if len(hdr) < 24:
                        return False
                    self._endian = "<" if hdr[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
                    self._linktype = struct.unpack(self._endian + "I", hdr[20:24])[0] & 0xFFFF
                    self._scan_off = 24
                l2 = {1: 14, 113: 16, 276: 20, 0: 4, 101: 0}.get(self._linktype)
                if l2 is None:
                    die(f"unexpected link type {self._linktype} in {self.out}")
                f.seek(self._scan_off)
                data = f.read()
        except FileNotFoundError:
            return False
        off = 0
        found = False
        while off + 16 <= len(data):
            caplen = struct.unpack_from(self._endian + "I", data, off + 8)[0]
            if off + 16 + caplen > len(data):
                break
            pkt = data[off + 16: off + 16 + caplen]
            off += 16 + caplen
            ip = pkt[l2:]
            if len(ip) >= 20 and ip[0] >> 4 == 4 and ip[9] == 6:
                tcp = ip[(ip[0] & 0xF) * 4:]
                if len(tcp) >= 4 and struct.unpack(">H", tcp[:2])[0] == port:
                    found = True
        self._scan_off += off
        return found

    def stop(self, sync: bool = True) -> dict[str, int]:
        if self.proc is None:
            return self.stats
        synced = None
        if sync and self.proc.poll() is None:
            try:
                synced = self.sync()
            except RuntimeError as e:
                synced = False
                self.stderr.append(f"[harness] {e}\n")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)
        text = "".join(self.stderr)
        for key, pat in (("captured", r"(\d+) packets? captured"),
                         ("received", r"(\d+) packets? received by filter"),
                         ("dropped", r"(\d+) packets? dropped by kernel")):
            m = re.search(pat, text)
            if m:
                self.stats[key] = int(m.group(1))
        self.stats["exit"] = self.proc.returncode
        self.stats["synced"] = synced
        self.proc = None
        if "dropped" not in self.stats:
            die(f"tcpdump printed no drop statistics: {text}")
        if synced is False:
            die(f"tcpdump had not written everything when stopped: {text}")
        return self.stats

    def __enter__(self) -> "Tcpdump":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -------------------------------------------------------------------------------------------------
# sysbench

def sysbench_args(port: int, threads: int, table_size: int, tables: int = 1) -> list[str]:
    return ["sysbench", "oltp_read_write", "--db-driver=mysql", "--mysql-host=127.0.0.1",
            f"--mysql-port={port}", f"--mysql-user={USER}", f"--mysql-password={PASSWORD}",
            "--mysql-db=sbtest", f"--tables={tables}", f"--table-size={table_size}",
            f"--threads={threads}", "--db-ps-mode=auto", "--mysql-ssl=off"]


def sysbench_prepare(port: int, table_size: int, tables: int = 1) -> None:
    r = subprocess.run(sysbench_args(port, 1, table_size, tables) + ["prepare"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        die(f"sysbench prepare failed:\n{r.stdout}")


def sysbench_run(port: int, threads: int, seconds: float, table_size: int, tables: int = 1,
                 events: int = 0) -> dict:
    args = sysbench_args(port, threads, table_size, tables) + [
        f"--time={0 if events else int(seconds)}", f"--events={events}", "--report-interval=0", "run"]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        die(f"sysbench run failed ({r.returncode}):\n{r.stdout}")
    return parse_sysbench(r.stdout)


def parse_sysbench(out: str) -> dict:
    """The 'SQL statistics', rates and latency blocks of sysbench 1.0 oltp_* output."""
    res = {"raw": out}
    for key, pat, kind in (("read", r"^\s*read:\s+(\d+)", int), ("write", r"^\s*write:\s+(\d+)", int),
                           ("other", r"^\s*other:\s+(\d+)", int),
                           ("total", r"^\s*total:\s+(\d+)", int),
                           ("transactions", r"^\s*transactions:\s+(\d+)", int),
                           ("queries", r"^\s*queries:\s+(\d+)", int),
                           ("ignored_errors", r"^\s*ignored errors:\s+(\d+)", int),
                           ("reconnects", r"^\s*reconnects:\s+(\d+)", int),
                           ("qps", r"^\s*queries:\s+\d+\s+\(([\d.]+) per sec", float),
                           ("tps", r"^\s*transactions:\s+\d+\s+\(([\d.]+) per sec", float),
                           ("p95_ms", r"^\s*95th percentile:\s+([\d.]+)", float),
                           ("avg_ms", r"^\s*avg:\s+([\d.]+)", float),
                           ("time_s", r"^\s*total time:\s+([\d.]+)s", float)):
        m = re.search(pat, out, re.M)
        if not m:
            die(f"cannot find {key!r} in sysbench output:\n{out}")
        res[key] = kind(m.group(1))
    return res


# -------------------------------------------------------------------------------------------------
# dbtap

def credentials_file(path: Path, text: str) -> Path:
    """Writes a `--credentials` file (`user:password` lines), private as dbtap requires."""
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path


def dbtap_path() -> Path:
    if not (DBTAP.is_file() and os.access(DBTAP, os.X_OK)):
        die(f"dbtap binary not found at {DBTAP} (build it with `cargo build --release -p dbtap`, "
            f"or set DBTAP_BIN)")
    return DBTAP


def dbtap(*args: str, stdin: bytes | None = None, check: bool = True,
          timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [str(dbtap_path()), *map(str, args)]
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, stdin=None if stdin is not None else subprocess.DEVNULL)
    if check and r.returncode != 0:
        die(f"{' '.join(cmd)} exited {r.returncode}; stderr:\n{r.stderr.decode(errors='replace')[-4000:]}")
    return r


def events(*files: str | Path, extra: tuple[str, ...] = ()) -> list[dict]:
    r = dbtap("events", *map(str, files), "--format", "ndjson", *extra)
    out = []
    for n, line in enumerate(r.stdout.decode().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                die(f"dbtap events: line {n} is not JSON ({e}): {line[:200]!r}")
    return out


def digest(*files: str | Path, extra: tuple[str, ...] = ()) -> dict:
    r = dbtap("digest", *map(str, files), "--format", "json", "--limit", "100000", *extra)
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError as e:
        die(f"dbtap digest --format json did not print JSON ({e}): {r.stdout[:300]!r}")


def pcap_tcp_segments(path: Path):
    """(src, sport, dst, dport, seq, flags, payload_len) of every IPv4 TCP packet of a classic pcap
    (Ethernet, Linux SLL or SLL2 link type): enough to recount what tcpdump wrote on its own."""
    data = Path(path).read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack_from(endian + "I", data, 20)[0] & 0xFFFF
    l2 = {1: 14, 113: 16, 276: 20}[linktype]
    off = 24
    while off + 16 <= len(data):
        caplen, origlen = struct.unpack_from(endian + "II", data, off + 8)
        pkt = data[off + 16: off + 16 + caplen]
        off += 16 + caplen
        ip = pkt[l2:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 0xF) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        doff = (tcp[12] >> 4) * 4
        yield ip[12:16], sport, ip[16:20], dport, seq, tcp[13], len(tcp) - doff


def duplicate_segments(path: Path, skip_port: int | None = None) -> tuple[int, int]:
    """(segments, bytes) of TCP payload that the capture had already shown for that connection
    and direction: segments entirely covered by earlier ones, and all re-sent bytes. Worked out
    here from the pcap alone. (tshark's "retransmission" flag is no substitute: on lo it also
    marks segments that arrive after later ones, which are first sightings, not duplicates.)"""
    seen: dict[tuple, list[list[int]]] = {}
    base: dict[tuple, int] = {}
    segs = nbytes = 0
    for src, sport, dst, dport, seq, flags, plen in pcap_tcp_segments(path):
        if skip_port in (sport, dport):
            continue
        key = (src, sport, dst, dport)
        if flags & 0x02:  # SYN: data starts at seq + 1
            base[key] = (seq + 1) & 0xFFFFFFFF
            continue
        if plen <= 0:
            continue
        start = (seq - base.setdefault(key, seq)) & 0xFFFFFFFF
        end = start + plen
        ivs = seen.setdefault(key, [])
        covered = 0
        for a, b in ivs:
            covered += max(0, min(b, end) - max(a, start))
        if covered:
            nbytes += covered
            if covered == plen:
                segs += 1
        ivs.append([start, end])
        ivs.sort()
        merged = [ivs[0]]
        for a, b in ivs[1:]:
            if a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        seen[key] = merged
    return segs, nbytes


def errors_by_code(group: dict) -> dict[int, int]:
    """A digest group's errors_by_code as {code: count}: dbtap prints a list of
    {code, state, count, message} (a {code: count} object is read too)."""
    v = group.get("errors_by_code") or []
    if isinstance(v, dict):
        return {int(k): int(n) for k, n in v.items()}
    out: dict[int, int] = {}
    for item in v:
        out[int(item["code"])] = out.get(int(item["code"]), 0) + int(item["count"])
    return out


# -------------------------------------------------------------------------------------------------
# command line for bench/ and samples/

def _cmd_sysbench_capture(a: argparse.Namespace) -> int:
    """Start a private server, prepare sysbench outside the capture, capture a run, write the
    server's counter deltas and sysbench's own counts as JSON, stop everything."""
    srv = Server(a.port, Path(a.workdir), tls=True)
    cap = Tcpdump(Path(a.out), a.port, iface=a.iface)
    try:
        srv.start()
        sysbench_prepare(a.port, a.table_size, a.tables)
        cap.start()
        before = srv.status()
        sb: dict = {}
        runs = 0
        while True:
            one = sysbench_run(a.port, a.threads, a.time, a.table_size, a.tables, events=a.events)
            runs += 1
            for k, v in one.items():
                if k != "raw":
                    sb[k] = sb.get(k, 0) + v
            if cap.out.stat().st_size >= a.min_bytes:
                break
        extra = {}
        if a.script:
            extra = scripted_sample_workload(srv)
        after = srv.status(threads=before["Threads_connected"])
        stats = cap.stop()
    finally:
        cap.stop()
        srv.stop()
    d = delta(before, after)
    res = {
        "server_version": subprocess.run(["mariadbd", "--version"], capture_output=True,
                                         text=True).stdout.strip(),
        "tcpdump": stats,
        "sysbench": sb,
        "sysbench_runs": runs,
        "sysbench_args": {"threads": a.threads, "time_per_run": a.time, "events": a.events,
                          "table_size": a.table_size, "tables": a.tables, "ps_mode": "auto"},
        "script": extra,
        "counters": {k: d[k] for k in COUNTERS if k in d},
        "pcap_bytes": Path(a.out).stat().st_size,
    }
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    if stats.get("dropped", 1) != 0:
        print(f"tcpdump dropped {stats.get('dropped')} packets", file=sys.stderr)
        return 1
    return 0


def scripted_sample_workload(srv: Server) -> dict:
    """A few text queries, one error, one SQL-level prepared statement (for samples/)."""
    n_ok = n_err = 0
    codes: dict[str, int] = {}
    with srv.connect() as c, c.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS sample (id INT PRIMARY KEY, v VARCHAR(32))")
        n_ok += 1
        for i in range(5):
            cur.execute("INSERT INTO sample VALUES (%s, %s)", (i, f"v{i}"))
            n_ok += 1
        cur.execute("SELECT id, v FROM sample WHERE id IN (1, 2, 3)")
        n_ok += 1
        try:
            cur.execute("SELECT * FROM no_such_table")
        except pymysql.err.MySQLError as e:
            n_err += 1
            codes[str(e.args[0])] = codes.get(str(e.args[0]), 0) + 1
        cur.execute("PREPARE s1 FROM 'SELECT v FROM sample WHERE id = ?'")
        cur.execute("SET @a = 3")
        cur.execute("EXECUTE s1 USING @a")
        cur.execute("DEALLOCATE PREPARE s1")
        cur.execute("DROP TABLE sample")
        n_ok += 5
    return {"queries_ok": n_ok, "errors": n_err, "errors_by_code": codes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sysbench-capture", help="capture a sysbench oltp_read_write run")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--workdir", required=True)
    s.add_argument("--out", required=True, help="pcap to write")
    s.add_argument("--json", required=True, help="counter deltas + sysbench counts")
    s.add_argument("--iface", default="lo")
    s.add_argument("--threads", type=int, default=4)
    s.add_argument("--time", type=float, default=5)
    s.add_argument("--events", type=int, default=0, help="stop after N transactions (0: by time)")
    s.add_argument("--table-size", type=int, default=10000)
    s.add_argument("--tables", type=int, default=1)
    s.add_argument("--min-bytes", type=int, default=0,
                   help="repeat the sysbench run until the capture has this many bytes")
    s.add_argument("--script", action="store_true", help="also run the small scripted workload")
    a = p.parse_args()
    if a.cmd == "sysbench-capture":
        return _cmd_sysbench_capture(a)
    return 2


if __name__ == "__main__":
    sys.exit(main())
