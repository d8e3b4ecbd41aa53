#!/usr/bin/env bash
# bench/floor.sh [--rounds R] [--bin DBTAP] CAPTURE:PORT...
#
# Single-thread digest CPU against the reading floor, per capture: `perf stat -r 3 -e
# task-clock` of `tcpdump -r CAPTURE -w /dev/null` and of `dbtap digest -q --format json --port
# PORT --threads 1 CAPTURE`, interleaved R times (default 5); prints the medians and the ratio
# (issue 16's "within 2x of the floor"). Task-clock is user + kernel CPU of the process: it
# counts what the machine spends, not the wall time another job can stretch.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
R=5
BIN=$ROOT/target/release/dbtap
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) R=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: bench/floor.sh [--rounds R] [--bin DBTAP] CAPTURE:PORT..." >&2; exit 2; }
command -v perf >/dev/null || { echo "needs perf (tests/setup.sh installs linux-perf)" >&2; exit 1; }
tc() { perf stat -x, -r 3 -e task-clock "$@" 2>&1 >/dev/null | awk -F, '/task-clock/{print $1}'; }
median() { sort -n | sed -n "$(( (R + 1) / 2 ))p"; }
echo "dbtap: $($BIN --version), load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-40s %12s %12s %8s\n' capture "floor ms" "dbtap ms" ratio
for arg in "$@"; do
  c=${arg%:*}; port=${arg##*:}
  [ -f "$c" ] || { echo "no such capture: $c" >&2; exit 1; }
  fl=(); db=()
  for _ in $(seq "$R"); do
    fl+=("$(tc tcpdump -Z root -r "$c" -w /dev/null)")
    db+=("$(tc "$BIN" digest -q --format json --threads 1 --port "$port" "$c")")
  done
  mf=$(printf '%s\n' "${fl[@]}" | median)
  md=$(printf '%s\n' "${db[@]}" | median)
  printf '%-40s %12.1f %12.1f %7.2fx\n' "$(basename "$c")" "$mf" "$md" "$(echo "$md / $mf" | bc -l)"
done
