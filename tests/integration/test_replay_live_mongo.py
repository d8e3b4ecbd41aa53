"""`dbtap replay --live` onto a MongoDB target that requires a login, with `--credentials`:
each mirrored session logs in as its captured user (its driver's hello names the user in
speculativeAuthenticate), as a file replay's do. Real servers A and B (FerretDB 1.24.2 with
SCRAM users, ferret_harness.FerretServer), real clients (pymongo 4 in the venv: the workload
of test_replay_mongo_auth.py) logged in as a SCRAM-SHA-256 user and a SCRAM-SHA-1-only user,
run on A while the mirror runs.

Truth: the servers' own per-command counters (ferretdb_client_requests_total and
ferretdb_client_responses_total, read over HTTP) and the clients' own counts.

Ports 38680-38683; files under tests/out/replay_live_mongo.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import ferret_harness as fh  # noqa: E402
import harness  # noqa: E402
import mongo_harness as mh  # noqa: E402
import replay_harness as rph  # noqa: E402
import test_replay_mongo_auth as ma  # noqa: E402  (its workload and count helpers)

PORT_A, DEBUG_A, PORT_B, DEBUG_B = 38680, 38681, 38682, 38683
OUT = harness.REPO / "tests" / "out" / "replay_live_mongo"


def need_capture() -> None:
    import socket
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
    except (PermissionError, OSError) as e:
        pytest.skip(f"no packet capture here: {e}")


@pytest.fixture(scope="module")
def servers():
    need_capture()
    if not fh.BIN.exists() or not mh.VENV_PY.exists():
        why = f"{fh.BIN} or {mh.VENV_PY} missing: run tests/setup.sh"
        if os.environ.get("DBTAP_REQUIRE_CAPTURE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    a = fh.FerretServer(PORT_A, DEBUG_A, OUT / "ferret-a")
    b = fh.FerretServer(PORT_B, DEBUG_B, OUT / "ferret-b")
    with rph.started_pair(a, b):
        ma.venv(PORT_A, "setup")
        ma.venv(PORT_B, "setup")
        yield a, b


def test_live_sessions_log_in_per_user_from_credentials(servers):
    a, b = servers
    creds = harness.credentials_file(OUT / "live-creds.txt",
                                     "".join(f"{u}:{p}\n" for u, p in ma.USERS.items()))
    before_a, before_b = a.counts(), b.counts()
    m = rph.Mirror(PORT_A, PORT_B, "--credentials", str(creds))
    try:
        clients = [ma.venv(PORT_A, "workload", "app", "SCRAM-SHA-256"),
                   ma.venv(PORT_A, "workload", "old", "SCRAM-SHA-1")]
        want = fh.delta(before_a, a.counts())
        deadline = time.monotonic() + 30
        while True:
            got = fh.delta(before_b, b.counts())
            if ma.workload(got) == ma.workload(want) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        rep = m.report()
    finally:
        m.stop()
    err = "".join(m.err)
    for c in clients:
        assert c == {"chain": ma.N_DOCS, "inserted": 3, "updated": ma.N_DOCS // 5,
                     "counted": ma.N_DOCS // 5, "found": 1}, c
    assert want[("ok", "saslStart")] >= 2, want
    assert "login refused" not in err and "requires a login" not in err, err
    assert ma.workload(got) == ma.workload(want), (got, want)
    assert ma.workload(got, "ok") == ma.workload(want, "ok"), (got, want)
    assert ma.failures(got) == ma.failures(want), (got, want)
    # Both users' connections logged in on B as on A (by their own mechanisms: the SHA-1-only
    # user could not log in otherwise).
    assert got[("ok", "saslStart")] == want[("ok", "saslStart")], (got, want)
    f = rep["fidelity"]
    captured_auth = sum(want.get(("requests", c), 0) for c in ma.AUTH)
    assert f["skipped_requests"] == {"mongodb_auth_skipped": captured_auth}, f
