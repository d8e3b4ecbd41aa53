#!/usr/bin/env bash
# History store benchmark (crates/store/examples/bench.rs, release build): writes days of
# per-minute rows (one transaction per minute) for many query groups, then times the readers.
#
#   bash bench/store.sh                         # 1,000 groups, 200 active per minute, 7 days
#   bash bench/store.sh --days 1 --groups 300   # a quick look
#   options: --groups N --active N --days N --events N (events per active group and minute)
#
# Prints a table: rows/s written, bytes per group-minute, top/group/side latency for 24 h and
# 7 d ranges; also written to bench/out/store.md. The database is a temporary file, removed after.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
cargo build --release -q -p dbtap-store --example bench
target=${CARGO_TARGET_DIR:-target}
"$target/release/examples/bench" "$@" | tee bench/out/store.md
