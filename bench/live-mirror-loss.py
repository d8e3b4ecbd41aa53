#!/usr/bin/env python3
"""Repeats unpaced `dbtap replay --live` mirrors of sysbench oltp_read_only (MariaDB A onto B)
and prints, per run: A's and B's Com_* deltas (the servers' own counters), the report's
requests captured/sent and skips, the kernel's drops and the reassembly gaps (stderr warnings).

  DBTAP_BIN=target/debug/dbtap python3 bench/live-mirror-loss.py [RUNS] [SECONDS] [THREADS]

Ports 38672/38673, directories under tests/out/live_mirror_loss."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))

import harness  # noqa: E402
import replay_harness as rph  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "live_mirror_loss"
A, B = 38672, 38673
ROWS = 200
COUNTERS = ["Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close", "Com_select",
            "Com_begin", "Com_commit"]


def sysbench(port: int, seconds: int, threads: int) -> dict:
    args = harness.sysbench_args(port, threads, ROWS)
    args[1] = "oltp_read_only"
    r = subprocess.run(args + [f"--time={seconds}", "--events=0", "--report-interval=0", "run"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    return harness.parse_sysbench(r.stdout)


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    secs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    a = harness.Server(A, OUT / "my-a", tls=False)
    b = harness.Server(B, OUT / "my-b", tls=False)
    lost_runs = 0
    with rph.started_pair(a, b):
        harness.sysbench_prepare(A, ROWS)
        harness.sysbench_prepare(B, ROWS)
        for i in range(runs):
            want, got, rep, err, run = rph.mysql_mirrored(
                a, b, lambda: sysbench(A, secs, threads), keys=COUNTERS, timeout=20)
            f = rep["fidelity"]
            drops = re.findall(r"kernel dropped (\d+)", err)
            gaps = re.findall(r"missed (\d+) byte", err)
            short = {k[4:]: (want[k], got[k]) for k in COUNTERS}
            lost = any(want[k] != got[k] for k in COUNTERS)
            lost_runs += lost
            print(f"run {i}: {run['qps']:.0f} q/s {'LOST' if lost else 'ok'} A/B {short} "
                  f"captured {f.get('requests_captured')} sent {f.get('requests_sent')} "
                  f"skipped {f.get('skipped_requests')} bytes {f.get('skipped_bytes')} "
                  f"lag max {f.get('lag_max_ms')} ms drops {drops} gaps {gaps} load {os.getloadavg()[0]:.1f}", flush=True)
            if lost:
                print("  stderr:", err[-800:].replace("\n", " | "), flush=True)
    print(f"{lost_runs} of {runs} runs lost requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
