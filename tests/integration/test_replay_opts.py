"""dbtap replay's filters and options against real servers: `--read-only`, `--where`,
`--since`/`--until`, `--credentials`, `--sessions`, `--rate`, `--skip-idle`. Workloads by real
clients (redis-benchmark, redis-py, sysbench with prepared statements, pymysql, pgbench),
captured with tcpdump on lo and replayed onto a second server. The truth is the target's own
counters (INFO commandstats, Com_* deltas, pg_stat_statements calls) beside the source's over
the capture window, and wall clocks; dbtap's report is only checked against those.

Ports 38450-38474 only; server directories under tests/out/replay_opts.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import threading
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402
import replay_harness as rph  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "replay_opts"
R_A, R_B = 38450, 38451
MY_A, MY_B = 38452, 38453
PG_A, PG_B = 38454, 38455

REDIS_WRITES = {"set", "incr", "incrby", "lpush", "rpush", "del", "hset", "sadd"}


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


def run_replay(pcap, port_a: int, port_b: int, *args, sent_none: bool = False) -> dict:
    """The replay's JSON report (and its stderr). `sent_none`: no request can reach B, so the
    replay prints its report, then fails with one line."""
    r = subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(port_a),
                        "--target", f"127.0.0.1:{port_b}", "--format", "json", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if sent_none:
        assert r.returncode == 1 and "nothing was replayed" in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    rep["stderr"] = r.stderr
    return rep


# ------------------------------------------------------------------------------------------------
# Redis


@pytest.fixture(scope="module")
def redises():
    a = rh.RedisServer(R_A, OUT / "r-a")
    b = rh.RedisServer(R_B, OUT / "r-b")
    with rph.started_pair(a, b) as p:
        yield p


def r_capture(srv, name, work):
    """Runs `work` under tcpdump; returns (pcap, A's per-command requests, work's result)."""
    pcap, per_cmd, extra = rph.redis_capture(srv, OUT / f"{name}.pcap", work)
    return pcap, counts(per_cmd), extra


def r_replay(pcap, b, *args):
    """Replays onto B (flushed first); returns (B's per-command requests, the report)."""
    b.admin().flushall()
    b.reset_stats()
    b.socket_calls.clear()
    before = b.snapshot()
    rep = run_replay(pcap, R_A, R_B, *args)
    after = b.snapshot()
    return counts(rh.wire_requests(rh.stats_delta(before, after), b.socket_calls)), rep


def counts(per_cmd: dict) -> dict:
    return {k: v["requests"] for k, v in per_cmd.items() if v["requests"]}


def scripted(a):
    """redis-py on db 3: SET/GET pairs, and MULTI/EXEC pipelines with INCR and GET."""
    c = a.client(db=3)
    for i in range(40):
        c.set(f"k{i}", i)
        c.get(f"k{i}")
        if i % 10 == 0:
            p = c.pipeline(transaction=True)
            p.incr("ctr")
            p.get("ctr")
            p.execute()
    c.close()


@pytest.fixture(scope="module")
def r_workload(redises):
    a, _ = redises

    def work():
        rh.benchmark_run(a, "set,get,incr,lpush,lrange", 2000, pipeline=16, clients=2)
        rh.benchmark_run(a, "set,get", 500, pipeline=1, clients=2)
        scripted(a)

    return r_capture(a, "r-workload", work)


def test_redis_read_only_leaves_writes_at_zero(redises, r_workload):
    _, b = redises
    pcap, want, _ = r_workload
    assert want.get("set", 0) > 1000 and want.get("get", 0) > 1000, want
    got, rep = r_replay(pcap, b, "--read-only", "--max")
    writes = {k: v for k, v in got.items() if k in REDIS_WRITES}
    assert writes == {}, got
    reads = {k: v for k, v in want.items() if k not in REDIS_WRITES}
    assert got == reads
    # MULTI/EXEC and SELECT kept around the reads.
    assert got["multi"] == want["multi"] == 4 and got["select"] == want["select"], got
    f = rep["fidelity"]
    n_writes = sum(v for k, v in want.items() if k in REDIS_WRITES)
    assert f["skipped_requests"].get("read_only") == n_writes, f
    assert f["requests_sent"] == sum(reads.values()), f
    assert "read-only" in f["filters"]


def test_redis_where_command_keeps_session_state(redises, r_workload):
    _, b = redises
    pcap, want, _ = r_workload
    got, rep = r_replay(pcap, b, "--where", "command=get", "--max")
    # The GETs, and the scripted session's SELECT and MULTI/EXEC around its GETs.
    assert got.get("get") == want["get"], got
    assert got.get("select") == want["select"] and got.get("multi") == want["multi"], got
    assert not set(got) & REDIS_WRITES, got
    assert "lrange_100" not in got and "lrange" not in got, got
    f = rep["fidelity"]
    assert f["skipped_requests"].get("where", 0) > 0, f
    # The report's sides hold the same groups, all GET.
    for g in rep["groups"].values():
        assert g["target"]["count"] == g["capture"]["count"], g
        assert g["fingerprint"] == "GET", g


def test_redis_time_range(redises):
    a, b = redises

    def work():
        c = rh.RawConn(port=R_A)
        c.send("SELECT", "2")
        c.read()
        for _ in range(5):
            c.send("GET", "x")
            c.read()
        time.sleep(0.6)
        t1 = time.time()
        time.sleep(0.05)
        for _ in range(7):
            c.send("INCR", "x")
            c.read()
        time.sleep(0.6)
        t2 = time.time()
        time.sleep(0.05)
        for _ in range(3):
            c.send("GET", "x")
            c.read()
        c.close()
        return t1, t2

    pcap, want, (t1, t2) = r_capture(a, "r-time", work)
    assert want == {"select": 1, "get": 8, "incr": 7}, want
    t0 = time.monotonic()
    got, rep = r_replay(pcap, b, "--since", rfc3339(t1), "--until", rfc3339(t2))
    wall = time.monotonic() - t0
    # The INCRs only, in db 2: the SELECT before the window was kept (and sent at the window's
    # first request, not 0.6 s before it).
    assert got == {"select": 1, "incr": 7}, got
    assert b.admin().execute_command("SELECT", "2") and int(b.admin().get("x")) == 7
    b.admin().execute_command("SELECT", "0")
    assert rep["fidelity"]["skipped_requests"] == {"time_range": 8}, rep["fidelity"]
    assert wall < 5, wall


def test_redis_client_reply_off_and_skip(redises):
    """A connection silenced by CLIENT REPLY OFF and SKIP: the replay expects no reply where
    the server sends none, so it neither waits --reply-timeout (2 s here) nor takes a later
    reply for an earlier command; B's counters equal A's and the last value is the same."""
    a, b = redises

    def work():
        c = rh.RawConn(port=R_A)
        c.send("CLIENT", "REPLY", "OFF")
        for i in range(4):
            c.send("SET", "cr", str(i))
        c.send("CLIENT", "REPLY", "ON")
        assert c.read() == ("+", "OK")
        c.send("CLIENT", "REPLY", "SKIP")
        c.send("INCR", "cr")
        c.send("GET", "cr")
        assert c.read() == ("$", b"4")
        for _ in range(3):
            c.send("CLIENT", "REPLY", "SKIP")
            c.send("INCR", "cr")
        c.send("GET", "cr")
        assert c.read() == ("$", b"7")
        c.close()

    pcap, want, _ = r_capture(a, "r-client-reply", work)
    assert want == {"client": 6, "set": 4, "incr": 4, "get": 2}, want
    t0 = time.monotonic()
    got, rep = r_replay(pcap, b, "--max", "--reply-timeout", "2s")
    wall = time.monotonic() - t0
    assert got == want, got
    assert int(b.admin().get("cr")) == 7
    f = rep["fidelity"]
    assert f["skipped_requests"] == {} and f["requests_sent"] == sum(want.values()), f
    assert "timed out" not in rep["stderr"], rep["stderr"]
    assert wall < 2, wall


# ------------------------------------------------------------------------------------------------
# MariaDB

MY_WRITES = ["Com_insert", "Com_update", "Com_delete", "Com_replace"]
SB_TABLE = 500


@pytest.fixture(scope="module")
def mariadbs():
    a = harness.Server(MY_A, OUT / "my-a", tls=False)
    b = harness.Server(MY_B, OUT / "my-b", tls=False)
    with rph.started_pair(a, b) as p:
        harness.sysbench_prepare(MY_A, SB_TABLE)
        harness.sysbench_prepare(MY_B, SB_TABLE)
        yield p


def checksum(srv) -> tuple:
    c = srv.connect(database="sbtest")
    with c.cursor() as cur:
        cur.execute("CHECKSUM TABLE sbtest1")
        s = cur.fetchone()[1]
        cur.execute("SELECT COUNT(*) FROM sbtest1")
        n = cur.fetchone()[0]
    c.close()
    return s, n


@pytest.fixture(scope="module")
def my_capture(mariadbs):
    a, _ = mariadbs
    cap = harness.Tcpdump(OUT / "my.pcap", MY_A)
    try:
        cap.start()
        before = a.status()
        harness.sysbench_run(MY_A, 2, 2, SB_TABLE)
        c = a.connect(database="sbtest")
        with c.cursor() as cur:
            cur.execute("USE sbtest")
            cur.execute("INSERT INTO sbtest1 (k, c, pad) VALUES (1, 'x', 'y')")
            cur.execute("UPDATE sbtest1 SET k = k + 1 WHERE id = 1")
            cur.execute("SELECT COUNT(*) FROM sbtest1")
        c.close()
        after = a.status(threads=before["Threads_connected"])
    finally:
        stats = cap.stop()
    assert stats.get("dropped") == 0, stats
    return cap.out, harness.delta(before, after)


def my_replay(pcap, b, *args):
    before = b.status()
    rep = run_replay(pcap, MY_A, MY_B, "--user", harness.USER, "--password", harness.PASSWORD,
                     *args)
    after = b.status(threads=before["Threads_connected"])
    return harness.delta(before, after), rep


def test_mysql_read_only_leaves_writes_at_zero(mariadbs, my_capture):
    _, b = mariadbs
    pcap, want = my_capture
    assert all(want[k] > 0 for k in ["Com_insert", "Com_update", "Com_delete"]), \
        {k: want[k] for k in MY_WRITES}
    assert want["Com_stmt_execute"] > 100
    sum_before = checksum(b)
    got, rep = my_replay(pcap, b, "--read-only", "--max")
    assert {k: got[k] for k in MY_WRITES} == {k: 0 for k in MY_WRITES}
    # The reads, the transactions around them and the prepares as captured.
    for k in ["Com_select", "Com_begin", "Com_commit", "Com_stmt_prepare", "Com_change_db"]:
        assert got[k] == want[k], (k, got[k], want[k])
    assert checksum(b) == sum_before
    f = rep["fidelity"]
    n_writes = sum(want[k] for k in MY_WRITES)
    assert f["skipped_requests"].get("read_only") == n_writes, f
    assert f["requests_sent"] == f["requests_planned"], f


def test_mysql_where_fingerprint(mariadbs, my_capture):
    _, b = mariadbs
    pcap, want = my_capture
    got, rep = my_replay(pcap, b, "--where", "fingerprint~^select c from sbtest. where id=",
                         "--max")
    # sysbench's point selects only (10 per transaction), none of its range selects.
    f = rep["fidelity"]
    # Its prepare, execute and close groups; nothing else, the same on both sides.
    groups = [g for g in rep["groups"].values() if g["capture"]["count"]]
    assert {g["fingerprint"] for g in groups} == {"select c from sbtest? where id=?"}, groups
    assert all(g["capture"]["count"] == g["target"]["count"] for g in groups), groups
    n = max(g["capture"]["count"] for g in groups)
    assert n > 100, groups
    # sysbench's BEGIN and COMMIT are prepared statements too.
    assert got["Com_stmt_execute"] == n + got["Com_begin"] + got["Com_commit"], groups
    assert got["Com_select"] == n, (got["Com_select"], n)
    assert {k: got[k] for k in MY_WRITES} == {k: 0 for k in MY_WRITES}
    # Transactions around them kept (BEGIN/COMMIT set the session's state).
    assert (got["Com_begin"], got["Com_commit"]) == (want["Com_begin"], want["Com_commit"])
    assert f["skipped_requests"].get("where", 0) > 0, f


def test_mysql_credentials_per_captured_user(mariadbs, my_capture, tmp_path):
    """The captured user (tap, from the captured login) gets its password from the file; the
    default login (--user nobody) would be refused."""
    _, b = mariadbs
    pcap, want = my_capture
    f = harness.credentials_file(tmp_path / "creds", f"{harness.USER}:{harness.PASSWORD}\n")
    before = b.status()
    rep = run_replay(pcap, MY_A, MY_B, "--max", "--read-only", "--credentials", str(f),
                     "--user", "nobody", "--password", "nope")
    got = harness.delta(before, b.status(threads=before["Threads_connected"]))
    assert (got["Com_select"], got["Com_stmt_prepare"]) == \
        (want["Com_select"], want["Com_stmt_prepare"])
    assert got["Access_denied_errors"] == 0, got["Access_denied_errors"]
    assert "note" not in rep["stderr"], rep["stderr"]


def test_mysql_ed25519_login(mariadbs, my_capture):
    """MariaDB's ed25519 plugin on B: the replay answers its challenge (a wrong password is
    refused with one line)."""
    _, b = mariadbs
    pcap, want = my_capture
    with b.root() as c, c.cursor() as cur:
        cur.execute("INSTALL SONAME 'auth_ed25519'")
        cur.execute("CREATE USER 'ed'@'127.0.0.1' IDENTIFIED VIA ed25519 USING PASSWORD('ed-pw:1')")
        cur.execute("GRANT ALL ON *.* TO 'ed'@'127.0.0.1'")
    before = b.status()
    rep = run_replay(pcap, MY_A, MY_B, "--max", "--read-only", "--user", "ed", "--password",
                     "ed-pw:1")
    got = harness.delta(before, b.status(threads=before["Threads_connected"]))
    assert (got["Com_select"], got["Com_stmt_prepare"]) == \
        (want["Com_select"], want["Com_stmt_prepare"])
    assert got["Access_denied_errors"] == 0 and rep["fidelity"]["target_connections"] > 0
    rep = run_replay(pcap, MY_A, MY_B, "--max", "--user", "ed", "--password", "wrong",
                     sent_none=True)
    assert "login refused" in rep["stderr"] and "Access denied" in rep["stderr"], rep["stderr"]
    assert rep["fidelity"]["requests_sent"] == 0, rep["fidelity"]


def user_selects(srv, user: str) -> int:
    """The server's own count of SELECTs run as `user` (MariaDB's userstat)."""
    with srv.root() as c, c.cursor() as cur:
        cur.execute("SELECT SELECT_COMMANDS FROM information_schema.USER_STATISTICS "
                    "WHERE USER = %s", (user,))
        row = cur.fetchone()
    return row[0] if row else 0


def test_mysql_change_user(mariadbs, tmp_path):
    """A connection that switches user (COM_CHANGE_USER, as connection pools and ProxySQL do;
    here libmariadb's mysql_change_user through MySQLdb): the replay logs in as the user it
    names with that user's password (the captured scramble answers A's salt, not B's), so B
    runs the statements after it as that user (MariaDB's own per-user counts, userstat; it
    has no status counter of COM_CHANGE_USER)."""
    import MySQLdb
    a, b = mariadbs
    for srv in (a, b):
        with srv.root() as c, c.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS 'cu'@'127.0.0.1' IDENTIFIED BY 'cu-pw:1'")
            cur.execute("GRANT SELECT ON sbtest.* TO 'cu'@'127.0.0.1'")
            cur.execute("SET GLOBAL userstat = 1")
            cur.execute("FLUSH USER_STATISTICS")
    cap = harness.Tcpdump(OUT / "my-change-user.pcap", MY_A)
    cap.start()
    try:
        before = a.status()
        c = MySQLdb.connect(host="127.0.0.1", port=MY_A, user=harness.USER,
                            passwd=harness.PASSWORD, db="sbtest")
        cur = c.cursor()
        cur.execute("SELECT COUNT(*) FROM sbtest1")
        c.change_user("cu", "cu-pw:1", "sbtest")
        cur = c.cursor()
        for i in range(3):
            cur.execute("SELECT c FROM sbtest1 WHERE id = %s", (i + 1,))
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone()[0] == "cu@127.0.0.1"
        c.close()
        want = harness.delta(before, a.status(threads=before["Threads_connected"]))
    finally:
        stats = cap.stop()
    assert stats.get("dropped") == 0, stats
    assert (user_selects(a, harness.USER), user_selects(a, "cu")) == (1, 4), want
    creds = harness.credentials_file(tmp_path / "creds",
                                     f"{harness.USER}:{harness.PASSWORD}\ncu:cu-pw:1\n")
    before = b.status()
    rep = run_replay(cap.out, MY_A, MY_B, "--max", "--credentials", str(creds))
    got = harness.delta(before, b.status(threads=before["Threads_connected"]))
    assert got["Com_select"] == want["Com_select"], (got, want)
    assert (user_selects(b, harness.USER), user_selects(b, "cu")) == (1, 4)
    assert got["Access_denied_errors"] == 0
    assert "change user" not in rep["stderr"], rep["stderr"]
    # A wrong password for cu: B refuses the switch (one line), the rest is not run as cu.
    creds.write_text(f"{harness.USER}:{harness.PASSWORD}\ncu:wrong\n")
    rep = run_replay(cap.out, MY_A, MY_B, "--max", "--credentials", str(creds))
    assert "change user: cu: login refused" in rep["stderr"], rep["stderr"]
    assert user_selects(b, "cu") == 4 and user_selects(b, harness.USER) >= 2


# ------------------------------------------------------------------------------------------------
# PostgreSQL


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
    a, _ = pgs
    a.pgss_reset()
    cap = ph.Tcpdump(OUT / "pg.pcap", PG_A)
    try:
        cap.start()
        for m in ("simple", "prepared"):
            ph.pgbench_run(a, m, 2, seconds=1)
        a.wait_idle()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    return cap.out, a.calls()


def is_pg_write(q: str) -> bool:
    return q.split()[0].upper() in {"INSERT", "UPDATE", "DELETE"}


def test_postgres_read_only_leaves_writes_at_zero(pgs, pg_capture):
    _, b = pgs
    pcap, want = pg_capture
    assert sum(n for q, n in want.items() if is_pg_write(q)) > 100, want
    b.pgss_reset()
    rep = run_replay(pcap, PG_A, PG_B, "--read-only", "--max")
    b.wait_idle()
    got = b.calls()
    assert [q for q in got if is_pg_write(q)] == [], got
    assert got == {q: n for q, n in want.items() if not is_pg_write(q)}
    f = rep["fidelity"]
    assert f["skipped_requests"].get("read_only", 0) > 0, f


# ------------------------------------------------------------------------------------------------
# PostgreSQL logins: SCRAM-SHA-256, md5 and cleartext on B, each session as its captured user
# (--credentials), a user missing from the file logging in with the default.

# erin's password changes under SASLprep (a soft hyphen maps to nothing, U+2168 ROMAN NUMERAL
# NINE to "IX"): PostgreSQL stores the keys of the prepared form, and libpq prepares it too.
PG_USERS = {"alice": ("scram-sha-256", "a-pw:1"), "bob": ("scram-sha-256", "b pw"),
            "carol": ("md5", "c-pw"), "dave": ("password", "d-pw"),
            "erin": ("scram-sha-256", "e-pw\u00ad\u2168")}
PG_QUERIES = {"alice": 3, "bob": 4, "carol": 5, "dave": 6, "erin": 2}


def pg_hba(srv, lines: list[str]) -> None:
    (srv.datadir / "pg_hba.conf").write_text("\n".join(lines) + "\n")
    srv.sql("SELECT pg_reload_conf()")
    time.sleep(0.3)


@pytest.fixture(scope="module")
def pg_logins(pgs):
    import pg_harness as ph
    import psycopg2
    a, b = pgs
    for srv in (a, b):
        for u, (method, pw) in PG_USERS.items():
            enc = "md5" if method == "md5" else "scram-sha-256"
            srv.sql(f"SET password_encryption = '{enc}'")
            srv.sql(f"CREATE ROLE {u} LOGIN PASSWORD '{pw}'")
    a.pgss_reset()
    cap = ph.Tcpdump(OUT / "pg-logins.pcap", PG_A)
    try:
        cap.start()
        for u, n in PG_QUERIES.items():
            c = psycopg2.connect(a.dsn(user=u))
            c.autocommit = True
            with c.cursor() as cur:
                for i in range(n):
                    cur.execute("SELECT count(*) FROM pg_class WHERE relname = %s", (f"x{i}",))
            c.close()
        a.wait_idle()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    want = {u: a.pgss_user(u) for u in PG_USERS}
    pg_hba(b, ["local all all trust", "host all postgres 127.0.0.1/32 trust"] +
           [f"host all {u} 127.0.0.1/32 {m}" for u, (m, _) in PG_USERS.items()])
    try:
        yield cap.out, want
    finally:
        pg_hba(b, ["local all all trust", "host all all 127.0.0.1/32 trust"])


def pg_login_replay(pcap, b, *args):
    b.pgss_reset()
    rep = run_replay(pcap, PG_A, PG_B, "--max", *args)
    b.wait_idle()
    return {u: b.pgss_user(u) for u in PG_USERS}, rep


def test_postgres_scram_md5_cleartext_per_user_credentials(pgs, pg_logins, tmp_path):
    _, b = pgs
    pcap, want = pg_logins
    assert [sum(want[u].values()) for u in PG_QUERIES] == list(PG_QUERIES.values()), want
    f = harness.credentials_file(tmp_path / "creds", "# the captured users\n" +
                                 "".join(f"{u}:{pw}\n" for u, (_, pw) in PG_USERS.items()))
    got, rep = pg_login_replay(pcap, b, "--credentials", str(f))
    assert got == want
    assert rep["fidelity"]["skipped_requests"] == {}, rep["fidelity"]
    assert "warning" not in rep["stderr"], rep["stderr"]


def test_postgres_credentials_missing_user_uses_default(pgs, pg_logins, tmp_path):
    _, b = pgs
    pcap, want = pg_logins
    f = tmp_path / "creds"
    f.write_text("".join(f"{u}:{PG_USERS[u][1]}\n" for u in ("alice", "carol", "dave", "erin")),
                 encoding="utf-8")
    f.chmod(0o644)
    got, rep = pg_login_replay(pcap, b, "--credentials", str(f), "--user", "alice",
                               "--password", PG_USERS["alice"][1])
    # bob's session ran as alice (the default): alice's statements count twice over.
    q = "SELECT count(*) FROM pg_class WHERE relname = $1"
    assert got["bob"] == {} and got["alice"] == {q: PG_QUERIES["alice"] + PG_QUERIES["bob"]}, got
    assert [got[u] for u in ("carol", "dave", "erin")] == [want[u] for u in ("carol", "dave", "erin")]
    assert "bob (1)" in rep["stderr"] and "readable by others" in rep["stderr"], rep["stderr"]


def test_postgres_wrong_scram_password_is_refused(pgs, pg_logins, tmp_path):
    _, b = pgs
    pcap, _ = pg_logins
    f = harness.credentials_file(tmp_path / "creds", "alice:wrong\n")
    r = subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(PG_A),
                        "--target", f"127.0.0.1:{PG_B}", "--max", "--credentials", str(f),
                        "--where", "user=alice", "--format", "json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 1 and "nothing was replayed" in r.stderr, r.stderr
    assert "password authentication failed" in r.stderr, r.stderr
    rep = json.loads(r.stdout)
    assert rep["fidelity"]["requests_sent"] == 0, rep["fidelity"]


def test_postgres_copy_from_stdin_data_is_resent(pgs, tmp_path):
    """psycopg2's copy_expert and psql's \\copy (one CopyData a line) load rows on A; the
    replay re-sends the COPY data and B holds the same rows."""
    import io

    import pg_harness as ph
    import psycopg2
    a, b = pgs
    def sql(srv, q):
        c = srv.admin_conn(ph.DB)
        try:
            with c.cursor() as cur:
                cur.execute(q)
                return cur.fetchall() if cur.description else []
        finally:
            c.close()

    for srv in (a, b):
        sql(srv, "CREATE TABLE t_copy (a int, b text)")
    rows = "".join(f"{i}\trow {i}\n" for i in range(3000))
    f = tmp_path / "rows.tsv"
    f.write_text("".join(f"{i}\tpsql {i}\n" for i in range(100000, 100500)))
    cap = ph.Tcpdump(OUT / "pg-copy.pcap", PG_A)
    try:
        cap.start()
        c = psycopg2.connect(a.dsn())
        with c.cursor() as cur:
            cur.copy_expert("COPY t_copy FROM STDIN", io.StringIO(rows))
            cur.execute("SELECT count(*) FROM t_copy")
        c.commit()
        c.close()
        r = subprocess.run([str(ph.PGBIN / "psql"), "-X", "-c", f"\\copy t_copy FROM '{f}'"],
                           env=a.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60)
        assert r.returncode == 0 and "COPY 500" in r.stdout, r.stdout
        a.wait_idle()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    q = "SELECT count(*), sum(a), md5(string_agg(b, ',' ORDER BY a)) FROM t_copy"
    want = sql(a, q)
    assert want[0][0] == 3500, want
    rep = run_replay(cap.out, PG_A, PG_B, "--max")
    assert sql(b, q) == want
    f = rep["fidelity"]
    assert not any("copy" in k for k in f["skipped_requests"]), f
    # --read-only: a COPY FROM writes; neither it nor its data is sent.
    sql(b, "TRUNCATE t_copy")
    rep = run_replay(cap.out, PG_A, PG_B, "--max", "--read-only")
    assert sql(b, "SELECT count(*) FROM t_copy") == [(0,)]
    # The two COPYs and their data messages, all counted as read_only.
    sk = rep["fidelity"]["skipped_requests"]
    assert list(sk) == ["read_only"] and sk["read_only"] >= 6, rep["fidelity"]


# ------------------------------------------------------------------------------------------------
# --sessions, --rate, --skip-idle (Redis; B's key values, INFO commandstats and MONITOR times)


def test_sessions_sample_replays_whole_sessions(redises):
    a, b = redises

    def work():
        for i in range(20):
            c = rh.RawConn(port=R_A)
            for _ in range(i + 1):
                c.send("INCR", f"sess:{i}")
                c.read()
            c.close()

    pcap, want, _ = r_capture(a, "r-sessions", work)
    assert want == {"incr": 210}, want
    got, rep = r_replay(pcap, b, "--sessions", "40%", "--max")
    keys = {int(k.decode().split(":")[1]): int(b.admin().get(k))
            for k in b.admin().keys("sess:*")}
    # Every sampled session whole (key i holds i + 1), about 40 % of them.
    assert all(v == i + 1 for i, v in keys.items()), keys
    assert 3 <= len(keys) <= 14, keys
    assert got == {"incr": sum(keys.values())}, (got, keys)
    f = rep["fidelity"]
    assert f["sessions_replayed"] == len(keys) and f["sessions_captured"] == 20, f
    assert f["skipped_requests"] == {"session_not_sampled": 210 - sum(keys.values())}, f
    # The sample is deterministic.
    _, rep2 = r_replay(pcap, b, "--sessions", "40%", "--max")
    assert rep2["fidelity"]["sessions_replayed"] == len(keys)


def monitored(b, replay_args, pcap):
    """Replays with B's MONITOR on; B's server times of SET pace:* by client."""
    from test_replay import monitor_times
    stop = threading.Event()
    box: dict = {}
    m = threading.Thread(target=lambda: box.update(monitor_times(b, 60, stop)))
    m.start()
    time.sleep(0.3)
    got, rep = r_replay(pcap, b, *replay_args)
    time.sleep(0.3)
    stop.set()
    m.join()
    return got, rep, box


def test_rate_sets_the_request_rate(redises):
    a, b = redises

    def work():
        c = rh.RawConn(port=R_A)
        for i in range(150):
            c.send("SET", "pace:r", str(i))
            c.read()
        c.close()

    pcap, want, _ = r_capture(a, "r-rate", work)
    assert want == {"set": 150}, want
    got, rep, box = monitored(b, ["--rate", "100"], pcap)
    assert got == {"set": 150}, got
    (times,) = box.values()
    assert len(times) == 150
    span = times[-1] - times[0]
    assert abs(span - 1.49) <= 0.05 * 1.49, span


def test_skip_idle_shortens_long_gaps(redises):
    a, b = redises

    def work():
        c = rh.RawConn(port=R_A)
        for i in range(4):
            c.send("SET", "pace:i", str(i))
            c.read()
            c.send("SET", "pace:i", "again")
            c.read()
            if i < 3:
                time.sleep(1.2)
        c.close()

    pcap, want, _ = r_capture(a, "r-idle", work)
    assert want == {"set": 8}, want
    t0 = time.monotonic()
    got, rep, box = monitored(b, ["--skip-idle", "0.2s"], pcap)
    wall = time.monotonic() - t0
    assert got == {"set": 8}, got
    (times,) = box.values()
    gaps = [y - x for x, y in zip(times, times[1:])]
    # The three 1.2 s pauses became 0.2 s; the short gaps stayed short.
    long_gaps = sorted(gaps)[-3:]
    assert all(abs(g - 0.2) <= 0.03 for g in long_gaps), gaps
    assert all(g < 0.05 for g in sorted(gaps)[:-3]), gaps
    assert wall < 3.6, wall


# ------------------------------------------------------------------------------------------------
# --target-tls: TLS targets made as test_ebpf.py makes them (ebpf_harness: a CA and a server
# certificate for 127.0.0.1); the sources are the plaintext A servers above.

R_TLS, R_TLS_PORT, MY_TLS, PG_TLS = 38456, 38457, 38458, 38459


@pytest.fixture(scope="module")
def tls_targets():
    import ebpf_harness as eh
    import pg_harness as ph
    r = eh.Redis(port=R_TLS, tls_port=R_TLS_PORT, workdir=OUT / "r-tls")
    m = eh.Maria(port=MY_TLS, workdir=OUT / "my-tls")
    certs = eh.make_certs(OUT / "pg-tls-certs")
    for f in certs.values():
        shutil.chown(f, "postgres", "postgres")
    certs["key"].chmod(0o600)
    p = ph.PgServer(PG_TLS, OUT / "pg-tls", extra=[
        "ssl=on", f"ssl_cert_file={certs['cert']}", f"ssl_key_file={certs['key']}"])
    try:
        r.start()
        m.start()
        harness.sysbench_prepare(MY_TLS, SB_TABLE)
        p.start()
        ph.pgbench_init(p)
        # TCP only with TLS: a plaintext replay would be refused.
        pg_hba(p, ["local all all trust", "hostssl all all 127.0.0.1/32 trust",
                   "host all all 127.0.0.1/32 reject"])
        yield r, m, p, certs["ca"]
    finally:
        for s in (r, m, p):
            s.stop()


def test_tls_redis(redises, r_workload, tls_targets):
    r, _, _, _ = tls_targets
    pcap, want, _ = r_workload
    r.reset_stats()
    r.socket_calls.clear()
    before = r.snapshot()
    rep = run_replay(pcap, R_A, R_TLS_PORT, "--max", "--target-tls", "--target-ca",
                     str(r.certs["ca"]))
    got = counts(rh.wire_requests(rh.stats_delta(before, r.snapshot()), r.socket_calls))
    assert got == want
    assert rep["fidelity"]["skipped_requests"] == {}, rep["fidelity"]
    # The certificate is checked: another name fails every connection.
    rep = run_replay(pcap, R_A, R_TLS_PORT, "--max", "--target-tls", "--target-ca",
                     str(r.certs["ca"]), "--target-server-name", "db.example.com",
                     sent_none=True)
    assert rep["fidelity"]["target_connections"] == 0, rep["fidelity"]
    assert "nothing was replayed" in rep["stderr"], rep["stderr"]


def test_tls_mariadb(mariadbs, my_capture, tls_targets):
    import ebpf_harness as eh
    _, m, _, _ = tls_targets
    pcap, want = my_capture
    before = m.status()
    # tap_tls is REQUIRE SSL: its logins succeed only over TLS.
    rep = run_replay(pcap, MY_A, MY_TLS, "--max", "--user", eh.TLS_USER, "--password",
                     eh.TLS_PASSWORD, "--target-tls", "--target-ca", str(m.certs["ca"]))
    got = harness.delta(before, m.status(threads=before["Threads_connected"]))
    for k in ["Com_select", "Com_stmt_execute", "Com_stmt_prepare", "Com_insert", "Com_update"]:
        assert got[k] == want[k], (k, got[k], want[k])
    assert got["Ssl_accepts"] == rep["fidelity"]["target_connections"] > 0, got["Ssl_accepts"]
    assert rep["fidelity"]["skipped_requests"] == {}, rep["fidelity"]


def test_tls_postgres(pgs, pg_capture, tls_targets):
    _, _, p, ca = tls_targets
    pcap, want = pg_capture
    p.pgss_reset()
    rep = run_replay(pcap, PG_A, PG_TLS, "--max", "--target-tls", "--target-ca", str(ca))
    p.wait_idle()
    assert p.calls() == want
    assert rep["fidelity"]["skipped_requests"] == {}, rep["fidelity"]
    # Without --target-tls the target refuses the replay (hostssl only).
    rep = run_replay(pcap, PG_A, PG_TLS, "--max", sent_none=True)
    assert rep["fidelity"]["target_connections"] == 0, rep["fidelity"]
