"""The ClickHouse sink (`--clickhouse URL`, `dbtap schema clickhouse`) against a real server.

A private clickhouse-server (Debian's 18.16: the oldest the schema and the wire format must
work on) with its own config and data under tests/out/clickhouse/, HTTP on 127.0.0.1:38500 only (the
sink needs nothing else; a TCP or interserver port would be one more port that other tests'
outgoing connections, whose ephemeral ports fall in our range, can hold in TIME_WAIT);
38503: live's --listen, 38504: dbtap ui; the schema is created with `dbtap schema clickhouse --apply`.

- Two hosts: the repository's MySQL sample capture split by connection into two captures (the
  second moved a day and an hour later, so its rows go to another partition and hour), each
  digested with `--clickhouse --host-name`: per group and host the server's `sum(count)` equals
  that side's digest JSON count; summed over hosts, the sum of both digests.
- Percentiles over the union: p50/p95/p99 of service time per group from the SQL of
  docs/clickhouse.md (`sumMap` of the bucket arrays over both hosts) equal those of
  `dbtap digest A B` within the histogram's error (1/256 of the value).
- The hour rollup (materialized view) holds the same counts and merged histograms.
- `dbtap ui --clickhouse`: /api/top over the fleet equals the digest of both captures (counts;
  p99 within the histogram's error), and with `--clickhouse-host` the one host's digest.
- Outage: a digest while the server is down spools its batch to disk and fails; the next run
  with the same spool delivers it once; the same batch file put back (as if the agent died
  between the insert and the spool's clean-up) is found stored by the ledger and not sent
  again; a corrupt spool file is a warning, not a crash.
- Live (needs capture privilege: skipped without, failed under DBTAP_REQUIRE_CAPTURE=1): `dbtap
  live -i lo --clickhouse` while a Redis client sends paced commands; ClickHouse is stopped
  for a few seconds mid-run and started again: per command, the server's count equals the
  client's own count (nothing lost, nothing doubled).
- When `chdb` (an embedded current ClickHouse) is installed, the DDL and the percentile query
  also run there.

Truth is the server's answers and the clients' own counts; dbtap's JSON digests are the
reference the sink must agree with.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import live_harness  # noqa: E402
import redis_harness as rh  # noqa: E402

HTTP_PORT = 38500
REDIS_PORT = 38510
OUT = harness.REPO / "tests" / "out" / "clickhouse"
URL = f"http://127.0.0.1:{HTTP_PORT}/"
REQUIRE = bool(os.environ.get("DBTAP_REQUIRE_CAPTURE"))
SAMPLE = harness.REPO / "samples" / "mysql-sysbench.pcap.gz"
SHIFT_S = 86_400 + 3_600

CONFIG = """<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/error.log</errorlog>
        <console>0</console></logger>
    <http_port>{http}</http_port>
    <listen_host>127.0.0.1</listen_host>
    <path>{d}/data/</path>
    <tmp_path>{d}/tmp/</tmp_path>
    <user_files_path>{d}/user_files/</user_files_path>
    <format_schema_path>{d}/format_schemas/</format_schema_path>
    <users_config>{d}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mark_cache_size>5368709</mark_cache_size>
    <uncompressed_cache_size>8589934</uncompressed_cache_size>
    <max_concurrent_queries>20</max_concurrent_queries>
</yandex>
"""

USERS = """<?xml version="1.0"?>
<yandex>
    <profiles><default><max_memory_usage>1000000000</max_memory_usage></default></profiles>
    <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
        <profile>default</profile><quota>default</quota></default></users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
        <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
    </interval></default></quotas>
