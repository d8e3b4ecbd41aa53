"""dbtap replay logs in to a MongoDB target that requires it: real servers A and B (FerretDB
1.24.2 with SCRAM users, ferret_harness.FerretServer), real clients (pymongo 4 in the venv)
logged in as a SCRAM-SHA-256 user and as a SCRAM-SHA-1-only user, captured with tcpdump on lo,
replayed onto B: without credentials B refuses every command (one line says why), with a wrong
password B refuses the login (one line names it), with `--credentials FILE` B accepts them all.

The truth is the servers' own counters (FerretDB's ferretdb_client_requests_total and
ferretdb_client_responses_total per command and result, read over HTTP) and the clients' own
counts; dbtap's report is only checked against them.

Ports 38710-38713 only; files under tests/out/replay-mongo-auth.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import ferret_harness as fh  # noqa: E402
import harness  # noqa: E402
import mongo_harness as mh  # noqa: E402

PORT_A, DEBUG_A, PORT_B, DEBUG_B = 38710, 38711, 38712, 38713
OUT = harness.REPO / "tests" / "out" / "replay-mongo-auth"
USERS = {"app": "app-pw", "old": "old-pw"}
N_DOCS, BATCH = 120, 25

# Runs in the pymongo venv. `setup` (as the administrator) creates the users (app: both SCRAM
# mechanisms; old: SCRAM-SHA-1 only) and fills the collection; `workload USER MECH` is the
# captured traffic. Prints the client's own counts as JSON.
WORKLOAD = r"""
import json, sys, pymongo
port, mode = int(sys.argv[1]), sys.argv[2]
def client(user, pw, **kw):
    return pymongo.MongoClient("127.0.0.1", port, directConnection=True, maxPoolSize=1,
                               username=user, password=pw, authSource="admin",
                               serverSelectionTimeoutMS=20000, **kw)
out = {}
if mode == "setup":
    c = client("admin", "adminpw")
    c.admin.command("createUser", "app", pwd="app-pw", roles=[])
    c.admin.command("createUser", "old", pwd="old-pw", roles=[], mechanisms=["SCRAM-SHA-1"])
    co = c["dbtapwl"]["items"]
    co.insert_many([{"_id": i, "a": i % 5} for i in range(120)])
else:
    user, mech = sys.argv[3], sys.argv[4]
    c = client(user, {"app": "app-pw", "old": "old-pw"}[user], authMechanism=mech)
    co = c["dbtapwl"]["items"]
    out["chain"] = sum(1 for _ in co.find({"a": {"$gte": 0}}, batch_size=25))
    out["inserted"] = len(co.insert_many([{"by": user, "k": k} for k in range(3)]).inserted_ids)
    out["updated"] = co.update_many({"a": 2}, {"$set": {"seen": user}}).matched_count
    out["counted"] = co.count_documents({"a": 1})
    out["found"] = int(co.find_one({"_id": 7}) is not None)
