"""`dbtap digest --fingerprint pt` joins with pt-query-digest: the same Query IDs, the same counts.

pt-query-digest 3.2.1 (Debian's percona-toolkit, installed by tests/setup.sh) reads the shipped
sample capture through `tcpdump -x`, the way its documentation says; every query class it
reports must be a dbtap group with the same checksum and the same count. pt does not report
COM_STMT_CLOSE or COM_QUIT; dbtap does, and those are the only groups it may have on top.
"""

import json
import shutil
import subprocess

import pytest

import harness

SAMPLE = harness.REPO / "samples" / "mysql-sysbench.pcap.gz"


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    for tool in ("pt-query-digest", "tcpdump"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (tests/setup.sh installs it)")
    pcap = tmp_path_factory.mktemp("pt") / "sample.pcap"
    pcap.write_bytes(subprocess.run(["gzip", "-dc", str(SAMPLE)], check=True,
                                    stdout=subprocess.PIPE).stdout)
    dump = subprocess.run(["tcpdump", "-r", str(pcap), "-x", "-n", "-q", "-tttt"], check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    pt = subprocess.run(["pt-query-digest", "--type", "tcpdump", "--watch-server",
                         "127.0.0.1:33306", "--output", "json", "--limit", "100%"],
                        input=dump, check=True, stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL).stdout.decode()
    # pt prints a "Reading from STDIN ..." line before its JSON.
    pt = json.loads(pt[pt.index("{"):])
    d = harness.digest(pcap, extra=("--port", "33306", "--fingerprint", "pt"))
    return pt, d


def test_every_pt_class_is_a_dbtap_group_with_the_same_id_and_count(both):
    pt, d = both
    ours = {}
    for q in d["queries"]:
        ours[q["id"]] = ours.get(q["id"], 0) + q["count"]
    theirs = {c["checksum"]: c["query_count"] for c in pt["classes"]}
    assert len(theirs) >= 25, "pt-query-digest found too few classes to be a meaningful check"
    assert {k: ours.get(k) for k in theirs} == theirs


def test_dbtap_adds_only_what_pt_does_not_report(both):
    pt, d = both
    theirs = {c["checksum"] for c in pt["classes"]}
    extra = sorted({q["command"] for q in d["queries"] if q["id"] not in theirs})
    assert extra == ["close", "quit"]


def test_fingerprints_are_pt_s(both):
    pt, d = both
    ours = {q["id"]: q["fingerprint"] for q in d["queries"]}
    for c in pt["classes"]:
        assert ours[c["checksum"]] == c["fingerprint"]
