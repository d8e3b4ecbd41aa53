"""dbtap on real PostgreSQL 15 traffic, held to pg_stat_statements and the clients' own counts.

A private server on 127.0.0.1:35432 (pg_harness.PgServer: ssl=on, pg_stat_statements with
track=all), captured with tcpdump on lo. pg_stat_statements is reset over the UNIX socket before
each captured workload and read over it afterwards, so the statistics calls are neither on the
wire nor in the counts.

- pgbench -M simple / extended / prepared, each its own capture: per statement, dbtap's `query`
  group (simple queries and extended executions) == pg_stat_statements `calls`, and its time at
  least pg_stat_statements' `total_exec_time`; the summed time at most clients x the capture's
  span; the unnamed Parse of `-M extended` counted but never timed.
- a scripted workload through psycopg2 (libpq, simple protocol) and psycopg 3 (extended protocol):
  errors by SQLSTATE, COPY both ways, a 200k-row result, pipeline mode, a server-side prepared
  statement, a multi-statement query, a connection opened before the capture, a TLS connection,
  NULL columns.
"""

from __future__ import annotations

import collections
import datetime
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import pg_harness as ph  # noqa: E402

PORT = 35432
OUT = harness.REPO / "tests" / "out" / "pg"
PGBENCH_CLIENTS = 2
PGBENCH_TX = 300  # per client
MODES = ("simple", "extended", "prepared")


@pytest.fixture(scope="module")
def pg():
    srv = ph.PgServer(PORT, OUT / "server", ssl=True)
    try:
        srv.start()
        ph.pgbench_init(srv)
        yield srv
    finally:
        srv.stop()


_digests: dict = {}


def digest(pcap) -> dict:
    k = str(pcap)
    if k not in _digests:
        _digests[k] = harness.digest(pcap, extra=("--port", str(PORT)))
    return _digests[k]


def events(pcap) -> list[dict]:
    k = "events " + str(pcap)
    if k not in _digests:
        _digests[k] = harness.events(pcap, extra=("--port", str(PORT)))
    return _digests[k]


class Capture:
    def __init__(self, pcap, tcpdump, pgss, extra):
        self.pcap, self.tcpdump, self.pgss, self.extra = pcap, tcpdump, pgss, extra


@pytest.fixture(scope="module")
def pgbench_capture(pg):
    """One capture per pgbench mode, taken on first use."""
    caps: dict[str, Capture] = {}

    def get(mode: str) -> Capture:
        if mode not in caps:
            pg.pgss_reset()
            cap = ph.Tcpdump(OUT / f"pgbench-{mode}.pcap", PORT)
            try:
                cap.start()
                run = ph.pgbench_run(pg, mode, PGBENCH_CLIENTS, transactions=PGBENCH_TX)
            finally:
                stats = cap.stop()
            ph.check_dropped(stats)
            pg.wait_idle()
            caps[mode] = Capture(cap.out, stats, pg.pgss(),
                                 {"pgbench": run, "exec_ms": pg.pgss_exec_ms()})
        return caps[mode]
    return get


@pytest.fixture(scope="module")
def workload(pg):
    w = ph.PgWorkload(pg)
    w.setup_schema()
    return w


@pytest.fixture(scope="module")
def preopened(pg, workload):
    """A connection opened before tcpdump starts, then K queries captured (its own capture)."""
    workload.pre_open()
    pg.pgss_reset()
    cap = ph.Tcpdump(OUT / "preopened.pcap", PORT)
    try:
        cap.start()
        ledger = workload.run_preopened()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    pg.wait_idle()
    return Capture(cap.out, stats, pg.pgss(), {"ledger": ledger})


@pytest.fixture(scope="module")
def scripted(pg, workload):
    w = workload
    pg.pgss_reset()
    cap = ph.Tcpdump(OUT / "scripted.pcap", PORT)
    try:
        cap.start()
        ledger = w.run()
    finally:
        stats = cap.stop()
    ph.check_dropped(stats)
    pg.wait_idle()
    return Capture(cap.out, stats, pg.pgss(exclude_users=(ph.SSL_USER,)),
                   {"ledger": ledger, "tls_pgss": pg.pgss_user(ph.SSL_USER)})


