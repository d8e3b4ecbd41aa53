"""The Grafana dashboard (deploy/grafana/dbtap.json) against a real Prometheus scraping a live
dbtap with traffic, and /metrics checked by `promtool check metrics`.

Grafana itself cannot be installed here; what can be checked without it is that every PromQL
expression of the dashboard is valid and returns series on real data:

- two private Redis 7.0 servers (127.0.0.1:38552 and :38553) get SET/GET traffic and errors
  (WRONGTYPE, unknown commands) from a client thread for the whole test;
- `dbtap live --source packet -i lo --listen` captures both; Prometheus 2.42 (Debian's)
  scrapes it every second;
- every `expr` of every panel target, and the metric selector of every `label_values()`
  variable, is run through Prometheus's HTTP API with the dashboard variables set to "All"
  (`.*`), `$__rate_interval` 10s and `$__range` 1m: each must return at least one series
  (and no NaN-only result for the quantiles). Then the per-server panels again with `$server`
  set to each server in turn: each returns series, only of that server.
- `promtool check metrics` on the live exposition with those series: no complaint.
- The `code` label tells the truth: once the traffic stops, each server's errors by code in
  Prometheus equal the server's own `INFO errorstats` (WRONGTYPE, ERR), and none is left
  without a code.
- Sub-100 µs latencies are resolved: Redis GETs over loopback land in the buckets below 100 µs
  (le 1e-05, 2.5e-05, 5e-05), which did not exist before.

Ports 38552-38559. Files: tests/out/grafana.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "grafana"
DASHBOARD = harness.REPO / "deploy" / "grafana" / "dbtap.json"
REDIS_PORTS = (38552, 38553)
LISTEN = 38554
PROM_PORT = 38555
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
RATE = "10s"
RANGE = "1m"


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def poll(what: str, fn, deadline: float = 60.0, every: float = 0.25):
    end = time.monotonic() + deadline
    last = None
    while True:
        try:
            last = fn()
        except (OSError, ValueError) as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > end:
            pytest.fail(f"{what}: not reached after {deadline:.0f} s; last: {last!r}")
        time.sleep(every)


class Traffic(threading.Thread):
    """SET/GET one at a time (unpipelined, so each GET is timed alone) on both servers, and a
    WRONGTYPE and an unknown-command error every 20 rounds, until stopped. Counts its own
    requests and error replies."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop_ev = threading.Event()
        self.requests = 0
        self.errors = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            conns = [rh.RawConn(port=p) for p in REDIS_PORTS]
            for c in conns:
                c.send("RPUSH", "alist", "x")
                c.read()
            i = 0
            while not self.stop_ev.is_set():
                for c in conns:
                    for args in (("SET", f"k{i % 100}", "v"), ("GET", f"k{i % 100}")):
                        c.send(*args)
                        c.read()
                        self.requests += 1
                    if i % 20 == 0:
                        for args in (("GET", "alist"), ("NOSUCHCOMMAND", "x")):
                            c.send(*args)
                            t, _ = c.read()
                            self.requests += 1
                            self.errors += t == "-"
                i += 1
                if i % 50 == 0:
                    time.sleep(0.01)  # about 2-4k requests/s: the machine is shared
            for c in conns:
                c.close()
        except BaseException as e:  # reported by the test
            self.failure = e


class Prometheus:
    def __init__(self, target: str):
        self.dir = OUT / "prometheus"
        self.target = target
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Prometheus":
        self.dir.mkdir(parents=True)
        cfg = self.dir / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: dbtap\n    static_configs:\n"
            f"      - targets: ['{self.target}']\n")
        harness.wait_port_free(PROM_PORT)
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{PROM_PORT}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "prometheus.log", "wb"))

        def ready():
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited: {(self.dir / 'prometheus.log').read_text()}")
            return http_get(f"http://127.0.0.1:{PROM_PORT}/-/ready", timeout=2)[0] == 200
        poll("prometheus ready", ready)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            harness.end_process(self.proc, 30)
            self.proc = None

    def query(self, expr: str) -> list[dict]:
        q = urllib.parse.urlencode({"query": expr})
        status, body = http_get(f"http://127.0.0.1:{PROM_PORT}/api/v1/query?{q}")
        d = json.loads(body)
        assert status == 200 and d["status"] == "success", (expr, status, d)
        assert d["data"]["resultType"] == "vector", (expr, d["data"]["resultType"])
        return d["data"]["result"]


