"""`dbtap live` read by a real Prometheus, and `dbtap top` driven in a real terminal (tmux).

The workload is the private Redis 7.0 on 127.0.0.1:36379 (redis_harness.RedisServer); the truth
is its own `INFO commandstats` delta over the workload, read over the UNIX socket (not on the
wire), folded to dbtap's command names (redis_harness.wire_requests), and for the scripted RESP
workloads also the client's own ledger of what it sent and what came back.

- Prometheus 2.42 (Debian's `prometheus`) scrapes `dbtap live --listen` every second; the test
  reads the series back through Prometheus's HTTP API (`/api/v1/query`, `/api/v1/targets`), so
  the exposition is also checked by a real parser: per-command `dbtap_queries_total` ==
  commandstats, `sum()` == the total, a finite p99 from `histogram_quantile` over the buckets,
  no kernel drops, agent memory > 0, the target up. `/api/digest?window=total` and the final
  digest on SIGINT say the same; a bad window is a 400.
- `--metrics-top 2` over 5 distinct commands: exactly 2 exported groups plus "other", each
  exported series equal to its command's truth, "other" the sum of the rest.
- `dbtap top` in a 160x40 tmux pane with Redis traffic running: the table, the sort keys
  (t/c/p/e), the window toggle (w), `q` exiting with status 0; and without a terminal a
  one-line error.
"""

from __future__ import annotations

import collections
import json
import math
import os
import re
import shutil
import signal
import socket
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

PORT = 36379
OUT = harness.REPO / "tests" / "out" / "live_ui"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
TMUX = shutil.which("tmux") or "/usr/bin/tmux"
BENCH_N = 20000
DEADLINE = 60.0  # generous: 2 shared cores, a scrape every second, a snapshot every second


# -------------------------------------------------------------------------------------------------
# helpers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def poll(what: str, fn, deadline: float = DEADLINE, every: float = 0.25):
    """fn() until it returns something truthy; fails with `what` and the last value after
    `deadline` seconds."""
    end = time.monotonic() + deadline
    last = None
    while True:
        try:
            last = fn()
        except (OSError, ValueError) as e:  # not up yet
            last = e
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > end:
            pytest.fail(f"{what}: not reached after {deadline:.0f} s; last: {last!r}")
        time.sleep(every)


class DbtapLive:
    """`dbtap live -i lo --port 36379 --listen 127.0.0.1:0 --interval 0 --format json`; the
    address it listens on is read from its start line on stderr."""

    def __init__(self, name: str, *extra: str):
        self.stderr_path = OUT / f"{name}.dbtap.stderr"
        self.stdout_path = OUT / f"{name}.dbtap.stdout"
        self.args = [str(harness.dbtap_path()), "live", "--source", "packet", "-i", "lo", "--port", str(PORT),
                     "--listen", "127.0.0.1:0", "--interval", "0", "--duration", "300s",
                     "--format", "json", "--limit", "0", *extra]
        self.proc: subprocess.Popen | None = None
        self.addr = ""

    def start(self) -> "DbtapLive":
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                     stdout=open(self.stdout_path, "wb"),
                                     stderr=open(self.stderr_path, "wb"))

        def listening():
            if self.proc.poll() is not None:
                pytest.fail(f"dbtap live exited ({self.proc.returncode}): "
                            f"{self.stderr_path.read_text()}")
            m = re.search(r"metrics on http://([0-9.]+:\d+)/metrics", self.stderr_path.read_text())
            return m and m.group(1)
        self.addr = poll("dbtap live start line", listening, deadline=30)
        return self

    def url(self, path: str) -> str:
        return f"http://{self.addr}{path}"

    def stop(self) -> tuple[int, str, str]:
        """SIGINT; (exit status, stdout, stderr)."""
        if self.proc is None:
            return (-1, "", "")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc, self.proc = self.proc.returncode, None
        return rc, self.stdout_path.read_text(), self.stderr_path.read_text()


