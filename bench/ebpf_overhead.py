"""Worker of bench/ebpf-overhead.sh: what the eBPF source costs a busy MariaDB (see the script's header).

sysbench oltp_read_only (prepared statements) against a private MariaDB under six conditions,
interleaved and repeated: over its Unix socket with nothing else (baseline), with `dbtap live
--source ebpf` (without and with the kernel's BPF statistics), with the slow log at long_query_time=0; over TCP with nothing else (baseline-tcp)
and with `dbtap live --source packet -i lo`. Writes the medians as a markdown table. Python
stdlib + pymysql, tests/integration/ebpf_harness.py and bench/live_overhead.py's helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import math
import platform
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "bench"))
import ebpf_attribute as ea  # noqa: E402
import ebpf_harness as eh  # noqa: E402
import harness  # noqa: E402
from harness import delta, die  # noqa: E402
from live_overhead import Proc, cpu_seconds, med, pct, peak_rss_mb  # noqa: E402

CONDITIONS = ["baseline", "aa", "ebpf", "ebpf-ab", "ebpf-stats", "tracepoints", "slowlog", "baseline-tcp", "packet",
              "ebpf-perf"]
LABELS = {
    "baseline": "Unix socket, nothing else (baseline)",
    "aa": "Unix socket, nothing else again (A/A check)",
    "ebpf": "Unix socket, dbtap live --source ebpf",
    "ebpf-ab": "the same with the other binary (--ab)",
    "ebpf-stats": "the same, with the kernel's BPF statistics on",
    "tracepoints": "Unix socket, the syscall tracepoints dbtap uses on kernels without socket "
                   "tracepoints, with programs that only test the pid",
    "slowlog": "Unix socket, slow log long_query_time=0",
    "baseline-tcp": "TCP, nothing else (baseline-tcp)",
    "packet": "TCP, dbtap live --source packet",
    "ebpf-perf": "Unix socket, --source ebpf, perf record on mysqld (--attribute)",
}
BASE = {"baseline": "baseline", "aa": "baseline", "ebpf": "baseline", "ebpf-ab": "baseline", "ebpf-stats": "baseline",
        "tracepoints": "baseline", "slowlog": "baseline",
        "baseline-tcp": "baseline-tcp", "packet": "baseline-tcp", "ebpf-perf": "baseline"}
VIA = {"baseline": "unix", "aa": "unix", "ebpf": "unix", "ebpf-ab": "unix", "ebpf-stats": "unix", "tracepoints": "unix",
       "slowlog": "unix",
       "baseline-tcp": "tcp", "packet": "tcp", "ebpf-perf": "unix"}
# The runs whose dbtap traces with eBPF; only "ebpf-stats" turns the kernel's BPF statistics
# on (kernel.bpf_stats_enabled: two clock reads per program run, which "ebpf" does not pay).
EBPF = ("ebpf", "ebpf-ab", "ebpf-stats", "ebpf-perf")
GOAL_TOTAL_CPU_PER_10K = 0.05
BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


# -- CPU per thread, in ns (/proc/PID/task/TID/schedstat) ---------------------------------------

def thread_cpu(pid: int) -> dict[int, int]:
    """{tid: ns on a CPU} of every live thread of `pid` (schedstat's first field: user and
    kernel time, ns precision, including the syscalls' tracepoint programs it ran)."""
    out: dict[int, int] = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(t.name)] = int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
    return out


def split_cpu(t0: dict[int, int], t1: dict[int, int], conn_tids: list[int]) -> dict:
    """mysqld's CPU between two thread_cpu() snapshots, split into the threads that served
    sysbench's connections (kept by the thread cache, or new: counted from 0) and the others
    (InnoDB's purge, page cleaner and thread pool, timers, the listener, other connections)."""
    conn = bg = 0
    want = set(conn_tids)
    for tid, ns in t1.items():
        d = ns - t0.get(tid, 0)
        if tid in want:
            conn += d
        else:
            bg += d
    return {"conn_cpu_s": conn / 1e9, "bg_cpu_s": bg / 1e9,
            "conn_threads": sum(1 for t in want if t in t1),
            "threads_gone": sum(1 for tid in t0 if tid not in t1)}


# -- BPF program run time, from the kernel (/proc/PID/fdinfo), not from dbtap ---------------------

# bpf_prog_stats is in ebpf_attribute (ea), shared with ebpf_percall.py.


# -- one run -------------------------------------------------------------------------------------

