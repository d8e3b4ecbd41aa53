#!/usr/bin/env bash
# Regenerate samples/mysql-sysbench.pcap.gz, samples/mysql-sysbench.json and samples/README.md.
#
# A private MariaDB on 127.0.0.1:33306 (the integration tests' port: do not run both at once),
# sysbench oltp_read_write with server-side prepared statements (2 threads, a fixed number of
# transactions) plus a few scripted text queries (one error, one SQL-level PREPARE/EXECUTE),
# captured with tcpdump -s 0 on lo. The server's counter deltas over the captured window go to
# the .json and the README. Needs root and tests/setup.sh's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=$ROOT/tests/out/sample
PORT=33306
EVENTS=${EVENTS:-40}
rm -rf "$WORK"; mkdir -p "$WORK"
cleanup() {
  local rc=$?
  bash "$ROOT/tests/stop-leftovers.sh" "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

/usr/bin/python3 tests/integration/harness.py sysbench-capture --port "$PORT" --workdir "$WORK/server" \
  --out "$WORK/mysql-sysbench.pcap" --json "$WORK/mysql-sysbench.json" \
  --threads 2 --events "$EVENTS" --table-size 1000 --script >/dev/null
gzip -9 -n -c "$WORK/mysql-sysbench.pcap" > samples/mysql-sysbench.pcap.gz
/usr/bin/python3 - "$WORK/mysql-sysbench.json" samples/mysql-sysbench.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m.pop("pcap_bytes", None)
m["tcpdump"].pop("synced", None)
json.dump(m, open(sys.argv[2], "w"), indent=2)
open(sys.argv[2], "a").write("\n")
PY
size=$(stat -c %s samples/mysql-sysbench.pcap.gz)
[ "$size" -le 300000 ] || { echo "sample is $size bytes, over 300 KB: lower EVENTS" >&2; exit 1; }

/usr/bin/python3 - samples/mysql-sysbench.json "$size" "$(stat -c %s "$WORK/mysql-sysbench.pcap")" > samples/README.md <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); gz, raw = int(sys.argv[2]), int(sys.argv[3])
C, sb, sc = m["counters"], m["sysbench"], m["script"]
print(f"""# Sample capture

`mysql-sysbench.pcap.gz` ({gz // 1000} KB; {raw // 1000} KB uncompressed, {m['tcpdump']['captured']} packets,
classic pcap, Ethernet link type) is real MariaDB traffic captured with `tcpdump -i lo -s 0` on
127.0.0.1:33306 ({m['server_version'].split(' for ')[0].replace('mariadbd  Ver ', '')}):

- sysbench 1.0 `oltp_read_write --db-ps-mode=auto`, {m['sysbench_args']['threads']} threads,
  {m['sysbench_args']['events']} transactions, {m['sysbench_args']['table_size']} rows: every statement
  (BEGIN and COMMIT included) is a server-side prepared statement (COM_STMT_PREPARE /
  COM_STMT_EXECUTE / COM_STMT_CLOSE). sysbench reported {sb['transactions']} transactions,
  {sb['total']} queries (read {sb['read']}, write {sb['write']}, other {sb['other']}),
  {sb['ignored_errors']} ignored errors.
- then, on one pymysql connection: CREATE TABLE, 5 INSERTs, a SELECT, a SELECT on a missing table
  (error {', '.join(f'{k} x{v}' for k, v in sc['errors_by_code'].items())}), an SQL-level
  `PREPARE` / `SET` / `EXECUTE ... USING` / `DEALLOCATE PREPARE` (text queries), DROP TABLE:
  {sc['queries_ok']} statements that succeeded and {sc['errors']} that failed.

The server's own counters over exactly the captured window (`SHOW GLOBAL STATUS` deltas, read
over the UNIX socket, which the capture does not see), also in `mysql-sysbench.json`:

| counter | delta |
|---|---:|""")
for k in ("Questions", "Connections", "Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close",
          "Com_select", "Com_insert", "Com_update", "Com_delete", "Com_begin", "Com_commit",
          "Com_create_table", "Com_drop_table", "Com_set_option", "Com_prepare_sql",
          "Com_execute_sql", "Com_dealloc_sql", "Rows_sent", "Ssl_accepts"):
    print(f"| {k} | {C.get(k, 0)} |")
print(f"""
Read the counters with the rules in `tests/integration/harness.py`: e.g. the SQL-level `EXECUTE`
counts in Com_execute_sql *and* Com_stmt_execute *and* Com_select, so the binary-protocol
executions in the capture are Com_stmt_execute - Com_execute_sql =
{C['Com_stmt_execute'] - C['Com_execute_sql']}; the text queries are the script's
{sc['queries_ok'] + sc['errors']}.

The server is on a non-standard port, so tell dbtap where it is:

    dbtap digest samples/mysql-sysbench.pcap.gz --port 33306

Regenerate (as root, after `bash tests/setup.sh`; the numbers above change with each run):

    bash samples/make-sample.sh
""")
PY
echo "samples/mysql-sysbench.pcap.gz: $size bytes"
cat samples/README.md
