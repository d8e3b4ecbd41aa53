"""`dbtap live --source ebpf|auto` (issue 12) on real servers over their Unix sockets, TLS and plain
TCP, held to the servers' own counters and the clients' own counts (never to dbtap).

Servers (ebpf_harness.py, ports 38200-38299, files under tests/out/ebpf/): MariaDB 10.11 with
a Unix socket and TLS on its TCP port; PostgreSQL 15 with its socket directory and ssl=on;
Redis 7.0 with `unixsocket`, `--port` and `--tls-port`. TLS certificates (a CA and a server
certificate it signed) are made by the harness; TLS clients require TLS and verify the CA.

Every exact comparison follows test_live.py's timing rule: start dbtap, wait for its start
line plus a settle, snapshot the server's counters, run the workload to completion, snapshot
again, wait, stop dbtap with SIGINT and read its final JSON digest. The eBPF source sees the
Unix socket too, so the tests' own statistics queries (SHOW GLOBAL STATUS, the pg_stat_*
queries, INFO) are left out of the comparison, by name, and nothing else is.

Tests skip, saying why, where BPF cannot load (not root, no BTF, dbtap's one-line refusal);
with DBTAP_REQUIRE_CAPTURE set (tests/run.sh sets it) they fail instead, as the packet tests'
Rust side does.

Run one file: `cargo build --release -p dbtap && /usr/bin/python3 -m pytest -q
tests/integration/test_ebpf.py` (DBTAP_BIN=target/debug/dbtap for a debug build).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import ebpf_harness as eh  # noqa: E402
import harness  # noqa: E402
import live_harness as lh  # noqa: E402
import pg_harness as ph  # noqa: E402
import redis_harness as rh  # noqa: E402
from harness import delta  # noqa: E402

REQUIRE = bool(os.environ.get("DBTAP_REQUIRE_CAPTURE"))
STOP_WAIT_S = 1.0
SB_TABLE = 2000
SB_THREADS = 2
SB_SECONDS = 3
PG_CLIENTS = 2
PG_TX = 60


# -------------------------------------------------------------------------------------------------
# BPF availability: skip with the reason, or fail under the test command's required capture

def _caps() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def preflight() -> str | None:
    """Why BPF programs cannot load here, or None."""
    caps = _caps()
    if os.geteuid() != 0 and not (caps >> 39 & 1 and caps >> 38 & 1) and not caps >> 21 & 1:
        return "not root and no CAP_BPF + CAP_PERFMON"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
    return None


def unavailable(why: str):
    if REQUIRE:
        pytest.fail(f"eBPF cannot run here ({why}) and DBTAP_REQUIRE_CAPTURE is set")
    pytest.skip(f"eBPF cannot run here: {why} (set DBTAP_REQUIRE_CAPTURE=1 to fail instead)")


@pytest.fixture(scope="module", autouse=True)
def bpf_available():
    why = preflight()
    if why:
        unavailable(why)


@pytest.fixture(params=["socket", "syscall"])
def kernel_path(request, monkeypatch):
    """The tracer's two kernel paths: the socket tracepoints (Linux 6.3+, this kernel's default)
    and the syscall tracepoints of older kernels (DBTAP_EBPF_SYSCALLS=1 forces them here). The
    start line names the one in use; start() checks it."""
    if request.param == "syscall":
        monkeypatch.setenv("DBTAP_EBPF_SYSCALLS", "1")
    else:
        monkeypatch.delenv("DBTAP_EBPF_SYSCALLS", raising=False)
    return request.param


def start(*args) -> eh.Live:
    """dbtap live started and ready; dbtap's own refusal to load BPF skips (or fails), and so
    does `auto` falling back to packets only."""
    live = eh.Live(*args)
    try:
        live.start()
    except eh.NotReady as e:
        last = (e.stderr.strip().splitlines() or [""])[-1]
        if eh.ebpf_unavailable(last):
            unavailable(last)
        raise
    line = live.source_line()
    if live.source == "auto" and "packets only" in line:
        live.stop()
        unavailable(line)
    want = {"ebpf": "dbtap: source ebpf: ", "auto": "dbtap: source auto: packets for plaintext TCP, eBPF"}
    if not line.startswith(want.get(live.source, "dbtap: source ")):
        live.stop()
        pytest.fail(f"dbtap's source line {line!r}, expected {want.get(live.source)!r}: {live.stderr}")
    if os.environ.get("DBTAP_EBPF_SYSCALLS") == "1" and "; syscall tracepoints)" not in line:
        live.stop()
        pytest.fail(f"DBTAP_EBPF_SYSCALLS=1 but the source line says {line!r}")
    return live


def args(source: str, *extra) -> list[str]:
    return ["--source", source, "--duration", "600s", "--interval", "0", "--format", "json",
            "--limit", "0", *map(str, extra)]


def window(live_args: list, work) -> tuple[eh.Live, object]:
    """dbtap live around work() (which takes its own snapshots); stopped with SIGINT."""
    live = start(*live_args)
    try:
        res = work()
        time.sleep(STOP_WAIT_S)
    finally:
        live.stop()
    return live, res


def capture(d: dict) -> dict:
    return d.get("capture", {})


def no_loss(d: dict) -> None:
    c = capture(d)
    lost = {k: c.get(k) for k in ("stream_gaps", "stream_gap_bytes", "ebpf_lost_records",
                                  "stream_bad_records", "stream_connections_evicted") if c.get(k)}
    assert lost == {}, f"the eBPF source reports losses at this small rate: {lost}"


# -------------------------------------------------------------------------------------------------
# digest readers

def mysql_groups(d: dict) -> list[dict]:
    if d.get("groups_omitted") or d.get("queries_omitted"):
        eh.die("the digest left groups out (run dbtap with --limit 0)")
    return [g for g in d["queries"] if g["protocol"] == "mysql"]


def mysql_own(g: dict) -> bool:
    return (g.get("fingerprint") or "").lower() in eh.OWN_MARIA_FINGERPRINTS


def mysql_commands(d: dict) -> collections.Counter:
    n: collections.Counter = collections.Counter()
    for g in mysql_groups(d):
        if not mysql_own(g):
            n[g["command"]] += g["count"]
    return n


def mysql_classes(d: dict) -> collections.Counter:
    """Executed statements by Com_<kind> class (query + execute groups)."""
    n: collections.Counter = collections.Counter()
    for g in mysql_groups(d):
        if g["command"] in ("query", "execute") and not mysql_own(g):
            k = harness.com_class(g.get("fingerprint"))
            if k:
                n[k] += g["count"]
    return n


def mysql_errors(d: dict) -> dict[int, int]:
    out: collections.Counter = collections.Counter()
    for g in mysql_groups(d):
        out.update(harness.errors_by_code(g))
    return dict(out)


def maria_compare(d: dict, cnt: dict) -> None:
    """dbtap's statement counts == the server's Com_* deltas."""
    n, k = mysql_commands(d), mysql_classes(d)
    got = {"execute": n["execute"], "prepare": n["prepare"], "close": n["close"],
           **{c: k[c] for c in harness.STATEMENT_CLASSES.values()}}
    want = {"execute": cnt["Com_stmt_execute"], "prepare": cnt["Com_stmt_prepare"],
            "close": cnt["Com_stmt_close"],
            **{c: cnt[c] for c in harness.STATEMENT_CLASSES.values()}}
    print(f"\n  dbtap {got}\n  server {want}")
    assert got == want, f"dbtap {got} != server Com_* deltas {want}"


def redis_got(d: dict) -> dict[str, tuple[int, int]]:
    return {k: (v["count"], v["errors"]) for k, v in rh.dbtap_by_command(d).items()
            if k not in eh.OWN_REDIS_COMMANDS}


def pg_own(fp: str) -> bool:
    """The test's own statistics queries (pg_stat_activity / pg_stat_statements, run by the admin
    connection in the `postgres` database, so not in the workload's pg_stat_statements)."""
    return "pg_stat_activity" in fp or "pg_stat_statements" in fp


