"""dbtap replay, Redis end to end: real servers A and B (redis_harness.RedisServer), real
clients (redis-benchmark with and without -P 16, redis-py with SELECT and MULTI/EXEC, a paced
raw-socket client), captured with tcpdump on lo, replayed onto B. The truth is the servers'
own counters (A's INFO commandstats over the capture window, B's after the replay), the
clients' own counts, B's MONITOR timestamps and PUBSUB NUMSUB, and wall clocks; never
dbtap's report (its fidelity counts are checked against those, not used as truth).

Ports 38400-38449 only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402
import replay_harness as rph  # noqa: E402

PORT_A, PORT_B = 38400, 38401
OUT = harness.REPO / "tests" / "out" / "replay"


@pytest.fixture(scope="module")
def servers():
    a = rh.RedisServer(PORT_A, OUT / "a")
    b = rh.RedisServer(PORT_B, OUT / "b")
    with rph.started_pair(a, b) as p:
        yield p


def capture(srv, name, work):
    """Runs `work` under tcpdump; returns (pcap, A's per-command requests over the window)."""
    return rph.redis_capture(srv, OUT / f"{name}.pcap", work)


def replay(pcap, b, *args, prepare=None):
    """Replays onto B; returns (B's per-command requests, the JSON report, wall seconds).
    `prepare(admin)` runs on B over its UNIX socket before the statistics are reset."""
    b.admin().flushall()
    if prepare:
        prepare(b.admin())
    b.reset_stats()
    b.socket_calls.clear()
    before = b.snapshot()
    t0 = time.monotonic()
    r = subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(PORT_A),
                        "--target", f"127.0.0.1:{PORT_B}", "--format", "json", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    after = b.snapshot()
    delta = rh.stats_delta(before, after)
    replay.errorstats = delta["errorstats"]
    got = rh.wire_requests(delta, b.socket_calls)
    return got, json.loads(r.stdout), wall


def counts(per_cmd: dict) -> dict:
    return {k: v["requests"] for k, v in per_cmd.items()}


def scripted(a):
    """redis-py: SELECT (db=3), a MULTI/EXEC pipeline, plain commands; returns its counts."""
    c = a.client(db=3)
    n = 0
    for i in range(50):
        c.set(f"k{i}", i)
        c.get(f"k{i}")
        n += 2
        if i % 10 == 0:
            p = c.pipeline(transaction=True)
            p.incr("ctr")
            p.lpush("l", i)
            p.execute()
    c.close()
    return {"set_get": n}


@pytest.fixture(scope="module")
def workload(servers):
    a, _ = servers

    def work():
        rh.benchmark_run(a, "set,get,incr,lpush", 4000, pipeline=16, clients=4)
        rh.benchmark_run(a, "set,get", 1000, pipeline=1, clients=2)
        return scripted(a)

    return capture(a, "workload", work)


def test_replay_counts_equal_capture_commandstats(servers, workload):
    _, b = servers
    pcap, want, extra = workload
    assert want["set"]["requests"] >= 4000 + 1000 + extra["set_get"] // 2
    assert want["multi"]["requests"] == 5 and want["select"]["requests"] >= 1
    got, rep, _ = replay(pcap, b, "--max")
    assert counts(got) == counts(want)
    f = rep["fidelity"]
    assert f["requests_sent"] == f["requests_planned"] == sum(counts(want).values())
    assert f["skipped_requests"] == {}


def test_scale_two_doubles_counts(servers, workload):
    _, b = servers
    pcap, want, _ = workload
    got, rep, _ = replay(pcap, b, "--max", "--scale", "2")
    assert counts(got) == {k: 2 * v for k, v in counts(want).items()}
    assert rep["fidelity"]["target_connections"] == 2 * rep["fidelity"]["sessions_captured"]


def test_max_connections_caps_open_target_connections(servers, workload):
    """--max-connections 1: the captured sessions (up to 4 at once on A) run one at a time on B,
    every request still sent. B's own CLIENT LIST, polled over its Unix socket during the
    replay, never shows two TCP connections at once; the same replay uncapped shows several
    (so the polling sees them)."""
    _, b = servers
    pcap, want, _ = workload

    def peak(*args):
        stop, seen = threading.Event(), [0]

        def poll():
            c = rh.RawConn(unix=str(b.sock))
            try:
                while not stop.is_set():
                    c.send("CLIENT", "LIST")
                    lines = c.read()[1].decode().splitlines()
                    seen[0] = max(seen[0], sum(" addr=127.0.0.1:" in f" {ln}" for ln in lines))
            finally:
                c.close()

        t = threading.Thread(target=poll)
        t.start()
        try:
            time.sleep(0.05)
            got, rep, _ = replay(pcap, b, "--max", *args)
        finally:
            stop.set()
            t.join()
        # B's `client` calls include the polling's own CLIENT LIST: left out of the counts.
        return no_client(counts(got)), rep, seen[0]

    def no_client(c):
        return {k: v for k, v in c.items() if k != "client"}

    free_got, _, free_peak = peak()
    got, rep, capped_peak = peak("--max-connections", "1")
    assert free_peak >= 2, free_peak
    assert capped_peak == 1, capped_peak
    assert got == free_got == no_client(counts(want))
    f = rep["fidelity"]
    assert f["requests_sent"] == f["requests_planned"] == sum(counts(want).values())
    assert f["skipped_requests"] == {}


# The paced capture's length: 4 s here (the test's data stays small); the 20 s is shown
# by DBTAP_TIMING_SECONDS=20 (README, "Replay").
TIMING_SECONDS = float(os.environ.get("DBTAP_TIMING_SECONDS", "4"))
# Sends per connection: one every 0.2 s and one every 0.33 s.
PACED_SENDS = (round(TIMING_SECONDS / 0.2), round(TIMING_SECONDS / 0.33))


def paced(a):
    """Two raw connections, each sending SET at its own pace for TIMING_SECONDS; their send
    times."""
    sends = {}

    def one(name, gap, n):
        c = rh.RawConn(port=PORT_A)
        times = []
        for i in range(n):
            times.append(time.monotonic())
            c.send("SET", f"pace:{name}", str(i))
            c.read()
            time.sleep(gap)
        c.close()
        sends[name] = times

    ts = [threading.Thread(target=one, args=("a", 0.2, PACED_SENDS[0])),
          threading.Thread(target=one, args=("b", 0.33, PACED_SENDS[1]))]
    for t in ts:
        t.start()
        time.sleep(0.05)
    for t in ts:
        t.join()
    return sends


def monitor_times(b, seconds_max, stop):
    """B's MONITOR lines of SET pace:* (server time per command, by client), until `stop`."""
    c = rh.RawConn(unix=str(b.sock))
    c.send("MONITOR")
    c.read()
    c.s.settimeout(0.2)
    lines, buf = [], c.buf
    deadline = time.monotonic() + seconds_max
    while time.monotonic() < deadline and not (stop.is_set() and not buf):
        try:
            chunk = c.s.recv(65536)
        except OSError:
            if stop.is_set():
                break
            continue
        buf += chunk
        while b"\r\n" in buf:
            line, buf = buf.split(b"\r\n", 1)
            lines.append(line.decode(errors="replace"))
    c.close()
    out = {}
    for ln in lines:
        if '"pace:' in ln:
            ts, rest = ln[1:].split(" ", 1)
            client = rest.split("]", 1)[0].split()[-1]
            out.setdefault(client, []).append(float(ts))
    return out


@pytest.fixture(scope="module")
def paced_capture(servers):
    a, _ = servers
    return capture(a, "paced", lambda: paced(a))


@pytest.mark.parametrize("speed", [1.0, 2.5])
def test_timing_follows_capture(servers, paced_capture, speed):
    _, b = servers
    pcap, want, sends = paced_capture
    span = max(t[-1] for t in sends.values()) - min(t[0] for t in sends.values())
    stop = threading.Event()
    box = {}
    m = threading.Thread(target=lambda: box.update(monitor_times(b, 60 + 2 * TIMING_SECONDS,
                                                                  stop)))
    m.start()
    time.sleep(0.3)
    got, rep, _ = replay(pcap, b, "--speed", str(speed))
    time.sleep(0.3)
    stop.set()
    m.join()
    assert counts(got)["set"] == sum(PACED_SENDS)
    per_client = sorted(box.values(), key=len)
    assert [len(t) for t in per_client] == sorted(PACED_SENDS)
    first = min(t[0] for t in per_client)
    last = max(t[-1] for t in per_client)
    want = span / speed
    assert abs((last - first) - want) <= 0.05 * want, (last - first, want)
    print(f"speed {speed}: captured span {span:.3f} s, replayed {last - first:.3f} s, "
          f"want {want:.3f} s")
    for mine, theirs in zip(per_client, sorted(sends.values(), key=len)):
        gaps = [y - x for x, y in zip(mine, mine[1:])]
        cgaps = [(y - x) / speed for x, y in zip(theirs, theirs[1:])]
        for g, c in zip(gaps, cgaps):
            assert abs(g - c) <= 0.02 + 0.05 * c, (g, c)


def test_connection_begun_before_capture(servers):
    a, b = servers
    c = rh.RawConn(port=PORT_A)
    for _ in range(3):
        c.send("INCR", "early")
        c.read()

    def work():
        for _ in range(5):
            c.send("INCR", "early")
            c.read()
        return None

    pcap, want, _ = capture(a, "early", work)
    c.close()
    assert want["incr"]["requests"] == 5
    got, rep, _ = replay(pcap, b, "--max")
    assert counts(got).get("incr") == 5
    assert b.admin().get("early") == b"5"


def test_blocking_command_wait_is_bounded(servers):
    a, b = servers

    def work():
        c = rh.RawConn(port=PORT_A)
        c.send("BLPOP", "nothing", "2")  # answered nil by A after 2 s
        c.read()
        c.send("SET", "after_block", "1")
        c.read()
        c.close()

    pcap, want, _ = capture(a, "blocking", work)
    assert want["blpop"]["requests"] == 1 and want["set"]["requests"] == 1
    got, rep, wall = replay(pcap, b, "--max", "--block-wait", "0.3")
    assert counts(got).get("set") == 1
    assert b.admin().get("after_block") == b"1"
    assert wall < 1.5, wall  # not the captured 2 s of BLPOP
    assert rep["fidelity"]["skipped_requests"].get("blocking_reply_abandoned") == 1


def test_subscriber_held_open_until_its_captured_end(servers):
    a, b = servers

    def work():
        sub = rh.RawConn(port=PORT_A)
        sub.send("SUBSCRIBE", "ch")
        sub.read()
        pub = rh.RawConn(port=PORT_A)
        for i in range(4):
            time.sleep(0.2)
            pub.send("PUBLISH", "ch", str(i))
            assert pub.read() == (":", "1")  # the subscriber received it
        time.sleep(0.2)
        sub.close()
        pub.close()

    pcap, want, _ = capture(a, "pubsub", work)
    seen = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            n = b.admin().pubsub_numsub("ch")[0][1]
            b.socket_calls["pubsub"] += 1
            if n == 1:
                seen.append(time.monotonic())
            time.sleep(0.01)

    t = threading.Thread(target=poll)
    t.start()
    try:
        got, rep, _ = replay(pcap, b, "--speed", "1")
    finally:
        stop.set()
        t.join()
    assert counts(got).get("publish") == 4 and counts(got).get("subscribe") == 1
    assert seen and seen[-1] - seen[0] >= 0.7, seen[-1] - seen[0] if seen else None


def test_new_errors_on_target_are_reported(servers):
    a, b = servers

    def work():
        c = rh.RawConn(port=PORT_A)
        for i in range(3):
            c.send("LPUSH", "t", str(i))
            assert c.read()[0] == ":"
        c.close()

    pcap, want, _ = capture(a, "errors", work)
    assert want["lpush"] == {"requests": 3, "errors": 0}
    # On B, t is a string: every LPUSH fails with WRONGTYPE.
    got, rep, _ = replay(pcap, b, "--max", prepare=lambda adm: adm.set("t", "s"))
    assert got["lpush"] == {"requests": 3, "errors": 3}
    assert replay.errorstats == {"WRONGTYPE": 3}
    g = [g for g in rep["groups"].values() if g["fingerprint"] == "LPUSH"]
    assert len(g) == 1, rep["groups"]
    assert (g[0]["capture"]["errors"], g[0]["target"]["errors"]) == (0, 3)
    assert any(m.startswith("WRONGTYPE") for m in g[0]["new_errors"]), g[0]


# -- MySQL/MariaDB ---------------------------------------------------------------------------
# Two private MariaDBs (harness.Server): A captured with tcpdump on lo while sysbench
# oltp_read_only (prepared statements) and a scripted pymysql client with an error run on it;
# B prepared with sysbench's own `prepare`. Truth: A's and B's SHOW GLOBAL STATUS deltas, read
# over their Unix sockets (not part of the capture nor of the replay).

MY_A, MY_B = 38410, 38411
MY_COUNTERS = ["Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close", "Com_select"]
SB_TABLE = 1000


def sb_args(port: int, threads: int) -> list[str]:
    args = harness.sysbench_args(port, threads, SB_TABLE)
    assert args[1] == "oltp_read_write"
    args[1] = "oltp_read_only"
    return args


def sb(port: int, *extra: str) -> None:
    r = subprocess.run(sb_args(port, 2) + list(extra), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 0, r.stdout


@pytest.fixture(scope="module")
def mariadbs():
    a = harness.Server(MY_A, OUT / "my-a", tls=False)
    b = harness.Server(MY_B, OUT / "my-b", tls=False)
    with rph.started_pair(a, b) as p:
        sb(MY_A, "prepare")
        sb(MY_B, "prepare")
        yield p


@pytest.fixture(scope="module")
def my_capture(mariadbs):
    a, _ = mariadbs
    cap = harness.Tcpdump(OUT / "mysql.pcap", MY_A)
    try:
        cap.start()
        before = a.status()
        sb(MY_A, "--time=3", "--events=0", "--report-interval=0", "run")
        c = a.connect(database="sbtest")
        with c.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM sbtest1")
            assert cur.fetchone()[0] == SB_TABLE
            with pytest.raises(harness.pymysql.err.ProgrammingError) as e:
                cur.execute("SELECT * FROM no_such_table_x")
        c.close()
        after = a.status(threads=before["Threads_connected"])
    finally:
        stats = cap.stop()
    assert stats.get("dropped") == 0, stats
    return cap.out, harness.delta(before, after), e.value.args


def my_replay(pcap, b, *args):
    """Replays onto B; returns (B's status deltas, the JSON report)."""
    before = b.status()
    r = subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(MY_A),
                        "--target", f"127.0.0.1:{MY_B}", "--user", harness.USER,
                        "--password", harness.PASSWORD, "--format", "json", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    after = b.status(threads=before["Threads_connected"])
    return harness.delta(before, after), json.loads(r.stdout)


def my_counts(d: dict) -> dict:
    return {k: d[k] for k in MY_COUNTERS}


def test_mysql_replay_counts_equal_capture(mariadbs, my_capture):
    _, b = mariadbs
    pcap, want, _ = my_capture
    assert want["Com_stmt_prepare"] > 0 and want["Com_stmt_execute"] > 100, my_counts(want)
    assert want["Com_stmt_close"] > 0, my_counts(want)
    got, rep = my_replay(pcap, b)
    assert my_counts(got) == my_counts(want)
    f = rep["fidelity"]
    assert f["requests_sent"] == f["requests_planned"] == f["requests_framed"]
    assert f["skipped_requests"] == {}, f
    # Both sides of the report group alike: every group's count and errors match.
    for g in rep["groups"].values():
        assert g["protocol"] == "mysql", g
        assert (g["target"]["count"], g["target"]["errors"]) == \
            (g["capture"]["count"], g["capture"]["errors"]), g


def test_mysql_scale_two_doubles_counts(mariadbs, my_capture):
    _, b = mariadbs
    pcap, want, _ = my_capture
    got, rep = my_replay(pcap, b, "--max", "--scale", "2")
    assert my_counts(got) == {k: 2 * v for k, v in my_counts(want).items()}
    assert rep["fidelity"]["target_connections"] == 2 * rep["fidelity"]["sessions_captured"]


def test_mysql_error_statement_same_error_on_target(mariadbs, my_capture):
    _, b = mariadbs
    pcap, _, err = my_capture
    assert err[0] == 1146, err
    # B's own answer to the statement, asked directly over its socket.
    with b.root(database="sbtest") as c, c.cursor() as cur:
        with pytest.raises(harness.pymysql.err.ProgrammingError) as e:
            cur.execute("SELECT * FROM no_such_table_x")
    assert e.value.args == err
    _, rep = my_replay(pcap, b, "--max")
    g = [g for g in rep["groups"].values() if "no_such_table_x" in g["fingerprint"]]
    assert len(g) == 1, [g["fingerprint"] for g in rep["groups"].values()]
    assert (g[0]["capture"]["errors"], g[0]["target"]["errors"]) == (1, 1), g[0]
    assert not g[0].get("new_errors"), g[0]


def test_mysql_wrong_password_names_the_failure(mariadbs, my_capture):
    _, b = mariadbs
    pcap, _, _ = my_capture
    r = subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(MY_A),
                        "--target", f"127.0.0.1:{MY_B}", "--user", harness.USER,
                        "--password", "wrong", "--max", "--format", "json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert "login refused" in r.stderr and "Access denied" in r.stderr, r.stderr
    assert r.returncode == 1 and "nothing was replayed" in r.stderr, r.stderr


def test_mysql_connection_begun_before_capture(mariadbs):
    """A connection opened (and logged in) before tcpdump starts is replayed from its first
    whole command; its captured SELECTs reach B (B's Com_select delta equals A's)."""
    a, b = mariadbs
    c = a.connect(database="sbtest")
    cap = harness.Tcpdump(OUT / "mysql-midstream.pcap", MY_A)
    try:
        with c.cursor() as cur:
            cur.execute("SELECT 1")  # before the capture
            cap.start()
            before = a.status()
            for i in range(1, 21):
                cur.execute("SELECT c FROM sbtest.sbtest1 WHERE id = %s", (i,))
                assert len(cur.fetchall()) == 1
        c.close()
        after = a.status(threads=before["Threads_connected"] - 1)  # c closed
    finally:
        stats = cap.stop()
    assert stats.get("dropped") == 0, stats
    want = harness.delta(before, after)
    assert want["Com_select"] == 20, want["Com_select"]
    got, rep = my_replay(cap.out, b, "--max")
    assert got["Com_select"] == 20
    f = rep["fidelity"]
    assert f["sessions_captured"] == 1 and f["requests_sent"] == 21, f  # 20 SELECTs + QUIT


def test_mysql_statements_prepared_before_capture_are_skipped(mariadbs):
    """sysbench prepares its statements when it starts; a capture begun a second later holds
    only their EXECUTEs and CLOSEs: none reaches B, and each is counted as skipped."""
    a, b = mariadbs
    t = threading.Thread(target=sb, args=(MY_A, "--time=3", "--events=0",
                                          "--report-interval=0", "run"))
    t.start()
    time.sleep(1.0)
    cap = harness.Tcpdump(OUT / "mysql-late.pcap", MY_A)
    try:
        early = a.status()
        cap.start()
        before = a.status()
        t.join()
        after = a.status(threads=before["Threads_connected"] - 2)  # sysbench's 2 gone
    finally:
        stats = cap.stop()
    assert stats.get("dropped") == 0, stats
    want, most = harness.delta(before, after), harness.delta(early, after)
    assert want["Com_stmt_prepare"] == 0 and want["Com_stmt_execute"] > 100, my_counts(want)
    got, rep = my_replay(cap.out, b, "--max")
    assert (got["Com_stmt_prepare"], got["Com_stmt_execute"], got["Com_stmt_close"]) == (0, 0, 0)
    skipped = rep["fidelity"]["skipped_requests"].get("statement_prepared_before_capture", 0)
    # tcpdump started between the two snapshots: the captured statements lie between their
    # deltas (one more per sysbench thread may be in flight at either edge).
    lo = want["Com_stmt_execute"] + want["Com_stmt_close"] - 2
    hi = most["Com_stmt_execute"] + most["Com_stmt_close"] + 2
    assert lo <= skipped <= hi, (skipped, lo, hi)


# -- PostgreSQL ------------------------------------------------------------------------------
# Two private PostgreSQLs (pg_harness.PgServer, trust auth), both `pgbench -i`: A captured with
# tcpdump on lo while pgbench -M simple, extended and prepared run on it, then a psycopg2 client
# with an error. Truth: A's pg_stat_statements over the capture window and B's over the replay,
# read over their Unix sockets (not part of the capture nor of the replay).

PG_A, PG_B = 38420, 38421


@pytest.fixture(scope="module")
def pgs():
    import pg_harness as ph
    a = ph.PgServer(PG_A, OUT / "pg-a")
    b = ph.PgServer(PG_B, OUT / "pg-b")
    with rph.started_pair(a, b) as p:
        ph.pgbench_init(a)
        ph.pgbench_init(b)
        yield p


@pytest.fixture(scope="module")
def pg_capture(pgs):
    import pg_harness as ph
    import psycopg2
    a, _ = pgs
    a.pgss_reset()
    cap = ph.Tcpdump(OUT / "pg.pcap", PG_A)
    try:
        cap.start()
        runs = {m: ph.pgbench_run(a, m, 2, seconds=2) for m in ("simple", "extended", "prepared")}
        c = psycopg2.connect(a.dsn())
        with c.cursor() as cur:
            cur.execute("SELECT count(*) FROM pgbench_branches")
            with pytest.raises(psycopg2.errors.UndefinedTable) as e:
                cur.execute("SELECT * FROM no_such_table_x")
        c.close()
        a.wait_idle()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    return cap.out, a.calls(), runs, e.value.pgcode


def pg_replay(pcap, b, *args):
    """Replays onto B; returns (B's pg_stat_statements calls, the JSON report)."""
    b.pgss_reset()
    r = subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(PG_A),
                        "--target", f"127.0.0.1:{PG_B}", "--format", "json", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    b.wait_idle()
    return b.calls(), json.loads(r.stdout)


def test_postgres_replay_calls_equal_capture(pgs, pg_capture):
    _, b = pgs
    pcap, want, runs, _ = pg_capture
    assert all(r["transactions"] > 50 for r in runs.values()), runs
    upd = [q for q in want if q.startswith("update pgbench_accounts")]
    assert upd and sum(want[q] for q in upd) >= sum(r["transactions"] for r in runs.values())
    got, rep = pg_replay(pcap, b, "--max")
    assert got == want
    f = rep["fidelity"]
    assert f["requests_sent"] == f["requests_planned"] == f["requests_framed"] > 0, f
    assert f["skipped_requests"] == {}, f
    for g in rep["groups"].values():
        assert g["protocol"] == "postgres", g


def test_postgres_scale_two_doubles_calls(pgs, pg_capture):
    _, b = pgs
    pcap, want, _, _ = pg_capture
    got, rep = pg_replay(pcap, b, "--max", "--scale", "2")
    assert got == {q: 2 * n for q, n in want.items()}
    assert rep["fidelity"]["target_connections"] == 2 * rep["fidelity"]["sessions_captured"]


def test_postgres_error_statement_same_error_on_target(pgs, pg_capture):
    import psycopg2
    _, b = pgs
    pcap, _, _, code = pg_capture
    assert code == "42P01", code
    c = psycopg2.connect(b.dsn())
    with c.cursor() as cur, pytest.raises(psycopg2.errors.UndefinedTable) as e:
        cur.execute("SELECT * FROM no_such_table_x")
    c.close()
    assert e.value.pgcode == code
    _, rep = pg_replay(pcap, b, "--max")
    g = [g for g in rep["groups"].values() if "no_such_table_x" in g["fingerprint"]]
    assert len(g) == 1, [g["fingerprint"] for g in rep["groups"].values()]
    assert (g[0]["capture"]["errors"], g[0]["target"]["errors"]) == (1, 1), g[0]
    assert not g[0].get("new_errors"), g[0]


def test_postgres_rows_that_differ_are_flagged(pgs):
    """B holds other rows than A: the report gives both sides' rows returned and affected per
    group, as each server answered its client (A's to psycopg2 during the capture, B's to
    psycopg2 after the replay), and flags the groups where they differ, not the others; under
    `--scale 2` too, where B's totals are twice its answers (rows are compared per request)."""
    import pg_harness as ph
    import psycopg2
    a, b = pgs
    for srv, rows in ((a, range(1, 11)), (b, (1, 2, 3, 6, 7, 8, 9))):
        c = psycopg2.connect(srv.dsn())
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS t_rows")
            cur.execute("CREATE TABLE t_rows (i int)")
            cur.executemany("INSERT INTO t_rows VALUES (%s)", [(i,) for i in rows])
        c.close()

    def work(srv):
        c = psycopg2.connect(srv.dsn())
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute("SELECT i FROM t_rows")
            sel = len(cur.fetchall())
            cur.execute("UPDATE t_rows SET i = i WHERE i <= 5")
            upd = cur.rowcount
            cur.execute("SELECT bid FROM pgbench_branches")
            same = len(cur.fetchall())
        c.close()
        return sel, upd, same

    cap = ph.Tcpdump(OUT / "pg-rows.pcap", PG_A)
    try:
        cap.start()
        on_a = work(a)
        a.wait_idle()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    _, rep = pg_replay(cap.out, b, "--max")
    on_b = work(b)
    assert on_a[:2] != on_b[:2] and on_a[2] == on_b[2], (on_a, on_b)

    def groups_of(rep):
        groups = list(rep["groups"].values())

        def group(*words):
            g = [g for g in groups if all(w in g["fingerprint"].lower() for w in words)]
            assert len(g) == 1, [g["fingerprint"] for g in groups]
            return g[0]

        return (group("select", "t_rows"), group("update", "t_rows"),
                group("pgbench_branches"))

    # --scale 2: B runs each request twice, so its totals double; the flags stay (rows are
    # compared per request).
    scaled = pg_replay(cap.out, b, "--max", "--scale", "2")[1]
    for scale, r in ((1, rep), (2, scaled)):
        sel, upd, same = groups_of(r)
        assert (sel["capture"]["rows_sent"], sel["target"]["rows_sent"]) == \
            (on_a[0], scale * on_b[0]), sel
        assert (upd["capture"]["rows_affected"], upd["target"]["rows_affected"]) == \
            (on_a[1], scale * on_b[1]), upd
        assert (same["capture"]["rows_sent"], same["target"]["rows_sent"]) == \
            (on_a[2], scale * on_b[2])
        assert sel["rows_mismatch"] and upd["rows_mismatch"] and not same["rows_mismatch"], scale


def test_postgres_slower_target_is_the_regression_ranked_first(pgs):
    """B lacks the index A has: by pg_stat_statements' own execution times the lookup costs B
    many times what it cost A, and the replay report's comparison (the `dbtap diff` engine)
    calls that group regressed, with a regressed latency metric, and ranks it first."""
    import pg_harness as ph
    import psycopg2
    a, b = pgs
    for srv, index in ((a, True), (b, False)):
        c = psycopg2.connect(srv.dsn())
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS t_slow")
            cur.execute("CREATE TABLE t_slow AS SELECT g AS k, md5(g::text) AS v "
                        "FROM generate_series(1, 50000) g")
            if index:
                cur.execute("CREATE INDEX ON t_slow (k)")
            cur.execute("ANALYZE t_slow")
        c.close()
    a.pgss_reset()
    cap = ph.Tcpdump(OUT / "pg-slow.pcap", PG_A)
    try:
        cap.start()
        c = psycopg2.connect(a.dsn())
        c.autocommit = True
        with c.cursor() as cur:
            for i in range(150):
                cur.execute("SELECT v FROM t_slow WHERE k = %s", (i * 7 + 1,))
                cur.execute("SELECT bid FROM pgbench_branches WHERE bid = %s", (i % 2 + 1,))
        c.close()
        a.wait_idle()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    a_ms = a.pgss_exec_ms()
    _, rep = pg_replay(cap.out, b, "--max")
    b_ms = b.pgss_exec_ms()

    def lookup(ms):
        return sum(v for q, v in ms.items() if "t_slow" in q)

    assert lookup(b_ms) > 5 * lookup(a_ms), (a_ms, b_ms)
    d = rep["diff"]
    slow = [g for g in d["groups"] if "t_slow" in g["fingerprint"]]
    assert len(slow) == 1, [g["fingerprint"] for g in d["groups"]]
    assert (slow[0]["status"], slow[0]["rank"]) == ("regressed", 1), slow[0]
    assert any(m["verdict"] == "regressed" for m in slow[0]["metrics"]), slow[0]["metrics"]
    assert d["summary"]["regressed"] >= 1, d["summary"]
