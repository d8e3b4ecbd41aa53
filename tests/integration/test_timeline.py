"""`digest --timeline` and `--since/--until` on a capture with a known workload shape.

A private redis-server on 127.0.0.1:38120 (redis_harness.RedisServer), captured with tcpdump on
lo. A raw-RESP client on one connection sends PING (and, in phase 2, ECHO) paced by its own
clock: within [0.2, 0.8) of each wall-clock second only, so that no request sits near an
interval boundary, and it counts what it sent per second and per command. The shape:
3 s at 20 PING/s, 1 s with nothing, 3 s at 30 PING/s + 30 ECHO/s.

Truth: the client's own per-second counts, cross-checked with the server's INFO commandstats
(read over the UNIX socket, which the capture does not see). dbtap's per-interval counts, and
its totals over a range given in every form (RFC 3339, time of day, relative to the capture's
start and end), must equal the client's counts for those seconds exactly.
"""

from __future__ import annotations

import collections
import datetime as dt
import socket
import struct
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402

PORT = 38120
OUT = harness.REPO / "tests" / "out" / "timeline"
# Per second of the workload: (PINGs, ECHOs).
SHAPE = [(20, 0)] * 3 + [(0, 0)] + [(30, 30)] * 3
PING = b"*1\r\n$4\r\nPING\r\n"
ECHO = b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n"


def _reply(sock: socket.socket, want: bytes) -> None:
    got = b""
    while len(got) < len(want):
        chunk = sock.recv(len(want) - len(got))
        if not chunk:
            raise RuntimeError("server closed the connection")
        got += chunk
    assert got == want, got


def run_client(port: int) -> tuple[int, dict[int, collections.Counter]]:
    """Sends SHAPE; returns the first second and, per second, the commands sent in it."""
    sent: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = int(time.time()) + 2  # a whole second clear of the connection's opening
        for i, (pings, echos) in enumerate(SHAPE):
            sec = start + i
            # Interleaved: PING, ECHO, PING, ... (phase 2 sends as many of each).
            cmds = ["ping"] * pings if not echos else ["ping", "echo"] * pings
            for k, cmd in enumerate(cmds):
                target = sec + 0.2 + 0.6 * k / len(cmds)
                delay = target - time.time()
                if delay > 0:
                    time.sleep(delay)
                now = time.time()
                if not (sec + 0.2 <= now < sec + 0.78):
                    continue  # late: not sent, not counted
                if cmd == "ping":
                    s.sendall(PING)
                    _reply(s, b"+PONG\r\n")
                else:
                    s.sendall(ECHO)
                    _reply(s, b"$5\r\nhello\r\n")
                done = time.time()
                assert int(done) == sec and done - sec < 0.9, "a request crossed a boundary"
                sent[sec][cmd] += 1
        # Leave the last second before closing, so the close is in a later interval.
        time.sleep(max(0.0, start + len(SHAPE) + 0.1 - time.time()))
    return start, sent


def pcap_bounds(path: Path) -> tuple[int, int]:
    """First and last record times (ns) of a pcap written by tcpdump (µs or ns resolution)."""
    data = path.read_bytes()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    else:
        endian = ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    off, first, last = 24, None, None
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        ns = sec * 1_000_000_000 + (frac if nano else frac * 1000)
        first = ns if first is None else first
        last = ns if last is None else max(last, ns)
        off += 16 + incl
    assert first is not None, "empty capture"
    return first, last


def iso(sec: int) -> str:
    return dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def clock(sec: int) -> str:
    return dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime("%H:%M:%S")


def epoch(rfc3339: str) -> int:
    t = dt.datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    assert t.microsecond == 0, rfc3339
    return int(t.timestamp())


class Capture:
    pcap: Path
    start: int
    sent: dict
    first_ns: int
    last_ns: int


