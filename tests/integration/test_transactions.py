"""Transactions, idle-in-transaction time and the fine latency distribution (issue 11).

Two private servers of this file's own, on their own ports (38150-38159, so the other
integration files can run at the same time), files under tests/out/txn/:

* PostgreSQL 15 on 127.0.0.1:38150 (psycopg2, simple query protocol) and MariaDB on
  127.0.0.1:38151 (pymysql), each running the same scripted transactions on two connections:
  BEGIN; SELECT; sleep 0.3; UPDATE; sleep 0.2; COMMIT, then BEGIN; INSERT; sleep 0.1; ROLLBACK
  on one, BEGIN; SELECT; sleep 0.15; COMMIT on the other, autocommit statements around them.
  dbtap's transactions (count, how they ended, statements), their durations and their
  idle-in-transaction times equal what the client measured around its own calls.
* MariaDB, one statement shape with two latency modes (`SELECT SLEEP(0)` 4 times in 5,
  `SELECT SLEEP(0.02)` once in 5): `--histogram fine` shows two humps, the slow one at 20 ms
  holding exactly the slow calls, with empty rows between them.

Tolerance. The client measures around its calls (time.perf_counter before sending, after the
reply is read); dbtap measures between packets on lo (request's first packet, response's last).
So dbtap's duration is inside the client's, and each of dbtap's idle gaps contains the
client's (it adds the time the client took to read a reply and to send the next request): on
loopback that is tens of microseconds per boundary in Python (measured: 0.05-0.35 ms per
transaction), more when the 2 shared cores are busy. TOL_MS (per transaction, 4 boundaries at
most) bounds it; SLACK_MS allows for the two clocks (perf_counter vs the kernel's packet
stamps) in the other direction.

Run: `cargo build -p dbtap && DBTAP_BIN=target/debug/dbtap /usr/bin/python3 -m pytest -q
tests/integration/test_transactions.py`. Nothing here trusts dbtap: the truth is the client's
own clock and its own counts.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import pg_harness as ph  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "txn"
PG_PORT = 38150
MY_PORT = 38151
TOL_MS = 10.0
SLACK_MS = 1.0
SLOW_EVERY = 5
SLEEP_CALLS = 200


class Timed:
    """A DB-API cursor whose every execute is timed by the client: (start, end) pairs."""

    def __init__(self, cur):
        self.cur = cur
        self.calls: list[tuple[float, float]] = []

    def run(self, sql: str) -> None:
        t0 = time.perf_counter()
        self.cur.execute(sql)
        if self.cur.description:
            self.cur.fetchall()
        self.calls.append((t0, time.perf_counter()))


def transaction(t: Timed, stmts: list, end: str, log: list, port: int) -> None:
    """Runs BEGIN, `stmts` (SQL, or a float: seconds to sleep), `end`; logs what the client saw."""
    first = len(t.calls)
    t.run("BEGIN")
    for s in stmts:
        if isinstance(s, float):
            time.sleep(s)
        else:
            t.run(s)
    t.run(end)
    calls = t.calls[first:]
    idle = sum(calls[i + 1][0] - calls[i][1] for i in range(len(calls) - 1))
    log.append({
        "port": port,
        "duration_ms": (calls[-1][1] - calls[0][0]) * 1e3,
        "idle_ms": idle * 1e3,
        "statements": len(calls),
        "ended": "commit" if end == "COMMIT" else "rollback",
    })


def workload(conn_a, conn_b, port_a: int, port_b: int) -> list[dict]:
    a, b = Timed(conn_a.cursor()), Timed(conn_b.cursor())
    log: list[dict] = []
    for _ in range(3):
        a.run("SELECT v FROM txt WHERE id = 1")
    transaction(a, ["SELECT v FROM txt WHERE id = 1", 0.3,
                    "UPDATE txt SET v = v + 1 WHERE id = 1", 0.2], "COMMIT", log, port_a)
    b.run("SELECT v FROM txt WHERE id = 2")
    a.run("SELECT v FROM txt WHERE id = 2")
    transaction(a, ["INSERT INTO txt VALUES (100, 0)", 0.1], "ROLLBACK", log, port_a)
    transaction(b, ["SELECT v FROM txt WHERE id = 2", 0.15], "COMMIT", log, port_b)
    b.run("SELECT v FROM txt WHERE id = 3")
    return log


def _digest(pcap: Path, port: int, *extra: str) -> dict:
    return harness.digest(pcap, extra=("--server", f"127.0.0.1:{port}", *extra))


def check(d: dict, log: list[dict], user: str, db: str) -> None:
    t = d.get("transactions")
    assert t is not None, "no transactions section"
    assert t["count"] == len(log)
    assert t["committed"] == sum(x["ended"] == "commit" for x in log)
    assert t["rolled_back"] == sum(x["ended"] == "rollback" for x in log)
    assert (t["closed"], t["other_end"], t["untracked_events"]) == (0, 0, 0)
    assert t["statements"] == sum(x["statements"] for x in log)
    top = sorted(t["top"], key=lambda x: x["start_ns"])
    assert len(top) == len(log)
    # The client's log is in start order too.
    for got, want in zip(top, log):
        assert got["client"] == f"127.0.0.1:{want['port']}"
        assert (got["user"], got["database"]) == (user, db)
        assert got["ended"] == want["ended"]
        assert got["statements"] == want["statements"]
        dur, idle = got["duration_us"] / 1e3, got["idle_us"] / 1e3
        print(f"txn {want['ended']}: duration client {want['duration_ms']:.3f} ms dbtap "
              f"{dur:.3f} ms; idle client {want['idle_ms']:.3f} ms dbtap {idle:.3f} ms")
        assert want["duration_ms"] - TOL_MS <= dur <= want["duration_ms"] + SLACK_MS
        assert want["idle_ms"] - SLACK_MS <= idle <= want["idle_ms"] + TOL_MS
        assert got["first_fingerprint"].lower().startswith("begin")
    total_idle = sum(x["idle_ms"] for x in log)
    assert total_idle - SLACK_MS <= t["idle_us"] / 1e3 <= total_idle + len(log) * TOL_MS
    conns = {c["client"]: c for c in t["connections"]}
    for port in {x["port"] for x in log}:
        mine = [x for x in log if x["port"] == port]
        c = conns[f"127.0.0.1:{port}"]
        assert c["transactions"] == len(mine)
        idle = sum(x["idle_ms"] for x in mine)
        assert idle - SLACK_MS <= c["idle_us"] / 1e3 <= idle + len(mine) * TOL_MS
    # Ranked by idle time: connection A (0.6 s idle) before B (0.15 s).
    assert t["connections"][0]["idle_us"] >= t["connections"][1]["idle_us"]


# -------------------------------------------------------------------------------------------------
# PostgreSQL

@pytest.fixture(scope="module")
def pg_capture():
    import psycopg2
    pg = ph.PgServer(PG_PORT, OUT / "pg")
    cap = ph.Tcpdump(OUT / "pg.pcap", PG_PORT, iface="lo")
    try:
        pg.start()
        with ph.closing(pg.admin_conn(ph.DB)) as c, c.cursor() as cur:
            cur.execute("CREATE TABLE txt (id int PRIMARY KEY, v bigint NOT NULL)")
            cur.execute("INSERT INTO txt SELECT g, 0 FROM generate_series(0, 9) g")
        cap.start()
        a = psycopg2.connect(pg.dsn())
        b = psycopg2.connect(pg.dsn())
        try:
            a.autocommit = b.autocommit = True
            ports = []
            for c in (a, b):
                with c.cursor() as cur:
                    cur.execute("SELECT inet_client_port()")
                    ports.append(cur.fetchone()[0])
            log = workload(a, b, *ports)
        finally:
            a.close()
            b.close()
        pg.wait_idle()
        cap.sync()
        stats = cap.stop()
    finally:
        cap.stop()
        pg.stop()
    ph.check_dropped(stats)
    return cap.out, log


def test_postgres_transactions_match_client(pg_capture):
    pcap, log = pg_capture
    check(_digest(pcap, PG_PORT), log, "postgres", ph.DB)


def test_postgres_transactions_text(pg_capture):
    pcap, log = pg_capture
    r = harness.dbtap("digest", pcap, "--server", f"127.0.0.1:{PG_PORT}")
    text = r.stdout.decode()
    assert f"# Transactions: {len(log)} (2 commit, 1 rollback, 0 other, 0 closed)" in text
    assert "# Longest transactions" in text
    assert "# Idle in transaction by connection" in text


# -------------------------------------------------------------------------------------------------
# MariaDB

@pytest.fixture(scope="module")
def my_capture():
    srv = harness.Server(MY_PORT, OUT / "mariadb", tls=False)
    cap = harness.Tcpdump(OUT / "mariadb.pcap", MY_PORT, iface="lo")
    try:
        srv.start()
        with srv.root() as c, c.cursor() as cur:
            cur.execute("CREATE TABLE dbtap_test.txt (id int PRIMARY KEY, v bigint NOT NULL) "
                        "ENGINE=InnoDB")
            cur.execute("INSERT INTO dbtap_test.txt VALUES " +
                        ", ".join(f"({i}, 0)" for i in range(10)))
        cap.start()
        a, b = srv.connect(), srv.connect()
        try:
            ports = [c._sock.getsockname()[1] for c in (a, b)]
            log = workload(a, b, *ports)
            # Two latency modes in one statement shape.
            s = Timed(b.cursor())
            for i in range(SLEEP_CALLS):
                s.run("SELECT SLEEP(0.02)" if i % SLOW_EVERY == 0 else "SELECT SLEEP(0)")
        finally:
            a.close()
            b.close()
        cap.sync()
        stats = cap.stop()
    finally:
        cap.stop()
        srv.stop()
    ph.check_dropped(stats)
    return cap.out, log, s.calls


def test_mariadb_transactions_match_client(my_capture):
    pcap, log, _ = my_capture
    check(_digest(pcap, MY_PORT), log, harness.USER, "dbtap_test")


def test_mariadb_fine_histogram_two_humps(my_capture):
    pcap, _, calls = my_capture
    d = _digest(pcap, MY_PORT, "--histogram", "fine")
    g = [q for q in d["queries"] if q["fingerprint"].lower().startswith("select sleep")]
    assert len(g) == 1, [q["fingerprint"] for q in d["queries"]]
    g = g[0]
    assert g["count"] == SLEEP_CALLS
    rows = g["service_fine"]
    assert 2 <= len(rows) <= 48
    # Rows tile [min, max] without gaps and hold every call.
    for x, y in zip(rows, rows[1:]):
        assert x["lt_us"] == y["ge_us"]
    assert rows[0]["ge_us"] <= g["service_us"]["min"] < rows[0]["lt_us"]
    assert rows[-1]["ge_us"] <= g["service_us"]["max"]
    assert sum(r["count"] for r in rows) == SLEEP_CALLS
    # The truth, from the client: which calls slept (server time >= 20 ms by construction) and
    # how long each fast call took as the client saw it (dbtap's service time is shorter: the
    # client's time also holds its own work and the wire). The 2 shared cores sometimes delay a
    # fast call by milliseconds: those are counted from the client's times, not assumed away.
    slow_n = (SLEEP_CALLS + SLOW_EVERY - 1) // SLOW_EVERY
    fast_client_ms = [(t1 - t0) * 1e3 for i, (t0, t1) in enumerate(calls) if i % SLOW_EVERY]
    fast_under_1ms = sum(t < 1.0 for t in fast_client_ms)
    fast_over_17ms = sum(t >= 17.0 for t in fast_client_ms)
    # With about 1,000x between min and max, 48 rows are about 16% wide: the slow hump's rows
    # start above 20 ms / 1.2.
    slow_rows = [r for r in rows if r["ge_us"] >= 20_000 / 1.2]
    fast_rows = [r for r in rows if r["lt_us"] <= 1_000]
    between = [r for r in rows if r["ge_us"] >= 1_000 and r["lt_us"] <= 20_000 / 1.2]
    slow_mass = sum(r["count"] for r in slow_rows)
    fast_mass = sum(r["count"] for r in fast_rows)
    print(f"fine rows: {len(rows)}; fast hump {fast_mass} (client: {fast_under_1ms} under 1 ms), "
          f"slow hump {slow_mass} (client: {slow_n} slept, {fast_over_17ms} fast ones over 17 ms), "
          f"{sum(r['count'] for r in between)} between in {len(between)} rows")
    assert slow_n <= slow_mass <= slow_n + fast_over_17ms
    assert fast_under_1ms <= fast_mass <= SLEEP_CALLS - slow_n
    # Two humps: the fullest row below 1 ms and the fullest row at 17-25 ms, with (at least
    # ten) empty rows between them.
    peak_fast = max(fast_rows, key=lambda r: r["count"])
    peak_slow = max(slow_rows, key=lambda r: r["count"])
    assert peak_slow["ge_us"] <= 20_500 and peak_slow["lt_us"] > 20_000, peak_slow
    assert peak_slow["count"] >= slow_n // 2
    assert peak_fast["count"] >= (SLEEP_CALLS - slow_n) // 10
    empty_between = [r for r in between if r["count"] == 0]
    assert len(empty_between) >= 10, rows
    # The text form: the same rows, a bar on each non-empty one.
    text = harness.dbtap("digest", pcap, "--server", f"127.0.0.1:{MY_PORT}",
                         "--histogram", "fine").stdout.decode()
    block = [b for b in text.split("\n# Query ") if "\n#    select sleep(?)\n" in b]
    assert len(block) == 1
    lines = block[0].split("# Exec time distribution (fine: ")[1].split("\n# Fingerprint")[0]
    lines = lines.splitlines()[1:]
    assert len(lines) == len(rows)
    for line, r in zip(lines, rows):
        cols = line.split()
        assert int(cols[3].replace(",", "")) == r["count"], line
        assert (len(cols) == 5 and set(cols[4]) == {"#"}) == (r["count"] > 0), line
