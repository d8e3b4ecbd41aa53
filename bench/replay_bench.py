"""Replay throughput at --max per protocol beside the original clients' rate (see
bench/replay.sh). Each workload runs on a private server A under tcpdump on lo; the capture is
replayed with --max onto a private server B holding the same data. Counts are checked against
the servers' own statistics (never dbtap's): Redis INFO commandstats, MariaDB SHOW GLOBAL
STATUS Com_* deltas, PostgreSQL pg_stat_statements calls, the MongoDB test server's
dbtapCommandCounts. A workload whose B counts differ from A's fails the run.

Columns: requests (what dbtap framed and sent; B's counters equal A's), queries (the capture's
events, as `dbtap events` counts them: the unit of the rates), the capture's peak rate (most
queries started in one 1 s window), the client's average rate (queries over the client's own
wall time, its start and end included), the replay's rate at --max (queries over the replay's
wall time, reading the capture excluded), its ratio to the peak, and dbtap's CPU (user+sys of
the whole process, reading included) per 10k queries."""

from __future__ import annotations

import collections
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
# REPLAY_BENCH_AB=/other/dbtap: every capture is also replayed by that binary, right after
# DBTAP's replay of it (same servers, same capture: an interleaved A/B), in its own row.
AB = os.environ.get("REPLAY_BENCH_AB")
BINARIES = [(DBTAP, "")] + ([(AB, " [REPLAY_BENCH_AB]")] if AB else [])
OUT = REPO / "bench" / "out" / "replay"
SECONDS = int(os.environ.get("REPLAY_BENCH_SECONDS", "5"))
PORTS = {"redis": (38630, 38631), "mysql": (38632, 38633), "postgres": (38634, 38635),
         "mongodb": (38636, 38637)}
REDIS_TESTS = "set,get,incr,lpush"


def fail(msg: str) -> None:
    print(msg, file=sys.stderr)
    sys.exit(1)


