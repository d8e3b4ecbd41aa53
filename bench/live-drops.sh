#!/usr/bin/env bash
# Does `dbtap live` drop packets on a busy host, and when its reader pauses, why? N runs in a row
# (default 30) of sysbench oltp_read_only (4 threads, 8 s, prepared statements, over TCP on
# 127.0.0.1) against a private MariaDB on 127.0.0.1:43316, each captured by a fresh
#   dbtap live --source packet -i lo --port 43316 --interval 0 --format json --limit 0
# started before sysbench (after its "capturing on" line) and stopped with SIGINT after.
#
#   bash bench/live-drops.sh                        # 30 runs, release build
#   bash bench/live-drops.sh --runs 5 --ring-mb 64  # another ring size
#   bash bench/live-drops.sh --runs 20 --dbtap /tmp/a/dbtap --dbtap /tmp/b/dbtap   # A/B, interleaved
#   options: --runs N  --seconds N  --threads N  --ring-mb N  --port N  --interval DURATION
#            --debug (the debug build)  --dbtap PATH (repeatable; no build then)
#
# Per run, from dbtap's own health block: capture.kernel_drops (the kernel's PACKET_STATISTICS
# of the ring), capture.reader_pause_max_ms (the longest a ring block waited to be read) and
# reader_long_pauses (returns after 100 ms or more); whether dbtap's request count equals the
# server's (Questions + Com_stmt_prepare + Com_stmt_close + Com_stmt_reset deltas); dbtap's CPU
# (utime+stime) per 10k queries and peak RSS, as bench/live-overhead.sh measures them; and the
# capture thread's scheduler account from /proc/PID/task/TID/schedstat, sampled every 10 ms:
# rd_cpu_s (on a CPU), rq_wait_s (runnable, waiting for a CPU), and over the worst window as long
# as the run's longest pause, the most run-queue wait / CPU time in it. A pause spent waiting in
# the run queue is the scheduler's; one spent running is dbtap's own work. Then a summary per
# binary with the load average before and after (the machine is measured as it is).
# Output: printed, and the runs as JSON in bench/out/work-live-drops/runs.json. Exit status 1
# when any run dropped a packet or counted differently from the server. Needs root and
# tests/setup.sh's packages (sysbench, mariadb-server, pymysql).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PORT=43316
RUNS=30 SECS=8 THREADS=4 RING=0 PROFILE=release INTERVAL=0
BINS=()
need() { [ "$#" -ge 2 ] && [[ "$2" =~ ^[0-9a-z.]+$ ]] || { echo "$1 needs a value" >&2; exit 2; }; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    --runs) need "$@"; RUNS=$2; shift 2 ;;
    --seconds) need "$@"; SECS=$2; shift 2 ;;
    --threads) need "$@"; THREADS=$2; shift 2 ;;
    --ring-mb) need "$@"; RING=$2; shift 2 ;;
    --port) need "$@"; PORT=$2; shift 2 ;;
    --interval) need "$@"; INTERVAL=$2; shift 2 ;;
    --debug) PROFILE=debug; shift ;;
    --dbtap) [ "$#" -ge 2 ] && [ -x "$2" ] || { echo "--dbtap needs an executable" >&2; exit 2; }
             BINS+=("$(realpath "$2")"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
W=$ROOT/bench/out/work-live-drops-$PORT

cleanup() {
  local rc=$? f=$W/dbtap.pid pid cmd
  if [ -f "$f" ]; then
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ "$pid" =~ ^[0-9]+$ ]]; then
      cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
      case "$cmd" in
        *dbtap\ live\ --source\ packet\ -i\ lo\ --port\ $PORT*)
          kill -INT "$pid" 2>/dev/null || true
          for _ in $(seq 50); do [ -e "/proc/$pid" ] || break; sleep 0.2; done
          kill -9 "$pid" 2>/dev/null || true ;;
      esac
    fi
    rm -f "$f"
  fi
  bash "$ROOT/tests/stop-leftovers.sh" "$W"   # mariadbd (its command line names $W)
  rm -rf "$W/server" "$W/dbtap.json"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for b in sysbench mariadbd mariadb-install-db; do
  command -v "$b" >/dev/null || { echo "$b not found: run tests/setup.sh first" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "needs root: dbtap live captures on lo" >&2; exit 1; }
if [ "${#BINS[@]}" -eq 0 ]; then
  TD=${CARGO_TARGET_DIR:-$ROOT/target}
  if [ "$PROFILE" = release ]; then
    cargo build --release -p dbtap 2>&1 | tail -n 1
  else
    cargo build -p dbtap 2>&1 | tail -n 1
  fi
  BINS=("$TD/$PROFILE/dbtap")
fi
mkdir -p "$W"
echo "== $RUNS runs: sysbench oltp_read_only, $THREADS threads, $SECS s each, dbtap live -i lo" \
  "(${BINS[*]})"
DB_ARGS=()
for b in "${BINS[@]}"; do DB_ARGS+=(--dbtap "$b"); done
/usr/bin/python3 bench/live_drops.py --port "$PORT" --runs "$RUNS" --seconds "$SECS" \
  --threads "$THREADS" --ring-mb "$RING" --interval "$INTERVAL" --workdir "$W" \
  "${DB_ARGS[@]}" --out "$W/runs.json"
