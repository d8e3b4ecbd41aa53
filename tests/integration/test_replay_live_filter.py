"""`dbtap replay --live` with filters: `--read-only`, `--where`, `--since`/`--until` (wall-clock
times) on the live feed, with the same semantics as on capture files. Real servers and real
clients on lo (redis-py; pgbench tpcb, extended protocol); the mirror runs
while the workload does.

Truth: the target's own counters (INFO commandstats, pg_stat_statements calls) beside the
source's over the same window; dbtap's report is only checked against those.

Ports 38660-38669; server directories under tests/out/replay_live_filter.
"""

from __future__ import annotations

import datetime
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402
import replay_harness as rph  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "replay_live_filter"
R_A, R_B = 38660, 38661
PG_A, PG_B = 38662, 38663
REDIS_WRITES = {"set", "incr", "incrby", "lpush", "rpush", "del", "hset", "sadd"}


def need_capture() -> None:
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
    except (PermissionError, OSError) as e:
        pytest.skip(f"no packet capture here: {e}")


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


@pytest.fixture(scope="module")
def redises():
    need_capture()
    a = rh.RedisServer(R_A, OUT / "lf-ra")
    b = rh.RedisServer(R_B, OUT / "lf-rb")
    with rph.started_pair(a, b) as p:
        yield p


def counts(per_cmd: dict) -> dict:
    return {k: v["requests"] for k, v in per_cmd.items() if v["requests"]}


def b_counts(b, before_b, want: dict, timeout: float = 20.0) -> dict:
    """B's per-command requests since `before_b`, once they equal `want` (or the timeout)."""
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        if polls:  # the earlier polls' INFO are in B's counts
            b.socket_calls["info"] = polls
        polls += 1
        got = counts(rh.wire_requests(rh.stats_delta(before_b, b.snapshot()), b.socket_calls))
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def mirrored(a, b, work, *args):
    """Runs `work` on A under `replay --live ARGS` onto B; returns (A's per-command requests,
    B's once they equal `expect(A's)`, the report, work's result)."""
    for s in (a, b):
        s.admin().flushall()
        s.reset_stats()
        s.socket_calls.clear()
    before_a, before_b = a.snapshot(), b.snapshot()
    m = rph.Mirror(R_A, R_B, *args)
    try:
        extra = work()
        want = counts(rh.wire_requests(rh.stats_delta(before_a, a.snapshot()), a.socket_calls))
        return want, before_b, m, extra
    except BaseException:
        m.stop()
        raise


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


def workload(a):
    """The scripted session, and a second redis-py session sending pipelines of 16 (writes
    and reads mixed in one batch: the filter splits them) and single commands. Closed loop
    and small: the mirror runs beside it on a shared machine, where a flood could make the
    capture miss packets (not what these tests are about)."""
    scripted(a)
    c = a.client(db=0)
    for i in range(60):
        p = c.pipeline(transaction=False)
        for j in range(4):
            p.set(f"p{j}", i)
            p.get(f"p{j}")
            p.lpush("l", i)
            p.lrange("l", 0, 3)
        p.execute()
        c.incr("n")
        c.get("n")
    c.close()


def test_live_read_only_leaves_writes_at_zero(redises):
    """redis-py sessions (pipelines of 16, single commands, SELECT and MULTI/EXEC) on A under `--live --read-only`: B gets exactly A's reads, SELECTs and MULTI/EXECs, no
    write; the report counts A's writes as read_only and sends the rest."""
    a, b = redises
    want, before_b, m, _ = mirrored(a, b, lambda: workload(a), "--read-only")
    try:
        reads = {k: v for k, v in want.items() if k not in REDIS_WRITES}
        got = b_counts(b, before_b, reads)
        rep = m.report()
    finally:
        m.stop()
    assert want.get("set") == 280 and want.get("get") == 344, want
    diff = {k: (got.get(k), v) for k, v in reads.items() if got.get(k) != v}
    if diff:
        (OUT / "lf-debug.json").write_text(json.dumps([diff, rep["fidelity"], "".join(m.err)]))
    assert got == reads, (diff, rep["fidelity"], "".join(m.err)[-2000:])
    assert got["multi"] == 4 and got["select"] == want["select"], got
    f = rep["fidelity"]
    n_writes = sum(v for k, v in want.items() if k in REDIS_WRITES)
    assert f["skipped_requests"] == {"read_only": n_writes}, f
    assert f["requests_sent"] == sum(reads.values()), f
    assert "read-only" in f["filters"], f
    cap = sum(g["capture"]["count"] for g in rep["groups"].values())
    tgt = sum(g["target"]["count"] for g in rep["groups"].values())
    assert cap == tgt == f["requests_sent"], (cap, tgt, f)


