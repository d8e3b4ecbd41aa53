#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run) and what the README tells you to run.
#   bash tests/run.sh
# Installs what it needs (tests/setup.sh, as root on Debian 12), checks formatting and lints,
# runs the Rust tests, builds the release binary, then runs the real-server integration tests
# (tests/integration: a private MariaDB on 127.0.0.1:33306 captured with tcpdump on lo).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

section() { printf '\n======== %s ========\n' "$*"; }

# Stop any server or tcpdump that the integration tests started and left behind (pytest stops
# them itself; this is for a run that was killed). Each is found by its pidfile under tests/out
# and checked to be ours by its command line before it is signalled.
cleanup() {
  local rc=$?
  bash "$ROOT/tests/stop-leftovers.sh" "$ROOT/tests/out"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export CARGO_TERM_COLOR=never
export PYTHONDONTWRITEBYTECODE=1

section "setup (tests/setup.sh)"
bash tests/setup.sh

section "cargo fmt --all --check"
cargo fmt --all --check

section "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

section "cargo test --workspace"
DBTAP_REQUIRE_CAPTURE=1 cargo test --workspace

section "cargo build --release -p dbtap"
cargo build --release -p dbtap

section "integration tests (python3 -m pytest tests/integration)"
# The integration tests' servers listen on fixed ports inside the kernel's ephemeral range
# (32768-60999): a client socket of an earlier test may hold one when a server binds it, and
# the server fails ("Address already in use"; seen once for 38160). Reserve them so the kernel
# never hands them out to clients (root only; otherwise say so and go on).
TEST_PORTS="33306,35432,35440,36379,36390,36479,37017,38110-38169,38200-38399,40000,38400-38799"
RESERVED=/proc/sys/net/ipv4/ip_local_reserved_ports
if [ -w "$RESERVED" ]; then
  current=$(cat "$RESERVED")
  echo "${current:+$current,}$TEST_PORTS" > "$RESERVED"
else
  echo "note: cannot reserve the test ports ($RESERVED is not writable): a server may find its port taken"
fi
# Debian's python3 on purpose: pymysql, MySQLdb and pytest come from apt (setup.sh), and a
# python3 earlier on PATH (pyenv, venv) would not have them.
# DBTAP_REQUIRE_CAPTURE: the eBPF and capture tests fail instead of skipping where BPF or capture
# cannot run, and test_replay_mongo_auth.py and test_replay_mongo_plain.py fail when setup could
# not build FerretDB.
DBTAP_REQUIRE_CAPTURE=1 /usr/bin/python3 -m pytest -q tests/integration

section "all tests passed"