class Prometheus:
    """A private Prometheus scraping one target every second, TSDB and log under OUT."""

    def __init__(self, name: str, target: str):
        self.dir = OUT / f"{name}.prometheus"
        self.target = target
        self.port = 0
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Prometheus":
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        cfg = self.dir / "prometheus.yml"
        cfg.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: dbtap\n"
            "    static_configs:\n"
            f"      - targets: ['{self.target}']\n")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "prometheus.log", "wb"))

        def ready():
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited ({self.proc.returncode}): "
                            f"{(self.dir / 'prometheus.log').read_text()[-2000:]}")
            return http_get(f"http://127.0.0.1:{self.port}/-/ready", timeout=2)[0] == 200
        poll("prometheus /-/ready", ready, deadline=60)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        harness.end_process(self.proc, 30)
        self.proc = None

    def api(self, path: str, **params) -> dict:
        q = urllib.parse.urlencode(params)
        status, body, _ = http_get(f"http://127.0.0.1:{self.port}{path}?{q}")
        d = json.loads(body)
        assert status == 200 and d["status"] == "success", (path, params, status, d)
        return d["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("/api/v1/query", **params)
        assert data["resultType"] == "vector", data
        return data["result"]

    def scalar(self, expr: str, at: float | None = None) -> float:
        r = self.query(expr, at)
        assert len(r) == 1, (expr, r)
        return float(r[0]["value"][1])

    def by(self, expr: str, label: str) -> dict[str, float]:
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in self.query(expr)}

    def target_health(self) -> dict:
        """The dbtap target ({} until service discovery has it)."""
        ts = [t for t in self.api("/api/v1/targets")["activeTargets"]
              if t["labels"].get("job") == "dbtap"]
        assert len(ts) <= 1, ts
        return ts[0] if ts else {}

    def last_scrape(self) -> float:
        """Unix time of the newest scrape of dbtap Prometheus stored (0: none)."""
        r = self.query('timestamp(up{job="dbtap"})')
        return float(r[0]["value"][1]) if r else 0.0

    def wait_scrapes_after(self, t: float) -> None:
        """Until Prometheus holds a scrape taken at least 2 s after the Unix time `t`: dbtap's
        snapshot (refreshed every second) taken after `t` is in it."""
        poll(f"a scrape 2 s after {t:.1f}", lambda: self.last_scrape() >= t + 2.0)


def resp_run(port: int, plan: list[tuple[tuple, int]], batch: int = 100) -> dict:
    """Sends every command of `plan` ((args, times), in order) over one connection, pipelined
    `batch` at a time, reading every reply. The client's ledger: {command: {requests, errors}}
    with the command lower-cased as dbtap names it."""
    c = rh.RawConn(port=port)
    ledger: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    try:
        cmds = [args for args, n in plan for _ in range(n)]
        for i in range(0, len(cmds), batch):
            chunk = cmds[i:i + batch]
            c.s.sendall(b"".join(rh.resp_cmd(*a) for a in chunk))
            for a in chunk:
                t, _ = c.read()
                name = str(a[0]).lower()
                ledger[name]["requests"] += 1
                ledger[name]["errors"] += t == "-"
    finally:
        c.close()
    return {k: dict(v) for k, v in ledger.items()}


def truth_of(srv, before: dict) -> dict[str, dict]:
    after = srv.snapshot()
    return rh.wire_requests(rh.stats_delta(before, after), srv.socket_calls)


def group_series(result: list[dict]) -> list[tuple[dict, float]]:
    return [(s["metric"], float(s["value"][1])) for s in result]


# -------------------------------------------------------------------------------------------------
# fixtures

@pytest.fixture(scope="module")
def rs():
    harness.dbtap_path()  # "dbtap binary not found at ..." before anything starts
    OUT.mkdir(parents=True, exist_ok=True)
    srv = rh.RedisServer(PORT, OUT / "server")
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def live_prom(request):
    """Starts dbtap live (with the marker's extra args) and a Prometheus scraping it; waits for
    the target to be up (a scrape before the workload); stops both, Prometheus first."""
    started: list = []

    def start(name: str, *extra: str):
        d = DbtapLive(name, *extra).start()
        started.append(d)
        p = Prometheus(name, d.addr).start()
        started.append(p)
        poll("dbtap target up in Prometheus",
             lambda: p.target_health().get("health") == "up" and p.last_scrape() > 0)
        return d, p

    try:
        yield start
    finally:
        for x in reversed(started):
            if isinstance(x, Prometheus):
                x.stop()
        for x in started:
            if isinstance(x, DbtapLive):
                x.stop()


# -------------------------------------------------------------------------------------------------
# (A) Prometheus