# -------------------------------------------------------------------------------------------------
# servers

@pytest.fixture(scope="module")
def maria():
    srv = eh.Maria()
    try:
        srv.start()
        srv.sysbench_prepare(SB_TABLE)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def pg():
    srv = eh.Pg()
    try:
        srv.start()
        ph.pgbench_init(srv)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def redis():
    srv = eh.Redis()
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


def maria_window(m: eh.Maria, live_args: list, work):
    """(live, Com_* deltas over exactly the workload, work's result)."""
    def w():
        before = m.fresh_status()
        res = work()
        after = m.fresh_status(threads=before["Threads_connected"])
        return delta(before, after), res
    live, (cnt, res) = window(live_args, w)
    return live, cnt, res


def redis_window(r: eh.Redis, live_args: list, work, net: eh.NetBytes | None = None):
    """(live, commandstats truth of the window, work's result); with `net`, the server's byte
    counters around everything dbtap sees (the snapshots included)."""
    r.reset_stats()

    def w():
        if net:
            net.open()
        before = r.snapshot()
        res = work()
        truth = eh.redis_truth(before, r.snapshot())
        if net:
            net.close()
        return truth, res
    live, (truth, res) = window(live_args, w)
    return live, truth, res


# -------------------------------------------------------------------------------------------------
# a. MariaDB over its Unix socket

