"""The web UI in a real browser (issue 13): `dbtap ui CAPTURE...` serving real captures of a
private PostgreSQL 15 and a private Redis, read by headless Chromium (Playwright, the system's
/usr/bin/chromium), checked against the clients' own counts, `/api/...` and `dbtap digest`.

Captures (real servers, real tcpdump on lo, files under tests/out/ui/):
- `before`: PostgreSQL 127.0.0.1:38350, one connection running the three statements of
  test_diff.py's index-drop pair for 1.5 s with the index on `t.k`;
- `after`: the same after `DROP INDEX` (pg_stat_statements confirms the statement got slower);
- `redis`: Redis 127.0.0.1:38351, one connection sending SET and GET, counted by the client.
Each file is moved in time with `editcap -t` (before by -2 h, redis by -4 h) so that the three
lie in different minutes and hours: the history store keeps minutes, so a range can only tell
captures apart when they are in different minutes. Moving the timestamps changes no byte of
any packet.

Checked, each against truth (the clients' counts) and against what the same range gives in
`/api/top` and in `dbtap digest --format json` (with `--since/--until` or `--where` for the
same subset): the Top page's rows (ids, order, count, errors, p99) for the whole span, sorted
by load and by count; for one capture chosen in the range picker, typed into its from/to
fields, and for the last hour; for a server and a database filter chip, and for a search; the
Query page's summary (count, p50, p99 against the digest), its count and p99 series, heatmap
and distribution drawn, breakdown by database; the Compare page ranking the group that lost
its index first, as regressed, with both sides' counts, in the order of /api/compare and with
the same first group as `dbtap diff` of the two captures, also with `before` and `after` in two
stores (`dbtap ui --store A --compare-store B`); the Live page refreshing while
`dbtap live --listen` captures a running Redis workload, its lines equal to /api/live's.
Screenshots of the four pages are written to tests/out/ui/ (the README's come from
screenshots.py).

Run: `cargo build --release -p dbtap && DBTAP_BIN=target/release/dbtap /usr/bin/python3 -m
pytest -q tests/integration/test_ui.py`.
"""

from __future__ import annotations

import collections
import datetime
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import pg_harness as ph  # noqa: E402
import redis_harness as rh  # noqa: E402
import test_diff as td  # noqa: E402  (the index-drop workload: schema, statements, client loop)
from ui_harness import Browser, Ui, wait_until  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "ui"
PG_PORT = 38350
REDIS_PORT = 38351
UI_PORT = 38352
LIVE_PORT = 38353
STORES_UI_PORT = 38349  # test_compare_two_stores: a free port of test_store.py's range
SHIFT_BEFORE_S = -2 * 3600
SHIFT_REDIS_S = -4 * 3600
PORTS = ("--port", str(PG_PORT), "--port", str(REDIS_PORT))
STATEMENTS = [td.LOOKUP, td.BY_ID, td.BUMP]
# A percentile from the store is the percentile of the merged histogram: equal to the digest's
# within the histogram's stated error (0.4%; a little more for rounding of µs floats).
REL = 0.006


