"""Real-server harness for the Redis tests and bench/redis.sh.

A private redis-server 7.0 (own directory under tests/out/, own port on 127.0.0.1, no
persistence, a UNIX socket), its traffic captured with the real tcpdump (pg_harness.Tcpdump: a
probe that sends no byte), and its own statistics (`INFO commandstats`, `INFO errorstats`) read
over the UNIX socket, which tcpdump on lo does not see. Nothing here trusts dbtap.

What Redis 7.0 counts (checked by the tests against the clients' own counts):
* `cmdstat_<name>` (`<name>|<sub>` for container commands: `config|get`, `client|reply`):
  `calls` for every command that ran, failed ones included (`failed_calls`, e.g. WRONGTYPE);
  commands refused before running (wrong arity) are `rejected_calls`, not calls; an unknown
  command has no cmdstat at all. Commands queued in MULTI count when EXEC runs them.
* `errorstat_<PREFIX>`: every error reply by its first word (ERR, WRONGTYPE, ...).
* CONFIG RESETSTAT clears both; the commands we send over the socket to take a snapshot are
  subtracted exactly (see `stats_delta`).

Command line for bench/redis.sh: `python3 redis_harness.py benchmark-capture --help`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from pg_harness import Tcpdump, check_dropped, die  # noqa: E402,F401

REPO = harness.REPO


class RedisServer:
    """A private redis-server on 127.0.0.1:port with its files under workdir."""

    def __init__(self, port: int, workdir: Path):
        self.port = port
        self.workdir = Path(workdir).resolve()
        self.sock = self.workdir / "redis.sock"
        self.pidfile = self.workdir / "redis.pid"
        self.log = self.workdir / "redis.log"
        self._admin = None
        self.extra: list[str] = []  # more redis-server arguments (ebpf_harness: --tls-port ...)
        # a command the server is started through (test_ebpf: `ip netns exec NS`, a network
        # namespace of its own)
        self.launcher: list[str] = []
        # commands sent over the UNIX socket besides the snapshots: they are in the server's
        # statistics but not on the wire
        self.socket_calls: collections.Counter = collections.Counter()

    def _pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def _ours(self, pid: int) -> bool:
        """The process is a redis-server on our port started by us (its pidfile is ours)."""
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return False
        return "redis-server" in cmd and f":{self.port}" in cmd

    def _kill(self, sig: int) -> None:
        pid = self._pid()
        if pid is None or not self._ours(pid):
            return
        os.kill(pid, sig)
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)

    def start(self) -> "RedisServer":
        self._kill(signal.SIGKILL)  # a leftover of ours from a killed run
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        harness.wait_port_free(self.port)
        r = subprocess.run(
            [*self.launcher, "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--unixsocket", str(self.sock),
             "--unixsocketperm", "700", "--daemonize", "yes", "--pidfile", str(self.pidfile),
             "--logfile", str(self.log),
             "--dir", str(self.workdir), "--proto-max-bulk-len", "64mb",
             "--client-output-buffer-limit", "pubsub 0 0 0", *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            die(f"redis-server failed ({r.returncode}): {r.stdout}")
        deadline = time.monotonic() + 30
        while True:
            try:
                self.admin().ping()
                break
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    die(f"redis-server not ready after 30 s; log: {self.log}")
                time.sleep(0.1)
        return self

    def stop(self) -> None:
        if self._admin is not None:
            try:
                self._admin.shutdown(nosave=True)
            except Exception:
                pass  # the connection drops as the server exits
            self._admin = None
        self._kill(signal.SIGTERM)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- connections -------------------------------------------------------------------------------
    def admin(self):
        """Over the UNIX socket: not captured."""
        import redis
        if self._admin is None:
            self._admin = redis.Redis(unix_socket_path=str(self.sock))
        return self._admin

    def client(self, **kw):
        """Over TCP (captured)."""
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    # -- statistics --------------------------------------------------------------------------------
    def reset_stats(self) -> None:
        self.admin().config_resetstat()

    def blocked_clients(self) -> int:
        c = RawConn(unix=str(self.sock))
        try:
            c.send("INFO", "clients")
            text = c.read()[1].decode()
        finally:
            c.close()
        self.socket_calls["info"] += 1
        return int(re.search(r"blocked_clients:(\d+)", text).group(1))

    def snapshot(self) -> dict:
        """INFO commandstats and errorstats in one INFO call (counted as one `info` afterwards),
        read as text over the socket (redis-py's INFO parser mangles errorstat lines)."""
        c = RawConn(unix=str(self.sock))
        try:
            c.send("INFO", "commandstats", "errorstats")
            t, text = c.read()
        finally:
            c.close()
        if t != "$":
            die(f"INFO answered {t}{text!r}")
        return parse_info(text.decode())


def parse_info(text: str) -> dict:
    cmd, err = {}, {}
    for line in text.splitlines():
        m = re.match(r"cmdstat_([^:]+):(.*)", line)
        if m:
            f = dict(kv.split("=", 1) for kv in m.group(2).split(","))
            cmd[m.group(1)] = {k: int(f.get(k, 0)) for k in ("calls", "rejected_calls", "failed_calls")}
        m = re.match(r"errorstat_([^:]+):count=(\d+)", line)
        if m:
            err[m.group(1)] = int(m.group(2))
    return {"commandstats": cmd, "errorstats": err}


def stats_delta(before: dict, after: dict) -> dict:
    """after - before, less the snapshot's own INFO call (which ran after `before` was taken and
    is counted in `after`)."""
    cmd = {}
    for name, a in after["commandstats"].items():
        b = before["commandstats"].get(name, {})
        d = {k: a[k] - b.get(k, 0) for k in a}
        if name == "info":
            d["calls"] -= 1
        if any(d.values()):
            cmd[name] = d
    err = {k: v - before["errorstats"].get(k, 0) for k, v in after["errorstats"].items()}
    return {"commandstats": cmd, "errorstats": {k: v for k, v in err.items() if v}}


def per_command(stats: dict) -> dict[str, dict]:
    """commandstats folded to dbtap's command names (`config|get` -> `config`):
    {name: {requests: calls + rejected_calls, errors: failed + rejected}}. A rejected command
    (wrong arity) was still sent and answered with an error, so it is a request on the wire."""
    out: dict[str, dict] = collections.defaultdict(lambda: {"requests": 0, "errors": 0})
    for name, s in stats["commandstats"].items():
        base = name.split("|", 1)[0]
        out[base]["requests"] += s["calls"] + s["rejected_calls"]
        out[base]["errors"] += s["failed_calls"] + s["rejected_calls"]
    return dict(out)


def wire_requests(delta: dict, socket_calls: dict | None = None) -> dict[str, dict]:
    """per_command(delta) less the commands sent over the UNIX socket (not on the wire)."""
    out = per_command(delta)
    for name, n in (socket_calls or {}).items():
        out[name]["requests"] -= n
        if out[name] == {"requests": 0, "errors": 0}:
            del out[name]
    return out


# -------------------------------------------------------------------------------------------------
# redis-benchmark

def benchmark_run(srv: RedisServer, tests: str, n: int, pipeline: int, clients: int,
                  size: int = 3, keyspace: int = 0) -> dict:
    args = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(srv.port), "-c", str(clients),
            "-n", str(n), "-P", str(pipeline), "-d", str(size), "-t", tests, "--csv"]
    if keyspace:
        args += ["-r", str(keyspace)]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        die(f"redis-benchmark failed ({r.returncode}):\n{r.stdout[-3000:]}")
    return {"raw": r.stdout}