def test_prometheus_reads_dbtap_live(rs, live_prom):
    dbtap, prom = live_prom("prom-setget")
    rs.reset_stats()
    rs.socket_calls.clear()
    before = rs.snapshot()

    # A few commands first, so the series exist in Prometheus before the benchmark: rate() over
    # the buckets then sees the benchmark as an increase.
    warm = resp_run(PORT, [(("SET", "warm", "x"), 50), (("GET", "warm"), 50)])
    assert warm == {"set": {"requests": 50, "errors": 0}, "get": {"requests": 50, "errors": 0}}
    poll("the warm-up in Prometheus", lambda: prom.by(
        'sum by (command) (dbtap_queries_total{protocol="redis"})', "command").get("get") == 50)

    rh.benchmark_run(rs, "set,get", BENCH_N, pipeline=16, clients=4)
    t_end = time.time()
    truth = truth_of(rs, before)
    # the workload did what was asked (redis-benchmark also sends 2 CONFIG GET)
    assert truth["set"]["requests"] == truth["get"]["requests"] == BENCH_N + 50, truth
    want = {k: float(v["requests"]) for k, v in truth.items()}
    want_err = {k: float(v["errors"]) for k, v in truth.items()}
    total = sum(want.values())

    per_cmd = 'sum by (command) (dbtap_queries_total{protocol="redis",query_id!="other"})'
    prom.wait_scrapes_after(t_end)
    got = poll("per-command dbtap_queries_total == INFO commandstats",
               lambda: (lambda g: g if g == want else None)(prom.by(per_cmd, "command")),
               deadline=DEADLINE)
    assert got == want

    # the raw series: one per command (Redis groups by command name), SET and GET among them
    series = group_series(prom.query('dbtap_queries_total{protocol="redis"}'))
    by_cmd = collections.defaultdict(list)
    for m, v in series:
        by_cmd[m["command"]].append((m, v))
    for cmd, fp in (("set", "SET"), ("get", "GET")):
        assert len(by_cmd[cmd]) == 1, by_cmd[cmd]
        m, v = by_cmd[cmd][0]
        assert (m["fingerprint"], v) == (fp, BENCH_N + 50.0), m
        assert re.fullmatch(r"[0-9A-F]{32}", m["query_id"]), m
    assert [v for _, v in by_cmd["other"]] == [0.0]  # every group exported on its own

    assert prom.scalar("sum(dbtap_queries_total)") == total
    assert prom.by('sum by (command) (dbtap_query_errors_total{query_id!="other"})',
                   "command") == want_err
    # every query was answered: the histogram counts them all
    assert prom.scalar("sum(dbtap_query_duration_seconds_count)") == total
    assert prom.scalar('sum(dbtap_query_duration_seconds_bucket{le="+Inf"})') == total

    # p99 over the 30 s up to 2 s after the benchmark: the warm-up scrape is in range, so the
    # buckets increased
    p99 = prom.scalar(
        "histogram_quantile(0.99, sum by (le) (rate(dbtap_query_duration_seconds_bucket[30s])))",
        at=t_end + 2)
    assert math.isfinite(p99) and 0 < p99 <= 10, p99

    assert prom.scalar("dbtap_capture_kernel_drops_total") == 0
    assert prom.scalar("dbtap_capture_packets_total") > 0
    assert prom.scalar("process_resident_memory_bytes") > 0
    assert prom.scalar("process_cpu_seconds_total") >= 0
    for h in ("dbtap_tcp_gaps_total", "dbtap_unparsed_bytes_total",
              "dbtap_malformed_messages_total", "dbtap_responses_without_request_total"):
        assert prom.scalar(h) == 0, h
    t = prom.target_health()
    assert (t["health"], t["lastError"], t["scrapeUrl"]) == \
        ("up", "", f"http://{dbtap.addr}/metrics"), t

    # the JSON digest since start: the same truth
    status, body, headers = http_get(dbtap.url("/api/digest?window=total"))
    assert status == 200 and headers["Content-Type"] == "application/json"
    d = json.loads(body)
    got_json = {k: {"requests": v["count"], "errors": v["errors"]}
                for k, v in rh.dbtap_by_command(d).items()}
    assert got_json == truth
    assert d["totals"]["queries"] == total
    for m, v in series:  # the same groups under the same ids
        if m["query_id"] != "other":
            g = [q for q in d["queries"] if q["id"] == m["query_id"]]
            assert len(g) == 1 and g[0]["count"] == v and g[0]["command"] == m["command"], (m, g)

    status, body, _ = http_get(dbtap.url("/api/digest?window=bogus"))
    assert status == 400
    assert body.decode().count("\n") == 1 and "bogus" in body.decode(), body

    # SIGINT: exit 0, the final JSON digest on stdout says the same
    rc, out, err = dbtap.stop()
    assert rc == 0, err
    final = {k: {"requests": v["count"], "errors": v["errors"]}
             for k, v in rh.dbtap_by_command(json.loads(out)).items()}
    assert final == truth


