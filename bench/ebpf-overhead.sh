#!/usr/bin/env bash
# What the eBPF source costs a busy database: sysbench oltp_read_only (prepared statements)
# against a private MariaDB over its Unix socket, with and without dbtap, interleaved and repeated.
#
#   bash bench/ebpf-overhead.sh                 # the default: baseline, A/A and ebpf, paced at
#                                               # 600 tx/s (~9.6k QPS), 4 s runs, 16 rounds
#   bash bench/ebpf-overhead.sh --rounds 4      # a quick look (the CI is then the range)
#   bash bench/ebpf-overhead.sh --all --rate 0 --seconds 10 --rounds 2 --order rotate
#                                               # the old default: every condition, unpaced
#   bash bench/ebpf-overhead.sh --only ebpf --rounds 3 --seconds 8 --attribute   # + perf attribution
#   bash bench/ebpf-overhead.sh --only ebpf,tracepoints --no-aa   # + the tracepoints' own cost
#   options: --seconds N  --rounds N  --threads N  --table-size N  --rate TPS (0: unpaced)
#            --only COND,...  --all  --attribute  --order shuffle|rotate  --seed N  --no-aa
#            --ab OTHER_DBTAP (condition ebpf-ab: the other binary's --source ebpf in the same rounds)
#   environment: EBPF_BENCH_PORT (default 38250), DBTAP_BIN (default target/release/dbtap)
#
# The estimate (the default method): per round, every condition minus the same round's baseline
# (drift between rounds moves both), CPU per 10k queries; the median of those paired
# differences with a distribution-free 90 % confidence interval (order statistics of the
# median). The CPU is counted per thread from /proc/PID/task/TID/schedstat (ns): mysqld's
# connection threads only (the server runs with --thread-cache-size=64, so sysbench's
# connections keep their threads between runs; the threads mysqld started with, InnoDB's purge,
# page cleaner and timers and the listener, are reported apart) plus every dbtap thread. The
# old accounting (utime+stime of the whole mysqld and of dbtap, clock ticks) is printed beside
# it. The A/A check is a second baseline ("aa", in every round) paired with the first the same
# way: an unbiased method gives about 0, and the spread of its rounds is the method's noise.
# The same paired differences divided by the round's baseline are printed too (the extra as a
# share of mysqld's own CPU): the host's speed moves the baseline and the extra together, so that
# share compares across days and hosts, where the absolute figure (the goal's unit) does not.
# Paced runs serve a fixed number of transactions (rate x seconds) in each run; each round's
# order of the conditions is shuffled (seeded; --seed repeats it, --order rotate rotates).
#
# Unpaced (--rate 0), sysbench saturates the machine and every condition competes for the
# cores: the extra CPU then mixes work with contention. Paced (--rate), every condition serves
# the same queries per second on a machine with idle time, so the extra CPU per 10k queries is
# the work the capture adds, at that rate: the literal "cores per 10k QPS".
#
# The conditions (one sysbench run each, the order shuffled every round):
#   baseline      sysbench over the Unix socket, nothing else running
#   aa            the same again: the A/A check (left out with --no-aa)
#   ebpf          the same with dbtap live --source ebpf --port P --socket SOCK (started before
#                 sysbench, SIGINT after); its final JSON gives the counts, which must equal the
#                 server's Com_stmt_* deltas, and the lost records / gap bytes
#   ebpf-stats    the same with kernel.bpf_stats_enabled=1, for the BPF programs' own run time
#                 (the statistics cost two clock reads per program run: "ebpf" runs without them)
#   ebpf-ab       (only with --ab) "ebpf" with the other binary, in the same rounds; the report
#                 adds the two binaries' difference, paired per round
#   tracepoints   the same with only the syscall tracepoints attached that dbtap uses on kernels
#                 without socket tracepoints (before Linux 6.3), through bpftrace, with programs
#                 that test the process id (never true) and return: what tracing those calls
#                 costs mysqld before any program logic (needs bpftrace, installed here when this
#                 condition runs)
#   slowlog       the same with the slow log at long_query_time=0 (file beside the datadir)
#   baseline-tcp  sysbench over TCP 127.0.0.1:P, nothing else
#   packet        the same with dbtap live --source packet -i lo --port P
#   ebpf-perf     (only with --attribute) "ebpf" with `perf record -F 997 -p <mysqld>`: the share
#                 of mysqld's samples in the tracing itself (BPF programs, helpers and maps, ring
#                 reserve/submit, copy_from_user_nofault and other copies, trace_call_bpf and
#                 perf_syscall_exit, the syscall slow path), times that run's mysqld CPU per 10k
#                 queries, printed with dbtap's CPU beside the baseline-subtraction estimate
#                 (bench/ebpf_attribute.py). Its own row keeps perf's sampling out of "ebpf".
# Recorded per run: sysbench's QPS and 95th percentile; mysqld's and dbtap's CPU (utime+stime from
# /proc/PID/stat, and per thread from schedstat) over the sysbench run per 10k queries, the extra mysqld CPU against the baseline
# on the same path; lost records and gap bytes from dbtap's health; the BPF programs' own run
# time per query, from the kernel (/proc/PID/fdinfo of dbtap's program fds, with
# kernel.bpf_stats_enabled=1 during the ebpf-stats runs only, restored after).
#
# Output: printed, and written to bench/out/ebpf-overhead.md (runs as JSON in
# bench/out/work-ebpf-overhead/runs.json). Exit status 1 when dbtap's counts differ from the
# server's. Needs root (BPF, packet capture) and tests/setup.sh's packages (run first). Starts and
# stops its own MariaDB on port $EBPF_BENCH_PORT (38250); its trap stops whatever it started if interrupted.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=$ROOT/bench/out
W=$OUT/work-ebpf-overhead
PORT=${EBPF_BENCH_PORT:-38250}
SECONDS_PER_RUN=4 ROUNDS=16 THREADS=4 TABLE_SIZE=10000 RATE=600 ONLY=ebpf ATTRIBUTE= EXTRA=()
ARGS=("$@")
need() { [ "$#" -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || { echo "$1 needs a number" >&2; exit 2; }; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    --seconds) need "$@"; SECONDS_PER_RUN=$2; shift 2 ;;
    --rounds) need "$@"; ROUNDS=$2; shift 2 ;;
    --threads) need "$@"; THREADS=$2; shift 2 ;;
    --table-size) need "$@"; TABLE_SIZE=$2; shift 2 ;;
    --rate) need "$@"; RATE=$2; shift 2 ;;
    --only) [ "$#" -ge 2 ] || { echo "--only needs a list of conditions" >&2; exit 2; }; ONLY=$2; shift 2 ;;
    --all) ONLY=; shift ;;
    --order) [ "$#" -ge 2 ] || { echo "--order needs shuffle or rotate" >&2; exit 2; }; EXTRA+=(--order "$2"); shift 2 ;;
    --seed) need "$@"; EXTRA+=(--seed "$2"); shift 2 ;;
    --no-aa) EXTRA+=(--no-aa); shift ;;
    --ab) [ "$#" -ge 2 ] && [ -x "$2" ] || { echo "--ab needs an executable dbtap" >&2; exit 2; }
      EXTRA+=(--dbtap-ab "$(realpath "$2")"); shift 2 ;;
    --attribute) ATTRIBUTE=--attribute; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3   # Debian's, with pymysql (tests/setup.sh)

