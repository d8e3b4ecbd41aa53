"""The fleet UI over ClickHouse (`dbtap ui --clickhouse`, followed) and HTTPS to ClickHouse.

A private clickhouse-server (Debian's 18.16), like test_clickhouse.py's but on this file's ports
and directory (tests/out/clickhouse_fleet/): HTTP on 127.0.0.1:38700 and HTTPS on 38701 with a
certificate the test makes (openssl: a CA, and a server certificate it signs for 127.0.0.1);
38704 and 38705: dbtap ui.

- Live fleet UI: `dbtap ui --clickhouse` started over one host's rows (a digest of one half of
  the repository's MySQL sample); then two more digests insert rows (another host a day later,
  and a third host on the same minutes as the first, over HTTPS): without a restart, /api/top
  answers the sum of the digests (per group), `host=` answers one host's digest, /api/dims has
  the hosts, /api/meta's fleet status holds every row of the window; in the browser, the open
  Top page redraws with the new hosts' chips by itself, and a host chip filters the table to
  that host's counts.
- An outage under the UI: a refresh while ClickHouse is stopped reports the error and keeps
  serving what was read; once it is back, new rows are read (one warning line, one recovery).
- The row cap: with --clickhouse-max-rows below the window's rows, what is held plus what is
  left out equals what the server holds, and the status says so.
- Many batches: 10,000 batches read in a minute that then grows (the excluded pairs pass
  ClickHouse's default 256 KiB query size): every row read once.
- HTTPS: `dbtap schema --apply`, the sink (`digest --clickhouse https://...`) and `ui
  --clickhouse https://...` with --clickhouse-ca; without the CA the certificate is refused.

Truth: the server's own sums and dbtap's JSON digests of the captures (the reference the sink
must agree with, as in test_clickhouse.py).
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import test_clickhouse as base  # noqa: E402
import ui_harness  # noqa: E402

HTTP_PORT = 38700
HTTPS_PORT = 38701
UI_PORT = 38704
UI_PORT_2 = 38705
OUT = harness.REPO / "tests" / "out" / "clickhouse_fleet"
URL = f"http://127.0.0.1:{HTTP_PORT}/"
HTTPS_URL = f"https://127.0.0.1:{HTTPS_PORT}/"

SSL = """
    <https_port>{https}</https_port>
    <openSSL><server>
        <certificateFile>{d}/server.crt</certificateFile>
        <privateKeyFile>{d}/server.key</privateKeyFile>
        <verificationMode>none</verificationMode>
        <loadDefaultCAFile>false</loadDefaultCAFile>
        <cacheSessions>true</cacheSessions>
        <disableProtocols>sslv2,sslv3</disableProtocols>
        <preferServerCiphers>true</preferServerCiphers>
    </server></openSSL>
</yandex>
"""


# A user with a password (the default user has none).
FLEET_USER = """<fleet><password>s3cret pass</password><networks><ip>127.0.0.1</ip></networks>
        <profile>default</profile><quota>default</quota></fleet>
"""


def make_certs(d: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 signed by it; the CA's PEM file."""
    d.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
        "-out", "ca.crt", "-days", "2", "-subj", "/CN=dbtap test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
        "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n"
                               "extendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")
    return d / "ca.crt"


class Server(base.ClickHouse):
    """test_clickhouse.py's private server, on this file's ports and with HTTPS."""

    http_port = HTTP_PORT

    def config_text(self) -> str:
        plain = super().config_text().replace("</yandex>\n", "")
        return plain + SSL.format(d=self.dir, https=HTTPS_PORT)

    def users_text(self) -> str:
        users = super().users_text().replace("</users>", FLEET_USER + "</users>")
        assert FLEET_USER in users
        return users


@pytest.fixture(scope="module")
def ch():
    d = OUT / "clickhouse"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    ca = make_certs(d)
    server = Server(d)
    server.start()
    try:
        server.ca = ca
        # The schema over HTTPS: the CA file is what makes the certificate trusted.
        harness.dbtap("schema", "clickhouse", "--apply", HTTPS_URL, "--clickhouse-ca", ca)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def captures():
    OUT.mkdir(parents=True, exist_ok=True)
    a, b = OUT / "host-a.pcap", OUT / "host-b.pcap"
    base.split_sample(a, b)
    da, db = harness.digest(a), harness.digest(b)
    assert da["totals"]["queries"] > 100 and db["totals"]["queries"] > 100
    return a, b, base.counts(da), base.counts(db)


def top_counts(top: dict) -> collections.Counter:
    return collections.Counter({(g["protocol"], g["command"], g["id"]): g["count"]
                                for g in top["groups"]})


def server_rows(ch) -> int:
    return int(ch.query("SELECT count() FROM dbtap_minutes").strip())


