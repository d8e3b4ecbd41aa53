"""Worker of bench/live-drops.sh: does `dbtap live` drop packets on a busy host, and when its
packet reader pauses, why? (see the script's header).

N runs in a row of sysbench oltp_read_only against a private MariaDB, each captured by a fresh
`dbtap live -i lo`; per run the kernel's drops and the reader's pauses from dbtap's own health
block, dbtap's request count against the server's, dbtap's CPU per 10k queries and peak RSS (as
bench/live-overhead.sh measures them), and the capture thread's own scheduler account
(/proc/PID/task/TID/schedstat, sampled every 10 ms): time on a CPU, and time runnable but waiting
for one. A pause the thread spent waiting for a CPU is the scheduler's; one it spent running is
dbtap's own work. With several --dbtap binaries the runs rotate through them (A/B interleaved).
Python stdlib + pymysql, and the helpers of bench/live_overhead.py and tests/integration/harness.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import live_overhead as lo  # noqa: E402
from harness import Server, delta, die  # noqa: E402

SAMPLE_S = 0.01


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def capture_task(pid: int) -> Path | None:
    """/proc/PID/task/TID of the thread `dbtap-capture-0` (the one reading the ring)."""
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (t / "comm").read_text().strip() == "dbtap-capture-0":
                return t
        except OSError:
            continue
    return None


class SchedSampler:
    """Samples the capture thread's schedstat (ns on CPU, ns runnable waiting) every 10 ms."""

    def __init__(self, pid: int):
        self.task = capture_task(pid)
        self.samples: list[tuple[float, int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.task is None:
            return
        f = self.task / "schedstat"
        while not self.stop.is_set():
            try:
                run_ns, wait_ns, _ = f.read_text().split()
            except (OSError, ValueError):
                return
            self.samples.append((time.monotonic(), int(run_ns), int(wait_ns)))
            time.sleep(SAMPLE_S)

    def __enter__(self) -> "SchedSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)

    def totals(self) -> tuple[float, float]:
        """CPU s and run-queue wait s over the sampled span."""
        if len(self.samples) < 2:
            return float("nan"), float("nan")
        (_, r0, w0), (_, r1, w1) = self.samples[0], self.samples[-1]
        return (r1 - r0) / 1e9, (w1 - w0) / 1e9

    def worst_window(self, window_s: float) -> dict:
        """Over every span of about `window_s`: the most run-queue wait and the most CPU the
        thread had in one span, s (what a reader pause of that length was spent on)."""
        s = self.samples
        best_wait = best_run = span = 0.0
        j = 0
        for i in range(len(s)):
            # The shortest span of samples reaching window_s (the sampler itself can be late).
            while j + 1 < i and s[i][0] - s[j + 1][0] >= window_s:
                j += 1
            wait = (s[i][2] - s[j][2]) / 1e9
            if wait > best_wait:
                best_wait, span = wait, s[i][0] - s[j][0]
            best_run = max(best_run, (s[i][1] - s[j][1]) / 1e9)
        return {"window_s": window_s, "span_s": span, "max_rq_wait_s": best_wait,
                "max_run_s": best_run}


def one_run(a, srv: Server, work: Path, i: int, dbtap: str) -> dict:
    out_path = work / "dbtap.json"
    args = [dbtap, "live", "--source", "packet", "-i", "lo", "--port", str(a.port),
            "--interval", str(a.interval), "--format", "json", "--limit", "0"]
    if a.interval != "0":
        args += ["--fields", "time,count,drops,pause_ms"]  # the per-interval pauses
    if a.ring_mb:
        args += ["--ring-mb", str(a.ring_mb)]
    with open(out_path, "w") as out:
        cap = lo.Proc(args, work / "dbtap.pid", out)
        try:
            cap.wait_for("capturing on")
            before = srv.status()
            with SchedSampler(cap.proc.pid) as sched:
                sb = lo.run_sysbench(a, a.seconds)
                time.sleep(0.3)  # the ring's last block retires (20 ms)
            after = srv.status(threads=before["Threads_connected"])
            cpu = lo.cpu_seconds(cap.proc.pid)
            rss = lo.peak_rss_mb(cap.proc.pid)
        finally:
            rc = cap.stop()
    text = out_path.read_text()
    if rc != 0 or "{" not in text:
        die(f"dbtap live exited {rc}: {''.join(cap.stderr)[-3000:]}")
    j = json.loads(text[text.index("{"):])
    h = j["capture"]
    d = delta(before, after)
    expect = d["Questions"] + d["Com_stmt_prepare"] + d["Com_stmt_close"] + d["Com_stmt_reset"]
    pause_ms = h.get("reader_pause_max_ms")
    run_s, wait_s = sched.totals()
    worst = sched.worst_window(max((pause_ms or 0) / 1000, 0.1))
    lines = [l.split() for l in text[:text.index("{")].splitlines() if l[:1].isdigit()]
    return {"run": i, "dbtap": dbtap, "qps": sb["qps"], "queries": sb["queries"],
            "drops": h["kernel_drops"], "pause_ms": pause_ms,
            "long_pauses": h.get("reader_long_pauses"), "ring_mb": h.get("ring_mb"),
            "packets": h["packets"], "dbtap_requests": j["totals"]["queries"],
            "server_requests": expect, "counts_equal": j["totals"]["queries"] == expect,
            "cpu_s": cpu, "cpu_per_10k": cpu / sb["queries"] * 1e4 if sb["queries"] else None,
            "rss_mb": rss, "reader_run_s": run_s, "reader_wait_s": wait_s, "worst": worst,
            "lines": lines, "load": loadavg(), "warnings": h.get("warnings", [])}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def summary(runs: list[dict], name: str, load_before: str) -> str:
    dropped = [x for x in runs if x["drops"] > 0]
    pauses = [x["pause_ms"] or 0 for x in runs]
    return (f"{name}: {len(runs)} runs, {len(dropped)} with kernel drops "
            f"({sum(x['drops'] for x in runs)} packets); longest reader pause "
            f"{max(pauses, default=0)} ms (median {med(pauses):.0f}), runs with a pause of "
            f"100 ms or more: {sum(1 for x in runs if x['long_pauses'])}; median "
            f"{med(x['qps'] for x in runs):.0f} qps; dbtap CPU {med(x['cpu_per_10k'] for x in runs):.4f} "
            f"s per 10k queries (median), peak RSS {max((x['rss_mb'] for x in runs), default=0):.1f} MB "
            f"(max); load average {load_before} before, {loadavg()} after; {os.cpu_count()} cores")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--table-size", type=int, default=10000)
    p.add_argument("--ps-mode", default="auto")
    p.add_argument("--ring-mb", type=int, default=0)
    p.add_argument("--interval", default="0")
    p.add_argument("--workdir", required=True)
    p.add_argument("--dbtap", action="append", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    work = Path(a.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    srv = Server(a.port, work / "server", tls=False)
    runs: list[dict] = []
    load_before = loadavg()
    try:
        srv.start()
        r = subprocess.run(lo.sysbench_cmd(a, 1, 0, "prepare"), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            die(f"sysbench prepare failed:\n{r.stdout}")
        lo.run_sysbench(a, 3)  # warm-up, not counted
        print(f"{'run':>3} {'bin':>3} {'qps':>7} {'drops':>7} {'pause_ms':>8} {'long':>4} "
              f"{'counts':>6} {'cpu/10k':>7} {'rss_mb':>6} {'rd_cpu_s':>8} {'rq_wait_s':>9} "
              f"{'worst_win: rq_wait/run s':>24}  load", flush=True)
        for i in range(1, a.runs + 1):
            b = (i - 1) % len(a.dbtap)
            x = one_run(a, srv, work, i, a.dbtap[b])
            runs.append(x)
            w = x["worst"]
            print(f"{i:>3} {chr(65 + b):>3} {x['qps']:>7.0f} {x['drops']:>7} {x['pause_ms']!s:>8} "
                  f"{x['long_pauses']!s:>4} {'equal' if x['counts_equal'] else 'DIFFER':>6} "
                  f"{x['cpu_per_10k']:>7.4f} {x['rss_mb']:>6.1f} {x['reader_run_s']:>8.3f} "
                  f"{x['reader_wait_s']:>9.3f} {w['max_rq_wait_s']:>11.3f}/{w['max_run_s']:.3f} "
                  f"in {w['span_s']:.2f} s  {x['load']}", flush=True)
    finally:
        srv.stop()
    texts = []
    for b, path in enumerate(a.dbtap):
        mine = [x for x in runs if x["dbtap"] == path]
        name = f"{chr(65 + b)} ({path})" if len(a.dbtap) > 1 else path
        texts.append(summary(mine, name, load_before))
    for t in texts:
        print(t, flush=True)
    Path(a.out).write_text(json.dumps({"summary": texts, "runs": runs}, indent=1) + "\n")
    bad = [x for x in runs if x["drops"] > 0 or not x["counts_equal"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
