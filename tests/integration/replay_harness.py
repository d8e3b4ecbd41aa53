"""Helpers shared by the replay tests (test_replay.py, test_replay_opts.py): a pair of servers,
source A and target B, started and stopped together, and a Redis workload captured with
tcpdump with A's own per-command counts over the capture window."""

from __future__ import annotations

import contextlib

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
