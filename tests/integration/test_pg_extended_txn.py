"""PostgreSQL transactions sent through the extended protocol (Parse/Bind/Execute ... Sync).

The transaction state (ReadyForQuery I/T/E) comes only at a Sync batch's end; dbtap holds the
batch's events until then. A private PostgreSQL 15 of this file's own on 127.0.0.1:38160
(files under tests/out/pgxtxn/), captured with tcpdump on lo:

* pgbench -M extended and -M prepared, default tpcb-like script (BEGIN; 5 statements; END),
  2 clients x 150 transactions each: dbtap's transaction count equals pgbench's own count, all
  committed, 7 statements each (prepared: plus the statements' own Parse round trips pgbench
  sends inside its first transaction, at most 6 per client); the server's xact_commit delta
  holds them (it also counts pgbench's autocommit statements: a lower bound, not exact).
* psycopg 3 (extended protocol for every statement, forced with binary results; auto-prepare
  off, so each statement is one Parse/Bind/Describe/Execute/Sync flight) running BEGIN; SELECT; sleep; UPDATE; sleep;
  COMMIT and BEGIN; INSERT; sleep; ROLLBACK on one connection, BEGIN; SELECT; sleep; COMMIT on
  another: durations and idle-in-transaction times match the client's own clock, with the
  tolerance test_transactions.py explains (dbtap's duration inside the client's, its idle
  gaps containing the client's).

Run: `cargo build -p dbtap && DBTAP_BIN=target/debug/dbtap /usr/bin/python3 -m pytest -q
tests/integration/test_pg_extended_txn.py`. The truth is pgbench's report, the server's counters
and the client's clock, never dbtap.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import pg_harness as ph  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "pgxtxn"
PG_PORT = 38160
CLIENTS = 2
PER_CLIENT = 150
TPCB_STATEMENTS = 7
TOL_MS = 10.0
SLACK_MS = 1.0


def _xact_commit(pg: ph.PgServer) -> int:
    return pg.sql("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (ph.DB,))[0][0]


@pytest.fixture(scope="module")
def server():
    pg = ph.PgServer(PG_PORT, OUT / "pg")
    try:
        pg.start()
        ph.pgbench_init(pg)
        with ph.closing(pg.admin_conn(ph.DB)) as c, c.cursor() as cur:
            cur.execute("CREATE TABLE txt (id int PRIMARY KEY, v bigint NOT NULL)")
            cur.execute("INSERT INTO txt SELECT g, 0 FROM generate_series(0, 9) g")
        yield pg
    finally:
        pg.stop()


def _capture(pg: ph.PgServer, name: str, work):
    cap = ph.Tcpdump(OUT / f"{name}.pcap", PG_PORT, iface="lo")
    try:
        cap.start()
        res = work()
        pg.wait_idle()
        cap.sync()
        stats = cap.stop()
    finally:
        cap.stop()
    ph.check_dropped(stats)
    return cap.out, res


def _digest(pcap: Path) -> dict:
    return harness.digest(pcap, extra=("--server", f"127.0.0.1:{PG_PORT}"))


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_pgbench_transactions_counted(server, mode):
    before = _xact_commit(server)
    pcap, run = _capture(server, f"pgbench-{mode}",
                         lambda: ph.pgbench_run(server, mode, CLIENTS, PER_CLIENT))
    delta = _xact_commit(server) - before
    n = run["transactions"]
    assert n == CLIENTS * PER_CLIENT and run["failed"] == 0, run["raw"]
    t = _digest(pcap).get("transactions")
    assert t is not None, "no transactions section"
    print(f"-M {mode}: pgbench {n} transactions, xact_commit delta {delta}, dbtap {t['count']} "
          f"({t['committed']} commit), {t['statements']} statements")
    assert t["count"] == n
    assert t["committed"] == n
    assert (t["rolled_back"], t["closed"], t["other_end"], t["untracked_events"]) == (0, 0, 0, 0)
    if mode == "extended":
        assert t["statements"] == TPCB_STATEMENTS * n
    else:
        # pgbench prepares each statement (Parse + Sync) when first used: BEGIN's before the
        # transaction, the other six inside the first one of each client.
        assert TPCB_STATEMENTS * n <= t["statements"] <= TPCB_STATEMENTS * n + 6 * CLIENTS
    # Every one of them committed on the server (the delta also holds pgbench's autocommit
    # statements outside its transactions, which the server does not tell apart: a bound only).
    assert delta >= n
    for x in t["top"]:
        assert x["ended"] == "commit"
        assert x["first_fingerprint"].lower().startswith("begin")
        assert x["statements"] >= TPCB_STATEMENTS


class Timed:
    """A psycopg 3 connection whose every execute is timed by the client: (start, end) pairs."""

    def __init__(self, conn):
        self.conn = conn
        self.calls: list[tuple[float, float]] = []

    def run(self, sql: str, params=None) -> None:
        t0 = time.perf_counter()
        # binary=True: psycopg 3 sends a statement without parameters as a simple Query
        # otherwise; with it, every statement is a Parse/Bind/Describe/Execute/Sync flight.
        cur = self.conn.execute(sql, params, prepare=False, binary=True)
        if cur.description:
            cur.fetchall()
        self.calls.append((t0, time.perf_counter()))


def transaction(t: Timed, stmts: list, end: str, log: list, port: int) -> None:
    """BEGIN, `stmts` (SQL with params, or a float: seconds to sleep), `end`; what the client saw."""
    first = len(t.calls)
    t.run("BEGIN")
    for s in stmts:
        if isinstance(s, float):
            time.sleep(s)
        else:
            t.run(*s)
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


def _psycopg_workload(pg: ph.PgServer) -> list[dict]:
    import psycopg
    a = psycopg.connect(pg.dsn(), autocommit=True, prepare_threshold=None)
    b = psycopg.connect(pg.dsn(), autocommit=True, prepare_threshold=None)
    try:
        ta, tb = Timed(a), Timed(b)
        pa, pb = ph.local_port(a), ph.local_port(b)
        log: list[dict] = []
        sel = "SELECT v FROM txt WHERE id = %s"
        for _ in range(3):
            ta.run(sel, (1,))
        transaction(ta, [(sel, (1,)), 0.3, ("UPDATE txt SET v = v + 1 WHERE id = %s", (1,)),
                         0.2], "COMMIT", log, pa)
        tb.run(sel, (2,))
        ta.run(sel, (2,))
        transaction(ta, [("INSERT INTO txt VALUES (%s, 0)", (100,)), 0.1], "ROLLBACK", log, pa)
        transaction(tb, [(sel, (2,)), 0.15], "COMMIT", log, pb)
        tb.run(sel, (3,))
        return log
    finally:
        a.close()
        b.close()


def test_psycopg3_idle_in_transaction_matches_client(server):
    pcap, log = _capture(server, "psycopg3", lambda: _psycopg_workload(server))
    # The workload went through the extended protocol: BEGIN was an execution, not a query.
    ev = harness.dbtap("events", pcap, "--server", f"127.0.0.1:{PG_PORT}").stdout.decode()
    assert '"command":"execute","id"' in ev and '"fingerprint":"begin"' in ev.lower()
    assert '"command":"query"' not in ev
    t = _digest(pcap).get("transactions")
    assert t is not None, "no transactions section"
    assert t["count"] == len(log)
    assert t["committed"] == sum(x["ended"] == "commit" for x in log)
    assert t["rolled_back"] == sum(x["ended"] == "rollback" for x in log)
    assert (t["closed"], t["other_end"], t["untracked_events"]) == (0, 0, 0)
    assert t["statements"] == sum(x["statements"] for x in log)
    top = sorted(t["top"], key=lambda x: x["start_ns"])
    assert len(top) == len(log)
    for got, want in zip(top, log):
        assert got["client"] == f"127.0.0.1:{want['port']}"
        assert got["ended"] == want["ended"]
        assert got["statements"] == want["statements"]
        dur, idle = got["duration_us"] / 1e3, got["idle_us"] / 1e3
        print(f"txn {want['ended']}: duration client {want['duration_ms']:.3f} ms dbtap "
              f"{dur:.3f} ms; idle client {want['idle_ms']:.3f} ms dbtap {idle:.3f} ms")
        assert want["duration_ms"] - TOL_MS <= dur <= want["duration_ms"] + SLACK_MS
        assert want["idle_ms"] - SLACK_MS <= idle <= want["idle_ms"] + TOL_MS
        assert got["first_fingerprint"].lower().startswith("begin")
    conns = {c["client"]: c for c in t["connections"]}
    for port in {x["port"] for x in log}:
        mine = [x for x in log if x["port"] == port]
        c = conns[f"127.0.0.1:{port}"]
        assert c["transactions"] == len(mine)
        idle = sum(x["idle_ms"] for x in mine)
        assert idle - SLACK_MS <= c["idle_us"] / 1e3 <= idle + len(mine) * TOL_MS
