"""dbtap on a real sysbench oltp_read_write capture (server-side prepared statements), held to the
server's Com_* deltas over the captured window and to sysbench's own counts."""

import collections

from harness import errors_by_code

from conftest import SYSBENCH_THREADS


def by_command(events):
    return collections.Counter(e.get("command") for e in events)


def statement_class(fp):
    words = (fp or "").strip().lower().split(None, 1)
    return words[0] if words else ""


def test_execute_count_equals_com_stmt_execute(sysbench_capture, dbtap_events):
    cap = sysbench_capture["lo"]
    got = by_command(dbtap_events(cap.pcap))["execute"]
    assert got == cap.counters["Com_stmt_execute"], \
        f"dbtap execute events {got} != server Com_stmt_execute delta {cap.counters['Com_stmt_execute']}"


def test_prepare_and_close_counts(sysbench_capture, dbtap_events):
    cap = sysbench_capture["lo"]
    n = by_command(dbtap_events(cap.pcap))
    assert n["prepare"] == cap.counters["Com_stmt_prepare"], \
        f"prepare: dbtap {n['prepare']} != Com_stmt_prepare {cap.counters['Com_stmt_prepare']}"
    assert n["close"] == cap.counters["Com_stmt_close"], \
        f"close: dbtap {n['close']} != Com_stmt_close {cap.counters['Com_stmt_close']}"


def test_no_text_queries_besides_what_server_saw(sysbench_capture, dbtap_events):
    """sysbench in ps-mode=auto sends everything as prepared statements: no COM_QUERY at all, and
    one COM_QUIT per thread. Anything else would be a phantom request."""
    cap = sysbench_capture["lo"]
    n = by_command(dbtap_events(cap.pcap))
    assert n["query"] == 0, f"dbtap saw {n['query']} text queries; sysbench sent none"
    assert n["quit"] == SYSBENCH_THREADS, f"quit: dbtap {n['quit']} != {SYSBENCH_THREADS} threads"
    other = {k: v for k, v in n.items() if k not in ("execute", "prepare", "close", "quit")}
    assert other == {}, f"unexpected commands in a sysbench capture: {other}"


def test_statement_classes_equal_com_counters(sysbench_capture, dbtap_events):
    """SELECT/INSERT/UPDATE/DELETE by fingerprint prefix over query+execute == Com_<kind>."""
    cap = sysbench_capture["lo"]
    n = collections.Counter(statement_class(e.get("fingerprint")) for e in dbtap_events(cap.pcap)
                            if e.get("command") in ("query", "execute"))
    for kind in ("select", "insert", "update", "delete", "begin", "commit"):
        want = cap.counters[f"Com_{kind}"]
        assert n[kind] == want, f"{kind}: dbtap {n[kind]} != server Com_{kind} delta {want} (all: {dict(n)})"


def test_sysbench_own_counts(sysbench_capture, dbtap_events):
    """sysbench's report: read = SELECTs, write = INSERT/UPDATE/DELETE that succeeded,
    other = BEGIN/COMMIT that succeeded; failed statements are its 'ignored errors'."""
    cap = sysbench_capture["lo"]
    sb = cap.extra["sysbench"]
    ex = [e for e in dbtap_events(cap.pcap) if e.get("command") == "execute"]
    ok = collections.Counter(statement_class(e.get("fingerprint")) for e in ex if e.get("outcome") == "ok")
    errors = [e for e in ex if e.get("outcome") == "error"]
    assert len(errors) == sb["ignored_errors"], \
        f"dbtap execute errors {len(errors)} != sysbench ignored errors {sb['ignored_errors']}"
    assert ok["select"] == sb["read"] - sum(1 for e in errors if statement_class(e.get("fingerprint")) == "select")
    assert ok["insert"] + ok["update"] + ok["delete"] == sb["write"], \
        f"successful writes: dbtap {ok['insert'] + ok['update'] + ok['delete']} != sysbench write {sb['write']}"
    assert ok["begin"] + ok["commit"] == sb["other"]
    assert ok["commit"] == sb["transactions"], f"commits: dbtap {ok['commit']} != sysbench transactions {sb['transactions']}"
    assert len(ex) == sb["total"] + sb["ignored_errors"]


