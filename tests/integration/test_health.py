"""Capture health on clean loopback captures, and the same workload seen through `-i any`."""

import collections

from harness import duplicate_segments


def check_duplicates(c, pcap, skip_port=None):
    segs, nbytes = duplicate_segments(pcap, skip_port)
    assert (c["duplicates"], c.get("retransmitted_bytes")) == (segs, nbytes), \
        f"duplicates/retransmitted_bytes {c['duplicates']}/{c.get('retransmitted_bytes')} " \
        f"!= {segs} segments / {nbytes} bytes already seen, counted from the pcap"


def test_clean_capture_health(sysbench_capture, dbtap_digest):
    cap = sysbench_capture["lo"]
    c = dbtap_digest(cap.pcap)["capture"]
    assert c["packets"] == cap.tcpdump["captured"], \
        f"capture.packets {c['packets']} != tcpdump's own count {cap.tcpdump['captured']}"
    bad = {k: c.get(k) for k in ("gaps", "gap_bytes", "truncated_packets",
                                  "responses_without_request", "unparsed_bytes", "unanswered",
                                  "encrypted_connections") if c.get(k) != 0}
    assert not bad, f"a clean loopback capture (tcpdump dropped 0) reports {bad}"
    check_duplicates(c, cap.pcap)


def test_scripted_capture_health(scripted_capture, dbtap_digest):
    """Also clean, except the one TLS connection. The pre-existing connection's first bytes are a
    complete request, so nothing there is a response without request either."""
    c = dbtap_digest(scripted_capture.pcap)["capture"]
    assert c["packets"] == scripted_capture.tcpdump["captured"]
    bad = {k: c.get(k) for k in ("gaps", "gap_bytes", "truncated_packets",
                                  "responses_without_request", "unanswered") if c.get(k) != 0}
    assert not bad, bad
    check_duplicates(c, scripted_capture.pcap, scripted_capture.extra["ledger"].by_name("tls").port)
    assert c["encrypted_connections"] == 1


def test_any_interface_same_counts(sysbench_capture, dbtap_events, dbtap_digest):
    """The same run captured at the same time with `-i any` (LINUX_SLL2) and `-i lo` (Ethernet):
    the same requests per command and fingerprint, and the server's count."""
    lo, anyc = sysbench_capture["lo"], sysbench_capture["any"]
    with open(anyc.pcap, "rb") as f:
        hdr = f.read(24)
    linktype = int.from_bytes(hdr[20:24], "little" if hdr[:4] == b"\xd4\xc3\xb2\xa1" else "big")
    assert linktype == 276, f"-i any capture has link type {linktype}, expected 276 (LINUX_SLL2)"

    def groups(p):
        return collections.Counter((e["command"], e.get("fingerprint"), e.get("outcome"))
                                   for e in dbtap_events(p))
    a, b = groups(lo.pcap), groups(anyc.pcap)
    assert a == b, f"lo vs any differ: {dict((a - b) + (b - a))}"
    n_exec = sum(v for (cmd, _, _), v in b.items() if cmd == "execute")
    assert n_exec == anyc.counters["Com_stmt_execute"]
    c = dbtap_digest(anyc.pcap)["capture"]
    assert c["packets"] == anyc.tcpdump["captured"]
    # Loopback through `any` may show each packet twice; whatever dbtap counts as duplicates,
    # nothing may be lost or misread.
    bad = {k: c.get(k) for k in ("gaps", "responses_without_request", "unparsed_bytes",
                                  "unanswered") if c.get(k) != 0}
    assert not bad, bad