@pytest.fixture(scope="module")
def cap():
    srv = rh.RedisServer(PORT, OUT / "server")
    try:
        srv.start()
        srv.reset_stats()
        tcpdump = rh.Tcpdump(OUT / "timeline.pcap", PORT)
        try:
            tcpdump.start()
            start, sent = run_client(PORT)
        finally:
            stats = tcpdump.stop()
        rh.check_dropped(stats)
        server = srv.admin().info("commandstats")
    finally:
        srv.stop()
    c = Capture()
    c.pcap, c.start, c.sent = tcpdump.out, start, sent
    c.first_ns, c.last_ns = pcap_bounds(c.pcap)
    # The client's counts are what the server ran (commandstats over the UNIX socket: INFO
    # itself is not on the wire).
    for cmd in ("ping", "echo"):
        want = sum(v[cmd] for v in sent.values())
        assert server.get(f"cmdstat_{cmd}", {}).get("calls", 0) == want, (cmd, server)
    assert sum(v["ping"] for v in sent.values()) > 120, "the client fell behind its pace"
    return c


def sent_in(c: Capture, lo: int, hi: int) -> int:
    """Requests the client sent in seconds [lo, hi)."""
    return sum(sum(v.values()) for s, v in c.sent.items() if lo <= s < hi)


def digest(c: Capture, *extra: str) -> dict:
    return harness.digest(c.pcap, extra=("--port", str(PORT), *extra))


