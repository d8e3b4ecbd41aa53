"""Dimensions (issue 11): `--group-by` and `--where` against the servers' own statistics.

Three private servers of this file's own, on its own ports (so other integration files can run
at the same time), files under tests/out/dims/:

* Redis 7.0 on 127.0.0.1:38110 and 127.0.0.1:38111: the same commands (CONFIG GET among them)
  on both, in different numbers. One capture holds both. `--group-by server,fingerprint` gives
  one group per server and command shape whose counts equal that server's own `INFO
  commandstats` deltas (read over its UNIX socket, not captured).
* PostgreSQL 15 on 127.0.0.1:38112 with two databases (`dbtap` and `dims_b`) and two roles,
  captured in the same file: `--where db=...`, `--where user=...` and `--group-by db,user`
  counts equal the statements pg_stat_statements counted per dbid and userid (the admin
  connection runs over the UNIX socket in the `postgres` database).
* `dbtap live --listen` on lo: /metrics has one `CONFIG GET` series per Redis server, labelled
  `server`, each equal to that server's `config|get` calls.

Run: `cargo build -p dbtap && DBTAP_BIN=target/debug/dbtap /usr/bin/python3 -m pytest -q
tests/integration/test_dimensions.py`. Nothing here trusts dbtap.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import live_harness as lh  # noqa: E402
import pg_harness as ph  # noqa: E402
import redis_harness as rh  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "dims"
REDIS_A, REDIS_B, PG_PORT, LISTEN_PORT = 38110, 38111, 38112, 38113
DB_A, DB_B = ph.DB, "dims_b"

# (command args, count) per Redis server: the same shapes, different numbers.
PLAN_A = [(("CONFIG", "GET", "maxmemory"), 3), (("SET", "k", "v"), 50), (("GET", "k"), 30)]
PLAN_B = [(("CONFIG", "GET", "maxmemory"), 5), (("SET", "k", "v"), 20), (("INCR", "n"), 10)]
# (statement, count) per database.
SQL_A = [("SELECT 1", 40), ("SELECT count(*) FROM pg_class", 7)]
SQL_B = [("SELECT 2", 25), ("SELECT now()", 9), ("SELECT 'x'", 3)]
# Run in DB_B as a second role (pg_harness creates it; trust authentication).
OTHER_USER = ph.SSL_USER
SQL_B_OTHER = [("SELECT 2", 6), ("SELECT 3", 4)]


@pytest.fixture(scope="module")
def redis_pair():
    a = rh.RedisServer(REDIS_A, OUT / "redis-a").start()
    b = rh.RedisServer(REDIS_B, OUT / "redis-b").start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture(scope="module")
def pg():
    srv = ph.PgServer(PG_PORT, OUT / "pg").start()
    try:
        srv.sql(f"CREATE DATABASE {DB_B}")
        yield srv
    finally:
        srv.stop()


def resp_run(port: int, plan) -> dict[str, int]:
    """Sends the plan on one raw connection (no client-library handshake), reading every reply;
    returns the client's own count per command name."""
    c = rh.RawConn(port=port)
    sent: collections.Counter = collections.Counter()
    try:
        for args, n in plan:
            for _ in range(n):
                c.send(*args)
                t, _ = c.read()
                assert t != "-", (args, t)
                sent[args[0].lower()] += 1
    finally:
        c.close()
    return dict(sent)


def redis_truth(srv: rh.RedisServer, before: dict) -> dict[str, int]:
    """Requests on the wire per command name, from the server's own INFO commandstats."""
    got = rh.wire_requests(rh.stats_delta(before, srv.snapshot()), srv.socket_calls)
    return {k: v["requests"] for k, v in got.items()}


def sql_run(pg: ph.PgServer, db: str, plan, user: str = "postgres") -> int:
    import psycopg2
    c = psycopg2.connect(pg.dsn(dbname=db, user=user))
    c.autocommit = True
    n = 0
    with closing(c), c.cursor() as cur:
        for q, k in plan:
            for _ in range(k):
                cur.execute(q)
                cur.fetchall()
                n += 1
    return n


