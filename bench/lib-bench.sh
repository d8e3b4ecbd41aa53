# Shared by bench/postgres.sh and bench/redis.sh (sourced, not run).
#
# bench_init NAME PORT MIN_BYTES_FULL MIN_BYTES_QUICK "$@"  -> sets ROOT OUT MODE MIN_BYTES CAP META
#   W RECAPTURE DBTAP PY; parses --quick / --recapture; builds dbtap once.
# timed NAME CMD...  runs CMD under /usr/bin/time -f '%e %U %S %M': stdout to $W/NAME.out,
#   stderr to $W/NAME.err, times to $W/NAME.time; a failing command stops the bench.
# third_of_packets NAME  dbtap on the first third of the packets (is its memory flat?).

bench_init() {
  BENCH=$1 PORT=$2
  local full=$3 quick=$4
  shift 4
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  OUT=$ROOT/bench/out
  MODE=full
  RECAPTURE=0
  for a in "$@"; do
    case "$a" in
      --quick) MODE=quick ;;
      --recapture) RECAPTURE=1 ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
      *) echo "unknown argument: $a" >&2; exit 2 ;;
    esac
  done
  if [ "$MODE" = quick ]; then MIN_BYTES=$quick; else MIN_BYTES=$full; fi
  CAP=$OUT/$BENCH-$MODE.pcap
  META=$CAP.json
  W=$OUT/work-$BENCH-$MODE
  PY=/usr/bin/python3   # Debian's, with the client libraries (tests/setup.sh)
  mkdir -p "$OUT"
  for b in tcpdump tshark; do
    command -v "$b" >/dev/null || { echo "$b not found: run tests/setup.sh first" >&2; exit 1; }
  done
  [ -x /usr/bin/time ] || { echo "/usr/bin/time not found: run tests/setup.sh first" >&2; exit 1; }
  echo "== building dbtap (release)"
  (cd "$ROOT" && cargo build --release -p dbtap 2>&1 | tail -n 2)
  DBTAP=$ROOT/target/release/dbtap
  if [ "$RECAPTURE" = 1 ]; then rm -f "$CAP" "$META"; fi
}

# true when the cached capture can be reused
have_capture() {
  [ -s "$CAP" ] && [ -s "$META" ] && [ "$(stat -c %s "$CAP")" -ge "$MIN_BYTES" ]
}

timed() {
  local name=$1; shift
  echo "== $name"
  /usr/bin/time -f '%e %U %S %M' -o "$W/$name.time" "$@" >"$W/$name.out" 2>"$W/$name.err" || {
    echo "$name failed:"; tail -n 5 "$W/$name.err"; exit 1; }
}

third_of_packets() {
  local packets
  packets=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["capture"]["packets"])' "$W/dbtap.out")
  tcpdump -r "$CAP" -c $((packets / 3)) -w "$W/third.pcap" 2>/dev/null
  timed dbtap-third "$DBTAP" digest --threads 1 "$W/third.pcap" --format json --limit 100000 --port "$PORT" --quiet
  rm -f "$W/third.pcap"
}
