#!/usr/bin/env bash
# dbtap replay at --max for Redis beside redis-benchmark's own rate on the captured workload.
#
#   bash bench/replay.sh        # needs a release build (cargo build --release -p dbtap),
#                               # redis-server, redis-benchmark, tcpdump, redis-py
#
# redis-benchmark (-P 16 and -P 1, 8 clients, set/get/incr/lpush) runs against server A
# (127.0.0.1:38440) under tcpdump on lo; the capture is replayed with --max onto server B
# (127.0.0.1:38441), timed by /usr/bin/time; B's INFO commandstats must count exactly A's
# requests. Prints a table: requests/s of redis-benchmark and of the replay (requests sent
# over the replay's wall time, reading the capture excluded), and dbtap's CPU (user+sys of
# the whole process, reading included) per 10k requests. REPLAY_BENCH_N sets -n (100000).
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/replay_bench.py "$@"