def sysbench(a, srv: eh.Maria, via: str, seconds: int) -> dict:
    # Paced: a fixed number of transactions (rate x seconds), the same work in every run.
    limit = ([f"--time={seconds * 3}", f"--events={a.rate * seconds}"] if a.rate else
             [f"--time={seconds}", "--events=0"])
    args = srv.sysbench_args(a.threads, a.table_size, via) + [
        *limit, "--report-interval=0", f"--rate={a.rate}", "run"]
    r = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tids = connection_tids(srv, a.threads, r)
    stdout, _ = r.communicate()
    if r.returncode != 0:
        die(f"sysbench run failed ({r.returncode}):\n{stdout[-3000:]}")
    res = harness.parse_sysbench(stdout)
    return {**{k: res[k] for k in ("queries", "transactions", "ignored_errors", "qps", "tps",
                                   "p95_ms", "avg_ms", "time_s")}, "conn_tids": tids}


def connection_tids(srv: eh.Maria, n: int, proc: subprocess.Popen) -> list[int]:
    """The OS thread ids serving sysbench's connections (performance_schema.threads of the
    connections to its database), asked once all `n` are there; [] if sysbench ended first.
    One short query on a connection of its own, the same in every condition."""
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        with srv.root() as c, c.cursor() as cur:
            cur.execute("SELECT THREAD_OS_ID FROM performance_schema.threads WHERE "
                        "PROCESSLIST_DB = 'sbtest' AND PROCESSLIST_ID <> CONNECTION_ID()")
            tids = [int(t) for (t,) in cur.fetchall() if t]
        if len(tids) >= n:
            return tids
    return []


def start_dbtap(a, srv: eh.Maria, cond: str, work: Path):
    if cond in EBPF:
        args = ["--source", "ebpf", "--port", str(srv.port), "--socket", str(srv.sock)]
    else:
        args = ["--source", "packet", "-i", "lo", "--port", str(srv.port)]
    out = open(work / "dbtap.json", "w")
    cap = Proc([str(a.dbtap_ab if cond == "ebpf-ab" else a.dbtap), "live", *args, "--interval", "0", "--format", "json", "--limit",
                "0"], work / "dbtap.pid", out)
    deadline = time.monotonic() + 60
    while not any(l.startswith("dbtap: ") and ("capturing" in l or "tracing" in l)
                  for l in cap.stderr):
        if cap.proc.poll() is not None or time.monotonic() > deadline:
            cap.stop()
            die(f"dbtap live did not start: {''.join(cap.stderr)[-2000:]}")
        time.sleep(0.02)
    time.sleep(0.5)
    return cap, out


def read_dbtap(cap: Proc, work: Path, rnd: int, cond: str) -> dict:
    text = (work / "dbtap.json").read_text()
    rc = cap.proc.returncode
    if rc != 0 or "{" not in text:
        die(f"dbtap live exited {rc}: {''.join(cap.stderr)[-3000:]}")
    (work / f"dbtap-{cond}-{rnd}.json").write_text(text)
    j = json.loads(text[text.index("{"):])
    by_cmd: dict[str, int] = {}
    for g in j["queries"]:
        if (g.get("fingerprint") or "").lower() in eh.OWN_MARIA_FINGERPRINTS:
            continue
        by_cmd[g["command"]] = by_cmd.get(g["command"], 0) + g["count"]
    c = j.get("capture", {})
    keys = ("kernel_drops", "gap_bytes", "stream_gaps", "stream_gap_bytes", "ebpf_lost_records",
            "stream_connections", "stream_bytes")
    return {"by_command": by_cmd, **{k: c.get(k) for k in keys},
            "bpf": {k: v for k, v in c.items() if "bpf" in k},
            "stderr": [l.rstrip() for l in cap.stderr]}


# The system calls dbtap's eBPF source attaches to (crates/ebpf/src/tracer.rs): their exits, and
# close's entry.
TRACED_EXITS = ("read", "write", "readv", "writev", "connect", "accept", "accept4", "sendto",
                "recvfrom", "sendmsg", "recvmsg")


def start_tracepoints() -> subprocess.Popen:
    """The "tracepoints" condition: bpftrace attaches, to the same per-syscall tracepoints as
    dbtap's eBPF source, programs that test the process id (never true: pid 1) and return, so
    mysqld pays what tracing those calls costs before any program logic (the tracepoint, the
    system call's slow path, one helper call). tracefs is mounted in a private mount namespace
    of bpftrace's own, as dbtap does where the host has none."""
    probes = ",".join(f"tracepoint:syscalls:sys_exit_{c}" for c in TRACED_EXITS)
    prog = (f"{probes} /pid == 1/ {{ @exits = count(); }} "
            "tracepoint:syscalls:sys_enter_close /pid == 1/ { @closes = count(); }")
    bt = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           "mount -t tracefs nodev /sys/kernel/tracing && exec bpftrace -e \"$0\"",
                           prog], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = bt.stdout.readline()  # "Attaching 12 probes..." once attached
    if not line.startswith("Attaching"):
        bt.kill()
        die(f"bpftrace did not attach: {line}{bt.stderr.read()[-2000:]}")
    return bt


