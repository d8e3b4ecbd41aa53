#!/usr/bin/env bash
# dbtap vs its peers on one real MariaDB capture, side by side, in one run.
#
#   bash bench/mysql.sh            # >= 300 MB capture (built once, reused from bench/out/)
#   bash bench/mysql.sh --quick    # >= 40 MB capture, for a sanity check
#   bash bench/mysql.sh --recapture  # throw the cached capture away first
#
# The capture: sysbench oltp_read_write (server-side prepared statements, 4 threads) against a
# private MariaDB on 127.0.0.1:43306, tcpdump -s 0 on lo, repeated until the file is big enough;
# the server's Com_* deltas over exactly the captured window are saved beside it (.json).
# Then each tool reads the same file, timed by /usr/bin/time (wall, user+sys CPU, max RSS):
#   tcpdump -r FILE -w /dev/null                       (the floor: just reading the pcap)
#   dbtap digest FILE --format json
#   tcpdump -r FILE -x -n -q -tttt | pt-query-digest --type tcpdump --watch-server ...
#   tshark -r FILE -d tcp.port==43306,mysql -Y mysql.command -T fields -e mysql.command
# and dbtap once more on the first third of the packets, to show its memory does not grow with
# the input. Results: printed, and written to bench/out/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=$ROOT/bench/out
PORT=43306
MODE=full
RECAPTURE=0
for a in "$@"; do
  case "$a" in
    --quick) MODE=quick ;;
    --recapture) RECAPTURE=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
if [ "$MODE" = quick ]; then MIN_BYTES=$((40 * 1000 * 1000)) RUN_SECONDS=3; else MIN_BYTES=$((300 * 1000 * 1000)) RUN_SECONDS=10; fi
CAP=$OUT/mysql-sysbench-$MODE.pcap
META=$CAP.json
PY=/usr/bin/python3   # Debian's, with pymysql (tests/setup.sh)
mkdir -p "$OUT"

cleanup() {
  local rc=$?
  bash "$ROOT/tests/stop-leftovers.sh" "$OUT"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for b in tcpdump pt-query-digest tshark editcap sysbench mariadbd; do
  command -v "$b" >/dev/null || { echo "$b not found: run tests/setup.sh first" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "/usr/bin/time not found: run tests/setup.sh first" >&2; exit 1; }

echo "== building dbtap (release)"
cargo build --release -p dbtap 2>&1 | tail -n 2
DBTAP=$ROOT/target/release/dbtap

if [ "$RECAPTURE" = 1 ]; then rm -f "$CAP" "$META"; fi
if [ -s "$CAP" ] && [ -s "$META" ] && [ "$(stat -c %s "$CAP")" -ge "$MIN_BYTES" ]; then
  echo "== reusing $CAP ($(du -h "$CAP" | cut -f1))"
else
  echo "== capturing >= $((MIN_BYTES / 1000000)) MB of sysbench oltp_read_write on 127.0.0.1:$PORT"
  rm -f "$CAP" "$META"
  "$PY" tests/integration/harness.py sysbench-capture --port "$PORT" --workdir "$OUT/server" \
    --out "$CAP" --json "$META" --threads 4 --time "$RUN_SECONDS" --table-size 10000 \
    --min-bytes "$MIN_BYTES" >/dev/null
  rm -rf "$OUT/server"
fi

W=$OUT/work-$MODE
rm -rf "$W"; mkdir -p "$W"

# timed NAME CMD...: runs CMD under /usr/bin/time, stdout to $W/NAME.out, times to $W/NAME.time
timed() {
  local name=$1; shift
  echo "== $name"
  /usr/bin/time -f '%e %U %S %M' -o "$W/$name.time" "$@" >"$W/$name.out" 2>"$W/$name.err" || {
    echo "$name failed:"; tail -n 5 "$W/$name.err"; exit 1; }
}

timed tcpdump tcpdump -r "$CAP" -w /dev/null
timed dbtap "$DBTAP" digest --threads 1 "$CAP" --format json --limit 100000 --server "127.0.0.1:$PORT" --quiet
timed pt-query-digest sh -c "tcpdump -r '$CAP' -x -n -q -tttt 2>/dev/null | pt-query-digest --type tcpdump --watch-server 127.0.0.1:$PORT --limit 100000 --output json --no-version-check"
timed tshark tshark -r "$CAP" -d "tcp.port==$PORT,mysql" -Y mysql.command -T fields -e mysql.command

# RSS flatness: the first third of the packets vs the whole file.
PACKETS=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["capture"]["packets"])' "$W/dbtap.out")
tcpdump -r "$CAP" -c $((PACKETS / 3)) -w "$W/third.pcap" 2>/dev/null
timed dbtap-third "$DBTAP" digest --threads 1 "$W/third.pcap" --format json --limit 100000 --server "127.0.0.1:$PORT" --quiet
rm -f "$W/third.pcap"

"$PY" - "$CAP" "$META" "$W" "$MODE" "$PORT" <<'EOF'
import collections, json, os, platform, subprocess, sys
cap, meta, w, mode, port = sys.argv[1:]
m = json.load(open(meta))
C = m["counters"]

def t(name):
    wall, user, sys_, rss = open(os.path.join(w, name + ".time")).read().split()[-4:]
    return float(wall), float(user) + float(sys_), int(rss) / 1024

def jload(name):
    s = open(os.path.join(w, name + ".out")).read()
    return json.loads(s[s.index("{"):])

d = jload("dbtap")
by_cmd = collections.Counter()
for g in d["queries"]:
    by_cmd[g["command"]] += g["count"]
