"""Bad and unusual input: missing, empty, text and truncated files; stdin, gzip, pcapng, several
files. Truth for the truncated file is the pcap record layout itself, read here with struct."""

import gzip
import json
import struct
import subprocess

import pytest

import harness
from conftest import PORT

SERVER = ("--server", f"127.0.0.1:{PORT}")


def run(*args, stdin=None):
    return harness.dbtap(*args, stdin=stdin, check=False)


def assert_one_line_error(r, path):
    err = r.stderr.decode(errors="replace").strip()
    assert r.returncode != 0, f"exit 0 for {path}; stdout {r.stdout[:200]!r}"
    assert 0 < r.returncode < 100, f"exit code {r.returncode} (101 is a Rust panic, >128 a signal): {err}"
    assert "panicked" not in err, err
    assert len(err.splitlines()) == 1, f"stderr is not one line:\n{err}"
    assert str(path) in err or path.name in err, f"stderr does not name {path}: {err}"


@pytest.mark.parametrize("sub", ["digest", "events"])
def test_missing_file(sub, tmp_path):
    p = tmp_path / "no-such-capture.pcap"
    assert_one_line_error(run(sub, p), p)


@pytest.mark.parametrize("sub", ["digest", "events"])
def test_empty_file(sub, tmp_path):
    p = tmp_path / "empty.pcap"
    p.write_bytes(b"")
    assert_one_line_error(run(sub, p), p)


