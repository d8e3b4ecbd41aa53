"""Real-server harness for the MongoDB tests and bench/mongodb.sh.

The server: tests/mongo-server (mongo-java-server's in-memory backend behind a small launcher;
`mvn -q -f tests/mongo-server/pom.xml package`), which speaks the MongoDB wire protocol (OP_MSG,
and OP_QUERY for the handshake) and reports wire version 17, so pymongo 4.x talks to it. It has
no statistics of its own worth trusting, so the truth is pymongo's command monitoring: a
CommandListener records, per command, its name, database, the documents returned
(firstBatch/nextBatch, distinct's values), n / nModified and the error code. Nothing here trusts
dbtap.

pymongo is not in Debian 12: the workload runs in a venv (tests/out/venv-mongo, tests/setup.sh)
as a subprocess of this file (`venv/bin/python mongo_harness.py workload ...`); the test runner
(Debian's python3) only reads its JSON.

pymongo's handshake (isMaster/hello on admin), its monitor's heartbeats and its endSessions at
close are not reported to listeners. The workload runs all its commands on database WL_DB (and
the unknown command on WL_DB too), so they are told apart from those by database.

Command line: `python3 mongo_harness.py {workload,bulk-capture} --help`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    import harness  # noqa: E402
    import pg_harness
    from pg_harness import check_dropped, die  # noqa: E402,F401
except ImportError:  # the workload subprocess, in the pymongo venv (no pymysql there)
    harness = None

    def die(msg: str) -> None:
        raise RuntimeError(msg)

REPO = Path(__file__).resolve().parents[2]
JAR = REPO / "tests" / "mongo-server" / "target" / "mongo-server.jar"
VENV_PY = REPO / "tests" / "out" / "venv-mongo" / "bin" / "python"
WL_DB = "dbtapwl"


def _closed_connect(port: int) -> int | None:
    """A bare connect (no byte sent) closed both ways before returning: the Java server answers
    a client's FIN with its own some 50 ms later, and a probe's late FIN in the capture would be
    a segment of a connection whose SYN is not in it. Returns the client port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            cport = s.getsockname()[1]
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
            return cport
    except OSError:
        return None


if harness is not None:
    class Tcpdump(pg_harness.Tcpdump):
        """pg_harness.Tcpdump whose probe waits for the server's FIN (see _closed_connect)."""

        def sync(self, timeout: float = 120.0, fail: bool = True) -> bool:
            port = _closed_connect(self.port)
            if port is None:
                if fail:
                    die(f"probe connection to 127.0.0.1:{self.port} failed")
                return False
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self._scan_for_port(port):
                    return True
                if self.proc is not None and self.proc.poll() is not None:
                    break
                time.sleep(0.05)
            if fail:
                die(f"tcpdump did not write the probe's packets (client port {port}) within {timeout}s")
            return False