def test_live_where_command_keeps_session_state(redises):
    """`--live --where command=get`: B gets A's GETs, and the redis-py session's SELECT and
    MULTI/EXEC around its GETs (the pipelines keep only their GETs); no write, no LRANGE."""
    a, b = redises
    want, before_b, m, _ = mirrored(a, b, lambda: workload(a), "--where", "command=get")
    try:
        expect = {"get": want["get"], "select": want["select"], "multi": want["multi"],
                  "exec": want["exec"]}
        got = b_counts(b, before_b, expect)
        rep = m.report()
    finally:
        m.stop()
    assert got == expect, (got, want, rep["fidelity"])
    f = rep["fidelity"]
    left_out = sum(want.values()) - sum(expect.values())
    assert f["skipped_requests"] == {"where": left_out}, (f, want)
    for g in rep["groups"].values():
        assert g["target"]["count"] == g["capture"]["count"], g
        assert g["fingerprint"] == "GET", g


def test_live_since_until_wall_clock(redises):
    """`--live --since T1 --until T2` (RFC 3339 wall-clock times): of a session's SELECT, 5
    GETs, 7 INCRs (between T1 and T2) and 3 GETs, B gets the SELECT (held, sent just before
    the first INCR) and the INCRs, in db 2."""
    a, b = redises
    t1 = time.time() + 2.5
    t2 = t1 + 0.7

    def work():
        c = rh.RawConn(port=R_A)
        c.send("SELECT", "2")
        c.read()
        for _ in range(5):
            c.send("GET", "x")
            c.read()
        time.sleep(max(0.0, t1 + 0.05 - time.time()))
        for _ in range(7):
            c.send("INCR", "x")
            c.read()
        time.sleep(max(0.0, t2 + 0.05 - time.time()))
        for _ in range(3):
            c.send("GET", "x")
            c.read()
        c.close()

    want, before_b, m, _ = mirrored(a, b, work, "--since", rfc3339(t1), "--until", rfc3339(t2))
    try:
        got = b_counts(b, before_b, {"select": 1, "incr": 7})
        # B has all it should get before the mirror saw the last GETs (left out): they are
        # only counted once seen; the mirror stops reading at SIGTERM.
        time.sleep(1.0)
        rep = m.report()
    finally:
        m.stop()
    assert want == {"select": 1, "get": 8, "incr": 7}, want
    assert got == {"select": 1, "incr": 7}, (got, rep["fidelity"])
    assert b.admin().execute_command("SELECT", "2") and int(b.admin().get("x")) == 7
    b.admin().execute_command("SELECT", "0")
    f = rep["fidelity"]
    assert f["skipped_requests"] == {"time_range": 8}, f
    assert "--since" in f["filters"] and "--until" in f["filters"], f


def test_live_since_from_end_needs_duration():
    """A time before the mirror's end names nothing without --duration: refused, said why."""
    r = subprocess.run([str(harness.DBTAP), "replay", "--live", "-i", "lo", "--port", str(R_A),
                        "--target", f"127.0.0.1:{R_B}", "--since", "-10s"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert r.returncode != 0 and "--duration" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def pgs():
    need_capture()
    import pg_harness as ph
    a = ph.PgServer(PG_A, OUT / "lf-pga")
    b = ph.PgServer(PG_B, OUT / "lf-pgb")
    with rph.started_pair(a, b) as p:
        ph.pgbench_init(a)
        ph.pgbench_init(b)
        yield p


def test_live_read_only_pgbench_tpcb(pgs):
    """pgbench tpcb (-M extended, 2 clients, 150 transactions each) on A under `--live
    --read-only`: B's pg_stat_statements has A's SELECT calls, BEGIN and END (kept around
    them), and no UPDATE or INSERT; the report counts A's writes as read_only."""
    import pg_harness as ph
    a, b = pgs
    a.pgss_reset()
    b.pgss_reset()
    m = rph.Mirror(PG_A, PG_B, "--read-only")
    try:
        run = ph.pgbench_run(a, "extended", 2, transactions=150)
        a.wait_idle()
        want = a.calls()
        deadline = time.monotonic() + 20
        while True:
            got = b.calls()
            sel = {q: n for q, n in want.items() if q.lstrip().upper().startswith("SELECT")}
            if all(got.get(q) == n for q, n in sel.items()) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        rep = m.report()
    finally:
        m.stop()
    writes = [q for q in got if q.lstrip().upper().startswith(("UPDATE", "INSERT"))]
    assert run["transactions"] == 300, run
    assert writes == [], got
    assert sel and all(got.get(q) == n for q, n in sel.items()), (sel, got)
    assert sum(sel.values()) >= 300, sel
    f = rep["fidelity"]
    n_writes = sum(n for q, n in want.items()
                   if q.lstrip().upper().startswith(("UPDATE", "INSERT")))
    # A replay request is a protocol message, as in a capture file's replay: each extended
    # statement is Parse, Bind, Describe, Execute, Sync.
    assert f["skipped_requests"] == {"read_only": 5 * n_writes}, (f, want)