def peak_rate(pcap: Path, port: int) -> tuple[int, float]:
    """(requests, most requests started in one 1 s window) of the capture, from dbtap events."""
    r = subprocess.run([DBTAP, "events", str(pcap), "--port", str(port), "--format", "ndjson"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    starts = [json.loads(line)["start_ns"] for line in r.stdout.splitlines() if line.strip()]
    if not starts:
        return 0, 0.0
    t0 = min(starts)
    per_s = collections.Counter((t - t0) // 1_000_000_000 for t in starts)
    return len(starts), float(max(per_s.values()))


def replay(binary: str, pcap: Path, a_port: int, b_port: int, *extra: str) -> tuple[dict, float]:
    """Runs dbtap replay --max; (fidelity, user+sys CPU seconds of the process)."""
    # REPLAY_BENCH_PERF=1: each replay under `perf record -g` (bench/out/replay/perf-CAPTURE.data).
    perf = ["perf", "record", "-g", "-q", "-o", str(OUT / f"perf-{pcap.stem}.data"), "--"] \
        if os.environ.get("REPLAY_BENCH_PERF") else []
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %e %w", *perf, binary, "replay", str(pcap),
                        "--port", str(a_port), "--target", f"127.0.0.1:{b_port}", "--max",
                        "--format", "json", *extra], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail(f"dbtap replay failed: {r.stderr[-2000:]}")
    user, sys_, _, waits = (float(x) for x in r.stderr.strip().splitlines()[-1].split())
    fid = json.loads(r.stdout)["fidelity"]
    # Voluntary context switches of the process (its threads' waits: for replies, mostly).
    fid["_waits"] = waits
    if fid["requests_sent"] != fid["requests_framed"] or fid["skipped_requests"]:
        fail(f"replay did not send every framed request: {fid}")
    return fid, user + sys_


def row(name, pcap, port, client_wall, fid, cpu):
    """Rates are in the capture's queries (dbtap events: a PostgreSQL extended-protocol query
    is one, though its Parse/Bind/Describe/Execute/Sync are five requests sent)."""
    events, peak = peak_rate(pcap, port)
    rate = events / fid["wall_s"]
    return (name, fid["requests_sent"], events, peak, events / client_wall, rate,
            rate / peak if peak else 0.0, cpu / events * 10000, fid["_waits"] / events)


# -- Redis -----------------------------------------------------------------------------------

def bench_redis() -> list[tuple]:
    n = int(os.environ.get("REPLAY_BENCH_N", "100000"))
    a_port, b_port = PORTS["redis"]
    rows = []
    with rh.RedisServer(a_port, OUT / "redis-a") as a, rh.RedisServer(b_port, OUT / "redis-b") as b:
        for name, p, c in (("redis-benchmark -P 16 -c 8", 16, 8),
                           ("redis-benchmark -P 1 -c 8", 1, 8)):
            a.reset_stats()
            a.socket_calls.clear()
            cap = rh.Tcpdump(OUT / f"redis-P{p}.pcap", a_port)
            try:
                cap.start()
                before = a.snapshot()
                t0 = time.monotonic()
                rh.benchmark_run(a, REDIS_TESTS, n, pipeline=p, clients=c)
                wall = time.monotonic() - t0
            finally:
                stats = cap.stop()
            rh.check_dropped(stats)
            want = rh.wire_requests(rh.stats_delta(before, a.snapshot()), a.socket_calls)
            for binary, label in BINARIES:
                b.admin().flushall()
                b.reset_stats()
                bb = b.snapshot()
                fid, cpu = replay(binary, cap.out, a_port, b_port)
                got = rh.wire_requests(rh.stats_delta(bb, b.snapshot()), b.socket_calls)
                if got != want:
                    fail(f"{name}: B counted {got}, A {want}")
                rows.append(row(name + label, cap.out, a_port, wall, fid, cpu))
    return rows


# -- MariaDB ---------------------------------------------------------------------------------

MY_COUNTERS = ["Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close", "Com_select",
               "Com_insert", "Com_update", "Com_delete", "Com_begin", "Com_commit"]


def bench_mysql() -> list[tuple]:
    import harness
    a_port, b_port = PORTS["mysql"]
    a = harness.Server(a_port, OUT / "my-a", tls=False)
    b = harness.Server(b_port, OUT / "my-b", tls=False)
    rows = []
    try:
        a.start()
        b.start()
        harness.sysbench_prepare(a_port, 1000)
        harness.sysbench_prepare(b_port, 1000)
        for attempt in range(3):  # tcpdump -U may drop on a loaded machine: capture again
            cap = harness.Tcpdump(OUT / "mysql.pcap", a_port)
            try:
                cap.start()
                before = a.status()
                t0 = time.monotonic()
                args = harness.sysbench_args(a_port, 4, 1000)
                args[1] = "oltp_read_only"  # prepared statements (--db-ps-mode=auto)
                subprocess.run(args + [f"--time={SECONDS}", "--events=0", "--report-interval=0",
                                       "run"], check=True, stdout=subprocess.DEVNULL)
                wall = time.monotonic() - t0
                after = a.status(threads=before["Threads_connected"])
            finally:
                stats = cap.stop()
            if not stats.get("dropped"):
                break
            print(f"mysql: tcpdump dropped packets, again: {stats}", file=sys.stderr)
        else:
            fail(f"tcpdump dropped packets: {stats}")
        want = harness.delta(before, after)
        for binary, label in BINARIES:
            bb = b.status()
            fid, cpu = replay(binary, cap.out, a_port, b_port, "--user", harness.USER,
                              "--password", harness.PASSWORD)
            got = harness.delta(bb, b.status(threads=bb["Threads_connected"]))
            w = {k: want[k] for k in MY_COUNTERS}
            g = {k: got[k] for k in MY_COUNTERS}
            if g != w:
                fail(f"mysql: B counted {g}, A {w}")
            rows.append(row("sysbench oltp_read_only --threads 4 (prepared)" + label, cap.out,
                            a_port, wall, fid, cpu))
    finally:
        a.stop()
        b.stop()
    return rows


# -- PostgreSQL ------------------------------------------------------------------------------

def bench_postgres() -> list[tuple]:
    import pg_harness as ph
    a_port, b_port = PORTS["postgres"]
    rows = []
    with ph.PgServer(a_port, OUT / "pg-a") as a, ph.PgServer(b_port, OUT / "pg-b") as b:
        ph.pgbench_init(a)
        ph.pgbench_init(b)
        for mode, extra in (("extended", ["-S"]), ("extended", [])):
            a.pgss_reset()
            cap = ph.Tcpdump(OUT / f"pg-{mode}{''.join(extra)}.pcap", a_port)
            try:
                cap.start()
                t0 = time.monotonic()
                env = a.env()
                subprocess.run([str(ph.PGBIN / "pgbench"), "-n", "-M", mode, "-c", "4", "-j", "4",
                                "-T", str(SECONDS), *extra, ph.DB], env=env, check=True,
                               stdout=subprocess.DEVNULL)
                wall = time.monotonic() - t0
                a.wait_idle()
            finally:
                stats = cap.stop()
            ph.check_dropped(stats)
            want = {q: e["calls"] for q, e in a.pgss().items()}
            for binary, label in BINARIES:
                b.pgss_reset()
                fid, cpu = replay(binary, cap.out, a_port, b_port)
                b.wait_idle()
                got = {q: e["calls"] for q, e in b.pgss().items()}
                if got != want:
                    fail(f"postgres: B's pg_stat_statements calls {got}, A's {want}")
                name = f"pgbench -M {mode} -c 4 {' '.join(extra) or '(tpcb)'}"
                rows.append(row(name + label, cap.out, a_port, wall, fid, cpu))
    return rows


# -- MongoDB ---------------------------------------------------------------------------------

MONGO_WORK = r"""
import json, sys, time, pymongo
port, mode, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
c = pymongo.MongoClient("127.0.0.1", port, maxPoolSize=1, directConnection=True,
                        serverSelectionTimeoutMS=20000)
co = c["dbtapwl"]["users"]
out = {"finds": 0, "docs": 0}
if mode == "seed":
    co.drop()
    co.insert_many([{"_id": i, "a": i % 7} for i in range(200)])
else:
    end = time.monotonic() + secs
    while time.monotonic() < end:
        out["docs"] += sum(1 for _ in co.find({"a": {"$lt": 5}}, batch_size=20))
        out["docs"] += sum(1 for _ in co.find({"_id": out["finds"] % 200}))
        out["finds"] += 2
c.close()
print(json.dumps(out))
"""


def bench_mongodb() -> list[tuple]:
    import mongo_harness as mh
    import test_replay_mongo as trm
    a_port, b_port = PORTS["mongodb"]
    trm.DB = "dbtapwl"
    rows = []

    def venv(port, mode, secs=0.0):
        r = subprocess.run([str(mh.VENV_PY), "-c", MONGO_WORK, str(port), mode, str(secs)],
                           stdout=subprocess.PIPE, text=True, check=True)
        return json.loads(r.stdout)

    with mh.MongoServer(a_port, OUT / "mongo-a") as _a, mh.MongoServer(b_port, OUT / "mongo-b"):
        venv(a_port, "seed")
        venv(b_port, "seed")
        before = trm.counts(a_port)
        cap = mh.Tcpdump(OUT / "mongo.pcap", a_port)
        try:
            cap.start()
            t0 = time.monotonic()
            procs = [subprocess.Popen([str(mh.VENV_PY), "-c", MONGO_WORK, str(a_port), "work",
                                       str(SECONDS)], stdout=subprocess.PIPE, text=True)
                     for _ in range(4)]
            for p in procs:
                p.communicate()
                if p.returncode != 0:
                    fail("pymongo workload failed")
            wall = time.monotonic() - t0
        finally:
            stats = cap.stop()
        mh.check_dropped(stats)
        want = trm.delta(before, trm.counts(a_port))
        for binary, label in BINARIES:
            bb = trm.counts(b_port)
            fid, cpu = replay(binary, cap.out, a_port, b_port)
            got = trm.delta(bb, trm.counts(b_port))
            if got != want:
                fail(f"mongodb: B counted {got}, A {want}")
            rows.append(row("pymongo 4 clients, find + getMore (batch 20)" + label, cap.out,
                            a_port, wall, fid, cpu))
    return rows


BENCHES = {"redis": bench_redis, "mysql": bench_mysql, "postgres": bench_postgres,
           "mongodb": bench_mongodb}


def main(argv: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    which = argv or list(BENCHES)
    rows = []
    for w in which:
        if w not in BENCHES:
            fail(f"unknown protocol {w!r} (one of {', '.join(BENCHES)})")
        rows += BENCHES[w]()
    print("| workload | requests sent | queries (events) | capture peak q/s (1 s) "
          "| client avg q/s | replay --max q/s | replay / peak "
          "| dbtap CPU s per 10k queries | replay waits per query |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %d | %.0f | %.0f | %.0f | %.2f | %.3f | %.2f |" % r)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
