"""The history store (`digest --store`, `live --store`) and the web API (`dbtap ui`, `live --listen`).

A private redis-server on 127.0.0.1:38300 (redis_harness.RedisServer). A raw-RESP client on one
connection sends SET, GET and INCR paced by its own clock across a minute boundary, never within
0.3 s of a boundary, and counts what it sent per minute and command (the minute of the moment it
sent the request: the request's start). Truth: the client's own counts, cross-checked with the
server's INFO commandstats (read over the UNIX socket, which the capture does not see).

- `digest --store`: the store's minute rows, summed per minute and command, equal the client's
  counts; every tier sums to the server's counters and to `dbtap digest --format json`; a second
  store from the same capture holds identical rows.
- `dbtap ui CAPTURE` and `dbtap ui --store`: /api/top equals the digest (count per group, totals,
  p99 within the histogram's error), /api/group's per-minute series equals the client's counts.
- `live --store` SIGKILLed mid-run: every minute before the current one is in the store with the
  client's counts; under `--listen`, /api/live shows the interval lines and /metrics still works.
- `dbtap ui --store A --compare-store B` (two stores of the same capture): /api/compare with
  a_store=a, b_store=b gives both sides the digest's counts per group, and B's own range its
  minute's client counts.
- The access token is enforced when set; the default listen address is loopback.

Ports 38300-38349 only; files under tests/out/store.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import live_harness  # noqa: E402
import redis_harness as rh  # noqa: E402

PORT = 38300
UI_PORT = 38301
COMPARE_UI_PORT = 38303
OUT = harness.REPO / "tests" / "out" / "store"
CMDS = {
    "set": (b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", b"+OK\r\n"),
    "get": (b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"$1\r\nv\r\n"),
    "incr": (b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n", None),
}
RATE = 40  # requests per second, SET/GET/INCR in turn


def _read_reply(sock: socket.socket, want: bytes | None) -> None:
    got = b""
    while not got.endswith(b"\r\n") or (want is not None and len(got) < len(want)):
        chunk = sock.recv(64)
        if not chunk:
            raise RuntimeError("server closed the connection")
        got += chunk
    if want is not None:
        assert got == want, got
    else:
        assert got.startswith(b":"), got


def paced_client(port: int, until: float, stop: threading.Event | None = None) -> dict:
    """Sends SET/GET/INCR at RATE per second until `until` (wall clock); returns
    {minute: Counter(command)} by the minute each request was sent in."""
    sent: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    order = ["set", "get", "incr"]
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        k = 0
        next_t = time.time()
        while time.time() < until and not (stop and stop.is_set()):
            delay = next_t - time.time()
            if delay > 0:
                time.sleep(delay)
            next_t += 1.0 / RATE
            now = time.time()
            into_minute = now % 60
            if into_minute < 0.3 or into_minute > 59.7:
                continue  # too near a boundary: not sent, not counted
            cmd = order[k % 3]
            k += 1
            req, want = CMDS[cmd]
            s.sendall(req)
            _read_reply(s, want)
            sent[int(now // 60) * 60][cmd] += 1
    return sent


def run_across_boundary(port: int, after_s: float = 6.0) -> tuple[float, dict]:
    """Runs the paced client from now until `after_s` seconds past the next minute boundary
    (the one after it when the next is less than 8 s away: the run is then at least 14 s, so
    the workload's more than 500 requests do not depend on the second it starts in)."""
    now = time.time()
    boundary = (int(now // 60) + 1) * 60
    if boundary - now < 8:
        boundary += 60
    until = boundary + after_s
    return until, paced_client(port, until)


def totals(sent: dict) -> collections.Counter:
    out = collections.Counter()
    for c in sent.values():
        out.update(c)
    return out


class Capture:
    pcap: Path
    sent: dict
    server: dict


@pytest.fixture(scope="module")
def srv():
    s = rh.RedisServer(PORT, OUT / "server")
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def cap(srv):
    before = srv.snapshot()
    tcpdump = rh.Tcpdump(OUT / "store.pcap", PORT)
    try:
        tcpdump.start()
        _, sent = run_across_boundary(PORT)
    finally:
        stats = tcpdump.stop()
    rh.check_dropped(stats)
    delta = rh.stats_delta(before, srv.snapshot())
    c = Capture()
    c.pcap, c.sent = tcpdump.out, sent
    c.server = {k: v["requests"] for k, v in rh.per_command(delta).items()}
    # The client's counts are what the server ran.
    assert c.server == dict(totals(sent)), (c.server, totals(sent))
    assert len(sent) >= 2, "the workload did not straddle a minute boundary"
    assert sum(totals(sent).values()) > 500, sent
    return c


def digest(c: Capture, *extra: str) -> dict:
    return harness.digest(c.pcap, extra=("--port", str(PORT), *extra))


def store_digest(c: Capture, name: str) -> Path:
    path = OUT / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    harness.dbtap("digest", c.pcap, "--port", str(PORT), "--store", path)
    return path


def per_minute(path: Path, tier: str = "m1") -> dict:
    """{(ts, command): count} summed over the series of each (tier start, command)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            f"SELECT t.ts, s.command, sum(t.count) FROM {tier} t JOIN series s ON s.id = t.series "
            "GROUP BY t.ts, s.command").fetchall()
    finally:
        db.close()
    return {(ts, cmd): n for ts, cmd, n in rows}


def client_minutes(sent: dict) -> dict:
    return {(m, cmd): n for m, c in sent.items() for cmd, n in c.items()}


def by_command(d: dict) -> dict:
    out = collections.Counter()
    for g in d["queries"]:
        out[g["command"]] += g["count"]
    return dict(out)


def test_digest_store_counts_equal_the_clients_per_minute(cap):
    path = store_digest(cap, "digest.db")
    assert per_minute(path) == client_minutes(cap.sent)
    # The hour and day rows (rolled up at the end) add up to the same totals.
    want = dict(totals(cap.sent))
    for tier in ("h1", "d1"):
        got = collections.Counter()
        for (_, cmd), n in per_minute(path, tier).items():
            got[cmd] += n
        assert dict(got) == want == cap.server, tier
    # ...and to the digest of the same capture.
    assert by_command(digest(cap)) == want


def dump(path: Path) -> list:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out = []
        for tier in ("m1", "h1", "d1"):
            out.append(db.execute(
                f"SELECT s.protocol, s.command, s.qid, s.fp_hash, s.server, s.client, s.db, s.user, t.* "
                f"FROM {tier} t JOIN series s ON s.id = t.series ORDER BY 1,2,3,4,5,6,7,8, t.ts"
            ).fetchall())
        out.append(db.execute("SELECT * FROM fingerprints ORDER BY 1,2,3").fetchall())
        return out
    finally:
        db.close()


def test_digest_store_is_deterministic(cap):
    a = dump(store_digest(cap, "det-a.db"))
    b = dump(store_digest(cap, "det-b.db"))
    assert a[0], "no minute rows"
    assert a == b


# -- the web API -----------------------------------------------------------------------------------

class Ui:
    """One `dbtap ui` process; start() returns once it printed its start line."""

    def __init__(self, *args: str, env: dict | None = None):
        self.cmd = [str(harness.dbtap_path()), "ui", *map(str, args)]
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.err = ""

    def start(self, timeout: float = 60) -> "Ui":
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=self.env)
        deadline = time.monotonic() + timeout
        while True:
            line = self.proc.stderr.readline()
            self.err += line
            m = re.match(r"dbtap: ui on http://([0-9.]+:\d+)/ \(", line)
            if m:
                self.addr = m.group(1)
                return self
            if (not line and self.proc.poll() is not None) or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.cmd} did not start: {self.err}")

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def __enter__(self) -> "Ui":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def url(self, path: str) -> str:
        return f"http://{self.addr}{path}"


def get(url: str, headers: dict | None = None) -> tuple[int, bytes, dict]:
    rq = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(rq, timeout=30) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def get_json(url: str) -> dict:
    status, body, headers = get(url)
    assert status == 200, (url, status, body)
    assert headers["Content-Type"] == "application/json"
    return json.loads(body)


def check_top_equals_digest(ui: Ui, cap: Capture, d: dict) -> None:
    lo, hi = min(cap.sent), max(cap.sent) + 60
    top = get_json(ui.url(f"/api/top?from={lo}&to={hi}&limit=1000&points=10"))
    assert (top["from"], top["to"]) == (lo, hi)
    assert top["totals"]["count"] == d["totals"]["queries"] == sum(totals(cap.sent).values())
    assert top["totals"]["errors"] == 0 and top["omitted"] == 0
    want = {g["id"]: g for g in d["queries"]}
    assert {r["id"] for r in top["groups"]} == set(want)
    for r in top["groups"]:
        g = want[r["id"]]
        assert (r["protocol"], r["command"], r["count"]) == (g["protocol"], g["command"], g["count"])
        assert abs(r["p99_us"] - g["service_us"]["p99"]) <= 0.01 * g["service_us"]["p99"], (r, g)
        assert abs(r["service_sum_us"] - g["service_us"]["sum"]) <= 1e-6 * g["service_us"]["sum"] + 1
        assert len(r["spark"]) >= 1
    # The top group by load is the digest's first (ranked by service time too).
    assert top["groups"][0]["id"] == d["queries"][0]["id"]
    # One group over time: a point per minute, the client's counts.
    g = top["groups"][0]
    q = f"protocol={g['protocol']}&command={g['command']}&id={g['id']}&from={lo}&to={hi}"
    ga = get_json(ui.url(f"/api/group?{q}&points={(hi - lo) // 60}"))
    assert ga["step_s"] == 60 and ga["summary"]["count"] == g["count"]
    series = {p["ts"]: p["count"] for p in ga["series"] if p["count"]}
    assert series == {m: c[g["command"]] for m, c in cap.sent.items() if c[g["command"]]}


def test_ui_of_captures_answers_equal_the_digest(cap):
    d = digest(cap)
    with Ui(cap.pcap, "--port", PORT, "--listen", f"127.0.0.1:{UI_PORT}") as ui:
        meta = get_json(ui.url("/api/meta"))
        assert meta["mode"] == "captures" and meta["live"] is None and meta["examples"] is True
        assert [s["label"] for s in meta["sources"]] == [str(cap.pcap)]
        assert meta["span"]["from"] == min(cap.sent) and meta["span"]["to"] == max(cap.sent) + 60
        check_top_equals_digest(ui, cap, d)
        dims = get_json(ui.url("/api/dims?from=-1h"))
        assert [s["value"] for s in dims["dims"]["server"]] == [f"127.0.0.1:{PORT}"]
        # Bad parameters: 400 with one line of JSON.
        for bad in ("/api/top?sort=nope", "/api/top?limit=0", "/api/top?from=abc",
                    "/api/top?from=10&to=5", "/api/group?protocol=redis"):
            status, body, _ = get(ui.url(bad))
            assert status == 400, (bad, status, body)
            assert body.count(b"\n") == 1 and "error" in json.loads(body), body
        status, body, _ = get(ui.url("/api/live"))
        assert status == 404 and json.loads(body) == {"error": "not live"}
        status, _, _ = get(ui.url("/metrics"))
        assert status == 404
        status, body, headers = get(ui.url("/"))
        assert status == 200 and headers["Content-Type"].startswith("text/html"), body[:200]
    assert ui.proc.returncode == 0, ui.err


def test_ui_of_a_store_answers_equal_the_digest(cap):
    path = store_digest(cap, "ui.db")
    with Ui("--store", path, "--listen", f":{UI_PORT}") as ui:
        assert ui.addr == f"127.0.0.1:{UI_PORT}"  # `:PORT` is loopback
        assert get_json(ui.url("/api/meta"))["mode"] == "store"
        check_top_equals_digest(ui, cap, digest(cap))
        # Compare: the same range twice is no change.
        lo, hi = min(cap.sent), max(cap.sent) + 60
        c = get_json(ui.url(f"/api/compare?a_from={lo}&a_to={hi}&b_from={lo}&b_to={hi}"))
        assert c["before"]["queries"] == c["after"]["queries"] == sum(totals(cap.sent).values())


def test_ui_compares_two_stores(cap):
    """`dbtap ui --store A --compare-store B`: both listed as sources; /api/compare reads each
    side from the store it names, over its own range (default: that store's whole span)."""
    a, b = store_digest(cap, "cmp-a.db"), store_digest(cap, "cmp-b.db")
    lo, hi = min(cap.sent), max(cap.sent) + 60
    last = max(cap.sent)
    with Ui("--store", a, "--compare-store", b, "--listen", f"127.0.0.1:{COMPARE_UI_PORT}") as ui:
        meta = get_json(ui.url("/api/meta"))
        assert meta["mode"] == "store"
        assert meta["sources"] == [{"label": str(a), "from": lo, "to": hi, "store": "a"},
                                   {"label": str(b), "from": lo, "to": hi, "store": "b"}]
        want = {g["id"]: g["count"] for g in digest(cap)["queries"]}
        c = get_json(ui.url("/api/compare?a_store=a&b_store=b"))
        assert c["before"]["queries"] == c["after"]["queries"] == sum(totals(cap.sent).values())
        assert {g["id"]: (g["count_before"], g["count_after"]) for g in c["groups"]} == {
            i: (n, n) for i, n in want.items()}
        assert {g["status"] for g in c["groups"]} == {"unchanged"}, c["groups"]
        # B's own range: its last minute only, the client's counts of that minute.
        c = get_json(ui.url(f"/api/compare?a_store=a&b_store=b&b_from={last}&b_to={last + 60}"))
        assert c["before"]["queries"] == sum(totals(cap.sent).values())
        assert c["after"]["queries"] == sum(cap.sent[last].values())
        assert {g["command"]: g["count_after"] for g in c["groups"] if g["count_after"]} == {
            k: n for k, n in cap.sent[last].items() if n}
        for bad in ("/api/compare?a_store=c", "/api/compare?b_store=B"):
            status, body, _ = get(ui.url(bad))
            assert status == 400 and "error" in json.loads(body), (bad, status, body)
    assert ui.proc.returncode == 0, ui.err
    # Without --compare-store there is no store B.
    with Ui("--store", a, "--listen", f"127.0.0.1:{COMPARE_UI_PORT}") as ui:
        assert get_json(ui.url("/api/meta"))["sources"] == []
        status, body, _ = get(ui.url("/api/compare?b_store=b"))
        assert status == 400 and "compare-store" in json.loads(body)["error"], body


def test_token_is_enforced_when_set(cap):
    path = store_digest(cap, "token.db")
    tf = OUT / "token.txt"
    tf.write_text("s3cret\n")
    with Ui("--store", path, "--listen", f"127.0.0.1:{UI_PORT}", "--token-file", tf) as ui:
        for path_ in ("/api/meta", "/api/top", "/", "/api/meta?token=wrong"):
            status, body, headers = get(ui.url(path_))
            assert status == 401, (path_, status)
            assert headers.get("WWW-Authenticate") == "Bearer" and "error" in json.loads(body)
        assert get(ui.url("/api/meta"), {"Authorization": "Bearer wrong"})[0] == 401
        assert get(ui.url("/api/meta"), {"Authorization": "Bearer s3cret"})[0] == 200
        assert get(ui.url("/api/meta?token=s3cret"))[0] == 200
        assert get(ui.url("/?token=s3cret"))[0] == 200
        # Static assets need no token (they hold no data).
        assert get(ui.url("/assets/nothing-here"))[0] == 404
    env = dict(os.environ, DBTAP_UI_TOKEN="fromenv")
    with Ui("--store", path, "--listen", f"127.0.0.1:{UI_PORT}", env=env) as ui:
        assert get(ui.url("/api/meta"))[0] == 401
        assert get(ui.url("/api/meta"), {"Authorization": "Bearer fromenv"})[0] == 200


def test_the_default_listen_address_is_loopback():
    text = " ".join(harness.dbtap("ui", "--help").stdout.decode().split())
    assert "[default: 127.0.0.1:7070]" in text
    for cmd in ("live", "ui"):
        text = " ".join(harness.dbtap(cmd, "--help").stdout.decode().split())
        # 0.0.0.0 is only ever named as what to give explicitly.
        assert "0.0.0.0" not in text.replace("Give 0.0.0.0", ""), text


# -- live ----------------------------------------------------------------------------------------

def test_live_store_survives_sigkill_and_listen_serves_the_ui(srv):
    path = OUT / "live.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    live = live_harness.Live("-i", "lo", "--port", PORT, "--store", path,
                             "--listen", f":{PORT + 2}", "--interval", "1s")
    live.start()
    try:
        listen = live.listen_addr()
        assert listen == f"127.0.0.1:{PORT + 2}"  # `:PORT` is loopback
        # Kill 3 s past a minute boundary: the minute before it is written one interval (1 s)
        # after its end; of the current minute, what was written at most.
        now = time.time()
        boundary = (int(now // 60) + 1) * 60
        if boundary - now < 4:
            boundary += 60
        kill_at = boundary + 1
        result: dict = {}
        t = threading.Thread(target=lambda: result.update(sent=paced_client(PORT, kill_at + 1)))
        t.start()
        time.sleep(3)
        # The web UI and the old routes, while running.
        live_json = get_json(f"http://{listen}/api/live")
        assert live_json["interval_s"] == 1.0
        assert live_json["header"][:3] == ["time", "server", "count"]
        assert [ln[1] for ln in live_json["lines"]] == [f"127.0.0.1:{PORT}"]
        assert any(r["command"] in CMDS for r in live_json["top"]), live_json["top"]
        meta = get_json(f"http://{listen}/api/meta")
        assert meta["mode"] == "live" and meta["live"] == {"interval_s": 1.0}
        status, body, headers = get(f"http://{listen}/metrics")
        assert status == 200 and headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert b"dbtap_" in body
        status, body, _ = get(f"http://{listen}/api/digest?window=total")
        assert status == 200 and "totals" in json.loads(body)
        time.sleep(max(0.0, kill_at - time.time()))
        # Every minute that ended before `checked` is due: its last events reach the writer
        # with the interval report after its end (1 s); 2 s more of the process's own time
        # (the wall clock of this machine may jump) and it is written.
        checked = time.time()
        time.sleep(2)
        live.stop(signal.SIGKILL)
        t.join(30)
    finally:
        live.stop(signal.SIGKILL)
    sent = result["sent"]
    due = [m for m in sent if m + 60 <= checked]
    assert due, (sorted(sent), checked)
    want = {k: v for k, v in client_minutes(sent).items() if k[0] in due}
    got = {k: v for k, v in per_minute(path).items() if k[0] in due}
    assert got == want
    # What was written of later minutes is never more than was sent.
    for k, n in per_minute(path).items():
        assert n <= client_minutes(sent).get(k, 0), k


def test_live_store_stopped_by_sigint_writes_every_minute(srv):
    path = OUT / "live-int.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    live = live_harness.Live("-i", "lo", "--port", PORT, "--store", path, "--interval", "0",
                             "--format", "json", "--limit", "0")
    live.start()
    try:
        sent = paced_client(PORT, time.time() + 4)
        time.sleep(1.5)  # the last responses reach the capture
    finally:
        live.stop(signal.SIGINT)
    assert live.rc == 0, live.stderr
    # The current minute too: a stop writes what is pending.
    assert per_minute(path) == client_minutes(sent)
    # The final digest says the same.
    assert live_harness.by_command(live.json()) == dict(totals(sent))