pt = jload("pt-query-digest")
pt_total = int(pt["global"]["query_count"])
pt_by_kind = collections.Counter()  # pt's classes, named with dbtap's command names
for c in pt["classes"]:
    fp = c["fingerprint"]
    kind = ("execute" if fp.startswith("execute ") else "prepare" if fp.startswith("prepare ")
            else "close" if fp.startswith("deallocate prepare") else "quit"
            if fp == "administrator command: Quit" else "query")
    pt_by_kind[kind] += int(c["query_count"])
ts = collections.Counter()
for line in open(os.path.join(w, "tshark.out")):
    for v in line.strip().split(","):
        if v:
            ts[int(v)] += 1
TS_NAMES = {3: "query", 22: "prepare", 23: "execute", 25: "close", 1: "quit", 26: "reset"}

dbtap_wall = t("dbtap")[0]
size_mb = os.path.getsize(cap) / 1e6
rows = [
    ("tcpdump -r (read only)", t("tcpdump"), None),
    ("dbtap digest", t("dbtap"), d["totals"]["queries"]),
    ("tcpdump -x \\| pt-query-digest", t("pt-query-digest"), pt_total),
    ("tshark -Y mysql.command", t("tshark"), sum(ts.values())),
]
lines = []
P = lines.append
P(f"# dbtap benchmark ({mode})")
P("")
P(f"Capture: `{os.path.basename(cap)}`, {size_mb:.0f} MB, {d['capture']['packets']} packets: sysbench "
  f"oltp_read_write, --db-ps-mode=auto, {m['sysbench_args']['threads']} threads, "
  f"{m['sysbench_runs']} run(s) of {m['sysbench_args']['time_per_run']:g} s, "
  f"{m['sysbench_args']['table_size']} rows, against {m['server_version'].split(' for ')[0].replace('mariadbd  Ver ', 'MariaDB ')} on "
  f"127.0.0.1:{port}; tcpdump -s 0 -i lo, {m['tcpdump'].get('dropped')} dropped.")
P(f"Machine: {os.cpu_count()} cores, {platform.machine()}, {platform.release()}. Same file for every tool, "
  f"run one after the other; times from `/usr/bin/time -f '%e %U %S %M'`.")
P("")
P("| tool | wall s | CPU s | max RSS MB | MB/s | requests counted | wall vs dbtap |")
P("|---|---:|---:|---:|---:|---:|---:|")
for name, (wall, cpu, rss), n in rows:
    P(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {size_mb / max(wall, 0.01):.0f} | "
      f"{'-' if n is None else n} | {wall / max(dbtap_wall, 0.01):.1f}x |")
P("")
third = t("dbtap-third")
P(f"dbtap max RSS: {third[2]:.1f} MB on the first third of the packets, {t('dbtap')[2]:.1f} MB on the "
  f"whole file ({third[0]:.2f} s vs {dbtap_wall:.2f} s wall).")
P("")
P("## Counts against the server")
P("")
P("The server's own counters over the captured window (SHOW GLOBAL STATUS deltas) and sysbench's own "
  "report are the truth; every tool is held to them.")
P("")
P("| count | server / sysbench | dbtap | pt-query-digest | tshark |")
P("|---|---:|---:|---:|---:|")
checks = [
    ("COM_STMT_EXECUTE (Com_stmt_execute)", C["Com_stmt_execute"], by_cmd["execute"], pt_by_kind["execute"], ts[23]),
    ("COM_STMT_PREPARE (Com_stmt_prepare)", C["Com_stmt_prepare"], by_cmd["prepare"], pt_by_kind["prepare"], ts[22]),
    ("COM_STMT_CLOSE (Com_stmt_close)", C["Com_stmt_close"], by_cmd["close"], pt_by_kind["close"], ts[25]),
    ("COM_QUIT (one per sysbench thread)", m["sysbench_args"]["threads"] * m["sysbench_runs"], by_cmd["quit"], pt_by_kind["quit"], ts[1]),
    ("COM_QUERY (sysbench sends none)", 0, by_cmd["query"], pt_by_kind["query"], ts[3]),
    ("sysbench total + ignored errors", m["sysbench"]["total"] + m["sysbench"]["ignored_errors"], by_cmd["execute"], "", ""),
    ("errors (sysbench ignored errors)", m["sysbench"]["ignored_errors"], d["totals"]["errors"], "", ""),
]
ok = True
for name, truth, dv, pv, tv in checks:
    P(f"| {name} | {truth} | {dv} | {pv} | {tv} |")
    ok &= truth == dv
P("")
miss_pt = C["Com_stmt_execute"] - pt_by_kind["execute"]
miss_ts = C["Com_stmt_execute"] - ts[23]
P("What each tool counts: dbtap, every request (execute, prepare, close, quit, ...). pt-query-digest "
  "decodes the prepared-statement protocol too: its classes `execute <sql>`, `prepare <sql>`, "
  "`deallocate prepare ?` (COM_STMT_CLOSE) and `administrator command: Quit` are the same requests, so "
  "its total is comparable with dbtap's. tshark: one `mysql.command` value per request it dissects.")
P("")
P(f"Executions missed against the server's Com_stmt_execute: pt-query-digest {miss_pt}, tshark {miss_ts}, "
  f"dbtap {C['Com_stmt_execute'] - by_cmd['execute']}.")
P("")
P(f"dbtap vs server: {'all equal' if ok else 'MISMATCH (see table)'}.")
P("")
P(f"Reproduce: `bash bench/mysql.sh{' --quick' if mode == 'quick' else ''}`.")
text = "\n".join(lines) + "\n"
print()
print(text)
out = os.path.join(os.path.dirname(w), "results.md" if mode == "full" else "results-quick.md")
open(out, "w").write(text)
print(f"written to {out}")
sys.exit(0 if ok else 1)
EOF
