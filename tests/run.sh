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
# Debian's python3 on purpose: pymysql, MySQLdb and pytest come from apt (setup.sh), and a
# python3 earlier on PATH (pyenv, venv) would not have them.
/usr/bin/python3 -m pytest -q tests/integration

section "all tests passed"
