"""`dbtap replay --live` mirroring sysbench at its full rate, and what a lagging mirror loses:
real MariaDB servers A and B on lo, real sysbench `oltp_read_only` (2 threads, prepared
statements).

- Unpaced (sysbench as fast as this machine lets it, 3-15k queries/s): in each of 2 runs of
  4 s, B's Com_* deltas equal A's, every captured request sent, no reassembly gap. (Before the
  sessions' queues were bounded by `--read-ahead` bytes, a queue of 4096 batches per session
  overflowed whenever the mirror fell behind for a moment, and 3 of 4 such runs lost requests:
  bench/live-mirror-loss.py.)
- A loss provoked on purpose: B stopped (SIGSTOP) for 2 s while the mirror runs with a
  256 KiB `--read-ahead`: the report's `live_queue_full` is exactly what B's
  Com_stmt_execute is short of A's, and the warning says it.

Truth: the servers' own SHOW GLOBAL STATUS deltas, read over their Unix sockets (not captured,
not replayed). Ports 38670-38671; server directories under tests/out/replay_live_unpaced.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import replay_harness as rph  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "replay_live_unpaced"
MY_A, MY_B = 38670, 38671
ROWS = 200
COUNTERS = ["Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close", "Com_select",
            "Com_begin", "Com_commit"]


def need_capture() -> None:
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
    except (PermissionError, OSError) as e:
        pytest.skip(f"no packet capture here: {e}")


def sysbench(port: int, seconds: int, rate: int = 0) -> dict:
    args = harness.sysbench_args(port, 2, ROWS)
    args[1] = "oltp_read_only"  # prepared statements (--db-ps-mode=auto)
    r = subprocess.run(args + [f"--time={seconds}", "--events=0", f"--rate={rate}",
                               "--report-interval=0", "run"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    return harness.parse_sysbench(r.stdout)


@pytest.fixture(scope="module")
def servers():
    need_capture()
    a = harness.Server(MY_A, OUT / "my-a", tls=False)
    b = harness.Server(MY_B, OUT / "my-b", tls=False)
    with rph.started_pair(a, b):
        harness.sysbench_prepare(MY_A, ROWS)
        harness.sysbench_prepare(MY_B, ROWS)
        yield a, b


def mirrored(a, b, work, *args: str, keys=COUNTERS) -> tuple[dict, dict, dict, str]:
    """Runs `work` on A under a mirror onto B; returns A's and B's deltas (B's once they equal
    A's on `keys`, or after 30 s), the report and the mirror's stderr."""
    want, got, rep, err, _ = rph.mysql_mirrored(a, b, work, *args, keys=keys)
    return want, got, rep, err


@pytest.mark.parametrize("run", [0, 1])
def test_unpaced_sysbench_is_mirrored_without_loss(servers, run):
    a, b = servers
    out = {}
    want, got, rep, err = mirrored(a, b, lambda: out.update(sysbench(MY_A, 4)))
    f = rep["fidelity"]
    print(f"run {run}: sysbench {out['qps']:.0f} queries/s, {want['Com_stmt_execute']} "
          f"executes, lag max {f.get('lag_max_ms')} ms, load {os.getloadavg()[0]:.1f}")
    assert want["Com_stmt_execute"] > 2000, want
    assert {k: got[k] for k in COUNTERS} == {k: want[k] for k in COUNTERS}, (f, err[-1500:])
    assert f["skipped_requests"] == {}, f
    assert "capture_gap" not in f["skipped_bytes"], f
    assert f["requests_sent"] == f["requests_captured"], f
    assert "kernel dropped" not in err and "missed" not in err, err


def test_a_stopped_target_loses_what_the_report_counts(servers):
    """sysbench paced at 100 transactions/s for 6 s; B stopped from 1.5 s to 3.5 s. The
    mirror's queues fill (256 KiB) and the rest of those 2 s is dropped; B answers again, the
    queue drains, and the end of the run (the statements' closes) comes through."""
    a, b = servers

    def work():
        t = threading.Timer(1.5, os.kill, (b.proc.pid, signal.SIGSTOP))
        t.start()
        c = threading.Timer(3.5, os.kill, (b.proc.pid, signal.SIGCONT))
        c.start()
        try:
            sysbench(MY_A, 6, rate=100)
        finally:
            t.join()
            c.join()
            os.kill(b.proc.pid, signal.SIGCONT)

    keys = ["Com_stmt_prepare", "Com_stmt_close"]
    want, got, rep, err = mirrored(a, b, work, "--read-ahead", "256K", keys=keys)
    f = rep["fidelity"]
    lost = f["skipped_requests"].get("live_queue_full", 0)
    print(f"A {want['Com_stmt_execute']} executes, B {got['Com_stmt_execute']}, "
          f"live_queue_full {lost}")
    assert lost > 500, f
    assert {k: got[k] for k in keys} == {k: want[k] for k in keys}, f
    assert want["Com_stmt_execute"] - got["Com_stmt_execute"] == lost, (f, err[-1500:])
    assert f["skipped_requests"] == {"live_queue_full": lost}, f
    assert f["requests_sent"] + lost == f["requests_captured"], f
    assert f"{lost} request(s) not mirrored (live_queue_full)" in err, err