def test_mariadb_unix_socket_sysbench_and_errors(maria, kernel_path):
    """sysbench oltp_read_only with prepared statements over the Unix socket, then a scripted
    client with errors: executes / prepares / closes and Com_<kind> classes == the server's,
    errors by code == what the client got."""
    m = maria

    def work():
        sb = m.sysbench_run(SB_THREADS, SB_TABLE, seconds=SB_SECONDS, via="unix")
        sc = eh.maria_scripted(m, m.unix_conn)
        return sb, sc

    live, cnt, (sb, sc) = maria_window(
        m, args("ebpf", "--port", m.port, "--socket", m.sock), work)
    d = live.json()
    print(f"\nmariadb unix: sysbench total {sb['total']}, scripted {sc}")
    assert cnt["Com_stmt_execute"] == sb["total"] + sb["ignored_errors"] > 500, (cnt, sb)
    maria_compare(d, cnt)
    assert mysql_errors(d) == sc["errors"], f"dbtap errors {mysql_errors(d)} != client's {sc['errors']}"
    c = capture(d)
    assert c.get("stream_connections", 0) >= SB_THREADS + 1, c
    no_loss(d)


# -------------------------------------------------------------------------------------------------
# b. MariaDB over TLS

def test_mariadb_tls_required(maria):
    """Clients that require TLS over TCP (the user is REQUIRE SSL): pymysql with the CA, the
    mariadb CLI with --ssl-verify-server-cert, sysbench --mysql-ssl=on with prepared statements.
    Counts == Com_* deltas; TLS streams == the server's Ssl_accepts."""
    m = maria

    def work():
        sc = eh.maria_scripted(m, m.tls_conn)
        out = m.cli("SELECT 1; SELECT 2 FROM DUAL", via="tls")
        assert out.split() == ["1", "2"], out
        sb = m.sysbench_run(SB_THREADS, SB_TABLE, events=200, via="tls")
        return sb, sc

    live, cnt, (sb, sc) = maria_window(m, args("ebpf", "--port", m.port, "--socket", m.sock), work)
    d = live.json()
    tls_conns = 1 + 1 + SB_THREADS
    assert cnt["Ssl_accepts"] == tls_conns, cnt
    assert cnt["Com_stmt_execute"] == sb["total"] + sb["ignored_errors"], (cnt, sb)
    maria_compare(d, cnt)
    assert mysql_errors(d) == sc["errors"]
    c = capture(d)
    print(f"\nmariadb tls: Ssl_accepts {cnt['Ssl_accepts']}, dbtap stream_tls_connections "
          f"{c.get('stream_tls_connections')}")
    assert c.get("stream_tls_connections") == cnt["Ssl_accepts"], c
    no_loss(d)


# -------------------------------------------------------------------------------------------------
# c. PostgreSQL over its Unix socket and with sslmode=require

def test_postgres_unix_and_tls_equal_pg_stat_statements(pg):
    """pgbench -M prepared over the Unix socket, pgbench -M extended and psycopg 3 with
    sslmode=require over TCP, psycopg 3 over the socket: every statement's count ==
    pg_stat_statements calls; the TLS streams == the connections the server logged as SSL."""
    pg.pgss_reset()
    log_from = pg.log.stat().st_size

    def work():
        u = pg.pgbench("unix", "prepared", PG_CLIENTS, PG_TX)
        t = pg.pgbench("tls", "extended", PG_CLIENTS, PG_TX)
        ps = pg.psycopg_tls(25)
        pu = pg.psycopg_unix(15)
        pg.wait_idle()
        return u, t, ps, pu, pg.pgss()

    live, (u, t, ps, pu, pgss) = window(
        args("ebpf", "--port", pg.port, "--socket", pg.socket_path), work)
    d = live.json()
    assert u["transactions"] == t["transactions"] == PG_CLIENTS * PG_TX and not u["failed"], (u, t)
    want = {ph.renumber(q): e["calls"] for q, e in pgss.items()}
    # PostgreSQL 15's pg_stat_statements counts a prepared BEGIN/END once per connection; the
    # wire carries one execution per transaction (test_live.py).
    assert want.get("BEGIN") == want.get("END") == PG_CLIENTS + t["transactions"], want
    want["BEGIN"] = want["END"] = u["transactions"] + t["transactions"]
    got_all = ph.dbtap_queries(d)
    got = {fp: n for fp, n in got_all.items() if not pg_own(fp)}
    print(f"\npostgres: {len(want)} statements, {sum(want.values())} calls in pgss, "
          f"{sum(got.values())} in dbtap; own stats queries {sum(got_all.values()) - sum(got.values())}")
    assert got == want, (f"dbtap != pg_stat_statements:\n  dbtap: "
                         f"{ {k: v for k, v in got.items() if want.get(k) != v} }\n  pgss: "
                         f"{ {k: v for k, v in want.items() if got.get(k) != v} }")
    assert d["totals"]["errors"] == sum(ps["errors"].values()) == 1
    log = pg.log.read_bytes()[log_from:].decode(errors="replace")
    ssl_conns = sum(1 for ln in log.splitlines()
                    if "connection authorized" in ln and "SSL enabled" in ln)
    assert ssl_conns == PG_CLIENTS + 2, log[-2000:]  # pgbench's clients + its first, psycopg
    assert capture(d).get("stream_tls_connections") == ssl_conns, capture(d)
    no_loss(d)


