"""Session fixtures: one private MariaDB on 127.0.0.1:33306, one sysbench capture (taken with
two tcpdumps at once, `-i lo` and `-i any`), one capture of the scripted workload. Each capture
comes with the server's counter deltas over exactly the captured window."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
from harness import Server, Tcpdump, delta  # noqa: E402

PORT = 33306
OUT = harness.REPO / "tests" / "out" / "it"
SYSBENCH_THREADS = 4
SYSBENCH_SECONDS = 5
SYSBENCH_TABLE_SIZE = 10000


@dataclass
class Capture:
    pcap: Path
    tcpdump: dict
    counters: dict
    extra: dict = field(default_factory=dict)


def pytest_sessionstart(session):
    if OUT.exists():
        # Kill nothing here: Server.start() stops a leftover server of ours by its pidfile.
        for p in OUT.glob("*.pcap*"):
            p.unlink()


@pytest.fixture(scope="session")
def server():
    srv = Server(PORT, OUT / "server", tls=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _check_tcpdump(stats: dict, iface: str) -> None:
    if stats.get("dropped") != 0:
        pytest.fail(f"tcpdump -i {iface} dropped {stats.get('dropped')} packets: "
                    f"the capture is not complete, no count can be checked against it")


@pytest.fixture(scope="session")
def sysbench_capture(server):
    """sysbench oltp_read_write, prepared statements, 4 threads, ~5 s, captured on lo and any."""
    harness.sysbench_prepare(PORT, SYSBENCH_TABLE_SIZE)
    lo = Tcpdump(OUT / "sysbench-lo.pcap", PORT, iface="lo")
    anyc = Tcpdump(OUT / "sysbench-any.pcap", PORT, iface="any")
    try:
        lo.start()
        anyc.start()
        before = server.status()
        sb = harness.sysbench_run(PORT, SYSBENCH_THREADS, SYSBENCH_SECONDS, SYSBENCH_TABLE_SIZE)
        after = server.status(threads=before["Threads_connected"])
    finally:
        try:
            lo_stats = lo.stop()
        finally:
            any_stats = anyc.stop()
    _check_tcpdump(lo_stats, "lo")
    _check_tcpdump(any_stats, "any")
    d = delta(before, after)
    return {
        "lo": Capture(lo.out, lo_stats, d, {"sysbench": sb}),
        "any": Capture(anyc.out, any_stats, d, {"sysbench": sb}),
    }


@pytest.fixture(scope="session")
def scripted_capture(server, tmp_path_factory):
    from workload import Workload

    w = Workload(server, str(tmp_path_factory.mktemp("workload")))
    w.setup_schema()
    w.pre_open()  # before tcpdump: its handshake is not captured
    cap = Tcpdump(OUT / "scripted-lo.pcap", PORT, iface="lo")
    # The same run with the snap length of the classic recipes: loopback segments longer than
    # 65535 bytes are cut, so the big requests and results lose bytes inside their packets.
    snap = Tcpdump(OUT / "scripted-lo-s65535.pcap", PORT, iface="lo", snaplen=65535)
    try:
        cap.start()
        snap.start()
        before = server.status()
        ledger = w.run()
        # every workload connection closed, the pre-existing one included
        after = server.status(threads=before["Threads_connected"] - 1)
    finally:
        try:
            stats = cap.stop()
        finally:
            snap_stats = snap.stop()
    _check_tcpdump(stats, "lo")
    _check_tcpdump(snap_stats, "lo -s 65535")
    d = delta(before, after)
    snapped = Capture(snap.out, snap_stats, d, {"ledger": ledger, "workload": w})
    return Capture(cap.out, stats, d, {"ledger": ledger, "workload": w, "snaplen": snapped})


# dbtap runs are cached per (subcommand, file, args) for the session.
_cache: dict = {}


def _key(*a):
    return tuple(str(x) for x in a)


@pytest.fixture(scope="session")
def dbtap_events():
    def run(pcap, *extra):
        k = _key("events", pcap, *extra)
        if k not in _cache:
            _cache[k] = harness.events(pcap, extra=("--server", f"127.0.0.1:{PORT}", *extra))
        return _cache[k]
    return run


@pytest.fixture(scope="session")
def dbtap_digest():
    def run(pcap, *extra, server_flag=True):
        k = _key("digest", pcap, server_flag, *extra)
        if k not in _cache:
            flags = ("--server", f"127.0.0.1:{PORT}") if server_flag else ()
            _cache[k] = harness.digest(pcap, extra=(*flags, *extra))
        return _cache[k]
    return run
