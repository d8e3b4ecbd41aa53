"""dbtap replay logs in by PLAIN (RFC 4616; MongoDB Enterprise's LDAP users in `$external`) when
the captured connection did: real servers A and B (FerretDB 1.24.2 on its PostgreSQL backend,
whose older authentication takes PLAIN logins and connects to PostgreSQL as that user with that
password, so PostgreSQL checks the password), a real client (pymongo 4, authMechanism=PLAIN),
captured with tcpdump on lo, replayed onto B: with `--credentials` B's per-command counts equal
A's; with a wrong password PostgreSQL refuses FerretDB's connection and no command succeeds.

The truth is the servers' own counters (FerretDB's ferretdb_client_requests_total and
ferretdb_client_responses_total per command and result) and the client's own counts.

Ports 38714-38718 only; files under tests/out/replay-mongo-plain.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import ferret_harness as fh  # noqa: E402
import harness  # noqa: E402
import mongo_harness as mh  # noqa: E402
import pg_harness as ph  # noqa: E402

PG_PORT, PORT_A, DEBUG_A, PORT_B, DEBUG_B = 38714, 38715, 38716, 38717, 38718
OUT = harness.REPO / "tests" / "out" / "replay-mongo-plain"
USER, PASSWORD = "ldapish", "plain-pw:1"
N_DOCS = 60

WORKLOAD = r"""
import json, sys, pymongo
port, user, pw = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = pymongo.MongoClient("127.0.0.1", port, directConnection=True, maxPoolSize=1,
                        username=user, password=pw, authMechanism="PLAIN",
                        authSource="$external", serverSelectionTimeoutMS=20000)
co = c["dbtapwl"]["items"]
out = {"inserted": len(co.insert_many([{"_id": i, "a": i % 4} for i in range(60)]).inserted_ids)}
out["chain"] = sum(1 for _ in co.find({"a": {"$gte": 0}}, batch_size=20))
out["updated"] = co.update_many({"a": 1}, {"$set": {"seen": 1}}).matched_count
out["counted"] = co.count_documents({"a": 3})
c.close()
print(json.dumps(out))
"""


def venv(port: int) -> dict:
    return fh.run_client(WORKLOAD, str(port), USER, PASSWORD)


@pytest.fixture(scope="module")
def servers():
    fh.require()
    with ph.PgServer(PG_PORT, OUT / "pg") as pg:
        with closing(pg.admin_conn("postgres")) as c, c.cursor() as cur:
            cur.execute("SET password_encryption = 'scram-sha-256'")
            cur.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
            for db in ("ferret_a", "ferret_b"):
                cur.execute(f"CREATE DATABASE {db} OWNER {USER}")
        # FerretDB reaches PostgreSQL over TCP, where the password is now checked.
        (pg.datadir / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        pg.sql("SELECT pg_reload_conf()")
        time.sleep(0.3)
        url = f"postgres://127.0.0.1:{PG_PORT}/ferret_%s"
        with fh.FerretServer(PORT_A, DEBUG_A, OUT / "ferret-a", url % "a") as a, \
                fh.FerretServer(PORT_B, DEBUG_B, OUT / "ferret-b", url % "b") as b:
            yield a, b


@pytest.fixture(scope="module")
def cap(servers):
    """The capture of the client on A and A's own counter deltas over it."""
    a, _ = servers
    td = mh.Tcpdump(OUT / "plain.pcap", PORT_A)
    before = a.counts()
    td.start()
    try:
        client = venv(PORT_A)
    finally:
        stats = td.stop()
    mh.check_dropped(stats)
    want = fh.delta(before, a.counts())
    assert client == {"inserted": N_DOCS, "chain": N_DOCS, "updated": N_DOCS // 4,
                      "counted": N_DOCS // 4}, client
    assert want[("requests", "saslStart")] == 1 and want[("ok", "saslStart")] == 1, want
    return td.out, want


def replay(pcap: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(PORT_A),
                           "--target", f"127.0.0.1:{PORT_B}", "--format", "json", "--max", *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)


def workload(counts: dict, kind: str = "requests") -> dict:
    """Counts of one kind, without the logins and handshakes (dbtap makes its own), nor
    pymongo's endSessions at close (FerretDB 1.24 has no such command)."""
    skip = ("saslStart", "saslContinue", "hello", "ismaster", "isMaster", "endSessions")
    return {c: n for (k, c), n in counts.items() if k == kind and c not in skip}


def test_plain_login_replay_equals_capture(servers, cap, tmp_path):
    _, b = servers
    pcap, want = cap
    creds = harness.credentials_file(tmp_path / "creds", f"{USER}:{PASSWORD}\n")
    before = b.counts()
    r = replay(pcap, "--credentials", str(creds))
    assert r.returncode == 0, r.stderr
    got = fh.delta(before, b.counts())
    assert "login refused" not in r.stderr, r.stderr
    # dbtap logged in once, by PLAIN, and B accepted it.
    assert got[("requests", "saslStart")] == 1 and got[("ok", "saslStart")] == 1, got
    assert workload(want) and workload(got) == workload(want), (got, want)
    assert workload(got, "ok") == workload(want, "ok"), (got, want)
    rep = json.loads(r.stdout)
    # The captured saslStart is not replayed (dbtap made its own): skipped and counted.
    assert rep["fidelity"]["skipped_requests"] == {"mongodb_auth_skipped": 1}, rep["fidelity"]


def test_plain_wrong_password_fails_every_command(servers, cap, tmp_path):
    """FerretDB accepts a PLAIN saslStart and connects to PostgreSQL at the first command, so
    a wrong password shows as commands that fail on B, none that succeed."""
    _, b = servers
    pcap, want = cap
    before = b.counts()
    r = replay(pcap, "--user", USER, "--password", "wrong")
    got = fh.delta(before, b.counts())
    # The session that logged in by PLAIN on A does so on B (FerretDB takes the saslStart)...
    assert got[("ok", "saslStart")] == 1, got
    # ...and every command it sends fails when FerretDB connects to PostgreSQL, none succeeds.
    # (The capture's other connection, pymongo's monitor, logged in by nothing: as --user it
    # tries SCRAM-SHA-256, which this FerretDB refuses; its hello needs no login.)
    sent = workload(got)
    assert sent and workload(got, "InternalError") == sent, got
    assert workload(got, "ok") == {}, got