# -------------------------------------------------------------------------------------------------
# d. Redis over unixsocket and --tls-port

def test_redis_unix_and_tls_equal_commandstats(redis):
    """redis-benchmark (-P 1 and -P 16) over the Unix socket and over TLS, redis-cli and redis-py
    over both (one WRONGTYPE error): per command == INFO commandstats; the stream bytes == the
    server's own total_net_input_bytes + total_net_output_bytes."""
    r = redis

    def work():
        r.benchmark("unix", "set,get,lpush,incr", 5000, clients=4)
        r.benchmark("unix", "set,get", 20000, clients=4, pipeline=16)
        r.benchmark("tls", "set,get,incr", 3000, clients=2)
        assert r.cli("tls", "INCR", "cli:n").strip().isdigit()
        assert r.cli("unix", "DEL", "cli:n").strip() == "1"
        c = r.py_client("tls")
        c.set("py:s", "x")
        try:
            c.lpush("py:s", "y")
        except Exception as e:  # WRONGTYPE
            assert "WRONGTYPE" in str(e)
        else:
            raise AssertionError("LPUSH on a string did not fail")
        c.close()

    net = eh.NetBytes(r)
    live, truth, _ = redis_window(
        r, args("ebpf", "--port", r.port, "--port", r.tls_port, "--socket", r.sock), work, net)
    d = live.json()
    got = redis_got(d)
    print(f"\nredis unix+tls: dbtap {got}\n  commandstats {truth}\n  stream bytes "
          f"{capture(d).get('stream_bytes')}, server's net bytes (TLS: plaintext) {net.total()}")
    # every byte the server read and wrote (TLS: the plaintext SSL_read/SSL_write moved)
    assert capture(d).get("stream_bytes") == net.total(), capture(d)
    assert truth["set"][0] >= 28000 and truth["lpush"] == (5001, 1), truth
    assert got == truth
    c = capture(d)
    assert c.get("stream_tls_connections", 0) >= 3, c
    no_loss(d)


# -------------------------------------------------------------------------------------------------
# e. --source auto: plain TCP, Unix socket and TLS at once, each counted once

def _parallel(*fns):
    res: list = [None] * len(fns)
    errs: list = []

    def run(i, f):
        try:
            res[i] = f()
        except BaseException as e:  # re-raised below
            errs.append(e)

    ts = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return res


def test_auto_redis_three_paths_each_counted_once(redis):
    """redis-benchmark over plain TCP (SET), the Unix socket (GET) and TLS (INCR) at the same
    time, dbtap in auto (packets on lo + eBPF): per command == commandstats, and grouped by
    server and command each path has its own command's count."""
    r = redis

    def work():
        _parallel(lambda: r.benchmark("tcp", "set", 8000, clients=2),
                  lambda: r.benchmark("unix", "get", 8000, clients=2),
                  lambda: r.benchmark("tls", "incr", 4000, clients=2))

    live, truth, _ = redis_window(
        r, args("auto", "-i", "lo", "--port", r.port, "--port", r.tls_port, "--socket", r.sock,
                "--group-by", "server,fingerprint"), work)
    d = live.json()
    got = redis_got(d)
    print(f"\nauto redis: dbtap {got}\n  commandstats {truth}")
    assert got == truth
    by = collections.Counter()
    for g in d["queries"]:
        if g["protocol"] == "redis" and g["command"] not in eh.OWN_REDIS_COMMANDS:
            by[(g["dimensions"]["server"], g["command"])] += g["count"]
    plain, tls, unix = f"127.0.0.1:{r.port}", f"127.0.0.1:{r.tls_port}", str(r.sock)
    assert by[(plain, "set")] == truth["set"][0], by
    assert by[(unix, "get")] == truth["get"][0], by
    assert by[(tls, "incr")] == truth["incr"][0], by
    assert {s for s, _ in by} <= {plain, tls, unix}, by
    # each redis-benchmark run asks CONFIG GET on its own path
    cfg = {s: n for (s, cmd), n in by.items() if cmd == "config"}
    assert set(cfg) == {plain, tls, unix} and sum(cfg.values()) == truth["config"][0], (cfg, truth)
    own = {plain: "set", unix: "get", tls: "incr"}
    assert all(cmd in ("config", own[s]) for s, cmd in by), by