def test_the_fleet_ui_follows_new_rows_with_host_filters(ch, captures):
    a, b, ca_, cb = captures
    harness.digest(a, extra=("--clickhouse", URL, "--host-name", "host-a"))
    ui = ui_harness.Ui(UI_PORT, "--clickhouse", URL, "--clickhouse-refresh", "1s")
    with ui:
        meta = ui.api("meta")
        assert [s["label"] for s in meta["sources"]] == ["host-a"]
        assert meta["fleet"]["rows_held"] == server_rows(ch) > 0, meta
        assert top_counts(ui.api("top", **{"from": "-4d", "limit": 1000})) == ca_

        with ui_harness.Browser() as br:
            page = br.open(f"{ui.base}/?from=-4d&limit=1000")
            assert host_chips(page) == ["host-a"]
            assert "fleet: 1 host" in page.inner_text("#meta")

            # More rows while it runs: another host a day later (a new partition, over plain
            # HTTP) and a third host on host-a's very minutes (the same minutes grow; HTTPS).
            harness.digest(b, extra=("--clickhouse", URL, "--host-name", "host-b"))
            harness.digest(a, extra=("--clickhouse", HTTPS_URL, "--clickhouse-ca", ch.ca,
                                     "--host-name", "host-c"))
            want_rows = server_rows(ch)

            # The open page redraws by itself once the server has read them.
            page.wait_for_function(
                "document.querySelectorAll('#dims [data-dim=host] .chip').length === 3",
                timeout=30_000)
            br.wait_ready()
            assert host_chips(page) == ["host-a", "host-b", "host-c"]
            assert "fleet: 3 hosts" in page.inner_text("#meta")

            meta = ui.api("meta")
            assert meta["fleet"]["rows_held"] == want_rows, meta
            assert [s["label"] for s in meta["sources"]] == ["host-a", "host-b", "host-c"]
            assert meta["fleet"]["rows_left_out"] == 0 and meta["fleet"]["last_error"] is None
            assert meta["fleet"]["rows_in_window"] == want_rows
            every = {"from": "-4d", "limit": 1000}
            assert top_counts(ui.api("top", **every)) == ca_ + cb + ca_
            assert top_counts(ui.api("top", host="host-b", **every)) == cb
            assert top_counts(ui.api("top", host="host-c", **every)) == ca_
            dims = ui.api("dims", **every)["dims"]
            hosts = {s["value"]: s["count"] for s in dims["host"]}
            assert hosts == {"host-a": sum(ca_.values()), "host-b": sum(cb.values()),
                             "host-c": sum(ca_.values())}
            # Nothing new: a refresh on demand reads no row.
            status = ui.api("refresh")
            assert status["last_rows"] == 0 and status["rows_held"] == want_rows, status

            # A click on a host chip: that host's counts in the table.
            page = br.act(lambda: page.click("#dims [data-dim=host] .chip[data-value='host-b']"))
            assert "host=host-b" in page.url
            shown = page.eval_on_selector_all(
                "#top-table tbody tr",
                "rs => rs.map(r => [r.dataset.protocol, r.dataset.command, r.dataset.id, "
                "+r.querySelector('td.count').dataset.value])")
            assert collections.Counter({(p, c, i): n for p, c, i, n in shown}) == cb


def host_chips(page) -> list[str]:
    return sorted(page.eval_on_selector_all("#dims [data-dim=host] .chip",
                                            "els => els.map(e => e.dataset.value)"))


def test_the_row_cap_counts_what_is_left_out(ch, captures):
    a, _, _, _ = captures
    if server_rows(ch) == 0:
        harness.digest(a, extra=("--clickhouse", URL, "--host-name", "host-a"))
    total = server_rows(ch)
    # The cap holds the newest minute whole and not the rest.
    cap = int(ch.query("SELECT count() FROM dbtap_minutes WHERE ts = "
                       "(SELECT max(ts) FROM dbtap_minutes)").strip())
    assert 0 < cap < total
    with ui_harness.Ui(UI_PORT_2, "--clickhouse", URL, "--clickhouse-max-rows", cap) as ui:
        f = ui.api("meta")["fleet"]
        assert f["rows_held"] == cap, f
        assert f["rows_held"] + f["rows_left_out"] == f["rows_in_window"] == total, f
        assert f["minutes_left_out"] > 0
        # What is held is the newest minute: the top's counts are that minute's, per group.
        newest = collections.Counter()
        for p, c, q, n in ch.rows(
                "SELECT protocol, command, query_id, sum(count) FROM dbtap_minutes WHERE ts = "
                "(SELECT max(ts) FROM dbtap_minutes) GROUP BY protocol, command, query_id"):
            newest[(p, c, q)] += int(n)
        top = ui.api("top", **{"from": "-9d", "limit": 1000})
        assert top_counts(top) == newest


