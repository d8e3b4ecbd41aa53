#!/usr/bin/env bash
# stop-leftovers.sh DIR: stop the mariadbd and tcpdump processes that the harness started under
# DIR and that are still running (after a killed run). Each is found by a *.pid file under DIR
# and signalled only if its command line is mariadbd/tcpdump and names DIR. Used by the traps of
# tests/run.sh, bench/mysql.sh and samples/make-sample.sh.
set -u
dir=$1
[ -d "$dir" ] || exit 0
while IFS= read -r -d '' f; do
  pid=$(cat "$f" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || continue
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  case "$cmd" in
    *mariadbd*"$dir/"*|*tcpdump*"$dir/"*)
      echo "stopping leftover pid $pid: ${cmd:0:100}"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [ -e "/proc/$pid" ] || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true ;;
  esac
done < <(find "$dir" -name '*.pid' -print0 2>/dev/null)
exit 0
