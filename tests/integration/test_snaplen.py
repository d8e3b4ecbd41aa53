"""dbtap on the scripted workload captured a second time, at the same moment, with
`tcpdump -s 65535` (the snap length of the classic capture recipes): on loopback, segments longer
than 65535 bytes are cut, so the 2 MB and 17 MB requests and the 5 MB and 20 MB results lose a few
bytes at the end of each long segment. Each cut record is a gap of known size inside a MySQL packet
whose length the header announced: the framing holds, and every request is still counted in its
group, the ones that lost bytes marked `text_partial`."""

import collections
import struct
from pathlib import Path

import pytest


def port_of(endpoint):
    return int(str(endpoint).rsplit(":", 1)[1])


def cut_records(path: Path) -> tuple[int, int]:
    """(records whose captured length is below their original length, bytes not captured)."""
    n = lost = 0
    with open(path, "rb") as f:
        hdr = f.read(24)
        endian = "<" if hdr[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                break
            caplen, origlen = struct.unpack(endian + "II", rec[8:16])
            if caplen < origlen:
                n += 1
                lost += origlen - caplen
            f.seek(caplen, 1)
    return n, lost


@pytest.fixture(scope="module")
def snapped(scripted_capture):
    return scripted_capture.extra["snaplen"]


@pytest.fixture(scope="module")
def snap_events(snapped, dbtap_events):
    return dbtap_events(snapped.pcap)


def group_counts(digest) -> collections.Counter:
    return collections.Counter({(g["protocol"], g["command"], g["fingerprint"]): g["count"]
                                for g in digest["queries"]})


def test_the_capture_really_lost_bytes(snapped):
    n, lost = cut_records(snapped.pcap)
    # 2 MB + 17 MB of requests and 5 MB + 20 MB of results in segments of up to 64 KB.
    assert n >= 100 and lost > 0, (n, lost)


def test_big_request_counted_and_marked_partial(snapped, snap_events):
    """The 2 MB statement is counted in its group, paired and timed, its text marked partial."""
    conn = snapped.extra["ledger"].by_name("big")
    ev = [e for e in snap_events if port_of(e["client"]) == conn.port]
    big = [e for e in ev if e.get("fingerprint") == "select length(?) as big_query_marker"]
    assert len(big) == 1, [(e["command"], e.get("fingerprint")) for e in ev]
    e = big[0]
    assert e.get("text_partial") is True, {k: v for k, v in e.items() if k != "text"}
    assert e["outcome"] == "ok" and e["rows"] == 1, e
    assert e["latency_us"] > 0
    text_len = 2 * 1024 * 1024 + len("SELECT LENGTH('') AS big_query_marker")
    assert text_len <= e["bytes_in"] <= text_len + 1 + 8, e["bytes_in"]
    # The 17 MB statement (two MySQL packets) is counted too, in its group.
    huge = [e for e in ev if e.get("fingerprint") == "select length(?) as huge_query_marker"]
    assert len(huge) == 1 and huge[0]["outcome"] == "ok", huge
    # Requests that lost nothing carry no mark.
    after = [e for e in ev if e.get("fingerprint") == "select ? as after_big_marker"]
    assert len(after) == 1 and "text_partial" not in after[0], after


def test_group_counts_equal_the_full_capture(scripted_capture, snapped, dbtap_digest):
    """Every query group has as many events as in the complete capture of the same run."""
    full = group_counts(dbtap_digest(scripted_capture.pcap))
    snap = group_counts(dbtap_digest(snapped.pcap))
    diff = {k: (full.get(k, 0), snap.get(k, 0)) for k in full.keys() | snap.keys()
            if full.get(k, 0) != snap.get(k, 0)}
    assert not diff, f"(full capture, -s 65535) per group: {diff}"


def test_only_requests_that_lost_bytes_are_partial(scripted_capture, snap_events, dbtap_events):
    """The marks land on the big requests only: small ones fit in one uncut segment."""
    partial = [e for e in snap_events if e.get("text_partial")]
    assert partial, "no request marked partial"
    assert all(e["bytes_in"] > 65000 for e in partial), \
        [(e.get("fingerprint"), e["bytes_in"]) for e in partial]
    assert not any(e.get("text_partial") for e in dbtap_events(scripted_capture.pcap))
