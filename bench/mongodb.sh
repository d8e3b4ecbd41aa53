#!/usr/bin/env bash
# dbtap vs its peers on one real MongoDB capture, side by side, in one run.
#
#   bash bench/mongodb.sh              # >= 100 MB capture (built once, reused from bench/out/)
#   bash bench/mongodb.sh --quick      # >= 15 MB capture, for a sanity check
#   bash bench/mongodb.sh --recapture  # throw the cached capture away first
#
# The capture: the pymongo workload of tests/integration/mongo_harness.py (insert_many 500 docs
# of ~0.5 KB, 100 finds with filter+sort, find_one x40, a cursor in batches of 50 with getMores,
# update_many, delete_one, aggregate, count_documents, estimated_document_count, distinct,
# find_one_and_update, a duplicate key error, an unknown command), repeated on fresh collections,
# against tests/mongo-server on 127.0.0.1:47018, tcpdump -s 0 on lo, until the file is big
# enough. pymongo's CommandListener counts per command are saved beside it (.json): the truth.
# Then each tool reads the same file, timed by /usr/bin/time:
#   tcpdump -r FILE -w /dev/null                                  (the floor: reading only)
#   dbtap digest FILE --format json --port 47018
#   tshark -r FILE -d tcp.port==47018,mongo -Y 'mongo && tcp.dstport==47018' -T fields -e mongo.opcode
# and dbtap once more on the first third of the packets. Results: printed and written to
# bench/out/results-mongodb.md.
set -euo pipefail
source "$(dirname "$0")/lib-bench.sh"
bench_init mongodb 47018 $((100 * 1000 * 1000)) $((15 * 1000 * 1000)) "$@"
command -v java >/dev/null || { echo "java not found: run tests/setup.sh first" >&2; exit 1; }
[ -s "$ROOT/tests/mongo-server/target/mongo-server.jar" ] && [ -x "$ROOT/tests/out/venv-mongo/bin/python" ] ||
  { echo "mongo-server.jar or the pymongo venv missing: run tests/setup.sh first" >&2; exit 1; }

