#!/usr/bin/python3
"""Print the Rust command table for proto::redis::command from a live server's COMMAND INFO.

usage: gen_command_table.py PORT > table.rs.txt   (then paste into src/redis/command.rs)

For each command: the lower-case name, whether it is a container (has subcommands), and where
its first key is, from its first key specification (begin_search index or keyword, then
find_keys range or keynum). Container subcommands that take a key are listed separately.
Stdlib only: speaks RESP2 over a socket.
"""
import socket
import sys


def read_value(f):
    line = f.readline()
    t, rest = line[:1], line[1:-2]
    if t in (b"+", b"-"):
        return rest.decode()
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode()
    if t == b"*":
        n = int(rest)
        if n < 0:
            return None
        return [read_value(f) for _ in range(n)]
    raise SystemExit(f"unexpected {line!r}")


def kv(lst):
    return dict(zip(lst[0::2], lst[1::2]))


def first_key(info):
    specs = info[8] if len(info) > 8 else []
    if not specs:
        return "None"
    s = kv(specs[0])
    bs, fk = kv(s["begin_search"]), kv(s["find_keys"])
    bspec = kv(bs["spec"]) if bs["spec"] else {}
    fspec = kv(fk["spec"]) if fk["spec"] else {}
    if bs["type"] == "index":
        i = bspec["index"]
        if fk["type"] == "range":
            return f"At({i})"
        if fk["type"] == "keynum":
            return f"Numkeys {{ count_at: {i + fspec['keynumidx']}, first: {i + fspec['firstkey']} }}"
    if bs["type"] == "keyword":
        return f"After {{ keyword: \"{bspec['keyword']}\", from: {bspec['startfrom']} }}"
    return "None"


def main():
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"*2\r\n$7\r\nCOMMAND\r\n$4\r\nINFO\r\n")
    f = s.makefile("rb")
    infos = read_value(f)
    rows, subs = [], []
    for info in infos:
        name = info[0]
        sub = info[9] if len(info) > 9 and info[9] else []
        rows.append((name, bool(sub), first_key(info)))
        for si in sub:
            k = first_key(si)
            if k != "None":
                subs.append((si[0], k))
    for name, container, key in sorted(rows):
        print(f'    ("{name}", {str(container).lower()}, {key}),')
    print("// keyed subcommands")
    for name, key in sorted(subs):
        print(f'    ("{name}", {key}),')


if __name__ == "__main__":
    main()
