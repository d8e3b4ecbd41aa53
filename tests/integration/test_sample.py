"""samples/mysql-sysbench.pcap.gz against the server counters recorded when it was made
(samples/mysql-sysbench.json, by samples/make-sample.sh). No server needed."""

import collections
import json

import pytest

import harness

SAMPLE = harness.REPO / "samples" / "mysql-sysbench.pcap.gz"
META = harness.REPO / "samples" / "mysql-sysbench.json"


@pytest.fixture(scope="module")
def sample():
    m = json.loads(META.read_text())
    ev = harness.events(SAMPLE, extra=("--port", "33306"))
    d = harness.digest(SAMPLE, extra=("--port", "33306"))
    return m, ev, d


def test_sample_counts(sample):
    m, ev, d = sample
    C, sc = m["counters"], m["script"]
    n = collections.Counter(e["command"] for e in ev)
    want = {
        # SQL-level PREPARE/EXECUTE/DEALLOCATE (text) also count in Com_stmt_*: take them out.
        "execute": C["Com_stmt_execute"] - C["Com_execute_sql"],
        "prepare": C["Com_stmt_prepare"] - C["Com_prepare_sql"],
        "close": C["Com_stmt_close"] - C["Com_dealloc_sql"],
        "query": sc["queries_ok"] + sc["errors"],
        "quit": C["Connections"],
    }
    got = {k: n[k] for k in want}
    assert got == want
    assert sum(n.values()) == sum(want.values()) == d["totals"]["queries"], dict(n)


def test_sample_rows_and_errors(sample):
    m, ev, d = sample
    assert sum(e.get("rows") or 0 for e in ev) == m["counters"]["Rows_sent"]
    got = collections.Counter()
    for g in d["queries"]:
        got.update(harness.errors_by_code(g))
    assert m["sysbench"]["ignored_errors"] == 0, \
        "the sample holds sysbench errors whose codes were not recorded: regenerate it"
    want = {int(k): v for k, v in m["script"]["errors_by_code"].items()}
    assert dict(got) == want
    assert d["totals"]["errors"] == m["script"]["errors"]


def test_sample_capture_health(sample):
    m, ev, d = sample
    c = d["capture"]
    assert c["packets"] == m["tcpdump"]["captured"]
    bad = {k: c.get(k) for k in ("gaps", "truncated_packets", "responses_without_request",
                                  "unparsed_bytes", "unanswered", "encrypted_connections") if c.get(k) != 0}
    assert not bad, bad
