#!/usr/bin/env bash
# Does `dbtap live` drop packets on a busy host? N runs in a row (default 30) of sysbench
# oltp_read_only (4 threads, 8 s, prepared statements, over TCP on 127.0.0.1) against a private
# MariaDB on 127.0.0.1:43316, each captured by a fresh
#   dbtap live --source packet -i lo --port 43316 --interval 0 --format json --limit 0
# started before sysbench (after its "capturing on" line) and stopped with SIGINT after.
#
#   bash bench/live-drops.sh                        # 30 runs, release build
#   bash bench/live-drops.sh --runs 5 --ring-mb 32  # a fixed ring (no growth)
#   options: --runs N  --seconds N  --threads N  --ring-mb N  --debug (the debug build)
#
# Per run, from dbtap's own health block: capture.kernel_drops (the kernel's PACKET_STATISTICS
# of the ring), capture.reader_pause_max_ms (the longest a ring block waited to be read),
# capture.ring_mb (the ring's final size); and whether dbtap's request count equals the server's
# (Questions + Com_stmt_prepare + Com_stmt_close + Com_stmt_reset deltas). Then a summary line
# with the load average before and after (the machine is measured as it is). rq_wait_s: how long
# the capture thread was runnable but not running (the kernel's schedstat): a starved reader.
# Output: printed, and the runs as JSON in bench/out/work-live-drops/runs.json. Exit status 1 when
# any run dropped a packet (or counted differently from the server without a drop). Needs root
# and tests/setup.sh's packages (sysbench, mariadb-server, pymysql).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
W=$ROOT/bench/out/work-live-drops
PORT=43316
RUNS=30 SECS=8 THREADS=4 RING=0 PROFILE=release
need() { [ "$#" -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || { echo "$1 needs a number" >&2; exit 2; }; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    --runs) need "$@"; RUNS=$2; shift 2 ;;
    --seconds) need "$@"; SECS=$2; shift 2 ;;
    --threads) need "$@"; THREADS=$2; shift 2 ;;
    --ring-mb) need "$@"; RING=$2; shift 2 ;;
    --debug) PROFILE=debug; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

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
TD=${CARGO_TARGET_DIR:-$ROOT/target}
if [ "$PROFILE" = release ]; then
  cargo build --release -p dbtap 2>&1 | tail -n 1
else
  cargo build -p dbtap 2>&1 | tail -n 1
fi
mkdir -p "$W"
echo "== $RUNS runs: sysbench oltp_read_only, $THREADS threads, $SECS s each, dbtap live -i lo ($PROFILE build)"
/usr/bin/python3 bench/live_drops.py --port "$PORT" --runs "$RUNS" --seconds "$SECS" \
  --threads "$THREADS" --ring-mb "$RING" --workdir "$W" --dbtap "$TD/$PROFILE/dbtap" \
  --out "$W/runs.json"
