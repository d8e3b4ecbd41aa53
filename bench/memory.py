#!/usr/bin/env python3
"""Peak memory of `dbtap digest` on inputs built to make it grow, against the bounds its defaults
promise (a digest stays under about 256 MB whatever the input).

    python3 bench/memory.py [--conns 500000] [--dbtap target/release/dbtap]

Builds, under bench/out/ (and removes afterwards), a capture of N Redis connections that never
close, each a PING and its PONG picked up mid-stream, runs dbtap on it under /usr/bin/time, and
checks: every request counted, the evictions reported, and peak RSS under 256 MB. The smaller
cases (3,000 files under `ulimit -n 256`, 30,000 connections capped at 1,000, 30 concurrent
40 MB statements) are Rust tests in crates/dbtap/tests/ and run with the suite.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOUND_MB = 256


def ip_checksum(h: bytes) -> int:
    s = sum(struct.unpack("!10H", h))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def packet(src: bytes, dst: bytes, sport: int, dport: int, seq: int, payload: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 1, 0x50, 0x18, 0xFFFF, 0, 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, src, dst)
    hdr = hdr[:10] + struct.pack("!H", ip_checksum(hdr)) + hdr[12:]
    return hdr + tcp


def write_capture(path: str, conns: int) -> None:
    ping, pong = b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n"
    server = bytes([10, 0, 0, 1])
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        t = 1_000_000_000_000
        for i in range(conns):
            client = bytes([10, 1 + (i >> 16), (i >> 8) & 0xFF, i & 0xFF])
            cport = 20000 + (i % 40000)
            for src, dst, sp, dp, seq, data, dt in (
                (client, server, cport, 6379, 1000, ping, 0),
                (server, client, 6379, cport, 5000, pong, 50),
            ):
                p = packet(src, dst, sp, dp, seq, data)
                ts = t + i * 100 + dt
                f.write(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(p), len(p)))
                f.write(p)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=500_000)
    ap.add_argument("--dbtap", default=os.path.join(ROOT, "target", "release", "dbtap"))
    a = ap.parse_args()
    if not os.path.exists("/usr/bin/time"):
        print("memory bench: /usr/bin/time is missing (apt-get install time)", file=sys.stderr)
        return 2
    out = os.path.join(ROOT, "bench", "out")
    os.makedirs(out, exist_ok=True)
    cap = os.path.join(out, f"never-closed-{a.conns}.pcap")
    t0 = time.time()
    write_capture(cap, a.conns)
    print(f"capture: {a.conns:,} never-closed connections, {os.path.getsize(cap) / 1e6:.0f} MB "
          f"({time.time() - t0:.1f} s to write)")
    try:
        r = subprocess.run(["/usr/bin/time", "-f", "%M %e", a.dbtap, "digest", "--format", "json",
                            "--quiet", cap], capture_output=True, text=True, check=True)
    finally:
        os.remove(cap)
    rss_kib, wall = r.stderr.strip().splitlines()[-1].split()
    d = json.loads(r.stdout)
    queries, evicted = d["totals"]["queries"], d["capture"].get("connections_evicted", 0)
    rss_mb = int(rss_kib) / 1024
    print(f"dbtap digest: {queries:,} requests counted, {evicted:,} connections evicted, "
          f"peak RSS {rss_mb:.0f} MB (bound {BOUND_MB} MB), {float(wall):.1f} s")
    ok = queries == a.conns and rss_mb < BOUND_MB and (evicted > 0) == (a.conns > 50_000)
    print("memory bench:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