def irq_work_interrupts() -> int:
    """The machine's IRQ-work interrupts so far (/proc/interrupts IWI, every CPU): a BPF ring
    wakes its reader with one on the producing CPU."""
    for line in Path("/proc/interrupts").read_text().splitlines():
        f = line.split()
        if f and f[0] == "IWI:":
            return sum(int(x) for x in f[1:] if x.isdigit())
    return 0


def run_one(a, srv: eh.Maria, cond: str, work: Path, rnd: int) -> dict:
    res: dict = {"condition": cond, "round": rnd}
    cap = out = bt = None
    prog0: dict = {}
    if cond in ("packet", *EBPF):
        cap, out = start_dbtap(a, srv, cond, work)
        if cond == "ebpf-stats":
            prog0 = ea.bpf_prog_stats(cap.proc.pid)
    elif cond == "tracepoints":
        bt = start_tracepoints()
    elif cond == "slowlog":
        slow = work / "slow.log"
        slow.unlink(missing_ok=True)
        with srv.root() as c, c.cursor() as cur:
            cur.execute("SET GLOBAL slow_query_log_file = %s", (str(slow),))
            cur.execute("SET GLOBAL slow_query_log=1, long_query_time=0, log_output='FILE'")
    rec = None
    try:
        before = srv.fresh_status()
        if cond == "ebpf-perf":
            rec = ea.Recorder(srv.proc.pid, work / f"perf-{rnd}.data")
        m0 = cpu_seconds(srv.proc.pid)
        c0 = cpu_seconds(cap.proc.pid) if cap else 0.0
        ct0 = thread_cpu(cap.proc.pid) if cap else {}
        i0 = irq_work_interrupts()
        t0 = thread_cpu(srv.proc.pid)
        res.update(sysbench(a, srv, VIA[cond], a.seconds))
        t1 = thread_cpu(srv.proc.pid)
        m1 = cpu_seconds(srv.proc.pid)
        res.update(split_cpu(t0, t1, res.pop("conn_tids")))
        res["irq_work"] = irq_work_interrupts() - i0
        if rec is not None:
            try:
                res["attribution"] = rec.stop()
            except RuntimeError as e:  # reported with the run, not fatal
                res["attribution_error"] = str(e)
                print(f"== attribution failed: {e}", flush=True)
            rec = None
        after = srv.fresh_status(threads=before["Threads_connected"])
        d = delta(before, after)
        res["server"] = {k: d[k] for k in ("Com_stmt_execute", "Com_stmt_prepare",
                                            "Com_stmt_close", "Com_select")}
        res["mysqld_cpu_s"] = m1 - m0
        if cap is not None:
            time.sleep(0.5)
            ct1 = thread_cpu(cap.proc.pid)
            res["cap_cpu_tick_s"] = cpu_seconds(cap.proc.pid) - c0
            # ns precision (a 4 s run's 0.05 s is 5 ticks of utime+stime)
            res["cap_cpu_s"] = sum(ns - ct0.get(t, 0) for t, ns in ct1.items()) / 1e9
            res["cap_rss_mb"] = peak_rss_mb(cap.proc.pid)
            if cond == "ebpf-stats":
                prog1 = ea.bpf_prog_stats(cap.proc.pid)
                res["bpf_run_ns"] = sum(t - prog0.get(i, (0, 0))[0] for i, (t, _) in prog1.items())
                res["bpf_run_cnt"] = sum(n - prog0.get(i, (0, 0))[1] for i, (_, n) in prog1.items())
                res["bpf_progs"] = len(prog1)
    finally:
        if rec is not None:
            rec.proc.kill()
            rec.proc.wait()
        if cap is not None:
            res["cap_exit"] = cap.stop()
            out.close()
        if bt is not None:
            bt.send_signal(signal.SIGINT)
            bt.communicate(timeout=30)
        if cond == "slowlog":
            with srv.root() as c, c.cursor() as cur:
                cur.execute("SET GLOBAL slow_query_log=0, long_query_time=10")
            (work / "slow.log").unlink(missing_ok=True)
    if cap is not None:
        dj = read_dbtap(cap, work, rnd, cond)
        res["dbtap"] = dj
        s = res["server"]
        res["fewer"] = all(dj["by_command"].get(k, 0) <= s[f"Com_stmt_{k}"]
                           for k in ("execute", "prepare", "close"))
        res["count_ok"] = (dj["by_command"].get("execute", 0) == s["Com_stmt_execute"]
                           and dj["by_command"].get("prepare", 0) == s["Com_stmt_prepare"]
                           and dj["by_command"].get("close", 0) == s["Com_stmt_close"])
    res["sysbench_vs_server_ok"] = \
        res["server"]["Com_stmt_execute"] == res["queries"] + res["ignored_errors"]
    return res