def test_prometheus_metrics_top_bounds_series(rs, live_prom):
    dbtap, prom = live_prom("prom-top2", "--metrics-top", "2")
    rs.reset_stats()
    rs.socket_calls.clear()
    before = rs.snapshot()
    plan = [(("SET", "k", "v"), 500), (("GET", "k"), 400), (("INCR", "n"), 300),
            (("LPUSH", "l", "x"), 200), (("SADD", "s", "m"), 100)]
    ledger = resp_run(PORT, plan)
    t_end = time.time()
    truth = truth_of(rs, before)
    assert ledger == truth == {
        "set": {"requests": 500, "errors": 0}, "get": {"requests": 400, "errors": 0},
        "incr": {"requests": 300, "errors": 0}, "lpush": {"requests": 200, "errors": 0},
        "sadd": {"requests": 100, "errors": 0}}
    total = 1500.0

    prom.wait_scrapes_after(t_end)
    poll("sum(dbtap_queries_total) == 1500",
         lambda: prom.query("sum(dbtap_queries_total)")
         and prom.scalar("sum(dbtap_queries_total)") == total)

    series = group_series(prom.query("dbtap_queries_total"))
    exported = [(m, v) for m, v in series if m["query_id"] != "other"]
    other = [(m, v) for m, v in series if m["query_id"] == "other"]
    assert len(exported) == 2, series
    assert len({m["query_id"] for m, _ in exported}) == 2
    assert {m["protocol"] for m, _ in series} == {"redis"}
    assert len(other) == 1 and other[0][0]["command"] == other[0][0]["fingerprint"] == "other"
    # each exported series is its command exactly; "other" is the rest
    for m, v in exported:
        assert v == truth[m["command"]]["requests"], (m, v)
    rest = sum(v["requests"] for k, v in truth.items()
               if k not in {m["command"] for m, _ in exported})
    assert other[0][1] == rest
    assert sum(v for _, v in series) == total
    # the other families are bounded the same way and add up too
    assert len(prom.query("dbtap_query_duration_seconds_count")) == 3
    assert prom.scalar("sum(dbtap_query_duration_seconds_count)") == total
    assert len(prom.query('dbtap_query_duration_seconds_bucket{le="+Inf"}')) == 3
    assert prom.scalar("count(count by (query_id) (dbtap_query_duration_seconds_bucket))") == 3

    # the JSON digest still has every group
    d = json.loads(http_get(dbtap.url("/api/digest?window=total"))[1])
    assert {k: {"requests": v["count"], "errors": v["errors"]}
            for k, v in rh.dbtap_by_command(d).items()} == truth
    rc, _, err = dbtap.stop()
    assert rc == 0, err


# -------------------------------------------------------------------------------------------------
# (B) dbtap top in tmux

