"""Shared by the per-protocol pcap2transcripts.py scripts: read a little-endian classic pcap
(Ethernet or Linux cooked, IPv4/IPv6, TCP) and split the traffic of one server port into
per-connection transcript lines `C <ts_ns> <hex>` (client to server) and `S <ts_ns> <hex>`, in
capture order, with retransmitted bytes dropped by TCP sequence number. Stdlib only.
"""
import struct


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


def split(path, port, holes="keep"):
    """(order, conns): the connection keys ((client addr, port), (server addr, port)) in order of
    first appearance, and for each {"lines": [...]}. `holes`: "keep" goes on after bytes the
    capture missed; "fail" stops with an error naming the connection."""
    conns = {}
    order = []
    nexts = {}
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
            c = conns[key] = {"lines": []}
            nexts[key] = {}
            order.append(key)
        nxt_by_dir = nexts[key]
        if flags & 0x02:  # SYN
            nxt_by_dir[d] = (seq + 1) & 0xFFFFFFFF
            continue
        if not payload:
            continue
        nxt = nxt_by_dir.get(d, seq)
        skip = (nxt - seq) & 0xFFFFFFFF
        if skip >= 0x80000000:
            if holes == "fail":
                raise SystemExit(f"{key}: {0x100000000 - skip} bytes missing before seq {seq}")
            skip = 0  # a hole: keep what we have
        if skip >= len(payload):
            continue  # retransmission
        payload = payload[skip:]
        nxt_by_dir[d] = (seq + skip + len(payload)) & 0xFFFFFFFF
        c["lines"].append(f"{d} {ts} {payload.hex()}")
    return order, conns


def client_bytes(lines):
    """Everything the client sent, joined."""
    return b"".join(bytes.fromhex(l.split()[2]) for l in lines if l[0] == "C")
