"""Replay throughput at --max for Redis beside redis-benchmark's own rate on the captured
workload (see bench/replay.sh). Servers: private redis-server A (captured, port 38440) and B
(the target, port 38441), via tests/integration/redis_harness.py. Counts are checked against
B's INFO commandstats, not taken from dbtap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))

import redis_harness as rh  # noqa: E402

DBTAP = os.environ.get("DBTAP_BIN", str(REPO / "target" / "release" / "dbtap"))
OUT = REPO / "bench" / "out" / "replay"
A, B = 38440, 38441
TESTS = "set,get,incr,lpush"


def run_workload(a, name, n, pipeline, clients):
    a.reset_stats()
    a.socket_calls.clear()
    cap = rh.Tcpdump(OUT / f"{name}.pcap", A)
    try:
        cap.start()
        before = a.snapshot()
        t0 = time.monotonic()
        rh.benchmark_run(a, TESTS, n, pipeline=pipeline, clients=clients)
        wall = time.monotonic() - t0
    finally:
        stats = cap.stop()
    after = a.snapshot()
    rh.check_dropped(stats)
    want = rh.wire_requests(rh.stats_delta(before, after), a.socket_calls)
    total = sum(v["requests"] for v in want.values())
    return cap.out, total, wall


def replay(b, pcap):
    b.admin().flushall()
    b.reset_stats()
    before = b.snapshot()
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %e", DBTAP, "replay", str(pcap),
                        "--port", str(A), "--target", f"127.0.0.1:{B}", "--max",
                        "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, check=True)
    after = b.snapshot()
    got = rh.wire_requests(rh.stats_delta(before, after), b.socket_calls)
    user, sys_, elapsed = (float(x) for x in r.stderr.strip().splitlines()[-1].split())
    fid = json.loads(r.stdout)["fidelity"]
    return sum(v["requests"] for v in got.values()), fid, user + sys_, elapsed


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    n = int(os.environ.get("REPLAY_BENCH_N", "100000"))
    rows = []
    with rh.RedisServer(A, OUT / "a") as a, rh.RedisServer(B, OUT / "b") as b:
        for name, p, c in (("P16-c8", 16, 8), ("P1-c8", 1, 8)):
            pcap, total, bwall = run_workload(a, name, n, p, c)
            on_b, fid, cpu, elapsed = replay(b, pcap)
            if on_b != total:
                print(f"{name}: B counted {on_b} requests, A {total}", file=sys.stderr)
                return 1
            rows.append((name, total, total / bwall, fid["requests_sent"] / fid["wall_s"],
                         fid["wall_s"], elapsed, cpu / total * 10000))
    print("| workload (redis-benchmark -t %s -n %d) | requests | redis-benchmark req/s "
          "| replay --max req/s (replay phase) | replay wall s | dbtap process s "
          "| dbtap CPU s per 10k requests |" % (TESTS, n))
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %.0f | %.0f | %.2f | %.2f | %.3f |" % r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