class Tmux:
    """A private tmux server (own socket, no user config) whose panes stay after their process
    exits, so the exit status can be read."""

    def __init__(self, name: str):
        self.sock = f"dbtap-live-ui-{os.getpid()}"
        self.conf = OUT / f"{name}.tmux.conf"
        self.conf.write_text("set-option -g remain-on-exit on\nset-option -g history-limit 0\n")
        self.session = "dbtaptop"

    def run(self, *args: str, check: bool = True) -> str:
        r = subprocess.run([TMUX, "-L", self.sock, "-f", str(self.conf), *args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           stdin=subprocess.DEVNULL, timeout=30)
        if check and r.returncode != 0:
            pytest.fail(f"tmux {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r.stdout

    def start(self, command: str) -> None:
        self.run("new-session", "-d", "-s", self.session, "-x", "160", "-y", "40", command)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.session)

    def pane(self, fmt: str) -> str:
        return self.run("display-message", "-p", "-t", self.session, fmt).strip()

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def kill(self) -> None:
        self.run("kill-server", check=False)


def _rows(screen: str) -> list[str]:
    """protocol/command of each table row, top to bottom."""
    return re.findall(r"\b(redis/[a-z]+)\b", screen)


class Background:
    """Redis traffic until stopped, per batch: 20 GET, 10 SET, 5 LPUSH on a string (WRONGTYPE),
    so by count GET > SET > LPUSH, and LPUSH alone has errors. About 10 batches a second, at
    most MAX_BATCHES (GET stays under 10,000, which `dbtap top` shows exactly, not as "12.3k")."""

    MAX_BATCHES = 400

    def __init__(self):
        self.stop_ev = threading.Event()
        self.error: BaseException | None = None
        self.sent: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            plan = [(("SET", "bg", "v"), 2), (("GET", "bg"), 4), (("LPUSH", "bg", "x"), 1)] * 5
            for _ in range(self.MAX_BATCHES):
                if self.stop_ev.is_set():
                    break
                for k, v in resp_run(PORT, plan).items():
                    self.sent[k].update(v)
                self.stop_ev.wait(0.1)
        except BaseException as e:  # reported by the test
            self.error = e

    def stop(self):
        self.stop_ev.set()
        self.t.join(timeout=30)
        assert not self.t.is_alive()

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def _table(screen: str) -> dict[str, tuple[str, str]]:
    """{protocol/command: (Count, Errs)} of the table rows (# QPS Count Errs ... Cmd ...)."""
    out = {}
    for line in screen.splitlines():
        tok = line.split()
        cmd = [t for t in tok if t.startswith("redis/")]
        if cmd and tok[0].isdigit():
            out[cmd[0]] = (tok[2], tok[3])
    return out


def test_top_in_tmux(rs):
    OUT.mkdir(parents=True, exist_ok=True)
    tm = Tmux("top")
    dbtap = harness.dbtap_path()
    try:
        # The exit status is written by a shell around dbtap: tmux 3.3 marks a pane dead when
        # its pty closes and does not always fill in #{pane_dead_status} afterwards.
        exit_file = OUT / "top-exit-status"
        exit_file.unlink(missing_ok=True)
        tm.start(f"sh -c '{dbtap} top --source packet -i lo --port {PORT}; echo $? > {exit_file}'")
        # the view starts after the capture is open: traffic from now on is all seen
        poll("dbtap top on screen", lambda: "Sorted by: total time" in tm.screen()
             or tm.pane("#{pane_dead}") == "1", deadline=30)
        assert tm.pane("#{pane_dead}") == "0", tm.screen()
        rs.reset_stats()
        rs.socket_calls.clear()
        before = rs.snapshot()
        with Background() as bg:
            def shows(*want: str, first: str | None = None):
                def check():
                    if tm.pane("#{pane_dead}") == "1":
                        pytest.fail(f"dbtap top exited ({tm.pane('#{pane_dead_status}')}):\n"
                                    f"{tm.screen()}")
                    s = tm.screen()
                    rows = _rows(s)
                    ok = all(w in s for w in want) and (first is None or rows[:1] == [first])
                    return s if ok else None
                return poll(f"screen with {want} first row {first}", check)

            s = shows("Sorted by: total time", "Window: last", "redis/set", "redis/get")
            assert s.splitlines()[0].startswith("dbtap top - lo - up "), s
            assert "waiting for the first interval" not in s
            tm.keys("c")
            shows("Sorted by: count", "redis/set", first="redis/get")
            tm.keys("p")
            shows("Sorted by: p99", "redis/get", "redis/set")
            tm.keys("e")
            shows("Sorted by: errors", "redis/get", "redis/set", first="redis/lpush")
            tm.keys("w")
            s = shows("Window: since start", "Sorted by: errors", "redis/get", first="redis/lpush")
            (OUT / "top-screen.txt").write_text(s)
            tm.keys("t")
            shows("Sorted by: total time", "Window: since start")
        assert bg.error is None, bg.error
        # traffic stopped: since start, the screen's counts are INFO commandstats exactly
        truth = truth_of(rs, before)
        assert truth == {k: dict(v) for k, v in bg.sent.items()}, (truth, bg.sent)
        assert truth["lpush"]["errors"] == truth["lpush"]["requests"] > 0
        want = {f"redis/{k}": (str(v["requests"]), str(v["errors"])) for k, v in truth.items()}
        poll(f"since-start table == {want}", lambda: _table(tm.screen()) == want)
        (OUT / "top-screen-final.txt").write_text(tm.screen())
        tm.keys("q")
        poll("dbtap top exited after q", lambda: tm.pane("#{pane_dead}") == "1", deadline=30)
        status = poll("dbtap top's exit status", lambda: exit_file.exists()
                      and exit_file.read_text().strip(), deadline=30)
        assert status == "0", tm.screen()
        # the terminal is restored: the pane is back on the main screen
        assert tm.pane("#{alternate_on}") == "0"
    finally:
        tm.kill()


def test_top_needs_a_terminal():
    r = subprocess.run([str(harness.dbtap_path()), "top", "-i", "lo", "--port", str(PORT)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "needs a terminal" in lines[0], r.stderr
