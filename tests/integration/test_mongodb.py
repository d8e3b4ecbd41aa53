"""dbtap on real MongoDB wire traffic (pymongo 4 against tests/mongo-server), held to pymongo's
own command monitoring.

A private mongo-server on 127.0.0.1:37017 (mongo_harness.MongoServer), captured with tcpdump on
lo (the probe is a bare connect: the server does not speak first). The workload
(mongo_harness._workload, run in the pymongo venv, maxPoolSize=1) records every command and its
reply with a CommandListener: insert_many 500, 100 finds with a filter+sort (filter keys sent in
two orders), find_one x40, a cursor over 500 docs in batches of 50 (getMores), update_many,
delete_one, aggregate, count_documents (an aggregate), estimated_document_count (count),
distinct, find_one_and_update (findAndModify), a duplicate key insert (11000) and an unknown
command (59).

pymongo's handshake and heartbeats (isMaster on admin) are not reported to listeners: the
per-command comparison is over the workload's database, and the admin traffic is checked apart.
dbtap names a command it does not know `unknown` (crates/proto/src/mongodb/message.rs).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import mongo_harness as mh  # noqa: E402

PORT = 37017
OUT = harness.REPO / "tests" / "out" / "mongodb"
UNKNOWN = {"nosuchcommand": "unknown"}  # listener name -> dbtap's
HEALTH_KEYS = ("gaps", "gap_bytes", "truncated_packets", "responses_without_request",
               "unparsed_bytes", "malformed_messages", "unanswered", "resyncs",
               "encrypted_connections", "inflight_overflow", "not_tracked_segments")


class Capture:
    pass


@pytest.fixture(scope="module")
def cap():
    OUT.mkdir(parents=True, exist_ok=True)
    srv = mh.MongoServer(PORT, OUT / "server")
    td = mh.Tcpdump(OUT / "scripted.pcap", PORT)
    c = Capture()
    try:
        srv.start()
        td.start()
        try:
            c.wl = mh.run_workload(PORT, OUT / "workload.json")
        finally:
            c.tcpdump = td.stop()
    finally:
        td.stop()
        srv.stop()
    mh.check_dropped(c.tcpdump)
    c.pcap = td.out
    x = ("--port", str(PORT))
    c.digest = harness.digest(c.pcap, extra=x)
    c.digest_kko = harness.digest(c.pcap, extra=x + ("--keep-key-order",))
    c.events = harness.events(c.pcap, extra=x)
    c.want = {UNKNOWN.get(k, k): v for k, v in mh.listener_by_command(c.wl["commands"]).items()}
    return c


def _wl_events(c):
    return [e for e in c.events if e["protocol"] == "mongodb" and e["database"] == mh.WL_DB]


def _by_command(evs):
    out = collections.defaultdict(collections.Counter)
    for e in evs:
        o = out[e["command"]]
        o["count"] += 1
        o["rows"] += e["rows"]
        o["errors"] += e["outcome"] == "error"
    return {k: dict(v) for k, v in out.items()}


def test_workload_did_what_was_asked(cap):
    w = cap.want
    assert w["insert"]["count"] == 2 and w["insert"]["errors"] == 1
    assert w["find"]["count"] == mh.N_FINDS + mh.N_FIND_ONE + 1
    assert w["getmore"] == {"count": mh.N_DOCS // mh.BATCH - 1,
                            "rows": mh.N_DOCS - mh.BATCH, "errors": 0}
    for k in ("update", "delete", "count", "distinct", "findandmodify", "unknown"):
        assert w[k]["count"] == 1, k
    assert w["aggregate"]["count"] == 2  # aggregate + count_documents
    assert mh.listener_errors(cap.wl["commands"]) == {11000: 1, 59: 1}


def test_events_per_command_equal_listener(cap):
    """count, documents returned and errors per command name, over the workload's database."""
    assert _by_command(_wl_events(cap)) == cap.want


def test_digest_per_command_equals_listener(cap):
    got = collections.defaultdict(collections.Counter)
    for g in cap.digest["queries"]:
        assert g["protocol"] == "mongodb" and not g.get("overflow")
        if mh.WL_DB + "." in g["fingerprint"] or g["command"] == "unknown":
            for k in ("count", "rows", "errors"):
                got[g["command"]][k] += g[k]
    assert {k: dict(v) for k, v in got.items()} == cap.want