c.close()
print(json.dumps(out))
"""


def venv(port: int, *args: str) -> dict:
    return fh.run_client(WORKLOAD, str(port), *args)


@pytest.fixture(scope="module")
def servers():
    fh.require()
    a = fh.FerretServer(PORT_A, DEBUG_A, OUT / "ferret-a")
    b = fh.FerretServer(PORT_B, DEBUG_B, OUT / "ferret-b")
    a.start()
    try:
        b.start()
        try:
            venv(PORT_A, "setup")
            venv(PORT_B, "setup")
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.fixture(scope="module")
def cap(servers):
    """The capture of both clients on A, A's own counter deltas over it, the clients' counts."""
    a, _ = servers
    td = mh.Tcpdump(OUT / "auth.pcap", PORT_A)
    before = a.counts()
    td.start()
    try:
        clients = [venv(PORT_A, "workload", "app", "SCRAM-SHA-256"),
                   venv(PORT_A, "workload", "old", "SCRAM-SHA-1")]
    finally:
        stats = td.stop()
    mh.check_dropped(stats)
    want = fh.delta(before, a.counts())
    for c in clients:
        assert c == {"chain": N_DOCS, "inserted": 3, "updated": N_DOCS // 5, "counted": N_DOCS // 5,
                     "found": 1}, c
    # Both clients logged in on A; A failed only pymongo's endSessions at close (FerretDB 1.24
    # has no such command).
    assert want[("requests", "saslStart")] >= 2, want
    assert set(failures(want)) == {("CommandNotFound", "endSessions")}, want
    return td.out, want


def replay(pcap: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(PORT_A),
                           "--target", f"127.0.0.1:{PORT_B}", "--format", "json", "--max", *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)


AUTH = ("saslStart", "saslContinue")


def failures(counts: dict) -> dict:
    """The counts of answers other than ok."""
    return {k: n for k, n in counts.items() if k[0] not in ("requests", "ok")}


def workload(counts: dict, kind: str = "requests") -> dict:
    """Counts of one kind, without the logins and handshakes (dbtap makes its own)."""
    return {c: n for (k, c), n in counts.items()
            if k == kind and c not in AUTH and c not in ("hello", "ismaster", "isMaster")}


def test_without_credentials_the_target_refuses_and_says_why(servers, cap):
    _, b = servers
    pcap, want = cap
    before = b.counts()
    r = replay(pcap)
    got = fh.delta(before, b.counts())
    lines = [ln for ln in r.stderr.splitlines() if "requires a login" in ln]
    assert len(lines) == 1, r.stderr
    assert "requires authentication" in lines[0] and "--credentials" in lines[0], lines
    # B received the workload's commands and refused them all: none succeeded, no login tried.
    # No find opened a cursor on B, so the getMores were not sent (skipped and counted).
    sent = {c: n for c, n in workload(want).items() if c != "getMore"}
    assert workload(got) == sent, (got, want)
    assert workload(got, "ok") == {}, got
    skipped = json.loads(r.stdout)["fidelity"]["skipped_requests"]
    assert skipped.get("mongodb_cursor_not_on_target") == want[("requests", "getMore")], skipped
    assert sum(n for (k, _), n in got.items() if k == "Unauthorized") > 0, got
    assert not any(c in AUTH for (_, c) in got), got
    assert r.returncode == 0, r.stderr


def test_wrong_password_is_refused_in_one_line(servers, cap):
    _, b = servers
    pcap, _ = cap
    before = b.counts()
    r = replay(pcap, "--user", "app", "--password", "wrong")
    got = fh.delta(before, b.counts())
    lines = [ln for ln in r.stderr.splitlines() if "login refused" in ln]
    assert lines == ["dbtap: replay: mongodb: login refused: app@admin (SCRAM-SHA-256): "
                     "Authentication failed. (code 18, AuthenticationFailed)"], r.stderr
    # B's own count of failed logins; none of the workload reached it.
    assert got.get(("AuthenticationFailed", "saslContinue"), 0) >= 1, got
    assert workload(got) == {}, got
    assert json.loads(r.stdout)["fidelity"]["target_connections"] == 0
    # Nothing reached B: the report is printed, then one line and exit status 1.
    assert r.returncode == 1 and "nothing was replayed" in r.stderr, r.stderr


@pytest.mark.parametrize("how", ["credentials-file", "user-password"])
def test_logged_in_replay_equals_capture(servers, cap, how):
    """Each session logs in as its captured user (app by SCRAM-SHA-256; old, who has SHA-1
    credentials only, by SCRAM-SHA-1), or all as --user; B's per-command counts of requests
    and of successes equal A's; the captured logins are skipped and counted."""
    _, b = servers
    pcap, want = cap
    if how == "credentials-file":
        creds = harness.credentials_file(OUT / "creds.txt",
                                         "".join(f"{u}:{p}\n" for u, p in USERS.items()))
        extra = ["--credentials", str(creds)]
    else:
        extra = ["--user", "old", "--password", USERS["old"]]
    before = b.counts()
    r = replay(pcap, *extra)
    assert r.returncode == 0, r.stderr
    got = fh.delta(before, b.counts())
    assert "login refused" not in r.stderr and "requires a login" not in r.stderr, r.stderr
    assert workload(got) == workload(want), (got, want)
    assert workload(got, "ok") == workload(want, "ok"), (got, want)
    assert failures(got) == failures(want), (got, want)
    rep = json.loads(r.stdout)
    fid = rep["fidelity"]
    if how == "credentials-file":
        # The connections that logged in on A log in on B (pymongo's monitors did not, and
        # have no user to take a password for: the note names only those).
        assert got[("ok", "saslStart")] == want[("ok", "saslStart")], (got, want)
        notes = [ln for ln in r.stderr.splitlines() if "no password in --credentials" in ln]
        assert len(notes) <= 1 and all(ln.endswith(": (unknown) (%d)" % (
            fid["sessions_captured"] - want[("ok", "saslStart")])) for ln in notes), r.stderr
    else:
        # Every connection logs in as --user, by the mechanism B lists for it.
        assert got[("ok", "saslStart")] == fid["target_connections"], (got, fid)
    captured_auth = sum(want.get(("requests", c), 0) for c in AUTH)
    assert fid["skipped_requests"] == {"mongodb_auth_skipped": captured_auth}, fid