def test_ui_over_https_needs_the_ca(ch, captures, monkeypatch):
    a, _, ca_, _ = captures
    if not ch.rows("SELECT 1 FROM dbtap_minutes WHERE host = 'host-c' LIMIT 1"):
        harness.digest(a, extra=("--clickhouse", HTTPS_URL, "--clickhouse-ca", ch.ca,
                                 "--host-name", "host-c"))
    with ui_harness.Ui(UI_PORT_2, "--clickhouse", HTTPS_URL, "--clickhouse-ca", ch.ca,
                       "--clickhouse-host", "host-c") as ui:
        assert [s["label"] for s in ui.api("meta")["sources"]] == ["host-c"]
        assert top_counts(ui.api("top", **{"from": "-4d", "limit": 1000})) == ca_
    # A user with a password, the password from the environment (off the command line);
    # a wrong one is refused by the server.
    monkeypatch.setenv("DBTAP_CLICKHOUSE_PASSWORD", "s3cret pass")
    with ui_harness.Ui(UI_PORT_2, "--clickhouse", HTTPS_URL, "--clickhouse-ca", ch.ca,
                       "--clickhouse-user", "fleet", "--clickhouse-host", "host-c") as ui:
        assert top_counts(ui.api("top", **{"from": "-4d", "limit": 1000})) == ca_
        assert "s3cret" not in " ".join(ui.proc.args)
    monkeypatch.delenv("DBTAP_CLICKHOUSE_PASSWORD")
    r = harness.dbtap("ui", "--clickhouse", HTTPS_URL, "--clickhouse-ca", ch.ca,
                      "--clickhouse-user", "fleet", "--clickhouse-password", "wrong",
                      "--listen", f"127.0.0.1:{UI_PORT_2}", check=False)
    assert r.returncode != 0 and b"wrong password" in r.stderr.lower(), r.stderr
    # The system's roots do not know the test's CA: refused, and said so.
    r = harness.dbtap("ui", "--clickhouse", HTTPS_URL, "--listen", f"127.0.0.1:{UI_PORT_2}",
                      check=False)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "TLS" in err and ("certificate" in err.lower() or "issuer" in err.lower()), err
    # And an https sink without the CA fails to deliver (nothing stored).
    before = server_rows(ch)
    r = harness.dbtap("digest", a, "--clickhouse", HTTPS_URL, "--host-name", "no-ca",
                      "--clickhouse-wait", "1s", check=False)
    assert r.returncode != 0 and b"not delivered" in r.stderr, r.stderr
    assert server_rows(ch) == before


def test_a_clickhouse_outage_is_reported_and_reading_resumes(ch, captures):
    _, b, _, cb = captures
    with ui_harness.Ui(UI_PORT_2, "--clickhouse", URL, "--clickhouse-refresh", "0s") as ui:
        held = ui.api("meta")["fleet"]["rows_held"]
        before = top_counts(ui.api("top", **{"from": "-9d", "limit": 1000}))
        ch.stop()
        try:
            status = ui.api("refresh")
            assert status["last_error"] and "connect" in status["last_error"], status
            # What was read is still served.
            assert top_counts(ui.api("top", **{"from": "-9d", "limit": 1000})) == before
        finally:
            ch.start()
        harness.digest(b, extra=("--clickhouse", URL, "--host-name", "host-d"))
        status = ui.api("refresh")
        assert status["last_error"] is None and status["rows_held"] > held, status
        assert top_counts(ui.api("top", host="host-d", **{"from": "-9d", "limit": 1000})) == cb
    err = "".join(ui.err)
    assert err.count("dbtap: warning: clickhouse") == 1 and "reading again" in err, err


def test_many_batches_in_a_minute_are_read_once(ch):
    """10,000 batches already read in a minute that grows: the excluded pairs make a query
    text past ClickHouse's default 256 KiB bound; every row is still read exactly once."""
    m = int(ch.query("SELECT toUInt32(now()) - toUInt32(now()) % 60").strip())
    insert = ("INSERT INTO dbtap_minutes (ts, host, protocol, command, query_id, count, batch) "
              "SELECT toDateTime({m}), 'many', 'redis', 'get', 'Q', 1, {top} - number "
              "FROM system.numbers LIMIT {n}")
    ch.query(insert.format(m=m, top=2**64 - 1, n=10_000))
    with ui_harness.Ui(UI_PORT_2, "--clickhouse", URL, "--clickhouse-host", "many",
                       "--clickhouse-refresh", "0s") as ui:
        assert ui.api("meta")["fleet"]["rows_held"] == 10_000
        ch.query(insert.format(m=m, top=2**63, n=5))
        status = ui.api("refresh")
        assert status["last_error"] is None, status
        assert (status["last_rows"], status["rows_held"]) == (5, 10_005), status
        top = ui.api("top", **{"from": "-1h"})
        assert [(g["id"], g["count"]) for g in top["groups"]] == [("Q", 10_005)]