def shifted(pcap: Path, seconds: int) -> Path:
    """The capture with every timestamp moved by `seconds` (editcap -t), as a classic pcap."""
    out = pcap.with_name(pcap.stem + "-moved.pcap")
    subprocess.run(["editcap", "-F", "pcap", "-t", str(seconds), str(pcap), str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return out


def pg_capture(pg: ph.PgServer, name: str, seed: int) -> tuple[Path, collections.Counter]:
    cap = ph.Tcpdump(OUT / f"{name}.pcap", PG_PORT, iface="lo")
    try:
        cap.start()
        counts = td.run_workload(pg, 1.5, STATEMENTS, seed)
        cap.sync()
        stats = cap.stop()
    finally:
        cap.stop()
    ph.check_dropped(stats)
    return cap.out, counts


def redis_workload(srv: rh.RedisServer, sets: int, gets: int) -> collections.Counter:
    c = srv.client()
    counts: collections.Counter = collections.Counter()
    try:
        for i in range(max(sets, gets)):
            if i < sets:
                c.set(f"k:{i % 50}", "v" * (i % 40))
                counts["SET"] += 1
            if i < gets:
                c.get(f"k:{i % 50}")
                counts["GET"] += 1
    finally:
        c.close()
    return counts


def redis_capture(srv: rh.RedisServer) -> tuple[Path, collections.Counter]:
    c = srv.client()
    c.ping()  # connect before the capture: the capture holds only the counted commands
    cap = ph.Tcpdump(OUT / "redis.pcap", REDIS_PORT, iface="lo")
    try:
        cap.start()
        counts = redis_workload(srv, 400, 700)
        cap.sync()
        stats = cap.stop()
    finally:
        cap.stop()
        c.close()
    ph.check_dropped(stats)
    return cap.out, counts


def start_server(srv, tries: int = 4):
    """Starts `srv`; retried when the port cannot be bound yet: the test ports lie inside the
    kernel's ephemeral range, so a client socket of an earlier run (the browser's, to the UI
    port) can hold one as its source port in TIME-WAIT for up to 60 s."""
    for i in range(tries):
        try:
            return srv.start()
        except RuntimeError as e:
            if i == tries - 1:
                raise
            print(f"\nstarting {type(srv).__name__} on {srv.port} failed, retrying: {str(e)[-200:]}")
            time.sleep(20)


class Data:
    """The three captures (moved in time), the clients' counts, and one `dbtap ui` over them."""

    def __init__(self):
        self.files: dict[str, Path] = {}
        self.counts: dict[str, collections.Counter] = {}
        self.exec_ms: dict[str, float] = {}
        self.ui: Ui | None = None


@pytest.fixture(scope="module")
def data():
    OUT.mkdir(parents=True, exist_ok=True)
    d = Data()
    pg = ph.PgServer(PG_PORT, OUT / "pg")
    redis = rh.RedisServer(REDIS_PORT, OUT / "redis")
    try:
        start_server(pg)
        td.load_schema(pg)
        start_server(redis)
        pg.pgss_reset()
        before, d.counts["before"] = pg_capture(pg, "before", seed=1)
        d.exec_ms["before"] = pg.sql("SELECT mean_exec_time FROM pg_stat_statements "
                                     "WHERE query LIKE 'SELECT v FROM t WHERE k =%'")[0][0]
        with ph.closing(pg.admin_conn(ph.DB)) as c, c.cursor() as cur:
            cur.execute("DROP INDEX t_k")
        pg.pgss_reset()
        after, d.counts["after"] = pg_capture(pg, "after", seed=2)
        d.exec_ms["after"] = pg.sql("SELECT mean_exec_time FROM pg_stat_statements "
                                    "WHERE query LIKE 'SELECT v FROM t WHERE k =%'")[0][0]
        red, d.counts["redis"] = redis_capture(redis)
    finally:
        redis.stop()
        pg.stop()
    # The server's own word: the statement that lost its index got slower.
    assert d.exec_ms["after"] > 3 * d.exec_ms["before"], d.exec_ms
    d.files = {"before": shifted(before, SHIFT_BEFORE_S), "after": after,
               "redis": shifted(red, SHIFT_REDIS_S)}
    d.ui = Ui(UI_PORT, d.files["before"], d.files["after"], d.files["redis"], *PORTS)
    d.ui.start()
    try:
        yield d
    finally:
        d.ui.stop()


@pytest.fixture()
def browser():
    with Browser() as b:
        yield b


# ---- helpers ---------------------------------------------------------------------------------

def rfc3339(ts: int) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def digest(d: Data, *extra: str, files=None) -> dict:
    return harness.digest(*(files or d.files.values()), extra=(*PORTS, *extra))


def digest_range(d: Data, frm: int, to: int, *extra: str) -> dict:
    return digest(d, "--since", rfc3339(frm), "--until", rfc3339(to), *extra)


def digest_groups(dg: dict) -> dict[str, dict]:
    return {q["id"]: q for q in dg["queries"] if not q.get("overflow")}


def table_rows(page) -> list[dict]:
    """What the Top page's table shows, row by row (numbers from the cells' data-value, and the
    cells' text, which is what a reader sees)."""
    return page.eval_on_selector_all("#top-table tbody tr[data-id]", """rows => rows.map(r => {
        const num = (c) => { const v = r.querySelector('td.' + c).dataset.value;
                             return v === '' ? null : Number(v); };
        return { id: r.dataset.id, protocol: r.dataset.protocol, command: r.dataset.command,
          fingerprint: r.querySelector('td.fp a').textContent,
          count: num('count'), count_text: r.querySelector('td.count').textContent,
          errors: num('errors'), p99: num('p99'), p99_text: r.querySelector('td.p99').textContent,
          load: num('load') }; })""")


def group_of(rows: list[dict], needle: str) -> dict:
    found = [r for r in rows if needle in r["fingerprint"].lower()]
    assert len(found) == 1, (needle, [r["fingerprint"] for r in rows])
    return found[0]


def close(a: float, b: float, rel: float = REL) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 0.5  # + 0.5 µs: the JSON's rounding


def check_rows(rows: list[dict], api: dict, dg: dict) -> None:
    """The page shows exactly the API's groups, in its order, with its numbers; and each group's
    count and p99 equal the digest's for the same range and filter."""
    assert [r["id"] for r in rows] == [g["id"] for g in api["groups"]]
    by_id = digest_groups(dg)
    assert set(by_id) == {r["id"] for r in rows}, (sorted(by_id), [r["id"] for r in rows])
    for r, g in zip(rows, api["groups"]):
        assert (r["count"], r["errors"]) == (g["count"], g["errors"]), (r, g)
        assert r["count_text"].replace(",", "") == str(g["count"])
        q = by_id[r["id"]]
        assert r["count"] == q["count"], (r, q["count"])
        if g["p99_us"] is None:  # no timed event (a PostgreSQL Terminate has no reply)
            assert r["p99"] is None and r["p99_text"] == "–" and q["service_us"]["p99"] is None
            continue
        assert r["p99"] == pytest.approx(g["p99_us"])
        assert close(r["p99"], q["service_us"]["p99"]), (r, q["service_us"])
    assert sum(r["count"] for r in rows) == dg["totals"]["queries"]


def span_of(d: Data) -> tuple[int, int]:
    m = d.ui.api("meta")
    return m["span"]["from"], m["span"]["to"]


# ---- Top -------------------------------------------------------------------------------------

def test_top_all_equals_clients_api_and_digest(data, browser):
    frm, to = span_of(data)
    page = browser.open(f"{data.ui.base}/")
    page = browser.act(lambda: page.click("#range-presets button[data-range=all]"))
    rows = table_rows(page)
    api = data.ui.api("top", **{"from": frm, "to": to}, sort="load", limit=50, points=30)
    check_rows(rows, api, digest(data))
    # Truth: every group counted what its client sent, over both PostgreSQL captures and Redis.
    c = data.counts
    assert group_of(rows, "from t where k =")["count"] == c["before"]["lookup"] + c["after"]["lookup"]
    assert group_of(rows, "from t where id =")["count"] == c["before"]["by_id"] + c["after"]["by_id"]
    assert group_of(rows, "update counters")["count"] == c["before"]["bump"] + c["after"]["bump"]
    redis_rows = {r["command"].upper(): r for r in rows if r["protocol"] == "redis"}
    assert redis_rows["SET"]["count"] == c["redis"]["SET"]
    assert redis_rows["GET"]["count"] == c["redis"]["GET"]
    # Sorted by load, the statement that lost its index is the top group.
    assert "from t where k =" in rows[0]["fingerprint"].lower(), rows
    assert rows == sorted(rows, key=lambda r: -r["load"])
    # The totals line says the same.
    assert page.inner_text("#total-count").replace(",", "") == str(api["totals"]["count"])
    browser.shot(OUT / "top.png")
    # Sorting by count reorders the rows the way /api/top does.
    page = browser.act(lambda: page.click("#top-table th[data-sort=count]"))
    rows = table_rows(page)
    assert "sort=count" in page.url
    api = data.ui.api("top", **{"from": frm, "to": to}, sort="count", limit=50, points=30)
    assert [r["id"] for r in rows] == [g["id"] for g in api["groups"]]
    assert [r["count"] for r in rows] == sorted((r["count"] for r in rows), reverse=True)


def test_range_picker_chooses_one_capture(data, browser):
    m = data.ui.api("meta")
    src = {Path(s["label"]).name: s for s in m["sources"]}
    before = src[data.files["before"].name]
    page = browser.open(f"{data.ui.base}/")
    page = browser.act(lambda: page.select_option("#range-source", label=Path(before["label"]).name))
    rows = table_rows(page)
    assert f"from={before['from']}" in page.url and f"to={before['to']}" in page.url
    api = data.ui.api("top", **{"from": before["from"], "to": before["to"]}, sort="load",
                      limit=50, points=30)
    # The store covers whole minutes: the range the API answered, for the digest's --since/--until.
    dg = digest_range(data, api["from"], api["to"])
    check_rows(rows, api, dg)
    c = data.counts["before"]
    assert group_of(rows, "from t where k =")["count"] == c["lookup"]
    assert group_of(rows, "from t where id =")["count"] == c["by_id"]
    assert group_of(rows, "update counters")["count"] == c["bump"]
    assert not any(r["protocol"] == "redis" for r in rows)
    # The same range typed into the from/to fields (the browser runs in UTC).
    page = browser.act(lambda: page.click("#range-presets button[data-range=all]"))
    assert group_of(table_rows(page), "from t where k =")["count"] > c["lookup"]
    local = lambda ts: datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M")  # noqa: E731
    page.fill("#range-from", local(before["from"]))
    page.fill("#range-to", local(before["to"]))
    page = browser.act(lambda: page.click("#range-apply"))
    assert f"from={before['from']}" in page.url and f"to={before['to']}" in page.url
    assert table_rows(page) == rows
    # The last hour of data (preset 1h): the `after` capture alone.
    page = browser.act(lambda: page.click("#range-presets button[data-range='-1h']"))
    rows = table_rows(page)
    c = data.counts["after"]
    assert group_of(rows, "from t where k =")["count"] == c["lookup"]
    assert group_of(rows, "update counters")["count"] == c["bump"]
    api = data.ui.api("top", **{"from": "-1h"}, sort="load", limit=50, points=30)
    check_rows(rows, api, digest_range(data, api["from"], api["to"]))


def test_filters_and_search(data, browser):
    frm, to = span_of(data)
    page = browser.open(f"{data.ui.base}/?from={frm}&to={to}")
    server = f"127.0.0.1:{REDIS_PORT}"
    page = browser.act(lambda: page.click(f"#dims [data-dim=server] .chip[data-value='{server}']"))
    assert "server=127.0.0.1" in page.url
    rows = table_rows(page)
    assert {r["protocol"] for r in rows} == {"redis"}, rows
    api = data.ui.api("top", **{"from": frm, "to": to}, server=server, sort="load", limit=50,
                      points=30)
    check_rows(rows, api, digest(data, "--where", f"server={server}"))
    assert {r["command"].upper(): r["count"] for r in rows} == dict(data.counts["redis"])
    # The chip is shown as a filter in force; removing it brings every group back.
    page = browser.act(lambda: page.click("#active-filters .chip[data-filter=server]"))
    assert "server=" not in page.url
    assert any(r["protocol"] == "postgres" for r in table_rows(page))
    # A database filter: only the PostgreSQL groups (Redis has no database name on the wire).
    page = browser.act(lambda: page.click(f"#dims [data-dim=database] .chip[data-value='{ph.DB}']"))
    rows = table_rows(page)
    assert {r["protocol"] for r in rows} == {"postgres"}, rows
    api = data.ui.api("top", **{"from": frm, "to": to}, database=ph.DB, sort="load", limit=50,
                      points=30)
    check_rows(rows, api, digest(data, "--where", f"db={ph.DB}"))
    # Search in the query text (with the database filter still on).
    page.fill("#search", "counters")
    page = browser.act(lambda: page.press("#search", "Enter"))
    rows = table_rows(page)
    assert len(rows) == 1 and "update counters" in rows[0]["fingerprint"].lower(), rows
    c = data.counts
    assert rows[0]["count"] == c["before"]["bump"] + c["after"]["bump"]
    # The URL is the view: opened afresh (a link, a reload) it shows the same rows and filters.
    assert f"database={ph.DB}" in page.url and "q=counters" in page.url
    page = browser.open(page.url)
    assert table_rows(page) == rows
    assert page.input_value("#search") == "counters"
    shown = page.eval_on_selector_all("#active-filters .chip", "cs => cs.map(c => c.dataset.filter)")
    assert sorted(shown) == ["database", "q"], shown


# ---- Query -----------------------------------------------------------------------------------

def test_query_page_shows_the_group(data, browser):
    frm, to = span_of(data)
    page = browser.open(f"{data.ui.base}/?from={frm}&to={to}")
    top = table_rows(page)[0]
    page = browser.act(lambda: page.click("#top-table tbody tr[data-id] td.fp a"))
    assert "/query?" in page.url and f"id={top['id']}" in page.url and f"from={frm}" in page.url
    api = data.ui.api("group", **{"from": frm, "to": to}, protocol=top["protocol"],
                      command=top["command"], id=top["id"], points=120)
    c = data.counts
    truth = c["before"]["lookup"] + c["after"]["lookup"]
    val = lambda sel: float(page.get_attribute(sel, "data-value"))  # noqa: E731
    assert val("#sum-count") == api["summary"]["count"] == truth == top["count"]
    assert val("#sum-p99") == pytest.approx(api["summary"]["p99_us"])
    q = digest_groups(digest(data))[top["id"]]
    assert q["count"] == truth and close(val("#sum-p99"), q["service_us"]["p99"]), q["service_us"]
    assert close(val("#sum-p50"), q["service_us"]["p50"]), q["service_us"]
    assert "from t where k =" in page.inner_text("#fingerprint").lower()
    # The count chart holds the API's series, which adds up to the group's count.
    series = page.evaluate("() => document.getElementById('chart-count')._chart.data[1]")
    assert sum(v or 0 for v in series) == truth
    assert sum(p["count"] for p in api["series"]) == truth
    p99s = page.evaluate("() => document.getElementById('chart-latency')._chart.data[3]")
    assert [v for v in p99s if v is not None] == \
        pytest.approx([p["p99_us"] for p in api["series"] if p["p99_us"] is not None])
    # The heatmap and the distribution were drawn (some pixels are not blank).
    for cv in ("heatmap", "distribution"):
        drawn = page.evaluate(f"""() => {{ const c = document.getElementById('{cv}');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; }}""")
        assert drawn > 100, cv
    assert sum(b["count"] for b in api["distribution"]) == truth
    # The breakdown: one database, all of the group's queries.
    db = page.get_attribute(f"#group-dims [data-dim=database] tr[data-value='{ph.DB}'] td.count",
                            "data-value")
    assert int(db) == truth
    browser.shot(OUT / "query.png")


# ---- Compare ---------------------------------------------------------------------------------

def test_compare_ranks_the_dropped_index_first(data, browser):
    m = data.ui.api("meta")
    src = {Path(s["label"]).name: s for s in m["sources"]}
    a, b = src[data.files["before"].name], src[data.files["after"].name]
    page = browser.open(f"{data.ui.base}/compare")
    page = browser.act(lambda: page.select_option("#a-source", label=Path(a["label"]).name))
    page = browser.act(lambda: page.select_option("#b-source", label=Path(b["label"]).name))
    for k, v in (("a_from", a["from"]), ("a_to", a["to"]), ("b_from", b["from"]), ("b_to", b["to"])):
        assert f"{k}={v}" in page.url, page.url
    rows = page.eval_on_selector_all("#compare-table tbody tr[data-id]", """rows => rows.map(r => ({
        id: r.dataset.id, status: r.querySelector('td.status').dataset.value,
        fingerprint: r.querySelector('td.fp a').textContent,
        before: Number(r.querySelector('td.count').dataset.before),
        after: Number(r.querySelector('td.count').dataset.after),
        verdicts: r.querySelector('td.verdict').dataset.verdicts,
    }))""")
    api = data.ui.api("compare", a_from=a["from"], a_to=a["to"], b_from=b["from"], b_to=b["to"])
    assert [r["id"] for r in rows] == [g["id"] for g in api["groups"]]
    first = rows[0]
    assert "from t where k =" in first["fingerprint"].lower(), rows
    assert first["status"] == "regressed", rows
    c = data.counts
    assert (first["before"], first["after"]) == (c["before"]["lookup"], c["after"]["lookup"])
    assert "p50:regressed" in first["verdicts"], first
    # The same ranking as `dbtap diff` of the two captures.
    dd, _ = td.diff(data.files["before"], data.files["after"], ports=(PG_PORT,))
    assert dd["groups"][0]["id"] == first["id"] and dd["groups"][0]["status"] == "regressed"
    assert page.get_attribute("#compare-summary", "data-regressed") == str(api["summary"]["regressed"])
    browser.shot(OUT / "compare.png")


def test_compare_two_stores(data, browser):
    """`before` written into store A and `after` into store B (`digest --store`), browsed with
    `dbtap ui --store A --compare-store B`: the API with a_store=a, b_store=b and the page (whose
    default is each store's whole span) rank the group that lost its index first, with the
    clients' counts and the same first group and counts as `dbtap diff` of the two captures."""
    stores = {}
    for side, name in (("before", "a"), ("after", "b")):
        path = OUT / f"compare-{name}.db"
        path.unlink(missing_ok=True)
        harness.dbtap("digest", data.files[side], *PORTS, "--store", path)
        stores[name] = path
    ui = Ui(STORES_UI_PORT, "--store", stores["a"], "--compare-store", stores["b"])
    ui.start()
    try:
        m = ui.api("meta")
        assert [(Path(s["label"]).name, s["store"]) for s in m["sources"]] == [
            ("compare-a.db", "a"), ("compare-b.db", "b")], m
        api = ui.api("compare", a_store="a", b_store="b")
        dd, _ = td.diff(data.files["before"], data.files["after"], ports=(PG_PORT,))
        first, want = api["groups"][0], dd["groups"][0]
        assert "from t where k =" in first["fingerprint"].lower(), api["groups"]
        assert first["status"] == "regressed" and want["status"] == "regressed"
        assert first["id"] == want["id"]
        c = data.counts
        assert (first["count_before"], first["count_after"]) == (
            want["count_before"], want["count_after"]) == (c["before"]["lookup"], c["after"]["lookup"])
        assert (api["before"]["queries"], api["after"]["queries"]) == (
            dd["before"]["queries"], dd["after"]["queries"])
        # Both sides on store A (the default): what it held before, nothing of B.
        same = ui.api("compare", a_from=m["sources"][0]["from"], a_to=m["sources"][0]["to"],
                      b_from=m["sources"][1]["from"], b_to=m["sources"][1]["to"])
        assert same["after"]["queries"] == 0 and same["before"]["queries"] == dd["before"]["queries"]

        page = browser.open(f"{ui.base}/compare")
        assert "a_store=a" in page.url and "b_store=b" in page.url, page.url
        assert page.eval_on_selector("#a-store", "e => e.value") == "a"
        assert page.eval_on_selector("#b-store", "e => e.value") == "b"
        rows = page.eval_on_selector_all("#compare-table tbody tr[data-id]", """rows => rows.map(r => ({
            id: r.dataset.id, status: r.querySelector('td.status').dataset.value,
            before: Number(r.querySelector('td.count').dataset.before),
            after: Number(r.querySelector('td.count').dataset.after)}))""")
        assert [r["id"] for r in rows] == [g["id"] for g in api["groups"]]
        assert (rows[0]["id"], rows[0]["status"]) == (want["id"], "regressed"), rows
        assert (rows[0]["before"], rows[0]["after"]) == (c["before"]["lookup"], c["after"]["lookup"])
        browser.shot(OUT / "compare-stores.png")
        # Side B switched to store A: the URL says so and B's count is A's range in store A
        # (the `before` capture again), so the group is no longer regressed.
        page = browser.act(lambda: page.select_option("#b-store", value="a"))
        assert "b_store=a" in page.url, page.url
        rows = page.eval_on_selector_all("#compare-table tbody tr[data-id]", """rows => rows.map(r => ({
            id: r.dataset.id, after: Number(r.querySelector('td.count').dataset.after)}))""")
        row = next(r for r in rows if r["id"] == want["id"])
        assert row["after"] == c["before"]["lookup"], rows
    finally:
        ui.stop()


# ---- Live ------------------------------------------------------------------------------------

def test_live_page_refreshes_with_the_traffic(browser):
    from live_harness import Live
    srv = rh.RedisServer(REDIS_PORT, OUT / "redis-live")
    start_server(srv)
    live = Live("-i", "lo", "--port", REDIS_PORT, "--interval", "1s",
                "--listen", f"127.0.0.1:{LIVE_PORT}")
    stop = threading.Event()
    sent: collections.Counter = collections.Counter()

    def traffic():
        c = srv.client()
        while not stop.is_set():
            c.set("k", "v")
            sent["SET"] += 1
            time.sleep(0.002)
        c.close()

    try:
        live.start()
        t = threading.Thread(target=traffic)
        t.start()
        try:
            page = browser.open(f"http://127.0.0.1:{LIVE_PORT}/live", timeout_ms=30_000)
            ts = lambda: page.get_attribute("body", "data-ts")  # noqa: E731
            assert wait_until(ts, 10), "the Live page shows no interval"
            first = ts()
            assert wait_until(lambda: ts() != first, 10), "the Live page did not refresh"
            head = page.eval_on_selector_all("#live-table thead th", "ths => ths.map(t => t.textContent)")
            lines = page.eval_on_selector_all("#live-table tbody tr[data-server]",
                                              "trs => trs.map(t => t.dataset.server)")
            assert any(str(REDIS_PORT) in s for s in lines), (head, lines)
            top = page.eval_on_selector_all("#live-top tbody tr[data-id] td.count",
                                            "tds => tds.map(t => Number(t.dataset.value))")
            assert top and max(top) > 0, top
            # The page shows the API's lines for its interval, cell for cell (read the API until
            # it is at the same interval as the page, or the page moves on and is read again).
            api = Ui(LIVE_PORT)
            for _ in range(20):
                a, shown = api.api("live"), page.get_attribute("body", "data-ts")
                if str(a["ts"]) == shown:
                    cells = page.eval_on_selector_all(
                        "#live-table tbody tr[data-server]",
                        "trs => trs.map(t => [...t.querySelectorAll('td')].map(c => c.textContent))")
                    if str(a["ts"]) == page.get_attribute("body", "data-ts"):
                        break
                time.sleep(0.2)
            else:
                raise AssertionError("the page and /api/live never showed the same interval")
            assert head == a["header"] and cells == a["lines"], (head, cells, a)
            counted = int(cells[0][a["header"].index("count")])
            assert 0 < counted <= sent["SET"], (counted, sent)
            browser.shot(OUT / "live.png")
        finally:
            stop.set()
            t.join()
    finally:
        live.stop()
        srv.stop()