</yandex>
"""


class ClickHouse:
    """A private clickhouse-server: start(), stop() (SIGTERM, waits for the exit), query().
    Another test file's server changes `http_port` and the two config texts."""

    http_port = HTTP_PORT

    def __init__(self, workdir: Path):
        self.dir = Path(workdir).resolve()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/"

    def config_text(self) -> str:
        return CONFIG.format(d=self.dir, http=self.http_port)

    def users_text(self) -> str:
        return USERS

    def start(self, timeout: float = 30.0) -> None:
        exe = shutil.which("clickhouse-server") or shutil.which("clickhouse")
        if not exe:
            pytest.fail("clickhouse-server is not installed (tests/setup.sh installs it)")
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "config.xml"
        cfg.write_text(self.config_text())
        (self.dir / "users.xml").write_text(self.users_text())
        args = [exe, f"--config-file={cfg}"]
        if Path(exe).name == "clickhouse":
            args = [exe, "server", f"--config-file={cfg}"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=self.dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.query("SELECT 1").strip() == "1":
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        err = (self.dir / "error.log").read_text(errors="replace")[-2000:] \
            if (self.dir / "error.log").exists() else ""
        self.stop()
        pytest.fail(f"clickhouse-server did not start: {err}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        harness.wait_port_free(self.http_port)

    def query(self, sql: str) -> str:
        req = urllib.request.Request(self.url, data=sql.encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"ClickHouse: {e.read().decode(errors='replace')[:800]}\n{sql}")

    def rows(self, sql: str) -> list[list[str]]:
        out = self.query(sql + " FORMAT TabSeparated")
        return [line.split("\t") for line in out.splitlines() if line]


@pytest.fixture(scope="module")
def ch():
    d = OUT / "clickhouse"
    shutil.rmtree(d, ignore_errors=True)
    server = ClickHouse(d)
    server.start()
    try:
        harness.dbtap("schema", "clickhouse", "--apply", URL)
        yield server
    finally:
        server.stop()


# -- two captures as two hosts ----------------------------------------------------------------

def split_sample(out_a: Path, out_b: Path) -> None:
    """The sample capture (Ethernet, IPv4; the server on port 33306) split by connection:
    client port // 2 even to A, odd to B (connect() gives even ports); B's packets moved
    SHIFT_S later. Whole connections, so both digest cleanly."""
    data = gzip.open(SAMPLE).read()
    head, off = data[:24], 24
    a, b = [head], [head]
    while off + 16 <= len(data):
        sec, usec, incl, orig = struct.unpack_from("<IIII", data, off)
        pkt = data[off + 16: off + 16 + incl]
        off += 16 + incl
        ihl = (pkt[14] & 0x0F) * 4 if len(pkt) > 14 else 0
        sport, dport = struct.unpack_from(">HH", pkt, 14 + ihl) if len(pkt) >= 18 + ihl else (0, 0)
        client = dport if sport == 33306 else sport
        if client // 2 % 2 == 0:
            a.append(struct.pack("<IIII", sec, usec, incl, orig) + pkt)
        else:
            b.append(struct.pack("<IIII", sec + SHIFT_S, usec, incl, orig) + pkt)
    out_a.write_bytes(b"".join(a))
    out_b.write_bytes(b"".join(b))


def group_key(g: dict) -> tuple:
    return (g["protocol"], g["command"], g["id"])


def counts(d: dict) -> collections.Counter:
    c = collections.Counter()
    for g in d["queries"]:
        c[group_key(g)] += g["count"]
    return c


@pytest.fixture(scope="module")
def two_hosts(ch):
    OUT.mkdir(parents=True, exist_ok=True)
    a, b = OUT / "host-a.pcap", OUT / "host-b.pcap"
    split_sample(a, b)
    da = harness.digest(a, extra=("--clickhouse", URL, "--host-name", "host-a"))
    db = harness.digest(b, extra=("--clickhouse", URL, "--host-name", "host-b"))
    both = harness.digest(a, b)
    assert da["totals"]["queries"] > 100 and db["totals"]["queries"] > 100, (da["totals"], db["totals"])
    assert counts(da) != counts(db)
    return da, db, both


def ch_counts(ch: ClickHouse, where: str = "1") -> collections.Counter:
    c = collections.Counter()
    for p, cmd, qid, n in ch.rows(
            f"SELECT protocol, command, query_id, sum(count) FROM dbtap_minutes "
            f"WHERE {where} GROUP BY protocol, command, query_id"):
        c[(p, cmd, qid)] += int(n)
    return c


def test_counts_per_host_and_summed_over_hosts_equal_the_digests(ch, two_hosts):
    da, db, both = two_hosts
    assert ch_counts(ch, "host = 'host-a'") == counts(da)
    assert ch_counts(ch, "host = 'host-b'") == counts(db)
    assert ch_counts(ch) == counts(da) + counts(db) == counts(both)
    # B's rows are a day and an hour later: another partition, another hour.
    days = ch.rows("SELECT host, uniqExact(toDate(ts)) , min(toDate(ts)) FROM dbtap_minutes "
                   "GROUP BY host ORDER BY host")
    assert [r[1] for r in days] == ["1", "1"] and days[0][2] != days[1][2], days
    # Every row carries its batch id: one batch per host here.
    assert ch.rows("SELECT uniqExact(batch) FROM dbtap_minutes") == [["2"]]


def quantile_sql(table_hist: str, lo: str, hi: str) -> str:
    """docs/clickhouse.md's percentile expression: nearest-rank bucket of the merged histogram,
    its midpoint, clamped to the exact min and max."""
    return f"""
    WITH
        {table_hist} AS h,
        arrayMap(q -> toUInt64(arrayElement(h.1, arrayFirstIndex(c -> c >= greatest(1,
            ceil(q * arraySum(h.2))), arrayCumSum(h.2)))), [0.5, 0.95, 0.99]) AS b,
        arrayMap(i -> if(i < 256, 0, intDiv(i, 128) - 1), b) AS s,
        arrayMap((i, e) -> bitShiftLeft(i - bitShiftLeft(e, 7), e)
            + intDiv(bitShiftLeft(toUInt64(1), e) - 1, 2), b, s) AS mid,
        {lo} AS lo,
        {hi} AS hi
    SELECT protocol, command, query_id, arraySum(h.2),
        least(greatest(mid[1], lo), hi), least(greatest(mid[2], lo), hi),
        least(greatest(mid[3], lo), hi)
    """


def check_percentiles(rows: list[list[str]], both: dict) -> int:
    want = {group_key(g): g["service_us"] for g in both["queries"]}
    checked = 0
    for p, cmd, qid, n, *ps in rows:
        w = want[(p, cmd, qid)]
        assert int(n) == w["count"], (qid, n, w)
        if int(n) == 0:
            continue
        for got_ns, key in zip(ps, ("p50", "p95", "p99")):
            ref_ns = w[key] * 1000
            assert abs(int(got_ns) - ref_ns) <= max(2.0, ref_ns / 256 + 1), (qid, key, got_ns, w)
        checked += 1
    return checked


def test_percentiles_over_the_union_equal_a_digest_of_both_captures(ch, two_hosts):
    _, _, both = two_hosts
    sql = quantile_sql("sumMap(service_buckets, service_counts)",
                       "minIf(service_min_ns, notEmpty(service_counts))", "max(service_max_ns)")
    rows = ch.rows(sql + " FROM dbtap_minutes GROUP BY protocol, command, query_id")
    assert len(rows) == len(both["queries"])
    assert check_percentiles(rows, both) >= 10
    # A group with more than 64 samples: the histogram, not raw samples, on both sides.
    assert max(int(r[3]) for r in rows) > 64


def test_the_hour_rollup_holds_the_same_counts_and_distributions(ch, two_hosts):
    _, _, both = two_hosts
    minutes = ch.rows("SELECT toStartOfHour(ts) AS h, host, query_id, sum(count), "
                      "sumMap(service_buckets, service_counts), sum(service_sum_ns) "
                      "FROM dbtap_minutes GROUP BY h, host, query_id ORDER BY h, host, query_id")
    hours = ch.rows("SELECT ts, host, query_id, sumMerge(count), sumMapMerge(service_hist), "
                    "sumMerge(service_sum_ns) FROM dbtap_hours GROUP BY ts, host, query_id "
                    "ORDER BY ts, host, query_id")
    assert minutes and hours == minutes
    sql = quantile_sql("sumMapMerge(service_hist)", "minIfMerge(service_min_ns)",
                       "maxMerge(service_max_ns)")
    rows = ch.rows(sql + " FROM dbtap_hours GROUP BY protocol, command, query_id")
    assert check_percentiles(rows, both) >= 10


def ui_top(*args: str) -> tuple[dict, dict]:
    """`dbtap ui --clickhouse URL ARGS` started, /api/meta and /api/top over its whole span."""
    proc = subprocess.Popen([str(harness.dbtap_path()), "ui", "--clickhouse", URL,
                             "--listen", "127.0.0.1:38504", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("dbtap: ui on http://127.0.0.1:38504/"), line + proc.stderr.read()
        get = lambda path: json.loads(urllib.request.urlopen(  # noqa: E731
            f"http://127.0.0.1:38504{path}", timeout=30).read())
        return get("/api/meta"), get("/api/top?from=-4d&limit=1000")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)


def test_the_web_ui_over_the_fleet_equals_the_digests(ch, two_hosts):
    da, db, both = two_hosts
    meta, top = ui_top("--clickhouse-range", "3d")
    assert [s["label"] for s in meta["sources"]][:2] == ["host-a", "host-b"]
    got = collections.Counter({(g["protocol"], g["command"], g["id"]): g["count"]
                               for g in top["groups"]})
    assert got == counts(both)
    want = {group_key(g): g["service_us"] for g in both["queries"]}
    for g in top["groups"]:
        w = want[(g["protocol"], g["command"], g["id"])]
        if w["count"]:
            assert abs(g["p99_us"] - w["p99"]) <= w["p99"] / 256 + 0.002, (g, w)
    # One host only.
    meta, top = ui_top("--clickhouse-range", "3d", "--clickhouse-host", "host-a")
    assert [s["label"] for s in meta["sources"]] == ["host-a"]
    got = collections.Counter({(g["protocol"], g["command"], g["id"]): g["count"]
                               for g in top["groups"]})
    assert got == counts(da)


# -- outages without capture: the spool, the ledger, a corrupt file ---------------------------

def test_outage_spools_then_delivers_once_and_the_ledger_stops_a_resend(ch):
    OUT.mkdir(parents=True, exist_ok=True)
    spool = OUT / "spool"
    shutil.rmtree(spool, ignore_errors=True)
    host = "spool-host"
    args = ("--clickhouse", URL, "--host-name", host, "--clickhouse-spool", spool)
    want = counts(harness.digest(SAMPLE))

    ch.stop()
    try:
        r = harness.dbtap("digest", SAMPLE, *args, "--clickhouse-wait", "1s", check=False)
    finally:
        ch.start()
    assert r.returncode != 0
    assert b"not delivered" in r.stderr and b"kept in" in r.stderr, r.stderr
    assert r.stdout == harness.dbtap("digest", SAMPLE).stdout, "the report is printed all the same"
    files = sorted(spool.glob("*.chb"))
    assert len(files) == 1, files
    kept = files[0].read_bytes()

    # The next run with the same spool sends the old batch (once) and its own.
    harness.dbtap("digest", SAMPLE, *args, "--clickhouse-wait", "20s")
    assert not list(spool.glob("*.chb"))
    got = ch_counts(ch, f"host = '{host}'")
    assert got == want + want, "the spooled batch and the second run's, each once"
    assert ch.rows(f"SELECT uniqExact(batch) FROM dbtap_minutes WHERE host = '{host}'") == [["2"]]

    # As if the agent died after the insert but before removing the file: the ledger finds
    # the batch stored and does not send it again. A corrupt file beside it is a warning.
    files[0].write_bytes(kept)
    (spool / "00000000000000000000-00000000deadbeef.chb").write_bytes(b"DBTAPCH1 torn")
    empty = OUT / "empty.pcap"
    empty.write_bytes(gzip.open(SAMPLE).read()[:24])
    r = harness.dbtap("digest", empty, *args, "--clickhouse-wait", "20s")
    assert b"spool file" in r.stderr and b"removed" in r.stderr, r.stderr
    assert b"panicked" not in r.stderr
    assert not list(spool.glob("*.chb"))
    assert ch_counts(ch, f"host = '{host}'") == want + want, "nothing sent twice"


def test_schema_prints_the_statements():
    out = harness.dbtap("schema", "clickhouse").stdout.decode()
    assert out.count("CREATE ") == 3
    for part in ("ENGINE = MergeTree()", "PARTITION BY toDate(ts)",
                 "ORDER BY (query_id, server, ts)", "AggregatingMergeTree",
                 "CREATE MATERIALIZED VIEW IF NOT EXISTS dbtap_hours_mv TO dbtap_hours"):
        assert part in out, part


def test_the_ddl_and_queries_run_on_a_current_clickhouse():
    """chdb (an embedded current ClickHouse) runs the same DDL, an insert, and the percentile
    query: the schema is not tied to 18.16."""
    try:
        import chdb  # noqa: F401
        from chdb import session
    except ImportError:
        pytest.skip("chdb is not installed (tests/setup.sh installs it)")
    ddl = harness.dbtap("schema", "clickhouse").stdout.decode()
    d = OUT / "chdb"
    shutil.rmtree(d, ignore_errors=True)
    s = session.Session(str(d))
    try:
        s.query("CREATE DATABASE IF NOT EXISTS db")
        s.query("USE db")
        for stmt in [x.strip() for x in ddl.split(";") if x.strip()]:
            s.query(stmt.replace("dbtap_", "db.dbtap_"))
        s.query("INSERT INTO db.dbtap_minutes (ts, host, query_id, count, service_buckets, "
                "service_counts, service_min_ns, service_max_ns) VALUES "
                "(1700000040, 'h', 'q', 3, [100, 300], [2, 1], 100, 300), "
                "(1700000100, 'h', 'q', 2, [300, 2000], [1, 1], 300, 3500000)")
        sql = quantile_sql("sumMap(service_buckets, service_counts)",
                           "minIf(service_min_ns, notEmpty(service_counts))",
                           "max(service_max_ns)")
        out = str(s.query(sql + " FROM db.dbtap_minutes GROUP BY protocol, command, query_id",
                          "TabSeparated")).split()
        # Ranks 3, 5, 5 of the buckets (100, 100, 300, 300, 2000): the midpoints of buckets
        # 300 and 2000 (within the exact min and max).
        def mid(i: int) -> int:
            lo, hi = bucket_range(i)
            return lo + (hi - lo) // 2
        assert (mid(300), mid(2000)) == (344, 3_416_063)
        assert out[-4:] == ["5", "344", "3416063", "3416063"], out
        hours = str(s.query("SELECT sumMerge(count) FROM db.dbtap_hours", "TabSeparated")).strip()
        assert hours == "5"
    finally:
        s.close()


def bucket_range(i: int) -> tuple[int, int]:
    """The value range of histogram bucket i (grouping power 7), as aggregate::Latency says."""
    s = max((i >> 7) - 1, 0)
    q = i - (s << 7)
    return q << s, ((q + 1) << s) - 1


# -- live, with ClickHouse stopped mid-run ----------------------------------------------------

def capture_unavailable(why: str):
    if REQUIRE:
        pytest.fail(f"live capture cannot run here ({why}) and DBTAP_REQUIRE_CAPTURE is set")
    pytest.skip(f"live capture cannot run here: {why} (set DBTAP_REQUIRE_CAPTURE=1 to fail instead)")


RATE = 100
CMDS = {
    "set": (b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", b"+OK\r\n"),
    "get": (b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"$1\r\nv\r\n"),
    "incr": (b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n", None),
}


def paced_client(port: int, stop: threading.Event, sent: collections.Counter) -> None:
    order = ["set", "get", "incr"]
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        k, next_t = 0, time.time()
        while not stop.is_set():
            delay = next_t - time.time()
            if delay > 0:
                time.sleep(delay)
            next_t += 1.0 / RATE
            cmd = order[k % 3]
            k += 1
            req, want = CMDS[cmd]
            s.sendall(req)
            got = b""
            while not got.endswith(b"\r\n"):
                chunk = s.recv(64)
                assert chunk, "redis closed the connection"
                got += chunk
            assert want is None or got == want, got
            sent[cmd] += 1


def test_live_run_with_clickhouse_stopped_loses_and_doubles_nothing(ch):
    spool = OUT / "live-spool"
    shutil.rmtree(spool, ignore_errors=True)
    srv = rh.RedisServer(REDIS_PORT, OUT / "redis")
    srv.start()
    try:
        live = live_harness.Live("-i", "lo", "--port", REDIS_PORT, "--interval", "1s",
                                 "--clickhouse", URL, "--clickhouse-spool", spool,
                                 "--host-name", "live-host", "--clickhouse-wait", "30s",
                                 "--listen", "127.0.0.1:38503")
        try:
            live.start()
        except RuntimeError as e:
            if "CAP_NET_RAW" in str(e) or "Operation not permitted" in str(e):
                capture_unavailable(str(e).splitlines()[-1][:300])
            raise
        sent: collections.Counter = collections.Counter()
        stop = threading.Event()
        client = threading.Thread(target=paced_client, args=(REDIS_PORT, stop, sent))
        client.start()
        try:
            time.sleep(7)  # the feeder hands rows over every 5 s: some reach the server
            ch.stop()
            time.sleep(8)  # batches spool and are retried with backoff
            with urllib.request.urlopen("http://127.0.0.1:38503/metrics", timeout=10) as r:
                metrics = r.read().decode()
            ch.start()
            time.sleep(4)
        finally:
            stop.set()
            client.join()
        time.sleep(1.5)  # the last replies are on the wire before the stop
        live.stop(timeout=60)
    finally:
        srv.stop()
    got = {cmd: int(n) for cmd, n in ch.rows(
        "SELECT command, sum(count) FROM dbtap_minutes WHERE host = 'live-host' GROUP BY command")}
    assert got == dict(sent), (got, dict(sent))
    assert sum(sent.values()) > 1000
    # The outage was real: the sink counted failed attempts and held batches meanwhile.
    m = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
         if line.startswith("dbtap_clickhouse_")}
    assert m["dbtap_clickhouse_retries_total"] >= 1, metrics
    assert m["dbtap_clickhouse_spooled_batches"] >= 1, metrics
    assert not list(spool.glob("*.chb")), "everything delivered at the stop"
    err = live.stderr
    assert "dbtap: warning: clickhouse:" in err and "delivering again after" in err, err
