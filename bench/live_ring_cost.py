"""What a growing capture ring costs: dbtap live's CPU and RSS per ring setting, interleaved.

A private redis-server on 127.0.0.1:38612 (files under bench/out/work-live-ring) serves
`redis-benchmark -t get -d 4096` (responses of 4 KiB: tens of MB/s on loopback, the regime where a
32 MiB ring lasts under a second). For every round, each condition in turn (the order rotated):
start `dbtap live --source packet -i lo --port 38612 --interval 0 --format json --limit 0` with the
condition's flags, run the benchmark, read dbtap's utime+stime and VmHWM from /proc just before
SIGINT, and check its counts against the server's own INFO commandstats.

    /usr/bin/python3 bench/live_ring_cost.py --dbtap target/release/dbtap --rounds 3 -n 300000

Prints per run, then medians per condition: CPU seconds per 10k requests (= cores per 10k QPS),
peak RSS, final ring size, growths, kernel drops. Exit 1 when a count differs from the server's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import redis_harness as rh  # noqa: E402

PORT = 38612
CONDITIONS = {
    "fixed-32": ["--ring-mb", "32"],
    "grows-32-128": ["--ring-mb", "32", "--ring-max-mb", "128", "--ring-margin", "4s"],
    "fixed-128": ["--ring-mb", "128"],
}
TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_rss(pid: int) -> tuple[float, int]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    f = stat[stat.rindex(")") + 2:].split()
    cpu = (int(f[11]) + int(f[12])) / TCK
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return cpu, hwm


def one(dbtap: str, flags: list[str], srv, n: int, clients: int) -> dict:
    cmd = [dbtap, "live", "--source", "packet", "-i", "lo", "--port", str(PORT), "--interval",
           "0", "--format", "json", "--limit", "0", *flags]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    while True:
        line = p.stderr.readline()
        if not line:
            raise RuntimeError(f"dbtap did not start: {p.wait()}")
        if line.startswith("dbtap: capturing on "):
            break
    time.sleep(0.3)
    before = srv.snapshot()
    t0 = time.monotonic()
    subprocess.run(["redis-benchmark", "-p", str(PORT), "-t", "get", "-d", "4096", "-n", str(n),
                    "-c", str(clients), "-r", "1000", "-q"], check=True,
                   stdout=subprocess.DEVNULL)
    secs = time.monotonic() - t0
    time.sleep(1.0)
    after = srv.snapshot()
    cpu, hwm = proc_cpu_rss(p.pid)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    d = json.loads(out[out.index("{"):])
    truth = rh.stats_delta(before, after)["commandstats"].get("get", {}).get("calls", 0)
    counted = rh.dbtap_by_command(d).get("get", {}).get("count", 0)
    cap = d["capture"]
    return {"cpu_s": cpu, "rss_mb": hwm / 2**20, "requests": truth, "counted": counted,
            "qps": truth / secs, "cpu_per_10k": cpu / truth * 1e4, "ring_mb": cap["ring_mb"],
            "growths": cap.get("ring_growths", 0), "drops": cap["kernel_drops"],
            "log": [l for l in err.splitlines() if "ring" in l]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dbtap", default=str(ROOT / "target" / "release" / "dbtap"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=300000)
    ap.add_argument("--clients", type=int, default=8)
    a = ap.parse_args()
    work = ROOT / "bench" / "out" / "work-live-ring"
    work.mkdir(parents=True, exist_ok=True)
    srv = rh.RedisServer(PORT, work / "redis").start()
    names = list(CONDITIONS)
    runs: dict[str, list[dict]] = {k: [] for k in names}
    bad = False
    try:
        subprocess.run(["redis-benchmark", "-p", str(PORT), "-t", "set", "-d", "4096", "-n",
                        "2000", "-r", "1000", "-q"], check=True, stdout=subprocess.DEVNULL)
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                res = one(a.dbtap, CONDITIONS[name], srv, a.n, a.clients)
                runs[name].append(res)
                bad |= res["counted"] != res["requests"]
                print(f"round {r} {name:13} cpu/10k {res['cpu_per_10k']:.4f} s  "
                      f"qps {res['qps']:.0f}  rss {res['rss_mb']:.1f} MB  ring {res['ring_mb']} "
                      f"MiB  growths {res['growths']}  drops {res['drops']}  "
                      f"counted {res['counted']}/{res['requests']}", flush=True)
    finally:
        srv.stop()
    print("\nmedians:")
    for name in names:
        rs = runs[name]
        med = lambda k: statistics.median(x[k] for x in rs)  # noqa: E731
        print(f"  {name:13} cpu/10k {med('cpu_per_10k'):.4f} s  qps {med('qps'):.0f}  "
              f"rss {med('rss_mb'):.1f} MB  ring {med('ring_mb'):.0f} MiB  drops "
              f"{sum(x['drops'] for x in rs)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
