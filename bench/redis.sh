#!/usr/bin/env bash
# dbtap vs its peers on one real Redis capture, side by side, in one run.
#
#   bash bench/redis.sh              # >= 200 MB capture (built once, reused from bench/out/)
#   bash bench/redis.sh --quick      # >= 30 MB capture, for a sanity check
#   bash bench/redis.sh --recapture  # throw the cached capture away first
#
# The capture: redis-benchmark -P 16 (set, get, lpush, lpop, incr, hset, sadd, mset; 4 clients,
# 64-byte values) against a private redis-server 7.0 on 127.0.0.1:46380, tcpdump -s 0 on lo,
# repeated until the file is big enough; INFO commandstats deltas over exactly the captured
# window (read over the UNIX socket) are saved beside it (.json). Then each tool reads the same
# file, timed by /usr/bin/time:
#   tcpdump -r FILE -w /dev/null                                   (the floor: reading only)
#   dbtap digest FILE --format json --port 46380
#   tshark -r FILE -d tcp.port==46380,resp -Y 'resp && tcp.dstport==46380'
#          -T fields -e resp.array.length -e resp.bulk_string.value  (commands rebuilt from it)
# and dbtap once more on the first third of the packets (memory must not grow with the input).
# Every count is held to INFO commandstats. Results: printed and written to
# bench/out/results-redis.md.
set -euo pipefail
source "$(dirname "$0")/lib-bench.sh"
bench_init redis-benchmark 46380 $((200 * 1000 * 1000)) $((30 * 1000 * 1000)) "$@"
# requests per command per run: 200k x 8 commands of 64-byte values make ~340 MB of capture
if [ "$MODE" = quick ]; then REQUESTS=20000; else REQUESTS=200000; fi
command -v redis-server >/dev/null || { echo "redis-server not found: run tests/setup.sh first" >&2; exit 1; }

