#!/usr/bin/env bash
# dbtap vs its peers on one real PostgreSQL capture, side by side, in one run.
#
#   bash bench/postgres.sh              # >= 200 MB capture (built once, reused from bench/out/)
#   bash bench/postgres.sh --quick      # >= 30 MB capture, for a sanity check
#   bash bench/postgres.sh --recapture  # throw the cached capture away first
#
# The capture: pgbench -M extended (Parse/Bind/Describe/Execute/Sync for every statement,
# TPC-B-like transactions, 4 clients) against a private PostgreSQL 15 on 127.0.0.1:45433,
# tcpdump -s 0 on lo, repeated until the file is big enough; pg_stat_statements (reset before
# the capture, read over the UNIX socket after it) and pgbench's own transaction counts are saved
# beside it (.json). Then each tool reads the same file, timed by /usr/bin/time:
#   tcpdump -r FILE -w /dev/null                           (the floor: just reading the pcap)
#   dbtap digest FILE --format json --port 45433
#   tshark -r FILE -d tcp.port==45433,pgsql -Y pgsql.type -T fields -e pgsql.type
# and dbtap once more on the first third of the packets (memory must not grow with the input).
# Every count is held to pg_stat_statements. Results: printed and written to
# bench/out/results-postgres.md.
set -euo pipefail
source "$(dirname "$0")/lib-bench.sh"
bench_init postgres-pgbench 45433 $((200 * 1000 * 1000)) $((30 * 1000 * 1000)) "$@"

