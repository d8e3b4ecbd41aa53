"""dbtap replay, MongoDB end to end: real servers A and B (tests/mongo-server, the wire-protocol
server behind mongo_harness.MongoServer), a real client (pymongo 4 in the venv: getMore chains
from finds in batches of 20, insert, update, aggregate, a cursor closed early: killCursors),
captured with tcpdump on lo, replayed onto B.

The truth is the servers' own counters: the test server counts every command it handles per
database and name, the documents its cursor batches return, and the commands that failed
(`dbtapCommandCounts`, read here over a raw socket so the reading adds no command of its own),
plus the client's own document counts. Never dbtap's report (its fidelity counts are checked
against those, not used as truth).

Ports 38475-38499 only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import mongo_harness as mh  # noqa: E402

PORT_A, PORT_B = 38475, 38476
OUT = harness.REPO / "tests" / "out" / "replay_mongo"
DB = "dbtapwl"
N_DOCS, BATCH, CHAINS = 300, 20, 3

# Runs in the pymongo venv: `seed` fills the collection (outside any capture); `workload` is the
# captured traffic. Prints the client's own counts as JSON.
WORKLOAD = r"""
import json, sys, pymongo
port, mode = int(sys.argv[1]), sys.argv[2]
c = pymongo.MongoClient("127.0.0.1", port, maxPoolSize=1, directConnection=True,
                        serverSelectionTimeoutMS=20000)
co = c["dbtapwl"]["users"]
out = {}
if mode == "seed":
    co.drop()
    co.insert_many([{"_id": i, "a": i % 7} for i in range(300)])
elif mode == "workload":
    out["chain_docs"] = [sum(1 for _ in co.find({}, batch_size=20)) for _ in range(3)]
    co.update_many({"a": 1}, {"$set": {"b": 1}})
    out["agg"] = len(list(co.aggregate([{"$group": {"_id": "$a", "n": {"$sum": 1}}}])))
    cur = co.find({}, batch_size=10)
    next(cur)
    cur.close()
    co.insert_one({"_id": "new", "a": 0})
elif mode == "pre":
    # a connection and a cursor opened before the capture, its getMores inside it
    cur = co.find({}, batch_size=20)
    next(cur)
    print("ready", flush=True)
    sys.stdin.readline()
    out["chain_docs"] = 1 + sum(1 for _ in cur)
    out["finds"] = sum(1 for _ in range(5) if co.find_one({"_id": 1}))
c.close()
print(json.dumps(out))
"""


def start(srv) -> None:
    """Starts a server, again (up to 3 times) when it fails: the ports of the range are also
    ephemeral ports, so any client's connection may hold one for a moment."""
    for attempt in range(3):
        try:
            srv.start()
            return
        except RuntimeError:
            if attempt == 2:
                raise
            try:
                srv.stop()
            except Exception:  # noqa: BLE001 - a server that did not start may not stop
                pass
            time.sleep(2)


