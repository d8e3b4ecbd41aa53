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
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "bench"))

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

# REPLAY_BENCH_PG_MODES: pgbench's -M for the two workloads, comma-separated (extended; also
# prepared: named statements, Bind/Execute without a Parse after each connection's first).
PG_MODES = os.environ.get("REPLAY_BENCH_PG_MODES", "extended").split(",")
PG_WORKLOADS = tuple((m, x) for m in PG_MODES for x in (["-S"], []))
# pgbench's threads (-j): 4, one per client, unless REPLAY_BENCH_PG_JOBS says otherwise
# (pgbench's own default is 1: one thread multiplexing the 4 connections).
PG_JOBS = os.environ.get("REPLAY_BENCH_PG_JOBS", "4")


def pg_name(mode: str, extra: list[str]) -> str:
    return f"pgbench -M {mode} -c 4 -j {PG_JOBS} {' '.join(extra) or '(tpcb)'}"


def pg_capture(ph, a, mode: str, extra: list[str], seconds: int, tag: str = ""):
    """Runs pgbench on A under tcpdump; (capture, client wall s, A's pg_stat_statements calls)."""
    a.pgss_reset()
    cap = ph.Tcpdump(OUT / f"pg-{mode}{''.join(extra)}{tag}.pcap", a.port)
    try:
        cap.start()
        t0 = time.monotonic()
        subprocess.run([str(ph.PGBIN / "pgbench"), "-n", "-M", mode, "-c", "4", "-j", PG_JOBS,
                        "-T", str(seconds), *extra, ph.DB], env=a.env(), check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        a.wait_idle()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    return cap.out, wall, {q: e["calls"] for q, e in a.pgss().items()}


def pg_replay(binary: str, b, pcap: Path, a_port: int, want: dict) -> tuple[dict, float]:
    """Replays onto B with --max; fails unless B's pg_stat_statements calls equal A's."""
    b.pgss_reset()
    fid, cpu = replay(binary, pcap, a_port, b.port)
    b.wait_idle()
    got = {q: e["calls"] for q, e in b.pgss().items()}
    if got != want:
        fail(f"postgres: B's pg_stat_statements calls {got}, A's {want}")
    return fid, cpu


def pg_servers():
    import pg_harness as ph
    a_port, b_port = PORTS["postgres"]
    return ph, ph.PgServer(a_port, OUT / "pg-a"), ph.PgServer(b_port, OUT / "pg-b")


def bench_postgres() -> list[tuple]:
    """The single-run mode (REPLAY_BENCH_ROUNDS=0): one capture per workload."""
    ph, sa, sb = pg_servers()
    rows = []
    with sa as a, sb as b:
        ph.pgbench_init(a)
        ph.pgbench_init(b)
        for mode, extra in PG_WORKLOADS:
            pcap, wall, want = pg_capture(ph, a, mode, extra, SECONDS)
            for binary, label in BINARIES:
                fid, cpu = pg_replay(binary, b, pcap, a.port, want)
                rows.append(row(pg_name(mode, extra) + label, pcap, a.port, wall, fid, cpu))
    return rows


# The paired mode (the default for postgres): REPLAY_BENCH_ROUNDS rounds (8), each capturing
# REPLAY_BENCH_ROUND_SECONDS (3) of every workload on A and replaying that same capture at once,
# so each round's ratios compare a client and a replay that ran under the same load.
ROUNDS = int(os.environ.get("REPLAY_BENCH_ROUNDS", "8"))
ROUND_SECONDS = int(os.environ.get("REPLAY_BENCH_ROUND_SECONDS", "3"))


def pg_round(ph, a, b, rnd: int) -> list[dict]:
    """One round: per workload, a fresh capture and its replay by every binary (their order
    alternates between rounds, so neither always follows the client)."""
    out = []
    for mode, extra in PG_WORKLOADS:
        pcap, wall, want = pg_capture(ph, a, mode, extra, ROUND_SECONDS, f"-r{rnd}")
        events, peak = peak_rate(pcap, a.port)
        order = BINARIES if rnd % 2 == 0 else BINARIES[::-1]
        for binary, label in order:
            fid, cpu = pg_replay(binary, b, pcap, a.port, want)
            rate = events / fid["wall_s"]
            out.append({"round": rnd, "workload": pg_name(mode, extra), "binary": label,
                        "queries": events, "peak": peak, "client_avg": events / wall,
                        "replay": rate, "per_peak": rate / peak, "per_avg": rate * wall / events,
                        "cpu10k": cpu / events * 10000, "waits": fid["_waits"] / events,
                        "load": os.getloadavg()[0]})
    return out


def ci_cell(xs: list[float], spec: str = ".2f") -> str:
    from ebpf_overhead import median_ci
    lo, hi = median_ci(xs)
    return f"{statistics.median(xs):{spec}} [{lo:{spec}}, {hi:{spec}}]"


def paired_report(runs: list[dict]) -> list[str]:
    """Per-round rows, then per workload and binary the medians with their 90 % distribution-free
    confidence intervals (bench/ebpf_overhead.py's order statistics), and with
    REPLAY_BENCH_AB the per-round difference of the two binaries' replay/peak."""
    L = ["", f"Paired rounds ({ROUND_SECONDS} s captures, pgbench -j {PG_JOBS}): each round's "
         "replay is of that round's capture, right after it.", "",
         "| round | workload | binary | load | queries | peak q/s | client avg q/s "
         "| replay q/s | replay / peak | replay / client avg | CPU s per 10k | waits per query |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        L.append("| %d | %s | %s | %.1f | %d | %.0f | %.0f | %.0f | %.2f | %.2f | %.3f | %.2f |" % (
            r["round"], r["workload"], r["binary"].strip() or "this", r["load"], r["queries"],
            r["peak"], r["client_avg"], r["replay"], r["per_peak"], r["per_avg"], r["cpu10k"],
            r["waits"]))
    L += ["", "Medians over the rounds, [90 % CI] (order statistics; with fewer than 8 rounds "
          "the interval is the range):", "",
          "| workload | binary | rounds | replay / peak | replay / client avg "
          "| CPU s per 10k | rounds with replay >= peak |", "|---|---|---|---|---|---|---|"]
    for w in dict.fromkeys(r["workload"] for r in runs):
        for _, label in BINARIES:
            rs = [r for r in runs if r["workload"] == w and r["binary"] == label]
            L.append("| %s | %s | %d | %s | %s | %s | %d |" % (
                w, label.strip() or "this", len(rs), ci_cell([r["per_peak"] for r in rs]),
                ci_cell([r["per_avg"] for r in rs]), ci_cell([r["cpu10k"] for r in rs], ".3f"),
                sum(r["per_peak"] >= 1.0 for r in rs)))
        if AB:
            by = collections.defaultdict(dict)
            for r in runs:
                if r["workload"] == w:
                    by[r["round"]][r["binary"]] = r["per_peak"]
            d = [v[""] - v[BINARIES[1][1]] for v in by.values() if len(v) == 2]
            L.append(f"| {w} | this - REPLAY_BENCH_AB, paired | {len(d)} | {ci_cell(d)} | | | |")
    return L