@pytest.fixture(scope="module")
def live():
    """(prometheus, traffic, dbtap metrics URL) with traffic running and at least 15 s of
    scrapes of it."""
    harness.dbtap_path()
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    servers = [rh.RedisServer(p, OUT / f"redis-{p}") for p in REDIS_PORTS]
    dbtap = None
    prom = None
    traffic = Traffic()
    try:
        for s in servers:
            s.start()
        harness.wait_port_free(LISTEN)
        args = [harness.dbtap_path(), "live", "--source", "packet", "-i", "lo",
                *[x for p in REDIS_PORTS for x in ("--port", str(p))],
                "--listen", f"127.0.0.1:{LISTEN}", "--interval", "0", "--duration", "600s"]
        err = OUT / "dbtap.stderr"
        dbtap = subprocess.Popen([str(a) for a in args], stdin=subprocess.DEVNULL,
                                 stdout=open(OUT / "dbtap.stdout", "wb"), stderr=open(err, "wb"))

        def capturing():
            if dbtap.poll() is not None:
                pytest.fail(f"dbtap live exited: {err.read_text()}")
            return "metrics on http://" in err.read_text()
        poll("dbtap live start line", capturing, deadline=30)
        prom = Prometheus(f"127.0.0.1:{LISTEN}").start()
        traffic.start()
        t0 = time.time()
        poll("15 s of scrapes with traffic",
             lambda: prom.query('timestamp(up{job="dbtap"}) == bool 1') is not None
             and time.time() - t0 > 15 and prom.query('sum(dbtap_queries_total) > 1000'),
             deadline=90)
        assert traffic.failure is None, traffic.failure
        yield prom, traffic, f"http://127.0.0.1:{LISTEN}/metrics", servers
    finally:
        traffic.stop_ev.set()
        traffic.join(10)
        if prom is not None:
            prom.stop()
        if dbtap is not None and dbtap.poll() is None:
            dbtap.send_signal(signal.SIGINT)
            try:
                dbtap.wait(timeout=30)
            except subprocess.TimeoutExpired:
                dbtap.kill()
                dbtap.wait()
        for s in servers:
            s.stop()


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(d: dict):
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])


