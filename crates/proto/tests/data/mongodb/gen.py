#!/usr/bin/env python3
"""Workloads that produced the real MongoDB transcripts in this directory.

Server: mongo-java-server's in-memory backend (tests/mongo-server: `mvn -q package`, then
`java -jar tests/mongo-server/target/mongo-server.jar PORT`), which speaks the MongoDB wire
protocol and reports wire version 17 so that pymongo 4.x talks to it. It advertises no
compressors, so no capture here is compressed, and it refuses the exhaustAllowed flag (it
closes the connection), and so it does for moreToCome (unacknowledged writes): no exhaust
cursor and no w=0 write here either. The byte-literal tests cover all three.
Client: pymongo 4 (in a venv: `python3 -m venv V && V/bin/pip install pymongo`).

usage: gen.py PORT OUT_DIR      (as root: it runs tcpdump -i lo itself)

Each workload runs on its own MongoClient with maxPoolSize=1, so its commands share one
connection; its commands are recorded by pymongo's own command monitoring (CommandListener):
the wire requestID, the command name, and from the reply pymongo received the documents
returned (firstBatch/nextBatch or distinct's values), n, nModified, upserts,
lastErrorObject.n, the error code (ok: 0 or the first writeError). These become `# expect`
lines of the transcript: the truth the Rust tests compare the session's events with.
pymongo's own handshake (an OP_QUERY isMaster on admin.$cmd) and its endSessions at close
are not reported to listeners; the tests allow them. A connection is matched to its
workload by the database name, which is unique per workload.
"""
import os
import signal
import subprocess
import sys
import time

import pymongo
from bson.son import SON
from pymongo import monitoring
from pymongo.errors import PyMongoError

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 27117
OUT = sys.argv[2] if len(sys.argv) > 2 else "."
HERE = os.path.dirname(os.path.abspath(__file__))


class Recorder(monitoring.CommandListener):
    def __init__(self):
        self.cmds = {}
        self.lines = []

    def started(self, event):
        self.cmds[event.request_id] = event.command

    def _line(self, event, reply, err):
        cmd = self.cmds.pop(event.request_id, {})
        name = event.command_name.lower()
        rows = affected = 0
        cur = reply.get("cursor") if isinstance(reply, dict) else None
        if cur:
            rows = len(cur.get("firstBatch", cur.get("nextBatch", [])))
        if name == "distinct":
            rows = len(reply.get("values", []))
        if name in ("insert", "delete"):
            affected = reply.get("n", 0)
        if name == "update":
            affected = reply.get("nModified", 0) + len(reply.get("upserted", []))
        if name == "findandmodify":
            affected = reply.get("lastErrorObject", {}).get("n", 0)
        we = reply.get("writeErrors") if isinstance(reply, dict) else None
        if err is None and we:
            err = we[0].get("code", 0)
        if err is None and not reply.get("ok", 1):
            # An error pymongo chose to accept (drop of a missing collection).
            err = reply.get("code", 1)
        noreply = cmd.get("writeConcern", {}).get("w", 1) == 0
        if noreply:
            # Unacknowledged: what was sent.
            affected = len(cmd.get("documents", cmd.get("updates", cmd.get("deletes", []))))
        out = "noreply" if noreply else ("error" if err else "ok")
        self.lines.append(
            f"{name} id={event.request_id} rows={rows} affected={affected} "
            f"err={err or 0} outcome={out}")

    def succeeded(self, event):
        self._line(event, event.reply, None)

    def failed(self, event):
        self._line(event, event.failure, event.failure.get("code", 1))


def client(rec):
    return pymongo.MongoClient(
        f"mongodb://127.0.0.1:{PORT}/?directConnection=true&maxPoolSize=1",
        event_listeners=[rec], serverSelectionTimeoutMS=5000, appname="dbtap-gen")


def crud(c):
    db = c.dbtap_crud
    db.users.drop()
    db.users.insert_many([{"name": f"user{i}", "age": i, "tags": ["a", "b"]} for i in range(50)])
    list(db.users.find({"age": {"$gte": 10}, "name": {"$ne": "x"}}, {"name": 1, "age": 1})
         .sort([("age", -1), ("name", 1)]).batch_size(15))
    db.users.find_one({"name": "user7"})
    db.users.update_many({"age": {"$gte": 40}}, {"$set": {"old": True}})
    db.users.update_one({"name": "newbie"}, {"$set": {"age": 1}}, upsert=True)
    db.users.delete_many({"age": {"$lt": 5}})
    db.users.delete_one({"name": {"$in": ["user20", "user21", "user22"]}})
    db.users.replace_one({"name": "user30"}, {"name": "user30", "age": 300})
    try:
        db.users.insert_many([{"_id": 1}, {"_id": 1}])
    except PyMongoError:
        pass
    try:
        db.command("nosuchcommand")
    except PyMongoError:
        pass


def reads(c):
    db = c.dbtap_reads
    db.orders.drop()
    db.orders.insert_many([{"cust": f"c{i % 7}", "amount": i, "status": "AB"[i % 2]}
                           for i in range(120)])
    list(db.orders.aggregate([{"$match": {"status": "A"}},
                              {"$group": {"_id": "$cust", "total": {"$sum": "$amount"}}},
                              {"$sort": {"total": -1}}]))
    db.orders.count_documents({"status": "B"})
    db.orders.estimated_document_count()
    db.command(SON([("count", "orders"), ("query", {"amount": {"$gt": 100}})]))
    db.orders.distinct("cust", {"amount": {"$in": [1, 2, 3, 4]}})
    db.orders.find_one_and_update({"amount": 5}, {"$inc": {"amount": 1000}})
    db.orders.create_index([("cust", 1), ("amount", -1)])
    db.list_collection_names()
    # A cursor read over several getMores, and one closed early (killCursors).
    list(db.orders.find({}).batch_size(25))
    cur = db.orders.find({"amount": {"$lt": 100}}).batch_size(10)
    next(cur)
    cur.close()
    db.command("ping")


WORKLOADS = [("pymongo_crud", "dbtap_crud", crud), ("pymongo_reads", "dbtap_reads", reads)]


def main():
    os.makedirs(OUT, exist_ok=True)
    pcap = os.path.join(OUT, "capture.pcap")
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-U", "-s", "0", "-w", pcap,
                             f"tcp port {PORT}"], stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    expect = {}
    for name, dbname, fn in WORKLOADS:
        rec = Recorder()
        c = client(rec)
        fn(c)
        c.close()
        expect[dbname] = (name, rec.lines)
        time.sleep(0.3)
    time.sleep(1.0)
    dump.send_signal(signal.SIGINT)
    dump.wait()
    subprocess.run([sys.executable, os.path.join(HERE, "pcap2transcripts.py"), pcap, str(PORT),
                    OUT], input=repr(expect), text=True, check=True)


if __name__ == "__main__":
    main()