cleanup() {
  local rc=$?
  # dbtap live: by its pid file, only if that process is still a `dbtap live` of ours.
  local f=$W/dbtap.pid pid cmd
  if [ -f "$f" ]; then
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ "$pid" =~ ^[0-9]+$ ]]; then
      cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
      case "$cmd" in
        *dbtap\ live\ --source\ *--port\ $PORT*)
          echo "stopping leftover dbtap live (pid $pid)"
          kill -INT "$pid" 2>/dev/null || true
          for _ in $(seq 50); do [ -e "/proc/$pid" ] || break; sleep 0.2; done
          kill -9 "$pid" 2>/dev/null || true ;;
      esac
    fi
    rm -f "$f"
  fi
  # the tracepoints condition's bpftrace, if interrupted during its run (its program's own map)
  pkill -INT -f 'bpftrace -e tracepoint:syscalls:sys_exit_read.*@exits = count' 2>/dev/null || true
  bash "$ROOT/tests/stop-leftovers.sh" "$W"   # mariadbd (its command line names $W)
  rm -f "$W"/slow.log
  rm -rf "$W/server"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash tests/setup.sh
BPFTRACE=
if [ -z "$ONLY" ] || [[ ",$ONLY," == *,tracepoints,* ]]; then
  BPFTRACE=bpftrace
  command -v bpftrace >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q bpftrace >/dev/null
fi
for b in sysbench mariadbd mariadb-install-db openssl ${ATTRIBUTE:+perf} $BPFTRACE; do
  command -v "$b" >/dev/null || { echo "$b not found: run tests/setup.sh first" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "needs root: dbtap live --source ebpf loads BPF programs" >&2; exit 1; }

echo "== building dbtap (release)"
cargo build --release -p dbtap 2>&1 | tail -n 2
DBTAP=${DBTAP_BIN:-$ROOT/target/release/dbtap}

mkdir -p "$W"
echo "== sysbench oltp_read_only, $THREADS threads, rate $RATE, ${SECONDS_PER_RUN} s x ${ONLY:-every condition} (+ A/A) x $ROUNDS rounds, MariaDB on its Unix socket and 127.0.0.1:$PORT"
"$PY" bench/ebpf_overhead.py --port "$PORT" --seconds "$SECONDS_PER_RUN" --rounds "$ROUNDS" \
  --threads "$THREADS" --table-size "$TABLE_SIZE" --rate "$RATE" --workdir "$W" \
  --out "$OUT/ebpf-overhead.md" --dbtap "$DBTAP" ${ONLY:+--only "$ONLY"} $ATTRIBUTE "${EXTRA[@]}" \
  --command "bash bench/ebpf-overhead.sh${ARGS[*]:+ ${ARGS[*]}}"
