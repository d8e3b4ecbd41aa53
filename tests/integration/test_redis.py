"""dbtap on real Redis 7.0 traffic, held to INFO commandstats / errorstats and the clients' counts.

A private redis-server on 127.0.0.1:36379 (redis_harness.RedisServer), captured with tcpdump on
lo. CONFIG RESETSTAT and the INFO snapshots go over the UNIX socket, so they are not on the wire,
and the snapshot deltas are exact (redis_harness.stats_delta).

- redis-benchmark -P 16 over 8 commands: per command, dbtap's count == commandstats calls.
- a scripted workload (redis_harness.RedisWorkload): redis-py (RESP2), raw RESP3 with pushes,
  MULTI/EXEC, pub/sub, WRONGTYPE / unknown command / wrong arity errors, a 1000-command
  pipeline, a 10 MB value, BLPOP blocked 200 ms, CLIENT REPLY OFF, redis-cli -3.

dbtap's Redis `command` is the lower-case command name: commandstats' `config|get` is `config`.
A request on the wire is a command the server ran (`calls`) or refused before running it
(`rejected_calls`, e.g. wrong arity); an unknown command has no commandstats entry and is
dbtap's `unknown`.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402

PORT = 36379
OUT = harness.REPO / "tests" / "out" / "redis"
BENCH_TESTS = "set,get,lpush,lpop,incr,hset,sadd,mset"
BENCH_N = 20000


@pytest.fixture(scope="module")
def rs():
    srv = rh.RedisServer(PORT, OUT / "server")
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


_cache: dict = {}


def digest(pcap) -> dict:
    k = ("digest", str(pcap))
    if k not in _cache:
        _cache[k] = harness.digest(pcap, extra=("--port", str(PORT)))
    return _cache[k]


def events(pcap) -> list[dict]:
    k = ("events", str(pcap))
    if k not in _cache:
        _cache[k] = harness.events(pcap, extra=("--port", str(PORT)))
    return _cache[k]


class Capture:
    def __init__(self, pcap, tcpdump, delta, requests, extra):
        self.pcap, self.tcpdump, self.delta, self.requests, self.extra = \
            pcap, tcpdump, delta, requests, extra


def _capture(srv, name, work):
    srv.reset_stats()
    srv.socket_calls.clear()
    cap = rh.Tcpdump(OUT / f"{name}.pcap", PORT)
    try:
        cap.start()
        before = srv.snapshot()
        extra = work()
    finally:
        stats = cap.stop()
    after = srv.snapshot()
    rh.check_dropped(stats)
    d = rh.stats_delta(before, after)
    return Capture(cap.out, stats, d, rh.wire_requests(d, srv.socket_calls), extra)


@pytest.fixture(scope="module")
def bench(rs):
    return _capture(rs, "benchmark",
                    lambda: rh.benchmark_run(rs, BENCH_TESTS, BENCH_N, pipeline=16, clients=4))


@pytest.fixture(scope="module")
def scripted(rs):
    return _capture(rs, "scripted", lambda: rh.RedisWorkload(rs).run())


def _want(cap, unknown: int = 0) -> dict:
    want = {k: (v["requests"], v["errors"]) for k, v in cap.requests.items()}
    if unknown:
        want["unknown"] = (unknown, unknown)
    return want


def _got(pcap) -> dict:
    return {k: (v["count"], v["errors"]) for k, v in rh.dbtap_by_command(digest(pcap)).items()}


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _conn_events(cap, name) -> list[dict]:
    port = cap.extra["ports"][name]
    return sorted((e for e in events(cap.pcap) if _port(e["client"]) == port),
                  key=lambda e: e["start_ns"])


HEALTH_KEYS = ("gaps", "gap_bytes", "truncated_packets", "responses_without_request",
               "unparsed_bytes", "malformed_messages", "unanswered", "resyncs",
               "encrypted_connections", "inflight_overflow", "not_tracked_segments")


# -------------------------------------------------------------------------------------------------
# redis-benchmark

def test_benchmark_per_command_equals_commandstats(bench):
    want = _want(bench)
    for t in BENCH_TESTS.split(","):
        assert want[t][0] >= BENCH_N, (t, want.get(t))  # the run did what was asked
    assert _got(bench.pcap) == want


def test_benchmark_events_equal_digest(bench):
    """The NDJSON events say the same as the digest groups."""
    ev = {k: (v["count"], v["errors"]) for k, v in rh.events_by_command(events(bench.pcap)).items()}
    assert ev == _got(bench.pcap)


def test_benchmark_capture_health(bench):
    c = digest(bench.pcap)["capture"]
    assert c["packets"] == bench.tcpdump["captured"]
    bad = {k: c[k] for k in HEALTH_KEYS if c[k] != 0}
    assert not bad, f"a clean loopback capture (tcpdump dropped 0) reports {bad}"
    assert c["complete"] is True
    t = digest(bench.pcap)["totals"]
    assert t["no_response"] == 0 and t["errors"] == 0


# -------------------------------------------------------------------------------------------------
# scripted workload

def test_scripted_ledger_equals_commandstats(scripted):
    """The workload's own ledger of what it sent agrees with the server (no dbtap here): the
    truth below is consistent."""
    sent = scripted.extra["sent"]
    want = {k: v for k, v in _want(scripted, unknown=sent["unknown"]).items()}
    assert {k: v[0] for k, v in want.items()} == {k: v for k, v in sent.items() if v}


def test_scripted_per_command_equals_commandstats(scripted):
    want = _want(scripted, unknown=scripted.extra["sent"]["unknown"])
    assert _got(scripted.pcap) == want


def test_scripted_totals_exclude_pushes(scripted):
    """Published messages delivered to subscribers (RESP2 arrays, RESP3 pushes) are not requests:
    the total is exactly the commands sent."""
    info = scripted.extra["info"]
    assert info["messages_received"] == rh.PUBSUB_N and info["pushes_received"] == rh.PUSH_N
    total = sum(v[0] for v in _want(scripted, unknown=scripted.extra["sent"]["unknown"]).values())
    d = digest(scripted.pcap)
    assert d["totals"]["queries"] == total
    sub = collections.Counter(e["command"] for e in _conn_events(scripted, "subscriber"))
    assert sub == {"subscribe": 1, "unsubscribe": 1}
    sub3 = collections.Counter(e["command"] for e in _conn_events(scripted, "resp3_sub"))
    assert sub3 == {"hello": 1, "subscribe": 1, "unsubscribe": 1, "hset": 1, "hgetall": 1,
                    "sadd": 1, "smembers": 1, "zadd": 1, "zscore": 1}
    pub = collections.Counter(e["command"] for e in _conn_events(scripted, "publisher"))
    assert pub == {"ping": 1, "publish": rh.PUBSUB_N + rh.PUSH_N}
    # They are counted apart, as server pushes: every PUBLISH returned 1 receiver, and the
    # subscribers read exactly that many messages.
    c = d["capture"]
    delivered = info["messages_received"] + info["pushes_received"]
    assert c["server_pushes"] == delivered == rh.PUBSUB_N + rh.PUSH_N, c
    assert c["server_push_bytes"] > 0 and c["complete"] is True, c


def test_scripted_errors(scripted):
    """Errors by reply prefix: dbtap == INFO errorstats == the client's exceptions."""
    got = collections.Counter()
    for g in digest(scripted.pcap)["queries"]:
        for e in g["errors_by_code"]:
            got[e["state"]] += e["count"]
        assert g["errors_uncoded"] == 0
    assert dict(scripted.extra["errors"]) == {"WRONGTYPE": 2, "ERR": 3}
    assert scripted.delta["errorstats"] == dict(scripted.extra["errors"])
    assert dict(got) == dict(scripted.extra["errors"])
    # failed_calls (ran, then failed) and rejected_calls (refused before running)
    cs = scripted.delta["commandstats"]
    assert (cs["lpush"]["failed_calls"], cs["get"]["rejected_calls"]) == (2, 1)