def test_auto_mariadb_plain_unix_tls_on_one_port_each_counted_once(maria):
    """MariaDB's TLS and plaintext share one port: the packet path sees the TLS connections'
    greetings and must leave them to eBPF. sysbench over TCP without TLS, over the Unix socket
    and over TLS at once: executes == Com_stmt_execute, per server == each sysbench's own."""
    m = maria

    def work():
        return _parallel(
            lambda: m.sysbench_run(1, SB_TABLE, events=300, via="tcp"),
            lambda: m.sysbench_run(1, SB_TABLE, events=300, via="unix"),
            lambda: m.sysbench_run(1, SB_TABLE, events=200, via="tls"))

    live, cnt, (tcp, unix, tls) = maria_window(
        m, args("auto", "-i", "lo", "--port", m.port, "--socket", m.sock, "--group-by",
                "server,fingerprint"), work)
    d = live.json()
    maria_compare(d, cnt)
    by = collections.Counter()
    for g in mysql_groups(d):
        if not mysql_own(g):
            by[(g["dimensions"]["server"], g["command"])] += g["count"]
    port_s, sock_s = f"127.0.0.1:{m.port}", str(m.sock)
    ex = lambda sb: sb["total"] + sb["ignored_errors"]  # noqa: E731
    print(f"\nauto mariadb: {dict(by)}; sysbench tcp {ex(tcp)} unix {ex(unix)} tls {ex(tls)}")
    assert by[(sock_s, "execute")] == ex(unix), by
    assert by[(port_s, "execute")] == ex(tcp) + ex(tls), by
    assert cnt["Ssl_accepts"] == 1


def test_auto_postgres_plain_unix_tls_each_counted_once(pg, kernel_path):
    """pgbench -M extended over plain TCP (sslmode=disable), over the Unix socket and with
    sslmode=require at once, dbtap in auto: per statement == pg_stat_statements, and grouped by
    server each path's UPDATE pgbench_accounts == its pgbench's own transactions."""
    pg.pgss_reset()

    def work():
        runs = _parallel(lambda: pg.pgbench("tcp", "extended", 1, 40),
                         lambda: pg.pgbench("unix", "extended", 1, 50),
                         lambda: pg.pgbench("tls", "extended", 1, 30))
        pg.wait_idle()
        return runs, pg.pgss()

    live, ((tcp, unix, tls), pgss) = window(
        args("auto", "-i", "lo", "--port", pg.port, "--socket", pg.socket_path, "--group-by",
             "server,fingerprint"), work)
    d = live.json()
    want = {ph.renumber(q): e["calls"] for q, e in pgss.items()}
    got: collections.Counter = collections.Counter()
    upd: collections.Counter = collections.Counter()
    for g in d["queries"]:
        if g["protocol"] != "postgres" or g["command"] != "query" or pg_own(g["fingerprint"]):
            continue
        got[g["fingerprint"]] += g["count"]
        if g["fingerprint"].startswith("UPDATE pgbench_accounts"):
            upd[g["dimensions"]["server"]] += g["count"]
    print(f"\nauto postgres: UPDATE pgbench_accounts by server {dict(upd)}; pgbench tcp "
          f"{tcp['transactions']} unix {unix['transactions']} tls {tls['transactions']}")
    assert dict(got) == want, (f"dbtap != pg_stat_statements:\n  dbtap: "
                               f"{ {k: v for k, v in got.items() if want.get(k) != v} }\n  pgss: "
                               f"{ {k: v for k, v in want.items() if got.get(k) != v} }")
    assert dict(upd) == {f"127.0.0.1:{pg.port}": tcp["transactions"] + tls["transactions"],
                         str(pg.socket_path): unix["transactions"]}, upd


# -------------------------------------------------------------------------------------------------
# f. lost records: a 1 MiB ring under load

