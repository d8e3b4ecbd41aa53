"""Worker of bench/live-overhead.sh: what live capture costs a busy MariaDB (see the script's header).

Runs sysbench oltp_read_only against a private MariaDB under four conditions (baseline, `dbtap
live`, `tcpdump -w`, slow log at long_query_time=0), interleaved and repeated, and writes the
medians as a markdown table. Python stdlib + pymysql, and tests/integration/harness.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import harness  # noqa: E402
from harness import Server, delta, die  # noqa: E402

CONDITIONS = ["baseline", "dbtap", "tcpdump", "slowlog"]
LABELS = {
    "baseline": "baseline (nothing else)",
    "dbtap": "dbtap live",
    "tcpdump": "tcpdump -w",
    "slowlog": "slow log, long_query_time=0",
}
CLK_TCK = os.sysconf("SC_CLK_TCK")
GOAL_CPU_PER_10K = 0.03


# -- /proc ---------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (every thread), in seconds."""
    s = Path(f"/proc/{pid}/stat").read_text()
    f = s[s.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- sysbench ------------------------------------------------------------------------------------

def sysbench_cmd(a, threads: int, seconds: int, what: str) -> list[str]:
    return ["sysbench", "oltp_read_only", "--db-driver=mysql", "--mysql-host=127.0.0.1",
            f"--mysql-port={a.port}", f"--mysql-user={harness.USER}",
            f"--mysql-password={harness.PASSWORD}", "--mysql-db=sbtest", "--tables=1",
            f"--table-size={a.table_size}", f"--threads={threads}", f"--db-ps-mode={a.ps_mode}",
            "--mysql-ssl=off", f"--time={seconds}", "--events=0", "--report-interval=0", what]


def run_sysbench(a, seconds: int) -> dict:
    r = subprocess.run(sysbench_cmd(a, a.threads, seconds, "run"), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        die(f"sysbench run failed ({r.returncode}):\n{r.stdout[-3000:]}")
    res = harness.parse_sysbench(r.stdout)
    keep = ("queries", "transactions", "ignored_errors", "qps", "tps", "p95_ms", "avg_ms", "time_s")
    return {k: res[k] for k in keep}


# -- the capture processes -----------------------------------------------------------------------

class Proc:
    """A capture process started in its own session, stderr collected by a thread."""

    def __init__(self, args: list[str], pidfile: Path, stdout):
        self.args = args
        self.pidfile = pidfile
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=stdout,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        pidfile.write_text(f"{self.proc.pid}\n")  # for the script's trap after a kill
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in l for l in self.stderr):
            if self.proc.poll() is not None:
                time.sleep(0.2)
                die(f"{self.args[0]} exited with {self.proc.returncode}: {''.join(self.stderr)}")
            if time.monotonic() > deadline:
                die(f"{self.args[0]} did not print {text!r} in {timeout}s: {''.join(self.stderr)}")
            time.sleep(0.02)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(0.1)  # let the reader thread take the last lines
        self.pidfile.unlink(missing_ok=True)
        return self.proc.returncode


# -- one run -------------------------------------------------------------------------------------

def run_one(a, srv: Server, cond: str, work: Path, dbtap: Path) -> dict:
    res: dict = {"condition": cond}
    cap: Proc | None = None
    out_file = None
    if cond == "dbtap":
        out_file = open(work / "dbtap.json", "w")
        cap = Proc([str(dbtap), "live", "--source", "packet", "-i", "lo", "--port", str(a.port), "--interval", "0",
                    "--format", "json", "--limit", "0"], work / "dbtap.pid", out_file)
        cap.wait_for("capturing on")
    elif cond == "tcpdump":
        pcap = work / "tcpdump.pcap"
        pcap.unlink(missing_ok=True)
        cap = Proc(["tcpdump", "-i", "lo", "-s", "0", "-w", str(pcap), f"tcp port {a.port}"],
                   work / "tcpdump.pid", subprocess.DEVNULL)
        cap.wait_for("listening on")
    elif cond == "slowlog":
        slow = work / "slow.log"
        slow.unlink(missing_ok=True)
        with srv.root() as c, c.cursor() as cur:
            cur.execute("SET GLOBAL slow_query_log_file = %s", (str(slow),))
            cur.execute("SET GLOBAL slow_query_log=1, long_query_time=0, log_output='FILE'")
    try:
        before = srv.status()
        mysqld_cpu0 = cpu_seconds(srv.proc.pid)
        sb = run_sysbench(a, a.seconds)
        res["sysbench_end_ns"] = time.time_ns()
        mysqld_cpu1 = cpu_seconds(srv.proc.pid)
        after = srv.status(threads=before["Threads_connected"])
        res.update(sb)
        d = delta(before, after)
        res["server"] = {k: d[k] for k in ("Questions", "Com_stmt_execute", "Com_stmt_prepare",
                                            "Com_stmt_close", "Com_stmt_reset", "Com_select",
                                            "Com_admin_commands", "Connections")}
        res["mysqld_cpu_s"] = mysqld_cpu1 - mysqld_cpu0
        if cap is not None:
            time.sleep(0.3)  # the ring's last block retires (20 ms); tcpdump's buffer flushes
            res["cap_cpu_s"] = cpu_seconds(cap.proc.pid)
            res["cap_rss_mb"] = peak_rss_mb(cap.proc.pid)
    finally:
        if cap is not None:
            res["cap_exit"] = cap.stop()
        if out_file is not None:
            out_file.close()
        if cond == "slowlog":
            with srv.root() as c, c.cursor() as cur:
                cur.execute("SET GLOBAL slow_query_log=0, long_query_time=10")
    if cond == "dbtap":
        text = (work / "dbtap.json").read_text()
        if res["cap_exit"] != 0 or "{" not in text:
            die(f"dbtap live exited {res['cap_exit']}: {''.join(cap.stderr)[-3000:]}")
        j = json.loads(text[text.index("{"):])
        (work / f"dbtap-{a.round_no}.json").write_text(text)
        by_cmd: dict[str, int] = {}
        for g in j["queries"]:
            by_cmd[g["command"]] = by_cmd.get(g["command"], 0) + g["count"]
        res["dbtap"] = {"queries": j["totals"]["queries"], "by_command": by_cmd,
                        "kernel_drops": j["capture"]["kernel_drops"],
                        "packets": j["capture"]["packets"], "gaps": j["capture"]["gaps"],
                        "last_ts_ns": j["capture"]["last_ts_ns"],
                        "groups_omitted": j.get("groups_omitted", 0),
                        "warnings": j["capture"]["warnings"],
                        "stderr": [l.rstrip() for l in cap.stderr if "capturing on" not in l]}
        s = res["server"]
        # Every request dbtap counts: Questions (COM_QUERY, COM_STMT_EXECUTE, COM_QUIT, ...) plus
        # the COM_STMT_* that the server leaves out of Questions (see harness.py).
        expect_total = s["Questions"] + s["Com_stmt_prepare"] + s["Com_stmt_close"] + s["Com_stmt_reset"]
        res["dbtap"]["expect_total"] = expect_total
        res["cap_drops"] = j["capture"]["kernel_drops"]
        res["count_ok"] = (by_cmd.get("execute", 0) == s["Com_stmt_execute"]
                           and j["totals"]["queries"] == expect_total)
    elif cond == "tcpdump":
        text = "".join(cap.stderr)
        m = re.search(r"(\d+) packets? dropped by kernel", text)
        if not m:
            die(f"tcpdump printed no drop statistics: {text}")
        res["cap_drops"] = int(m.group(1))
        m = re.search(r"(\d+) packets? captured", text)
        res["tcpdump_captured"] = int(m.group(1)) if m else None
        res["pcap_mb"] = (work / "tcpdump.pcap").stat().st_size / 1e6
        (work / "tcpdump.pcap").unlink()
    elif cond == "slowlog":
        slow = work / "slow.log"
        res["slowlog_mb"] = slow.stat().st_size / 1e6 if slow.exists() else 0.0
        slow.unlink(missing_ok=True)
    # sysbench's own count against the server (prepared statements: one execute per query)
    if a.ps_mode == "auto":
        res["sysbench_vs_server_ok"] = res["server"]["Com_stmt_execute"] == res["queries"] + res["ignored_errors"]
    return res


# -- report --------------------------------------------------------------------------------------

def med(runs, key):
    v = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(v) if v else None


def pct(x, base):
    return 100.0 * (x - base) / base if base else float("nan")


def report(a, runs: list[dict], meta: dict) -> tuple[str, bool]:
    by = {c: [r for r in runs if r["condition"] == c] for c in CONDITIONS}
    base_qps = med(by["baseline"], "qps")
    base_p95 = med(by["baseline"], "p95_ms")
    base_mysqld = statistics.median(r["mysqld_cpu_s"] / r["queries"] * 1e4 for r in by["baseline"])
    lines: list[str] = []
    P = lines.append
    P("# dbtap live: overhead on a busy MariaDB")
    P("")
    P(f"sysbench {meta['sysbench']} oltp_read_only, --db-ps-mode={a.ps_mode}, {a.threads} threads, "
      f"{a.table_size} rows, {a.seconds} s per run, {a.rounds} round(s) of the four conditions "
      f"interleaved (order rotated each round), against {meta['server']} on 127.0.0.1:{a.port} "
      f"(private datadir, TLS off for sysbench). Medians over rounds.")
    P(f"Machine: {os.cpu_count()} cores ({platform.machine()}, {platform.release()}), shared with "
      f"other work: sysbench, mysqld and the capture all compete for these cores, which is the "
      f"condition that shows overhead. Load average before: {meta['load_before']}, after: "
      f"{meta['load_after']}.")
    P(f"dbtap: {meta['dbtap_version']}, built from {meta['git']}.")
    P("")
    P("| condition | QPS | QPS vs baseline | TPS | p95 ms | p95 vs baseline | capture CPU s per 10k queries | "
      "capture peak RSS MB | kernel drops | mysqld CPU s per 10k queries | dbtap count = server |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    summary = {}
    all_ok = True
    for c in CONDITIONS:
        rs = by[c]
        if not rs:
            continue
        qps, p95, tps = med(rs, "qps"), med(rs, "p95_ms"), med(rs, "tps")
        mysqld = statistics.median(r["mysqld_cpu_s"] / r["queries"] * 1e4 for r in rs)
        cpu = rss = drops = None
        if c in ("dbtap", "tcpdump"):
            cpu = statistics.median(r["cap_cpu_s"] / r["queries"] * 1e4 for r in rs)
            rss = max(r["cap_rss_mb"] for r in rs)
            drops = sum(r["cap_drops"] for r in rs)
        check = "-"
        if c == "dbtap":
            ok = all(r["count_ok"] for r in rs)
            all_ok &= ok and drops == 0
            check = "yes, every run" if ok else "**NO** (see runs)"
        summary[c] = dict(qps=qps, p95=p95, cpu=cpu, mysqld=mysqld)
        P(f"| {LABELS[c]} | {qps:.0f} | {'-' if c == 'baseline' else f'{pct(qps, base_qps):+.1f} %'} | "
          f"{tps:.1f} | {p95:.2f} | {'-' if c == 'baseline' else f'{pct(p95, base_p95):+.1f} %'} | "
          f"{'-' if cpu is None else f'{cpu:.4f}'} | {'-' if rss is None else f'{rss:.1f}'} | "
          f"{'-' if drops is None else drops} | {mysqld:.3f} | {check} |")
    P("")
    P("Capture CPU s per 10k queries = the capture process's utime+stime over the run (from "
      "/proc/PID/stat just before it is stopped) / sysbench's queries x 10,000; it is the same "
      "number as cores per 10k QPS. Peak RSS: VmHWM (largest over the rounds). Kernel drops: "
      "dbtap's capture.kernel_drops, tcpdump's \"packets dropped by kernel\" (summed over the "
      "rounds). mysqld CPU: its utime+stime over the sysbench run, which includes the "
      "loopback's softirq work done in its context.")
    P("")
    s = summary
    if "dbtap" in s and "tcpdump" in s and "baseline" in s:
        d_drop = -pct(s["dbtap"]["qps"], base_qps)
        t_drop = -pct(s["tcpdump"]["qps"], base_qps)
        ratio = f"{d_drop / t_drop:.2f}" if t_drop > 0 else "n/a (tcpdump -w cost no QPS)"
        drops = f"- QPS drop vs baseline: dbtap live {d_drop:.1f} %, tcpdump -w {t_drop:.1f} %"
        if "slowlog" in s:
            drops += f", slow log {-pct(s['slowlog']['qps'], base_qps):.1f} %"
        P(drops)
        P(f"- dbtap's QPS drop / tcpdump -w's QPS drop: {ratio}")
        dc, tc = s["dbtap"]["cpu"], s["tcpdump"]["cpu"]
        P(f"- dbtap CPU per 10k queries: {dc:.4f} s, goal {GOAL_CPU_PER_10K}: {dc / GOAL_CPU_PER_10K:.2f}x "
          f"the goal ({'met' if dc <= GOAL_CPU_PER_10K else 'NOT met'}); tcpdump -w: {tc:.4f} s "
          f"(dbtap / tcpdump = {dc / tc:.2f})")
        P(f"- mysqld CPU per 10k queries vs baseline: dbtap live {s['dbtap']['mysqld'] - base_mysqld:+.3f} s, "
          f"tcpdump -w {s['tcpdump']['mysqld'] - base_mysqld:+.3f} s"
          + (f", slow log {s['slowlog']['mysqld'] - base_mysqld:+.3f} s" if "slowlog" in s else ""))
        P(f"- Reference (published eBPF agent comparison, not measured here): 0.2 core per 10k QPS "
          f"in mysqld + 0.22 core per 10k QPS in the agent. dbtap live here: {dc:.4f} core per 10k "
          f"QPS in its own process, {s['dbtap']['mysqld'] - base_mysqld:+.3f} in mysqld vs baseline.")
    P("")
    P("## Every run")
    P("")
    P("| round | condition | QPS | TPS | p95 ms | queries | capture CPU s | capture RSS MB | "
      "kernel drops | mysqld CPU s | Com_stmt_execute | Questions | dbtap requests (expected) | "
      "dbtap executes | notes |")
    P("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        dj = r.get("dbtap")
        notes = []
        if r.get("pcap_mb") is not None:
            notes.append(f"pcap {r['pcap_mb']:.0f} MB")
        if r.get("slowlog_mb") is not None:
            notes.append(f"slow log {r['slowlog_mb']:.0f} MB")
        if r.get("sysbench_vs_server_ok") is False:
            notes.append("sysbench total != Com_stmt_execute")
        if dj:
            if not r["count_ok"]:
                notes.append("**COUNT MISMATCH**")
            if dj["gaps"]:
                notes.append(f"gaps {dj['gaps']}")
            lag = (r["sysbench_end_ns"] - (dj["last_ts_ns"] or 0)) / 1e9
            if lag > 1:
                notes.append(f"dbtap's last packet {lag:.1f} s before sysbench ended")
            notes += dj["warnings"] + dj["stderr"]
        cap = (f"{r['cap_cpu_s']:.2f} | {r['cap_rss_mb']:.1f} | {r['cap_drops']}"
               if "cap_cpu_s" in r else "- | - | -")
        dbt = f"{dj['queries']} ({dj['expect_total']}) | {dj['by_command'].get('execute', 0)}" if dj else "- | -"
        P(f"| {r['round']} | {LABELS[r['condition']]} | {r['qps']:.0f} | {r['tps']:.1f} | "
          f"{r['p95_ms']:.2f} | {r['queries']} | {cap} | {r['mysqld_cpu_s']:.2f} | "
          f"{r['server']['Com_stmt_execute']} | {r['server']['Questions']} | {dbt} | {'; '.join(notes)} |")
    P("")
    P(f"dbtap live vs server: {'every count equal, no kernel drops' if all_ok else 'MISMATCH or DROPS (see above)'}.")
    P("")
    P(f"Reproduce: `{meta['command']}`.")
    return "\n".join(lines) + "\n", all_ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=43306)
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--table-size", type=int, default=10000)
    p.add_argument("--ps-mode", choices=["auto", "disable"], default="auto")
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True, help="markdown to write")
    p.add_argument("--dbtap", required=True)
    p.add_argument("--command", default="bash bench/live-overhead.sh")
    a = p.parse_args()
    work = Path(a.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    srv = Server(a.port, work / "server", tls=False)
    runs: list[dict] = []
    meta = {"command": a.command,
            "load_before": " ".join(Path("/proc/loadavg").read_text().split()[:3])}
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
        meta["sysbench"] = subprocess.run(["sysbench", "--version"], capture_output=True, text=True
                                          ).stdout.split()[-1]
        r = subprocess.run(sysbench_cmd(a, 1, 0, "prepare"), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            die(f"sysbench prepare failed:\n{r.stdout}")
        warm = min(a.seconds, 5)
        print(f"== warm-up: {warm} s, not counted", flush=True)
        run_sysbench(a, warm)
        for rnd in range(a.rounds):
            order = CONDITIONS[rnd % 4:] + CONDITIONS[:rnd % 4]
            for cond in order:
                a.round_no = rnd + 1
                one = run_one(a, srv, cond, work, Path(a.dbtap))
                one["round"] = rnd + 1
                runs.append(one)
                extra = ""
                if "cap_cpu_s" in one:
                    extra = (f", capture CPU {one['cap_cpu_s']:.2f} s, RSS {one['cap_rss_mb']:.1f} MB, "
                             f"drops {one['cap_drops']}")
                if "count_ok" in one:
                    extra += f", counts {'equal' if one['count_ok'] else 'MISMATCH'}"
                print(f"== round {rnd + 1}/{a.rounds} {cond:8s}: {one['qps']:.0f} qps, p95 "
                      f"{one['p95_ms']:.2f} ms{extra}", flush=True)
                (work / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")
    finally:
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