def groups(pcap) -> dict:
    return ph.dbtap_pg_groups(digest(pcap))


def query_group(pcap, fingerprint: str) -> dict:
    g = groups(pcap).get(("query", fingerprint))
    assert g is not None, f"no dbtap `query` group {fingerprint!r}; groups: {sorted(groups(pcap))}"
    return g


# -------------------------------------------------------------------------------------------------
# pgbench

@pytest.mark.parametrize("mode", MODES)
def test_pgbench_statements_equal_pgss(pgbench_capture, mode):
    cap = pgbench_capture(mode)
    want = {q: e["calls"] for q, e in cap.pgss.items()}
    run = cap.extra["pgbench"]
    if mode == "prepared":
        # PostgreSQL 15's pg_stat_statements counts a prepared utility statement (BEGIN, END)
        # once per connection, when it is parsed, while the wire carries one Bind/Execute per
        # transaction: hold those two to pgbench's own transaction count instead.
        assert want.get("BEGIN") == want.get("END") == PGBENCH_CLIENTS, \
            f"pg_stat_statements no longer counts BEGIN/END once per connection: {want}"
        want["BEGIN"] = want["END"] = run["transactions"]
    got = ph.dbtap_queries(digest(cap.pcap))
    assert got == want, _dict_diff(got, want, "dbtap", "pg_stat_statements")