def test_resp3_replies(scripted):
    evs = {e["command"]: e for e in _conn_events(scripted, "resp3_sub")}
    assert all(e["outcome"] == "ok" for e in evs.values()), evs
    # a map counts its pairs, a set its members
    assert (evs["hgetall"]["rows"], evs["smembers"]["rows"]) == (2, 3)


def test_multi_exec(scripted):
    evs = _conn_events(scripted, "tx")
    assert [e["command"] for e in evs] == ["ping", "multi", "set", "incrby", "lpush", "exec"]
    assert all(e["outcome"] == "ok" for e in evs), [(e["command"], e["outcome"]) for e in evs]
    assert evs[-1]["rows"] == 3  # EXEC's array: one result per queued command


def test_pipeline_1000(scripted):
    evs = _conn_events(scripted, "pipeline")
    c = collections.Counter((e["command"], e["outcome"]) for e in evs)
    assert c == {("ping", "ok"): 1, ("incrby", "ok"): rh.PIPELINE_N}
    assert scripted.delta["commandstats"]["incrby"]["calls"] == rh.PIPELINE_N + 1  # + MULTI's


def test_big_value(scripted):
    evs = _conn_events(scripted, "py")
    big = [e for e in evs if e["command"] in ("set", "get") and e["bytes_in"] + e["bytes_out"] > rh.BIG]
    assert [(e["command"], e["outcome"]) for e in big] == [("set", "ok"), ("get", "ok")]
    s, g = big
    assert scripted.extra["info"]["big_len"] == rh.BIG
    assert s["bytes_in"] >= rh.BIG and g["bytes_out"] >= rh.BIG and g["rows"] == 1


def test_blpop_latency(scripted):
    evs = [e for e in _conn_events(scripted, "blpop") if e["command"] == "blpop"]
    assert len(evs) == 1 and evs[0]["outcome"] == "ok" and evs[0]["rows"] == 2
    lat_s = evs[0]["latency_us"] / 1e6
    # the push was sent at least BLOCK_S after the server reported the client blocked
    assert rh.BLOCK_S <= lat_s <= scripted.extra["info"]["blpop_client_s"], lat_s


def test_client_reply_off(scripted):
    evs = _conn_events(scripted, "reply_off")
    got = [(e["command"], e["outcome"]) for e in evs]
    assert got == [("client", "no_reply_expected"), ("set", "no_reply_expected"),
                   ("set", "no_reply_expected"), ("incr", "no_reply_expected"),
                   ("client", "ok"), ("get", "ok")]


def test_scripted_capture_health(scripted):
    c = digest(scripted.pcap)["capture"]
    assert c["packets"] == scripted.tcpdump["captured"]
    bad = {k: c[k] for k in HEALTH_KEYS if c[k] != 0}
    assert not bad, bad
    assert digest(scripted.pcap)["totals"]["no_response"] == 0