class MongoServer:
    """java -jar mongo-server.jar PORT (binds 127.0.0.1), its pid in workdir/mongo.pid."""

    def __init__(self, port: int, workdir: Path):
        self.port = port
        self.workdir = Path(workdir).resolve()
        self.pidfile = self.workdir / "mongo.pid"
        self.log = self.workdir / "mongo.log"
        self.proc: subprocess.Popen | None = None

    def _ours(self, pid: int) -> bool:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return False
        return "mongo-server.jar" in cmd and cmd.rstrip().endswith(str(self.port))

    def _kill_leftover(self) -> None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        if self._ours(pid):
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.3)

    def start(self) -> "MongoServer":
        if not JAR.exists():
            die(f"{JAR} missing: run tests/setup.sh (mvn package)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._kill_leftover()
        harness.wait_port_free(self.port)
        self.proc = subprocess.Popen(["java", "-jar", str(JAR), str(self.port)],
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.pidfile.write_text(f"{self.proc.pid}\n")
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                die(f"mongo-server exited ({self.proc.returncode}); log: {self.log}")
            if _closed_connect(self.port) is not None:
                break
            else:
                if time.monotonic() > deadline:
                    self.stop()
                    die(f"mongo-server not listening after 60 s; log: {self.log}")
                time.sleep(0.1)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        harness.end_process(self.proc, 20, self.pidfile)
        self.proc = None

    def __enter__(self) -> "MongoServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def run_workload(port: int, out_json: Path, kind: str = "scripted", min_bytes: int = 0,
                 capture: Path | None = None) -> dict:
    """The workload in the venv's python; returns its JSON."""
    if not VENV_PY.exists():
        die(f"{VENV_PY} missing: run tests/setup.sh (pymongo venv)")
    args = [str(VENV_PY), str(Path(__file__).resolve()), "workload", "--port", str(port),
            "--json", str(out_json), "--kind", kind]
    if capture is not None:
        args += ["--min-bytes", str(min_bytes), "--watch", str(capture)]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        die(f"pymongo workload failed ({r.returncode}):\n{r.stdout[-3000:]}")
    return json.loads(Path(out_json).read_text())


# -------------------------------------------------------------------------------------------------
# the workload (runs in the venv: pymongo is imported here only)

N_DOCS = 500
N_FINDS = 100
N_FIND_ONE = 40
BATCH = 50


def _workload(port: int, kind: str, min_bytes: int, watch: str | None) -> dict:
    import pymongo
    from bson.son import SON
    from pymongo import monitoring
    from pymongo.errors import DuplicateKeyError, OperationFailure

    class Recorder(monitoring.CommandListener):
        def __init__(self):
            self.cmds: list[dict] = []

        def _rec(self, event, reply, err):
            name = event.command_name.lower()
            rows = 0
            cur = reply.get("cursor") if isinstance(reply, dict) else None
            if isinstance(cur, dict):
                rows = len(cur.get("firstBatch", cur.get("nextBatch", [])))
            if name == "distinct":
                rows = len(reply.get("values", []))
            affected = 0
            if name in ("insert", "delete"):
                affected = reply.get("n", 0)
            if name == "update":
                affected = reply.get("nModified", 0) + len(reply.get("upserted", []))
            if name == "findandmodify":
                affected = reply.get("lastErrorObject", {}).get("n", 0)
            we = reply.get("writeErrors") if isinstance(reply, dict) else None
            if err is None and we:
                err = we[0].get("code", 0)
            if err is None and isinstance(reply, dict) and not reply.get("ok", 1):
                err = reply.get("code", 1)
            self.cmds.append({"name": name, "db": event.database_name, "rows": rows,
                              "affected": affected, "err": err or 0,
                              "port": event.connection_id[1]})

        def started(self, event):
            pass

        def succeeded(self, event):
            self._rec(event, event.reply, None)

        def failed(self, event):
            code = getattr(event.failure, "get", lambda *_: None)("code") \
                if isinstance(event.failure, dict) else None
            self._rec(event, event.failure if isinstance(event.failure, dict) else {}, code or 1)

    rec = Recorder()
    client = pymongo.MongoClient("127.0.0.1", port, maxPoolSize=1, event_listeners=[rec],
                                 directConnection=True, serverSelectionTimeoutMS=20000)
    db = client[WL_DB]
    info = {}
    rounds = 0
    while True:
        coll = db[f"users{rounds}"] if kind == "bulk" else db["users"]
        pad = {"pad": "x" * 500} if kind == "bulk" else {}  # bulk: ~1.5 MB of capture a round
        coll.insert_many([{"_id": i, "name": f"user{i % 50}", "age": i % 90, "city": f"c{i % 7}",
                           **pad} for i in range(N_DOCS)])
        # the same filter+sort, keys sent in two orders (SON keeps the order on the wire)
        for i in range(N_FINDS):
            if i % 2 == 0:
                f = SON([("age", {"$gt": i % 80}), ("name", {"$in": ["user1", "user2"]})])
            else:
                f = SON([("name", {"$in": ["user3", "user4", "user5"]}), ("age", {"$gt": i % 80})])
            list(coll.find(f).sort("_id", 1))
        for i in range(N_FIND_ONE):
            assert coll.find_one({"_id": i}) is not None
        n = sum(1 for _ in coll.find({}, batch_size=BATCH))
        assert n == N_DOCS, n
        coll.update_many({"age": {"$lt": 10}}, {"$set": {"young": True}})
        coll.delete_one({"_id": 0})
        list(coll.aggregate([{"$match": {"age": {"$gte": 30}}},
                             {"$group": {"_id": "$city", "n": {"$sum": 1}}}]))
        info["count_documents"] = coll.count_documents({"age": {"$gte": 45}})
        info["estimated"] = coll.estimated_document_count()
        info["distinct"] = len(coll.distinct("city"))
        coll.find_one_and_update({"_id": 1}, {"$inc": {"age": 1}})
        try:
            coll.insert_one({"_id": 1})
            die("no duplicate key error")
        except DuplicateKeyError:
            pass
        try:
            db.command("nosuchcommand")
            die("no error for an unknown command")
        except OperationFailure as e:
            info["unknown_code"] = e.code
        rounds += 1
        if kind == "bulk":
            coll.drop()
        if kind != "bulk" or not watch or Path(watch).stat().st_size >= min_bytes:
            break
    client.close()
    return {"commands": rec.cmds, "info": info, "rounds": rounds}


# -------------------------------------------------------------------------------------------------
# the truth folded, and dbtap read back

def listener_by_command(cmds: list[dict]) -> dict[str, dict]:
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for c in cmds:
        if c["db"] != WL_DB:
            continue
        o = out[c["name"]]
        o["count"] += 1
        o["rows"] += c["rows"]
        o["errors"] += c["err"] != 0
    return {k: dict(v) for k, v in out.items()}


def listener_errors(cmds: list[dict]) -> dict[int, int]:
    return dict(collections.Counter(c["err"] for c in cmds if c["err"]))


def _cmd_workload(a: argparse.Namespace) -> int:
    res = _workload(a.port, a.kind, a.min_bytes, a.watch)
    Path(a.json).write_text(json.dumps(res) + "\n")
    return 0


def _cmd_bulk_capture(a: argparse.Namespace) -> int:
    """Start the server, capture the workload (repeated on fresh collections) until the file is
    big enough, stop everything; the listener's per-command counts go to --json."""
    srv = MongoServer(a.port, Path(a.workdir))
    cap = Tcpdump(Path(a.out), a.port, iface="lo")
    try:
        srv.start()
        cap.start()
        wl = run_workload(a.port, Path(a.json + ".wl"), "bulk", a.min_bytes, cap.out)
        stats = cap.stop()
    finally:
        cap.stop()
        srv.stop()
    res = {"tcpdump": stats, "rounds": wl["rounds"],
           "per_command": listener_by_command(wl["commands"]),
           "errors": {str(k): v for k, v in listener_errors(wl["commands"]).items()},
           "pcap_bytes": Path(a.out).stat().st_size}
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    os.unlink(a.json + ".wl")
    if stats.get("dropped", 1) != 0:
        print(f"tcpdump dropped {stats.get('dropped')} packets", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("workload", help="run the pymongo workload (venv python)")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--json", required=True)
    s.add_argument("--kind", default="scripted", choices=("scripted", "bulk"))
    s.add_argument("--min-bytes", type=int, default=0)
    s.add_argument("--watch", default=None)
    b = sub.add_parser("bulk-capture", help="capture the workload until the file is big enough")
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--workdir", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--json", required=True)
    b.add_argument("--min-bytes", type=int, default=0)
    a = p.parse_args()
    if a.cmd == "workload":
        return _cmd_workload(a)
    return _cmd_bulk_capture(a)


if __name__ == "__main__":
    sys.exit(main())
