#!/usr/bin/env python3
"""Split a pcap (Ethernet or Linux cooked, IPv4/IPv6, TCP) into one transcript per PostgreSQL
connection: lines `C <ts_ns> <hex>` (client to server) and `S <ts_ns> <hex>`, in capture order.
Retransmitted bytes are dropped by TCP sequence number. Stdlib only. (The capture helpers are
those of ../mysql/pcap2transcripts.py.)

usage: pcap2transcripts.py CAPTURE.pcap SERVER_PORT OUT_DIR EXPECT.json

EXPECT.json maps an application_name (from the StartupMessage, after an SSLRequest the server
refused) to {"name": ..., "expect": ["line", ...], "pgss": ["line", ...], "pid": n}; the lines
are written as `# expect ...` and `# pgss ...` comments and the file is named after "name"
(with `_1`, `_2`... when several connections share the name). A connection that opens with a
CancelRequest is named after the connection whose backend pid it cancels, with `_cancel`.
Connections without an entry are skipped.
"""
import json
import os
import struct
import sys


def packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0xA1B2C3D4:
        endian, scale = "<", 1000
    elif magic == 0xA1B23C4D:
        endian, scale = "<", 1
    else:
        raise SystemExit("not a little-endian pcap")
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        yield sec * 1_000_000_000 + frac * scale, linktype, data[off:off + incl]
        off += incl


def tcp(linktype, frame):
    if linktype == 1:  # Ethernet
        etype, p = struct.unpack(">H", frame[12:14])[0], 14
        while etype == 0x8100:
            etype, p = struct.unpack(">H", frame[p + 2:p + 4])[0], p + 4
    elif linktype == 113:  # Linux cooked
        etype, p = struct.unpack(">H", frame[14:16])[0], 16
    else:
        return None
    if etype == 0x0800:
        ihl = (frame[p] & 0x0F) * 4
        if frame[p + 9] != 6:
            return None
        total = struct.unpack(">H", frame[p + 2:p + 4])[0]
        src, dst = frame[p + 12:p + 16], frame[p + 16:p + 20]
        seg = frame[p + ihl:p + total]
    elif etype == 0x86DD:
        if frame[p + 6] != 6:
            return None
        plen = struct.unpack(">H", frame[p + 4:p + 6])[0]
        src, dst = frame[p + 8:p + 24], frame[p + 24:p + 40]
        seg = frame[p + 40:p + 40 + plen]
    else:
        return None
    sport, dport, seq = struct.unpack(">HHI", seg[:8])
    doff = (seg[12] >> 4) * 4
    flags = seg[13]
    return (src, sport), (dst, dport), seq, flags, seg[doff:]


def startup_info(lines):
    """(application_name, cancel_pid) from the first client bytes."""
    data = b"".join(bytes.fromhex(l.split()[2]) for l in lines if l[0] == "C")[:20000]
    while len(data) >= 8:
        n, code = struct.unpack(">II", data[:8])
        if code in (80877103, 80877104) and n == 8:  # SSLRequest, GSSENCRequest
            data = data[8:]
            continue
        if code == 80877102:  # CancelRequest
            return None, struct.unpack(">I", data[8:12])[0]
        if code >> 16 == 3:
            parts = data[8:n].split(b"\0")
            params = dict(zip(parts[0::2], parts[1::2]))
            return params.get(b"application_name", b"").decode(), None
        break
    return None, None


def main():
    path, port, out, expect_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(expect_path) as f:
        expect = json.load(f)
    conns = {}  # (client, server) -> {"lines": [...], "next": {dir: seq}}
    order = []
    for ts, lt, frame in packets(path):
        t = tcp(lt, frame)
        if t is None:
            continue
        a, b, seq, flags, payload = t
        if b[1] == port:
            key, d = (a, b), "C"
        elif a[1] == port:
            key, d = (b, a), "S"
        else:
            continue
        c = conns.get(key)
        if c is None:
            c = conns[key] = {"lines": [], "next": {}}
            order.append(key)
        if flags & 0x02:  # SYN
            c["next"][d] = (seq + 1) & 0xFFFFFFFF
            continue
        if not payload:
            continue
        nxt = c["next"].get(d, seq)
        skip = (nxt - seq) & 0xFFFFFFFF
        if skip >= 0x80000000:
            skip = 0  # a hole: keep what we have
        if skip >= len(payload):
            continue  # retransmission
        payload = payload[skip:]
        c["next"][d] = (seq + skip + len(payload)) & 0xFFFFFFFF
        c["lines"].append(f"{d} {ts} {payload.hex()}")
    os.makedirs(out, exist_ok=True)
    by_pid = {v["pid"]: k for k, v in expect.items() if "pid" in v}
    named = []
    for key in order:
        app, cancel = startup_info(conns[key]["lines"])
        if cancel is not None and cancel in by_pid:
            e = dict(expect[by_pid[cancel]])
            e.update(name=e["name"] + "_cancel", expect=["cancel rows=0 affected=0 err=0 sql="],
                     pgss=[])
            named.append((key, app, e))
        elif app in expect:
            named.append((key, app, expect[app]))
    counts = {}
    for _, _, e in named:
        counts[e["name"]] = counts.get(e["name"], 0) + 1
    seen = {}
    for key, app, e in named:
        name = e["name"]
        if counts[name] > 1:
            seen[name] = seen.get(name, 0) + 1
            name = f"{name}_{seen[name]}"
        c = conns[key]
        fname = os.path.join(out, name + ".txt")
        with open(fname, "w") as f:
            f.write(f"# PostgreSQL connection, application_name={app}, generated by gen.py; "
                    "client to server = C\n")
            for x in e.get("expect", []):
                f.write(f"# expect {x}\n")
            for x in e.get("pgss", []):
                f.write(f"# pgss {x}\n")
            for l in c["lines"]:
                f.write(l + "\n")
        print(fname, len(c["lines"]), "segments")


if __name__ == "__main__":
    main()
