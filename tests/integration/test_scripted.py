"""dbtap on the scripted workload (workload.py): each connection's requests as dbtap reports them
must be exactly what the client sent and got, and the totals must match the server's counters.
A multi-statement query is one event per statement the server ran: the ledger's requests are
compared with dbtap's events through `Conn.expected()`, which expands them into those statements
as the client saw them (one per result set, and the one that failed)."""

import collections

import pytest

from harness import STATEMENT_CLASSES, USER, com_class, errors_by_code


def port_of(endpoint):
    return int(str(endpoint).rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def ev_by_port(scripted_capture, dbtap_events):
    out = collections.defaultdict(list)
    for e in dbtap_events(scripted_capture.pcap):
        out[port_of(e["client"])].append(e)
    for v in out.values():
        v.sort(key=lambda e: e["start_ns"])
    return out


@pytest.fixture(scope="module")
def ledger(scripted_capture):
    return scripted_capture.extra["ledger"]


def test_no_events_from_unknown_connections(ev_by_port, ledger):
    known = {p for p, c in ledger.conns.items() if c.visible}
    stray = {p: collections.Counter(e["command"] for e in v) for p, v in ev_by_port.items() if p not in known}
    assert not stray, f"events on client ports no client of the workload used: {stray}"


def test_per_connection_command_counts(ev_by_port, ledger):
    diffs = []
    for port, conn in ledger.conns.items():
        if not conn.visible:
            continue
        got = collections.Counter(e["command"] for e in ev_by_port.get(port, []))
        want = conn.event_counts()
        if got != want:
            diffs.append(f"{conn.name} (port {port}): dbtap {dict(got)} != client {dict(want)}")
    assert not diffs, "\n".join(diffs)


def _mismatch(e, r):
    """What differs between one dbtap event and the client's record of that request ('' if none)."""
    out = []
    if e.get("command") != r.command:
        return f"command {e.get('command')!r} != {r.command!r}"
    if e.get("outcome") != r.outcome:
        out.append(f"outcome {e.get('outcome')!r} != {r.outcome!r}")
    if r.marker and r.command in ("query", "execute", "prepare") and \
            r.marker.lower() not in (e.get("fingerprint") or "").lower():
        out.append(f"fingerprint {e.get('fingerprint')!r} lacks {r.marker!r}")
    if r.command in ("query", "execute", "fetch") and (e.get("rows") or 0) != r.rows:
        out.append(f"rows {e.get('rows')} != {r.rows}")
    if r.command in ("query", "execute") and (e.get("rows_affected") or 0) != r.affected:
        out.append(f"rows_affected {e.get('rows_affected')} != {r.affected}")
    if r.warnings is not None and e.get("warnings") != r.warnings:
        out.append(f"warnings {e.get('warnings')} != {r.warnings}")
    if r.outcome == "error":
        err = e.get("error") or {}
        if err.get("code") != r.code:
            out.append(f"error.code {err.get('code')} != {r.code}")
        if r.message is not None and err.get("message") != r.message:
            out.append(f"error.message {err.get('message')!r} != {r.message!r}")
    if r.user is not None and e.get("user") != r.user:
        out.append(f"user {e.get('user')!r} != {r.user!r}")
    if r.db is not None and e.get("database") != r.db:
        out.append(f"database {e.get('database')!r} != {r.db!r}")
    return "; ".join(out)


@pytest.mark.parametrize("name", ["pre_existing", "plain", "errors", "big", "multi", "infile",
                                  "sql_prepare", "binary", "compressed", "admin", "change_user",
                                  "bad_login_0", "bad_login_2"])
def test_connection_request_by_request(name, ev_by_port, ledger):
    """The connection's requests in order: command, outcome, rows, affected rows, error code and
    message, the marker identifier in the fingerprint, user and database where the client knows."""
    conn = ledger.by_name(name)
    ev = ev_by_port.get(conn.port, [])
    want = conn.expected()
    problems = []
    for i, r in enumerate(want):
        if i >= len(ev):
            problems.append(f"#{i} {r.command} {r.marker}: missing (dbtap has {len(ev)} events, client expects {len(want)})")
            break
        m = _mismatch(ev[i], r)
        if m:
            problems.append(f"#{i} {r.command} {r.marker}: {m}")
    if len(ev) > len(want):
        problems.append(f"{len(ev) - len(want)} extra events, first: {ev[len(want)]}")
    assert not problems, f"{name} (client port {conn.port}):\n" + "\n".join(problems[:15])


def test_pre_existing_connection_counted(ev_by_port, ledger):
    """Opened before tcpdump started: no handshake in the capture, all K queries still counted."""
    conn = ledger.by_name("pre_existing")
    got = sum(1 for e in ev_by_port.get(conn.port, []) if e["command"] == "query")
    assert got == conn.counts()["query"] == 25


def test_user_from_handshake(ev_by_port, ledger):
    bad = []
    for port, conn in ledger.conns.items():
        if not conn.visible or conn.user is None or conn.name == "change_user":
            continue
        for e in ev_by_port.get(port, []):
            if e["command"] in ("query", "execute") and e.get("user") != USER:
                bad.append((conn.name, e.get("user"), e.get("fingerprint")))
    assert not bad, f"{len(bad)} events without user={USER}: {bad[:5]}"


def test_errors_by_code(scripted_capture, dbtap_digest, ledger):
    """errors_by_code over all digest groups == the exceptions the clients caught, by code."""
    d = dbtap_digest(scripted_capture.pcap)
    got = collections.Counter()
    for g in d["queries"]:
        got.update(errors_by_code(g))
    want = ledger.errors_by_code()
    assert dict(want) == {1064: 5, 1146: 5, 1062: 6, 1045: 3}, "the workload itself changed"
    assert got == want, f"dbtap errors_by_code {dict(got)} != client {dict(want)}"
    assert d["totals"]["errors"] == sum(want.values())
    assert sum(g.get("errors", 0) for g in d["queries"]) == sum(want.values())


def test_big_requests_and_results(ev_by_port, ledger):
    """2 MB and 17 MB (two MySQL packets) requests, a 5 MB result, a 20 MB row (two packets)."""
    conn = ledger.by_name("big")
    ev = ev_by_port.get(conn.port, [])
    assert [e["command"] for e in ev] == [r.command for r in conn.reqs], [e.get("fingerprint") for e in ev]
    for e, r, size in ((ev[0], conn.reqs[0], 2 * 1024 * 1024), (ev[1], conn.reqs[1], 17 * 1024 * 1024)):
        text_len = size + len("SELECT LENGTH('') AS ") + len(r.marker)
        packets = text_len // 0xFFFFFF + 1
        assert text_len <= e["bytes_in"] <= text_len + 1 + 4 * (packets + 1), \
            f"{r.marker}: bytes_in {e['bytes_in']} for a {text_len}-byte statement"
        assert e["rows"] == 1 and e["outcome"] == "ok", e
        assert e["fingerprint"] == f"select length(?) as {r.marker}", \
            f"{r.marker} ({text_len} bytes of SQL): fingerprint {e['fingerprint']!r}"
    assert ev[2]["rows"] == 5000 and ev[2]["bytes_out"] >= 5000 * 1000, ev[2]
    assert ev[3]["rows"] == 1 and ev[3]["bytes_out"] >= 20 * 1024 * 1024, ev[3]
    assert ev[4]["rows"] == 1 and ev[4]["outcome"] == "ok", ev[4]


def test_tls_connection_is_encrypted_and_invisible(scripted_capture, dbtap_digest, ev_by_port, ledger):
    d = dbtap_digest(scripted_capture.pcap)
    assert scripted_capture.counters["Ssl_accepts"] == 1
    assert d["capture"]["encrypted_connections"] == 1
    assert ev_by_port.get(ledger.by_name("tls").port, []) == []


def test_server_counters(scripted_capture, dbtap_events):
    """Com_stmt_* / Com_change_db / Com_admin_commands / Com_load deltas == dbtap's events, plus
    the SQL-level PREPARE/EXECUTE/DEALLOCATE text statements (which MariaDB also counts there)."""
    d = scripted_capture.counters
    L = scripted_capture.extra["ledger"]
    ev = dbtap_events(scripted_capture.pcap)
    n = collections.Counter(e["command"] for e in ev)
    fp = collections.Counter((e["command"], (e.get("fingerprint") or "").lower().split(" ", 1)[0]) for e in ev)
    checks = {
        "Com_stmt_prepare": (n["prepare"] + fp[("query", "prepare")], d["Com_stmt_prepare"]),
        "Com_stmt_execute": (n["execute"] + fp[("query", "execute")], d["Com_stmt_execute"]),
        "Com_stmt_close": (n["close"] + fp[("query", "deallocate")], d["Com_stmt_close"]),
        "Com_stmt_reset": (n["reset"], d["Com_stmt_reset"]),
        "Com_stmt_fetch": (n["fetch"], d["Com_stmt_fetch"]),
        "Com_stmt_send_long_data": (n["send_long_data"], d["Com_stmt_send_long_data"]),
        "Com_change_db": (n["init_db"], d["Com_change_db"]),
        "Com_admin_commands": (n["ping"] + n["change_user"], d["Com_admin_commands"]),
        "Com_load": (fp[("query", "load")], d["Com_load"]),
        "Com_prepare_sql": (fp[("query", "prepare")], d["Com_prepare_sql"]),
        "Com_execute_sql": (fp[("query", "execute")], d["Com_execute_sql"]),
    }
    bad = {k: f"dbtap {a} != server {b}" for k, (a, b) in checks.items() if a != b}
    assert not bad, bad
    assert L.sql_execute == d["Com_execute_sql"]


def test_rows_equal_rows_sent(scripted_capture, dbtap_events, ledger):
    """Rows over dbtap's events == server Rows_sent delta, less what only the server could see
    (the TLS connection's rows) and what it does not count (rows fetched through a cursor)."""
    tls_rows = sum(r.rows for r in ledger.by_name("tls").reqs)
    want = scripted_capture.counters["Rows_sent"] - tls_rows
    got = sum(e.get("rows") or 0 for e in dbtap_events(scripted_capture.pcap) if e["command"] != "fetch")
    assert got == want, f"rows: dbtap {got} != server Rows_sent {want} (TLS rows {tls_rows} removed)"


def test_prepared_executions_carry_the_statement_sql(ev_by_port, ledger):
    conn = ledger.by_name("binary")
    ev = ev_by_port.get(conn.port, [])
    prepared = {e.get("statement_id"): e.get("fingerprint") for e in ev
                if e["command"] == "prepare" and e.get("outcome") == "ok"}
    assert len(prepared) == 3, prepared
    for e in ev:
        if e["command"] == "execute":
            assert e.get("statement_id") in prepared, e
            assert e.get("fingerprint") == prepared[e["statement_id"]], e


def test_digest_totals_equal_events(scripted_capture, dbtap_events, dbtap_digest):
    ev = dbtap_events(scripted_capture.pcap)
    d = dbtap_digest(scripted_capture.pcap)
    assert d["totals"]["queries"] == len(ev)
    assert sum(g["count"] for g in d["queries"]) == len(ev)
    assert len(ev) == sum(len(c.expected()) for c in scripted_capture.extra["ledger"].conns.values() if c.visible)


def test_multi_statement_queries_are_one_event_per_statement(ev_by_port, ledger):
    """Each multi-statement query: as many events as statements the server ran (the client saw
    one result set each, and the error of the one that failed), none for those after it."""
    conn = ledger.by_name("multi")
    multi = [r for r in conn.reqs if r.statements is not None]
    assert [len(r.statements) for r in multi] == [4, 4, 4, 2, 2, 2], "the workload itself changed"
    ev = ev_by_port.get(conn.port, [])
    fps = [e.get("fingerprint") or "" for e in ev]
    assert sum(" as multi_marker" in f for f in fps) == 3, fps
    assert sum(f.startswith("insert into multi_t") for f in fps) == 3, fps
    assert sum(f.startswith("update multi_t") for f in fps) == 3, fps
    failed = [e for e in ev if "no_such_multi_marker" in (e.get("fingerprint") or "")]
    assert len(failed) == 1 and failed[0]["outcome"] == "error" and failed[0]["error"]["code"] == 1146, failed
    assert not [f for f in fps if "multi_unrun_marker" in f], "a statement after the failed one was reported"


def test_statement_counts_equal_com_counters(scripted_capture, dbtap_events, ledger):
    """Per statement kind, dbtap's query and execute events == the server's Com_<kind> delta
    (Com_select, Com_insert, ...): each statement of a multi-statement query counted, the one that
    failed after parsing included, those after it not (the server did not run them). Less what dbtap
    cannot see (the TLS connection's statements, by the client's record); plus what a text hides
    (`EXECUTE sqlps` runs the SELECT that `PREPARE sqlps` prepared, counted in Com_select)."""
    d = scripted_capture.counters
    got = collections.Counter()
    sql_execute = 0
    for e in dbtap_events(scripted_capture.pcap):
        if e["command"] not in ("query", "execute"):
            continue
        fp = e.get("fingerprint") or ""
        k = com_class(fp)
        if k:
            got[k] += 1
        elif e["command"] == "query" and fp.lower().startswith("execute sqlps"):
            sql_execute += 1
    assert sql_execute == ledger.sql_execute
    got["Com_select"] += sql_execute
    hidden = collections.Counter(r.klass for r in ledger.by_name("tls").expected() if r.klass)
    want = {k: d[k] - hidden[k] for k in STATEMENT_CLASSES.values()}
    assert {k: got[k] for k in want} == want, f"dbtap {dict(got)} != server {want} (TLS {dict(hidden)} removed)"
