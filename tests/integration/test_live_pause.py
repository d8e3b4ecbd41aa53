"""`dbtap live` reports its packet reader's pauses: how long the capture ring went unread.

A private redis-server on 127.0.0.1:38600 takes pipelined SETs of 4 KiB values from a client
thread at about 2 MB/s; `dbtap live -i lo --port 38600` captures them. The truth is the server's
own `INFO commandstats` (read over its UNIX socket, never on the wire), the client's own count,
and the time the test held dbtap stopped (SIGSTOP .. SIGCONT, measured by the test).

Checked:
- a reader stopped for 1.2 s with the default 32 MiB ring: the health block's
  `reader_pause_max_ms` is at least 0.9 of the stop (and not absurdly more), `reader_long_pauses`
  counts it, the `pause_ms` line field of the interval shows it, /metrics has the gauges and the
  counter (and `promtool check metrics` is clean); nothing is dropped and every SET is counted;
- the same stop with a 2 MiB ring (`--ring-mb 2`) drops packets: the kernel's drop counter and
  the text health block's reader line show the drops and the pause together, and fewer SETs are
  counted than the server answered;
- the same traffic without a stop: no drops, every SET counted, no pause anywhere near a stop
  (under 500 ms: the machine is shared, so a short scheduling delay is allowed);
- the capture thread runs at SCHED_FIFO by default as root (`--reader-priority auto`), and at
  the normal policy with `--reader-priority normal` (read from /proc, not from dbtap).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402
from live_harness import Live  # noqa: E402

PORT = 38600
HTTP = 38601
OUT = harness.REPO / "tests" / "out" / "live_pause"
BATCH = 32
STOP_S = 1.2
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.fixture(scope="module")
def redis_srv():
    yield from rh.live_capture_server(PORT, OUT)


def held_stopped(live: Live, seconds: float) -> float:
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


def run(srv, extra: list[str], stop_s: float, listen: bool = False, fmt: str = "json"):
    """dbtap live under 2 MB/s of SETs for about 4 s, stopped for `stop_s` in the middle (0: not
    stopped). Returns (live, held ms, the server's SET count, /metrics text)."""
    args = ["-i", "lo", "--port", str(PORT), "--interval", "1", "--format", fmt,
            "--limit", "0", "--fields", "time,count,drops,pause_ms", *extra]
    if listen:
        args += ["--listen", f"127.0.0.1:{HTTP}"]
    metrics, held_ms = "", 0.0
    before = srv.snapshot()
    with Live(*args) as live:
        with rh.PacedSets(PORT, 2.0e6, BATCH) as b:
            time.sleep(1.0)
            if stop_s:
                held_ms = held_stopped(live, stop_s)
            else:
                time.sleep(STOP_S)
            time.sleep(1.5)
        if listen:
            # The interval that saw the pause has been published by now (1 s intervals).
            time.sleep(1.2)
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{HTTP}/metrics", timeout=10
                                             ).read().decode()
        time.sleep(0.3)
        live.stop()
    after = srv.snapshot()
    truth = rh.stats_delta(before, after)["commandstats"].get("set", {}).get("calls", 0)
    assert truth == b.answered, (truth, b.answered)
    return live, held_ms, truth, metrics


def sets_counted(d: dict) -> int:
    return rh.dbtap_by_command(d).get("set", {}).get("count", 0)


def interval_pauses(stdout: str) -> list[int]:
    """The pause_ms column (the last) of the interval lines."""
    return [int(l.split()[-1]) for l in stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d ", l)]


def test_stopped_reader_is_reported_and_nothing_dropped(redis_srv):
    live, held_ms, truth, metrics = run(redis_srv, [], STOP_S, listen=True)
    d = live.json()
    cap = d["capture"]
    pause = cap["reader_pause_max_ms"]
    assert 0.9 * held_ms <= pause <= held_ms + 1500, (pause, held_ms)
    assert cap["reader_long_pauses"] >= 1, cap
    assert cap["ring_mb"] == 32, cap
    assert cap["kernel_drops"] == 0, cap
    assert sets_counted(d) == truth, (sets_counted(d), truth)
    # The interval the reader was stopped in shows the pause in its line.
    assert "pause_ms" in live.stdout
    assert max(interval_pauses(live.stdout)) >= 0.9 * held_ms, live.stdout
    assert metric(metrics, "dbtap_capture_reader_pause_max_seconds") >= 0.9 * held_ms / 1000
    assert metric(metrics, "dbtap_capture_reader_long_pauses_total") >= 1
    assert metric(metrics, "dbtap_capture_ring_bytes") == 32 << 20
    assert "# TYPE dbtap_capture_reader_pause_seconds gauge" in metrics
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=metrics.encode(),
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == b"", r


def test_small_ring_drops_while_stopped_and_the_health_says_why(redis_srv):
    live, held_ms, truth, _ = run(redis_srv, ["--ring-mb", "2"], STOP_S, fmt="text")
    out = live.stdout
    (OUT / "small_ring.txt").write_text(out)
    assert live.rc == 0, live.stderr
    m = re.search(r"!! kernel_drops +([\d,]+)", out)
    assert m and int(m.group(1).replace(",", "")) > 0, out[-3000:]
    m = re.search(r"capture reader: longest pause ([\d,]+) ms, ([\d,]+) pauses? of 100 ms or "
                  r"more, ring 2 MiB: dbtap did not read the ring", out)
    assert m, out[-3000:]
    assert int(m.group(1).replace(",", "")) >= 0.9 * held_ms, (m.group(0), held_ms)
    assert int(m.group(2).replace(",", "")) >= 1
    # The interval line of the stop shows drops and the pause side by side.
    rows = [l.split() for l in out.splitlines() if re.match(r"\d\d:\d\d:\d\d ", l)]
    assert any(int(r[-2]) > 0 and int(r[-1]) >= 0.9 * held_ms for r in rows), out[:3000]
    # Lost packets lose requests: fewer counted than the server answered.
    counted = re.search(r"(?m)^# Overall: ([\d,]+) queries", out)
    assert counted, out[-3000:]
    assert 0 < int(counted.group(1).replace(",", "")) < truth, (counted.group(0), truth)


def test_unstopped_reader_drops_nothing_and_pauses_briefly(redis_srv):
    live, _, truth, _ = run(redis_srv, [], 0)
    d = live.json()
    cap = d["capture"]
    assert cap["kernel_drops"] == 0, cap
    assert sets_counted(d) == truth, (sets_counted(d), truth)
    assert cap["reader_pause_max_ms"] < 500, cap
    assert max(interval_pauses(live.stdout)) < 500, live.stdout


def capture_thread_policy(pid: int) -> int:
    """The scheduling policy (proc(5) stat field 41: 0 normal, 1 SCHED_FIFO) of dbtap's
    capture thread."""
    for t in Path(f"/proc/{pid}/task").iterdir():
        if (t / "comm").read_text().strip() == "dbtap-capture-0":
            stat = (t / "stat").read_text()
            return int(stat[stat.rindex(")") + 2:].split()[38])
    raise AssertionError("no dbtap-capture-0 thread")


@pytest.mark.parametrize("extra,policy", [([], 1), (["--reader-priority", "fifo"], 1),
                                          (["--reader-priority", "normal"], 0)])
def test_reader_priority(redis_srv, extra, policy):
    with Live("-i", "lo", "--port", str(PORT), "--interval", "0", *extra) as live:
        time.sleep(0.3)
        assert capture_thread_policy(live.pid) == policy
        live.stop()
    assert live.rc == 0 and "keeps its priority" not in live.stderr, live.stderr