cleanup() {
  local rc=$? f pid cmd
  while IFS= read -r -d '' f; do
    pid=$(cat "$f" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || continue
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    case "$cmd" in
      *tcpdump*"$OUT/mongodb-"*|*mongo-server.jar*" $PORT"*) kill "$pid" 2>/dev/null || true ;;
    esac
  done < <(find "$OUT" -maxdepth 2 \( -name 'mongodb-*.pid' -o -name 'mongo.pid' \) -print0 2>/dev/null)
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if have_capture; then
  echo "== reusing $CAP ($(du -h "$CAP" | cut -f1))"
else
  echo "== capturing >= $((MIN_BYTES / 1000000)) MB of the pymongo workload on 127.0.0.1:$PORT"
  rm -f "$CAP" "$META"
  "$PY" "$ROOT/tests/integration/mongo_harness.py" bulk-capture --port "$PORT" \
    --workdir "$OUT/mongodb-server" --out "$CAP" --json "$META" --min-bytes "$MIN_BYTES"
  rm -rf "$OUT/mongodb-server"
fi

rm -rf "$W"; mkdir -p "$W"
timed tcpdump tcpdump -r "$CAP" -w /dev/null
timed dbtap "$DBTAP" digest --threads 1 "$CAP" --format json --limit 100000 --port "$PORT" --quiet
timed tshark tshark -r "$CAP" -d "tcp.port==$PORT,mongo" -Y "mongo && tcp.dstport==$PORT" \
  -T fields -e mongo.opcode
third_of_packets

"$PY" - "$CAP" "$META" "$W" "$MODE" "$PORT" <<'PYEOF'
import collections, json, os, platform, sys
cap, meta, w, mode, port = sys.argv[1:]
m = json.load(open(meta))
truth = m["per_command"]          # {command: {count, rows, errors}} from pymongo's listener
WL = "dbtapwl."

def t(name):
    wall, user, sys_, rss = open(os.path.join(w, name + ".time")).read().split()[-4:]
    return float(wall), float(user) + float(sys_), int(rss) / 1024

d = json.load(open(os.path.join(w, "dbtap.out")))
dc, dall = collections.Counter(), collections.Counter()
for g in d["queries"]:
    if g["protocol"] == "mongodb":
        assert not g.get("overflow"), "overflow group: per-command sums would be wrong"
        dall[g["command"]] += g["count"]
        if WL in g["fingerprint"] or g["command"] == "unknown":
            dc[g["command"]] += g["count"]
# tshark: one opcode per client message (a frame may hold several: comma-separated)
ts = collections.Counter()
for line in open(os.path.join(w, "tshark.out")):
    for op in line.strip().split(","):
        if op:
            ts[op] += 1
OPS = {"2013": "OP_MSG", "2004": "OP_QUERY", "2012": "OP_COMPRESSED"}

want = collections.Counter({("unknown" if k == "nosuchcommand" else k): v["count"] for k, v in truth.items()})
dbtap_wall = t("dbtap")[0]
size_mb = os.path.getsize(cap) / 1e6
lines = []
P = lines.append
P(f"# dbtap benchmark: MongoDB ({mode})")
P("")
P(f"Capture: `{os.path.basename(cap)}`, {size_mb:.0f} MB, {d['capture']['packets']} packets: the pymongo "
  f"workload of tests/integration/mongo_harness.py (kind=bulk, ~0.5 KB documents), {m['rounds']} round(s), "
  f"against tests/mongo-server (mongo-java-server, in memory) on 127.0.0.1:{port}; tcpdump -s 0 -i lo, "
  f"{m['tcpdump'].get('dropped')} dropped.")
P(f"Machine: {os.cpu_count()} cores, {platform.machine()}, {platform.release()}; shared with other work. "
  f"Same file for every tool, one after the other; times from `/usr/bin/time -f '%e %U %S %M'`.")
P("")
P("| tool | wall s | CPU s | max RSS MB | MB/s | requests counted | wall vs dbtap |")
P("|---|---:|---:|---:|---:|---:|---:|")
for name, key, n in (("`tcpdump -r FILE -w /dev/null` (reading only)", "tcpdump", None),
                     ("**`dbtap digest FILE --format json`**", "dbtap", sum(dall.values())),
                     ("`tshark -d tcp.port==PORT,mongo` (client messages)", "tshark", sum(ts.values()))):
    wall, cpu, rss = t(key)
    P(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {size_mb / max(wall, 0.01):.0f} | "
      f"{'-' if n is None else f'{n:,}'} | {wall / max(dbtap_wall, 0.01):.1f}x |")
P("")
third = t("dbtap-third")
P(f"dbtap max RSS: {third[2]:.1f} MB on the first third of the packets, {t('dbtap')[2]:.1f} MB on the "
  f"whole file ({third[0]:.2f} s vs {dbtap_wall:.2f} s wall).")
P("")
P("## Counts against pymongo's CommandListener")
P("")
P("The listener does not see pymongo's handshakes and heartbeats (isMaster on admin): dbtap's column "
  "is the workload database's groups; its isMaster count is shown apart. tshark's MongoDB dissector "
  "is counted by opcode of the client's messages (all of them, isMaster included).")
P("")
P("| command | listener | dbtap |")
P("|---|---:|---:|")
ok = True
for c in sorted(set(want) | set(dc), key=lambda c: -want.get(c, 0)):
    P(f"| {c} | {want.get(c, 0):,} | {dc.get(c, 0):,} |")
    ok &= dc.get(c, 0) == want.get(c, 0)
P(f"| **all** | **{sum(want.values()):,}** | **{sum(dc.values()):,}** |")
P("")
P(f"dbtap, outside the workload database: {dict(dall - dc)}. tshark by opcode: "
  f"{ {OPS.get(k, k): v for k, v in ts.items()} }.")
cap_ = d["capture"]
health = {k: cap_[k] for k in ("gaps", "responses_without_request", "unparsed_bytes", "malformed_messages",
                               "unanswered", "resyncs", "inflight_overflow", "not_tracked_segments") if cap_[k]}
n_err = sum(v["errors"] for v in truth.values())
P(f"dbtap errors: {d['totals']['errors']} (listener: {n_err}); "
  f"capture health: {'complete' if cap_['complete'] and not health else health}.")
ok &= d["totals"]["errors"] == n_err
P("")
P(f"dbtap vs listener: {'all equal' if ok else 'MISMATCH (see table)'}.")
P("")
P(f"Reproduce: `bash bench/mongodb.sh{' --quick' if mode == 'quick' else ''}`.")
text = "\n".join(lines) + "\n"
print()
print(text)
out = os.path.join(os.path.dirname(w), "results-mongodb.md" if mode == "full" else "results-mongodb-quick.md")
open(out, "w").write(text)
print(f"written to {out}")
sys.exit(0 if ok else 1)
PYEOF
