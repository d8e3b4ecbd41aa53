"""Worker of bench/live-drops.sh: does `dbtap live` drop packets on a busy host? (see the script's
header). N runs in a row of sysbench oltp_read_only against a private MariaDB, each captured by a
fresh `dbtap live -i lo`; per run the kernel's drops and the reader's longest pause from dbtap's
own health block, and dbtap's request count against the server's. Python stdlib + pymysql, and
the helpers of bench/live_overhead.py and tests/integration/harness.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import live_overhead as lo  # noqa: E402
from harness import Server, delta, die  # noqa: E402


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def reader_schedstat(pid: int) -> tuple[float, float]:
    """The capture thread's CPU time and run-queue wait (time runnable but not running), s,
    from /proc/PID/task/TID/schedstat: the kernel's own account of a starved reader."""
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (t / "comm").read_text().strip() == "dbtap-capture-0":
                run_ns, wait_ns, _ = (t / "schedstat").read_text().split()
                return int(run_ns) / 1e9, int(wait_ns) / 1e9
        except (OSError, ValueError):
            continue
    return float("nan"), float("nan")


def one_run(a, srv: Server, work: Path, i: int) -> dict:
    out_path = work / "dbtap.json"
    args = [a.dbtap, "live", "--source", "packet", "-i", "lo", "--port", str(a.port),
            "--interval", "0", "--format", "json", "--limit", "0"]
    if a.ring_mb:
        args += ["--ring-mb", str(a.ring_mb)]
    with open(out_path, "w") as out:
        cap = lo.Proc(args, work / "dbtap.pid", out)
        try:
            cap.wait_for("capturing on")
            before = srv.status()
            sb = lo.run_sysbench(a, a.seconds)
            after = srv.status(threads=before["Threads_connected"])
            time.sleep(0.3)  # the ring's last block retires (20 ms)
            cpu = lo.cpu_seconds(cap.proc.pid)
            run_s, wait_s = reader_schedstat(cap.proc.pid)
        finally:
            rc = cap.stop()
    text = out_path.read_text()
    if rc != 0 or "{" not in text:
        die(f"dbtap live exited {rc}: {''.join(cap.stderr)[-3000:]}")
    j = json.loads(text[text.index("{"):])
    h = j["capture"]
    d = delta(before, after)
    expect = d["Questions"] + d["Com_stmt_prepare"] + d["Com_stmt_close"] + d["Com_stmt_reset"]
    start_line = next((l.strip() for l in cap.stderr if "capturing on" in l), "")
    grown = [l.strip() for l in cap.stderr if "capture ring" in l]
    return {"run": i, "qps": sb["qps"], "queries": sb["queries"], "drops": h["kernel_drops"],
            "pause_ms": h.get("reader_pause_max_ms"), "ring_mb": h.get("ring_mb"),
            "packets": h["packets"], "dbtap_requests": j["totals"]["queries"],
            "server_requests": expect, "counts_equal": j["totals"]["queries"] == expect,
            "cpu_s": cpu, "reader_run_s": run_s, "reader_wait_s": wait_s, "load": loadavg(), "start_line": start_line,
            "warnings": h.get("warnings", []), "ring_events": grown}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--table-size", type=int, default=10000)
    p.add_argument("--ps-mode", default="auto")
    p.add_argument("--ring-mb", type=int, default=0)
    p.add_argument("--workdir", required=True)
    p.add_argument("--dbtap", required=True)
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
        print(f"{'run':>3} {'qps':>8} {'drops':>7} {'pause_ms':>8} {'ring_mb':>7} {'counts':>7} {'rq_wait_s':>9}  load; ring growth",
              flush=True)
        for i in range(1, a.runs + 1):
            x = one_run(a, srv, work, i)
            runs.append(x)
            print(f"{i:>3} {x['qps']:>8.0f} {x['drops']:>7} {x['pause_ms']!s:>8} {x['ring_mb']!s:>7} "
                  f"{'equal' if x['counts_equal'] else 'DIFFER':>7} {x['reader_wait_s']:>9.3f}  {x['load']}; "
                  f"{' / '.join(e.removeprefix('dbtap: ') for e in x['ring_events']) or '-'}",
                  flush=True)
    finally:
        srv.stop()
    dropped = [x for x in runs if x["drops"] > 0]
    pauses = [x["pause_ms"] or 0 for x in runs]
    summary = (f"{len(runs)} runs: {len(dropped)} with kernel drops ({sum(x['drops'] for x in runs)} "
               f"packets), longest reader pause {max(pauses, default=0)} ms (median "
               f"{sorted(pauses)[len(pauses) // 2] if pauses else 0} ms), median "
               f"{sorted(x['qps'] for x in runs)[len(runs) // 2]:.0f} qps; load average "
               f"{load_before} before, {loadavg()} after; {os.cpu_count()} cores")
    print(summary, flush=True)
    if runs:
        print(f"start line: {runs[0]['start_line']}")
    Path(a.out).write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")
    return 1 if dropped or not all(x["counts_equal"] or x["drops"] for x in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
