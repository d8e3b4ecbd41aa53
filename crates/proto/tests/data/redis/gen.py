#!/usr/bin/python3
"""Workloads that produced the real Redis transcripts in this directory.

Run against a private Redis 7 on 127.0.0.1:PORT that also listens on a unix socket (for the
counters, so that reading them is not captured):

    redis-server --port 26379 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
        --pidfile /tmp/h8-redis.pid --unixsocket /tmp/h8/redis.sock --unixsocketperm 700
    /usr/bin/python3 gen.py 26379 /tmp/h8/redis.sock

It starts tcpdump on lo, runs the workloads, stops tcpdump, and splits the capture with
pcap2transcripts.py into this directory. Each workload records what its client saw (replies,
errors, rows, pushed messages) as `# expect` lines: the truth the Rust tests compare the
session's events with. `commandstats.txt` holds the server's own `INFO commandstats` deltas
over the whole capture (read over the unix socket; the one INFO call between the two
snapshots, and the GET an EVAL script runs, are subtracted).

Clients: redis-py 4.3 (python3-redis; RESP2, pipelines, transactions, pub/sub), redis-cli
(piped, RESP2 and -3), redis-benchmark (-P 16), and a small raw RESP client for what redis-py
cannot do (RESP3, inline commands, CLIENT REPLY, pushes).
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import redis

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 26379
SOCK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/h8/redis.sock"
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = "/tmp/h8/gen"
EXPECT = {}


def rec(lst, command, outcome, text, rows=-1):
    lst.append(f"expect {command} {outcome} rows={rows} text={text}")


def register(port, name, ex, gz=False, pushes=None):
    lines = list(ex)
    if pushes is not None:
        lines.append(f"pushes {pushes}")
    EXPECT[port] = {"name": name, "expect": lines, "gz": gz}


# ---- a raw RESP client ------------------------------------------------------------------


class Raw:
    """Speaks RESP2/RESP3 and returns typed values: ('+', b'OK'), ('$', b'..'), ('*', [...]),
    ('>', [...]) for pushes, ('-', b'ERR ...') for errors, ('_', None), ('%', [(k, v)])..."""

    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", PORT))
        self.f = self.s.makefile("rb")
        self.port = self.s.getsockname()[1]
        self.pushes = 0

    def send(self, data):
        self.s.sendall(data)

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.send(out)

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b"-", b":", b",", b"(", b"#"):
            return (t.decode(), rest)
        if t == b"_":
            return ("_", None)
        if t in (b"$", b"!", b"="):
            n = int(rest)
            if n < 0:
                return (t.decode(), None)
            return (t.decode(), self.f.read(n + 2)[:-2])
        if t in (b"*", b"~", b">"):
            n = int(rest)
            if n < 0:
                return (t.decode(), None)
            return (t.decode(), [self.read() for _ in range(n)])
        if t in (b"%", b"|"):
            n = int(rest)
            return (t.decode(), [(self.read(), self.read()) for _ in range(n)])
        raise SystemExit(f"unexpected {line!r}")

    def reply(self):
        """The next reply, skipping (and counting) pushes."""
        while True:
            v = self.read()
            if v[0] == ">" and v[1] and v[1][0][1] in (b"message", b"pmessage", b"invalidate"):
                self.pushes += 1
                continue
            return v

    def close(self):
        self.s.close()


def rows(v):
    t, x = v
    if x is None:
        return 0
    if t in ("*", "~", "%", ">"):
        return len(x)
    if t in ("$", "="):
        return 1
    return 0


def outcome(v):
    return "error" if v[0] in ("-", "!") else "ok"


def raw_do(c, ex, command, text, *args):
    c.cmd(*args)
    v = c.reply()
    rec(ex, command, outcome(v), text, rows(v))
    return v


# ---- workloads --------------------------------------------------------------------------


def py_pipeline():
    # Pipelines take a connection from the pool: use the pool for everything (one connection,
    # reused), and read its port at the end.
    r = redis.Redis(port=PORT)
    ex = []
    p = r.pipeline(transaction=False)
    plan = []
    for i in range(200):
        k = f"user:{i}:profile"
        p.set(k, f"v{i}")
        plan.append(("set", f"SET {k}"))
        p.get(k)
        plan.append(("get", f"GET {k}"))
        p.incr(f"counter:{i % 7}")  # redis-py sends INCRBY key 1
        plan.append(("incrby", f"INCRBY counter:{i % 7}"))
        p.lpush(f"list:{i % 5}", i)
        plan.append(("lpush", f"LPUSH list:{i % 5}"))
        p.lrange(f"list:{i % 5}", 0, 2)
        plan.append(("lrange", f"LRANGE list:{i % 5}"))
    for (command, text), v in zip(plan, p.execute()):
        n = len(v) if isinstance(v, list) else (1 if isinstance(v, bytes) else 0)
        rec(ex, command, "ok", text, n)
    # A transaction with an error inside EXEC.
    r.set("tx:s", "x")
    rec(ex, "set", "ok", "SET tx:s", 0)
    p = r.pipeline(transaction=True)
    p.set("tx:a", 1)
    p.lpush("tx:s", 1)
    p.get("tx:a")
    res = p.execute(raise_on_error=False)
    assert isinstance(res[1], redis.ResponseError), res
    rec(ex, "multi", "ok", "MULTI", 0)
    rec(ex, "set", "ok", "SET tx:a", 0)
    rec(ex, "lpush", "error", "LPUSH tx:s", 0)
    rec(ex, "get", "ok", "GET tx:a", 1)
    rec(ex, "exec", "ok", "EXEC", 3)
    pooled = r.connection_pool._available_connections
    assert len(pooled) == 1, pooled
    port = pooled[0]._sock.getsockname()[1]
    r.close()
    r.connection_pool.disconnect()
    register(port, "py_pipeline", ex)


def py_commands():
    r = redis.Redis(port=PORT, single_connection_client=True)
    port = r.connection._sock.getsockname()[1]
    ex = []

    # `n`: the rows the reply carries where redis-py cannot tell (a simple string `+OK` and a
    # bulk string `OK` both come back as b"OK").
    def do(command, text, fn, n=None):
        try:
            v = fn()
        except redis.ResponseError:
            rec(ex, command, "error", text, 0)
            return None
        if n is None:
            if isinstance(v, dict):
                n = 2 * len(v)  # a flat array of pairs in RESP2
            elif isinstance(v, (list, tuple)):
                n = len(v)
            else:
                n = 1 if isinstance(v, bytes) else 0
        rec(ex, command, "ok", text, n)
        return v

    do("set", "SET s", lambda: r.set("s", "x"))
    do("lpush", "LPUSH s", lambda: r.lpush("s", 1))  # WRONGTYPE
    do("unknown", "NOPE", lambda: r.execute_command("NOPE", "x"))
    do("get", "GET", lambda: r.execute_command("GET"))  # wrong number of arguments
    do("hset", "HSET h", lambda: r.hset("h", mapping={"f1": "v1", "f2": "v2"}))
    do("hgetall", "HGETALL h", lambda: r.hgetall("h"), 4)
    do("config", "CONFIG GET", lambda: r.config_get("maxmemory"))
    do("object", "OBJECT ENCODING h", lambda: r.object("encoding", "h"), 1)
    do("xadd", "XADD st", lambda: r.xadd("st", {"f": "v"}))
    do("xrange", "XRANGE st", lambda: r.xrange("st"))
    do("xinfo", "XINFO STREAM st", lambda: r.xinfo_stream("st"))
    do("eval", "EVAL s", lambda: r.eval("return redis.call('get', KEYS[1])", 1, "s"))
    sha = do("script", "SCRIPT LOAD", lambda: r.script_load("return 1"), 1)
    do("evalsha", "EVALSHA", lambda: r.evalsha(sha, 0))
    do("mget", "MGET s", lambda: r.mget("s", "h", "nope"))
    do("select", "SELECT", lambda: r.select(2))
    do("set", "SET in:db2", lambda: r.set("in:db2", "y"))
    do("select", "SELECT", lambda: r.select(0))
    do("zadd", "ZADD z", lambda: r.zadd("z", {"a": 1.5, "b": 2}))
    do("zrange", "ZRANGE z", lambda: r.zrange("z", 0, -1, withscores=True), 4)
    do("expire", "EXPIRE s", lambda: r.expire("s", 100))
    do("ttl", "TTL s", lambda: r.ttl("s"))
    do("exists", "EXISTS s", lambda: r.exists("s", "h"))
    do("scan", "SCAN", lambda: r.execute_command("SCAN", 0, "COUNT", 100), 2)
    do("client", "CLIENT LIST", lambda: r.execute_command("CLIENT", "LIST"), 1)
    do("info", "INFO", lambda: r.execute_command("INFO", "server"), 1)
    # Transactions by hand: EXECABORT, DISCARD, WATCH failure.
    do("multi", "MULTI", lambda: r.execute_command("MULTI"), 0)
    do("set", "SET a", lambda: r.execute_command("SET", "a"))
    r.execute_command("GET", "a")  # QUEUED
    try:
        r.execute_command("EXEC")
        raise SystemExit("EXEC should fail")
    except redis.exceptions.ExecAbortError:
        pass
    rec(ex, "get", "error", "GET a", 0)
    rec(ex, "exec", "error", "EXEC", 0)
    do("multi", "MULTI", lambda: r.execute_command("MULTI"), 0)
    r.execute_command("INCR", "c")
    do("discard", "DISCARD", lambda: r.execute_command("DISCARD"), 0)
    rec(ex, "incr", "error", "INCR c", 0)
    ex.insert(len(ex) - 2, ex.pop())  # INCR c is emitted before DISCARD
    do("watch", "WATCH w", lambda: r.execute_command("WATCH", "w"), 0)
    other = redis.Redis(port=PORT, single_connection_client=True)
    oport = other.connection._sock.getsockname()[1]
    other.set("w", 1)
    other.close()
    register(oport, "py_watch_spoiler", ["expect set ok rows=0 text=SET w"])
    do("multi", "MULTI", lambda: r.execute_command("MULTI"), 0)
    r.execute_command("INCR", "w")
    v = r.execute_command("EXEC")
    assert v is None, v
    rec(ex, "incr", "error", "INCR w", 0)
    rec(ex, "exec", "ok", "EXEC", 0)
    do("del", "DEL s", lambda: r.delete("s", "h", "st", "z", "w", "c", "a"))
    r.close()
    register(port, "py_commands", ex)


def py_pubsub():
    r = redis.Redis(port=PORT)
    p = r.pubsub()
    p.subscribe("news", "sport")
    p.psubscribe("n*")
    port = p.connection._sock.getsockname()[1]
    # Read the three confirmations.
    got = 0
    while got < 3:
        m = p.get_message(timeout=1)
        if m is not None:
            got += 1
    pub = redis.Redis(port=PORT, single_connection_client=True)
    pport = pub.connection._sock.getsockname()[1]
    pex = []
    for i in range(10):
        n = pub.publish("news", f"headline {i}")
        rec(pex, "publish", "ok", "PUBLISH", 0)
        assert n == 2, n  # the channel and the pattern
    for i in range(5):
        pub.publish("sport", f"score {i}")
        rec(pex, "publish", "ok", "PUBLISH", 0)
    pub.close()
    register(pport, "py_publisher", pex)
    messages = 0
    deadline = time.time() + 5
    while messages < 25 and time.time() < deadline:
        m = p.get_message(timeout=1)
        if m is not None and m["type"] in ("message", "pmessage"):
            messages += 1
    assert messages == 25, messages
    p.ping()
    while True:
        m = p.get_message(timeout=1)
        if m is not None and m["type"] == "pong":
            break
    p.unsubscribe()
    p.punsubscribe()
    left = 3
    while left:
        m = p.get_message(timeout=1)
        if m is not None and m["type"] in ("unsubscribe", "punsubscribe"):
            left -= 1
    p.close()
    ex = []
    rec(ex, "subscribe", "ok", "SUBSCRIBE", 0)
    rec(ex, "psubscribe", "ok", "PSUBSCRIBE", 0)
    rec(ex, "ping", "ok", "PING", 2)
    rec(ex, "unsubscribe", "ok", "UNSUBSCRIBE", 0)
    rec(ex, "punsubscribe", "ok", "PUNSUBSCRIBE", 0)
    register(port, "py_pubsub", ex, pushes=messages)


def raw_resp3():
    c = Raw()
    ex = []
    raw_do(c, ex, "hello", "HELLO", "HELLO", "3")
    raw_do(c, ex, "hset", "HSET h3", "HSET", "h3", "a", "1", "b", "2")
    raw_do(c, ex, "hgetall", "HGETALL h3", "HGETALL", "h3")
    raw_do(c, ex, "sadd", "SADD s3", "SADD", "s3", "x", "y", "z")
    raw_do(c, ex, "smembers", "SMEMBERS s3", "SMEMBERS", "s3")
    raw_do(c, ex, "zadd", "ZADD z3", "ZADD", "z3", "1.5", "m")
    raw_do(c, ex, "zscore", "ZSCORE z3", "ZSCORE", "z3", "m")
    raw_do(c, ex, "get", "GET nope3", "GET", "nope3")
    raw_do(c, ex, "lpush", "LPUSH h3", "LPUSH", "h3", "x")
    raw_do(c, ex, "client", "CLIENT TRACKING", "CLIENT", "TRACKING", "on")
    raw_do(c, ex, "get", "GET tracked", "GET", "tracked")
    o = Raw()
    oex = []
    raw_do(o, oex, "set", "SET tracked", "SET", "tracked", "1")
    o.close()
    register(o.port, "raw_tracking_spoiler", oex)
    raw_do(c, ex, "ping", "PING", "PING")
    # Pub/sub on the same connection.
    c.cmd("SUBSCRIBE", "ch1", "ch2")
    for _ in range(2):
        v = c.read()
        assert v[0] == ">" and v[1][0][1] == b"subscribe", v
    rec(ex, "subscribe", "ok", "SUBSCRIBE", 0)
    p = Raw()
    pex = []
    for i in range(4):
        raw_do(p, pex, "publish", "PUBLISH", "PUBLISH", "ch1" if i % 2 else "ch2", f"m{i}")
    p.close()
    register(p.port, "raw_resp3_publisher", pex)
    raw_do(c, ex, "get", "GET x3", "GET", "x3")  # allowed while subscribed in RESP3
    raw_do(c, ex, "del", "DEL h3", "DEL", "h3", "s3", "z3", "tracked")
    c.cmd("UNSUBSCRIBE")
    for _ in range(2):
        v = c.read()
        while v[0] == ">" and v[1][0][1] == b"message":
            c.pushes += 1
            v = c.read()
        assert v[1][0][1] == b"unsubscribe", v
    rec(ex, "unsubscribe", "ok", "UNSUBSCRIBE", 0)
    c.close()
    register(c.port, "raw_resp3", ex, pushes=c.pushes)


def raw_inline_and_client_reply():
    c = Raw()
    ex = []
    c.send(b"PING\r\n")
    rec(ex, "ping", outcome(c.reply()), "PING", 0)
    c.send(b'SET inline:1 "hello world"\r\n')
    rec(ex, "set", outcome(c.reply()), "SET inline:1", 0)
    c.send(b"\r\nGET inline:1\r\n")
    v = c.reply()
    assert v == ("$", b"hello world"), v
    rec(ex, "get", "ok", "GET inline:1", 1)
    c.send(b"NOPE a b\r\n")
    rec(ex, "unknown", outcome(c.reply()), "NOPE", 0)
    # CLIENT REPLY: the client only ever reads the replies it gets.
    c.cmd("CLIENT", "REPLY", "SKIP")
    rec(ex, "client", "noreply", "CLIENT REPLY", 0)
    c.cmd("SET", "cr", "1")
    rec(ex, "set", "noreply", "SET cr", 0)
    rec(ex, "get", "ok", "GET cr", 1)
    c.cmd("GET", "cr")
    assert c.reply() == ("$", b"1")
    c.cmd("CLIENT", "REPLY", "OFF")
    rec(ex, "client", "noreply", "CLIENT REPLY", 0)
    c.cmd("SET", "cr", "2")
    rec(ex, "set", "noreply", "SET cr", 0)
    c.cmd("INCR", "cr")
    rec(ex, "incr", "noreply", "INCR cr", 0)
    c.cmd("CLIENT", "REPLY", "ON")
    assert c.reply() == ("+", b"OK")
    rec(ex, "client", "ok", "CLIENT REPLY", 0)
    c.cmd("GET", "cr")
    assert c.reply() == ("$", b"3")
    rec(ex, "get", "ok", "GET cr", 1)
    c.cmd("DEL", "cr", "inline:1")
    c.reply()
    rec(ex, "del", "ok", "DEL cr", 0)
    c.close()
    register(c.port, "raw_inline_reply", ex)


def py_big_value():
    r = redis.Redis(port=PORT, single_connection_client=True)
    port = r.connection._sock.getsockname()[1]
    ex = []
    value = b"0123456789abcdef" * (1 << 16)  # 1 MB
    r.set("big:1", value)
    rec(ex, "set", "ok", "SET big:1", 0)
    assert r.get("big:1") == value
    rec(ex, "get", "ok", "GET big:1", 1)
    r.delete("big:1")
    rec(ex, "del", "ok", "DEL big:1", 0)
    r.close()
    register(port, "py_big_value", ex, gz=True)


def cli():
    script = "\n".join([
        "SET cli:k 1",
        "INCR cli:k",
        "GET cli:k",
        "HSET cli:h f v",
        "HGETALL cli:h",
        "LPUSH cli:l a b c",
        "LRANGE cli:l 0 -1",
        "CONFIG GET maxmemory",
        "OBJECT ENCODING cli:l",
        "MEMORY USAGE cli:l",
        "DEL cli:k cli:h cli:l",
        "NOPE",
        "",
    ])
    for args in (["redis-cli", "-p", str(PORT)], ["redis-cli", "-3", "-p", str(PORT)]):
        subprocess.run(args, input=script.encode(), check=True, capture_output=True)


def bench():
    subprocess.run(
        ["redis-benchmark", "-p", str(PORT), "-P", "16", "-n", "2000", "-c", "1",
         "-t", "set,get,lpush,lpop,hset", "-q"],
        check=True, capture_output=True)


# ---- driver ------------------------------------------------------------------------------


def commandstats():
    u = redis.Redis(unix_socket_path=SOCK)
    stats = u.info("commandstats")
    u.close()
    return {k[len("cmdstat_"):]: v for k, v in stats.items()}


def main():
    os.makedirs(WORK, exist_ok=True)
    pcap = os.path.join(WORK, "cap.pcap")
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "0", "-B", "65536", "-U", "-w", pcap,
                             "port", str(PORT)], stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        redis.Redis(unix_socket_path=SOCK).flushall()
        before = commandstats()
        py_pipeline()
        py_commands()
        py_pubsub()
        raw_resp3()
        raw_inline_and_client_reply()
        py_big_value()
        cli()
        bench()
        time.sleep(0.5)
        after = commandstats()
        time.sleep(1)
    finally:
        dump.send_signal(signal.SIGINT)
        _, err = dump.communicate()
    err = err.decode()
    print(err)
    if not re.search(r"(^|\n)0 packets dropped by kernel", err):
        raise SystemExit("tcpdump dropped packets: capture again")
    with open(os.path.join(HERE, "commandstats.txt"), "w") as f:
        f.write("# INFO commandstats deltas over the capture (gen.py); the INFO call on the\n")
        f.write("# unix socket between the snapshots and the GET run by an EVAL script are\n")
        f.write("# subtracted.\n")
        for k in sorted(after):
            a, b = after[k], before.get(k, {})
            d = {x: a.get(x, 0) - b.get(x, 0) for x in ("calls", "rejected_calls", "failed_calls")}
            # Not on the wire: the INFO on the unix socket, and the GET that py_commands'
            # EVAL script runs (commandstats counts commands called from scripts).
            d["calls"] -= {"info": 1, "get": 1}.get(k, 0)
            if any(d.values()):
                f.write(f"{k} calls={d['calls']} rejected={d['rejected_calls']} "
                        f"failed={d['failed_calls']}\n")
    with open(os.path.join(WORK, "expect.json"), "w") as f:
        json.dump(EXPECT, f, indent=1)
    for old in os.listdir(HERE):
        if old.endswith((".txt", ".txt.gz")) and old != "commandstats.txt":
            os.remove(os.path.join(HERE, old))
    subprocess.run([sys.executable, os.path.join(HERE, "pcap2transcripts.py"), pcap, str(PORT),
                    HERE, os.path.join(WORK, "expect.json")], check=True)


if __name__ == "__main__":
    main()