# -------------------------------------------------------------------------------------------------
# scripted workload: redis-py (RESP2), raw sockets (RESP3, CLIENT REPLY), redis-cli -3

def resp_cmd(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawConn:
    """A bare socket speaking RESP2/RESP3, for what no client library here exposes: RESP3
    pushes, CLIENT REPLY OFF. `read()` returns one whole value ((type, payload) for pushes)."""

    def __init__(self, port: int = 0, unix: str = ""):
        if unix:
            self.s = socket.socket(socket.AF_UNIX)
            self.s.settimeout(10)
            self.s.connect(unix)
            self.port = None
        else:
            self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
            self.port = self.s.getsockname()[1]
        self.buf = b""

    def send(self, *args) -> None:
        self.s.sendall(resp_cmd(*args))

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                die("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.s.recv(65536)
            if not chunk:
                die("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t in (b"+", b":", b",", b"#", b"(", b"_"):
            return (t.decode(), rest.decode())
        if t == b"-":
            return ("-", rest.decode())
        if t in (b"$", b"=", b"!"):
            n = int(rest)
            return (t.decode(), None if n < 0 else self._exact(n))
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return (t.decode(), None if n < 0 else [self.read() for _ in range(n)])
        if t == b"%":
            return ("%", [(self.read(), self.read()) for _ in range(int(rest))])
        if t == b"|":  # attribute, then the value it annotates
            [(self.read(), self.read()) for _ in range(int(rest))]
            return self.read()
        die(f"unexpected RESP type {line[:20]!r}")

    def close(self) -> None:
        self.s.close()


def sock_port(client) -> int:
    """Client port of a redis-py client, single-connection or with a pool of one connection
    (its pipelines use the pool, not the single connection)."""
    conn = client.connection or client.connection_pool._available_connections[0]
    return conn._sock.getsockname()[1]


PIPELINE_N = 1000
BIG = 10 * 1024 * 1024
PUBSUB_N = 50      # messages to the RESP2 subscriber
PUSH_N = 20        # messages to the RESP3 subscriber (pushes)
BLOCK_S = 0.2


class RedisWorkload:
    """Every count the tests need comes from the clients: commands sent, exceptions caught,
    messages received, values read back, time blocked."""

    def __init__(self, srv: RedisServer):
        self.srv = srv
        self.ports: dict[str, int] = {}
        self.errors: collections.Counter = collections.Counter()  # by reply prefix
        self.sent: collections.Counter = collections.Counter()    # by dbtap command name
        self.info: dict = {}

    def _expect_error(self, fn, prefix: str, contains: str) -> None:
        import redis
        try:
            fn()
        except redis.ResponseError as e:
            msg = str(e)
            if contains not in msg:
                die(f"expected an error containing {contains!r}, got {msg!r}")
            self.errors[prefix] += 1
        else:
            die(f"expected a {prefix} error")

    def run(self) -> dict:
        import threading
        srv = self.srv
        S = self.sent

        # 1. redis-py, RESP2: plain commands and errors
        r = srv.client(single_connection_client=True)
        r.ping()
        self.ports["py"] = sock_port(r)
        S["ping"] += 1
        r.set("str", "x")
        assert r.get("str") == b"x"
        S["set"] += 1
        S["get"] += 1
        for _ in range(2):
            self._expect_error(lambda: r.lpush("str", "y"), "WRONGTYPE", "WRONGTYPE")
        S["lpush"] += 2
        for _ in range(2):
            self._expect_error(lambda: r.execute_command("NOSUCHCMD", "a"), "ERR", "unknown command")
        S["unknown"] += 2
        self._expect_error(lambda: r.execute_command("GET"), "ERR", "wrong number of arguments")
        S["get"] += 1
        # a 10 MB value, both ways
        r.set("big", b"v" * BIG)
        got = r.get("big")
        assert len(got) == BIG
        S["set"] += 1
        S["get"] += 1
        self.info["big_len"] = len(got)
        r.close()

        # 2. a pipeline of 1000 commands in one write, on its own connection
        rp = srv.client(max_connections=1)
        rp.ping()
        self.ports["pipeline"] = sock_port(rp)
        p = rp.pipeline(transaction=False)
        for _ in range(PIPELINE_N):
            p.incr("pipe:ctr")
        res = p.execute()
        assert res == list(range(1, PIPELINE_N + 1)), res[-3:]
        S["ping"] += 1
        S["incrby"] += PIPELINE_N  # redis-py's incr() sends INCRBY key 1
        rp.close()

        # 3. MULTI/EXEC on its own connection
        rt = srv.client(max_connections=1)
        rt.ping()
        self.ports["tx"] = sock_port(rt)
        p = rt.pipeline(transaction=True)
        p.set("tx:a", 1)
        p.incr("tx:a")
        p.lpush("tx:l", "x", "y")
        assert p.execute() == [True, 2, 2]
        S.update({"ping": 1, "multi": 1, "set": 1, "incrby": 1, "lpush": 1, "exec": 1})
        rt.close()

        # 4. BLPOP blocked ~200 ms until another connection pushes
        rb = srv.client(single_connection_client=True)
        rb.ping()
        self.ports["blpop"] = sock_port(rb)
        pusher = srv.client(single_connection_client=True)
        pusher.ping()
        self.ports["pusher"] = sock_port(pusher)
        S["ping"] += 2

        def push():
            deadline = time.monotonic() + 10
            while srv.blocked_clients() != 1:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
            time.sleep(BLOCK_S)
            pusher.rpush("blist", "item")

        th = threading.Thread(target=push)
        t0 = time.monotonic()
        th.start()
        assert rb.blpop("blist", timeout=10) == (b"blist", b"item")
        self.info["blpop_client_s"] = time.monotonic() - t0
        th.join()
        S["blpop"] += 1
        S["rpush"] += 1
        rb.close()
        pusher.close()

        # 5. pub/sub, RESP2 (redis-py) and RESP3 (raw: pushes)
        sub_client = srv.client()
        ps = sub_client.pubsub()
        ps.subscribe("chan")
        m = ps.get_message(timeout=5)
        assert m and m["type"] == "subscribe", m
        self.ports["subscriber"] = ps.connection._sock.getsockname()[1]
        S["subscribe"] += 1
        r3 = RawConn(srv.port)
        self.ports["resp3_sub"] = r3.port
        r3.send("HELLO", "3")
        hello = r3.read()
        assert hello[0] == "%", hello
        r3.send("SUBSCRIBE", "c3")
        conf = r3.read()
        assert conf[0] == ">" and conf[1][0][1] == b"subscribe", conf
        S["hello"] += 1
        S["subscribe"] += 1
        pub = srv.client(single_connection_client=True)
        pub.ping()
        self.ports["publisher"] = sock_port(pub)
        S["ping"] += 1
        for i in range(PUBSUB_N):
            assert pub.publish("chan", f"m{i}") == 1
        for i in range(PUSH_N):
            assert pub.publish("c3", f"p{i}") == 1
        S["publish"] += PUBSUB_N + PUSH_N
        got = []
        while len(got) < PUBSUB_N:
            m = ps.get_message(timeout=5)
            assert m is not None, f"subscriber got {len(got)} of {PUBSUB_N} messages"
            if m["type"] == "message":
                got.append(m["data"])
        assert got == [f"m{i}".encode() for i in range(PUBSUB_N)]
        self.info["messages_received"] = len(got)
        pushes = [r3.read() for _ in range(PUSH_N)]
        assert all(p[0] == ">" and p[1][0][1] == b"message" for p in pushes), pushes[:2]
        self.info["pushes_received"] = len(pushes)
        ps.unsubscribe("chan")
        m = ps.get_message(timeout=5)
        assert m and m["type"] == "unsubscribe", m
        S["unsubscribe"] += 1
        ps.close()
        r3.send("UNSUBSCRIBE", "c3")
        assert r3.read()[0] == ">"
        S["unsubscribe"] += 1
        # RESP3 replies of other types on the same connection
        r3.send("HSET", "h3", "f1", "v1", "f2", "v2")
        assert r3.read() == (":", "2")
        r3.send("HGETALL", "h3")
        mp = r3.read()
        assert mp[0] == "%" and len(mp[1]) == 2, mp
        r3.send("SADD", "s3", "a", "b", "c")
        assert r3.read() == (":", "3")
        r3.send("SMEMBERS", "s3")
        st = r3.read()
        assert st[0] == "~" and len(st[1]) == 3, st
        r3.send("ZADD", "z3", "1.5", "m")
        r3.read()
        r3.send("ZSCORE", "z3", "m")
        assert r3.read() == (",", "1.5")
        S.update({"hset": 1, "hgetall": 1, "sadd": 1, "smembers": 1, "zadd": 1, "zscore": 1})
        r3.close()
        pub.close()
        sub_client.close()

        # 6. CLIENT REPLY OFF: commands the server runs without answering
        rr = RawConn(srv.port)
        self.ports["reply_off"] = rr.port
        rr.send("CLIENT", "REPLY", "OFF")
        rr.send("SET", "ro:a", "1")
        rr.send("SET", "ro:b", "2")
        rr.send("INCR", "ro:c")
        rr.send("CLIENT", "REPLY", "ON")
        assert rr.read() == ("+", "OK")  # the first reply on the wire is ON's
        rr.send("GET", "ro:a")
        assert rr.read() == ("$", b"1")
        rr.close()
        S.update({"client": 2, "set": 2, "incr": 1, "get": 1})

        # 7. redis-cli, RESP3 (-3: HELLO 3 first) and RESP2
        for args in (["-3", "HSET", "cli:h", "f", "v"], ["-3", "HGETALL", "cli:h"],
                     ["LRANGE", "tx:l", "0", "-1"]):
            subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(srv.port), *args],
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, check=True)
            words = [a for a in args if a != "-3"]
            S[words[0].lower()] += 1
            if args[0] == "-3":
                S["hello"] += 1
        self.info["cli_ran"] = 3
        return {"ports": self.ports, "errors": self.errors, "sent": self.sent, "info": self.info}


# -------------------------------------------------------------------------------------------------
# dbtap

def dbtap_by_command(digest: dict) -> dict[str, dict]:
    """Redis groups of a digest summed per command: {command: {count, errors, ...}}."""
    out: dict[str, dict] = collections.defaultdict(lambda: collections.Counter())
    for g in digest["queries"]:
        if g["protocol"] != "redis":
            continue
        if g.get("overflow"):
            die("the digest has an overflow group: per-command sums would be wrong")
        c = out[g["command"]]
        for k in ("count", "errors", "ok", "no_response", "incomplete", "no_reply_expected",
                  "bytes_in", "bytes_out", "rows"):
            c[k] += g[k]
    return {k: dict(v) for k, v in out.items()}


def events_by_command(events: list[dict]) -> dict[str, dict]:
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for e in events:
        if e["protocol"] != "redis":
            continue
        c = out[e["command"]]
        c["count"] += 1
        c["errors"] += e["outcome"] == "error"
    return {k: dict(v) for k, v in out.items()}


# -------------------------------------------------------------------------------------------------
# command line for bench/redis.sh

def _cmd_benchmark_capture(a: argparse.Namespace) -> int:
    """Start a private server, capture redis-benchmark runs until the file is big enough, record
    INFO commandstats over exactly the captured window, stop everything."""
    srv = RedisServer(a.port, Path(a.workdir))
    cap = Tcpdump(Path(a.out), a.port, iface="lo")
    try:
        srv.start()
        srv.reset_stats()
        cap.start()
        before = srv.snapshot()
        runs = 0
        while True:
            benchmark_run(srv, a.tests, a.requests, a.pipeline, a.clients, a.size, a.keyspace)
            runs += 1
            if cap.out.stat().st_size >= a.min_bytes:
                break
        stats = cap.stop()
        after = srv.snapshot()
        version = srv.admin().info("server")["redis_version"]
    finally:
        cap.stop()
        srv.stop()
    d = stats_delta(before, after)
    res = {
        "server_version": f"Redis {version}",
        "tcpdump": stats,
        "benchmark": {"tests": a.tests, "requests": a.requests, "pipeline": a.pipeline,
                      "clients": a.clients, "size": a.size, "keyspace": a.keyspace, "runs": runs},
        "stats": d,
        "per_command": per_command(d),
        "pcap_bytes": Path(a.out).stat().st_size,
    }
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    if stats.get("dropped", 1) != 0:
        print(f"tcpdump dropped {stats.get('dropped')} packets", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("benchmark-capture", help="capture redis-benchmark runs")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--workdir", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--json", required=True)
    s.add_argument("--tests", default="set,get,lpush,lpop,incr,hset,sadd,mset")
    s.add_argument("--requests", type=int, default=200000)
    s.add_argument("--pipeline", type=int, default=16)
    s.add_argument("--clients", type=int, default=4)
    s.add_argument("--size", type=int, default=3)
    s.add_argument("--keyspace", type=int, default=0)
    s.add_argument("--min-bytes", type=int, default=0)
    a = p.parse_args()
    if a.cmd == "benchmark-capture":
        return _cmd_benchmark_capture(a)
    return 2


if __name__ == "__main__":
    sys.exit(main())


class PacedSets:
    """Pipelined SETs of 4 KiB, `batch` at a time, paced to `bytes_per_s` on one connection to
    127.0.0.1:`port` until the `with` block ends; `answered` counts the SETs answered (the
    client's own count). A failure in the client is raised again when the block ends."""

    VALUE = b"v" * 4096

    def __init__(self, port: int, bytes_per_s: float, batch: int):
        self.port, self.rate, self.batch = port, bytes_per_s, batch
        self.stop = threading.Event()
        self.answered = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port))
            batch = b"".join(resp_cmd("SET", f"k{i}", self.VALUE) for i in range(self.batch))
            start = time.monotonic()
            while not self.stop.is_set():
                s.sendall(batch)
                got = b""
                while got.count(b"\r\n") < self.batch:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise RuntimeError("redis closed the connection")
                    got += chunk
                self.answered += self.batch
                ahead = self.answered * len(self.VALUE) / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
            s.close()
        except BaseException as e:  # raised again by __exit__
            self.error = e

    def __enter__(self) -> "PacedSets":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)
        if self.error is not None:
            raise self.error


def live_capture_server(port: int, out: Path):
    """A module fixture's body for the live-capture tests: a Redis server on `port` under
    `out`/redis, yielded, stopped after; fails without root (CI runs as root)."""
    import pytest
    if os.geteuid() != 0:
        pytest.fail("needs root (live capture); CI runs as root")
    out.mkdir(parents=True, exist_ok=True)
    srv = RedisServer(port, out / "redis").start()
    try:
        yield srv
    finally:
        srv.stop()