@pytest.mark.parametrize("mode", MODES)
def test_pgbench_rows_equal_pgss(pgbench_capture, mode):
    """Rows per statement: SELECT rows sent, DML rows changed, == pg_stat_statements `rows`."""
    cap = pgbench_capture(mode)
    bad = []
    for q, e in cap.pgss.items():
        g = query_group(cap.pcap, q)
        kw = q.split(None, 1)[0].upper()
        if kw in ("INSERT", "UPDATE", "DELETE"):
            got = (g["rows"], g["rows_affected"])
            want = (0, e["rows"])
        elif kw == "SELECT":
            got = (g["rows"], g["rows_affected"])
            want = (e["rows"], 0)
        else:
            continue
        if got != want:
            bad.append(f"{q[:60]}: dbtap (rows, rows_affected) {got} != {want}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("mode", MODES)
def test_pgbench_transactions_and_errors(pgbench_capture, mode):
    cap = pgbench_capture(mode)
    run = cap.extra["pgbench"]
    assert run["transactions"] == PGBENCH_CLIENTS * PGBENCH_TX and run["failed"] == 0, run
    d = digest(cap.pcap)
    assert query_group(cap.pcap, "END")["count"] == run["transactions"]
    assert d["totals"]["errors"] == 0
    # every pgbench client ends with a Terminate, the scale-detecting connection too
    term = groups(cap.pcap).get(("terminate", "terminate"), {}).get("count")
    assert term == PGBENCH_CLIENTS + 1


@pytest.mark.parametrize("mode", MODES)
def test_pgbench_capture_health(pgbench_capture, mode):
    cap = pgbench_capture(mode)
    c = digest(cap.pcap)["capture"]
    assert c["packets"] == cap.tcpdump["captured"]
    bad = {k: c[k] for k in ("gaps", "gap_bytes", "truncated_packets", "responses_without_request",
                             "unparsed_bytes", "malformed_messages", "unanswered", "resyncs",
                             "encrypted_connections", "inflight_overflow") if c[k] != 0}
    assert not bad, f"a clean loopback capture (tcpdump dropped 0) reports {bad}"
    assert c["complete"] is True


@pytest.mark.parametrize("mode", MODES)
def test_pgbench_time_at_least_pgss_exec_time(pgbench_capture, mode):
    """Per statement, dbtap's time (the round trip the client saw) >= pg_stat_statements'
    total_exec_time (the server's execution alone), both in ms: pg_stat_statements is the truth,
    and a statement's execution is timed once, not lost to its Parse."""
    cap = pgbench_capture(mode)
    bad = []
    for q, ms in cap.extra["exec_ms"].items():
        got = query_group(cap.pcap, q)["latency_us"]["sum"] / 1e3
        if got < ms:
            bad.append(f"{q[:60]}: dbtap {got:.3f} ms < pg_stat_statements {ms:.3f} ms")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("mode", MODES)
def test_pgbench_concurrency_at_most_the_clients(pgbench_capture, mode):
    """Each pgbench connection has one request in flight at a time, so the time summed over
    every event is at most clients x the wall time of the workload: the digest's first request
    start (`first_seen`) to its last event end (`last_seen`); pgbench's scale check runs on its
    own connection before the clients start. The capture's `time_span_s` also holds tcpdump's
    probes around the run, so the events' window is the tighter bound. A Parse travelling with
    its execution must not be timed a second time (before, -M extended gave about 3x here)."""
    cap = pgbench_capture(mode)
    t = digest(cap.pcap)["totals"]
    busy_s = t["latency_us"]["sum"] / 1e6
    wall_s = _epoch_s(t["last_seen"]) - _epoch_s(t["first_seen"])
    assert wall_s > 0 and busy_s > 0, t
    assert busy_s <= PGBENCH_CLIENTS * wall_s, \
        (f"{busy_s:.3f} s of time in {wall_s:.3f} s of workload: concurrency "
         f"{busy_s / wall_s:.2f} > {PGBENCH_CLIENTS} clients")
    assert t["concurrency"] <= PGBENCH_CLIENTS


def test_pgbench_extended_parse_is_counted_not_timed(pgbench_capture):
    """-M extended sends Parse/Bind/Describe/Execute/Sync in one flight: the Parse is part of
    the execution. Every execution is prepared, so the `prepare` group counts as many as the
    `query` group; it has no time (pg_stat_statements counts no parse time either)."""
    cap = pgbench_capture("extended")
    prep = {fp: g for (cmd, fp), g in groups(cap.pcap).items() if cmd == "prepare"}
    # Every statement of the tpcb-like script (7) is prepared; pgbench's own scale and
    # partitioning checks are simple queries.
    assert len(prep) == 7 and set(prep) <= set(cap.pgss), sorted(prep)
    for q, p in prep.items():
        assert p["count"] == query_group(cap.pcap, q)["count"] == cap.pgss[q]["calls"], \
            (q, p["count"])
        assert (p["errors"], p["ok"]) == (0, p["count"]), p
        assert (p["latency_us"]["count"], p["latency_us"]["sum"]) == (0, 0), (q, p["latency_us"])
        assert p["ttfb_us"]["count"] == 0 and p["response_time_pct"] == 0, p
    prep = [e for e in events(cap.pcap) if e["command"] == "prepare"]
    assert prep and all(e["timed"] is False and e["latency_us"] is None for e in prep)


def test_pgbench_prepared_parse_keeps_its_time(pgbench_capture):
    """-M prepared prepares each named statement once per connection with its own Sync round
    trip, before the first Bind: that Parse keeps its own event and time."""
    cap = pgbench_capture("prepared")
    prep = [g for (cmd, _), g in groups(cap.pcap).items() if cmd == "prepare"]
    assert prep and all(g["count"] == PGBENCH_CLIENTS for g in prep), prep
    for g in prep:
        assert g["latency_us"]["count"] == g["count"] and g["latency_us"]["sum"] > 0, g
    assert not [e for e in events(cap.pcap) if "timed" in e]


# -------------------------------------------------------------------------------------------------
# scripted workload

def test_scripted_statements_equal_pgss(scripted):
    """Every statement that succeeded, per fingerprint, == pg_stat_statements `calls` (a failed
    statement is not counted by pg_stat_statements; its errors are checked below)."""
    got = {}
    for (cmd, fp), g in groups(scripted.pcap).items():
        if cmd == "query" and g["count"] - g["errors"] > 0:
            got[fp] = g["count"] - g["errors"]
    want = {ph.renumber(q): e["calls"] for q, e in scripted.pgss.items()}
    assert got == want, _dict_diff(got, want, "dbtap", "pg_stat_statements")


def test_scripted_errors_equal_client_exceptions(scripted):
    ledger = scripted.extra["ledger"]
    got = collections.Counter()
    for g in groups(scripted.pcap).values():
        for e in g["errors_by_code"]:
            got[e["state"]] += e["count"]
        assert g["errors_uncoded"] == 0, g["fingerprint"]
    want = ledger["errors"]
    assert want == {"42601": 2, "42P01": 4, "23505": 3}, want  # the workload's own plan
    assert dict(got) == dict(want)
    assert digest(scripted.pcap)["totals"]["errors"] == sum(want.values())


def test_scripted_failed_insert_counts(scripted):
    """The INSERT that failed 3 times (23505) and succeeded 5: both clients' forms in one group."""
    g = query_group(scripted.pcap, "INSERT INTO uniq VALUES ($1)")
    assert (g["count"], g["errors"]) == (scripted.extra["ledger"]["sent"]["uniq_ok"] + 3, 3)


def test_multi_statement_query(scripted):
    """psycopg2 sends "SELECT 1 AS multi; SELECT 2 AS multi; SELECT 3 AS multi" as one Query:
    three statements, as pg_stat_statements counts them."""
    g = query_group(scripted.pcap, "SELECT $1 AS multi")
    assert scripted.pgss["SELECT $1 AS multi"]["calls"] == 3
    assert (g["count"], g["rows"]) == (3, 3)


def test_preopened_connection(preopened):
    """Its first captured bytes are a Query message: dbtap must pick the connection up there
    (on a --port port: by sniffing, not by the default port) and count every query, as
    pg_stat_statements does. (Failed before 5ea2144: the first Query, 'Q' and a length of 0x18,
    was taken for a MySQL COM_STMT_SEND_LONG_DATA header.)"""
    ledger = preopened.extra["ledger"]
    k = ledger["sent"]["preopen"]
    assert preopened.pgss == {"SELECT $1 AS preopen": {"calls": k, "rows": k}}
    port = ledger["ports"]["preopen"]
    evs = events(preopened.pcap)
    assert {_port(e["client"]) for e in evs} <= {port}
    cmds = collections.Counter((e["protocol"], e["command"], e["fingerprint"]) for e in evs)
    c = digest(preopened.pcap)["capture"]
    want = {("postgres", "query", "SELECT $1 AS preopen"): k, ("postgres", "terminate", "terminate"): 1}
    assert cmds == want, cmds
    assert all(e["outcome"] == "ok" and e["rows"] == 1 for e in evs if e["command"] == "query")
    bad = {k: c[k] for k in ("gaps", "responses_without_request", "unparsed_bytes",
                             "malformed_messages", "unanswered", "resyncs") if c[k] != 0}
    assert not bad, bad


def test_large_result_rows(scripted):
    g = query_group(scripted.pcap, "SELECT g, md5(g::text) FROM generate_series($1, $2) g")
    n = scripted.extra["ledger"]["rows"]["big"]
    assert n == ph.BIG_ROWS
    assert (g["count"], g["rows"]) == (1, n)
    assert g["bytes_out"] > n * 32  # every row carries a 32-character md5


def test_null_columns_rows(scripted):
    rows = scripted.extra["ledger"]["rows"]
    # NULL is a constant to pg_stat_statements and dbtap alike: $3, $4
    g2 = query_group(scripted.pcap, "SELECT CASE WHEN g % $1 = $2 THEN $3 ELSE g END AS a, "
                                     "$4::text AS b, g FROM generate_series($5, $6) g")
    assert (g2["count"], g2["rows"], g2["errors"]) == (1, rows["nulls_psycopg2"], 0)
    g3 = query_group(scripted.pcap, "SELECT a, $1::int AS b FROM (SELECT CASE WHEN g % $2 = $3 "
                                     "THEN $4 ELSE g END AS a FROM generate_series($5, $6) g) s")
    assert (g3["count"], g3["rows"], g3["errors"]) == (1, rows["nulls_psycopg3"], 0)


def test_copy_from_stdin(scripted):
    rows = scripted.extra["ledger"]["rows"]
    for fp, key in (("COPY copy_in2 (id, v) FROM STDIN", "copy_in2"),
                    ("COPY copy_in3 (id, v) FROM STDIN", "copy_in3")):
        g = query_group(scripted.pcap, fp)
        assert rows[key] == rows[key + "_client"] == ph.COPY_IN_ROWS
        assert scripted.pgss[fp] == {"calls": 1, "rows": rows[key]}
        assert (g["count"], g["errors"], g["rows_affected"]) == (1, 0, rows[key]), fp
        # the data travels client to server: at least one byte per row line
        assert g["bytes_in"] > rows[key] * len("0\trow 0\n"), fp


def test_copy_to_stdout(scripted):
    rows = scripted.extra["ledger"]["rows"]
    for fp, key in (("COPY (SELECT id, v FROM copy_src) TO STDOUT", "copy_out2"),
                    ("COPY copy_src TO STDOUT", "copy_out3")):
        g = query_group(scripted.pcap, fp)
        assert rows[key] == ph.COPY_OUT_ROWS
        assert scripted.pgss[fp] == {"calls": 1, "rows": rows[key]}
        assert (g["count"], g["errors"], g["rows"]) == (1, 0, rows[key]), fp
    g = query_group(scripted.pcap, "COPY (SELECT id, v FROM copy_src) TO STDOUT")
    assert g["bytes_out"] >= rows["copy_out2_bytes"]


def test_pipeline_mode(scripted):
    sent = scripted.extra["ledger"]["sent"]
    ins = query_group(scripted.pcap, "INSERT INTO pipe (id, v) VALUES ($1, $2)")
    sel = query_group(scripted.pcap, "SELECT count(*) FROM pipe WHERE id < $1")
    assert scripted.pgss["INSERT INTO pipe (id, v) VALUES ($1, $2)"]["calls"] == sent["pipe_insert"]
    assert scripted.pgss["SELECT count(*) FROM pipe WHERE id < $1"]["calls"] == sent["pipe_select"]
    assert (ins["count"], ins["errors"], ins["rows_affected"]) == (sent["pipe_insert"], 0, sent["pipe_insert"])
    assert (sel["count"], sel["errors"], sel["rows"]) == (sent["pipe_select"], 0, sent["pipe_select"])
    assert ins["no_response"] == sel["no_response"] == 0


def test_pipeline_several_syncs_in_flight(scripted):
    """libpq pipeline mode: every batch and its Sync sent before any result is read."""
    sent = scripted.extra["ledger"]["sent"]
    ins = query_group(scripted.pcap, "INSERT INTO pipe2 (id, v) VALUES ($1, $2)")
    sel = query_group(scripted.pcap, "SELECT count(*) FROM pipe2 WHERE id < $1")
    assert scripted.pgss["INSERT INTO pipe2 (id, v) VALUES ($1, $2)"]["calls"] == sent["pq_insert"]
    assert scripted.pgss["SELECT count(*) FROM pipe2 WHERE id < $1"]["calls"] == sent["pq_select"]
    assert (ins["count"], ins["errors"], ins["rows_affected"]) == (sent["pq_insert"], 0, sent["pq_insert"])
    assert (sel["count"], sel["errors"], sel["rows"]) == (sent["pq_select"], 0, sent["pq_select"])
    assert ins["no_response"] == sel["no_response"] == 0


def test_named_prepared_statement(scripted):
    n = scripted.extra["ledger"]["sent"]["prepared"]
    fp = "SELECT v FROM items WHERE id = $1"
    g = query_group(scripted.pcap, fp)
    assert scripted.pgss[fp]["calls"] == n
    assert (g["count"], g["rows"], g["errors"]) == (n, n, 0)
    # prepare=True: one Parse of a named statement, then Bind/Execute only
    assert groups(scripted.pcap)[("prepare", fp)]["count"] == 1


def test_tls_connection_is_encrypted_and_silent(scripted):
    ledger = scripted.extra["ledger"]
    assert scripted.extra["tls_pgss"] == {"SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()": 1}
    c = digest(scripted.pcap)["capture"]
    assert c["encrypted_connections"] == 1
    port = ledger["ports"]["tls"]
    assert [e for e in events(scripted.pcap) if _port(e["client"]) == port] == []


def test_no_events_from_unknown_connections(scripted):
    ports = set(scripted.extra["ledger"]["ports"].values())
    stray = collections.Counter(e["command"] for e in events(scripted.pcap)
                                if _port(e["client"]) not in ports)
    assert not stray, stray


def test_scripted_capture_health(scripted):
    c = digest(scripted.pcap)["capture"]
    assert c["packets"] == scripted.tcpdump["captured"]
    bad = {k: c[k] for k in ("gaps", "gap_bytes", "truncated_packets", "responses_without_request",
                             "unparsed_bytes", "malformed_messages", "unanswered", "resyncs",
                             "inflight_overflow") if c[k] != 0}
    assert not bad, bad


# -------------------------------------------------------------------------------------------------

def _epoch_s(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _dict_diff(got: dict, want: dict, a: str, b: str) -> str:
    lines = []
    for k in sorted(set(got) | set(want)):
        if got.get(k) != want.get(k):
            lines.append(f"  {k[:100]!r}: {a} {got.get(k)} != {b} {want.get(k)}")
    return "\n" + "\n".join(lines)


def test_suspended_portal_is_one_execution(scripted):
    """asyncpg's cursor fetches CURSOR_ROWS rows CURSOR_PREFETCH at a time: Execute with a row
    limit, PortalSuspended, Execute again. pg_stat_statements counts one call; dbtap files the
    first Execute under the statement's `query` group and the further ones under `fetch`, whose
    rows add up to what the client fetched. (PostgreSQL 15's pg_stat_statements keeps only the
    last Execute's rows for such a portal, 0 here; 16 counts them all, es_total_processed.)"""
    found = [e for q, e in scripted.pgss.items() if "cursor_marker" in q]
    assert len(found) == 1, f"pg_stat_statements' cursor statements: {found}"
    pgss = found[0]
    assert pgss["calls"] == 1, pgss
    gs = {k: g for k, g in groups(scripted.pcap).items() if "cursor_marker" in k[1]}
    q = [g for (cmd, _), g in gs.items() if cmd == "query"]
    f = [g for (cmd, _), g in gs.items() if cmd == "fetch"]
    assert len(q) == 1 and len(f) == 1, sorted(gs)
    q, f = q[0], f[0]
    assert q["count"] == pgss["calls"], q
    assert q["rows"] + f["rows"] == scripted.extra["ledger"]["rows"]["cursor"] == ph.CURSOR_ROWS
    # One Execute per CURSOR_PREFETCH rows, and the last one may come back empty.
    batches = ph.CURSOR_ROWS // ph.CURSOR_PREFETCH
    assert q["rows"] == ph.CURSOR_PREFETCH, q
    assert f["count"] in (batches - 1, batches), f
    assert f["errors"] == 0 and q["errors"] == 0


@pytest.mark.parametrize("extra", [
    (),
    ("--format", "json"),
    # Groups keyed by dimensions are named after their first event: here a simple Query and an
    # extended Execute share `command` groups, so the name must come from the worker that saw
    # the group first (it did not, before stop 23's fix).
    ("--group-by", "server,command", "--format", "json"),
    ("--group-by", "user,database,client", "--format", "json"),
])
def test_threads_give_one_threads_report(scripted, extra):
    """`digest --threads 2` and `3` on the real scripted capture print exactly what one thread
    prints."""
    def run(threads: int) -> str:
        r = subprocess.run([str(harness.DBTAP), "digest", "-q", "--port", str(PORT), "--limit",
                            "0", "--threads", str(threads), *extra, str(scripted.pcap)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert "note: --threads" not in r.stderr, r.stderr
        return r.stdout
    one = run(1)
    assert one.strip()
    for n in (2, 3):
        assert run(n) == one, f"--threads {n} {extra}"