def small_ring_run(r: eh.Redis, bench_n: int, resume_after_load: bool):
    """redis-benchmark SET over the Unix socket (-P 1, 50 clients, 1 KB values) with dbtap's
    ring at 1 MiB and dbtap stopped (SIGSTOP) 0.5 s into the load: for 1 s (the load goes on
    after: losses in the middle of the streams), or until the load has ended and its connections
    closed (losses at the end of the streams). A redis-py connection SETs all along, before,
    during and after the pause. Then, with the ring drained, 300 HSETs on a new connection.
    Returns (dbtap per command, commandstats, capture health, the server's byte total)."""
    live_holder: list = []
    load_done = threading.Event()
    resumed = threading.Event()

    def pause_dbtap():
        time.sleep(0.5)
        pid = live_holder[0].proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            if resume_after_load:
                load_done.wait(120)
                time.sleep(0.5)
            else:
                time.sleep(1.0)
        finally:
            os.kill(pid, signal.SIGCONT)
            resumed.set()

    def steady():
        c = r.py_client("unix")
        n = 0
        while not (load_done.is_set() and resumed.is_set()) or n < 10:
            c.set(f"steady:{n % 100}", "v" * 1000)
            n += 1
        time.sleep(1.0)  # the ring drains
        for _ in range(200):
            c.set("steady:after", "v" * 1000)
        c.close()

    def load():
        try:
            r.benchmark("unix", "set", bench_n, clients=50, size=1000)
        finally:
            load_done.set()

    def work():
        _parallel(load, pause_dbtap, steady)
        c = r.py_client("unix")
        for i in range(300):
            c.hset("after:h", f"f{i}", i)
        c.close()

    a = args("ebpf", "--port", r.port, "--socket", r.sock, "--ebpf-ring-mb", "1")
    r.reset_stats()
    net = eh.NetBytes(r)
    live = start(*a)
    live_holder.append(live)
    try:
        net.open()
        before = r.snapshot()
        work()
        truth = eh.redis_truth(before, r.snapshot())
        net.close()
        time.sleep(STOP_WAIT_S)
    finally:
        live.stop()
    d = live.json()
    return redis_got(d), truth, capture(d), net.total()


def check_small_ring(got: dict, truth: dict, c: dict, server_bytes: int) -> None:
    """dbtap says it lost records, never counts more than the server, misses at most one request
    per lost record (with -P 1 a server read or write holds at most one request or reply), counts
    the HSETs made after the ring drained exactly, accounts for every byte the server read and
    wrote (Redis's own total_net_input/output_bytes) as delivered or in exact holes, and reports
    the holes as gaps (no message here is longer than the copy limit: nothing is "uncopied")."""
    lost = c.get("ebpf_lost_records", 0)
    delivered, gap_b = c.get("stream_bytes", 0), c.get("stream_gap_bytes", 0)
    uncopied = c.get("stream_uncopied_bytes", 0)
    print(f"\nsmall ring: dbtap {got}\n  commandstats {truth}\n  lost records {lost}, gaps "
          f"{c.get('stream_gaps')}, gap bytes {gap_b}, uncopied {uncopied}, complete "
          f"{c.get('complete')}\n  bytes: delivered {delivered} + gaps {gap_b} + uncopied "
          f"{uncopied} = {delivered + gap_b + uncopied}, the server read and wrote {server_bytes}")
    assert lost > 0, c
    assert c.get("complete") is not True, c
    for cmd, (n, e) in truth.items():
        assert got.get(cmd, (0, 0))[0] <= n, (cmd, got.get(cmd), n)
    assert set(got) <= set(truth), (got, truth)
    missed = truth["set"][0] - got.get("set", (0, 0))[0]
    assert 0 <= missed <= lost, f"dbtap missed {missed} SETs, more than the {lost} lost records"
    assert got.get("hset") == truth["hset"] == (300, 0), (got.get("hset"), truth["hset"])
    assert delivered + gap_b + uncopied == server_bytes, (delivered, gap_b, uncopied, server_bytes)
    assert uncopied == 0 and c.get("stream_gaps", 0) > 0 and gap_b > 0, \
        (f"{lost} lost records: stream_gaps {c.get('stream_gaps')}, stream_gap_bytes {gap_b}, "
         f"stream_uncopied_bytes {uncopied} (the ring's losses must be gaps, not uncopied)")


def test_small_ring_losses_mid_stream_are_exact_gaps(redis):
    check_small_ring(*small_ring_run(redis, 300000, resume_after_load=False))


def test_small_ring_losses_at_stream_end_are_exact_gaps(redis):
    check_small_ring(*small_ring_run(redis, 60000, resume_after_load=True))


# -------------------------------------------------------------------------------------------------
# f2, g. the process dimension; --write in ebpf mode read back by dbtap digest / events