# -- report --------------------------------------------------------------------------------------

def lost_of(r: dict) -> int:
    """What the run's source lost: eBPF ring records, or packets the kernel dropped."""
    dj = r.get("dbtap") or {}
    key = "ebpf_lost_records" if r["condition"] in EBPF else "kernel_drops"
    return dj.get(key) or 0


def per10k(r: dict, key: str) -> float:
    return r[key] / r["queries"] * 1e4


def pacing(a) -> str:
    return (f"paced at {a.rate} transactions/s (sysbench --rate; the machine keeps idle time)"
            if a.rate else "unpaced (sysbench saturates the machine)")


def fmt(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def median_ci(xs: list[float], conf: float = 0.90) -> tuple[float, float]:
    """Distribution-free confidence interval of the median: order statistics k and n+1-k of the
    sorted sample, k the largest rank with P(Binomial(n, 1/2) < k) <= (1 - conf) / 2."""
    xs = sorted(xs)
    n = len(xs)
    k, cum = 0, 0.0
    while k < n:
        p = math.comb(n, k) / 2 ** n
        if cum + p > (1 - conf) / 2:
            break
        cum += p
        k += 1
    if k == 0:  # too few pairs for this confidence: the range
        return xs[0], xs[-1]
    return xs[k - 1], xs[n - k]


# The accountings of a run's extra CPU: "threads" (the default) sums the schedstat (ns) of the
# mysqld threads that served sysbench's connections and of dbtap's threads; "process" is
# utime+stime of the whole mysqld (every thread, InnoDB's background included) and of dbtap, in
# clock ticks; "others" is mysqld's threads that are not sysbench's connections, alone.
METRICS = {"threads": ("conn_cpu_s", "cap_cpu_s"), "process": ("mysqld_cpu_s", "cap_cpu_tick_s"),
           "others": ("bg_cpu_s", "")}


def paired_by_round(by: dict, c: str, metric: str, relative: bool = False) -> dict[int, float]:
    """Per round, condition c's CPU per 10k queries minus its baseline's of the same round;
    `relative`: that difference as a fraction of the baseline's mysqld CPU per 10k queries."""
    mk, ck = METRICS[metric]
    base = {r["round"]: r for r in by[BASE[c]]}
    out = {}
    for r in by[c]:
        b = base.get(r["round"])
        if b is None or mk not in r or mk not in b:
            continue
        d = per10k(r, mk) - per10k(b, mk)
        if ck and ck in r:
            d += per10k(r, ck)
        if relative:
            if not per10k(b, mk):
                continue
            d /= per10k(b, mk)
        out[r["round"]] = d
    return out


def paired_diffs(by: dict, c: str, metric: str) -> list[float]:
    return list(paired_by_round(by, c, metric).values())


def spread_lines(by: dict, P) -> None:
    """The paired estimate of every condition by both accountings, with its 90 % confidence
    interval; for the A/A check (baseline against baseline: 0 if the method has no bias) the
    spread of the single rounds, which is the method's noise."""
    P("")
    P("Paired with the same round's baseline, per 10k queries (core per 10k QPS): median of the "
      "rounds' differences [90 % order-statistic confidence interval of the median]; A/A: the "
      "same for a second baseline, whose rounds' spread is the method's noise.")
    P("")
    P("| condition | accounting | rounds | median | 90 % CI | CI half-width | rounds' IQR | "
      "rounds' stdev | min .. max |")
    P("|---|---|---:|---:|---|---:|---:|---:|---|")
    for c in CONDITIONS:
        if c == BASE[c] or not by.get(c):
            continue
        for metric in METRICS:
            d = paired_diffs(by, c, metric)
            if len(d) < 2:
                continue
            lo, hi = median_ci(d)
            q = statistics.quantiles(d, n=4) if len(d) >= 4 else [min(d), 0, max(d)]
            P(f"| {LABELS[c]} | {metric} | {len(d)} | {statistics.median(d):+.4f} | "
              f"[{lo:+.4f}, {hi:+.4f}] | {(hi - lo) / 2:.4f} | {q[2] - q[0]:.4f} | "
              f"{statistics.stdev(d):.4f} | {min(d):+.4f} .. {max(d):+.4f} |")
    # The same relative to the baseline's own CPU: the host's speed moves the baseline and the
    # extra together (the tracing's work is a share of the server's), so this is the figure
    # that compares across days and hosts; the absolute one is what the goal is stated in.
    rel = []
    for c in CONDITIONS:
        if c == BASE[c] or c == "aa" or not by.get(c):
            continue
        d = list(paired_by_round(by, c, "threads", relative=True).values())
        if len(d) >= 2:
            lo, hi = median_ci(d)
            rel.append(f"{LABELS[c]} {100 * statistics.median(d):+.1f} % "
                       f"[{100 * lo:+.1f}, {100 * hi:+.1f}]")
    if rel:
        P("")
        P("- extra CPU relative to the same round's baseline mysqld CPU (threads accounting, "
          "paired per round; median [90 % CI]): " + "; ".join(rel) + ".")
    if by.get("ebpf") and by.get("ebpf-ab"):
        # The two binaries against each other, round by round (each minus the same baseline, so
        # the baseline cancels): negative when this binary costs less.
        P("")
        for metric in ("threads", "process"):
            x = paired_by_round(by, "ebpf", metric)
            y = paired_by_round(by, "ebpf-ab", metric)
            d = [x[k] - y[k] for k in x if k in y]
            if len(d) >= 2:
                lo, hi = median_ci(d)
                below = sum(v < 0 for v in d)
                P(f"- this binary minus the other (--ab), {metric}, paired per round: "
                  f"{statistics.median(d):+.4f} [{lo:+.4f}, {hi:+.4f}] core per 10k QPS; "
                  f"lower in {below} of {len(d)} rounds.")
    P("")
    P("threads: the mysqld threads that served sysbench's connections (performance_schema."
      "threads; the thread cache keeps them between runs) + dbtap's threads, both from "
      "/proc/PID/task/TID/schedstat in ns; it leaves out the tracing of mysqld's other threads' "
      "system calls (their programs run too), which the others row bounds. process: utime+stime "
      "of mysqld's every thread (InnoDB background included) + dbtap's, in ticks. others: "
      "mysqld's other threads alone (process minus connection threads, schedstat).")


def attribution_lines(by: dict, summary: dict, P) -> None:
    """--attribute: the tracing's share of mysqld's samples in the ebpf-perf runs, as core per
    10k QPS (share x mysqld's CPU per 10k queries in the ebpf runs), plus dbtap's own CPU,
    beside the estimate by baseline subtraction."""
    rs = [r for r in by.get("ebpf-perf", []) if r.get("attribution")]
    if not rs:
        return
    # perf's own sampling raises mysqld's CPU in its runs: the shares are applied to the CPU
    # of the "ebpf" runs (same tracing, no perf) where there are such, to each run's own if not.
    plain = [per10k(r, "mysqld_cpu_s") for r in by.get("ebpf", [])]
    cpu = statistics.median(plain) if plain else None
    per_run = [(ea.shares(r["attribution"]), cpu if cpu is not None else per10k(r, "mysqld_cpu_s"))
               for r in rs]
    P("")
    P(f"Attribution (perf record -F 997 on mysqld during the ebpf-perf runs, {len(rs)} run(s), "
      f"{sum(r['attribution']['samples'] for r in rs)} samples; kernel symbols that exist only "
      "for tracing; median over runs of share x mysqld's CPU s / 10k q "
      f"{'of the ebpf runs (median, without perf)' if cpu is not None else 'of that run'}):")
    P("")
    P("| part of the tracing in mysqld | share of mysqld's samples | core per 10k QPS |")
    P("|---|---:|---:|")
    for name in [c for c, _ in ea.CATEGORIES] + ["total"]:
        share = statistics.median(s[name] for s, _ in per_run)
        cost = statistics.median(s[name] * m for s, m in per_run)
        label = "**tracing in mysqld, total**" if name == "total" else name
        P(f"| {label} | {share * 100:.2f} % | {cost:.4f} |")
    traced = statistics.median(s["total"] * m for s, m in per_run)
    dbtap = (summary.get("ebpf") or summary["ebpf-perf"])["cpu"]
    sub = (summary.get("ebpf") or {}).get("total")
    P("")
    P(f"- eBPF total extra CPU per 10k QPS by attribution: {traced:.4f} (tracing in mysqld) + "
      f"{dbtap:.4f} (dbtap, {'ebpf' if summary.get('ebpf') else 'ebpf-perf'} row) = "
      f"**{traced + dbtap:.4f}** core (goal {GOAL_TOTAL_CPU_PER_10K}: "
      f"{'met' if traced + dbtap <= GOAL_TOTAL_CPU_PER_10K else 'NOT met'})"
      + (f"; by baseline subtraction: {sub:.4f}." if sub is not None else "."))


def report(a, runs: list[dict], meta: dict) -> tuple[str, bool]:
    by = {c: [r for r in runs if r["condition"] == c] for c in CONDITIONS}
    ok_all = True
    L: list[str] = []
    P = L.append
    P("# dbtap live --source ebpf: overhead on a busy MariaDB over its Unix socket")
    P("")
    P(f"sysbench {meta['sysbench']} oltp_read_only, --db-ps-mode=auto, {a.threads} threads, "
      f"{a.table_size} rows, {pacing(a)}, {a.seconds} s per run, {a.rounds} round(s) of the {len(CONDITIONS)} conditions "
      f"interleaved (order rotated each round), against {meta['server']} (private datadir, "
      f"Unix socket and 127.0.0.1:{a.port}). Medians over rounds. Machine: {os.cpu_count()} cores "
      f"({platform.machine()}, {platform.release()}), shared; load before {meta['load_before']}, "
      f"after {meta['load_after']}. dbtap: {meta['dbtap_version']}, {meta['git']}. Order of "
      f"the conditions in a round: {a.order}{f' (seed {a.seed})' if a.order == 'shuffle' else ''}; "
      f"{'a fixed number of transactions per run (rate x seconds)' if a.rate else 'timed runs'}; "
      f"mariadbd --thread-cache-size={a.thread_cache}.")
    P("")
    P("| condition | QPS | QPS vs its baseline | p95 ms | p95 vs its baseline | mysqld CPU s / 10k q "
      "(extra) | dbtap CPU s / 10k q | total extra CPU s / 10k q | dbtap RSS MB | lost records / drops | "
      "gap bytes | BPF ns / query | counts = server |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    summary = {}
    for c in CONDITIONS:
        rs = by[c]
        if not rs:
            continue
        b = by[BASE[c]]
        qps, p95 = med(rs, "qps"), med(rs, "p95_ms")
        bqps, bp95 = med(b, "qps"), med(b, "p95_ms")
        mysqld = statistics.median(per10k(r, "mysqld_cpu_s") for r in rs)
        bmysqld = statistics.median(per10k(r, "mysqld_cpu_s") for r in b)
        extra_m = mysqld - bmysqld
        cpu = rss = lost = gapb = bpf = None
        check = "-"
        if c in ("packet", *EBPF):
            cpu = statistics.median(per10k(r, "cap_cpu_s") for r in rs)
            rss = max(r["cap_rss_mb"] for r in rs)
            lost = sum(lost_of(r) for r in rs)
            gapb = sum((r["dbtap"].get("stream_gap_bytes") or r["dbtap"].get("gap_bytes") or 0)
                       for r in rs)
            ok = all(r["count_ok"] for r in rs)
            # a run whose source reported losses may count fewer, never more
            explained = all(r["count_ok"] or (lost_of(r) > 0 and r["fewer"]) for r in rs)
            ok_all &= explained
            check = ("yes, every run" if ok else
                     "fewer where losses were reported" if explained else "**NO**")
            if c == "ebpf-stats" and all(r.get("bpf_run_cnt") for r in rs):
                bpf = statistics.median(r["bpf_run_ns"] / r["queries"] for r in rs)
        total = extra_m + (cpu or 0.0) if c != BASE[c] else None
        summary[c] = dict(qps=qps, p95=p95, extra_m=extra_m, cpu=cpu, total=total, bpf=bpf,
                          lost=lost, gapb=gapb)
        base = c == BASE[c]
        P(f"| {LABELS[c]} | {qps:.0f} | {'-' if base else f'{pct(qps, bqps):+.1f} %'} | {p95:.2f} | "
          f"{'-' if base else f'{pct(p95, bp95):+.1f} %'} | {mysqld:.4f} "
          f"({'-' if base else f'{extra_m:+.4f}'}) | {fmt(cpu, '.4f')} | {fmt(total, '+.4f')} | "
          f"{fmt(rss, '.1f')} | {fmt(lost, 'd')} | {fmt(gapb, 'd')} | {fmt(bpf, '.0f')} | {check} |")
    P("")
    P("CPU s per 10k queries = utime+stime (/proc/PID/stat, every thread) over the sysbench run / "
      "sysbench's queries x 10,000, i.e. cores per 10k QPS. Extra mysqld CPU: against the "
      "baseline on the same path (Unix socket or TCP). Total extra = extra mysqld + dbtap. Lost "
      "records / drops: dbtap's capture.ebpf_lost_records (ebpf) or kernel_drops (packet), gap "
      "bytes: stream_gap_bytes (ebpf) or gap_bytes (packet), summed over the rounds. BPF ns per query: the kernel's run_time_ns of dbtap's BPF programs "
      "(/proc/PID/fdinfo of its program fds, kernel.bpf_stats_enabled=1 during the ebpf-stats runs "
      "only) / sysbench's queries: it includes every syscall of the machine that runs the programs "
      "(sysbench's and every other process's, not only mysqld's); the statistics themselves add two "
      "clock reads per program run, so the ebpf-stats row costs more than the ebpf row, which is the "
      "one the goal is measured on. "
      "Counts = server: dbtap's execute/prepare/close == Com_stmt_* deltas.")
    P("")
    e = summary.get("ebpf")
    if e and e["total"] is not None:
        P(f"- eBPF total extra CPU per 10k QPS: {e['total']:.4f} core (goal "
          f"{GOAL_TOTAL_CPU_PER_10K}: {'met' if e['total'] <= GOAL_TOTAL_CPU_PER_10K else 'NOT met'}); "
          f"published eBPF agent: 0.2 in mysqld + 0.22 in the agent = 0.42.")
        P(f"- lost records at this rate with the default ring (summed over the rounds): {e['lost']} "
          f"({'none' if not e['lost'] else 'NOT zero'}).")
    t = summary.get("tracepoints")
    if t:
        P(f"- the tracepoints alone (programs that test the pid and return): {t['extra_m']:+.4f} "
          "core per 10k QPS of extra mysqld CPU (difference of medians; the paired estimate with "
          "its interval is below), a floor under any program logic attached there.")
    iwi = [f"{LABELS[c]} {statistics.median(r['irq_work'] / r['queries'] for r in by[c]):.4f}"
           for c in CONDITIONS if by[c] and all("irq_work" in r for r in by[c])]
    if iwi:
        P("- IRQ-work interrupts per query (/proc/interrupts IWI, the whole machine; a BPF ring "
          "wakes its reader with one), medians: " + "; ".join(iwi) + ".")
    attribution_lines(by, summary, P)
    spread_lines(by, P)
    P("")
    P("## Every run")
    P("")
    P("| round | condition | QPS | p95 ms | queries | mysqld CPU s | connection threads s "
      "(threads) | other threads s | dbtap CPU s | Com_stmt_execute "
      "| dbtap executes | lost records / drops | BPF run ns (runs), kernel; dbtap's ebpf_run_ns "
      "(since its start) |")
    P("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        dj = r.get("dbtap") or {}
        P(f"| {r['round']} | {r['condition']} | {r['qps']:.0f} | {r['p95_ms']:.2f} | {r['queries']} | "
          f"{r['mysqld_cpu_s']:.2f} | {r['conn_cpu_s']:.4f} ({r['conn_threads']}) | "
          f"{r['bg_cpu_s']:.4f} | {fmt(r.get('cap_cpu_s'), '.4f')} | "
          f"{r['server']['Com_stmt_execute']} | "
          f"{dj.get('by_command', {}).get('execute', '-') if dj else '-'} | "
          f"{lost_of(r) if dj else '-'} | "
          f"{r.get('bpf_run_ns', '-')} ({r.get('bpf_run_cnt', '-')})"
          f"{'; dbtap: ' + str(dj['bpf']['ebpf_run_ns']) if dj and dj.get('bpf', {}).get('ebpf_run_ns') else ''} |")
    P("")
    P(f"dbtap vs server: {'equal, or fewer where the source reported losses' if ok_all else 'MISMATCH without reported losses (see above)'}.")
    P("")
    P(f"Reproduce: `{meta['command']}`.")
    return "\n".join(L) + "\n", ok_all


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=38250)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--table-size", type=int, default=10000)
    p.add_argument("--rate", type=int, default=0, help="sysbench --rate (transactions/s; 0: unpaced)")
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dbtap", required=True)
    p.add_argument("--command", default="bash bench/ebpf-overhead.sh")
    p.add_argument("--dbtap-ab", default="", help="another dbtap binary: its ebpf-ab runs join "
                   "the same rounds (a paired comparison of two binaries)")
    p.add_argument("--attribute", action="store_true", help="add the ebpf-perf condition: "
                   "perf record on mysqld, the tracing's share of its samples")
    p.add_argument("--no-aa", action="store_true", help="leave out the A/A check (a second "
                   "baseline paired with the first)")
    p.add_argument("--thread-cache", type=int, default=64, help="mariadbd --thread-cache-size")
    p.add_argument("--order", choices=("shuffle", "rotate"), default="shuffle",
                   help="each round's order of the conditions: shuffled (seeded) or rotated")
    p.add_argument("--seed", type=int, default=None, help="the shuffle's seed (default: random, "
                   "printed)")
    p.add_argument("--only", default="", help="conditions to run, comma-separated (their "
                   "baselines are added): e.g. ebpf for baseline and ebpf only")
    a = p.parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    if not a.attribute:
        CONDITIONS.remove("ebpf-perf")
    if a.no_aa:
        CONDITIONS.remove("aa")
    if a.dbtap_ab:
        if a.only and "ebpf-ab" not in a.only.split(","):
            a.only += ",ebpf-ab"
    else:
        CONDITIONS.remove("ebpf-ab")
    if a.only:
        want = [c.strip() for c in a.only.split(",") if c.strip()]
        bad = [c for c in want if c not in CONDITIONS]
        if bad:
            die(f"--only: unknown condition(s) {', '.join(bad)} (known: {', '.join(CONDITIONS)})")
        keep = set(want) | {BASE[c] for c in want} | ({"ebpf-perf"} if a.attribute else set())
        if "baseline" in keep and not a.no_aa:
            keep.add("aa")  # the A/A check: the method's noise, printed beside the estimate
        CONDITIONS[:] = [c for c in CONDITIONS if c in keep]
    work = Path(a.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    # The thread cache keeps sysbench's connection threads alive between runs, so their CPU can
    # be read per thread (MariaDB's default here is 0: a thread per connection, gone at its end).
    # performance_schema names each connection's OS thread (threads.THREAD_OS_ID); every
    # instrument is off, so it costs no more than the thread table's bookkeeping, in every run.
    srv = eh.Maria(a.port, work / "server", extra=[
        f"--thread-cache-size={a.thread_cache}", "--performance-schema=ON",
        "--performance-schema-instrument=%=OFF"])
    runs: list[dict] = []
    meta = {"command": a.command,
            "load_before": " ".join(Path("/proc/loadavg").read_text().split()[:3])}
    stats_was = BPF_STATS.read_text().strip() if BPF_STATS.exists() else None
    try:
        srv.start()
        meta["server"] = subprocess.run(["mariadbd", "--version"], capture_output=True, text=True
                                        ).stdout.split(" for ")[0].replace("mariadbd  Ver ", "MariaDB ").strip()
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        meta["git"] = f"commit {rev}" + (" plus uncommitted changes" if dirty else "")
        meta["dbtap_version"] = subprocess.run([a.dbtap, "--version"], capture_output=True,
                                               text=True).stdout.strip()
        meta["sysbench"] = subprocess.run(["sysbench", "--version"], capture_output=True,
                                          text=True).stdout.split()[-1]
        srv.sysbench_prepare(a.table_size)
        warm = min(a.seconds, 5)
        print(f"== warm-up: {warm} s, not counted", flush=True)
        w = sysbench(a, srv, "unix", warm)
        if not w["conn_tids"]:
            die("performance_schema.threads did not show sysbench's connections")
        rng = random.Random(a.seed)
        for rnd in range(1, a.rounds + 1):
            k = (rnd - 1) % len(CONDITIONS)
            order = CONDITIONS[k:] + CONDITIONS[:k]
            if a.order == "shuffle":
                rng.shuffle(order)
            for cond in order:
                if stats_was is not None:
                    BPF_STATS.write_text("1\n" if cond == "ebpf-stats" else "0\n")
                one = run_one(a, srv, cond, work, rnd)
                runs.append(one)
                extra = ""
                if "cap_cpu_s" in one:
                    extra = (f", dbtap CPU {one['cap_cpu_s']:.2f} s, counts "
                             f"{'equal' if one['count_ok'] else 'MISMATCH'}, lost records "
                             f"{one['dbtap'].get('ebpf_lost_records')}")
                print(f"== round {rnd}/{a.rounds} {cond:12s}: {one['qps']:.0f} qps, p95 "
                      f"{one['p95_ms']:.2f} ms, mysqld CPU {one['mysqld_cpu_s']:.2f} s "
                      f"(connection threads {one['conn_cpu_s']:.3f} s, "
                      f"{one['conn_threads']} of them){extra}",
                      flush=True)
                (work / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")
    finally:
        if stats_was is not None:
            BPF_STATS.write_text(f"{stats_was}\n")
        srv.stop()
    meta["load_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    text, ok = report(a, runs, meta)
    Path(a.out).write_text(text)
    print()
    print(text)
    print(f"written to {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
