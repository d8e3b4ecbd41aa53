"""Perf attribution for bench/ebpf-overhead.sh --attribute: which share of mysqld's CPU samples
lies in the tracing itself (the BPF programs, their helpers and maps, the ring, the user-memory
copies, the tracepoint glue and the syscall slow path that a traced syscall takes).

Subtracting a baseline run's CPU from a traced run's is noisy on a shared machine (mysqld's CPU
per query drifts by tens of per cent between runs); a profile of the traced run itself measures
the tracing inside mysqld directly: share of samples x mysqld's CPU of that run. Only kernel
symbols that exist for tracing are counted (a baseline profile has none of them), so the result
is a floor of the tracing's cost in mysqld, not a bound on second-order effects (cache, wake-ups).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

# (category, pattern on a kernel symbol); the first match wins, so the order matters.
CATEGORIES: list[tuple[str, re.Pattern]] = [
    ("BPF programs", re.compile(r"^bpf_prog_")),
    ("ring reserve/submit", re.compile(r"ringbuf|^__?irq_work")),
    ("memory copies (user data, kernel fields)", re.compile(r"nofault|^bpf_probe_read|dynptr")),
    ("tracepoint glue (trace_call_bpf, perf_syscall_exit)",
     re.compile(r"^trace_call_bpf$|^perf_syscall_|^perf_swevent_|^perf_trace_|^bpf_trace_run|"
                r"^__bpf_trace_")),
    ("BPF helpers and maps", re.compile(r"^__?bpf_(?!lsm_)|htab|^lookup_nulls_elem_raw$|"
                                         r"^ktime_get_mono_fast_ns$|task_storage")),
    ("syscall slow path", re.compile(r"^syscall_trace_enter$|^syscall_exit_work$|^trace_sys_")),
    # The ring's wake-up of the reader: an IRQ-work self-interrupt on the producing CPU, then
    # the reader's epoll callback (perf's own wake-ups also go through IRQ work: a few a second).
    ("reader wake-ups (IRQ work interrupt, epoll callback)",
     re.compile(r"^(asm_)?sysvec_irq_work$|^ep_poll_callback$")),
]
# perf report -n --sort sym: "  0.63%   21  [k] bpf_prog_a1d7f0c3d47cbaf4_tp_sys_exit"
LINE = re.compile(r"^\s*[\d.]+%\s+(\d+)\s+\[(.)\]\s+(\S.*?)\s*$")


def classify(sym: str) -> str | None:
    for name, pat in CATEGORIES:
        if pat.search(sym):
            return name
    return None


def parse_report(text: str) -> tuple[int, dict[str, int]]:
    """(total samples, samples per category) of `perf report -n --sort sym --stdio` text."""
    total = 0
    cats: dict[str, int] = {name: 0 for name, _ in CATEGORIES}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        n, space, sym = int(m.group(1)), m.group(2), m.group(3)
        total += n
        if space == "k":
            c = classify(sym)
            if c is not None:
                cats[c] += n
    return total, cats


class Recorder:
    """`perf record` of one process (its every thread) for the length of a run."""

    def __init__(self, pid: int, data: Path):
        self.data = data
        self.proc = subprocess.Popen(
            ["perf", "record", "-F", "997", "-q", "-o", str(data), "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # perf needs a moment to attach (seconds on a loaded machine); a SIGINT before that
        # leaves a file without samples. It writes the file's header once it runs.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            if data.exists() and data.stat().st_size > 0:
                break
            time.sleep(0.05)
        time.sleep(0.3)

    def stop(self) -> dict:
        """Stops the recording; {samples, categories: {name: samples}} (the data file removed)."""
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        try:
            r = subprocess.run(["perf", "report", "-i", str(self.data), "-n", "--no-children",
                                "--sort", "sym", "--stdio", "-g", "none", "--percent-limit", "0"],
                               capture_output=True, text=True, timeout=300)
            total, cats = parse_report(r.stdout)
        finally:
            self.data.unlink(missing_ok=True)
            Path(str(self.data) + ".old").unlink(missing_ok=True)
        if total == 0:
            raise RuntimeError(f"perf recorded no samples of mysqld: {err[-500:]}{r.stderr[-500:]}")
        return {"samples": total, "categories": cats}


def shares(attr: dict) -> dict[str, float]:
    """Each category's share of the run's samples, and "total"."""
    n = attr["samples"]
    out = {k: v / n for k, v in attr["categories"].items()}
    out["total"] = sum(attr["categories"].values()) / n
    return out


def _selftest() -> None:
    text = """# Samples: 3K of event 'cpu-clock:ppp'
    16.88%   500  [k] finish_task_switch.isra.0
     0.63%    19  [k] bpf_prog_a1d7f0c3d47cbaf4_tp_sys_exit
     0.53%    16  [k] copy_from_user_nofault
     0.33%    10  [k] __bpf_ringbuf_reserve
     0.13%     4  [k] bpf_ringbuf_reserve_dynptr
     0.33%    10  [k] perf_syscall_exit
     0.27%     8  [k] trace_call_bpf
     0.27%     8  [k] lookup_nulls_elem_raw
     0.17%     5  [k] bpf_probe_read_user_dynptr
     0.10%     3  [k] syscall_exit_work
     0.03%     1  [k] bpf_lsm_socket_sendmsg
     0.07%     2  [k] sysvec_irq_work
     0.03%     1  [k] ep_poll_callback
     1.73%    52  [.] my_hash_sort_simple_nopad
     0.10%     3  [.] bpf_prog_lookalike_in_user_space
"""
    total, cats = parse_report(text)
    assert total == 642, total
    assert cats["BPF programs"] == 19, cats
    assert cats["ring reserve/submit"] == 14, cats
    assert cats["memory copies (user data, kernel fields)"] == 21, cats
    assert cats["tracepoint glue (trace_call_bpf, perf_syscall_exit)"] == 18, cats
    assert cats["BPF helpers and maps"] == 8, cats
    assert cats["syscall slow path"] == 3, cats
    assert cats["reader wake-ups (IRQ work interrupt, epoll callback)"] == 3, cats


def bpf_prog_stats(pid: int) -> dict[int, tuple[int, int]]:
    """{prog id: (run_time_ns, run_cnt)} of the BPF programs whose file descriptors process
    `pid` holds (/proc/PID/fdinfo of its `anon_inode:bpf-prog` fds); the kernel counts them
    while kernel.bpf_stats_enabled is 1. (Debian's bpftool 7.1 does not list the owning pids.)"""
    out: dict[int, tuple[int, int]] = {}
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            if os.readlink(fd) != "anon_inode:bpf-prog":
                continue
            info = dict(line.split(":", 1) for line in
                        Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().splitlines()
                        if ":" in line)
        except OSError:
            continue
        pid_ = int(info.get("prog_id", "0").strip())
        out[pid_] = (int(info.get("run_time_ns", "0").strip()),
                     int(info.get("run_cnt", "0").strip()))
    return out


if __name__ == "__main__":
    _selftest()
    print("ok")
