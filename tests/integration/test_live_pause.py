"""`dbtap live`'s reader pauses and its ring that grows with the traffic.

A private redis-server on 127.0.0.1:38550 takes pipelined SETs of 4 KiB values from a client
thread at a set rate; `dbtap live -i lo --port 38550` captures them. The truth is the server's
own `INFO commandstats` (read over its UNIX socket, never on the wire), the client's own count,
and the time the test held dbtap stopped (SIGSTOP .. SIGCONT).

Checked:
- a reader stopped for 1.2 s is reported: health `reader_pause_max_ms` at least 0.9 of the stop
  (and not absurdly more), the `pause_ms` line field and the /metrics gauges show it; with the
  default ring nothing is dropped and every SET is counted (server's count);
- the same stop with a 2 MiB ring (`--ring-mb 2`: fixed, it does not grow) drops packets, and the
  kernel's drop counter says so while the pause is reported the same way;
- at about 24 MB/s, a 32 MiB ring would last under 2 s: it grows (the stderr line, `ring_mb`),
  and across the switch from the old ring to the new one no packet is lost: dbtap's SET count
  equals the server's, with no TCP gap (a packet seen twice would be dropped by reassembly as a
  duplicate: loopback TCP retransmits under load, so duplicates are not counted here).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402
from live_harness import Live  # noqa: E402

PORT = 38550
HTTP = 38551
OUT = harness.REPO / "tests" / "out" / "live_pause"
VALUE = b"v" * 4096
BATCH = 32


@pytest.fixture(scope="module")
def redis_srv():
    if os.geteuid() != 0:
        pytest.fail("needs root (live capture); CI runs as root")
    OUT.mkdir(parents=True, exist_ok=True)
    srv = rh.RedisServer(PORT, OUT / "redis").start()
    try:
        yield srv
    finally:
        srv.stop()


class Blaster:
    """Pipelined SETs of 4 KiB at about `mb_per_s` on one connection, until stopped; counts the
    replies it read (each SET answered)."""

    def __init__(self, mb_per_s: float):
        self.rate = mb_per_s * 1e6
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", PORT))
            batch = b"".join(rh.resp_cmd("SET", f"k{i}", VALUE) for i in range(BATCH))
            start = time.monotonic()
            while not self.stop.is_set():
                s.sendall(batch)
                got = b""
                while got.count(b"\r\n") < BATCH:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise RuntimeError("redis closed the connection")
                    got += chunk
                self.sent += BATCH
                ahead = self.sent * len(VALUE) / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
            s.close()
        except BaseException as e:  # reported by finish()
            self.error = e

    def __enter__(self) -> "Blaster":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)
        if self.error is not None:
            raise self.error


def sets_counted(d: dict) -> int:
    return rh.dbtap_by_command(d).get("set", {}).get("count", 0)


def stopped(live: Live, seconds: float) -> float:
    """Holds dbtap stopped for `seconds`; returns how long it really was, in ms."""
    t0 = time.monotonic()
    os.kill(live.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(live.pid, signal.SIGCONT)
    return (time.monotonic() - t0) * 1000


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    assert m, f"{name} missing from /metrics:\n{text[-2000:]}"
    return float(m.group(1))


def run_with_stop(srv, extra: list[str], listen: bool) -> tuple[dict, float, Live, dict, str]:
    args = ["-i", "lo", "--port", str(PORT), "--interval", "1", "--format", "json",
            "--limit", "0", "--fields", "time,count,drops,pause_ms", *extra]
    if listen:
        args += ["--listen", f"127.0.0.1:{HTTP}"]
    metrics = ""
    before = srv.snapshot()
    with Live(*args) as live:
        with Blaster(2.0) as b:
            time.sleep(1.0)
            held_ms = stopped(live, 1.2)
            time.sleep(1.5)
        if listen:
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{HTTP}/metrics", timeout=10
                                             ).read().decode()
        time.sleep(0.3)
        live.stop()
    after = srv.snapshot()
    truth = rh.stats_delta(before, after)["commandstats"].get("set", {}).get("calls", 0)
    assert truth == b.sent, (truth, b.sent)
    d = live.json()
    return d, held_ms, live, {"set": truth}, metrics


def test_stopped_reader_is_reported_and_nothing_dropped(redis_srv):
    d, held_ms, live, truth, metrics = run_with_stop(redis_srv, [], listen=True)
    cap = d["capture"]
    pause = cap["reader_pause_max_ms"]
    assert 0.9 * held_ms <= pause <= held_ms + 1500, (pause, held_ms)
    assert cap["kernel_drops"] == 0, cap
    assert sets_counted(d) == truth["set"], (sets_counted(d), truth)
    assert cap["ring_mb"] == 32, cap
    # The interval lines: the interval the reader was stopped in shows the pause.
    lines = [l.split() for l in live.stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d ", l)]
    assert max(int(l[-1]) for l in lines) >= 0.9 * held_ms, live.stdout
    assert "pause_ms" in live.stdout
    assert metric(metrics, "dbtap_capture_reader_pause_max_seconds") >= 0.9 * held_ms / 1000
    assert metric(metrics, "dbtap_capture_ring_bytes") == 32 << 20
    assert "dbtap_capture_reader_pause_seconds " in metrics


def test_small_fixed_ring_drops_and_says_why(redis_srv):
    d, held_ms, live, truth, _ = run_with_stop(redis_srv, ["--ring-mb", "2"], listen=False)
    cap = d["capture"]
    assert cap["ring_mb"] == 2, cap
    assert cap["kernel_drops"] > 0, cap
    assert cap["reader_pause_max_ms"] >= 0.9 * held_ms, (cap, held_ms)
    # Lost packets lose requests: fewer counted than the server answered.
    assert sets_counted(d) < truth["set"], (sets_counted(d), truth)
    assert "grown" not in live.stderr


def test_ring_grows_without_losing_or_repeating_a_packet(redis_srv):
    before = redis_srv.snapshot()
    args = ["-i", "lo", "--port", str(PORT), "--interval", "0", "--format", "json", "--limit", "0"]
    with Live(*args) as live:
        with Blaster(24.0) as b:
            time.sleep(4.0)
        time.sleep(0.3)
        live.stop()
    after = redis_srv.snapshot()
    truth = rh.stats_delta(before, after)["commandstats"].get("set", {}).get("calls", 0)
    assert truth == b.sent
    d = live.json()
    cap = d["capture"]
    grown = re.search(r"capture ring 0 grown from 32 to (\d+) MiB", live.stderr)
    assert grown, live.stderr
    assert cap["ring_mb"] == int(grown.group(1)) > 32, cap
    assert cap["kernel_drops"] == 0, cap
    # (Duplicate segments are no evidence: loopback TCP retransmits under load, with a fixed
    # ring too; a packet lost in the switch would be a gap and a missing SET.)
    assert cap["gaps"] == 0, cap
    assert sets_counted(d) == truth, (sets_counted(d), truth, b.sent)
