#!/usr/bin/env python3
"""The eBPF source's BPF run time per traced call, from the kernel's own counters.

A fixed workload (bench/ebpf_percall.c): a server on a Unix socket answers each request of
REQ bytes with RESP bytes (one read(2), one write(2)), traced by `--pid`; the client's calls
are sendmmsg/recvmmsg, which the tracer does not trace (with the socket tracepoints its
programs run for them up to the process test, counted and subtracted like the background's
runs below; with the syscall tracepoints they are not attached to). With the kernel's BPF statistics
on (through a BPF_ENABLE_STATS descriptor held open, not the kernel.bpf_stats_enabled sysctl,
which another benchmark may toggle meanwhile), each program's run_time_ns and run_cnt
(/proc/PID/fdinfo of the tracer's program fds) before and after N round trips give ns per run
and per round trip. Runs beyond the server's two per round trip are other processes' calls
(the machine's background), shown as runs per round trip and subtracted at their cost per run
in an idle second measured before each rep, so the ns are the server's traced runs alone.
Tracers given as several binaries are alternated, one tracer process per (round, binary).

  cargo build --release -p dbtap-ebpf --example trace && cp target/release/examples/trace /tmp/trace-new
  sudo python3 bench/ebpf_percall.py [--rounds R] [--reps K] [--n N] [--req B] [--resp B] \
      /tmp/trace-old /tmp/trace-new

TRACER: a `trace` example binary (it embeds the BPF object it was built with). Each tracer
process is measured --reps times (N round trips each; the reps of one process agree within
about 1 %), and the rounds alternate the binaries (between processes and minutes the level
moves by up to 10 % on the loaded machine, so compare medians over rounds). EBPF_PERCALL_RW=1
makes the client use read/write: two runs per round trip more, of a process that is not
traced (the cost every other process's calls pay), shown in the runs per round trip and
subtracted like the background's.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SYS_BPF = 321  # x86_64
BPF_ENABLE_STATS = 32
sys.path.insert(0, str(HERE))
from ebpf_attribute import bpf_prog_stats as prog_stats  # noqa: E402


def prog_names(ids) -> dict[int, str]:
    names = {}
    for i in ids:
        r = subprocess.run(["bpftool", "prog", "show", "id", str(i)], capture_output=True, text=True)
        words = r.stdout.split()
        names[i] = words[words.index("name") + 1] if "name" in words else str(i)
    return names


def build(tmp: Path) -> Path:
    exe = tmp / "ebpf_percall"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(HERE / "ebpf_percall.c")], check=True)
    return exe


def one_tracer(exe, tracer, sock, srv_pid, a):
    """Starts `tracer` on the server, runs a.reps measurements of a.n round trips; returns a
    list of ({name: (ns, runs)} deltas, the idle second's tp_sys_exit (ns, runs))."""
    tr = subprocess.Popen([tracer, "--pid", str(srv_pid), "--quiet", "--seconds", "100000"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = tr.stderr.readline()
        if not line.startswith("tracing"):
            sys.exit(f"tracer did not start: {line}{tr.stderr.read()}")
        time.sleep(0.3)
        names = prog_names(prog_stats(tr.pid))
        client = [str(exe), "client", sock, str(a.n), str(a.req), str(a.resp)]
        subprocess.run([str(exe), "client", sock, "2000", str(a.req), str(a.resp)], check=True)
        reps = []
        for _ in range(a.reps):
            before = prog_stats(tr.pid)
            subprocess.run(client, check=True)
            after = prog_stats(tr.pid)
            d = {}
            for i, (ns, cnt) in after.items():
                b = before.get(i, (0, 0))
                d[names[i]] = (ns - b[0], cnt - b[1])
            # The background's cost per run: tp_sys_exit's runs in an idle second (the server
            # waits), other processes' calls only.
            i0 = prog_stats(tr.pid)
            time.sleep(1.0)
            i1 = prog_stats(tr.pid)
            bg = (0, 0)
            for i, (ns, cnt) in i1.items():
                if names[i] == "tp_sys_exit":
                    b = i0.get(i, (0, 0))
                    bg = (ns - b[0], cnt - b[1])
            reps.append((d, bg))
        return reps
    finally:
        tr.terminate()
        tr.wait()


def runs_of(d):
    """Every program's runs in one rep."""
    return sum(c for _, c in d.values())


def traced_ns(rep, n):
    """ns of the server's 2n traced runs: every run minus the background's runs (beyond 2n) at
    the idle second's cost per background run."""
    d, (bg_ns, bg_runs) = rep
    per_bg = bg_ns / bg_runs if bg_runs else 0.0
    total = sum(ns for ns, _ in d.values())
    return total - max(0, runs_of(d) - 2 * n) * per_bg


def report(label, reps, n):
    per_rt = [traced_ns(rep, n) / n for rep in reps]
    runs = [runs_of(d) / n for d, _ in reps]
    ex = [x / 2 for x in per_rt]  # two traced runs per round trip
    print(f"{label}: ns per round trip median {statistics.median(per_rt):7.1f} "
          f"(reps {min(per_rt):.1f}..{max(per_rt):.1f}); traced ns/run median "
          f"{statistics.median(ex):6.1f} ({min(ex):.1f}..{max(ex):.1f}); runs per round trip "
          f"{statistics.median(runs):.3f} ({min(runs):.3f}..{max(runs):.3f})", flush=True)
    return statistics.median(per_rt), statistics.median(ex)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=50000)
    ap.add_argument("--req", type=int, default=100)
    ap.add_argument("--resp", type=int, default=300)
    ap.add_argument("tracers", nargs="+")
    a = ap.parse_args()
    # The statistics through BPF_ENABLE_STATS (on while this fd is open), not the sysctl,
    # which another benchmark may toggle meanwhile. attr.enable_stats.type = BPF_STATS_RUN_TIME (0).
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 4)()
    stats_fd = libc.syscall(SYS_BPF, BPF_ENABLE_STATS, ctypes.byref(attr), 4)
    if stats_fd < 0:
        sys.exit(f"BPF_ENABLE_STATS: errno {ctypes.get_errno()}")
    tmp = Path(tempfile.mkdtemp(prefix="ebpf-percall-"))
    exe = build(tmp)
    sock = str(tmp / "s.sock")
    srv = subprocess.Popen([str(exe), "serve", sock, str(a.resp)])
    summary = {t: [] for t in a.tracers}
    try:
        while not Path(sock).exists():
            time.sleep(0.05)
        for r in range(a.rounds):
            order = a.tracers if r % 2 == 0 else list(reversed(a.tracers))
            for t in order:
                reps = one_tracer(exe, t, sock, srv.pid, a)
                summary[t].append(report(f"round {r} {t}", reps, a.n))
    finally:
        os.close(stats_fd)
        srv.terminate()
        srv.wait()
    for t, v in summary.items():
        print(f"ALL {t}: ns per round trip median {statistics.median(x for x, _ in v):.1f} "
              f"(rounds {', '.join(f'{x:.1f}' for x, _ in v)}); traced ns/run "
              f"{statistics.median(y for _, y in v):.1f}")


if __name__ == "__main__":
    main()