cleanup() {
  local rc=$? f pid cmd
  while IFS= read -r -d '' f; do
    pid=$(cat "$f" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || continue
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    case "$cmd" in
      *tcpdump*"$OUT/redis-"*|*redis-server*":$PORT"*) kill "$pid" 2>/dev/null || true ;;
    esac
  done < <(find "$OUT" -maxdepth 2 \( -name 'redis-*.pid' -o -name 'redis.pid' \) -print0 2>/dev/null)
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if have_capture; then
  echo "== reusing $CAP ($(du -h "$CAP" | cut -f1))"
else
  echo "== capturing >= $((MIN_BYTES / 1000000)) MB of redis-benchmark -P 16 on 127.0.0.1:$PORT"
  rm -f "$CAP" "$META"
  "$PY" "$ROOT/tests/integration/redis_harness.py" benchmark-capture --port "$PORT" \
    --workdir "$OUT/redis-server" --out "$CAP" --json "$META" \
    --tests set,get,lpush,lpop,incr,hset,sadd,mset --requests "$REQUESTS" --pipeline 16 --clients 4 \
    --size 64 --min-bytes "$MIN_BYTES"
  rm -rf "$OUT/redis-server"
fi

rm -rf "$W"; mkdir -p "$W"
timed tcpdump tcpdump -r "$CAP" -w /dev/null
timed dbtap "$DBTAP" digest --threads 1 "$CAP" --format json --limit 100000 --port "$PORT" --quiet
timed tshark tshark -r "$CAP" -d "tcp.port==$PORT,resp" -Y "resp && tcp.dstport==$PORT" \
  -T fields -e resp.array.length -e resp.bulk_string.value
third_of_packets

"$PY" - "$CAP" "$META" "$W" "$MODE" "$PORT" <<'EOF'
import collections, json, os, platform, sys
cap, meta, w, mode, port = sys.argv[1:]
m = json.load(open(meta))
truth = m["per_command"]          # {command: {requests, errors}} from INFO commandstats
bm = m["benchmark"]

def t(name):
    wall, user, sys_, rss = open(os.path.join(w, name + ".time")).read().split()[-4:]
    return float(wall), float(user) + float(sys_), int(rss) / 1024

d = json.load(open(os.path.join(w, "dbtap.out")))
dc = collections.Counter()
for g in d["queries"]:
    if g["protocol"] == "redis":
        assert not g.get("overflow"), "overflow group: per-command sums would be wrong"
        dc[g["command"]] += g["count"]

# tshark: per client frame, the lengths of the arrays it holds and the values of their bulk
# strings (hex), in order; a command is an array of bulk strings, its name the first.
ts = collections.Counter()
ts_unparsed = 0
for line in open(os.path.join(w, "tshark.out")):
    lens, _, vals = line.rstrip("\n").partition("\t")
    lens = [int(x) for x in lens.split(",") if x]
    vals = [x for x in vals.split(",") if x]
    i = 0
    for n in lens:
        if i >= len(vals):
            ts_unparsed += 1
            continue
        ts[bytes.fromhex(vals[i]).decode(errors="replace").lower()] += 1
        i += n

dbtap_wall = t("dbtap")[0]
size_mb = os.path.getsize(cap) / 1e6
n_truth = sum(v["requests"] for v in truth.values())
lines = []
P = lines.append
P(f"# dbtap benchmark: Redis ({mode})")
P("")
P(f"Capture: `{os.path.basename(cap)}`, {size_mb:.0f} MB, {d['capture']['packets']} packets: redis-benchmark "
  f"-P {bm['pipeline']} -c {bm['clients']} -d {bm['size']} -n {bm['requests']} -t {bm['tests']}, "
  f"{bm['runs']} run(s), against {m['server_version']} on 127.0.0.1:{port}; tcpdump -s 0 -i lo, "
  f"{m['tcpdump'].get('dropped')} dropped.")
P(f"Machine: {os.cpu_count()} cores, {platform.machine()}, {platform.release()}; shared with other work. "
  f"Same file for every tool, one after the other; times from `/usr/bin/time -f '%e %U %S %M'`.")
P("")
P("| tool | wall s | CPU s | max RSS MB | MB/s | requests counted | wall vs dbtap |")
P("|---|---:|---:|---:|---:|---:|---:|")
for name, key, n in (("`tcpdump -r FILE -w /dev/null` (reading only)", "tcpdump", None),
                     ("**`dbtap digest FILE --format json`**", "dbtap", sum(dc.values())),
                     ("`tshark -d tcp.port==PORT,resp` (client arrays)", "tshark", sum(ts.values()))):
    wall, cpu, rss = t(key)
    P(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {size_mb / max(wall, 0.01):.0f} | "
      f"{'-' if n is None else f'{n:,}'} | {wall / max(dbtap_wall, 0.01):.1f}x |")
P("")
third = t("dbtap-third")
P(f"dbtap max RSS: {third[2]:.1f} MB on the first third of the packets, {t('dbtap')[2]:.1f} MB on the "
  f"whole file ({third[0]:.2f} s vs {dbtap_wall:.2f} s wall).")
P("")
P("## Counts against the server")
P("")
P("INFO commandstats deltas over exactly the captured window (calls + rejected_calls; `config|get` "
  "folded to `config`) are the truth. tshark's RESP dissector does not name commands: its count "
  "is the client-side arrays, named by their first bulk string.")
P("")
P("| command | commandstats | dbtap | tshark |")
P("|---|---:|---:|---:|")
ok = True
for c in sorted(set(truth) | set(dc), key=lambda c: -truth.get(c, {}).get("requests", 0)):
    n = truth.get(c, {}).get("requests", 0)
    P(f"| {c} | {n:,} | {dc.get(c, 0):,} | {ts.get(c, 0):,} |")
    ok &= dc.get(c, 0) == n
P(f"| **all** | **{n_truth:,}** | **{sum(dc.values()):,}** | **{sum(ts.values()):,}** |")
P("")
cap_ = d["capture"]
health = {k: cap_[k] for k in ("gaps", "responses_without_request", "unparsed_bytes", "malformed_messages",
                               "unanswered", "resyncs", "inflight_overflow") if cap_[k]}
P(f"dbtap errors: {d['totals']['errors']} (server: {sum(v['errors'] for v in truth.values())}); "
  f"capture health: {'complete' if cap_['complete'] and not health else health}; "
  f"tshark arrays without values: {ts_unparsed}.")
ok &= cap_["complete"] and d["totals"]["errors"] == sum(v["errors"] for v in truth.values())
P("")
P(f"dbtap vs server: {'all equal' if ok else 'MISMATCH (see table)'}.")
P("")
P(f"Reproduce: `bash bench/redis.sh{' --quick' if mode == 'quick' else ''}`.")
text = "\n".join(lines) + "\n"
print()
print(text)
out = os.path.join(os.path.dirname(w), "results-redis.md" if mode == "full" else "results-redis-quick.md")
open(out, "w").write(text)
print(f"written to {out}")
sys.exit(0 if ok else 1)
EOF