def pgss_calls(pg: ph.PgServer) -> dict[tuple[str, str], int]:
    """pg_stat_statements calls per (database, user), for the two workload databases."""
    deadline = time.monotonic() + 30
    while pg.sql("SELECT count(*) FROM pg_stat_activity WHERE datname IN (%s, %s) AND "
                 "backend_type = 'client backend'", (DB_A, DB_B))[0][0]:
        assert time.monotonic() < deadline, "workload connections still open"
        time.sleep(0.05)
    rows = pg.sql("SELECT d.datname, r.rolname, sum(s.calls)::bigint FROM pg_stat_statements s "
                  "JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid "
                  "WHERE d.datname IN (%s, %s) GROUP BY 1, 2", (DB_A, DB_B))
    return {(db, user): int(n) for db, user, n in rows}


def per_db(pgss: dict) -> dict[str, int]:
    out: collections.Counter = collections.Counter()
    for (db, _), n in pgss.items():
        out[db] += n
    return dict(out)


def ports() -> list[str]:
    return ["--port", str(REDIS_A), "--port", str(REDIS_B), "--port", str(PG_PORT)]


def statements(d: dict) -> int:
    """PostgreSQL statement executions in a digest (the session's own messages, e.g. Terminate,
    are not statements: pg_stat_statements does not count them)."""
    return sum(g["count"] for g in d["queries"]
               if g["protocol"] == "postgres" and g["command"] == "query")


@pytest.fixture(scope="module")
def capture(redis_pair, pg):
    """One capture of both Redis servers and both databases; the truth of each."""
    a, b = redis_pair
    pcap = OUT / "all.pcap"
    td = ph.Tcpdump(pcap, REDIS_A)
    td.filter = f"tcp portrange {REDIS_A}-{PG_PORT}"
    td.start()
    before_a, before_b = a.snapshot(), b.snapshot()
    pg.pgss_reset()
    sent = {REDIS_A: resp_run(REDIS_A, PLAN_A), REDIS_B: resp_run(REDIS_B, PLAN_B)}
    sql_sent = {(DB_A, "postgres"): sql_run(pg, DB_A, SQL_A),
                (DB_B, "postgres"): sql_run(pg, DB_B, SQL_B),
                (DB_B, OTHER_USER): sql_run(pg, DB_B, SQL_B_OTHER, user=OTHER_USER)}
    truth = {REDIS_A: redis_truth(a, before_a), REDIS_B: redis_truth(b, before_b)}
    pgss = pgss_calls(pg)
    ph.check_dropped(td.stop())
    # the clients' own counts agree with the servers' before anything is asked of dbtap
    assert truth == sent, (truth, sent)
    assert pgss == sql_sent, (pgss, sql_sent)
    return pcap, truth, pgss


def test_group_by_server_fingerprint_equals_each_servers_commandstats(capture):
    pcap, truth, _ = capture
    d = harness.digest(pcap, extra=(*ports(), "--group-by", "server,fingerprint"))
    assert d["scope"]["group_by"] == "fingerprint,server"
    got: dict[int, collections.Counter] = {REDIS_A: collections.Counter(),
                                           REDIS_B: collections.Counter()}
    config_get = {}
    for g in d["queries"]:
        if g["protocol"] != "redis":
            continue
        assert not g["overflow"]
        server = g["dimensions"]["server"]
        port = int(server.rsplit(":", 1)[1])
        got[port][g["command"]] += g["count"]
        if g["fingerprint"] == "CONFIG GET":
            assert server not in config_get, "one CONFIG GET group per server"
            config_get[server] = g["count"]
    assert {k: dict(v) for k, v in got.items()} == truth
    assert config_get == {f"127.0.0.1:{REDIS_A}": truth[REDIS_A]["config"],
                          f"127.0.0.1:{REDIS_B}": truth[REDIS_B]["config"]}
    # the default grouping merges the two servers into one CONFIG GET group
    plain = harness.digest(pcap, extra=tuple(ports()))
    merged = [g for g in plain["queries"] if g["fingerprint"] == "CONFIG GET"]
    assert [g["count"] for g in merged] == [truth[REDIS_A]["config"] + truth[REDIS_B]["config"]]
    assert "dimensions" not in merged[0] and "scope" not in plain
    # the overall shares panel: each server's share of the calls is its own count
    servers = {s["dimension"]: s for s in plain["totals"]["dimensions"]}["server"]
    by_value = {v["value"]: v["count"] for v in servers["values"]}
    for port in (REDIS_A, REDIS_B):
        assert by_value[f"127.0.0.1:{port}"] == sum(truth[port].values())


