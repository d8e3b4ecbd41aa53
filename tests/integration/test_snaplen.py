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


# ---- PostgreSQL: a crafted capture (no server), written as `tcpdump -s 65535` on lo would ----

PG_PORT = 5432
# One loopback segment as big as IPv4 allows: its frame (14 + 65535 bytes) is 14 bytes over a
# snap length of 65535, so each such record loses the last 14 payload bytes.
SEG = 65535 - 40


def _ip_checksum(h: bytes) -> int:
    s = sum(struct.unpack("!10H", h))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def _frame(src_port: int, dst_port: int, seq: int, ack: int, flags: int, payload: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", src_port, dst_port, seq, ack, 5 << 4, flags, 65535, 0, 0)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + len(payload), 0, 0x4000, 64, 6, 0,
                               bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1])))
    struct.pack_into("!H", ip, 10, _ip_checksum(bytes(ip)))
    return b"\x00" * 12 + b"\x08\x00" + bytes(ip) + tcp + payload


class _Pcap:
    """A classic pcap of one TCP connection on 127.0.0.1, each record cut at `snaplen`."""

    def __init__(self, snaplen: int, port: int = PG_PORT, syn: bool = True) -> None:
        self.snaplen = snaplen
        self.port = port
        self.out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        self.t_us = 1_700_000_000_000_000
        self.seq = {True: 1000, False: 5000}  # client, server
        self.cport = 40000
        if not syn:
            return
        self._rec(True, 0x02, b"")          # SYN
        self.seq[True] += 1
        self._rec(False, 0x12, b"")         # SYN-ACK
        self.seq[False] += 1
        self._rec(True, 0x10, b"")          # ACK

    def _rec(self, client: bool, flags: int, payload: bytes) -> None:
        sp, dp = (self.cport, self.port) if client else (self.port, self.cport)
        f = _frame(sp, dp, self.seq[client], self.seq[not client], flags, payload)
        cap = f[: self.snaplen]
        self.t_us += 100
        self.out += struct.pack("<IIII", self.t_us // 1_000_000, self.t_us % 1_000_000, len(cap), len(f))
        self.out += cap
        self.seq[client] = (self.seq[client] + len(payload)) & 0xFFFFFFFF

    def send(self, client: bool, data: bytes) -> None:
        for i in range(0, len(data), SEG):
            self._rec(client, 0x18, data[i:i + SEG])

    def close(self) -> bytes:
        self._rec(True, 0x11, b"")
        self.seq[True] += 1
        self._rec(False, 0x11, b"")
        self.seq[False] += 1
        self._rec(True, 0x10, b"")
        return bytes(self.out)


def _pg(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("!I", 4 + len(body)) + body


def _pg_conversation(snaplen: int, big_insert: str) -> bytes:
    p = _Pcap(snaplen)
    body = struct.pack("!I", 196608) + b"user\0app\0database\0shop\0\0"
    p.send(True, struct.pack("!I", 4 + len(body)) + body)
    p.send(False, _pg(b"R", struct.pack("!I", 0)) + _pg(b"Z", b"I"))
    p.send(True, _pg(b"Q", big_insert.encode() + b"\0"))
    p.send(False, _pg(b"C", b"INSERT 0 20000\0") + _pg(b"Z", b"I"))
    # A 300 KB DataRow.
    p.send(True, _pg(b"Q", b"SELECT repeat('y', 300000) AS big_row\0"))
    col = b"big_row\0" + struct.pack("!IhIhih", 0, 0, 25, -1, -1, 0)
    row = struct.pack("!hI", 1, 300000) + b"y" * 300000
    p.send(False, _pg(b"T", struct.pack("!h", 1) + col) + _pg(b"D", row)
           + _pg(b"C", b"SELECT 1\0") + _pg(b"Z", b"I"))
    p.send(True, _pg(b"Q", b"SELECT 1 AS after_big\0"))
    p.send(False, _pg(b"C", b"SELECT 1\0") + _pg(b"Z", b"I"))
    p.send(True, _pg(b"X", b""))
    return p.close()


def test_postgres_crafted_snaplen_capture(tmp_path, dbtap_events, dbtap_digest):
    """The same PostgreSQL conversation written whole and cut at 65535 bytes per record: every
    request counted and paired in both, the INSERT that lost bytes marked partial. Today's
    PostgreSQL rule for a message that lost bytes keeps its outcome `incomplete`, for a request
    as for a response."""
    values = ", ".join(f"({i}, 'value number {i}')" for i in range(20000))
    insert = f"INSERT INTO t (a, b) VALUES {values}"
    full, cut = tmp_path / "pg-full.pcap", tmp_path / "pg-s65535.pcap"
    full.write_bytes(_pg_conversation(1 << 20, insert))
    cut.write_bytes(_pg_conversation(65535, insert))
    n, lost = cut_records(cut)
    assert n >= 8 and lost == 14 * n, (n, lost)
    ev = [e for e in dbtap_events(cut) if e["protocol"] == "postgres"]
    assert [e["command"] for e in ev] == ["query", "query", "query", "terminate"], ev
    ins, sel, after, _ = ev
    assert ins.get("text_partial") is True and ins["outcome"] == "incomplete", ins
    assert ins["fingerprint"].startswith("INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4)"), \
        ins["fingerprint"][:100]
    assert ins["bytes_in"] == len(insert) + 6
    assert sel["rows"] == 1 and sel["outcome"] == "incomplete" and "text_partial" not in sel, sel
    assert after["outcome"] == "ok" and "text_partial" not in after, after
    whole = [e for e in dbtap_events(full) if e["protocol"] == "postgres"]
    assert [e["outcome"] for e in whole] == ["ok", "ok", "ok", "no_reply_expected"]
    assert not any(e.get("text_partial") for e in whole)
    # Every group counts the same, but for the INSERT: PostgreSQL fingerprints number every
    # value as pg_stat_statements does ($1 ... $40000, no collapsing of VALUES rows), so the
    # text before the hole gives a group of its own, whose fingerprint is a prefix of the
    # whole statement's.
    cut_counts = group_counts(dbtap_digest(cut, server_flag=False))
    full_counts = group_counts(dbtap_digest(full, server_flag=False))
    diff = {k: (full_counts.get(k, 0), cut_counts.get(k, 0))
            for k in full_counts.keys() | cut_counts.keys()
            if full_counts.get(k, 0) != cut_counts.get(k, 0)}
    assert {k[2][:30] for k in diff} == {"INSERT INTO t (a, b) VALUES ($"}, diff
    assert sorted(diff.values()) == [(0, 1), (1, 0)], diff
    whole_fp = next(k[2] for k, v in diff.items() if v == (1, 0))
    part_fp = next(k[2] for k, v in diff.items() if v == (0, 1))
    assert whole_fp.startswith(part_fp.rsplit(",", 1)[0]), part_fp[-60:]


def _mysql_conversation(snaplen: int, big_insert: str) -> bytes:
    """Picked up mid-stream (no handshake): the INSERT, then `SELECT 1`, each answered."""
    p = _Pcap(snaplen, port=3306, syn=False)

    def packet(seq: int, payload: bytes) -> bytes:
        return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload

    ok = b"\x00\x01\x00\x02\x00\x00\x00"
    p.send(True, packet(0, b"\x03" + big_insert.encode()))
    p.send(False, packet(1, ok))
    p.send(True, packet(0, b"\x03SELECT 1 AS after_big"))
    p.send(False, packet(1, ok))
    return p.close()


def test_mysql_crafted_multi_row_insert_keeps_its_group(tmp_path, dbtap_events, dbtap_digest):
    """A 2 MB multi-row INSERT cut at 65535 bytes per record: counted in the same group as the
    whole statement (its text is the bytes before the first hole joined to the last after the
    last one, and the VALUES rows collapse in the fingerprint), marked partial, answered ok."""
    values = ", ".join(f"({i}, 'value number {i}')" for i in range(80000))
    insert = f"INSERT INTO t (a, b) VALUES {values}"
    assert len(insert) > 2_000_000
    full, cut = tmp_path / "my-full.pcap", tmp_path / "my-s65535.pcap"
    full.write_bytes(_mysql_conversation(1 << 20, insert))
    cut.write_bytes(_mysql_conversation(65535, insert))
    n, _ = cut_records(cut)
    assert n >= 30, n
    ev = [e for e in dbtap_events(cut) if e["protocol"] == "mysql"]
    whole = [e for e in dbtap_events(full) if e["protocol"] == "mysql"]
    assert [e["fingerprint"] for e in ev] == [e["fingerprint"] for e in whole], \
        [e["fingerprint"][:80] for e in ev]
    assert ev[0]["fingerprint"].startswith("insert into t (a, b) values"), ev[0]["fingerprint"]
    assert ev[0].get("text_partial") is True and ev[0]["outcome"] == "ok", ev[0]
    assert ev[0]["bytes_in"] == len(insert) + 5
    assert "text_partial" not in ev[1] and not any(e.get("text_partial") for e in whole)
    assert group_counts(dbtap_digest(cut, server_flag=False)) == \
        group_counts(dbtap_digest(full, server_flag=False))
