"""Many small MongoDB requests, for bench/floor.sh (issue 16's per-request cost).

Rounds of 300 insert_one, 300 find_one by _id, 20 finds of 100 documents in batches of 5 (one
find and 19 getMores each) and 100 update_one, on a fresh collection, until FILE (the capture
being written) reaches BYTES. Run it with the pymongo venv (tests/setup.sh) against
tests/mongo-server while tcpdump captures the port, for example:

    java -jar tests/mongo-server/target/mongo-server.jar 38570 &
    tcpdump -i lo -s 0 -w /tmp/mongo-small.pcap tcp port 38570 &
    tests/out/venv-mongo/bin/python bench/mongo_small.py 38570 45000000 /tmp/mongo-small.pcap
    bash bench/floor.sh /tmp/mongo-small.pcap:38570
"""

import os
import sys

from pymongo import MongoClient


def main() -> int:
    port, target, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    client = MongoClient("127.0.0.1", port, directConnection=True)
    coll = client.s24.small
    rounds = 0
    while True:
        coll.drop()
        for i in range(300):
            coll.insert_one({"_id": i, "name": f"user{i % 50}", "age": i % 90})
        for i in range(300):
            coll.find_one({"_id": i})
        for i in range(20):
            list(coll.find({"age": {"$gt": i}}, batch_size=5).limit(100))
        for i in range(100):
            coll.update_one({"_id": i}, {"$inc": {"age": 1}})
        rounds += 1
        if os.path.getsize(out) >= target:
            break
    print("rounds", rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
