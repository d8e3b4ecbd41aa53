#!/usr/bin/env bash
# bench/threads.sh [--threads N] [--copies K] [--drop-cache] [-- DBTAP_ARGS...] CAPTURE
#
# dbtap digest on one thread and on N (default: the cores available) on the same capture, with
# the reading floor (`tcpdump -r CAPTURE -w /dev/null`), in one run: wall and CPU seconds, the
# ratios, CPU seconds per million requests, peak RSS; and a check that both reports are the same
# byte for byte. --copies K first builds a larger capture: K copies of CAPTURE one after the
# other in time (editcap -t, mergecap -a; each copy starts 30 s after the previous ends, so its
# connections open anew), written under bench/out/ and deleted at the end. --drop-cache first
# drops the capture's pages from the page cache and reads it once, so that it is cached as a
# file read from disk is (in large folios on Linux 6.18/ext4) rather than as a file just
# written (small folios), as mergecap leaves it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=$(nproc)
COPIES=1
DROP=no
EXTRA=()
while [ $# -gt 1 ]; do
  case "$1" in
    --threads) N=$2; shift 2 ;;
    --copies) COPIES=$2; shift 2 ;;
    --drop-cache) DROP=yes; shift ;;
    --) shift; while [ $# -gt 1 ]; do EXTRA+=("$1"); shift; done ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ $# -eq 1 ] || { sed -n '2,12p' "$0"; exit 2; }
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
run floor tcpdump -r "$CAP" -w /dev/null
run one "$DBTAP" digest -q --format json --limit 0 --threads 1 "${EXTRA[@]}" "$CAP"
run many "$DBTAP" digest -q --format json --limit 0 --threads "$N" "${EXTRA[@]}" "$CAP"
if cmp -s "$W/one.out" "$W/many.out"; then same=yes; else same=NO; fi
grep -h "note: --threads" "$W/many.err" || true
requests=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["totals"]["queries"])' "$W/one.out")

/usr/bin/python3 - "$W" "$N" "$requests" "$same" <<'EOF'
import sys
w, n, req, same = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def t(name):
    wall, user, sys_, rss = open(f"{w}/{name}.time").read().split()[:4]
    return float(wall), float(user) + float(sys_), int(rss) / 1024
floor, one, many = t("floor"), t("one"), t("many")
print(f"{'run':<28}{'wall s':>8}{'CPU s':>8}{'vs floor':>10}{'CPU s/M req':>13}{'max RSS MB':>12}")
for name, r in [("tcpdump -r (floor)", floor), ("dbtap --threads 1", one), (f"dbtap --threads {n}", many)]:
    per = f"{r[1] / req * 1e6:.2f}" if req and name.startswith("dbtap") else "-"
    print(f"{name:<28}{r[0]:>8.2f}{r[1]:>8.2f}{r[0] / max(floor[0], 1e-9):>9.1f}x{per:>13}{r[2]:>12.1f}")
print(f"requests: {req:,}; speed-up --threads {n} vs 1: {one[0] / max(many[0], 1e-9):.2f}x; "
      f"same report: {same}")
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$same" = yes ]