def test_group_by_server_alone_one_group_per_server(capture):
    pcap, truth, pgss = capture
    d = harness.digest(pcap, extra=(*ports(), "--group-by", "server"))
    got = {g["dimensions"]["server"]: g["count"] for g in d["queries"]}
    want_pg = sum(pgss.values())
    assert got[f"127.0.0.1:{REDIS_A}"] == sum(truth[REDIS_A].values())
    assert got[f"127.0.0.1:{REDIS_B}"] == sum(truth[REDIS_B].values())
    # PostgreSQL: every statement plus one Terminate per connection (not a statement)
    assert got[f"127.0.0.1:{PG_PORT}"] == want_pg + len(pgss)
    assert len(got) == 3


@pytest.mark.parametrize("db", [DB_A, DB_B])
def test_where_db_equals_pg_stat_statements(capture, db):
    pcap, _, pgss = capture
    d = harness.digest(pcap, extra=(*ports(), "--where", f"db={db}"))
    assert statements(d) == per_db(pgss)[db]
    assert d["scope"]["where"] == f"db={db}"
    # only that database's events are counted, in groups and in the totals
    assert d["totals"]["queries"] == sum(g["count"] for g in d["queries"])
    assert all(g["protocol"] == "postgres" for g in d["queries"])
    dbs = d["totals"]["stats"] if "stats" in d["totals"] else d["totals"]
    assert [v["name"] for v in dbs["databases"]["values"]] == [db]
    # the negation counts the rest: both together are everything
    rest = harness.digest(pcap, extra=(*ports(), "--where", f"db!={db}"))
    everything = harness.digest(pcap, extra=tuple(ports()))
    assert d["totals"]["queries"] + rest["totals"]["queries"] == everything["totals"]["queries"]
    assert d["scope"]["filtered_out"] == rest["totals"]["queries"]
    # --group-by db: each database's statements in its own groups
    by_db = harness.digest(pcap, extra=(*ports(), "--group-by", "db,fingerprint",
                                        "--where", "protocol=postgres"))
    n = sum(g["count"] for g in by_db["queries"]
            if g["command"] == "query" and g["dimensions"]["db"] == db)
    assert n == per_db(pgss)[db]


def test_group_by_db_user_and_where_user_equal_pg_stat_statements(capture):
    pcap, _, pgss = capture
    d = harness.digest(pcap, extra=(*ports(), "--group-by", "db,user", "--where",
                                    "protocol=postgres", "--where", "command=query"))
    got = {(g["dimensions"]["db"], g["dimensions"]["user"]): g["count"] for g in d["queries"]}
    assert got == pgss
    assert all(g["fingerprint"] == f"db={g['dimensions']['db']} user={g['dimensions']['user']}"
               for g in d["queries"])
    other = harness.digest(pcap, extra=(*ports(), "--where", f"user={OTHER_USER}"))
    assert statements(other) == pgss[(DB_B, OTHER_USER)]
    rest = harness.digest(pcap, extra=(*ports(), "--where", f"user!={OTHER_USER}",
                                       "--where", "protocol=postgres"))
    assert statements(rest) == sum(n for (_, u), n in pgss.items() if u != OTHER_USER)
    # the shares panel of the PostgreSQL traffic: each user's calls
    pg_only = harness.digest(pcap, extra=(*ports(), "--where", "protocol=postgres",
                                          "--where", "command=query"))
    users = {s["dimension"]: s for s in pg_only["totals"]["dimensions"]}["user"]
    assert {v["value"]: v["count"] for v in users["values"]} == {
        "postgres": pgss[(DB_A, "postgres")] + pgss[(DB_B, "postgres")],
        OTHER_USER: pgss[(DB_B, OTHER_USER)]}


