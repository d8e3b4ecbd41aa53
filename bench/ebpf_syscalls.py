#!/usr/bin/env python3
"""What the eBPF source costs per system call, in the CPU time of the process making the calls.

A fixed loop (bench/ebpf_syscalls.c) on one CPU: write, poll, read, write, read on a Unix
socket bound to a path (so the tracer takes its bytes) and a getppid, per iteration. Each
round runs it with no tracer and under each given dbtap binary (`dbtap live --source ebpf
--pid P`), in turn; the CPU ns per iteration is the median of the loop's three thirds. The
same calls on a socketpair, in a process that is not traced, show what every other process
on the host pays while dbtap traces (a syscall tracepoint puts every call of every process on
the kernel's tracing slow path; the socket tracepoints run only for socket calls).

  sudo python3 bench/ebpf_syscalls.py [--rounds R] [--n N] DBTAP [DBTAP ...]

Prints, per binary, the median over rounds and each round's value, for the traced loop and the
other process's loop, and the extra over no tracer. Needs root (BPF). Compare within one run:
the level moves between minutes on a shared machine, which is why the binaries alternate.
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def start_tracer(dbtap: str, pid: int) -> subprocess.Popen:
    tr = subprocess.Popen([dbtap, "live", "--source", "ebpf", "--pid", str(pid), "--interval", "0",
                           "--format", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    while True:
        line = tr.stderr.readline()
        if not line:
            sys.exit(f"{dbtap} did not start tracing (exit {tr.wait()})")
        if "tracing" in line:
            break
    time.sleep(0.3)
    return tr


def one(exe: Path, sock: Path, dbtap: str | None, n: int) -> tuple[float, float]:
    """(traced loop ns/iteration, other process's loop ns/iteration) under `dbtap` (None: none)."""
    lp = subprocess.Popen(["taskset", "-c", "1", str(exe), "traced", str(n), str(sock)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(lp.stdout.readline())
    tr = start_tracer(dbtap, pid) if dbtap else None
    try:
        other = statistics.median(
            float(subprocess.run(["taskset", "-c", "1", str(exe), "other", str(n)],
                                 capture_output=True, text=True, check=True).stdout)
            for _ in range(3))
        lp.stdin.write("go\n")
        lp.stdin.flush()
        traced = statistics.median(float(lp.stdout.readline()) for _ in range(3))
        if lp.wait() != 0:
            sys.exit("the traced loop failed")
    finally:
        if tr:
            tr.send_signal(2)
            tr.wait()
    return traced, other


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--n", type=int, default=100000, help="iterations per third of a loop")
    p.add_argument("dbtap", nargs="+")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "ebpf_syscalls"
        subprocess.run(["cc", "-O2", "-o", str(exe), str(HERE / "ebpf_syscalls.c")], check=True)
        names = ["(no tracer)", *a.dbtap]
        res: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
        for r in range(a.rounds):
            for k in names:
                res[k].append(one(exe, Path(tmp) / "s.sock", None if k == names[0] else k, a.n))
            print(f"round {r + 1}/{a.rounds}: " + ", ".join(
                f"{k} {res[k][-1][0]:.0f}/{res[k][-1][1]:.0f}" for k in names), flush=True)
    base = [statistics.median(v[i] for v in res[names[0]]) for i in (0, 1)]
    print(f"\nCPU ns per iteration (write, poll, read, write, read, getppid), median of "
          f"{a.rounds} rounds; `--rounds {a.rounds} --n {a.n}`:\n")
    print("| tracer | traced process | extra | another process | extra | rounds (traced) |")
    print("|---|---:|---:|---:|---:|---|")
    for k in names:
        t = statistics.median(v[0] for v in res[k])
        o = statistics.median(v[1] for v in res[k])
        print(f"| {k} | {t:.0f} | {t - base[0]:+.0f} | {o:.0f} | {o - base[1]:+.0f} | "
              f"{' '.join(f'{v[0]:.0f}' for v in res[k])} |")


if __name__ == "__main__":
    main()
