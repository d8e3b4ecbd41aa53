"""Runs `dbtap live` for the live-capture tests (test_live.py).

`Live` starts the binary, returns from start() only once dbtap has printed its one
"dbtap: capturing on ..." line on stderr (the kernel ring is open and filtered by then) plus a
short settle, drains stdout and stderr in threads (interval lines must never fill a pipe), and
stops it with a signal. Nothing here trusts dbtap: the truth is the servers' own counters and
the clients' own counts, read by the tests.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import harness

READY = "dbtap: capturing on "
SETTLE_S = 0.3


def die(msg: str) -> None:
    raise RuntimeError(msg)


def packet_source(args) -> list[str]:
    """The tests of the packet path pin `--source packet` (the default, `auto`, would also
    trace the servers' Unix sockets and TLS with eBPF, where the tests read their truth), unless
    a test names its source."""
    args = [str(a) for a in args]
    return args if "--source" in args else ["--source", "packet", *args]


class Live:
    """One `dbtap live` process."""

    def __init__(self, *args: str, binary: Path | None = None):
        self.binary = Path(binary) if binary else harness.dbtap_path()
        self.args = [str(a) for a in args]
        self.proc: subprocess.Popen | None = None
        self.out: list[bytes] = []
        self.err: list[str] = []
        self.ready = threading.Event()
        self.rc: int | None = None
        self._threads: list[threading.Thread] = []

    @property
    def cmd(self) -> list[str]:
        return [str(self.binary), "live", *packet_source(self.args)]

    # -- hooks for subclasses ------------------------------------------------------------------
    settle_s = SETTLE_S

    def on_err_line(self, line: str) -> bool:
        """A stderr line arrived; true once dbtap is capturing."""
        return line.startswith(READY)

    def not_ready(self) -> None:
        """dbtap exited or timed out before it was capturing (it has been killed)."""
        die(f"{' '.join(self.cmd)} did not start capturing (exit {self.rc}); "
            f"stderr: {''.join(self.err)!r}")

    def start(self, timeout: float = 15.0) -> "Live":
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

        def read_out():
            for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):
                self.out.append(chunk)

        def read_err():
            for line in iter(self.proc.stderr.readline, b""):
                s = line.decode(errors="replace")
                self.err.append(s)
                if self.on_err_line(s):
                    self.ready.set()

        for fn in (read_out, read_err):
            t = threading.Thread(target=fn, daemon=True)
            t.start()
            self._threads.append(t)
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                self.not_ready()
        time.sleep(self.settle_s)
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def status(self) -> dict[str, int]:
        """/proc/<pid>/status memory fields in kB (VmHWM, VmRSS, ...)."""
        out = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            m = re.match(r"(Vm\w+|Rss\w+):\s+(\d+) kB", line)
            if m:
                out[m.group(1)] = int(m.group(2))
        return out

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> "Live":
        if self.proc is None:
            return self
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                for t in self._threads:
                    t.join(5)
                die(f"dbtap live did not exit within {timeout}s of signal {sig}; "
                    f"stderr: {''.join(self.err)!r}")
        for t in self._threads:
            t.join(10)
        self.rc = self.proc.returncode
        self.proc = None
        return self

    def __enter__(self) -> "Live":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.stop(signal.SIGKILL)

    # -- output --------------------------------------------------------------------------------
    @property
    def stdout(self) -> str:
        return b"".join(self.out).decode(errors="replace")

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def json(self) -> dict:
        """The final digest of a `--format json` run (after the interval lines, if any)."""
        text = self.stdout
        i = text.find("{")
        if self.rc != 0 or i < 0:
            die(f"dbtap live exited {self.rc}; no JSON digest on stdout {text[-300:]!r}; "
                f"stderr: {self.stderr[-2000:]!r}")
        try:
            return json.loads(text[i:])
        except json.JSONDecodeError as e:
            die(f"dbtap live's final digest is not JSON ({e}): {text[i:i + 300]!r}")

    def listen_addr(self) -> str:
        m = re.search(r"metrics on http://([^/\s]+)/metrics", self.stderr)
        if not m:
            die(f"no metrics address in dbtap live's start line: {self.stderr!r}")
        return m.group(1)


def run_once(*args: str, binary: Path | None = None, timeout: float = 20.0,
             prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """dbtap live that is expected to stop by itself (an error, or --duration)."""
    b = Path(binary) if binary else harness.dbtap_path()
    return subprocess.run([*(prefix or []), str(b), "live", *packet_source(map(str, args))],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout, text=True)


def by_command(digest: dict) -> dict[str, int]:
    """{command: count} over every group of a digest (run with --limit 0: all groups listed)."""
    if digest.get("groups_omitted") or digest.get("queries_omitted"):
        die("the digest left groups out (run dbtap with --limit 0)")
    out: dict[str, int] = {}
    for g in digest["queries"]:
        if g.get("overflow"):
            die("the digest has an overflow group: per-command sums would be wrong")
        out[g["command"]] = out.get(g["command"], 0) + g["count"]
    return out


def protocols(digest: dict) -> set[str]:
    return {g["protocol"] for g in digest["queries"]}


LOSS_KEYS = ("truncated_packets", "ip_datagrams_incomplete", "malformed_packets", "read_errors",
             "gaps", "gap_bytes", "unrecognized_midstream",
             "not_tracked_segments", "responses_without_request", "unparsed_bytes",
             "encrypted_connections", "malformed_messages", "inflight_overflow", "unanswered",
             "resyncs")


def losses(capture: dict) -> dict[str, int]:
    return {k: capture[k] for k in LOSS_KEYS if capture.get(k)}


def parse_lines(stdout: str) -> tuple[list[str], list[dict], str]:
    """Interval output: (header columns, data rows as {column: cell}, what follows the lines).
    The lines end at the first blank line (text digest) or the first line starting with `{`
    (JSON digest); a leading `# ...` note (sampling) is skipped."""
    lines = stdout.split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith("# 1 connection in"):
        i += 1
    if i >= len(lines):
        die(f"no interval header in {stdout[:300]!r}")
    header = lines[i].split()
    rows = []
    i += 1
    while i < len(lines) and lines[i].strip() and not lines[i].startswith("{"):
        cells = lines[i].split()
        if len(cells) != len(header):
            die(f"interval line with {len(cells)} cells under {len(header)} columns: {lines[i]!r}")
        rows.append(dict(zip(header, cells)))
        i += 1
    return header, rows, "\n".join(lines[i:])


def nobody_copy() -> Path:
    """The binary copied where the unprivileged user can read and run it: a fresh directory
    directly under /tmp (pytest's tmp_path is under a 0700 directory), mode 755. The caller
    removes the directory."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="dbtap-live-nobody-", dir="/tmp"))
    os.chmod(d, 0o755)
    dst = d / "dbtap"
    dst.write_bytes(harness.dbtap_path().read_bytes())
    os.chmod(dst, 0o755)
    return dst


# -------------------------------------------------------------------------------------------------
# many concurrent connections

SWARM_CHILD = r'''
import errno, os, selectors, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(4096)
ls.setblocking(False)
sel = selectors.DefaultSelector()
clients, accepted = [], []
def accept_all():
    while True:
        try:
            c, _ = ls.accept()
        except BlockingIOError:
            return
        accepted.append(c)
deadline = time.monotonic() + 120
while len(clients) < n:
    pending = []
    for _ in range(min(500, n - len(clients))):
        s = socket.socket()
        # SO_LINGER 0: close() resets, leaving no TIME_WAIT behind
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.setblocking(False)
        rc = s.connect_ex(("127.0.0.1", port))
        if rc not in (0, errno.EINPROGRESS):
            sys.exit("connect: " + os.strerror(rc))
        pending.append(s)
        sel.register(s, selectors.EVENT_WRITE)
    left = len(pending)
    while left:
        accept_all()
        for key, _ in sel.select(0.05):
            s = key.fileobj
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                sys.exit("connect: " + os.strerror(err))
            sel.unregister(s)
            s.send(b"hello\r\n")
            left -= 1
        if time.monotonic() > deadline:
            sys.exit(f"{left} connects still pending")
    clients.extend(pending)
while len(accepted) < n:
    accept_all()
    if time.monotonic() > deadline:
        sys.exit(f"accepted {len(accepted)} of {n}")
    time.sleep(0.01)
# every byte sent has arrived
for c in accepted:
    c.setblocking(True)
    c.settimeout(10)
    got = b""
    while len(got) < 7:
        got += c.recv(64)
print("ready", len(clients), len(accepted), flush=True)
sys.stdin.read()
for s in clients + accepted:
    s.close()
print("closed", flush=True)
'''


class Swarm:
    """`n` concurrent TCP connections on each of `ports`, each sending 7 bytes to a listener
    that accepts them all. One child process per port holds both ends of its connections (the
    hard RLIMIT_NOFILE here is 20,000 per process, and CAP_SYS_RESOURCE is not ours to raise
    it). open() returns once every connection is established and its bytes were received;
    close() resets them all."""

    def __init__(self, ports: list[int], n: int):
        self.ports, self.n = ports, n
        self.procs: list[subprocess.Popen] = []

    def open(self, timeout: float = 180.0) -> None:
        import sys as _sys
        for p in self.ports:
            self.procs.append(subprocess.Popen(
                [_sys.executable, "-c", SWARM_CHILD, str(p), str(self.n)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
        for pr in self.procs:
            line = pr.stdout.readline()
            if not line.startswith("ready"):
                self.close()
                die(f"connection swarm child failed: {line!r} {pr.stderr.read()[-2000:]}")
            if line.split()[1:] != [str(self.n), str(self.n)]:
                self.close()
                die(f"connection swarm child: {line!r}")

    def close(self) -> None:
        for pr in self.procs:
            try:
                pr.stdin.close()
            except OSError:
                pass
        for pr in self.procs:
            try:
                pr.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait()
        self.procs = []