def bench_postgres_paired() -> list[str]:
    ph, sa, sb = pg_servers()
    runs: list[dict] = []
    with sa as a, sb as b:
        ph.pgbench_init(a)
        ph.pgbench_init(b)
        for rnd in range(ROUNDS):
            runs += pg_round(ph, a, b, rnd)
            last = [r for r in runs if r["round"] == rnd]
            print(f"round {rnd}: " + ", ".join(
                f"{r['workload'].split()[-1]}{r['binary'] and ' AB'} {r['per_peak']:.2f}"
                for r in last), file=sys.stderr, flush=True)
    return paired_report(runs)


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
    rows, paired = [], []
    for w in which:
        if w not in BENCHES:
            fail(f"unknown protocol {w!r} (one of {', '.join(BENCHES)})")
        if w == "postgres" and ROUNDS > 0:
            paired = bench_postgres_paired()
        else:
            rows += BENCHES[w]()
    if not rows:
        print("\n".join(paired[1:]))
        return 0
    print("| workload | requests sent | queries (events) | capture peak q/s (1 s) "
          "| client avg q/s | replay --max q/s | replay / peak "
          "| dbtap CPU s per 10k queries | replay waits per query |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %d | %.0f | %.0f | %.0f | %.2f | %.3f | %.2f |" % r)
    print("\n".join(paired))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
