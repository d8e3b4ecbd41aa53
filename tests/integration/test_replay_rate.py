"""dbtap replay at the workload's own rate, and client certificates: real MariaDB servers, real
sysbench (oltp_read_only, prepared statements).

- `replay --live` mirrors a sysbench paced at 300 transactions/s (about 4,800 queries/s) from
  MariaDB A to B: B's Com_* deltas equal A's, nothing lost (unpaced: test_replay_live_unpaced.py).
- `--target-tls --target-cert/--target-key`: a user `REQUIRE X509` on a TLS MariaDB (its
  certificates, and the client's signed by the same CA, made here with openssl) logs in only
  with the client certificate; the replay's counts on it equal A's.

Truth: the servers' own SHOW GLOBAL STATUS deltas, read over their Unix sockets (not captured,
not replayed). Ports 38640-38649; server directories under tests/out/replay_rate.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import replay_harness as rph  # noqa: E402

OUT = harness.REPO / "tests" / "out" / "replay_rate"
MY_A, MY_B = 38640, 38641
ROWS = 200
COUNTERS = ["Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close", "Com_select",
            "Com_begin", "Com_commit"]
X509_USER, X509_PASSWORD = "tap_x509", "x509pw"


def sb_args(port: int, threads: int) -> list[str]:
    args = harness.sysbench_args(port, threads, ROWS)
    args[1] = "oltp_read_only"  # prepared statements (--db-ps-mode=auto)
    return args


def sysbench(port: int, seconds: int, threads: int = 2, rate: int = 0) -> dict:
    r = subprocess.run(sb_args(port, threads) + [f"--time={seconds}", "--events=0",
                                                 f"--rate={rate}", "--report-interval=0", "run"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    return harness.parse_sysbench(r.stdout)


@pytest.fixture(scope="module")
def servers():
    """A: plain MariaDB (captured); B: MariaDB with TLS (ebpf_harness.Maria: a CA, a server
    certificate and a client certificate it signed), plaintext logins allowed for `tap`."""
    import ebpf_harness as eh
    a = harness.Server(MY_A, OUT / "my-a", tls=False)
    b = eh.Maria(port=MY_B, workdir=OUT / "my-b")
    try:
        a.start()
        b.start()
        harness.sysbench_prepare(MY_A, ROWS)
        harness.sysbench_prepare(MY_B, ROWS)
        with b.root() as c, c.cursor() as cur:
            cur.execute(f"CREATE USER '{X509_USER}'@'127.0.0.1' IDENTIFIED BY "
                        f"'{X509_PASSWORD}' REQUIRE X509")
            cur.execute(f"GRANT ALL ON *.* TO '{X509_USER}'@'127.0.0.1'")
        yield a, b
    finally:
        a.stop()
        b.stop()


def need_capture() -> None:
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
    except (PermissionError, OSError) as e:
        pytest.skip(f"no packet capture here: {e}")


def test_live_mirror_of_paced_sysbench(servers):
    """sysbench oltp_read_only (2 threads, paced at 300 transactions/s, about 4,800 queries/s)
    on A while the mirror runs: B's Com_* deltas equal A's, every captured request sent.
    Unpaced: test_replay_live_unpaced.py."""
    need_capture()
    a, b = servers
    want, got, rep, err, run = rph.mysql_mirrored(a, b, lambda: sysbench(MY_A, 4, rate=300),
                                                  keys=COUNTERS)
    # The rate sysbench reached, for the record (-s shows it).
    print(f"sysbench {run['qps']:.0f} queries/s, {want['Com_stmt_execute']} executes")
    assert want["Com_stmt_execute"] > 2000, want["Com_stmt_execute"]
    assert {k: got[k] for k in COUNTERS} == {k: want[k] for k in COUNTERS}, (rep["fidelity"], rep.get("capture"), err[-1500:])
    f = rep["fidelity"]
    assert f["skipped_requests"] == {}, f
    assert f["requests_sent"] == f["requests_captured"], f


@pytest.fixture(scope="module")
def capture(servers):
    a, _ = servers
    cap = harness.Tcpdump(OUT / "my.pcap", MY_A)
    try:
        cap.start()
        before = a.status()
        sysbench(MY_A, 2)
        after = a.status(threads=before["Threads_connected"])
    finally:
        stats = cap.stop()
    assert stats.get("dropped") == 0, stats
    return cap.out, harness.delta(before, after)


def replay(pcap, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness.DBTAP), "replay", str(pcap), "--port", str(MY_A),
                           "--target", f"127.0.0.1:{MY_B}", "--format", "json", "--max",
                           "--user", X509_USER, "--password", X509_PASSWORD, *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)


def client_certificate(b) -> tuple[Path, Path]:
    """A v3 client certificate (clientAuth) signed by B's CA, made here with openssl (the
    harness's own client certificate is X.509 v1, which rustls does not accept)."""
    d = OUT / "client-cert"
    d.mkdir(parents=True, exist_ok=True)
    key, csr, cert, ext = (d / n for n in ("key.pem", "client.csr", "cert.pem", "v3.ext"))
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=clientAuth\n")
    for args in (["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=dbtap replay client",
                  "-keyout", key, "-out", csr],
                 ["x509", "-req", "-in", csr, "-CA", b.certs["ca"],
                  "-CAkey", b.certdir / "ca-key.pem", "-CAcreateserial", "-days", "30",
                  "-extfile", ext, "-out", cert]):
        subprocess.run(["openssl", *map(str, args)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return cert, key


def test_client_certificate_for_require_x509(servers, capture):
    _, b = servers
    pcap, want = capture
    cert, key = client_certificate(b)
    ca = ["--target-tls", "--target-ca", str(b.certs["ca"])]
    # Without a client certificate the user is refused (TLS alone is not enough).
    r = replay(pcap, *ca)
    assert r.returncode == 1 and "nothing was replayed" in r.stderr, r.stderr
    assert "login refused" in r.stderr and "Access denied" in r.stderr, r.stderr
    assert json.loads(r.stdout)["fidelity"]["target_connections"] == 0
    before = b.status()
    r = replay(pcap, *ca, "--target-cert", str(cert), "--target-key", str(key))
    assert r.returncode == 0, r.stderr
    got = harness.delta(before, b.status(threads=before["Threads_connected"]))
    assert want["Com_stmt_execute"] > 100, want
    assert {k: got[k] for k in COUNTERS} == {k: want[k] for k in COUNTERS}
    f = json.loads(r.stdout)["fidelity"]
    assert f["skipped_requests"] == {}, f
    assert got["Ssl_accepts"] == f["target_connections"] > 0, (got["Ssl_accepts"], f)


def test_client_certificate_flags_need_each_other(servers, capture):
    pcap, _ = capture
    r = replay(pcap, "--target-tls", "--target-cert", "/nonexistent.pem")
    assert r.returncode != 0 and "--target-key" in r.stderr, r.stderr