@pytest.mark.parametrize("sub", ["digest", "events"])
def test_text_file(sub, tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("this is not a capture\n" * 100)
    assert_one_line_error(run(sub, p), p)


def pcap_records(data: bytes):
    """(offset, caplen) of each complete record of a classic pcap, and the offset where an
    incomplete one starts (None if the file ends on a record boundary)."""
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off, recs = 24, []
    while off + 16 <= len(data):
        caplen = struct.unpack_from(endian + "I", data, off + 8)[0]
        if off + 16 + caplen > len(data):
            return recs, off
        recs.append((off, caplen))
        off += 16 + caplen
    return recs, (off if off < len(data) else None)


def test_truncated_capture(sysbench_capture, tmp_path, dbtap_digest):
    """`head -c` of a real capture, cut in the middle of a record: exit 0, a warning on stderr
    naming the file and the offset, and a report of every complete record before the cut."""
    full = sysbench_capture["lo"].pcap
    data = full.read_bytes()
    recs, _ = pcap_records(data)
    mid = recs[len(recs) // 2]
    cut = mid[0] + 16 + max(1, mid[1] // 2)  # inside the packet data of record #len/2
    p = tmp_path / "cut.pcap"
    subprocess.run(f"head -c {cut} {full} > {p}", shell=True, check=True)
    recs_cut, partial_at = pcap_records(p.read_bytes())
    assert partial_at == mid[0] and len(recs_cut) == len(recs) // 2

    r = run("digest", p, "--format", "json", "--limit", "100000", *SERVER)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, f"exit {r.returncode} for a truncated capture: {err}"
    assert "panicked" not in err
    assert str(p) in err or p.name in err, f"no warning naming the file: {err!r}"
    assert str(partial_at) in err or str(cut) in err, \
        f"the warning names neither the offset of the cut record ({partial_at}) nor the file size ({cut}): {err!r}"
    d = json.loads(r.stdout)
    assert d["capture"]["packets"] == len(recs_cut), \
        f"capture.packets {d['capture']['packets']} != {len(recs_cut)} complete records before the cut"
    assert d["capture"]["warnings"], "capture.warnings is empty for a truncated file"
    whole = dbtap_digest(full)
    assert 0 < d["totals"]["queries"] < whole["totals"]["queries"]


def normalize(obj, names):
    if isinstance(obj, dict):
        return {k: normalize(v, names) for k, v in obj.items()}
    if isinstance(obj, list):
        return [normalize(v, names) for v in obj]
    if isinstance(obj, str) and obj in names:
        return "<input>"
    return obj


def digest_json(r, names):
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return normalize(json.loads(r.stdout), names)


def test_stdin_and_gzip_identical(sysbench_capture, tmp_path):
    """`cat cap | dbtap digest -`, `gzip -c cap | dbtap digest -`, `dbtap digest cap.pcap.gz` and
    `dbtap digest cap` give the same JSON (input names aside)."""
    full = sysbench_capture["lo"].pcap
    raw = full.read_bytes()
    gz = tmp_path / "cap.pcap.gz"
    gz.write_bytes(gzip.compress(raw, compresslevel=1))
    names = {str(full), full.name, str(gz), gz.name, "-", "<stdin>", "stdin"}
    args = ("--format", "json", "--limit", "100000", *SERVER)
    base = digest_json(run("digest", full, *args), names)
    via_stdin = digest_json(run("digest", "-", *args, stdin=raw), names)
    via_gz_stdin = digest_json(run("digest", "-", *args, stdin=gz.read_bytes()), names)
    via_gz_file = digest_json(run("digest", gz, *args), names)
    assert via_stdin == base, "stdin digest differs from the file's"
    assert via_gz_stdin == via_gz_file, "gzip on stdin differs from the .pcap.gz file"
    assert via_gz_file == base, "the .pcap.gz digest differs from the plain file's"


def test_pcapng_same_as_pcap(sysbench_capture, tmp_path, dbtap_digest):
    full = sysbench_capture["lo"].pcap
    ng = tmp_path / "cap.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(full), str(ng)], check=True)
    names = {str(full), full.name, str(ng), ng.name}
    a = normalize(dbtap_digest(full), names)
    b = normalize(dbtap_digest(ng), names)
    assert a["totals"] == b["totals"] and a["queries"] == b["queries"]
    assert a["capture"]["packets"] == b["capture"]["packets"]


def test_several_files_add_up(sysbench_capture, scripted_capture, dbtap_digest):
    a = dbtap_digest(sysbench_capture["lo"].pcap)
    b = dbtap_digest(scripted_capture.pcap)
    both = harness.digest(sysbench_capture["lo"].pcap, scripted_capture.pcap, extra=SERVER)
    assert both["totals"]["queries"] == a["totals"]["queries"] + b["totals"]["queries"]
    assert both["totals"]["errors"] == a["totals"]["errors"] + b["totals"]["errors"]
    assert both["capture"]["packets"] == a["capture"]["packets"] + b["capture"]["packets"]


def test_server_found_without_flag(sysbench_capture, dbtap_digest):
    """Port 33306 is not MySQL's usual port; the server greeting at connection start shows it."""
    cap = sysbench_capture["lo"]
    d = dbtap_digest(cap.pcap, server_flag=False)
    assert d["totals"]["queries"] == dbtap_digest(cap.pcap)["totals"]["queries"]


@pytest.mark.parametrize("order", ["total", "count", "p99", "errors"])
def test_order_by_and_limit(order, sysbench_capture):
    """--order-by ranks the groups by that key, --limit keeps that many."""
    d = harness.digest(sysbench_capture["lo"].pcap, extra=(*SERVER, "--order-by", order))
    key = {"total": lambda g: g["latency_us"]["sum"] or 0, "count": lambda g: g["count"],
           "p99": lambda g: g["latency_us"].get("p99") or 0, "errors": lambda g: g.get("errors", 0)}[order]
    vals = [key(g) for g in d["queries"]]
    assert vals == sorted(vals, reverse=True), f"--order-by {order}: {vals}"
    r = run("digest", sysbench_capture["lo"].pcap, "--format", "json", "--limit", "3",
            "--order-by", order, *SERVER)
    top = json.loads(r.stdout)["queries"]
    assert [g["fingerprint"] for g in top] == [g["fingerprint"] for g in d["queries"][:3]]


def test_text_report(sysbench_capture):
    r = run("digest", sysbench_capture["lo"].pcap, "--limit", "5", *SERVER)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"select c from sbtest" in r.stdout