cleanup() {
  local rc=$? f pid cmd
  # a tcpdump of ours left by a killed run (its pidfile sits beside the pcap)
  while IFS= read -r -d '' f; do
    pid=$(cat "$f" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || continue
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    case "$cmd" in *tcpdump*"$OUT/postgres-"*) kill "$pid" 2>/dev/null || true ;; esac
  done < <(find "$OUT" -maxdepth 1 -name 'postgres-*.pid' -print0 2>/dev/null)
  # a server of ours left by a killed run
  if [ -s "$OUT/pg-server/data/postmaster.pid" ]; then
    runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$OUT/pg-server/data" -m immediate \
      stop >/dev/null 2>&1 || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if have_capture; then
  echo "== reusing $CAP ($(du -h "$CAP" | cut -f1))"
else
  echo "== capturing >= $((MIN_BYTES / 1000000)) MB of pgbench -M extended on 127.0.0.1:$PORT"
  rm -f "$CAP" "$META"
  "$PY" "$ROOT/tests/integration/pg_harness.py" pgbench-capture --port "$PORT" \
    --workdir "$OUT/pg-server" --out "$CAP" --json "$META" --mode extended --clients 4 \
    --scale 4 --time 20 --min-bytes "$MIN_BYTES"
  rm -rf "$OUT/pg-server"
fi

rm -rf "$W"; mkdir -p "$W"
timed tcpdump tcpdump -r "$CAP" -w /dev/null
timed dbtap "$DBTAP" digest --threads 1 "$CAP" --format json --limit 100000 --port "$PORT" --quiet
timed tshark tshark -r "$CAP" -d "tcp.port==$PORT,pgsql" -Y pgsql.type -T fields -e pgsql.type
third_of_packets

"$PY" - "$CAP" "$META" "$W" "$MODE" "$PORT" <<'EOF'
import collections, json, os, platform, sys
cap, meta, w, mode, port = sys.argv[1:]
m = json.load(open(meta))
pgss = m["pg_stat_statements"]
pb = m["pgbench"]

def t(name):
    wall, user, sys_, rss = open(os.path.join(w, name + ".time")).read().split()[-4:]
    return float(wall), float(user) + float(sys_), int(rss) / 1024

d = json.load(open(os.path.join(w, "dbtap.out")))
dq = collections.Counter()
dcmd = collections.Counter()
for g in d["queries"]:
    if g["protocol"] == "postgres":
        dcmd[g["command"]] += g["count"]
        if g["command"] == "query":
            dq[g["fingerprint"]] += g["count"]
ts = collections.Counter()
for line in open(os.path.join(w, "tshark.out")):
    for v in line.strip().split(","):
        if v:
            ts[v] += 1
ts_requests = ts["Simple query"] + ts["Execute"]
pgss_calls = sum(e["calls"] for e in pgss.values())
dbtap_wall = t("dbtap")[0]
size_mb = os.path.getsize(cap) / 1e6

lines = []
P = lines.append
P(f"# dbtap benchmark: PostgreSQL ({mode})")
P("")
P(f"Capture: `{os.path.basename(cap)}`, {size_mb:.0f} MB, {d['capture']['packets']} packets: pgbench "
  f"-M {pb['mode']} (TPC-B-like, scale {pb['scale']}), {pb['clients']} clients, {pb['runs']} run(s) of "
  f"{pb['time_per_run']} s, {pb['transactions']} transactions, against {m['server_version']} on "
  f"127.0.0.1:{port}; tcpdump -s 0 -i lo, {m['tcpdump'].get('dropped')} dropped.")
P(f"Machine: {os.cpu_count()} cores, {platform.machine()}, {platform.release()}; shared with other work. "
  f"Same file for every tool, one after the other; times from `/usr/bin/time -f '%e %U %S %M'`.")
P("")
P("| tool | wall s | CPU s | max RSS MB | MB/s | statements counted | wall vs dbtap |")
P("|---|---:|---:|---:|---:|---:|---:|")
for name, key, n in (("`tcpdump -r FILE -w /dev/null` (reading only)", "tcpdump", None),
                     ("**`dbtap digest FILE --format json`**", "dbtap", sum(dq.values())),
                     ("`tshark -d tcp.port==PORT,pgsql -Y pgsql.type`", "tshark", ts_requests)):
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
P("pg_stat_statements (reset before the capture, read after it over the UNIX socket) and pgbench's "
  "own report are the truth. dbtap: its `query` group of each statement (simple queries and "
  "extended-protocol executions); tshark: its `Simple query` + `Execute` messages (it does not "
  "group by statement).")
P("")
P("| statement (pg_stat_statements text) | pg_stat_statements calls | dbtap |")
P("|---|---:|---:|")
ok = True
for q, e in sorted(pgss.items(), key=lambda kv: -kv[1]["calls"]):
    short = q if len(q) <= 90 else q[:87] + "..."
    P(f"| `{short}` | {e['calls']:,} | {dq.get(q, 0):,} |")
    ok &= dq.get(q, 0) == e["calls"]
extra = set(dq) - set(pgss)
for q in sorted(extra):
    P(f"| `{q[:90]}` (not in pg_stat_statements) | 0 | {dq[q]:,} |")
    ok = False
P(f"| **all statements** | **{pgss_calls:,}** | **{sum(dq.values()):,}** |")
P("")
P(f"tshark: {ts_requests:,} (`Simple query` {ts['Simple query']:,} + `Execute` {ts['Execute']:,}); "
  f"missed against pg_stat_statements: {pgss_calls - ts_requests:,}.")
n_end = dq.get("END", 0)
P(f"pgbench transactions: {pb['transactions']:,} (failed {pb['failed']}); dbtap END statements: {n_end:,}; "
  f"dbtap errors: {d['totals']['errors']}.")
ok &= n_end == pb["transactions"] and d["totals"]["errors"] == pb["failed"] == 0
c = d["capture"]
health = {k: c[k] for k in ("gaps", "responses_without_request", "unparsed_bytes", "malformed_messages",
                            "unanswered", "resyncs", "inflight_overflow") if c[k]}
P(f"dbtap capture health: {'complete' if c['complete'] and not health else health}; "
  f"other dbtap events: {dict((k, v) for k, v in dcmd.items() if k != 'query')}.")
ok &= c["complete"]
P("")
P(f"dbtap vs server: {'all equal' if ok else 'MISMATCH (see table)'}.")
P("")
P(f"Reproduce: `bash bench/postgres.sh{' --quick' if mode == 'quick' else ''}`.")
text = "\n".join(lines) + "\n"
print()
print(text)
out = os.path.join(os.path.dirname(w), "results-postgres.md" if mode == "full" else "results-postgres-quick.md")
open(out, "w").write(text)
print(f"written to {out}")
sys.exit(0 if ok else 1)
EOF
