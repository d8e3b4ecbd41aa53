"""Helpers shared by the replay tests (test_replay.py, test_replay_opts.py): a pair of servers,
source A and target B, started and stopped together, and a Redis workload captured with
tcpdump with A's own per-command counts over the capture window."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time

import harness
import pytest
import redis_harness as rh


@contextlib.contextmanager
def started_pair(a, b):
    """Starts servers `a` and `b`, yields (a, b), stops both (also when a start fails)."""
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


def redis_capture(srv, pcap, work):
    """Runs `work` under tcpdump into `pcap`; returns (pcap, A's per-command requests over the
    window, work's result)."""
    srv.reset_stats()
    srv.socket_calls.clear()
    cap = rh.Tcpdump(pcap, srv.port)
    try:
        cap.start()
        before = srv.snapshot()
        extra = work()
    finally:
        stats = cap.stop()
    after = srv.snapshot()
    rh.check_dropped(stats)
    return cap.out, rh.wire_requests(rh.stats_delta(before, after), srv.socket_calls), extra


class Mirror:
    """`dbtap replay --live -i lo --port PORT --target 127.0.0.1:TARGET --format json ARGS`,
    ready once it says it is mirroring. `report()` stops it (SIGTERM) and returns its JSON;
    `wait_report()` waits for it to end by itself (`--duration`, or a signal the test sent) and
    also returns how long that took."""

    def __init__(self, port: int, target: int, *args: str):
        self.proc = subprocess.Popen(
            [str(harness.DBTAP), "replay", "--live", "-i", "lo", "--port", str(port),
             "--target", f"127.0.0.1:{target}", "--format", "json", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        ready = threading.Event()

        def read_err():
            for line in self.proc.stderr:
                self.err.append(line)
                if "mirroring" in line:
                    ready.set()
        self._reader = threading.Thread(target=read_err, daemon=True)
        self._reader.start()
        if not ready.wait(20):
            self.proc.kill()
            pytest.fail(f"dbtap replay --live did not start: {''.join(self.err)}")
        time.sleep(0.3)

    def report(self) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait_report()[0]

    def wait_report(self, timeout: float = 60) -> tuple[dict, float]:
        t0 = time.monotonic()
        # stdout read aside, stderr left whole to the reader (communicate() would take part
        # of it: a warning printed at the end would then be missing from `err`).
        box: list[str] = []
        out_reader = threading.Thread(target=lambda: box.append(self.proc.stdout.read()),
                                      daemon=True)
        out_reader.start()
        self.proc.wait(timeout=timeout)
        out_reader.join(timeout)
        self._reader.join(timeout)
        out = box[0] if box else ""
        assert self.proc.returncode == 0, "".join(self.err)
        return json.loads(out), time.monotonic() - t0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def mysql_mirrored(a, b, work, *args: str, keys, timeout: float = 30):
    """Runs `work()` on MariaDB A (a harness.Server) under `dbtap replay --live` onto B, with the
    test user's credentials and `args`; returns A's and B's SHOW GLOBAL STATUS deltas (B's once
    they equal A's on `keys`, or after `timeout` s), the report, the mirror's stderr and what
    `work` returned."""
    before_a, before_b = a.status(), b.status()
    m = Mirror(a.port, b.port, "--user", harness.USER, "--password", harness.PASSWORD, *args)
    try:
        out = work()
        want = harness.delta(before_a, a.status(threads=before_a["Threads_connected"]))
        deadline = time.monotonic() + timeout
        while True:
            got = harness.delta(before_b, b.status())
            if all(got[k] == want[k] for k in keys) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        rep = m.report()
    finally:
        m.stop()
    return want, got, rep, "".join(m.err), out