def test_errors_and_outcomes(sysbench_capture, dbtap_events, dbtap_digest):
    cap = sysbench_capture["lo"]
    sb = cap.extra["sysbench"]
    ev = dbtap_events(cap.pcap)
    outcomes = collections.Counter(e.get("outcome") for e in ev)
    # Every execute/prepare is answered; close and quit expect no reply.
    assert outcomes["error"] == sb["ignored_errors"]
    assert outcomes["no_reply_expected"] == cap.counters["Com_stmt_close"] + SYSBENCH_THREADS
    assert outcomes["ok"] == len(ev) - outcomes["error"] - outcomes["no_reply_expected"], dict(outcomes)
    for e in ev:
        if e.get("outcome") == "error":
            # sysbench only ignores deadlocks / lock wait timeouts
            assert e["error"]["code"] in (1213, 1205), e
    d = dbtap_digest(cap.pcap)
    assert d["totals"]["errors"] == sb["ignored_errors"]
    by_code = collections.Counter()
    for g in d["queries"]:
        by_code.update(errors_by_code(g))
    assert sum(by_code.values()) == sb["ignored_errors"], dict(by_code)


def test_digest_totals_equal_events(sysbench_capture, dbtap_events, dbtap_digest):
    cap = sysbench_capture["lo"]
    ev = dbtap_events(cap.pcap)
    d = dbtap_digest(cap.pcap)
    assert d["totals"]["queries"] == len(ev), f"digest totals.queries {d['totals']['queries']} != {len(ev)} events"
    assert sum(g["count"] for g in d["queries"]) == d["totals"]["queries"]
    assert all(g["protocol"] == "mysql" for g in d["queries"])
    # Per group: the events of that fingerprint and command, counted one by one.
    n = collections.Counter((e.get("command"), e.get("fingerprint")) for e in ev)
    for g in d["queries"]:
        assert g["count"] == n[(g["command"], g["fingerprint"])], g["fingerprint"]


def test_prepared_executions_group_with_their_sql(sysbench_capture, dbtap_digest):
    """sysbench prepares 11 statements per thread, so the executions fall in exactly 11 groups
    whose counts add up to Com_stmt_execute, and the 10 point selects per transaction land in one."""
    cap = sysbench_capture["lo"]
    d = dbtap_digest(cap.pcap)
    ex = [g for g in d["queries"] if g["command"] == "execute"]
    assert len(ex) == 11, [g["fingerprint"] for g in ex]
    assert sum(g["count"] for g in ex) == cap.counters["Com_stmt_execute"]
    point = [g for g in ex if g["fingerprint"].lower().startswith("select c from sbtest")
             and "between" not in g["fingerprint"].lower()]
    assert len(point) == 1, [g["fingerprint"] for g in ex]


def test_rows_equal_rows_sent(sysbench_capture, dbtap_events, dbtap_digest):
    """Rows returned, summed over events and over digest groups == the server's Rows_sent delta."""
    cap = sysbench_capture["lo"]
    want = cap.counters["Rows_sent"]
    got = sum(e.get("rows") or 0 for e in dbtap_events(cap.pcap))
    assert got == want, f"rows over events: dbtap {got} != server Rows_sent delta {want}"
    got = sum(g.get("rows") or 0 for g in dbtap_digest(cap.pcap)["queries"])
    assert got == want, f"rows over digest groups: dbtap {got} != server Rows_sent delta {want}"


def test_latency_is_sane(sysbench_capture, dbtap_events):
    cap = sysbench_capture["lo"]
    for e in dbtap_events(cap.pcap):
        if e.get("outcome") in ("ok", "error"):
            assert e["latency_us"] is not None and 0 <= e["latency_us"] < 60_000_000, e
            assert e.get("ttfb_us") is None or 0 <= e["ttfb_us"] <= e["latency_us"], e


def test_user_and_database_from_handshake(sysbench_capture, dbtap_events):
    cap = sysbench_capture["lo"]
    bad = [e for e in dbtap_events(cap.pcap)
           if e.get("command") == "execute" and (e.get("user") != "tap" or e.get("database") != "sbtest")]
    assert not bad, f"{len(bad)} events without user=tap database=sbtest, first: {bad[0]}"
