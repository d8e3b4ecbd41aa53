"""A MongoDB wire-protocol server that checks SCRAM logins, for the replay's MongoDB login tests.

The server: FerretDB 1.24.2 (tests/setup.sh builds it into tests/out/ferretdb-v1.24.2/ferretdb from
the Go module proxy), with its SQLite backend in a data directory of its own and
`--test-enable-new-auth`: users live in admin.system.users with SCRAM-SHA-256 and SCRAM-SHA-1
credentials (createUser), every command but the handshake and the SASL ones is refused to a
connection that has not logged in (code 13, Unauthorized), and a wrong password fails the
conversation (code 18). An administrator is created at start (`--setup-username`).

Its own counters are the truth: the Prometheus text on its debug address,
`ferretdb_client_requests_total{command,opcode}` (every command received) and
`ferretdb_client_responses_total{command,result,...}` (`ok`, `Unauthorized`,
`AuthenticationFailed`, ...), read over HTTP, so reading them adds no MongoDB command.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import harness
import mongo_harness as mh

BIN = harness.REPO / "tests" / "out" / "ferretdb-v1.24.2" / "ferretdb"
ADMIN, ADMIN_PW = "admin", "adminpw"

_SAMPLE = re.compile(r'^(ferretdb_client_(?:requests|responses)_total)\{([^}]*)\}\s+(\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


class FerretServer:
    """FerretDB on 127.0.0.1:port (metrics on debug_port), data and pidfile under workdir."""

    def __init__(self, port: int, debug_port: int, workdir: Path, postgresql_url: str = ""):
        """With `postgresql_url`: FerretDB's PostgreSQL backend with its older authentication
        instead, where a connection logs in by PLAIN and FerretDB connects to PostgreSQL as that
        user with that password (PostgreSQL checks it)."""
        self.postgresql_url = postgresql_url
        self.port = port
        self.debug_port = debug_port
        self.workdir = Path(workdir).resolve()
        self.data = self.workdir / "data"
        self.pidfile = self.workdir / "ferretdb.pid"
        self.log = self.workdir / "ferretdb.log"
        self.proc: subprocess.Popen | None = None

    def _kill_leftover(self) -> None:
        try:
            pid = int(self.pidfile.read_text().strip())
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            return
        if "ferretdb" in cmd and str(self.workdir) in cmd:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.3)

    def start(self) -> "FerretServer":
        if not BIN.exists():
            harness.die(f"{BIN} missing: run tests/setup.sh (it builds FerretDB with Go)")
        self._kill_leftover()
        if self.data.exists():
            for f in self.data.iterdir():
                f.unlink()
        self.data.mkdir(parents=True, exist_ok=True)
        harness.wait_port_free(self.port)
        harness.wait_port_free(self.debug_port)
        args = [str(BIN), f"--listen-addr=127.0.0.1:{self.port}",
                f"--debug-addr=127.0.0.1:{self.debug_port}", f"--state-dir={self.workdir}",
                "--telemetry=disable", "--log-level=warn"]
        if self.postgresql_url:
            args += ["--handler=postgresql", f"--postgresql-url={self.postgresql_url}"]
        else:
            args += ["--handler=sqlite", f"--sqlite-url=file:{self.data}/", "--test-enable-new-auth",
                     f"--setup-username={ADMIN}", f"--setup-password={ADMIN_PW}",
                     "--setup-database=admin"]
        self.proc = subprocess.Popen(args, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.pidfile.write_text(f"{self.proc.pid}\n")
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                harness.die(f"ferretdb exited ({self.proc.returncode}); log: {self.log}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                self.counts()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    harness.die(f"ferretdb not listening after 60 s; log: {self.log}")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None:
            return
        harness.end_process(self.proc, 20, self.pidfile)
        self.proc = None

    def counts(self) -> dict[tuple[str, str], int]:
        """The server's own counters: ("requests", command) and (result, command) -> count."""
        url = f"http://127.0.0.1:{self.debug_port}/debug/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        out: dict[tuple[str, str], int] = collections.Counter()
        for line in text.splitlines():
            m = _SAMPLE.match(line)
            if not m:
                continue
            labels = dict(_LABEL.findall(m.group(2)))
            kind = "requests" if m.group(1).endswith("requests_total") else labels.get("result", "")
            out[(kind, labels.get("command", ""))] += int(float(m.group(3)))
        return out

    def __enter__(self) -> "FerretServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def delta(before: dict, after: dict) -> dict[tuple[str, str], int]:
    """The counters that moved between two readings."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def require() -> None:
    """Skips without FerretDB (fails instead under the whole suite, tests/run.sh, which sets
    DBTAP_REQUIRE_CAPTURE=1: there a missing server is a failed install step); fails without the
    pymongo venv."""
    import pytest
    if not BIN.exists():
        why = (f"{BIN} missing: tests/setup.sh builds FerretDB with Go (offline, or without "
               f"Go, it cannot)")
        if os.environ.get("DBTAP_REQUIRE_CAPTURE") == "1":
            pytest.fail(why)
        pytest.skip(f"{why} (set DBTAP_REQUIRE_CAPTURE=1 to fail instead)")
    if not mh.VENV_PY.exists():
        pytest.fail(f"{mh.VENV_PY} missing: run tests/setup.sh (pymongo venv)")


def run_client(script: str, *args: str) -> dict:
    """Runs a pymongo client script in the venv; its JSON output (the client's own counts)."""
    r = subprocess.run([str(mh.VENV_PY), "-c", script, *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)