def test_timeline_json_counts_equal_the_clients_per_second(cap):
    d = digest(cap, "--timeline", "1s")
    tl = d["timeline"]
    assert tl["interval_s"] == 1.0 and tl["by"] == "server" and tl["late"] == 0
    rows = tl["rows"]
    starts = [epoch(r["start"]) for r in rows]
    # One row per second from the capture's first packet to its last, none missing.
    assert starts == list(range(cap.first_ns // 10**9, cap.last_ns // 10**9 + 1))
    assert all(epoch(r["end"]) == epoch(r["start"]) + 1 for r in rows)
    assert {r["server"] for r in rows} == {f"127.0.0.1:{PORT}"}
    got = {epoch(r["start"]): r["count"] for r in rows}
    for sec in range(cap.start - 1, cap.start + len(SHAPE) + 1):
        assert got.get(sec, 0) == sent_in(cap, sec, sec + 1), sec
    # The second with nothing sent is a zero row (the gap shows), inside the capture.
    gap = cap.start + 3
    assert got[gap] == 0 and sent_in(cap, gap, gap + 1) == 0
    gap_row = next(r for r in rows if epoch(r["start"]) == gap)
    assert gap_row["p50_us"] is None and gap_row["pkts_in"] == 0
    # Every request is in a row: the rows add up to the digest's total.
    assert sum(got.values()) == d["totals"]["queries"] == sent_in(cap, 0, 2**40)
    busy = next(r for r in rows if epoch(r["start"]) == cap.start + 5)
    assert busy["errors"] == 0 and busy["p50_us"] is not None and busy["pkts_in"] >= busy["count"]


def test_timeline_text_lines_are_lives_columns(cap):
    r = harness.dbtap("digest", cap.pcap, "--port", str(PORT), "--timeline", "1s",
                      "--fields", "time,server,count,errors,qps")
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("# timeline: 1s intervals of packet time (UTC)")
    assert lines[1].split() == ["time", "server", "count", "errors", "qps"]
    rows = {}
    for line in lines[2:]:
        if not line:
            break
        t, server, count, errors, qps = line.split()
        assert server == f"127.0.0.1:{PORT}" and errors == "0"
        assert float(qps) == float(count)  # 1 s intervals
        rows[t] = int(count)
    # A line's time is its interval's end, as in `dbtap live`.
    for sec in range(cap.start, cap.start + len(SHAPE)):
        assert rows[clock(sec + 1)] == sent_in(cap, sec, sec + 1), sec
    # The digest follows the lines.
    assert "# dbtap query digest" in r.stdout.decode()


def test_timeline_by_group(cap):
    d = digest(cap, "--timeline", "1s", "--timeline-by", "group", "--timeline-top", "5")
    rows = d["timeline"]["rows"]
    per = collections.defaultdict(collections.Counter)
    for r in rows:
        assert "server" not in r and "pkts_in" not in r
        if r["group"] != "-":
            per[epoch(r["start"])][r["group"].lower()] += r["count"]
    for sec in range(cap.start, cap.start + len(SHAPE)):
        want = {k: v for k, v in cap.sent.get(sec, {}).items() if v}
        assert dict(per.get(sec, {})) == want, sec
    # Each group row carries the digest's Query ID of its group.
    ids = {q["fingerprint"].lower(): q["id"] for q in d["queries"]}
    assert {(r["group"].lower(), r["id"]) for r in rows if r["group"] != "-"} == set(ids.items())
    # Ranked by service time within an interval, at most --timeline-top rows each.
    r = harness.dbtap("digest", cap.pcap, "--port", str(PORT), "--timeline", "1s",
                      "--timeline-by", "group", "--timeline-top", "1")
    text = r.stdout.decode().split("\n\n")[0].splitlines()
    assert text[1].split()[-1] == "group"
    # One line per interval; in phase 2 ECHO and PING take turns at the top, by service time.
    assert len(text) - 2 == len({x["start"] for x in rows})


def test_since_until_absolute(cap):
    lo, hi = cap.start + 1, cap.start + 5
    d = digest(cap, "--since", iso(lo), "--until", iso(hi))
    assert d["totals"]["queries"] == sent_in(cap, lo, hi)
    assert d["time_range"]["from"].startswith(iso(lo)[:-1])
    assert d["time_range"]["to"].startswith(iso(hi)[:-1])
    assert d["time_range"]["by"] == "request_start"
    # Time of day on the capture's first day, UTC.
    d = digest(cap, "--since", clock(lo), "--until", clock(hi))
    assert d["totals"]["queries"] == sent_in(cap, lo, hi)
    # The same in another zone.
    other = dt.datetime.fromtimestamp(lo, dt.timezone(dt.timedelta(hours=5, minutes=30)))
    d = digest(cap, "--since", other.strftime("%H:%M:%S+05:30"), "--until", clock(hi) + "Z")
    assert d["totals"]["queries"] == sent_in(cap, lo, hi)
    # Events select the same requests.
    evs = harness.events(cap.pcap, extra=("--port", str(PORT), "--since", iso(lo), "--until", iso(hi)))
    assert len(evs) == sent_in(cap, lo, hi)
    assert all(lo * 10**9 <= e["start_ns"] < hi * 10**9 for e in evs)


def _secs(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}s"


def test_since_until_relative(cap):
    # +D from the first packet, to a whole second of the workload.
    lo, hi = cap.start + 2, cap.start + 6
    since = "+" + _secs(lo * 10**9 - cap.first_ns)
    until = "+" + _secs(hi * 10**9 - cap.first_ns)
    d = digest(cap, "--since", since, "--until", until)
    assert d["totals"]["queries"] == sent_in(cap, lo, hi) > 0
    # -D from the end (just after the last packet): the last seconds.
    lo = cap.start + 5
    since = "-" + _secs(cap.last_ns + 1 - lo * 10**9)
    d = digest(cap, "--since", since)
    assert d["totals"]["queries"] == sent_in(cap, lo, 2**40) > 0
    r = harness.dbtap("digest", cap.pcap, "--port", str(PORT), "--since", since)
    head = r.stdout.decode().splitlines()[:8]
    assert any(l.startswith("# Selected: requests that started at or after ")
               and l.endswith(f"(--since {since})") for l in head), head
    # With the timeline: only the selected seconds have rows, and they are the client's.
    d = digest(cap, "--since", iso(cap.start + 4), "--until", iso(cap.start + 6), "--timeline", "1s")
    got = {epoch(r["start"]): r["count"] for r in d["timeline"]["rows"]}
    assert got == {s: sent_in(cap, s, s + 1) for s in (cap.start + 4, cap.start + 5)}


def test_relative_times_need_a_file(cap):
    r = harness.dbtap("digest", "-", "--since", "-10s", stdin=cap.pcap.read_bytes(), check=False)
    assert r.returncode != 0 and b"standard input" in r.stderr
    # An absolute time works on standard input.
    r = harness.dbtap("digest", "-", "--port", str(PORT), "--format", "json",
                      "--since", iso(cap.start + 4), stdin=cap.pcap.read_bytes())
    import json
    assert json.loads(r.stdout)["totals"]["queries"] == sent_in(cap, cap.start + 4, 2**40)
