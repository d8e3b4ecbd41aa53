#!/usr/bin/env bash
# dbtap replay at --max per protocol beside the original clients' rate on the captured workload.
#
#   bash bench/replay.sh [redis] [mysql] [postgres] [mongodb]   # default: all four
#
# Needs a release build (cargo build --release -p dbtap, or DBTAP_BIN), tcpdump, and the servers
# and clients of tests/setup.sh: redis-server + redis-benchmark (-P 16 and -P 1, 8 clients),
# MariaDB + sysbench (oltp_read_only, prepared statements, 4 threads), PostgreSQL + pgbench
# (-M extended, 4 clients, -S and tpcb), the MongoDB test server + pymongo venv (4 clients,
# finds with getMore chains). Each workload runs on server A (ports 38630-38637) under tcpdump
# on lo; the capture is replayed with --max onto server B, timed by /usr/bin/time. B's own
# statistics must count exactly A's requests (INFO commandstats, Com_* deltas,
# pg_stat_statements calls, dbtapCommandCounts), else the run fails. Prints one table: the
# capture's peak rate (most requests started in a 1 s window), the client's average rate, the
# replay's rate at --max (requests sent over the replay's wall time, reading the capture
# excluded), its ratio to the peak, dbtap's CPU (user+sys of the whole process, reading
# included) per 10k requests, and its voluntary context switches (threads waiting, mostly for
# replies) per query. REPLAY_BENCH_N sets redis-benchmark's -n (100000),
# REPLAY_BENCH_SECONDS the other workloads' duration (5). REPLAY_BENCH_AB=/other/dbtap also
# replays each capture with that binary right after (an interleaved A/B, rows marked);
# REPLAY_BENCH_PERF=1 runs each replay under `perf record -g` (bench/out/replay/perf-CAPTURE.data).
#
# PostgreSQL is paired by default (a single run's replay/peak moved by a third between runs a
# minute apart on a loaded machine): REPLAY_BENCH_ROUNDS rounds (8; under 8 the 90 % interval
# is the whole range), each capturing REPLAY_BENCH_ROUND_SECONDS (3) of each pgbench workload
# on A and replaying that round's capture at once (with REPLAY_BENCH_AB, both binaries, their order alternating by round), so
# each round has its own replay/peak and replay/client-average ratios; printed per round, then
# their medians with a 90 % distribution-free confidence interval (order statistics,
# bench/ebpf_overhead.py's median_ci) and, with REPLAY_BENCH_AB, the median of the per-round
# differences. REPLAY_BENCH_ROUNDS=0 gives the single run of REPLAY_BENCH_SECONDS.
# REPLAY_BENCH_PG_JOBS sets pgbench's -j (4; pgbench's own default is 1),
# REPLAY_BENCH_PG_MODES its -M for both workloads (extended; e.g. extended,prepared). Rates are
# in the capture's events: an extended-protocol query is two (prepare and execute), a
# prepared one one (execute).
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/replay_bench.py "$@"