def test_process_dimension_and_write_read_back(maria, redis, tmp_path):
    """sysbench (MariaDB) and redis-benchmark (Redis) over the Unix sockets in one ebpf run with
    --group-by process,fingerprint and --write: each client program's requests under its own
    command name, equal to its server's counters; `dbtap digest` of the written files gives
    the live run's counts; `dbtap events` carries "process" {pid, comm}."""
    m, r = maria, redis
    wdir = tmp_path / "w"
    r.reset_stats()

    def work():
        mb = m.fresh_status()
        rb = r.snapshot()
        sb = m.sysbench_run(1, SB_TABLE, events=200, via="unix")
        r.benchmark("unix", "set,get", 3000, clients=2)
        ma = m.fresh_status(threads=mb["Threads_connected"])
        return delta(mb, ma), eh.redis_truth(rb, r.snapshot()), sb

    live, (cnt, rtruth, sb) = window(
        args("ebpf", "--port", m.port, "--socket", m.sock, "--port", r.port, "--socket", r.sock,
             "--group-by", "process,fingerprint", "--write", wdir), work)
    d = live.json()
    by = collections.Counter()
    own = set()
    for g in d["queries"]:
        if g["dimensions"]["process"] == "python3":  # this test's statistics connections
            own.add(g["fingerprint"].lower())
            continue
        by[(g["protocol"], g["dimensions"]["process"], g["command"])] += g["count"]
    assert own <= {"show global status", "info", "administrator command: quit"}, own
    print(f"\nprocess: {dict(by)}")
    assert by[("mysql", "sysbench", "execute")] == cnt["Com_stmt_execute"] == \
        sb["total"] + sb["ignored_errors"], (by, cnt, sb)
    assert by[("redis", "redis-benchmark", "set")] == rtruth["set"][0], (by, rtruth)
    assert by[("redis", "redis-benchmark", "get")] == rtruth["get"][0], (by, rtruth)
    progs = {p for (_, p, _) in by}
    assert progs <= {"sysbench", "redis-benchmark"}, progs

    files = sorted(p for p in wdir.iterdir() if p.is_file())
    assert files, f"--write {wdir} wrote nothing"
    dd = harness.digest(*files, extra=("--group-by", "process,fingerprint"))
    back = collections.Counter()
    for g in dd["queries"]:
        back[(g["protocol"], g["dimensions"]["process"], g["command"])] += g["count"]
    live_all = collections.Counter()
    for g in d["queries"]:
        live_all[(g["protocol"], g["dimensions"]["process"], g["command"])] += g["count"]
    assert back == live_all, f"digest of the --write files {dict(back)} != live {dict(live_all)}"
    ev = harness.events(*files)
    procs = collections.Counter((e.get("process") or {}).get("comm") for e in ev
                                if e.get("protocol") == "redis" and e.get("command") == "set")
    assert procs == {"redis-benchmark": rtruth["set"][0]}, procs
    procs = collections.Counter((e.get("process") or {}).get("comm") for e in ev
                                if e.get("protocol") == "mysql" and e.get("command") == "execute")
    assert procs == {"sysbench": cnt["Com_stmt_execute"]}, procs
    assert all(isinstance(e["process"].get("pid"), int) for e in ev if e.get("process"))


# -------------------------------------------------------------------------------------------------
# f. a traced client: the process named with --pid connected out (connect traced; roles reversed)

CLIENT_SCRIPT = r"""
import ssl, sys, redis
sock, port, tls_port, ca = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print("ready", flush=True)
sys.stdin.readline()
u = redis.Redis(unix_socket_path=sock, single_connection_client=True)
t = redis.Redis(host="127.0.0.1", port=port, single_connection_client=True)
s = redis.Redis(host="127.0.0.1", port=tls_port, ssl=True, ssl_ca_certs=ca,
                single_connection_client=True)
n = {"set": 0, "incrby": 0, "lpush": 0}
for i in range(25):
    u.set(f"cl:u{i}", "v"); n["set"] += 1
for i in range(17):
    t.incrby("cl:t", 2); n["incrby"] += 1
for i in range(11):
    s.lpush("cl:s", "x"); n["lpush"] += 1
for c in (u, t, s):
    c.close()
print("done", n["set"], n["incrby"], n["lpush"], flush=True)
sys.stdin.readline()
"""