def test_admin_traffic_is_handshake_and_heartbeats_only(cap):
    """What the listener does not see: only isMaster on admin, one first on every connection
    (pymongo's handshake), and exactly one on the workload's connection."""
    other = [e for e in cap.events if e["database"] != mh.WL_DB]
    assert other and {(e["command"], e["database"]) for e in other} == {("ismaster", "admin")}
    first = {}
    for e in sorted(cap.events, key=lambda e: e["start_ns"]):
        first.setdefault(e["client"], e["command"])
    assert set(first.values()) == {"ismaster"}
    wl_clients = {e["client"] for e in _wl_events(cap)}
    assert len(wl_clients) == 1  # maxPoolSize=1: every workload command on one connection
    wl_conn = [e for e in cap.events if e["client"] in wl_clients]
    assert collections.Counter(e["command"] for e in wl_conn)["ismaster"] == 1
    assert len(wl_conn) == 1 + sum(1 for c in cap.wl["commands"] if c["db"] == mh.WL_DB)


def test_rows_affected(cap):
    want = collections.Counter()
    for c in cap.wl["commands"]:
        want[UNKNOWN.get(c["name"], c["name"])] += c["affected"]
    got = collections.Counter()
    for e in _wl_events(cap):
        got[e["command"]] += e["rows_affected"]
    assert +got == +want


def _find_groups(d, coll="users"):
    return [g for g in d["queries"] if g["command"] == "find"
            and g["fingerprint"].startswith(f"find {mh.WL_DB}.{coll} ")
            and '"$in"' in g["fingerprint"]]


def test_key_order_folded(cap):
    """The 100 finds, filter keys sent in two orders: one group, two with --keep-key-order."""
    g = _find_groups(cap.digest)
    assert [x["count"] for x in g] == [mh.N_FINDS], [x["fingerprint"] for x in g]
    assert '"sort":{"_id":1}' in g[0]["fingerprint"]
    k = _find_groups(cap.digest_kko)
    assert sorted(x["count"] for x in k) == [mh.N_FINDS // 2, mh.N_FINDS // 2], \
        [x["fingerprint"] for x in k]


def test_getmore_groups_under_collection(cap):
    g = [x for x in cap.digest["queries"] if x["command"] == "getmore"]
    assert len(g) == 1 and g[0]["fingerprint"].startswith(f"getMore {mh.WL_DB}.users")
    assert (g[0]["count"], g[0]["rows"]) == (mh.N_DOCS // mh.BATCH - 1, mh.N_DOCS - mh.BATCH)


def test_errors_by_code(cap):
    got = collections.Counter()
    for g in cap.digest["queries"]:
        for code, n in harness.errors_by_code(g).items():
            got[code] += n
    assert got[11000] == 1
    assert dict(got) == mh.listener_errors(cap.wl["commands"])


def test_capture_health(cap):
    c = cap.digest["capture"]
    assert c["packets"] == cap.tcpdump["captured"]
    # tcpdump's start probes (bare connects) made before it wrote anything may have their
    # server-side FIN (the Java server closes lazily) and its ACK in the capture: segments of a
    # connection whose SYN is not in the file, which dbtap rightly does not track. Counted here:
    # they carry no payload, so nothing is lost in them and they do not make the report incomplete.
    conns = collections.defaultdict(lambda: [0, False])
    for src, sport, dst, dport, _seq, flags, _n in harness.pcap_tcp_segments(cap.pcap):
        k = tuple(sorted([(src, sport), (dst, dport)]))
        conns[k][0] += 1
        conns[k][1] |= bool(flags & 0x02)
    untracked = sum(n for n, syn in conns.values() if not syn)
    assert c["empty_segments_not_tracked"] == untracked
    assert c["not_tracked_segments"] == 0
    bad = {k: c[k] for k in HEALTH_KEYS if k != "not_tracked_segments" and c.get(k, 0) != 0}
    assert not bad, bad
    assert c["complete"] is True
    assert cap.digest["totals"]["no_response"] == 0