def targets(d: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every target."""
    return [(p["title"], t["expr"]) for p in all_panels(d) for t in p.get("targets", [])]


def substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE).replace("$__range", RANGE)
    expr = expr.replace("$__interval", "5s")
    for k, v in values.items():
        expr = expr.replace(f"${k}", v)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def variables(d: dict) -> list[dict]:
    return [v for v in d["templating"]["list"] if v["type"] == "query"]


ALL = {"job": ".*", "instance": ".*", "server": ".*", "protocol": ".*"}


def test_dashboard_is_well_formed():
    d = dashboard()
    ids = [p["id"] for p in all_panels(d)]
    assert len(ids) == len(set(ids)), ids
    assert {v["name"] for v in d["templating"]["list"]} == {"datasource", *ALL}
    ts = targets(d)
    assert len(ts) >= 20, len(ts)
    for p in all_panels(d):
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p.get("targets"), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
    # What the issue asks the dashboard to show.
    text = json.dumps(d)
    for want in ["histogram_quantile", "dbtap_query_service_seconds_sum",
                 "dbtap_query_errors_total", "dbtap_capture_kernel_drops_total",
                 "dbtap_tcp_gaps_total", "by (server"]:
        assert want in text, want


def test_every_expression_returns_series(live):
    prom, traffic, _, _ = live
    d = dashboard()
    empty = []
    for title, expr in targets(d):
        q = substitute(expr, ALL)
        r = prom.query(q)
        values = [float(s["value"][1]) for s in r]
        if not r or all(math.isnan(v) for v in values):
            empty.append((title, q, r))
    assert not empty, "expressions without series:\n" + "\n".join(map(str, empty))
    for v in variables(d):
        m = re.fullmatch(r"label_values\((.*), *(\w+)\)", v["definition"])
        assert m, v["definition"]
        r = prom.query(substitute(m.group(1), ALL))
        got = {s["metric"].get(m.group(2)) for s in r} - {None}
        assert got, (v["name"], v["definition"])
    assert traffic.failure is None, traffic.failure
    assert traffic.errors > 0


def test_per_server(live):
    prom, _, _, _ = live
    d = dashboard()
    servers = {s["metric"]["server"] for s in prom.query("dbtap_queries_total")} - {"other"}
    assert servers == {f"127.0.0.1:{p}" for p in REDIS_PORTS}, servers
    checked = 0
    for server in sorted(servers):
        for title, expr in targets(d):
            if "$server" not in expr:
                continue
            r = prom.query(substitute(expr, {**ALL, "server": server}))
            assert r, (title, server, expr)
            for s in r:
                assert s["metric"].get("server", server) == server, (title, s)
            checked += 1
    assert checked >= 2 * 15, checked


def test_promtool_and_sub_100us_buckets(live):
    prom, _, url, _ = live
    status, body = http_get(url)
    assert status == 200
    text = body.decode()
    (OUT / "metrics.txt").write_text(text)
    # The exposition has what the lint must see: per-group series with server and code labels.
    assert re.search(r'dbtap_query_errors_total\{[^}]*server="127\.0\.0\.1:3855[23]"[^}]*'
                     r'code="WRONGTYPE"\} [1-9]', text), text[:3000]
    assert "dbtap_build_info{" in text and "process_resident_memory_bytes " in text
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == b"", r
    # promtool does lint: a counter without _total is reported.
    bad = b"# HELP x_count A.\n# TYPE x_count counter\nx_count 1\n"
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=bad, capture_output=True,
                       timeout=60)
    assert r.returncode != 0 and b"_total" in r.stdout + r.stderr, r

    le = prom.query('sum by (le) (dbtap_query_duration_seconds_bucket{command="get"})')
    by_le = {s["metric"]["le"]: float(s["value"][1]) for s in le}
    for bound in ("1e-05", "2.5e-05", "5e-05", "0.0001"):
        assert bound in by_le, by_le
    below_100us = by_le["0.0001"]
    assert below_100us > 0, by_le
    # Some GETs resolved below 100 us, and the buckets below it split them.
    assert by_le["5e-05"] > 0 or by_le["2.5e-05"] > 0, by_le
    assert by_le["1e-05"] < below_100us, by_le


def test_error_codes_equal_the_servers_errorstats(live):
    """Last in the file: stops the traffic."""
    prom, traffic, _, servers = live
    traffic.stop_ev.set()
    traffic.join(10)
    assert traffic.failure is None, traffic.failure
    t_stop = time.time()
    poll("a scrape 2 s after the traffic stopped",
         lambda: (r := prom.query('timestamp(up{job="dbtap"})')) and
         float(r[0]["value"][1]) >= t_stop + 2.0)
    total = 0
    for srv in servers:
        truth = srv.snapshot()["errorstats"]
        assert set(truth) == {"WRONGTYPE", "ERR"}, truth
        got = {s["metric"]["code"]: float(s["value"][1]) for s in prom.query(
            f'sum by (code) (dbtap_query_errors_total{{server="127.0.0.1:{srv.port}"}})')}
        assert got == {"WRONGTYPE": truth["WRONGTYPE"], "ERR": truth["ERR"], "none": 0.0}, \
            (srv.port, got, truth)
        total += sum(truth.values())
    assert total == traffic.errors