def test_where_text_header_and_bad_expression(capture):
    pcap, truth, _ = capture
    r = harness.dbtap("digest", pcap, *ports(), "--where", "fingerprint~^CONFIG",
                      "--where", f"server=:{REDIS_B}")
    text = r.stdout.decode()
    assert f"# Where: fingerprint~^CONFIG AND server=:{REDIS_B} (" in text
    want = truth[REDIS_B]["config"]
    assert f"# Overall: {want} queries, 1 unique" in text
    r = harness.dbtap("digest", pcap, "--where", "db~(", check=False)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert err.count("\n") == 1 and "bad --where" in err, err
    r = harness.dbtap("digest", pcap, "--group-by", "server,nope", check=False)
    assert r.returncode == 2 and r.stderr.decode().count("\n") == 1


def test_events_where_and_group_by(capture):
    pcap, truth, _ = capture
    ev = harness.events(pcap, extra=(*ports(), "--where", f"server=127.0.0.1:{REDIS_A}",
                                      "--group-by", "server,fingerprint"))
    by_cmd = collections.Counter(e["command"] for e in ev)
    assert dict(by_cmd) == truth[REDIS_A]
    ids = {(e["fingerprint"], e["id"]) for e in ev if e["command"] == "config"}
    evb = harness.events(pcap, extra=(*ports(), "--where", f"server=127.0.0.1:{REDIS_B}",
                                       "--group-by", "server,fingerprint"))
    ids_b = {(e["fingerprint"], e["id"]) for e in evb if e["command"] == "config"}
    # the same fingerprint on two servers: two groups, two ids
    assert len(ids) == len(ids_b) == 1 and ids != ids_b
    assert next(iter(ids))[0] == next(iter(ids_b))[0] == "CONFIG GET"


def scrape(addr: str) -> str:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        return r.read().decode()


def config_get_series(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("dbtap_queries_total{") and 'fingerprint="CONFIG GET"' in line:
            labels, value = line.rsplit(" ", 1)
            server = labels.split('server="', 1)[1].split('"', 1)[0]
            out[server] = float(value)
    return out


def test_live_metrics_series_carry_server(redis_pair):
    a, b = redis_pair
    live = lh.Live("-i", "lo", "--port", str(REDIS_A), "--port", str(REDIS_B), "--interval", "1s",
                   "--listen", f"127.0.0.1:{LISTEN_PORT}", "--format", "json").start()
    try:
        before_a, before_b = a.snapshot(), b.snapshot()
        resp_run(REDIS_A, [(("CONFIG", "GET", "maxmemory"), 3)])
        resp_run(REDIS_B, [(("CONFIG", "GET", "maxmemory"), 4)])
        want = {f"127.0.0.1:{REDIS_A}": float(redis_truth(a, before_a)["config"]),
                f"127.0.0.1:{REDIS_B}": float(redis_truth(b, before_b)["config"])}
        assert want == {f"127.0.0.1:{REDIS_A}": 3.0, f"127.0.0.1:{REDIS_B}": 4.0}
        deadline = time.monotonic() + 20
        got: dict = {}
        while time.monotonic() < deadline:
            got = config_get_series(scrape(live.listen_addr()))
            if got == want:
                break
            time.sleep(0.3)
        assert got == want
    finally:
        live.stop()
    assert live.rc == 0, live.stderr
