#!/usr/bin/env bash
# bench/threads.sh [--threads N] [--copies K] [--drop-cache] [--rounds R] [--ab OTHER_DBTAP]
#                  [-- DBTAP_ARGS...] CAPTURE
#
# dbtap digest on one thread and on N (default: the cores available) on the same capture, with
# the reading floor (`tcpdump -r CAPTURE -w /dev/null`), in one run: wall and CPU seconds, the
# ratios, CPU seconds per million requests, peak RSS; and a check that both reports are the same
# byte for byte. --copies K first builds a larger capture: K copies of CAPTURE one after the
# other in time (editcap -t, mergecap -a; each copy starts 30 s after the previous ends, so its
# connections open anew), written under bench/out/ and deleted at the end. --drop-cache first
# drops the capture's pages from the page cache and reads it once, so that it is cached as a
# file read from disk is (in large folios on Linux 6.18/ext4) rather than as a file just
# written (small folios), as mergecap leaves it. --rounds R runs everything R times,
# interleaved (the order of the dbtap runs alternating by round), and prints medians with their
# ranges: single runs move by a tenth or more on a shared host. --ab OTHER_DBTAP also runs
# another binary (say, the commit before a change) at 1 and N threads in the same rounds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=$(nproc)
COPIES=1
DROP=no
ROUNDS=1
AB=
EXTRA=()
while [ $# -gt 1 ]; do
  case "$1" in
    --threads) N=$2; shift 2 ;;
    --copies) COPIES=$2; shift 2 ;;
    --drop-cache) DROP=yes; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --ab) AB=$2; shift 2 ;;
    --) shift; while [ $# -gt 1 ]; do EXTRA+=("$1"); shift; done ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ $# -eq 1 ] || { sed -n '2,17p' "$0"; exit 2; }
CAP=$1
for b in tcpdump editcap mergecap capinfos /usr/bin/time; do
  command -v "$b" >/dev/null || { echo "$b not found: run tests/setup.sh first" >&2; exit 1; }
done
echo "== building dbtap (release)"
(cd "$ROOT" && cargo build --release -p dbtap 2>&1 | tail -n 1)
DBTAP=${DBTAP_BIN_RELEASE:-$ROOT/target/release/dbtap}
W=$(mktemp -d "$ROOT/bench/out.threads.XXXXXX")
trap 'rm -rf "$W"' EXIT

if [ "$COPIES" -gt 1 ]; then
  # The span of the capture in seconds, rounded up, plus 30 s.
  span=$(capinfos -aeS "$CAP" | awk '/First packet time/{f=$NF} /Last packet time/{l=$NF} END{printf "%d", l-f+31}')
  parts=()
  for k in $(seq 0 $((COPIES - 1))); do
    editcap -t $((k * span)) "$CAP" "$W/part$k.pcap"
    parts+=("$W/part$k.pcap")
  done
  mergecap -a -F pcap -w "$W/big.pcap" "${parts[@]}"
  rm -f "${parts[@]}"
  CAP=$W/big.pcap
fi
if [ "$DROP" = yes ]; then
  sync "$CAP"
  dd if="$CAP" iflag=nocache count=0 status=none
  cat "$CAP" >/dev/null
fi
echo "capture: $(du -h "$CAP" | cut -f1), $(nproc) cores, cache dropped first: $DROP, load before: $(cut -d' ' -f1-3 /proc/loadavg)"

run() { # NAME CMD... -> "$W/NAME.time" holds: wall user sys maxrss_kb
  /usr/bin/time -f '%e %U %S %M' -o "$W/$1.time" "${@:2}" >"$W/$1.out" 2>"$W/$1.err" || {
    echo "$1 failed:"; tail -n 5 "$W/$1.err"; exit 1; }
}
digest() { # NAME BINARY THREADS
  run "$1" "$2" digest -q --format json --limit 0 --threads "$3" "${EXTRA[@]}" "$CAP"
}
same=yes
for r in $(seq 1 "$ROUNDS"); do
  run "floor.$r" tcpdump -r "$CAP" -w /dev/null
  order=(this ab)
  [ $((r % 2)) -eq 0 ] && order=(ab this)
  for who in "${order[@]}"; do
    case $who in
      this) digest "one.$r" "$DBTAP" 1; digest "many.$r" "$DBTAP" "$N" ;;
      ab) [ -z "$AB" ] || { digest "abone.$r" "$AB" 1; digest "abmany.$r" "$AB" "$N"; } ;;
    esac
  done
  cmp -s "$W/one.$r.out" "$W/many.$r.out" || same=NO
  [ -z "$AB" ] || cmp -s "$W/abone.$r.out" "$W/abmany.$r.out" || same=NO
done
grep -h "note: --threads" "$W"/many.*.err | sort -u || true
requests=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["totals"]["queries"])' "$W/one.1.out")

/usr/bin/python3 - "$W" "$N" "$requests" "$same" "$ROUNDS" "${AB:+ab}" <<'EOF'
import statistics, sys
w, n, req, same, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
ab = len(sys.argv) > 6 and sys.argv[6] == "ab"
def t(name):
    runs = []
    for r in range(1, rounds + 1):
        wall, user, sys_, rss = open(f"{w}/{name}.{r}.time").read().split()[:4]
        runs.append((float(wall), float(user) + float(sys_), int(rss) / 1024))
    return runs
def med(runs, i):
    return statistics.median(x[i] for x in runs)
def span(runs, i):
    v = sorted(x[i] for x in runs)
    return f" [{v[0]:.2f}-{v[-1]:.2f}]" if len(v) > 1 else ""
rows = [("tcpdump -r (floor)", t("floor")), ("dbtap --threads 1", t("one")),
        (f"dbtap --threads {n}", t("many"))]
if ab:
    rows += [("other --threads 1", t("abone")), (f"other --threads {n}", t("abmany"))]
floor = med(rows[0][1], 0)
print(f"{rounds} round(s); medians" + (", [ranges]" if rounds > 1 else ""))
print(f"{'run':<24}{'wall s':>22}{'CPU s':>22}{'vs floor':>10}{'CPU s/M req':>13}{'max RSS MB':>12}")
for name, runs in rows:
    per = f"{med(runs, 1) / req * 1e6:.2f}" if req and not name.startswith("tcpdump") else "-"
    wall = f"{med(runs, 0):.2f}{span(runs, 0)}"
    cpu = f"{med(runs, 1):.2f}{span(runs, 1)}"
    print(f"{name:<24}{wall:>22}{cpu:>22}{med(runs, 0) / max(floor, 1e-9):>9.1f}x{per:>13}"
          f"{max(x[2] for x in runs):>12.1f}")
speed = med(rows[1][1], 0) / max(med(rows[2][1], 0), 1e-9)
line = f"requests: {req:,}; speed-up --threads {n} vs 1: {speed:.2f}x"
if ab:
    line += f" (other: {med(rows[3][1], 0) / max(med(rows[4][1], 0), 1e-9):.2f}x)"
print(f"{line}; same report: {same}")
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$same" = yes ]