def test_traced_client_process_connects_out_unix_tcp_tls(redis):
    """dbtap traces a client (`--pid`, no server traced): its connect(2)s make it the client of
    its Unix-socket, plain TCP and TLS (its own libssl) connections. Per command and per server
    == the client's own counts and the server's commandstats; the process is the client's."""
    r = redis
    cl = subprocess.Popen([sys.executable, "-c", CLIENT_SCRIPT, str(r.sock), str(r.port),
                           str(r.tls_port), str(r.certs["ca"])], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    try:
        assert cl.stdout.readline().strip() == "ready"

        def work():
            cl.stdin.write("go\n")
            cl.stdin.flush()
            done = cl.stdout.readline().split()
            assert done[:1] == ["done"], done
            return dict(zip(("set", "incrby", "lpush"), map(int, done[1:])))

        live, truth, own = redis_window(
            r, args("ebpf", "--pid", cl.pid, "--group-by", "server,process,fingerprint"), work)
    finally:
        cl.stdin.close()
        cl.wait(timeout=30)
    d = live.json()
    got = redis_got(d)
    print(f"\ntraced client: dbtap {got}\n  client {own}\n  commandstats {truth}")
    assert own == {"set": 25, "incrby": 17, "lpush": 11}, own
    assert got == {k: (n, 0) for k, n in own.items()} == {k: truth[k] for k in own}, (got, truth)
    by = collections.Counter()
    for g in d["queries"]:
        if g["protocol"] == "redis":
            dims = g["dimensions"]
            by[(dims["server"], dims["process"], g["command"])] += g["count"]
    assert by == {(str(r.sock), "python3", "set"): 25,
                  (f"127.0.0.1:{r.port}", "python3", "incrby"): 17,
                  (f"127.0.0.1:{r.tls_port}", "python3", "lpush"): 11}, by
    assert capture(d).get("stream_tls_connections") == 1, capture(d)
    no_loss(d)


# -------------------------------------------------------------------------------------------------
# A server in a network namespace of its own (as in a container)

NETNS = "dbtap-ebpf-ns"
NETNS_REDIS_PORT = 38225


@pytest.fixture(scope="module")
def netns_redis():
    """A redis-server in a network namespace of its own: its TCP listener is only in that
    namespace's table, not in this one's; its Unix socket (the snapshots') is a file, reachable
    from here."""
    def ns(*a: str) -> None:
        subprocess.run(["ip", "netns", *a], check=True, capture_output=True, text=True)

    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)
    srv = rh.RedisServer(NETNS_REDIS_PORT, eh.OUT / "redis-netns")
    srv.launcher = ["ip", "netns", "exec", NETNS]
    try:
        ns("add", NETNS)
        ns("exec", NETNS, "ip", "link", "set", "lo", "up")
        srv.start()
        yield srv
    finally:
        srv.stop()
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)


@pytest.mark.parametrize("found_by", ["port", "pid", "socket"])
def test_server_in_another_network_namespace(netns_redis, found_by):
    """Traced by its port (found in its namespace's listeners: stop 35's binary found no process),
    named by --pid with no port (the direction of its connections comes from its namespace's
    listeners: stop 35's binary took them for outgoing and paired nothing), or by its --socket
    (its namespace's Unix listener, matched by file identity through the process's root: stop
    35's binary found no process): redis-benchmark and redis-cli inside the namespace over TCP,
    or from here over the Unix socket, per command == INFO commandstats."""
    r = netns_redis
    inside = ["ip", "netns", "exec", NETNS]
    via = ["-s", str(r.sock)] if found_by == "socket" else ["-h", "127.0.0.1", "-p", str(r.port)]
    run = [] if found_by == "socket" else inside

    def work():
        subprocess.run([*run, "redis-benchmark", *via, "-n", "3000", "-c", "2", "-P", "4", "-t",
                        "set,get,incr", "-q"], check=True, capture_output=True)
        out = subprocess.run([*run, "redis-cli", *via, "INCR", "ns:n"],
                             check=True, capture_output=True, text=True).stdout
        assert out.strip().isdigit(), out

    how = {"port": ["--port", r.port], "pid": ["--pid", r._pid()],
           "socket": ["--socket", r.sock]}[found_by]
    live, truth, _ = redis_window(r, args("ebpf", *how), work)
    d = live.json()
    got = redis_got(d)
    print(f"\nnetns redis by {found_by}: dbtap {got}\n  commandstats {truth}")
    assert truth["set"] == (3000, 0) and truth["incr"] == (3001, 0), truth
    assert got == truth
    no_loss(d)


# -------------------------------------------------------------------------------------------------
# without the privilege: one line naming what is missing (and the tests' skip recognizes it)

def test_without_privilege_one_line_error_that_skips():
    """`--source ebpf` as nobody without capabilities: exit non-zero, one line on stderr naming
    the missing privilege; that line is what makes these tests skip (or fail under
    DBTAP_REQUIRE_CAPTURE) on a machine where BPF cannot load."""
    import shutil
    b = lh.nobody_copy()
    try:
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            "--inh-caps=-all", "--bounding-set=-all", str(b), "live", "--source",
                            "ebpf", "--port", str(eh.MARIA_PORT), "--duration", "5s"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(b.parent)
    lines = r.stderr.strip().splitlines()
    print(f"\nas nobody: exit {r.returncode}, stderr {r.stderr!r}")
    assert r.returncode != 0 and len(lines) == 1 and r.stdout == "", (r.returncode, r.stderr)
    assert "CAP_BPF" in lines[0] and eh.ebpf_unavailable(lines[0]), lines[0]