def venv(port: int, mode: str) -> dict:
    if not mh.VENV_PY.exists():
        pytest.fail(f"{mh.VENV_PY} missing: run tests/setup.sh (pymongo venv)")
    r = subprocess.run([str(mh.VENV_PY), "-c", WORKLOAD, str(port), mode], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# -------------------------------------------------------------------------------------------------
# the server's counters over a raw socket (no handshake, no command counted)

def _bson_doc(b: bytes, at: int) -> tuple[dict, int]:
    n = struct.unpack_from("<i", b, at)[0]
    end, at, out = at + n - 1, at + 4, {}
    while at < end:
        t = b[at]
        k_end = b.index(0, at + 1)
        key, at = b[at + 1:k_end].decode(), k_end + 1
        if t == 0x01:
            out[key] = struct.unpack_from("<d", b, at)[0]
            at += 8
        elif t == 0x02:
            ln = struct.unpack_from("<i", b, at)[0]
            out[key] = b[at + 4:at + 3 + ln].decode()
            at += 4 + ln
        elif t in (0x03, 0x04):
            out[key], _ = _bson_doc(b, at)
            at += struct.unpack_from("<i", b, at)[0]
        elif t == 0x08:
            out[key] = bool(b[at])
            at += 1
        elif t == 0x10:
            out[key] = struct.unpack_from("<i", b, at)[0]
            at += 4
        elif t in (0x09, 0x11):
            out[key] = struct.unpack_from("<q", b, at)[0]
            at += 8
        elif t == 0x12:
            out[key] = struct.unpack_from("<q", b, at)[0]
            at += 8
        else:
            raise ValueError(f"BSON type {t:#x} not read here")
    return out, end + 1


def op_msg(name: str, db: str, rid: int = 1) -> bytes:
    """An OP_MSG `{name: 1, $db: db}`."""
    doc = (b"\x10" + name.encode() + b"\x00\x01\x00\x00\x00\x02$db\x00"
           + struct.pack("<i", len(db) + 1) + db.encode() + b"\x00")
    doc = struct.pack("<i", len(doc) + 5) + doc + b"\x00"
    body = struct.pack("<I", 0) + b"\x00" + doc
    return struct.pack("<iiii", 16 + len(body), rid, 0, 2013) + body


def bson(fields: list[tuple[str, object]]) -> bytes:
    """A BSON document of str, int (int64) and float fields, in order."""
    out = b""
    for k, v in fields:
        key = k.encode() + b"\x00"
        if isinstance(v, str):
            out += b"\x02" + key + struct.pack("<i", len(v) + 1) + v.encode() + b"\x00"
        elif isinstance(v, float):
            out += b"\x01" + key + struct.pack("<d", v)
        else:
            out += b"\x12" + key + struct.pack("<q", v)
    return struct.pack("<i", len(out) + 5) + out + b"\x00"


def raw_doc(s: socket.socket, fields: list[tuple[str, object]], rid: int) -> dict:
    """Sends the OP_MSG command `fields`; its reply document."""
    body = struct.pack("<I", 0) + b"\x00" + bson(fields)
    s.sendall(struct.pack("<iiii", 16 + len(body), rid, 0, 2013) + body)
    buf = b""
    while len(buf) < 4 or len(buf) < struct.unpack_from("<i", buf)[0]:
        chunk = s.recv(65536)
        assert chunk, "server closed"
        buf += chunk
    return _bson_doc(buf, 21)[0]


def raw_command(s: socket.socket, name: str, db: str = "admin", rid: int = 1) -> dict:
    s.sendall(op_msg(name, db, rid))
    buf = b""
    while len(buf) < 4 or len(buf) < struct.unpack_from("<i", buf)[0]:
        chunk = s.recv(65536)
        assert chunk, "server closed"
        buf += chunk
    return _bson_doc(buf, 21)[0]


def server(port: int, name: str) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        return raw_command(s, name)


def counts(port: int) -> dict[str, int]:
    """The server's counters of the workload's database: {"getMore": n, "getMore#docs": n, ...}."""
    reply = server(port, "dbtapCommandCounts")
    return {k.split(".", 1)[1]: v for k, v in reply["counts"].items() if k.startswith(DB + ".")}


def open_cursors(port: int) -> int:
    return server(port, "serverStatus")["metrics"]["cursor"]["open"]["total"]


def delta(before: dict, after: dict) -> dict:
    out = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    return {k: v for k, v in out.items() if v}


# -------------------------------------------------------------------------------------------------

class Captured:
    pass


@pytest.fixture(scope="module")
def cap():
    OUT.mkdir(parents=True, exist_ok=True)
    a = mh.MongoServer(PORT_A, OUT / "a")
    b = mh.MongoServer(PORT_B, OUT / "b")
    c = Captured()
    try:
        start(a)
        start(b)
        venv(PORT_A, "seed")
        td = mh.Tcpdump(OUT / "mongo.pcap", PORT_A)
        before = counts(PORT_A)
        try:
            td.start()
            c.client = venv(PORT_A, "workload")
        finally:
            c.tcpdump = td.stop()
        c.a = delta(before, counts(PORT_A))
        c.a_open = open_cursors(PORT_A)
        mh.check_dropped(c.tcpdump)
        c.pcap = td.out
        c.b = b
        yield c
    finally:
        a.stop()
        b.stop()


def replay(c: Captured, *args: str) -> tuple[dict, dict]:
    """Seeds B as A was, replays; returns (B's counters over the replay, the JSON report)."""
    venv(PORT_B, "seed")
    before = counts(PORT_B)
    r = subprocess.run([str(harness.DBTAP), "replay", str(c.pcap), "--port", str(PORT_A),
                        "--target", f"127.0.0.1:{PORT_B}", "--format", "json", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return delta(before, counts(PORT_B)), json.loads(r.stdout)


def test_capture_is_what_the_client_did(cap):
    """A's own counters: 3 chains of 300 documents in batches of 20 (14 getMores each), the
    aggregate, the closed cursor's killCursors."""
    assert cap.client["chain_docs"] == [N_DOCS] * CHAINS
    per_chain = -(-N_DOCS // BATCH) - 1
    assert cap.a["getMore"] == CHAINS * per_chain, cap.a
    assert cap.a["getMore#docs"] == CHAINS * (N_DOCS - BATCH), cap.a
    for cmd in ("find", "update", "aggregate", "killCursors", "insert"):
        assert cap.a.get(cmd, 0) >= 1, (cmd, cap.a)


def test_replay_equals_capture_per_command(cap):
    """B's counters equal A's per command, documents returned by find and getMore included
    (each getMore found its cursor on B, remapped), no command failed."""
    was_open = open_cursors(PORT_B)
    got, rep = replay(cap, "--max")
    assert got == cap.a, (got, cap.a)
    assert not any(k.endswith("!error") for k in got), got
    f = rep["fidelity"]
    assert f["requests_sent"] == f["requests_framed"] == f["requests_captured"], f
    assert f["skipped_requests"] == {}, f
    # the cursor closed early was killed on B too: its killCursors named B's cursor
    assert cap.a_open == 0 and open_cursors(PORT_B) == was_open


def test_scale_2_doubles(cap):
    """B runs every command twice. The two copies share B's data, so when one copy's insert
    lands before the other's finds, those finds see 301 documents and their captured getMores
    leave each cursor one document short of its end, open on B (as on any server): the tests
    after this one count the cursors their own replay leaves open, not all of B's."""
    got, rep = replay(cap, "--max", "--scale", "2")
    want = {k: 2 * v for k, v in cap.a.items()}
    assert got == want, (got, want)
    assert rep["fidelity"]["requests_sent"] == 2 * rep["fidelity"]["requests_framed"]


# The workload's commands that write: `--read-only` leaves them out.
MONGO_WRITES = ("insert", "update", "delete", "findAndModify")


def _command(key: str) -> str:
    """The command a counter key names ("getMore#docs" and "find!error" name getMore, find)."""
    return key.split("#", 1)[0].split("!", 1)[0]


def test_read_only_leaves_writes_at_zero(cap):
    """--read-only: B runs A's reads (the finds with their getMore chains, the aggregate, the
    killCursors of the cursor closed early) exactly, and none of its writes; the writes left
    out are counted as skipped."""
    was_open = open_cursors(PORT_B)
    got, rep = replay(cap, "--max", "--read-only")
    writes = {k: v for k, v in cap.a.items() if _command(k) in MONGO_WRITES}
    assert writes.get("update", 0) >= 1 and writes.get("insert", 0) >= 1, cap.a
    reads = {k: v for k, v in cap.a.items() if _command(k) not in MONGO_WRITES}
    assert got == reads, (got, reads)
    f = rep["fidelity"]
    n_writes = sum(v for k, v in writes.items() if k == _command(k))
    assert f["skipped_requests"].get("read_only") == n_writes, f
    assert open_cursors(PORT_B) == was_open


def test_cursor_before_capture_and_captured_auth(cap):
    """A connection begun before the capture whose cursor was opened before it: its getMores
    are skipped (the target never had that cursor), its later finds replayed. A captured
    saslStart is skipped (dbtap does not log in to MongoDB), the rest of its connection
    replayed. B's counters equal A's minus exactly those."""
    venv(PORT_A, "seed")
    pre = subprocess.Popen([str(mh.VENV_PY), "-c", WORKLOAD, str(PORT_A), "pre"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert pre.stdout.readline().strip() == "ready"
        td = mh.Tcpdump(OUT / "edge.pcap", PORT_A)
        before = counts(PORT_A)
        try:
            td.start()
            pre.stdin.write("go\n")
            pre.stdin.flush()
            client = json.loads(pre.stdout.readline())
            assert pre.wait(60) == 0
            with socket.create_connection(("127.0.0.1", PORT_A), timeout=10) as s:
                sasl = raw_command(s, "saslStart", DB, 1)
                raw_command(s, "ping", DB, 2)
        finally:
            stats = td.stop()
        a = delta(before, counts(PORT_A))
    finally:
        if pre.poll() is None:
            pre.kill()
    mh.check_dropped(stats)
    assert client == {"chain_docs": N_DOCS, "finds": 5}, client
    assert sasl.get("ok") == 0, sasl
    assert a["getMore"] == -(-N_DOCS // BATCH) - 1 and a["saslStart"] == 1, a
    venv(PORT_B, "seed")
    before = counts(PORT_B)
    r = subprocess.run([str(harness.DBTAP), "replay", str(td.out), "--port", str(PORT_A),
                        "--target", f"127.0.0.1:{PORT_B}", "--format", "json", "--max"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = delta(before, counts(PORT_B))
    want = {k: v for k, v in a.items() if not k.startswith(("getMore", "saslStart"))}
    assert got == want, (got, want)
    skipped = json.loads(r.stdout)["fidelity"]["skipped_requests"]
    assert skipped == {"mongodb_cursor_opened_before_capture": a["getMore"],
                       "mongodb_auth_skipped": 1}, skipped


# -------------------------------------------------------------------------------------------------
# dbtap replay --live: a running workload on Redis A mirrored onto Redis B as it happens.
# Truth: A's and B's own INFO commandstats over the window (read over their UNIX sockets, not
# captured), and the clients' own counts.

import redis_harness as rh  # noqa: E402
import replay_harness as rph  # noqa: E402

PORT_RA, PORT_RB = 38479, 38480
REQUIRE = bool(os.environ.get("DBTAP_REQUIRE_CAPTURE"))


def need_capture() -> None:
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
    except (PermissionError, OSError) as e:
        if REQUIRE:
            pytest.fail(f"no packet capture here ({e}) and DBTAP_REQUIRE_CAPTURE is set")
        pytest.skip(f"no packet capture here: {e} (set DBTAP_REQUIRE_CAPTURE=1 to fail instead)")


@pytest.fixture(scope="module")
def capture_ok():
    need_capture()


@pytest.fixture(scope="module")
def redis_pair(capture_ok):
    a = rh.RedisServer(PORT_RA, OUT / "ra")
    b = rh.RedisServer(PORT_RB, OUT / "rb")
    try:
        start(a)
        start(b)
        yield a, b
    finally:
        a.stop()
        b.stop()


def wait_equal(b, before_b, want, timeout=20.0) -> dict:
    """B's per-command requests over the window, once they reach `want` (or the timeout)."""
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        # every earlier poll's INFO is in B's counts (stats_delta takes off the last one's)
        if polls:
            b.socket_calls["info"] = polls
        polls += 1
        got = rh.wire_requests(rh.stats_delta(before_b, b.snapshot()), b.socket_calls)
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_live_mirror_of_redis_benchmark(redis_pair):
    """redis-benchmark (4 clients, plain and -P 8 pipelined, 60k requests) on A while the
    mirror runs: B's commandstats equal A's per command (nothing lost at the benchmark's rate);
    stopped with SIGINT, the report holds both sides and sent == captured."""
    a, b = redis_pair
    for s in (a, b):
        s.admin().flushall()
        s.socket_calls.clear()
    before_a, before_b = a.snapshot(), b.snapshot()
    m = rph.Mirror(PORT_RA, PORT_RB)
    try:
        rh.benchmark_run(a, "set,get,incr,lpush", 10000, 1, 4)
        rh.benchmark_run(a, "set,get", 10000, 8, 4)
        want = rh.wire_requests(rh.stats_delta(before_a, a.snapshot()), a.socket_calls)
        got = wait_equal(b, before_b, want)
        m.proc.send_signal(signal.SIGINT)
        rep, _ = m.wait_report()
    finally:
        m.stop()
    assert got == want, (got, want, rep["fidelity"], "".join(m.err))
    assert want["set"]["requests"] == 20000 and want["get"]["requests"] == 20000, want
    f = rep["fidelity"]
    total = sum(v["requests"] for v in want.values())
    assert f["requests_sent"] == f["requests_captured"] == total, f
    assert f["skipped_requests"] == {}, f
    cap = sum(g["capture"]["count"] for g in rep["groups"].values())
    tgt = sum(g["target"]["count"] for g in rep["groups"].values())
    assert cap == tgt == f["requests_captured"], (cap, tgt)


def test_live_duration_and_select(redis_pair):
    """--duration ends the mirror on its own; a redis-py client's SELECT and INCRs land in the
    same database on B; with --scale 2 twice (two copies of the session)."""
    a, b = redis_pair
    for s in (a, b):
        s.admin().flushall()
    m = rph.Mirror(PORT_RA, PORT_RB, "--duration", "4s", "--scale", "2")
    try:
        t0 = time.monotonic()
        c = a.client(db=3)
        for _ in range(300):
            c.incr("live:counter")
            time.sleep(0.002)
        c.close()
        rep, _ = m.wait_report()
    finally:
        m.stop()
    wall = time.monotonic() - t0
    assert 3.5 < wall < 20, wall
    assert int(a.client(db=3).get("live:counter")) == 300
    vb = b.client(db=3).get("live:counter")
    assert vb is not None and int(vb) == 600, vb
    f = rep["fidelity"]
    assert f["requests_captured"] == 301 and f["requests_sent"] == 602, f
    assert f["target_connections"] == 2, f


MY_LA, MY_LB = 38481, 38482
MY_LIVE = ["Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close", "Com_select", "Com_begin",
           "Com_commit"]


def test_live_mirror_of_sysbench_prepared(capture_ok):
    """sysbench oltp_read_only with prepared statements (2 threads, paced at 40 transactions/s)
    on MariaDB A while the mirror runs (dbtap's own login on B, statement ids remapped): B's
    Com_* deltas equal A's. The sessions begin while the mirror runs (their login is seen)."""
    a = harness.Server(MY_LA, OUT / "my-la", tls=False)
    b = harness.Server(MY_LB, OUT / "my-lb", tls=False)
    try:
        start(a)
        start(b)
        for s in (MY_LA, MY_LB):
            harness.sysbench_prepare(s, 200)
        before_a, before_b = a.status(), b.status()
        m = rph.Mirror(MY_LA, MY_LB, "--user", harness.USER, "--password", harness.PASSWORD)
        try:
            args = harness.sysbench_args(MY_LA, 2, 200)
            args[1] = "oltp_read_only"
            r = subprocess.run(args + ["--time=4", "--rate=40", "--report-interval=0", "run"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=120)
            assert r.returncode == 0, r.stdout
            want = harness.delta(before_a, a.status(threads=before_a["Threads_connected"]))
            deadline = time.monotonic() + 20
            while True:
                got = harness.delta(before_b, b.status())
                if all(got[k] == want[k] for k in MY_LIVE) or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            m.proc.send_signal(signal.SIGTERM)
            rep, _ = m.wait_report()
        finally:
            m.stop()
    finally:
        a.stop()
        b.stop()
    assert want["Com_stmt_execute"] > 100 and want["Com_stmt_prepare"] > 0, want
    assert {k: got[k] for k in MY_LIVE} == {k: want[k] for k in MY_LIVE}
    f = rep["fidelity"]
    assert f["skipped_requests"] == {}, f
    assert f["requests_sent"] == f["requests_captured"], f



PG_LA, PG_LB = 38483, 38484


def test_live_mirror_of_pgbench_prepared_and_extended(capture_ok):
    """pgbench -M prepared (named statements: each Parse is remembered across the mirror's
    windows) and -M extended on PostgreSQL A while the mirror runs: B's pg_stat_statements
    calls equal A's per statement."""
    import pg_harness as ph
    a = ph.PgServer(PG_LA, OUT / "pg-la")
    b = ph.PgServer(PG_LB, OUT / "pg-lb")
    try:
        start(a)
        start(b)
        ph.pgbench_init(a)
        ph.pgbench_init(b)
        a.pgss_reset()
        b.pgss_reset()
        m = rph.Mirror(PG_LA, PG_LB)
        try:
            runs = [ph.pgbench_run(a, mode, 2, transactions=150)
                    for mode in ("prepared", "extended")]
            a.wait_idle()
            want = a.calls()
            deadline = time.monotonic() + 30
            while True:
                got = b.calls()
                if got == want or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            m.proc.send_signal(signal.SIGTERM)
            rep, _ = m.wait_report()
        finally:
            m.stop()
    finally:
        a.stop()
        b.stop()
    assert all(r["transactions"] == 300 for r in runs), runs
    upd = [q for q in want if q.startswith("update pgbench_accounts")]
    assert upd and sum(want[q] for q in upd) == 600, want
    assert got == want
    f = rep["fidelity"]
    assert f["skipped_requests"] == {}, f
    assert f["requests_sent"] == f["requests_framed"], f


def test_live_mirror_of_pymongo_with_cursors(cap, capture_ok):
    """The pymongo workload (getMore chains, killCursors) on A while the mirror runs: B's own
    command, document and open-cursor counts equal A's (each getMore found the cursor the
    mirrored find opened on B)."""
    venv(PORT_A, "seed")
    venv(PORT_B, "seed")
    open_before = open_cursors(PORT_A), open_cursors(PORT_B)
    before_a, before_b = counts(PORT_A), counts(PORT_B)
    m = rph.Mirror(PORT_A, PORT_B)
    try:
        client = venv(PORT_A, "workload")
        want = delta(before_a, counts(PORT_A))
        deadline = time.monotonic() + 20
        while True:
            got = delta(before_b, counts(PORT_B))
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        m.proc.send_signal(signal.SIGTERM)
        rep, _ = m.wait_report()
    finally:
        m.stop()
    assert client["chain_docs"] == [N_DOCS] * CHAINS
    assert want["getMore#docs"] == CHAINS * (N_DOCS - BATCH), want
    f = rep["fidelity"]
    assert got == want, (got, want, f)
    assert f["skipped_requests"] == {}, f
    assert f["requests_sent"] == f["requests_captured"], f
    # the cursor closed early was killed on both: B's killCursors named B's cursor
    assert (open_cursors(PORT_A), open_cursors(PORT_B)) == open_before, f


def test_getmore_on_another_connection_waits_for_its_cursor(cap):
    """A cursor opened by a find on one connection and read by getMores on another (as a
    driver's pool may do): replayed at --max, where both sessions start at once, the getMores
    wait for the other session's find on B and name B's cursor. B's counts equal A's, no
    getMore failed, every document came back."""
    venv(PORT_A, "seed")
    td = mh.Tcpdump(OUT / "cross.pcap", PORT_A)
    before = counts(PORT_A)
    docs = 0
    try:
        td.start()
        with socket.create_connection(("127.0.0.1", PORT_A), timeout=10) as s1, \
                socket.create_connection(("127.0.0.1", PORT_A), timeout=10) as s2:
            r = raw_doc(s1, [("find", "users"), ("batchSize", 50), ("$db", DB)], 1)
            cur = r["cursor"]["id"]
            docs += len(r["cursor"]["firstBatch"])
            rid = 1
            while cur:
                rid += 1
                r = raw_doc(s2, [("getMore", cur), ("collection", "users"), ("batchSize", 50),
                                 ("$db", DB)], rid)
                cur = r["cursor"]["id"]
                docs += len(r["cursor"]["nextBatch"])
    finally:
        stats = td.stop()
    mh.check_dropped(stats)
    a = delta(before, counts(PORT_A))
    assert docs == N_DOCS and a["getMore"] == N_DOCS // 50 - 1 + (N_DOCS % 50 > 0), (docs, a)
    venv(PORT_B, "seed")
    before_b = counts(PORT_B)
    r = subprocess.run([str(harness.DBTAP), "replay", str(td.out), "--port", str(PORT_A),
                        "--target", f"127.0.0.1:{PORT_B}", "--format", "json", "--max"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = delta(before_b, counts(PORT_B))
    assert got == a, (got, a)
    assert "getMore!error" not in got
    f = json.loads(r.stdout)["fidelity"]
    assert f["skipped_requests"] == {} and f["sessions_replayed"] == 2, f
