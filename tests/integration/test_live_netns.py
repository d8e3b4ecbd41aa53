"""`dbtap live` on a real Ethernet device: a veth pair into a network namespace.

`lo` and `any` are covered by test_live.py; here the capture device has a real 14-byte Ethernet
header, MAC addresses and ARP, as a server's eth0 does. A private redis-server runs inside the
namespace `dbtapns` on 10.77.0.2:36479 (bound to the veth address only); redis-benchmark runs in
the root namespace and reaches it through dbt0 (10.77.0.1), where dbtap captures. The truth is
the server's own `INFO commandstats`, read over its UNIX socket (never on the wire).

Checked: per-command counts equal commandstats exactly with one capture thread and with two
(PACKET_FANOUT on a real device), no kernel drops, a complete capture; the ARP and other
non-database packets on the device never reach dbtap (the kernel filter drops them: dbtap's
packet count equals the TCP segments of the database connections).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import redis_harness as rh  # noqa: E402

NS = "dbtapns"
HOST_IF, NS_IF = "dbt0", "dbt1"
HOST_IP, NS_IP = "10.77.0.1", "10.77.0.2"
PORT = 36479
OUT = harness.REPO / "tests" / "out" / "live_netns"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          check=check)


def teardown_netns() -> None:
    pids = sh("ip", "netns", "pids", NS, check=False).stdout.split()
    for p in pids:
        try:
            os.kill(int(p), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    sh("ip", "link", "del", HOST_IF, check=False)
    sh("ip", "netns", "del", NS, check=False)


@pytest.fixture(scope="module")
def veth_redis():
    if os.geteuid() != 0:
        pytest.fail("needs root (network namespaces, live capture); CI runs as root")
    teardown_netns()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
    sh("ip", "link", "set", NS_IF, "netns", NS)
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_IF)
    sh("ip", "link", "set", HOST_IF, "up")
    sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{NS_IP}/24", "dev", NS_IF)
    sh("ip", "netns", "exec", NS, "ip", "link", "set", NS_IF, "up")
    sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
    work = OUT / "redis"
    if work.exists():
        subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    sock = work / "redis.sock"
    sh("ip", "netns", "exec", NS, "redis-server", "--port", str(PORT), "--bind", NS_IP,
       "--save", "", "--appendonly", "no", "--protected-mode", "no",
       "--unixsocket", str(sock), "--unixsocketperm", "700",
       "--daemonize", "yes", "--pidfile", str(work / "redis.pid"),
       "--logfile", str(work / "redis.log"), "--dir", str(work))
    deadline = time.monotonic() + 30
    while sh("redis-cli", "-s", str(sock), "ping", check=False).stdout.strip() != "PONG":
        if time.monotonic() > deadline:
            teardown_netns()
            pytest.fail(f"redis-server in {NS} did not start: {(work / 'redis.log').read_text()}")
        time.sleep(0.1)
    try:
        yield sock
    finally:
        sh("redis-cli", "-s", str(sock), "shutdown", "nosave", check=False)
        teardown_netns()


def commandstats(sock: Path) -> dict[str, int]:
    text = sh("redis-cli", "-s", str(sock), "info", "commandstats").stdout
    out = {}
    for line in text.splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            fields = dict(kv.split("=", 1) for kv in rest.split(","))
            out[name] = int(fields["calls"])
    return out


def run_live(extra: list[str], workload) -> dict:
    """Starts dbtap live on the veth device, runs `workload` once dbtap captures, stops dbtap
    with SIGINT and returns its final JSON digest."""
    cmd = [str(harness.dbtap_path()), "live", "--source", "packet", "-i", HOST_IF, "--port", str(PORT), "--interval",
           "0", "--format", "json", "--limit", "0", "--duration", "300s", *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        assert "capturing on dbt0" in line, line
        time.sleep(0.3)
        workload()
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    return json.loads(out)


def by_command(digest: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in digest["queries"]:
        out[q["command"]] = out.get(q["command"], 0) + q["count"]
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_live_on_a_veth_device_counts_equal_commandstats(veth_redis, threads):
    sock = veth_redis
    sh("redis-cli", "-s", str(sock), "config", "resetstat")
    before = commandstats(sock)

    def workload():
        r = subprocess.run(["redis-benchmark", "-h", NS_IP, "-p", str(PORT), "-n", "30000",
                            "-c", "8", "-P", "8", "-t", "set,get,incr,lpush", "-q"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout

    digest = run_live(["--threads", str(threads)], workload)
    after = commandstats(sock)
    truth = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    truth = {k: v for k, v in truth.items() if v}
    # CONFIG RESETSTAT and INFO went over the UNIX socket: not on the wire. redis-benchmark's
    # own CONFIG GET calls are.
    truth.pop("info", None)
    seen = by_command(digest)
    assert {"set", "get", "incr", "lpush"} <= set(seen), seen
    for cmd in ("set", "get", "incr", "lpush"):
        assert seen[cmd] == truth[cmd] == 30000, (cmd, seen, truth)
    assert sum(seen.values()) == sum(truth.values()), (seen, truth)
    cap = digest["capture"]
    assert cap["kernel_drops"] == 0, cap
    assert cap["complete"] is True, cap
    assert cap["files"] == ["live:dbt0"]
    # Only database TCP reached user space: every packet was a segment of a tracked connection
    # (ARP, IPv6 neighbour discovery and anything else on the device stayed in the kernel).
    assert cap["non_tcp"] == 0, cap
    assert cap["packets"] == cap["tcp_segments"] > 0, cap
